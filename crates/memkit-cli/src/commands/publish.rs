//! `memkit publish`: a trained checkpoint as a folder that Hugging Face tools, llama.cpp and
//! Ollama load, with a model card.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use memkit_infer::convert::{self, ConvertOptions, OutType};

/// Files of the HF layout a bundle must have.
const REQUIRED: [&str; 4] = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"];
/// Files copied when present.
const OPTIONAL: [&str; 8] = [
    "generation_config.json",
    "recipe.toml",
    "metrics.jsonl",
    "train.log",
    "learning_curve.svg",
    "score.json",
    memkit_prompt::TRAINED_PROMPT_FILE,
    memkit_prompt::TRAINED_WINDOW_FILE,
];

/// A file of the checkpoint: in the folder itself, or, for the `best/` export of a scored run,
/// in its run folder (the recipe, the metrics, the log and the learning curve live there).
fn checkpoint_file(src: &Path, file: &str) -> Option<PathBuf> {
    let here = src.join(file);
    if here.is_file() {
        return Some(here);
    }
    let run = src.parent().filter(|_| src.file_name().is_some_and(|n| n == "best"))?;
    Some(run.join(file)).filter(|p| p.is_file())
}

/// Bundle a trained checkpoint for publishing: HF layout + GGUF + Ollama Modelfile + model card.
///
/// Copies the checkpoint's HF files (config.json, model.safetensors, tokenizer.json,
/// tokenizer_config.json with the chat template, generation_config.json, recipe.toml, metrics),
/// writes a GGUF for llama.cpp / Ollama through memkit's converter (Q8_0 by default), an Ollama
/// Modelfile, and README.md: a model card with the base model, the data, the recipe, the
/// evaluation figures given with --compare, and the exact commands. With --push, the folder is
/// then uploaded to the Hugging Face Hub as one commit (needs network and a write token:
/// $HF_TOKEN or `huggingface-cli login`; the repository is created when missing).
///
/// Example:
///   memkit publish checkpoints/smollm2-135m-lme-filler --out dist/memkit-extractor-135m --compare runs/compare.json
///   memkit publish checkpoints/smollm2-135m-lme-filler --out dist/memkit-extractor-135m --push you/memkit-extractor-135m
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The `memkit train` output folder (HF layout).
    checkpoint: PathBuf,
    /// The bundle folder (created; existing files are replaced).
    #[arg(long)]
    out: PathBuf,
    /// GGUF weight type, or `none`.
    #[arg(long, value_enum, default_value = "q8-0")]
    gguf: GgufType,
    /// Publish the compact form instead, for `checkpoints/<name>/` (what git carries): the
    /// change from the recipe's packaged base as a rank-N delta (f16 factors of each matrix's
    /// truncated SVD), without the full weights or a GGUF. `--model <name>` builds the runnable
    /// model from base + delta on first use.
    #[arg(long, value_name = "N", conflicts_with = "gguf")]
    delta_rank: Option<usize>,
    /// A `memkit compare --out` JSON whose figures go into the card; repeatable.
    #[arg(long)]
    compare: Vec<PathBuf>,
    /// Model name in the card and the GGUF metadata (default: the bundle folder's name).
    #[arg(long)]
    name: Option<String>,
    /// Upload the bundle to this Hub repository (owner/name) as one commit.
    #[arg(long, value_name = "REPO")]
    push: Option<String>,
    /// With --push: create the repository private.
    #[arg(long, requires = "push")]
    private: bool,
    /// With --push: the Hub server [default: $HF_ENDPOINT or https://huggingface.co].
    #[arg(long, requires = "push")]
    endpoint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GgufType {
    Q8_0,
    F16,
    None,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let src = &args.checkpoint;
    for file in REQUIRED {
        anyhow::ensure!(src.join(file).is_file(), "{} has no {file}: is it a `memkit train` output folder?", src.display());
    }
    let tokenizer_config: serde_json::Value = read_json(&src.join("tokenizer_config.json"))?;
    anyhow::ensure!(
        tokenizer_config.get("chat_template").is_some_and(|t| !t.is_null()),
        "{}: no chat_template; the extractor prompt needs it",
        src.join("tokenizer_config.json").display()
    );
    let trained = Trained::read(src)?;
    let compares = args.compare.iter().map(|p| read_json(p)).collect::<anyhow::Result<Vec<serde_json::Value>>>()?;
    let name =
        args.name.clone().unwrap_or_else(|| args.out.file_name().map_or("memkit-extractor".into(), |n| n.to_string_lossy().into_owned()));
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut files = Vec::new();
    let compact = match args.delta_rank {
        Some(rank) => {
            let base = trained.package_base(src)?;
            let options = memkit_infer::models::FetchOptions::from_env()?;
            let (manifest, report) =
                memkit_infer::published::publish(src, &base, rank, &args.out, &options, &memkit_infer::models::SilentReporter)
                    .with_context(|| format!("writing the rank-{rank} delta of {} over {base}", src.display()))?;
            tracing::info!(
                factored = report.factored,
                whole = report.whole,
                unchanged = report.unchanged,
                retained = format!("{:.4}", report.retained),
                least_retained = format!("{} {:.4}", report.least_retained.0, report.least_retained.1),
                mb = format!("{:.1}", report.bytes as f64 / 1e6),
                "wrote the delta"
            );
            files.extend([memkit_infer::published::MANIFEST.to_owned(), memkit_infer::convert::delta::DELTA_FILE.to_owned()]);
            Some((manifest, report))
        }
        None => None,
    };
    // A compact bundle has no full weights, and `publish` copied the checkpoint's own files.
    let written: &[&str] = if compact.is_some() { &memkit_infer::published::CHECKPOINT_FILES } else { &[] };
    for file in REQUIRED.iter().chain(OPTIONAL.iter()) {
        if compact.is_some() && *file == "model.safetensors" {
            continue;
        }
        if written.contains(file) {
            if args.out.join(file).is_file() {
                files.push((*file).to_owned());
            }
            continue;
        }
        if let Some(from) = checkpoint_file(src, file) {
            std::fs::copy(&from, args.out.join(file)).with_context(|| format!("cannot copy {}", from.display()))?;
            files.push((*file).to_owned());
        }
    }
    let gguf = match args.gguf {
        _ if compact.is_some() => None,
        GgufType::None => None,
        dtype => {
            let (out_type, suffix) = if dtype == GgufType::F16 { (OutType::F16, "f16") } else { (OutType::Q8_0, "q8_0") };
            let file = format!("{name}-{suffix}.gguf");
            convert::hf_to_gguf(src, args.out.join(&file), &ConvertOptions { dtype: out_type, name: Some(name.clone()) })
                .with_context(|| format!("converting {} to GGUF", src.display()))?;
            std::fs::write(args.out.join("Modelfile"), modelfile(&file, trained.prompt.as_deref())?)?;
            files.push(file.clone());
            files.push("Modelfile".into());
            Some(file)
        }
    };
    let form = match &compact {
        Some(compact) => Form::Compact(compact),
        None => Form::Full { gguf: gguf.as_deref() },
    };
    let card = model_card(&name, src, &trained, &args.out, form, &compares)?;
    std::fs::write(args.out.join("README.md"), card)?;
    files.push("README.md".into());
    #[allow(clippy::print_stdout)]
    {
        println!("{}: {}", args.out.display(), files.join(", "));
    }
    if let Some(repo) = &args.push {
        let mut request = memkit_infer::hub::HubUpload::new(repo.clone(), format!("memkit publish {name}"));
        request.private = args.private;
        request.endpoint = args.endpoint.clone();
        let commit = memkit_infer::hub::upload_folder(&args.out, &request)?;
        #[allow(clippy::print_stdout)]
        {
            println!(
                "pushed {} files ({} through LFS) to {repo}: {}",
                commit.regular.len() + commit.lfs.len(),
                commit.lfs.len(),
                commit.url
            );
        }
    }
    Ok(())
}

