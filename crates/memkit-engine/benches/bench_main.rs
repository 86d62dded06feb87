//! Micro-benchmarks of the retrieval routes: BM25 index build and query, dimension-match
//! scoring, the three fusions, and rule-based query parsing.
//!
//! Corpus: 10,000 synthetic memory records and 64 queries from the seeded generator in
//! `common/mod.rs`. Latency percentiles at 10k and 100k records are the `latency` bench.
//!
//! Run with `cargo bench -p memkit-engine` (or `just bench`).

mod common;

use std::hint::black_box;

use common::Rng;
use criterion::{Criterion, criterion_group, criterion_main};
use memkit_engine::bm25::Bm25Index;
use memkit_engine::dimension::{DimensionIndex, DimensionWeights};
use memkit_engine::fusion::{Fusion, Route, RouteHits};
use memkit_engine::query::{QueryParser, RuleQueryParser};
use memkit_engine::text::dedup_key;
use memkit_engine::{Hit, Retriever};
use memkit_schema::{MemoryRecord, ParsedQuery};

const RECORDS: usize = 10_000;

fn corpus() -> (Vec<MemoryRecord>, Vec<ParsedQuery>) {
    common::corpus(RECORDS, 64)
}

fn bench_bm25(c: &mut Criterion) {
    let (records, queries) = corpus();
    let mut group = c.benchmark_group("bm25");
    group.sample_size(10);
    group.bench_function("build_10k", |b| b.iter(|| Bm25Index::from_records(black_box(&records))));
    group.finish();
    let index = Bm25Index::from_records(&records);
    let mut i = 0;
    c.bench_function("bm25/query_10k_top15", |b| {
        b.iter(|| {
            i = (i + 1) % queries.len();
            index.search(black_box(&queries[i]), 15).expect("bm25 search")
        })
    });
}

fn bench_dimension(c: &mut Criterion) {
    let (records, queries) = corpus();
    let index = DimensionIndex::new(&records, DimensionWeights::default()).expect("default weights");
    let mut i = 0;
    c.bench_function("dimension/score_10k_top15", |b| {
        b.iter(|| {
            i = (i + 1) % queries.len();
            index.search(black_box(&queries[i]), 15).expect("dimension search")
        })
    });
}

fn bench_fusion(c: &mut Criterion) {
    let mut rng = Rng(7);
    let keys: Vec<String> = (0..RECORDS).map(|i| dedup_key(&format!("record {}", i % 9_000))).collect();
    let route = |route: Route, rng: &mut Rng| {
        let mut hits: Vec<Hit> = (0..15).map(|r| Hit { doc: rng.below(RECORDS), score: 15.0 - r as f32 }).collect();
        hits.dedup_by_key(|h| h.doc);
        RouteHits { route, hits }
    };
    let lists = vec![route(Route::Bm25, &mut rng), route(Route::Dense, &mut rng), route(Route::Dimension, &mut rng)];
    for fusion in [
        Fusion::default(),
        Fusion::Rrf { k: 60.0, per_route_k: 15, cap: 45 },
        Fusion::Weighted { weights: Default::default(), per_route_k: 15, cap: 45 },
    ] {
        let name = match fusion {
            Fusion::DedupConcat { .. } => "fusion/dedup_concat_3x15",
            Fusion::Rrf { .. } => "fusion/rrf_3x15",
            Fusion::Weighted { .. } => "fusion/weighted_3x15",
        };
        c.bench_function(name, |b| b.iter(|| fusion.fuse(black_box(&lists), &keys)));
    }
}

fn bench_query_parsing(c: &mut Criterion) {
    let parser = RuleQueryParser::new();
    let date = chrono::NaiveDate::from_ymd_opt(2023, 5, 29).and_then(|d| d.and_hms_opt(12, 0, 0));
    c.bench_function("query/rule_parse", |b| {
        b.iter(|| parser.parse(black_box("How many times did I bake egg tarts at Ann's Bakery in the past two weeks?"), date))
    });
}

criterion_group!(benches, bench_bm25, bench_dimension, bench_fusion, bench_query_parsing);
criterion_main!(benches);
