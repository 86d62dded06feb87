//! Dimension-aware update: filters, decisions applied to the store, embedding counts and cache.

use std::sync::atomic::{AtomicUsize, Ordering};

use memkit_engine::Result;
use memkit_engine::dense::{EmbedError, Embedder, HashingEmbedder, cosine};
use memkit_engine::store::{IngestBatch, MemoryStore, SqliteStore};
use memkit_engine::update::{RuleConsolidator, UpdateConfig, UpdateStats, update};
use memkit_schema::{Dimensions, MemoryRecord, MemoryType, Pointer};

/// Counts the texts it embeds, so the stats can be checked against real calls.
struct Counting {
    inner: HashingEmbedder,
    texts: AtomicUsize,
}

impl Counting {
    fn new() -> Self {
        Counting { inner: HashingEmbedder::default(), texts: AtomicUsize::new(0) }
    }
    fn count(&self) -> usize {
        self.texts.load(Ordering::SeqCst)
    }
}

impl Embedder for Counting {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        self.inner.embed(texts)
    }
}

struct Broken;

impl Embedder for Broken {
    fn model_id(&self) -> &str {
        "broken"
    }
    fn dim(&self) -> usize {
        2
    }
    fn embed(&self, _: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError("model file missing".into()))
    }
}

fn rec(id: &str, t: MemoryType, content: &str, time: &str, ts: &str, keywords: &[&str]) -> MemoryRecord {
    MemoryRecord {
        id: id.into(),
        content: content.into(),
        memory_type: t,
        dims: Dimensions { time: time.into(), keywords: keywords.iter().map(|k| k.to_string()).collect(), ..Default::default() },
        pointer: Pointer { turn_ids: vec![format!("T:{id}")], timestamp: ts.into(), ..Default::default() },
    }
}

const MOVED: &str = "Ann lives in a small flat in Berlin with her cat Milo.";
const RACE_LONG: &str = "Ann ran a charity race in the park on Saturday morning.";
const RACE_SHORT: &str = "Ann ran a charity race in the park.";

fn old_records() -> Vec<MemoryRecord> {
    use MemoryType::*;
    vec![
        rec("o1", Fact, "Ann lives in a small flat in Paris with her cat Milo.", "", "2023-01-01T10:00:00", &["Ann", "flat", "Paris"]),
        rec("o2", Episodic, "Ann ran a charity race in the park on Saturday.", "2023-05-20", "", &["charity race", "park"]),
        rec("o3", Episodic, "Ann baked sourdough bread for her neighbours.", "2023-04-02", "", &["sourdough bread", "neighbours"]),
        rec("o4", Profile, "Ann loves hiking in the mountains.", "", "", &["hiking", "mountains"]),
        rec("o5", Fact, "Bob works as a nurse at the city hospital.", "", "", &["Bob", "nurse", "hospital"]),
    ]
}

fn new_records() -> Vec<MemoryRecord> {
    use MemoryType::*;
    vec![
        // Same type as o1 and o5; keywords overlap only o1 → supersede (a newer value).
        rec("n1", Fact, MOVED, "", "2023-06-01T10:00:00", &["Ann", "flat", "Berlin"]),
        // Same episode as o2 (same day) → merge; the longer content wins.
        rec("n2", Episodic, RACE_LONG, "2023-05-20", "", &["charity race", "park", "morning"]),
        // Similar to the merged o2 but in September → keep both.
        rec("n3", Episodic, RACE_SHORT, "2023-09-02", "", &["charity race", "park"]),
        // No keyword overlap with o4 → never embedded, kept.
        rec("n4", Profile, "Ann enjoys knitting scarves in winter.", "", "", &["knitting", "scarves"]),
    ]
}

fn seeded_store() -> SqliteStore {
    let mut store = SqliteStore::open_in_memory().unwrap();
    store.ingest(&IngestBatch { records: old_records(), ..Default::default() }).unwrap();
    store
}

#[test]
fn the_fixture_pairs_clear_the_cosine_threshold() {
    // The decisions below assume these pairs pass cosine ≥ 0.7 under the hashing embedder.
    let e = HashingEmbedder::default();
    let v = e.embed(&[MOVED, &old_records()[0].content, RACE_LONG, &old_records()[1].content, RACE_SHORT]).unwrap();
    for (a, b) in [(0, 1), (2, 3), (4, 2)] {
        assert!(cosine(&v[a], &v[b]) >= 0.7, "pair {a},{b}: {}", cosine(&v[a], &v[b]));
    }
}

