//! HingeMem: segmentation, hyperedges, query-adaptive retrieval, on a three-session fixture and
//! on a real LoCoMo conversation.

mod common;

use std::collections::HashSet;

use chrono::{Duration, NaiveDate, NaiveDateTime};
use memkit_engine::Retriever;
use memkit_engine::dense::HashingEmbedder;
use memkit_engine::hinge::{
    BoundaryReason, HingeConfig, HingeIndex, NodeKind, RuleSegmenter, Segment, Segmenter, SegmenterConfig, build_hyperedges,
};
use memkit_engine::stopping::QueryType;
use memkit_engine::store::{IngestBatch, MemoryStore, SqliteStore};
use memkit_schema::{AnswerDim, Dialogue, ParsedQuery, Role, Session, Turn};

fn at(y: i32, m: u32, d: u32, h: u32, min: u32) -> NaiveDateTime {
    NaiveDate::from_ymd_opt(y, m, d).unwrap().and_hms_opt(h, min, 0).unwrap()
}

/// Turns one minute apart from `start`, except where `late` (turn index) jumps 90 minutes.
fn session(id: &str, start: NaiveDateTime, late: Option<usize>, lines: &[(&str, &str)]) -> Session {
    let prefix = id.replace("session_", "D");
    let turns = lines
        .iter()
        .enumerate()
        .map(|(i, (who, text))| {
            let jump = if late.is_some_and(|l| i >= l) { 90 } else { 0 };
            Turn {
                id: format!("{prefix}:{}", i + 1),
                speaker: who.to_string(),
                role: Role::User,
                text: text.to_string(),
                caption: None,
                timestamp: Some(start + Duration::minutes(i as i64 + jump)),
                has_answer: false,
            }
        })
        .collect();
    Session { id: id.into(), date: Some(start), turns }
}

/// Session 1: a puppy, then (new place, new topic) a conference in Lisbon. Session 2: hiking,
/// then after a 90-minute gap, sourdough. Session 3: the puppy again, then Cara joins.
fn fixture() -> Dialogue {
    let s1 = session(
        "session_1",
        at(2023, 5, 8, 13, 56),
        None,
        &[
            ("Ann", "Hey Bob! I adopted a puppy last week, his name is Rex."),
            ("Bob", "A puppy! What breed is Rex?"),
            ("Ann", "Rex is a beagle puppy, very playful."),
            ("Bob", "Beagles are great. Does the puppy sleep well?"),
            ("Ann", "The puppy sleeps in a basket next to my bed."),
            ("Bob", "I just got back from a conference in Lisbon."),
            ("Ann", "Lisbon! How was the conference?"),
            ("Bob", "The conference talks on robotics were inspiring."),
            ("Ann", "Robotics talks sound fun, did you present?"),
            ("Bob", "I presented our robotics paper at the conference."),
        ],
    );
    let s2 = session(
        "session_2",
        at(2023, 6, 2, 10, 0),
        Some(4),
        &[
            ("Ann", "I went hiking in the mountains with my sister."),
            ("Bob", "Hiking in the mountains sounds lovely."),
            ("Ann", "We hiked for six hours to the summit."),
            ("Bob", "Six hours of hiking is impressive."),
            ("Ann", "Back home now, I am baking sourdough bread."),
            ("Bob", "Sourdough bread needs a good starter."),
            ("Ann", "My sourdough starter is three years old."),
            ("Bob", "Send me some sourdough bread please."),
        ],
    );
    let s3 = session(
        "session_3",
        at(2023, 7, 15, 18, 0),
        None,
        &[
            ("Ann", "Rex the puppy learned to fetch today!"),
            ("Bob", "Rex is a smart puppy."),
            ("Ann", "The puppy also went hiking with me."),
            ("Bob", "A hiking puppy, nice."),
            ("Cara", "Hi both, Cara here, I just joined the chat."),
            ("Ann", "Welcome Cara! We were talking about Rex."),
            ("Cara", "I love dogs, I volunteer at the animal shelter."),
            ("Bob", "Cara, the animal shelter work sounds rewarding."),
            ("Cara", "The animal shelter needs more volunteers."),
        ],
    );
    Dialogue { id: "fixture".into(), sessions: vec![s1, s2, s3] }
}

