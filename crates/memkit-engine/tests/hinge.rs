//! HingeMem: segmentation, hyperedges, query-adaptive retrieval, on a three-session fixture and
//! on a real LoCoMo conversation.

mod common;

use std::collections::HashSet;

use chrono::{Duration, NaiveDate, NaiveDateTime};
use memkit_engine::Retriever;
use memkit_engine::dense::HashingEmbedder;
use memkit_engine::hinge::{
    BoundaryReason, HingeConfig, HingeIndex, NodeKind, Part, RuleSegmenter, Segment, Segmenter, SegmenterConfig, build_hyperedges,
    describe, unplaced_records,
};
use memkit_engine::rule_extractor::{RuleExtractor, RuleExtractorConfig, raw_turn_records};
use memkit_engine::stopping::QueryType;
use memkit_engine::store::{IngestBatch, MemoryStore, SqliteStore};
use memkit_schema::{AnswerDim, Dialogue, MemoryRecord, MemoryType, ParsedQuery, Role, Session, Turn};

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
                timestamp: Some(start + Duration::minutes(i as i64 + jump)),
                ..Turn::new(format!("{prefix}:{}", i + 1), *who, Role::User, *text)
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
    let edges = build_hyperedges(&d, &segments, &raw_turn_records(&d), 3);
    assert_eq!(edges.len(), 6);
    let conference = &edges[1];
    assert_eq!(conference.persons, ["Bob", "Ann"]);
    assert_eq!(conference.times, ["2023-05-08"]);
    assert_eq!(conference.locations, ["Lisbon"]);
    assert!(conference.topics.contains(&"conference".to_string()), "{:?}", conference.topics);
    assert_eq!(conference.boundary_reason, "location");
    assert!(edges[0].topics.contains(&"puppy".to_string()), "{:?}", edges[0].topics);
    assert_eq!(edges[5].persons, ["Cara", "Ann", "Bob"]);
    assert_eq!(edges[0].members[0], "fixture/D1:1");
    assert_eq!(edges[0].turn_ids.len(), edges[0].members.len());
}

/// Counts words: the fixture's descriptions are checked by hand in words.
fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

fn index() -> HingeIndex {
    let d = fixture();
    HingeIndex::build(&d, &raw_turn_records(&d), &RuleSegmenter::default(), HingeConfig::default(), &words).unwrap()
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
    let records = raw_turn_records(&fixture());
    let reloaded = HingeIndex::from_hyperedges(store.list_hyperedges().unwrap(), &records, HingeConfig::default(), &words);
    assert_eq!(reloaded.stored_nodes(), store.list_nodes().unwrap());
    let q = query("What breed is Ann's puppy Rex?");
    assert_eq!(reloaded.search(&q, 5).unwrap(), index.search(&q, 5).unwrap());
    assert_eq!(reloaded.read(&q, QueryType::Precision), index.read(&q, QueryType::Precision));
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

    let index = HingeIndex::build(&d, &raw_turn_records(&d), &RuleSegmenter::default(), HingeConfig::default(), &words).unwrap();
    let mut seen = HashSet::new();
    for e in index.hyperedges() {
        for t in &e.turn_ids {
            assert!(seen.insert(t.as_str()), "{t} in two hyperedges");
        }
    }
    assert_eq!(seen.len(), d.len(), "every turn belongs to exactly one hyperedge");
}

fn record(id: &str, content: &str, turn: &str, memory_type: MemoryType) -> MemoryRecord {
    let mut r = MemoryRecord { id: id.into(), content: content.into(), memory_type, dims: Default::default(), pointer: Default::default() };
    r.pointer.turn_ids = vec![turn.into()];
    r
}