/// How a checkpoint was trained, read once: its recipe (`recipe.toml`, in its folder or its
/// run's: the card names its base and data, and a compact delta is taken over its packaged base),
/// the extraction prompt it learnt and the window it reads.
struct Trained {
    /// Where the recipe was read; `None` when the checkpoint has none (the card says "unknown").
    path: Option<PathBuf>,
    table: toml::Table,
    /// The trained extraction prompt's template source, when the checkpoint has one.
    prompt: Option<String>,
    window: Option<memkit_prompt::TrainedWindow>,
}

impl Trained {
    fn read(src: &Path) -> anyhow::Result<Self> {
        let prompt_path = src.join(memkit_prompt::TRAINED_PROMPT_FILE);
        let prompt = prompt_path
            .is_file()
            .then(|| std::fs::read_to_string(&prompt_path).with_context(|| format!("cannot read {}", prompt_path.display())))
            .transpose()?;
        let window = memkit_prompt::TrainedWindow::read(src)?;
        let (path, table) = match checkpoint_file(src, "recipe.toml") {
            None => (None, toml::Table::new()),
            Some(path) => {
                let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
                let table = text.parse().with_context(|| format!("{} is not TOML", path.display()))?;
                (Some(path), table)
            }
        };
        Ok(Trained { path, table, prompt, window })
    }