#[test]
fn decisions_are_applied_and_embeddings_counted() {
    let mut store = seeded_store();
    let embedder = Counting::new();
    let stats = update(&mut store, new_records(), &embedder, &RuleConsolidator::default(), &UpdateConfig::default()).unwrap();

    // Embedded: (n1, o1), (n2, o2), (n3, merged o2) = 6 texts. Embed-all baseline, each text once:
    // n1 with o1 o5; n2 with o2 o3; n3 with merged o2 and o3; n4 with o4 → n1 o1 o5 n2 o2 o3 n3
    // o2' n4 o4 = 10.
    assert_eq!(
        stats,
        UpdateStats {
            new_records: 4,
            keyword_candidates: 3,
            cosine_candidates: 3,
            pairs_decided: 3,
            embeddings_computed: 6,
            cache_hits: 0,
            embeddings_embed_all_baseline: 10,
            merges: 1,
            supersedes: 1,
            kept: 2,
        }
    );
    assert_eq!(embedder.count(), stats.embeddings_computed);
    assert!((stats.embedding_saving() - 0.4).abs() < 1e-9);

    let ids: Vec<String> = store.list_records().unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["o2", "o3", "o4", "o5", "n1", "n3", "n4"], "o1 superseded by n1");
    let o2 = store.get_record("o2").unwrap().unwrap();
    assert_eq!(o2.content, RACE_LONG);
    assert_eq!(o2.dims.keywords, ["charity race", "park", "morning"]);
    assert_eq!(o2.pointer.turn_ids, ["T:o2", "T:n2"]);
    assert_eq!(store.records_by_turn("", "T:n2").unwrap()[0].id, "o2", "the merged pointer is indexed");
}

#[test]
fn records_of_another_dialogue_are_never_candidates() {
    // The same new records, but from another dialogue's window: none of the stored
    // (window-less) records is a candidate. Among themselves they share a dialogue: n3 meets n2
    // (same keywords, another date: keep both), so two texts are embedded and all four are kept.
    let mut store = seeded_store();
    let embedder = Counting::new();
    let elsewhere: Vec<MemoryRecord> = new_records()
        .into_iter()
        .map(|mut r| {
            r.pointer.window_id = "conv-99/w0".into();
            r
        })
        .collect();
    let stats = update(&mut store, elsewhere, &embedder, &RuleConsolidator::default(), &UpdateConfig::default()).unwrap();
    assert_eq!((stats.keyword_candidates, stats.merges, stats.supersedes, stats.kept), (1, 0, 0, 4));
    assert_eq!(embedder.count(), 2);
    assert_eq!(store.list_records().unwrap().len(), 9);
}

#[test]
fn the_store_cache_saves_recomputation() {
    let mut store = seeded_store();
    let embedder = Counting::new();
    update(&mut store, new_records(), &embedder, &RuleConsolidator::default(), &UpdateConfig::default()).unwrap();
    let cached = store.get_embeddings(embedder.model_id(), &["n1", "o2", "n3", "o1", "n4"]).unwrap();
    let mut cached_ids: Vec<&str> = cached.keys().map(String::as_str).collect();
    cached_ids.sort();
    assert_eq!(cached_ids, ["n1", "n3", "o2"], "only live records with current text are cached");

    let before = embedder.count();
    let more = vec![rec(
        "n5",
        MemoryType::Episodic,
        "Ann ran a charity race in the park with friends.",
        "2023-09-02",
        "",
        &["charity race", "park", "friends"],
    )];
    let stats = update(&mut store, more, &embedder, &RuleConsolidator::default(), &UpdateConfig::default()).unwrap();
    assert_eq!((stats.embeddings_computed, stats.cache_hits), (1, 2), "{stats:?}");
    assert_eq!(embedder.count() - before, 1);
    assert_eq!(stats.merges, 1, "merged into n3 (same day), not o2 (May)");
    assert!(store.get_record("n5").unwrap().is_none());
    assert_eq!(store.get_record("n3").unwrap().unwrap().pointer.turn_ids, ["T:n3", "T:n5"]);

    let no_cache = UpdateConfig { cache_embeddings: false, ..Default::default() };
    let again = vec![rec("n6", MemoryType::Episodic, RACE_SHORT, "2024-01-01", "", &["charity race", "park"])];
    let stats = update(&mut store, again, &embedder, &RuleConsolidator::default(), &no_cache).unwrap();
    assert_eq!(stats.cache_hits, 0);
    assert_eq!(stats.embeddings_computed, 1 + stats.keyword_candidates);
}

#[test]
fn an_embedder_failure_leaves_the_store_unchanged() {
    let mut store = seeded_store();
    let before = store.list_records().unwrap();
    let err = update(&mut store, new_records(), &Broken, &RuleConsolidator::default(), &UpdateConfig::default()).unwrap_err();
    assert!(err.to_string().contains("model file missing"), "{err}");
    assert_eq!(store.list_records().unwrap(), before);
}

#[test]
fn tighter_thresholds_embed_less() {
    let mut store = seeded_store();
    let strict = UpdateConfig { keyword_jaccard: 0.9, ..Default::default() };
    let stats = update(&mut store, new_records(), &Counting::new(), &RuleConsolidator::default(), &strict).unwrap();
    // Only n3 and o2 share every keyword token; nothing else is embedded.
    assert_eq!((stats.keyword_candidates, stats.embeddings_computed), (1, 2));
    assert_eq!(stats.kept, 4);
    assert_eq!(store.list_records().unwrap().len(), 9);
}
