//! Windowing (SPEC §2): properties over random dialogues, rendering, and the real datasets.

mod common;

use chrono::NaiveDate;
use memkit_data::{Dialogue, Role, Session, Turn, WindowConfig, WindowMessage, load_locomo, load_longmemeval, windows};
use proptest::prelude::*;

fn turn(id: String, role: Role, text: String) -> Turn {
    Turn::new(id, if role == Role::User { "user" } else { "assistant" }, role, text)
}

/// Sessions of random length with random roles; turn ids `s<k>:<n>`.
fn dialogue_strategy() -> impl Strategy<Value = Dialogue> {
    prop::collection::vec(prop::collection::vec(any::<bool>(), 0..14), 0..5).prop_map(|sessions| Dialogue {
        id: "d".into(),
        sessions: sessions
            .into_iter()
            .enumerate()
            .map(|(k, roles)| Session {
                id: format!("s{k}"),
                date: None,
                turns: roles
                    .into_iter()
                    .enumerate()
                    .map(|(n, user)| {
                        let role = if user { Role::User } else { Role::Assistant };
                        turn(format!("s{k}:{n}"), role, format!("text {k}/{n}"))
                    })
                    .collect(),
            })
            .collect(),
    })
}

/// The message list, computed independently of the crate: turn ids in order.
fn expected_messages(d: &Dialogue, user_only: bool) -> Vec<String> {
    d.turns().filter(|t| !user_only || t.role == Role::User).map(|t| t.id.clone()).collect()
}

proptest! {
    #[test]
    fn every_message_is_in_exactly_one_suffix_in_order(
        d in dialogue_strategy(), size in 1usize..12, overlap in 0usize..14, user_only in any::<bool>()
    ) {
        let config = WindowConfig { size, overlap, user_only, max_message_chars: 8000 };
        let ws = windows(&d, &config);
        let all = expected_messages(&d, user_only);
        let suffixes: Vec<String> = ws.iter().flat_map(|w| w.suffix()).map(|m| m.turn.id.clone()).collect();
        prop_assert_eq!(&suffixes, &all);
        prop_assert_eq!(ws.len(), config.window_count(all.len()));
        // The formula, written out: 0, 1 up to `size`, then 1 + ceil((n - size) / step).
        let step = size.saturating_sub(overlap).max(1);
        let want = if all.is_empty() { 0 } else if all.len() <= size { 1 } else { 1 + (all.len() - size).div_ceil(step) };
        prop_assert_eq!(ws.len(), want);
    }

    #[test]
    fn context_messages_are_the_ones_right_before_the_suffix(
        d in dialogue_strategy(), size in 1usize..12, overlap in 0usize..14, user_only in any::<bool>()
    ) {
        let config = WindowConfig { size, overlap, user_only, max_message_chars: 8000 };
        let ws = windows(&d, &config);
        let all = expected_messages(&d, user_only);
        let mut suffix_start = 0;
        for (k, w) in ws.iter().enumerate() {
            prop_assert_eq!(w.index, k);
            prop_assert_eq!(&w.id, &format!("d/w{k}"));
            prop_assert_eq!(w.context, if k == 0 { 0 } else { overlap.min(size - 1) });
            let context: Vec<&String> = w.context_messages().iter().map(|m| &m.turn.id).collect();
            let before: Vec<&String> = all[suffix_start - w.context..suffix_start].iter().collect();
            prop_assert_eq!(context, before);
            prop_assert!(!w.suffix().is_empty());
            if k + 1 < ws.len() {
                prop_assert_eq!(w.messages.len(), size);
            }
            let numbers: Vec<u32> = w.messages.iter().map(|m| m.number).collect();
            prop_assert_eq!(numbers, (1..=w.messages.len() as u32).collect::<Vec<_>>());
            prop_assert!(w.messages.iter().all(|m| w.in_suffix(m.number) == (m.number as usize > w.context)));
            suffix_start += w.suffix().len();
        }
    }

    #[test]
    fn user_messages_keep_the_replies_that_followed(d in dialogue_strategy(), size in 1usize..12) {
        let config = WindowConfig { size, overlap: 0, user_only: true, max_message_chars: 8000 };
        for m in windows(&d, &config).iter().flat_map(|w| w.messages.iter()) {
            prop_assert_eq!(m.turn.role, Role::User);
            let session = d.sessions.iter().find(|s| s.turns.iter().any(|t| t.id == m.turn.id)).unwrap();
            let i = session.turns.iter().position(|t| t.id == m.turn.id).unwrap();
            let replies: Vec<&str> = session.turns[i + 1..]
                .iter()
                .take_while(|t| t.role == Role::Assistant)
                .map(|t| t.text.as_str())
                .collect();
            let want = if replies.is_empty() { None } else { Some(replies.join("\n\n")) };
            prop_assert_eq!(&m.assistant_reply, &want);
        }
    }
}

