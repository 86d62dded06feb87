//! Micro-benchmarks of the retrieval routes: BM25 index build and query, dimension-match
//! scoring, the three fusions, and rule-based query parsing.
//!
//! Corpus: 10,000 synthetic memory records from a seeded generator (splitmix64, seed 42), so
//! every run sees the same data. Content is 8–20 words drawn from a 5,000-word vocabulary with
//! a Zipf-like skew (word `i` with weight ~1/(i+1)), as in natural text, so posting lists have
//! realistic lengths; each record gets a type, a day in 2023, one of 50 locations (half the
//! records) and 2–4 keywords from the same vocabulary. Queries are 64 generated ones, each an
//! 8-word anchor with 2 keywords, a type, a month constraint and a location.
//!
//! Run with `cargo bench -p memkit-engine` (or `just bench`).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use memkit_engine::bm25::Bm25Index;
use memkit_engine::dimension::{DimensionIndex, DimensionWeights};
use memkit_engine::fusion::{Fusion, Route, RouteHits};
use memkit_engine::query::{QueryParser, RuleQueryParser};
use memkit_engine::text::dedup_key;
use memkit_engine::{Hit, Retriever};
use memkit_schema::{Dimensions, MemoryRecord, MemoryType, ParsedQuery, Pointer};

const RECORDS: usize = 10_000;
const VOCABULARY: usize = 5_000;

/// splitmix64: a tiny seeded generator, enough for benchmark data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Vocabulary words ("w0", "w1", … spelled as letters so the stemmer leaves them alone) and a
/// cumulative Zipf table to draw from.
struct Words {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Words {
    fn new() -> Self {
        let words = (0..VOCABULARY)
            .map(|i| {
                let mut w = String::from("q");
                let mut n = i;
                loop {
                    w.push((b'a' + (n % 26) as u8) as char);
                    n /= 26;
                    if n == 0 {
                        break;
                    }
                }
                w.push('x');
                w
            })
            .collect();
        let mut total = 0.0;
        let cumulative = (0..VOCABULARY)
            .map(|i| {
                total += 1.0 / (i as f64 + 1.0);
                total
            })
            .collect::<Vec<_>>();
        let cumulative = cumulative.iter().map(|c| c / total).collect();
        Words { words, cumulative }
    }

    fn draw(&self, rng: &mut Rng) -> &str {
        let u = rng.unit();
        let i = self.cumulative.partition_point(|&c| c < u).min(VOCABULARY - 1);
        &self.words[i]
    }

    fn sentence(&self, rng: &mut Rng, len: usize) -> String {
        (0..len).map(|_| self.draw(rng)).collect::<Vec<_>>().join(" ")
    }
}

fn corpus() -> (Vec<MemoryRecord>, Vec<ParsedQuery>) {
    let mut rng = Rng(42);
    let words = Words::new();
    let locations: Vec<String> = (0..50).map(|i| format!("Place {}", words.words[VOCABULARY - 1 - i])).collect();
    let records = (0..RECORDS)
        .map(|i| {
            let len = 8 + rng.below(13);
            let day = 1 + rng.below(28);
            let month = 1 + rng.below(12);
            MemoryRecord {
                id: format!("r{i}"),
                content: words.sentence(&mut rng, len),
                memory_type: MemoryType::ALL[rng.below(3)],
                dims: Dimensions {
                    time: format!("2023-{month:02}-{day:02}"),
                    location: if rng.below(2) == 0 { locations[rng.below(50)].clone() } else { String::new() },
                    reason: String::new(),
                    purpose: String::new(),
                    keywords: (0..2 + rng.below(3)).map(|_| words.draw(&mut rng).to_string()).collect(),
                },
                pointer: Pointer::default(),
            }
        })
        .collect();
    let queries = (0..64)
        .map(|_| ParsedQuery {
            query_anchor: words.sentence(&mut rng, 8),
            keywords: (0..2).map(|_| words.draw(&mut rng).to_string()).collect(),
            target_memory_type: vec![MemoryType::ALL[rng.below(3)]],
            time: Some(format!("on 2023-{:02}", 1 + rng.below(12)).parse().expect("valid constraint")),
            location: locations[rng.below(50)].clone(),
            ..Default::default()
        })
        .collect();
    (records, queries)
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
