//! LoCoMo loading: the committed fixture in detail, then the real `locomo10.json` against the
//! counts in `shared/data/locomo/SOURCE.md`.

mod common;

use std::collections::{BTreeMap, HashSet};

use chrono::NaiveDate;
use memkit_data::{Role, load_locomo};

#[test]
fn fixture_sessions_are_sorted_and_timestamped() {
    let samples = load_locomo(&common::fixture("locomo_small.json")).unwrap();
    assert_eq!(samples.len(), 1);
    let s = &samples[0];
    assert_eq!(s.id, "conv-x");
    assert_eq!(s.speakers, ["Ann".to_string(), "Bo".to_string()]);
    let ids: Vec<&str> = s.dialogue.sessions.iter().map(|x| x.id.as_str()).collect();
    assert_eq!(ids, ["session_1", "session_2"], "orphan session_3_date_time makes no session");
    let start = NaiveDate::from_ymd_opt(2023, 5, 8).unwrap().and_hms_opt(13, 56, 0).unwrap();
    assert_eq!(s.dialogue.sessions[0].date, Some(start));
    let t = &s.dialogue.sessions[0].turns[1];
    assert_eq!((t.id.as_str(), t.speaker.as_str(), t.role), ("D1:2", "Bo", Role::User));
    assert_eq!(t.timestamp, Some(start + chrono::Duration::seconds(30)));
    let photo = &s.dialogue.sessions[1].turns[1];
    assert_eq!(photo.caption.as_deref(), Some("a photo of a cat"));
    assert_eq!(s.dialogue.sessions[1].turns[0].caption, None);
}

#[test]
fn fixture_questions_and_evidence_warnings() {
    let s = &load_locomo(&common::fixture("locomo_small.json")).unwrap()[0];
    let q: Vec<_> = s.questions.iter().collect();
    assert_eq!(q[0].id, "conv-x/q0");
    assert_eq!(q[0].question_type.as_deref(), Some("temporal"));
    assert_eq!(q[0].evidence_sessions, ["session_1"]);
    assert_eq!(q[1].answer, "2", "int answers become strings");
    assert_eq!(q[1].evidence, ["D1:1", "D2:2", "D2:1", "D1:2"]);
    assert_eq!(q[1].evidence_sessions, ["session_1", "session_2"]);
    assert_eq!((q[2].answer.as_str(), q[2].adversarial_answer.as_deref()), ("", Some("Tom")));
    assert!(q[2].abstention && !q[1].abstention);
    assert_eq!(q[2].category, Some(5));

    // "D:2:1" and "D1:02" are repaired, "D" and "D9:9" dropped; splitting "D1:1; D2:2" is silent.
    assert_eq!(s.warnings.len(), 4, "{:#?}", s.warnings);
    assert!(s.warnings[0].starts_with("[0].qa[1].evidence[1]: malformed evidence id \"D:2:1\" read as \"D2:1\""));
    assert!(s.warnings[3].starts_with("[0].qa[1].evidence[4]: evidence id \"D9:9\" names no turn"));
}