/// Segments cover `0..len` in order, without gaps or overlaps, and never cross a session.
fn assert_partition(dialogue: &Dialogue, segments: &[Segment]) {
    let mut next = 0;
    let mut session_start = 0;
    let bounds: Vec<(usize, usize)> = dialogue
        .sessions
        .iter()
        .map(|s| {
            let b = (session_start, session_start + s.turns.len());
            session_start = b.1;
            b
        })
        .collect();
    for seg in segments {
        assert_eq!(seg.turns.start, next, "segments must be contiguous");
        assert!(seg.turns.end > seg.turns.start, "empty segment");
        let (lo, hi) = bounds[seg.session];
        assert!(seg.turns.start >= lo && seg.turns.end <= hi, "segment crosses its session");
        next = seg.turns.end;
    }
    assert_eq!(next, dialogue.len());
}

fn ids(dialogue: &Dialogue, seg: &Segment) -> Vec<String> {
    dialogue.turns().skip(seg.turns.start).take(seg.turns.len()).map(|t| t.id.clone()).collect()
}

#[test]
fn rule_segmenter_finds_each_kind_of_boundary() {
    let d = fixture();
    let segments = RuleSegmenter::default().segment(&d).unwrap();
    assert_partition(&d, &segments);
    let summary: Vec<(String, BoundaryReason)> = segments.iter().map(|s| (ids(&d, s)[0].clone(), s.boundary_reason)).collect();
    let want = [
        ("D1:1", BoundaryReason::Start),
        ("D1:6", BoundaryReason::Location),
        ("D2:1", BoundaryReason::Session),
        ("D2:5", BoundaryReason::TimeGap),
        ("D3:1", BoundaryReason::Session),
        ("D3:5", BoundaryReason::Person),
    ];
    assert_eq!(summary, want.map(|(i, r)| (i.to_string(), r)));

    // Without location cues, the puppy → conference shift is found from the topic alone: by
    // token overlap, and by embeddings.
    let config = SegmenterConfig { location_boundaries: false, ..Default::default() };
    let by_tokens = RuleSegmenter::new(config).segment(&d).unwrap();
    let embedder = HashingEmbedder::default();
    let by_vectors = RuleSegmenter::new(config).with_embedder(&embedder).segment(&d).unwrap();
    for segs in [by_tokens, by_vectors] {
        assert_partition(&d, &segs);
        assert_eq!(segs[1].boundary_reason, BoundaryReason::Topic);
        assert_eq!(ids(&d, &segs[1])[0], "D1:6");
    }
}

#[test]
fn hyperedges_carry_typed_nodes() {
    let d = fixture();
    let segments = RuleSegmenter::default().segment(&d).unwrap();
    let edges = build_hyperedges(&d, &segments, 3);
    assert_eq!(edges.len(), 6);
    let conference = &edges[1];
    assert_eq!(conference.persons, ["Bob", "Ann"]);
    assert_eq!(conference.times, ["2023-05-08"]);
    assert_eq!(conference.locations, ["Lisbon"]);
    assert!(conference.topics.contains(&"conference".to_string()), "{:?}", conference.topics);
    assert_eq!(conference.boundary_reason, "location");
    assert!(edges[0].topics.contains(&"puppy".to_string()), "{:?}", edges[0].topics);
    assert_eq!(edges[5].persons, ["Cara", "Ann", "Bob"]);
    assert!(edges[0].description.starts_with("Ann: Hey Bob!"));
}

fn index() -> HingeIndex {
    HingeIndex::build(&fixture(), &RuleSegmenter::default(), HingeConfig::default()).unwrap()
}

fn query(anchor: &str) -> ParsedQuery {
    ParsedQuery { query_anchor: anchor.into(), ..Default::default() }
}

