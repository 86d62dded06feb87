//! The seeded synthetic corpus both benches use.
//!
//! Content is 8–20 words drawn from a 5,000-word vocabulary with a Zipf-like skew (word `i` with
//! weight ~1/(i+1)), as in natural text, so posting lists have realistic lengths; each record
//! gets a type, a day in 2023, one of 50 locations (half the records) and 2–4 keywords from the
//! same vocabulary. Queries are generated ones, each an 8-word anchor with 2 keywords, a type,
//! a month constraint and a location. splitmix64 with a fixed seed: every run sees the same data.

#![allow(dead_code)]

use memkit_schema::{Dimensions, MemoryRecord, MemoryType, ParsedQuery, Pointer};

const VOCABULARY: usize = 5_000;

/// splitmix64: a tiny seeded generator, enough for benchmark data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn unit(&mut self) -> f64 {
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

/// `records` records and `queries` queries (seed 42).
pub fn corpus(records: usize, queries: usize) -> (Vec<MemoryRecord>, Vec<ParsedQuery>) {
    let mut rng = Rng(42);
    let words = Words::new();
    let locations: Vec<String> = (0..50).map(|i| format!("Place {}", words.words[VOCABULARY - 1 - i])).collect();
    let records = (0..records)
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
    let queries = (0..queries)
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
