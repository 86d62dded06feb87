//! The JSONL dialogue format: defaults, round trip.

mod common;

use chrono::NaiveDate;
use memkit_data::{Role, load_jsonl, read_jsonl, to_jsonl_line};

#[test]
fn defaults_fill_ids_and_timestamps() {
    let dialogues = load_jsonl(&common::fixture("dialogues.jsonl")).unwrap();
    assert_eq!(dialogues.len(), 2);
    let ann = &dialogues[0];
    assert_eq!(ann.id, "ann");
    let s1 = &ann.sessions[0];
    let start = NaiveDate::from_ymd_opt(2023, 5, 8).unwrap().and_hms_opt(13, 56, 0).unwrap();
    assert_eq!((s1.id.as_str(), s1.date), ("s1", Some(start)));
    assert_eq!(s1.turns[1].id, "s1:2");
    assert_eq!(s1.turns[1].role, Role::Assistant);
    assert_eq!(s1.turns[1].timestamp, Some(start + chrono::Duration::seconds(30)));

    let s2 = &ann.sessions[1];
    assert_eq!(s2.id, "S2");
    assert_eq!(s2.turns[0].id, "x7");
    assert_eq!(s2.turns[0].caption.as_deref(), Some("a photo of a puppy"));
    let eight = NaiveDate::from_ymd_opt(2023, 5, 9).unwrap().and_hms_opt(8, 0, 0).unwrap();
    assert_eq!(s2.turns[0].timestamp, Some(eight), "a turn's own timestamp wins");
    assert_eq!(s2.turns[1].id, "S2:2");
    assert_eq!(s2.turns[1].role, Role::User);
    let midnight = NaiveDate::from_ymd_opt(2023, 5, 9).unwrap().and_hms_opt(0, 0, 30).unwrap();
    assert_eq!(s2.turns[1].timestamp, Some(midnight));

    let bare = &dialogues[1];
    assert_eq!(bare.id, "dialogue-3", "named after its line (line 2 is blank)");
    assert_eq!(bare.sessions[0].turns[0].id, "S1:1");
    assert_eq!(bare.sessions[0].turns[0].timestamp, None);
}

#[test]
fn written_lines_read_back_unchanged() {
    let dialogues = load_jsonl(&common::fixture("dialogues.jsonl")).unwrap();
    let text: String = dialogues.iter().map(|d| to_jsonl_line(d) + "\n").collect();
    let again = read_jsonl(text.as_bytes(), "roundtrip.jsonl".as_ref()).unwrap();
    assert_eq!(again, dialogues);
}