#[test]
fn every_turn_is_in_exactly_one_hyperedge() {
    let index = index();
    let d = fixture();
    let mut seen = HashSet::new();
    for e in index.hyperedges() {
        for t in &e.turn_ids {
            assert!(seen.insert(t.clone()), "{t} in two hyperedges");
        }
    }
    assert_eq!(seen.len(), d.len());
    // Salience: Ann and Bob appear everywhere, Cara once.
    let node = |kind, name: &str| memkit_engine::hinge::Node { kind, name: name.into() };
    assert!(index.salience(&node(NodeKind::Person, "ann")) > index.salience(&node(NodeKind::Person, "cara")));
}

#[test]
fn precision_query_finds_the_one_segment() {
    let index = index();
    let hits = index.search(&query("What breed is Ann's puppy Rex?"), 10).unwrap();
    assert!(!hits.is_empty());
    assert_eq!(index.turn_ids(hits[0].doc)[0], "D1:1");

    let mut q = query("Where did Bob go to a conference?");
    q.answer_dim = AnswerDim::Location;
    let hits = index.search(&q, 10).unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert!(index.hit_turn_ids(&hits).contains(&"D1:6".to_string()));
}

#[test]
fn recall_query_gathers_every_matching_segment() {
    let index = index();
    let q = query("How many times did Ann go hiking?");
    let recall = index.search(&q, 10).unwrap();
    let turns = index.hit_turn_ids(&recall);
    assert!(turns.contains(&"D2:1".to_string()) && turns.contains(&"D3:3".to_string()), "{turns:?}");
    let precision = index.search_typed(&q, QueryType::Precision, 10).unwrap();
    assert!(precision.len() <= recall.len());
    // k still caps the list.
    assert_eq!(index.search(&q, 1).unwrap().len(), 1);
}

#[test]
fn time_constraints_match_time_nodes() {
    let index = index();
    let mut q = query("What did Ann do?");
    q.time = Some("on 2023-06".parse().unwrap());
    let hits = index.search_typed(&q, QueryType::Recall, 10).unwrap();
    let docs: HashSet<String> = hits.iter().map(|h| index.turn_ids(h.doc)[0].clone()).collect();
    assert_eq!(docs, HashSet::from(["D2:1".to_string(), "D2:5".to_string()]));
}

#[test]
fn hyperedges_and_salience_persist_in_the_store() {
    let index = index();
    let mut store = SqliteStore::open_in_memory().unwrap();
    store.ingest(&IngestBatch { hyperedges: index.hyperedges().to_vec(), ..Default::default() }).unwrap();
    store.put_nodes(&index.stored_nodes()).unwrap();
    let reloaded = HingeIndex::from_hyperedges(store.list_hyperedges().unwrap(), HingeConfig::default());
    assert_eq!(reloaded.stored_nodes(), store.list_nodes().unwrap());
    let q = query("What breed is Ann's puppy Rex?");
    assert_eq!(reloaded.search(&q, 5).unwrap(), index.search(&q, 5).unwrap());
}

#[test]
fn a_locomo_conversation_segments_sanely() {
    let d = common::locomo().swap_remove(0).dialogue;
    assert_eq!(d.sessions.len(), 19);
    let segments = RuleSegmenter::default().segment(&d).unwrap();
    assert_partition(&d, &segments);
    // At least one segment per session, and segments of a few turns on average, not single turns.
    assert!(segments.len() >= d.sessions.len(), "{} segments", segments.len());
    assert!(segments.len() * 5 <= d.len(), "{} segments for {} turns", segments.len(), d.len());
    let reasons: HashSet<BoundaryReason> = segments.iter().map(|s| s.boundary_reason).collect();
    assert!(reasons.contains(&BoundaryReason::Topic), "{reasons:?}");

    let index = HingeIndex::build(&d, &RuleSegmenter::default(), HingeConfig::default()).unwrap();
    let mut seen = HashSet::new();
    for e in index.hyperedges() {
        for t in &e.turn_ids {
            assert!(seen.insert(t.as_str()), "{t} in two hyperedges");
        }
    }
    assert_eq!(seen.len(), d.len(), "every turn belongs to exactly one hyperedge");
}