    /// `[section] key` as a string.
    fn get(&self, section: &str, key: &str) -> Option<&str> {
        self.table.get(section).and_then(|s| s.get(key)).and_then(|v| v.as_str())
    }

    /// The packaged model it trained from (`[model] kind = "package"`), which a delta is taken over.
    fn package_base(&self, src: &Path) -> anyhow::Result<String> {
        let path = self.path.as_ref().with_context(|| format!("{} has no recipe.toml: its base is unknown", src.display()))?;
        match (self.get("model", "kind"), self.get("model", "name")) {
            (Some("package"), Some(name)) => Ok(name.to_owned()),
            _ => anyhow::bail!(
                "{}: --delta-rank needs a checkpoint trained from a packaged model (`[model] kind = \"package\"`), whose weights \
                 every machine can fetch",
                path.display()
            ),
        }
    }
}

/// The Ollama Modelfile: the GGUF, greedy decoding, and the system message of the prompt the
/// model was trained on (the user message is the window, as `memkit extract` renders it).
fn modelfile(gguf: &str, trained_prompt: Option<&str>) -> anyhow::Result<String> {
    let mut text = format!("FROM ./{gguf}\nPARAMETER temperature 0\n");
    if let Some(source) = trained_prompt {
        let system = memkit_prompt::Prompts::embedded()?.with_trained_prompt(source)?.extract_system(&Default::default())?;
        anyhow::ensure!(!system.contains("\"\"\""), "the trained prompt's system message holds \"\"\", which a Modelfile cannot quote");
        let _ = writeln!(text, "SYSTEM \"\"\"{system}\"\"\"");
    }
    Ok(text)
}

/// What the card says of the training data: the folder the recipe names and, when it (or the
/// distillation folder above a `messages/` folder) has memkit's `stats.json`, the windows per
/// source and per teacher as that file counts them. Nothing is claimed that the data does not
/// say.
fn data_line(dir: &Path) -> String {
    let mut line = format!("`{}`", dir.display());
    let Some(stats_dir) = [dir, dir.parent().unwrap_or(dir)].into_iter().find(|d| d.join("stats.json").is_file()) else {
        return line + " (no `stats.json` beside it: its sources are not recorded)";
    };
    let Ok(stats) = read_json(&stats_dir.join("stats.json")) else { return line };
    let tally = |key: &str| -> String {
        stats[key]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| format!("{k} {}", v.as_u64().unwrap_or(0))).collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    };
    let examples = stats["message_examples"].as_array().map(|a| a.iter().map(|v| v.as_u64().unwrap_or(0)).collect::<Vec<_>>());
    line.push_str(&format!(
        ": {} teacher-labelled windows by source ({})",
        stats["windows_finished"].as_u64().unwrap_or(0),
        tally("windows_per_source")
    ));
    line.push_str(&format!(", labelled by {}", tally("windows_per_teacher")));
    if let Some([train, valid]) = examples.as_deref() {
        line.push_str(&format!("; {train} train / {valid} valid examples one message at a time"));
    }
    line.push_str(&format!(" (statistics: `{}`)", stats_dir.join("stats.md").display()));
    line
}