#[test]
fn render_writes_dates_photos_and_cuts() {
    let start = NaiveDate::from_ymd_opt(2023, 5, 8).unwrap().and_hms_opt(13, 56, 0).unwrap();
    let mut photo = turn("D1:1".into(), Role::User, "Look!".into());
    photo.speaker = "Caroline".into();
    photo.caption = Some("a photo of a\nsunset".into());
    photo.timestamp = Some(start);
    let long = turn("D1:2".into(), Role::User, "x".repeat(50) + &"y".repeat(50));
    let d = Dialogue { id: "c".into(), sessions: vec![Session { id: "s".into(), date: None, turns: vec![photo, long] }] };
    let config = WindowConfig { size: 25, overlap: 5, user_only: false, max_message_chars: 40 };
    let w = &windows(&d, &config)[0];
    assert_eq!(
        w.render(),
        format!(
            "[2023-05-08T13:56:00, Mon] 1.Caroline: Look! [shares photo: a photo of a sunset]\n2.user: {} […] {} […] {}",
            "x".repeat(10),
            "x".repeat(5) + &"y".repeat(5),
            "y".repeat(10)
        )
    );
}

/// A window message is its dialogue turn plus a number: the turn's fields sit beside `number` in
/// JSON, the evidence flag stays behind, and messages written before (`turn_id`) still read.
#[test]
fn window_messages_are_turns_in_json_and_read_the_older_files() {
    let mut evidence = turn("s0:0".into(), Role::User, "I moved to Lisbon.".into());
    evidence.has_answer = true;
    let d = Dialogue { id: "d".into(), sessions: vec![Session { id: "s0".into(), date: None, turns: vec![evidence.clone()] }] };
    let config = WindowConfig { size: 5, overlap: 1, user_only: true, max_message_chars: 8000 };
    let message = windows(&d, &config)[0].messages[0].clone();
    assert_eq!(message.turn, Turn { has_answer: false, ..evidence });

    let json = serde_json::to_value(&message).unwrap();
    assert_eq!(json, serde_json::json!({"number": 1, "id": "s0:0", "speaker": "user", "role": "user", "text": "I moved to Lisbon."}));
    assert_eq!(serde_json::from_value::<WindowMessage>(json).unwrap(), message);

    // As data/distilled/*/messages/*.jsonl hold them (written before this change).
    let older = r#"{"number":1,"turn_id":"s0:0","speaker":"user","role":"user","text":"I moved to Lisbon.","assistant_reply":"Nice!"}"#;
    let read: WindowMessage = serde_json::from_str(older).unwrap();
    assert_eq!(read.turn.id, "s0:0");
    assert_eq!(read, WindowMessage { assistant_reply: Some("Nice!".into()), ..message });
}

#[test]
fn real_locomo_windows() {
    let samples = load_locomo(&common::shared("locomo/locomo10.json")).unwrap();
    let config = WindowConfig::locomo();
    let conv26 = &samples[0];
    assert_eq!(conv26.dialogue.len(), 419);
    let ws = windows(&conv26.dialogue, &config);
    assert_eq!(ws.len(), 1 + (419 - 25usize).div_ceil(20));
    let line7 = ws[0].render().lines().nth(6).unwrap().to_string();
    assert!(line7.starts_with("[2023-05-08T13:59:00, Mon] 7.Caroline: "), "{line7}");
    let total: usize = samples.iter().map(|s| windows(&s.dialogue, &config).len()).sum();
    let want: usize = samples.iter().map(|s| config.window_count(s.dialogue.len())).sum();
    assert_eq!(total, want);
    // Photo turns carry their caption into the rendered text.
    assert!(ws.iter().any(|w| w.render().contains(" [shares photo: ")));
}

#[test]
fn real_longmemeval_oracle_user_only_windows() {
    let items = load_longmemeval(&common::shared("longmemeval/longmemeval_oracle.json")).unwrap();
    let config = WindowConfig::longmemeval();
    let mut windows_total = 0;
    for item in &items {
        let ws = windows(&item.dialogue, &config);
        let users = item.dialogue.turns().filter(|t| t.role == Role::User).count();
        assert_eq!(ws.len(), config.window_count(users), "{}", item.question.id);
        windows_total += ws.len();
        for w in &ws {
            assert!(w.messages.iter().all(|m| m.turn.role == Role::User));
            assert!(w.messages.len() <= 15);
        }
    }
    assert!(windows_total >= items.len());
}
