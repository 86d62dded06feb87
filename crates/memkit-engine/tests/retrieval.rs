//! End to end on real data: LoCoMo conv-26 read with plain serde_json, raw-turn records,
//! retrieval routes, evidence recall of the top 10 (share of a question's gold evidence turns
//! found through the hits' pointers, averaged over questions).
//!
//! The SPEC's reference is BM25 over raw LoCoMo turns: evidence recall 0.52 at a 250-token
//! budget, categories 1–4, all ten conversations. Top-10 turns of conv-26 is a different cut,
//! so the thresholds below come from measuring this code once (values in each test's comment)
//! and sit a little under the measurement, to catch a broken route, not small drift.

use std::collections::HashSet;
use std::path::PathBuf;

use chrono::{Duration, NaiveDateTime};
use memkit_engine::bm25::Bm25Index;
use memkit_engine::dense::{DenseIndex, Embedder, HashingEmbedder};
use memkit_engine::fusion::{TriPath, TriPathConfig};
use memkit_engine::query::{QueryParser, RuleQueryParser};
use memkit_engine::rule_extractor::{RuleExtractor, raw_turn_records};
use memkit_engine::{Hit, Retriever};
use memkit_schema::{Dialogue, MemoryRecord, Role, Session, Turn};
use serde_json::Value;

fn shared_data() -> PathBuf {
    std::env::var_os("MEMKIT_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"))
}

/// One LoCoMo conversation as a dialogue, and its questions (question, evidence ids, category).
fn locomo(sample_id: &str) -> (Dialogue, Vec<(String, Vec<String>, u64)>) {
    let path = shared_data().join("locomo/locomo10.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (set MEMKIT_SHARED_DATA to the shared data folder)", path.display()));
    let all: Vec<Value> = serde_json::from_str(&text).unwrap();
    let sample = all.iter().find(|s| s["sample_id"] == sample_id).unwrap();
    let conv = &sample["conversation"];
    // Sessions are the `session_N` keys (conv-26 has date keys without sessions).
    let mut numbers: Vec<u32> =
        conv.as_object().unwrap().keys().filter_map(|k| k.strip_prefix("session_").and_then(|n| n.parse().ok())).collect();
    numbers.sort_unstable();
    let sessions = numbers
        .into_iter()
        .map(|n| {
            let date = conv[format!("session_{n}_date_time")].as_str().unwrap();
            let start = NaiveDateTime::parse_from_str(date, "%I:%M %p on %d %B, %Y").unwrap();
            let turns = conv[format!("session_{n}")]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, t)| Turn {
                    id: t["dia_id"].as_str().unwrap().to_string(),
                    speaker: t["speaker"].as_str().unwrap().to_string(),
                    role: Role::User,
                    text: t["text"].as_str().unwrap().to_string(),
                    caption: t["blip_caption"].as_str().map(str::to_string),
                    timestamp: Some(start + Duration::seconds(30 * i as i64)),
                    has_answer: false,
                })
                .collect();
            Session { id: format!("session_{n}"), date: Some(start), turns }
        })
        .collect();
    let questions = sample["qa"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            // A few evidence entries hold two ids ("D8:6; D9:17").
            let evidence = q["evidence"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|e| e.as_str().unwrap().split([';', ',']).map(|s| s.trim().to_string()).collect::<Vec<_>>())
                .filter(|e| !e.is_empty())
                .collect();
            (q["question"].as_str().unwrap().to_string(), evidence, q["category"].as_u64().unwrap())
        })
        .collect();
    (Dialogue { id: sample_id.into(), sessions }, questions)
}

/// Mean share of gold evidence turns covered by the top-`k` hits, over questions of the given
/// categories that have evidence.
fn evidence_recall(
    records: &[MemoryRecord],
    questions: &[(String, Vec<String>, u64)],
    categories: &[u64],
    k: usize,
    retriever: &dyn Retriever,
) -> f64 {
    let parser = RuleQueryParser::new();
    let mut total = 0.0;
    let mut n = 0;
    for (question, evidence, category) in questions {
        if !categories.contains(category) || evidence.is_empty() {
            continue;
        }
        let q = parser.parse(question, None).unwrap();
        let hits: Vec<Hit> = retriever.search(&q, k).unwrap();
        let found: HashSet<&str> = hits.iter().flat_map(|h| records[h.doc].pointer.turn_ids.iter().map(String::as_str)).collect();
        let gold: HashSet<&str> = evidence.iter().map(String::as_str).collect();
        total += gold.iter().filter(|g| found.contains(*g)).count() as f64 / gold.len() as f64;
        n += 1;
    }
    assert!(n > 0, "no question of categories {categories:?}");
    total / n as f64
}

/// BM25 over raw turns. Measured when written: 0.636 on single-hop questions (category 4),
/// 0.607 on categories 1–4.
#[test]
fn bm25_over_raw_turns_finds_single_hop_evidence() {
    let (dialogue, questions) = locomo("conv-26");
    let records = raw_turn_records(&dialogue);
    assert_eq!(records.len(), dialogue.len());
    let index = Bm25Index::from_records(&records);
    let single_hop = evidence_recall(&records, &questions, &[4], 10, &index);
    assert!(single_hop >= 0.55, "BM25 evidence recall@10, conv-26, category 4: {single_hop:.3}");
    let all = evidence_recall(&records, &questions, &[1, 2, 3, 4], 10, &index);
    assert!(all >= 0.52, "BM25 evidence recall@10, conv-26, categories 1-4: {all:.3}");
}

/// Tri-path (BM25 + hashing dense + dimension, DimMem's dedup-concatenation of 3 × 15 capped at
/// 45) over the rule extractor's records. Measured when written: 0.679 over categories 1–4 at
/// 45 hits, against 0.601 for BM25 alone at 10 hits on the same records.
#[test]
fn tri_path_over_rule_records_widens_recall() {
    let (dialogue, questions) = locomo("conv-26");
    let records = RuleExtractor::default().extract(&dialogue);
    assert_eq!(records.len(), dialogue.len(), "LoCoMo has no assistant turns: one record per turn");
    let dense = DenseIndex::build(Box::new(HashingEmbedder::default()) as Box<dyn Embedder>, &records, 64).unwrap();
    let tri = TriPath::new(&records, TriPathConfig::default()).unwrap().with_dense(dense).unwrap();
    let fused = evidence_recall(&records, &questions, &[1, 2, 3, 4], 45, &tri);
    let bm25 = evidence_recall(&records, &questions, &[1, 2, 3, 4], 10, &Bm25Index::from_records(&records));
    assert!(fused >= 0.62, "tri-path evidence recall@45, conv-26, categories 1-4: {fused:.3}");
    assert!(fused > bm25, "fusing three routes of 15 ({fused:.3}) should beat BM25's top 10 ({bm25:.3})");
}
