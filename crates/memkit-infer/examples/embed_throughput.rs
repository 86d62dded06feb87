//! Measures embedding throughput: texts per second for 256 short LoCoMo-like chat turns.
//!
//! The corpus is built from fixed templates (speaker × event × time), so every run embeds the
//! same texts; turns are 10 to 20 words, like most LoCoMo turns. Run in release:
//!
//! ```text
//! cargo run --release -p memkit-infer --example embed_throughput -- [batch size] [model dir]
//! ```
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::Instant;

use memkit_infer::{SentenceEmbedder, models};

const SPEAKERS: [&str; 4] = ["Caroline", "Melanie", "Jon", "Gina"];
const EVENTS: [&str; 8] = [
    "went to a support group and met some really kind people",
    "finished painting a sunset over the lake with the kids",
    "signed the lease for the new dance studio downtown",
    "started a clothing store after losing the delivery job",
    "ran a charity race to raise money for the animal shelter",
    "read a novel about a family that moves across the country",
    "took the dog to the beach and it loved chasing the waves",
    "applied to a counseling program to help young people",
];
const TIMES: [&str; 8] =
    ["yesterday", "last weekend", "on Monday", "two weeks ago", "this morning", "in May", "last summer", "after work on Friday"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let batch_size: usize = args.next().map_or(Ok(32), |a| a.parse())?;
    let dir = args
        .next()
        .map(PathBuf::from)
        .or_else(|| models::locate(models::ALL_MINILM_L6_V2.name))
        .ok_or("all-minilm-l6-v2 is not installed; pass its directory")?;

    let texts: Vec<String> = (0..256)
        .map(|i| {
            let speaker = SPEAKERS[i % SPEAKERS.len()];
            let event = EVENTS[(i / 4) % EVENTS.len()];
            let time = TIMES[(i / 32) % TIMES.len()];
            format!("{speaker} said she {event} {time}.")
        })
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();

    let embedder = SentenceEmbedder::load(&dir)?.with_batch_size(batch_size);
    embedder.embed(&texts[..batch_size.min(texts.len())])?; // warm-up
    let runs = 3;
    let started = Instant::now();
    for _ in 0..runs {
        embedder.embed(&texts)?;
    }
    let seconds = started.elapsed().as_secs_f64() / f64::from(runs);
    println!("{} texts, batch {batch_size}: {:.2} s per pass, {:.0} texts/s", texts.len(), seconds, texts.len() as f64 / seconds);
    Ok(())
}
