//! Ingest throughput and query latency percentiles of the engine at 10k and 100k records.
//!
//! For each corpus size (the seeded synthetic corpus of `common/mod.rs`, 256 queries):
//!
//! - **ingest**: records written to a fresh SQLite file (`SqliteStore`, WAL) in transactions of
//!   1,000, in records/s;
//! - **index build**: BM25 + dimension indexes over the records;
//! - **query latency**, p50 / p95 / mean over the queries, each route on its own and fused:
//!   BM25 top-15, dimension match top-15, BM25 + dimension fused (DimMem's dedup-concat, 15 per
//!   route, cap 45), and the dense route over cached 384-dim vectors (a flat cosine scan;
//!   the query's own embedding is excluded: it is the embedding throughput below);
//! - **embedding throughput**: texts/s of the hashing embedder and, when the bench is built with
//!   `--features dense` and the model is installed (`memkit models fetch all-minilm-l6-v2`),
//!   of all-MiniLM-L6-v2 in candle.
//!
//! Run: `just bench-latency` (= `cargo bench -p memkit-engine --bench latency`), or with sizes:
//! `cargo bench -p memkit-engine --bench latency -- 10000 100000 1000000`.

mod common;

use std::time::{Duration, Instant};

use memkit_engine::bm25::Bm25Index;
use memkit_engine::dense::{DenseIndex, Embedder, HashingEmbedder, document_text};
use memkit_engine::dimension::{DimensionIndex, DimensionWeights};
use memkit_engine::fusion::{TriPath, TriPathConfig};
use memkit_engine::store::{IngestBatch, MemoryStore, SqliteStore};
use memkit_engine::{Hit, Retriever};
use memkit_schema::ParsedQuery;

const QUERIES: usize = 256;
const K: usize = 15;

/// p50, p95 and mean of one route's query times, in milliseconds.
struct Latency {
    p50: f64,
    p95: f64,
    mean: f64,
}

fn measure(queries: &[ParsedQuery], mut f: impl FnMut(&ParsedQuery) -> Vec<Hit>) -> Latency {
    // One untimed pass warms caches and allocators.
    for q in queries.iter().take(8) {
        std::hint::black_box(f(q));
    }
    let mut times: Vec<Duration> = queries
        .iter()
        .map(|q| {
            let t = Instant::now();
            std::hint::black_box(f(q));
            t.elapsed()
        })
        .collect();
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let at = |p: f64| ms(times[((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1]);
    Latency { p50: at(0.50), p95: at(0.95), mean: times.iter().map(|d| ms(*d)).sum::<f64>() / times.len() as f64 }
}

/// Random unit vectors standing in for cached embeddings (the scan cost depends only on shape).
fn unit_vectors(n: usize, dim: usize, rng: &mut common::Rng) -> Vec<Vec<f32>> {
    (0..n)
        .map(|_| {
            let v: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 - 0.5).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

fn embedding_throughput(embedder: &dyn Embedder, texts: &[&str], batch: usize) -> f64 {
    let t = Instant::now();
    for chunk in texts.chunks(batch) {
        std::hint::black_box(embedder.embed(chunk).expect("embed"));
    }
    texts.len() as f64 / t.elapsed().as_secs_f64()
}

#[cfg(feature = "dense")]
fn minilm() -> Option<memkit_infer::SentenceEmbedder> {
    let dir = memkit_infer::models::locate(memkit_infer::models::ALL_MINILM_L6_V2.name)?;
    memkit_infer::SentenceEmbedder::load(&dir).ok()
}

#[allow(clippy::print_stdout, reason = "a bench binary prints its table")]
fn main() {
    // `cargo bench` passes `--bench`; numbers are corpus sizes.
    let mut sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.replace('_', "").parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![10_000, 100_000];
    }
    println!("memkit-engine latency bench: {QUERIES} queries, top {K}, one thread");
    println!();
    println!("| records | ingest rec/s | index build s | route | p50 ms | p95 ms | mean ms |");
    println!("|---:|---:|---:|---|---:|---:|---:|");
    for &n in &sizes {
        let (records, queries) = common::corpus(n, QUERIES);

        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = SqliteStore::open(dir.path().join("bench.sqlite")).expect("open store");
        let t = Instant::now();
        for chunk in records.chunks(1_000) {
            store.ingest(&IngestBatch { records: chunk.to_vec(), ..Default::default() }).expect("ingest");
        }
        let ingest = n as f64 / t.elapsed().as_secs_f64();

        let t = Instant::now();
        let tri = TriPath::new(&records, TriPathConfig::default()).expect("tri-path");
        let build = t.elapsed().as_secs_f64();
        let bm25 = Bm25Index::from_records(&records);
        let dimension = DimensionIndex::new(&records, DimensionWeights::default()).expect("dimension");
        let mut rng = common::Rng(11);
        let dense = DenseIndex::from_vectors(HashingEmbedder::new(384), unit_vectors(n, 384, &mut rng)).expect("dense");
        let query_vectors = unit_vectors(queries.len(), 384, &mut rng);

        let mut vi = 0;
        let rows = [
            ("BM25", measure(&queries, |q| bm25.search(q, K).expect("bm25"))),
            ("dimension", measure(&queries, |q| dimension.search(q, K).expect("dimension"))),
            ("BM25 + dimension (fused)", measure(&queries, |q| tri.search(q, 45).expect("tri-path"))),
            (
                "dense, cached vectors",
                measure(&queries, |_| {
                    vi = (vi + 1) % query_vectors.len();
                    dense.search_vector(&query_vectors[vi], K)
                }),
            ),
        ];
        for (i, (route, l)) in rows.iter().enumerate() {
            let (ingest, build) = if i == 0 { (format!("{ingest:.0}"), format!("{build:.2}")) } else { (String::new(), String::new()) };
            println!("| {n} | {ingest} | {build} | {route} | {:.3} | {:.3} | {:.3} |", l.p50, l.p95, l.mean);
        }
    }

    let (records, _) = common::corpus(2_000, 1);
    let texts: Vec<String> = records.iter().map(document_text).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    println!();
    println!("| embedder | texts/s |");
    println!("|---|---:|");
    println!("| hashing (lexical baseline) | {:.0} |", embedding_throughput(&HashingEmbedder::default(), &texts, 64));
    #[cfg(feature = "dense")]
    match minilm() {
        Some(m) => println!("| all-MiniLM-L6-v2 (candle, batch 64) | {:.1} |", embedding_throughput(&m, &texts[..256], 64)),
        None => println!("| all-MiniLM-L6-v2 | not installed: memkit models fetch all-minilm-l6-v2 |"),
    }
    #[cfg(not(feature = "dense"))]
    println!("| all-MiniLM-L6-v2 | build with --features dense |");
}