fn read_json(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// What a bundle holds: the full weights (and a GGUF when one was written), or the compact form
/// (a delta over the base, with its manifest and what the delta kept).
#[derive(Clone, Copy)]
enum Form<'a> {
    Full { gguf: Option<&'a str> },
    Compact(&'a (memkit_infer::published::Manifest, memkit_infer::convert::delta::DeltaReport)),
}

/// The model card: YAML front matter for the Hub, what the model is, how it was made, how well
/// it does, and how to run it.
fn model_card(
    name: &str,
    src: &Path,
    trained: &Trained,
    out: &Path,
    form: Form<'_>,
    compares: &[serde_json::Value],
) -> anyhow::Result<String> {
    let trained_prompt = trained.prompt.as_deref();
    let (gguf, compact) = match form {
        Form::Full { gguf } => (gguf, None),
        Form::Compact(compact) => (None, Some(compact)),
    };
    let base = trained.get("model", "name").or_else(|| trained.get("model", "path")).unwrap_or("unknown").to_owned();
    let data = trained.get("data", "dir").unwrap_or("unknown").to_owned();
    let lora = trained.table.get("lora").map(|l| format!("LoRA (rank {}, merged)", l.get("rank").map_or("?".into(), ToString::to_string)));
    let mut md = String::new();
    let _ = writeln!(
        md,
        "---\nlicense: apache-2.0\nlibrary_name: transformers\npipeline_tag: text-generation\ntags:\n- memkit\n- memory-extraction\n- gguf\n---\n"
    );
    let _ = writeln!(md, "# {name}\n");
    let _ = writeln!(
        md,
        "A compact **memory extractor** trained with [memkit](https://github.com/memkit/memkit): given a window of dialogue, it \
         writes dimensional memory records (`fact` / `episodic` / `profile`, with time, location, reason, purpose, keywords and \
         the source message) as JSON following memkit's extractor schema.\n"
    );
    let _ = writeln!(md, "## Training\n");
    let _ = writeln!(
        md,
        "- Base model: `{base}`{}",
        if base.contains("smollm2") || base.contains("qwen") {
            " (memkit's packaged GGUF, dequantised to f32: a Q4 start is lossy)"
        } else {
            ""
        }
    );
    let _ = writeln!(md, "- Method: {}", lora.unwrap_or_else(|| "full fine-tuning".into()));
    let _ = writeln!(md, "- Data: {}", data_line(Path::new(&data)));
    let _ = writeln!(md, "- Recipe: `recipe.toml` (in this folder); per-step metrics: `metrics.jsonl`\n");
    let score = checkpoint_file(src, "score.json").and_then(|p| read_json(&p).ok());
    // A scored export is validated at its own step; a finished run's export, at the last one.
    let step = score.as_ref().and_then(|s| s["step"].as_u64());
    if let Some((at, loss, accuracy)) = checkpoint_file(src, "metrics.jsonl").and_then(|p| eval_at(&p, step)) {
        let _ = writeln!(md, "Validation at step {at}: loss {loss:.4}, assistant-token accuracy {accuracy:.4}.\n");
    }
    if let Some(score) = score {
        let m = &score["metrics"];
        let f = |k: &str| m[k].as_f64().map_or("–".into(), |v| format!("{v:.3}"));
        let _ = writeln!(
            md,
            "## Agreement with the teacher when this export was chosen
"
        );
        let _ = writeln!(
            md,
            "The run scored every evaluated export by generation (llama.cpp, schema-constrained) on held-out windows and kept \
             the best by record F1 against the teacher's records (`score.json`; the curve is `learning_curve.svg`).\n"
        );
        let _ = writeln!(
            md,
            "| step | windows | JSON validity | precision | recall | F1 (95% interval) | records / window | teacher's |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            score["step"],
            m["windows"],
            f("json_validity"),
            f("precision"),
            f("recall"),
            f1_cell(m),
            f("records_per_window"),
            f("teacher_records_per_window")
        );
    }
    if !compares.is_empty() {
        let _ = writeln!(md, "## Agreement with the teacher (held-out windows)\n");
        let _ = writeln!(
            md,
            "| data | windows | JSON validity | precision | recall | F1 (95% interval) | type | time | keywords |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for c in compares {
            let a = &c["agreement"];
            let f = |k: &str| a[k].as_f64().map_or("–".into(), |v| format!("{v:.3}"));
            let field = |k: &str| a["fields"][k].as_f64().map_or("–".into(), |v| format!("{v:.3}"));
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
                c["data"].as_str().unwrap_or("?"),
                a["windows"],
                f("json_validity"),
                f("precision"),
                f("recall"),
                f1_cell(a),
                field("type"),
                field("time"),
                field("keywords")
            );
        }
        let _ = writeln!(md, "\nMade with `memkit compare --model <this folder> --data <valid.jsonl> --out <json>`.\n");
    }
    let _ = writeln!(md, "## Use\n");
    if let Some((manifest, report)) = compact {
        let _ = writeln!(
            md,
            "This folder is the compact form that ships in memkit's `checkpoints/`: the fine-tune's change from `{}` as a \
             rank-{} delta (`{}`, {:.1} MB: f16 factors of each matrix's truncated SVD, the norms whole), keeping {:.1}% of the \
             change's energy (least kept: `{}`, {:.1}%). memkit builds the runnable model from the base and the delta on first \
             use (`{}` names the base and the sha256 of its dequantised weights) and caches it.\n",
            manifest.base,
            manifest.rank,
            memkit_infer::convert::delta::DELTA_FILE,
            report.bytes as f64 / 1e6,
            100.0 * report.retained,
            report.least_retained.0,
            100.0 * report.least_retained.1,
            memkit_infer::published::MANIFEST
        );
    }
    let model_arg = match (compact, out.file_name()) {
        (Some(_), Some(folder)) => folder.to_string_lossy().into_owned(),
        _ => format!("{}{}", out.display(), gguf.map(|g| format!("/{g}")).unwrap_or_default()),
    };
    let _ = writeln!(
        md,
        "memkit (llama.cpp in-process, schema-constrained):\n\n```bash\nmemkit extract --input dialogues.jsonl --model {model_arg}\n```\n"
    );
    if let Some(w) = trained.window {
        let _ = writeln!(
            md,
            "It learnt from windows of **{} messages, {} of them context (the messages before the new ones)**, and is asked the same way: memkit reads \
             that from the GGUF (`{}`) and cuts dialogues so, as if given `--window {} --overlap {}` (`{}` here). Other \
             tools should ask it one window of that shape per request, numbering the messages from 1.\n",
            w.size,
            w.overlap,
            memkit_prompt::GGUF_WINDOW_SIZE_KEY,
            w.size,
            w.overlap,
            memkit_prompt::TRAINED_WINDOW_FILE
        );
    }
    if let Some(g) = gguf {
        let _ = writeln!(md, "llama.cpp: `llama-cli -m {g}` · Ollama: `ollama create {name} -f Modelfile`\n");
    }
    let hf_folder = match compact {
        Some(_) => format!("<models dir>/extractors/{model_arg}-<delta hash>"),
        None => out.display().to_string(),
    };
    if compact.is_some() {
        let _ = writeln!(md, "The merged HF checkpoint is cached in the models directory after first use (memkit logs its path).\n");
    }
    let prompt_file = if trained_prompt.is_some() { memkit_prompt::TRAINED_PROMPT_FILE } else { "prompts/extract.j2 of memkit" };
    let _ = writeln!(
        md,
        "Transformers: `AutoModelForCausalLM.from_pretrained(\"{}\")`; the chat template is in `tokenizer_config.json`. \
         Prompt it with the template in `{prompt_file}` (minijinja / Jinja2: a `system` and a `user` block): the model was \
         trained on exactly that rendering. memkit does this by itself: the GGUF carries the template \
         (`{}`).\n",
        hf_folder,
        memkit_prompt::GGUF_PROMPT_KEY
    );
    if let Some(source) = trained_prompt {
        let system = memkit_prompt::Prompts::embedded()?.with_trained_prompt(source)?.extract_system(&Default::default())?;
        let _ = writeln!(md, "### The prompt\n\nThe system message it was trained on:\n\n```text\n{system}\n```\n");
    }
    let _ = writeln!(
        md,
        "## Reproduce\n\n```bash\nmemkit train --recipe recipe.toml\nmemkit publish {} --out {}{}\n```",
        src.display(),
        out.display(),
        compact.map(|(m, _)| format!(" --delta-rank {}", m.rank)).unwrap_or_default()
    );
    Ok(md)
}

/// A score's F1 with its bootstrap interval when the score has one (`f1_interval`, older
/// scores do not): `0.500 (0.410–0.590)`.
fn f1_cell(metrics: &serde_json::Value) -> String {
    let Some(f1) = metrics["f1"].as_f64() else { return "–".into() };
    match (metrics["f1_interval"][0].as_f64(), metrics["f1_interval"][1].as_f64()) {
        (Some(lo), Some(hi)) => format!("{f1:.3} ({lo:.3}–{hi:.3})"),
        _ => format!("{f1:.3}"),
    }
}

/// Step, loss and accuracy of the eval line of metrics.jsonl at `step`, or of the last one.
fn eval_at(path: &Path, step: Option<u64>) -> Option<(u64, f64, f64)> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "eval" && step.is_none_or(|s| v["step"].as_u64() == Some(s)))
        .and_then(|v| Some((v["step"].as_u64()?, v["loss"].as_f64()?, v["accuracy"].as_f64()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_names_the_data_as_its_stats_count_it_and_claims_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let messages = dir.path().join("distilled/messages");
        std::fs::create_dir_all(&messages).unwrap();
        let unknown = data_line(&messages);
        assert!(unknown.contains("not recorded") && !unknown.contains("LoCoMo"), "{unknown}");
        let stats = serde_json::json!({"windows_finished": 12, "windows_per_source": {"locomo": 2, "memorybank": 10},
            "windows_per_teacher": {"gguf:t.gguf": 12}, "message_examples": [30, 7]});
        std::fs::write(dir.path().join("distilled/stats.json"), stats.to_string()).unwrap();
        let line = data_line(&messages);
        assert!(line.contains("12 teacher-labelled windows by source (locomo 2, memorybank 10)"), "{line}");
        assert!(line.contains("labelled by gguf:t.gguf 12") && line.contains("30 train / 7 valid"), "{line}");
        assert!(!line.contains("never"), "a card repeats what the data says, not what it should be: {line}");
    }
}