#[test]
fn descriptions_are_composed_within_the_cap() {
    let edge = memkit_schema::Hyperedge {
        persons: vec!["Ann".into(), "Bob".into()],
        times: vec!["2023-05-09".into(), "2023-05-08".into()],
        locations: vec!["Lisbon".into()],
        topics: vec!["conference".into(), "robotics".into()],
        ..Default::default()
    };
    let a = record("a", "Bob went to a conference in Lisbon.", "D1:6", MemoryType::Episodic);
    let b = record("b", "Bob liked the robotics talks at the conference.", "D1:8", MemoryType::Episodic);
    let c = record("c", "Ann likes tea.", "D1:9", MemoryType::Profile);
    let members = [&a, &b, &c];
    // Header: "Ann, Bob · 2023-05-08 to 2023-05-09 · Lisbon · conference, robotics · 2 episodic,
    // 1 profile" is 16 words. b holds both topics (2), a one (1), c none: b is quoted first; then
    // a (7 words) fits within 32 (16 + 8 + 7 = 31) and is printed before b, in member order.
    let d = describe(&edge, &members, 32, &words);
    assert_eq!(
        d.text,
        "Ann, Bob · 2023-05-08 to 2023-05-09 · Lisbon · conference, robotics · 2 episodic, 1 profile: \
         Bob went to a conference in Lisbon. Bob liked the robotics talks at the conference."
    );
    assert_eq!(d.quoted, [0, 1]);
    // At 30 words only b fits (16 + 8 = 24; a would make 31).
    assert_eq!(describe(&edge, &members, 30, &words).quoted, [1]);
    // Below the header's length the header is cut at a word and nothing is quoted.
    let short = describe(&edge, &members, 5, &words);
    assert_eq!(short.text, "Ann, Bob · 2023-05-08 to");
    assert!(short.quoted.is_empty());
}

#[test]
fn hyperedges_hold_rule_sentences_and_point_through_them() {
    let d = fixture();
    let records = RuleExtractor::new(RuleExtractorConfig { per_sentence: true, ..Default::default() }).extract(&d);
    let stray = record("stray", "Nobody said this.", "D9:9", MemoryType::Fact);
    let mut all = records.clone();
    all.push(stray);
    assert_eq!(unplaced_records(&d, &all), 1);
    let index = HingeIndex::build(&d, &all, &RuleSegmenter::default(), HingeConfig::default(), &words).unwrap();
    // Every placed record is a member of exactly one hyperedge; the stray one of none.
    let members: Vec<&String> = index.hyperedges().iter().flat_map(|e| &e.members).collect();
    assert_eq!(members.len(), records.len());
    assert!(!members.iter().any(|m| m.as_str() == "stray"));
    // A hyperedge's pointers are its members' pointers.
    for e in index.hyperedges() {
        let mut from_members: Vec<String> = Vec::new();
        for id in &e.members {
            let r = records.iter().find(|r| &r.id == id).unwrap();
            for t in &r.pointer.turn_ids {
                if !from_members.contains(t) {
                    from_members.push(t.clone());
                }
            }
        }
        assert_eq!(e.turn_ids, from_members);
        assert!(words(&e.description) <= HingeConfig::default().description_tokens, "{}", e.description);
    }
}

#[test]
fn a_reading_takes_parts_best_first_and_never_repeats_a_quoted_member() {
    let d = fixture();
    let records = raw_turn_records(&d);
    // A cap that quotes nothing, so the members carry the evidence.
    let config = HingeConfig { description_tokens: 12, ..Default::default() };
    let index = HingeIndex::build(&d, &records, &RuleSegmenter::default(), config, &words).unwrap();
    let q = query("What breed is Ann's puppy Rex?");
    let reading = index.read(&q, QueryType::Precision);
    // The puppy segment opens first: its description, then its best member. "A puppy! What breed
    // is Rex?" (D1:2) and "Rex is a beagle puppy" (D1:3) both match puppy and rex, D1:2 also the
    // rare "breed" (one turn): D1:2 comes first.
    let first_edge = index.search_typed(&q, QueryType::Precision, 1).unwrap()[0].doc;
    assert_eq!(reading.parts[0], Part::Description(first_edge));
    assert_eq!(index.part_turn_ids(reading.parts[1]), ["D1:2"]);
    assert!(reading.opened_edges >= 1 && reading.opened_parts <= reading.parts.len());
    // Every part once; every description before its members.
    let mut seen = HashSet::new();
    let mut described = HashSet::new();
    for &part in &reading.parts {
        assert!(seen.insert(part), "{part:?} twice");
        match part {
            Part::Description(e) => _ = described.insert(e),
            Part::Member(r) => {
                let e = index.hyperedges().iter().position(|e| e.members.contains(&index.records()[r].id)).unwrap();
                assert!(described.contains(&e), "member {r} before its description");
            }
        }
    }
    // With a cap that quotes members, they are read in the description and not again.
    let index = HingeIndex::build(&d, &records, &RuleSegmenter::default(), HingeConfig::default(), &words).unwrap();
    let reading = index.read(&q, QueryType::Precision);
    let mut turns: Vec<String> = reading.parts.iter().flat_map(|&p| index.part_turn_ids(p)).collect();
    let n = turns.len();
    turns.sort();
    turns.dedup();
    assert_eq!(turns.len(), n, "a turn is read twice");
}
