//! LongMemEval loading: the committed fixture in detail, then the real oracle and S-subset files
//! against the counts in `shared/data/longmemeval/SOURCE.md`.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use chrono::NaiveDate;
use memkit_data::{LongMemEvalItem, Role, load_longmemeval};

fn type_counts(items: &[LongMemEvalItem]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for i in items {
        *out.entry(i.question.question_type.clone().unwrap()).or_insert(0) += 1;
    }
    out
}

#[test]
fn fixture_reads_both_key_orders() {
    let items = load_longmemeval(&common::fixture("longmemeval_small.json")).unwrap();
    assert_eq!(items.len(), 2);
    let (a, b) = (&items[0], &items[1]);
    assert_eq!(a.dialogue.id, "q1");
    assert_eq!(a.question.evidence_sessions, ["answer_1"]);
    assert_eq!(a.question.evidence, ["answer_1:3"]);
    assert!(!a.question.abstention && b.question.abstention);
    assert_eq!(b.question.answer, "0");
    let date = NaiveDate::from_ymd_opt(2023, 5, 30).unwrap().and_hms_opt(10, 18, 0).unwrap();
    assert_eq!(b.question.question_date, Some(date));

    let s = &a.dialogue.sessions[1];
    let t = &s.turns[2];
    assert_eq!((t.id.as_str(), t.speaker.as_str(), t.role, t.has_answer), ("answer_1:3", "user", Role::User, true));
    assert_eq!(t.timestamp, Some(s.date.unwrap() + chrono::Duration::seconds(60)));
    assert_eq!(s.turns[3].role, Role::Assistant);
}

#[test]
fn fixture_repeated_session_ids_are_renamed() {
    let items = load_longmemeval(&common::fixture("longmemeval_small.json")).unwrap();
    let a = &items[0];
    let ids: Vec<&str> = a.dialogue.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["filler_a", "answer_1", "filler_a#2"]);
    assert_eq!(a.dialogue.sessions[2].turns[0].id, "filler_a#2:1");
    assert_eq!(a.warnings.len(), 1);
    assert!(a.warnings[0].starts_with("[0].haystack_session_ids[2]:"), "{}", a.warnings[0]);
    assert!(items[1].warnings.is_empty());
}

#[test]
fn real_oracle_matches_source_counts() {
    let items = load_longmemeval(&common::shared("longmemeval/longmemeval_oracle.json")).unwrap();
    assert_eq!(items.len(), 500);
    assert_eq!(items.iter().filter(|i| i.question.abstention).count(), 30);
    let want: BTreeMap<String, usize> = [
        ("knowledge-update", 78),
        ("multi-session", 133),
        ("single-session-assistant", 56),
        ("single-session-preference", 30),
        ("single-session-user", 70),
        ("temporal-reasoning", 133),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(type_counts(&items), want);
    assert_eq!(items.iter().map(|i| i.dialogue.len()).sum::<usize>(), 10_960);
    for item in &items {
        let q = &item.question;
        let sessions: HashSet<&str> = item.dialogue.sessions.iter().map(|s| s.id.as_str()).collect();
        assert!(q.evidence_sessions.iter().all(|s| sessions.contains(s.as_str())), "{}", q.id);
        let flagged: Vec<&str> = item.dialogue.turns().filter(|t| t.has_answer).map(|t| t.id.as_str()).collect();
        assert_eq!(q.evidence, flagged, "{}", q.id);
        assert!(item.warnings.is_empty(), "{}", q.id);
        assert!(q.question_date.is_some());
    }
}

/// The one test that reads the 100 MB S file (slow-ish in the dev profile).
#[test]
fn real_s_subset_loads_quickly_and_matches_source_counts() {
    let path = common::shared("longmemeval/longmemeval_s_cleaned_subset200.json");
    let started = Instant::now();
    let items = load_longmemeval(&path).unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed.as_secs() < 60, "loading S took {elapsed:?}");
    assert_eq!(items.len(), 200);
    assert_eq!(items.iter().filter(|i| i.question.abstention).count(), 11);
    let counts = type_counts(&items);
    assert_eq!((counts["temporal-reasoning"], counts["multi-session"], counts["knowledge-update"]), (53, 54, 31));
    assert_eq!(items.iter().map(|i| i.dialogue.len()).sum::<usize>(), 97_707);

    let ids: Vec<String> = std::fs::read_to_string(path.with_file_name("longmemeval_s_cleaned_subset200_ids.txt"))
        .unwrap()
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    assert_eq!(items.iter().map(|i| i.question.id.clone()).collect::<Vec<_>>(), ids);

    // Four haystacks repeat a filler session id; turn ids stay unique everywhere.
    assert_eq!(items.iter().filter(|i| !i.warnings.is_empty()).count(), 4);
    for item in &items {
        let ids: HashSet<&str> = item.dialogue.turns().map(|t| t.id.as_str()).collect();
        assert_eq!(ids.len(), item.dialogue.len(), "{}", item.question.id);
        let sessions: HashSet<&str> = item.dialogue.sessions.iter().map(|s| s.id.as_str()).collect();
        assert!(item.question.evidence_sessions.iter().all(|s| sessions.contains(s.as_str())));
    }
}