#[test]
fn fixture_observations_take_every_evidence_shape() {
    let s = &load_locomo(&common::fixture("locomo_small.json")).unwrap()[0];
    let got: Vec<(&str, &str, Vec<&str>)> = s
        .observations
        .iter()
        .map(|o| (o.session_id.as_str(), o.speaker.as_str(), o.evidence.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        got,
        [("session_1", "Ann", vec!["D1:1", "D1:2"]), ("session_2", "Ann", vec!["D2:1"]), ("session_2", "Bo", vec!["D2:2", "D2:1"]),]
    );
    assert_eq!(s.observations[0].text, "Ann adopted a dog on 7 May 2023.");
}

#[test]
fn real_locomo_matches_source_counts() {
    let samples = load_locomo(&common::shared("locomo/locomo10.json")).unwrap();
    assert_eq!(samples.len(), 10);
    let sessions: usize = samples.iter().map(|s| s.dialogue.sessions.len()).sum();
    let turns: usize = samples.iter().map(|s| s.dialogue.len()).sum();
    assert_eq!((sessions, turns), (272, 5882));
    let captions = samples.iter().flat_map(|s| s.dialogue.turns()).filter(|t| t.caption.is_some()).count();
    assert_eq!(captions, 1226);

    let mut categories = BTreeMap::new();
    for q in samples.iter().flat_map(|s| &s.questions) {
        *categories.entry(q.category.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(categories.into_iter().collect::<Vec<_>>(), [(1, 282), (2, 321), (3, 96), (4, 841), (5, 446)]);
    let questions: Vec<_> = samples.iter().flat_map(|s| &s.questions).collect();
    assert_eq!(questions.iter().filter(|q| q.abstention).count(), 446);
    assert!(questions.iter().filter(|q| q.category != Some(5)).all(|q| !q.answer.is_empty()));
    assert!(questions.iter().filter(|q| q.category == Some(5)).all(|q| q.adversarial_answer.is_some()));

    // Ids are unique and every turn has a timestamp inside its session's order.
    for s in &samples {
        let ids: HashSet<&str> = s.dialogue.turns().map(|t| t.id.as_str()).collect();
        assert_eq!(ids.len(), s.dialogue.len(), "{}", s.id);
        for q in &s.questions {
            assert!(q.evidence.iter().all(|e| ids.contains(e.as_str())), "{}", q.id);
        }
        for session in &s.dialogue.sessions {
            assert!(session.turns.windows(2).all(|w| w[0].timestamp < w[1].timestamp));
        }
    }
    let conv26 = &samples[0];
    assert_eq!(conv26.dialogue.sessions.len(), 19, "orphan date keys of conv-26 are not sessions");
    let start = NaiveDate::from_ymd_opt(2023, 5, 8).unwrap().and_hms_opt(13, 56, 0).unwrap();
    assert_eq!(conv26.dialogue.sessions[0].date, Some(start));
}

#[test]
fn real_locomo_evidence_problems_are_warnings() {
    let samples = load_locomo(&common::shared("locomo/locomo10.json")).unwrap();
    let warnings: Vec<(&str, &str)> = samples.iter().flat_map(|s| s.warnings.iter().map(move |w| (s.id.as_str(), w.as_str()))).collect();
    let has = |id: &str, needle: &str| warnings.iter().any(|(s, w)| *s == id && w.contains(needle));
    assert!(has("conv-43", "\"D:11:26\" read as \"D11:26\""), "{warnings:#?}");
    assert!(has("conv-50", "\"D30:05\" read as \"D30:5\""), "{warnings:#?}");
    assert!(has("conv-42", "\"D\" dropped"), "{warnings:#?}");
    assert!(has("conv-42", "\"D10:19\" names no turn"), "{warnings:#?}");
    assert!(has("conv-47", "\"D4:36\" names no turn"), "{warnings:#?}");
    // Several ids in one string are split without a warning.
    let q = samples.iter().flat_map(|s| &s.questions).find(|q| q.evidence.len() >= 4 && q.id.starts_with("conv-49"));
    assert!(q.is_some());
    assert_eq!(warnings.len(), 5, "{warnings:#?}");

    let observations: usize = samples.iter().map(|s| s.observations.len()).sum();
    assert_eq!(observations, 2541);
    assert!(samples.iter().flat_map(|s| &s.observations).all(|o| !o.evidence.is_empty()));
}

#[test]
fn first_sessions_keeps_questions_answerable_from_them() {
    let full = load_locomo(&common::fixture("locomo_small.json")).unwrap().remove(0);
    let cut = full.clone().first_sessions(1);
    assert_eq!(cut.dialogue.sessions.len(), 1);
    assert!(cut.observations.iter().all(|o| o.session_id == "session_1"));
    let ids: Vec<&str> = cut.questions.iter().map(|q| q.id.as_str()).collect();
    let expected: Vec<&str> = full.questions.iter().filter(|q| q.evidence_sessions == ["session_1"]).map(|q| q.id.as_str()).collect();
    assert_eq!(ids, expected);
    assert!(ids.contains(&"conv-x/q0") && !ids.contains(&"conv-x/q1"), "q1 needs session_2: {ids:?}");
    let all = full.clone().first_sessions(9);
    assert_eq!((&all.dialogue, &all.observations), (&full.dialogue, &full.observations), "more sessions than there are");
    let with_evidence: Vec<&str> = full.questions.iter().filter(|q| !q.evidence.is_empty()).map(|q| q.id.as_str()).collect();
    assert_eq!(all.questions.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(), with_evidence, "only evidence-less questions go");
}
