//! `memkit distill`: label dialogue windows with a teacher and write the SFT dataset.

use std::path::PathBuf;

use anyhow::Context;
use indicatif::ProgressBar;
use memkit_teacher::cache::Cache;
use memkit_teacher::recipe::{Mode, TeacherSpec};
use memkit_teacher::{DistillRecipe, RunOptions, batch, dataset, stats};

use crate::progress::Bars;

/// Label dialogue windows with a teacher model and write an SFT dataset.
///
/// Draws the recipe's windows (LongMemEval-S filler sessions, MemoryBank; never LoCoMo) in a
/// seeded order and labels each: a local teacher by default in decomposed mode (a few new
/// messages per request, the window as context, the source ids fixed by the schema, messages
/// with nothing to remember skipped), a server by default a whole window per request. Replies
/// come from the reply cache when it has them; records in the first person get one re-ask; every
/// record is grounded in the window (re-pointed to the message that says it, dropped when none
/// does; with all-MiniLM-L6-v2 when installed) and validated. Each finished window is appended to
/// <out>/ledger.jsonl (replies that are not whole, with the raw text and a typed reason, to
/// failures.jsonl). Re-running skips finished windows; a killed run loses at most the windows in
/// flight. Then writes train.jsonl and valid.jsonl (windows whose target is complete),
/// stats.md, stats.json and README.md.
///
/// Examples:
///   memkit distill --recipe recipes/distill/lme-filler.toml
///   memkit distill --recipe recipes/distill/lme-filler.toml --limit 20
///   memkit distill --recipe recipes/distill/lme-filler.toml --threads 1   # cores shared with a build
///   memkit distill --recipe recipes/distill/lme-filler.toml --teacher-url http://gpu-box:8080/v1 --concurrency 32
///   memkit distill --recipe recipes/distill/lme-filler.toml --teacher-url http://gpu-box:8080/v1 --export-batch batch.jsonl
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The distill recipe (see recipes/distill/; unknown keys are errors).
    #[arg(long, short)]
    recipe: PathBuf,
    /// Where the benchmark files live; relative corpus paths in the recipe resolve against it.
    #[arg(long, env = "MEMKIT_SHARED_DATA", default_value = "../shared/data")]
    data_dir: PathBuf,
    /// The reply cache (default: $MEMKIT_CACHE_DIR/teacher or ~/.cache/memkit/teacher).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Label at most this many new windows in this run.
    #[arg(long)]
    limit: Option<usize>,
    /// Only rewrite the dataset and stats from the ledger; ask the teacher nothing.
    #[arg(long, conflicts_with_all = ["export_batch", "import_batch"])]
    write_only: bool,
    /// How the teacher is asked, instead of the recipe's `labelling.mode`: `decomposed` (a few
    /// messages per request) or `window` (a whole window per request).
    #[arg(long, value_parser = parse_mode)]
    mode: Option<Mode>,
    /// llama.cpp threads of a local teacher, instead of the recipe's `threads` (default: all
    /// cores). On a machine busy with other work, fewer threads than cores are faster.
    #[arg(long, conflicts_with = "teacher_url",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    threads: Option<usize>,
    /// Ask an OpenAI-compatible server at this URL (with `/v1`: `memkit serve`, llama.cpp's
    /// `llama-server`, vLLM) instead of the recipe's teacher. A local teacher's model is requested
    /// by name, so point it at a server that serves the same weights. Finished windows stay; new
    /// ones record the server as their teacher.
    #[arg(long, value_name = "URL")]
    teacher_url: Option<String>,
    /// Requests in flight with --teacher-url.
    #[arg(long, default_value_t = 8, requires = "teacher_url",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    concurrency: usize,
    /// Seconds one request may take with --teacher-url before it is retried. A server that takes
    /// requests in turn (memkit serve on a CPU) needs room for the queue ahead of each one.
    #[arg(long, default_value_t = 1800, requires = "teacher_url")]
    timeout: u64,
    /// OpenAI teachers: write the unfinished windows' requests as an OpenAI batch-API JSONL file and stop.
    #[arg(long, value_name = "FILE")]
    export_batch: Option<PathBuf>,
    /// OpenAI teachers: store a batch-API results file in the cache, then label as usual (no requests for those windows).
    #[arg(long, value_name = "FILE")]
    import_batch: Option<PathBuf>,
}

fn parse_mode(text: &str) -> Result<Mode, String> {
    match text {
        "window" => Ok(Mode::Window),
        "decomposed" => Ok(Mode::Decomposed),
        other => Err(format!("{other:?} is not a mode: window or decomposed")),
    }
}

struct Bar(ProgressBar);

impl memkit_teacher::Progress for Bar {
    fn start(&self, total: u64, done: u64) {
        self.0.set_length(total);
        self.0.set_position(done);
        self.0.reset_eta();
    }
    fn advance(&self, n: u64, status: &str) {
        self.0.inc(n);
        self.0.set_message(status.to_owned());
    }
    fn finish(&self) {
        self.0.finish();
    }
}

pub fn run(args: Args, bars: &Bars) -> anyhow::Result<()> {
    let mut recipe = DistillRecipe::from_file(&args.recipe)?;
    let mut command = format!("memkit distill --recipe {}", args.recipe.display());
    if let Some(n) = args.threads {
        match &mut recipe.teacher {
            TeacherSpec::Local { threads, .. } => *threads = Some(n),
            TeacherSpec::Openai { .. } => {
                anyhow::bail!("--threads sets a local teacher's llama.cpp threads; {} names a server", args.recipe.display())
            }
        }
    }
    if let Some(mode) = args.mode {
        recipe.labelling.mode = Some(mode);
        command.push_str(&format!(" --mode {}", if mode == Mode::Window { "window" } else { "decomposed" }));
    }
    if let Some(url) = &args.teacher_url {
        recipe.teacher = recipe.teacher.served_at(url, args.concurrency, args.timeout);
        command.push_str(&format!(" --teacher-url {url} --concurrency {}", args.concurrency));
    }
    let cache_dir = args.cache_dir.clone().unwrap_or_else(Cache::default_dir);
    let options = RunOptions { cache_dir: cache_dir.clone(), limit: args.limit };
    let out_dir = recipe.out_dir();

    if args.export_batch.is_some() || args.import_batch.is_some() {
        let TeacherSpec::Openai { model, .. } = &recipe.teacher else {
            anyhow::bail!("--export-batch / --import-batch need an `openai` teacher in the recipe, or --teacher-url");
        };
        let teacher = memkit_teacher::teacher::from_spec(&recipe.teacher, recipe.generation.max_tokens)?;
        let corpus = select(&recipe, &args)?;
        if let Some(path) = &args.export_batch {
            let n = batch::export(&recipe, &corpus, &teacher, model, path)?;
            tracing::info!(requests = n, file = %path.display(), "wrote batch requests; import the results with --import-batch");
            return Ok(());
        }
        if let Some(path) = &args.import_batch {
            let imported = batch::import(&recipe, &corpus, &teacher, &Cache::new(&cache_dir), path)?;
            tracing::info!(stored = imported.stored, failed = imported.failed, "imported batch results into the cache");
        }
    }

    // The teacher is loaded once, on the first round with a window to label (a recipe whose
    // windows are all in the ledger, as on a fresh clone of the published labels, writes its
    // dataset without it), however many rounds `[output] min_examples` takes.
    let mut teacher: Option<(memkit_teacher::Teacher, memkit_clean::Cleaner)> = None;
    let step = recipe.corpus.windows;
    loop {
        let corpus = select(&recipe, &args)?;
        if !args.write_only {
            if memkit_teacher::pending(&recipe, &corpus)?.is_empty() && teacher.is_none() {
                tracing::info!(
                    windows = corpus.windows.len(),
                    "every window the recipe draws is in the ledger: the dataset is written from it, without the teacher"
                );
            } else {
                if teacher.is_none() {
                    let t = memkit_teacher::teacher::from_spec(&recipe.teacher, recipe.generation.max_tokens)
                        .context("starting the teacher")?;
                    let cleaner = memkit_infer::embed::installed_cleaner(recipe.grounding).context("loading the grounding embedder")?;
                    teacher = Some((t, cleaner));
                }
                let (teacher, cleaner) = teacher.as_ref().expect("loaded above");
                let bar = Bar(bars.bar(0, "distill"));
                let summary = memkit_teacher::run(&recipe, &corpus, &options, teacher, cleaner, &bar)
                    .with_context(|| format!("distilling {} into {}", args.recipe.display(), out_dir.display()))?;
                tracing::info!(
                    labelled = summary.labelled,
                    unparsable = summary.unparsable,
                    from_cache = summary.from_cache,
                    failed = summary.backend_failures,
                    already_done = summary.already_done,
                    "run finished"
                );
            }
        }
        let s = write_dataset(&recipe, &corpus, teacher.as_ref().map(|(t, _)| t), &out_dir, &command)?;
        let Some(min) = recipe.output.min_examples else { break };
        let [train, valid] = s.message_examples;
        if min.met_by(train, valid) {
            break;
        }
        let available: usize = corpus.available.values().sum();
        let next = (recipe.corpus.windows + step).min(min.max_windows).min(available);
        if !args.write_only && args.limit.is_none() && next > recipe.corpus.windows {
            #[allow(clippy::print_stdout)]
            {
                println!(
                    "{}: {train} train / {valid} valid examples one message at a time, the recipe asks for {} / {} \
                     ([output] min_examples): labelling {next} windows",
                    out_dir.join(dataset::MESSAGES_DIR).display(),
                    min.train,
                    min.valid
                );
            }
            recipe.corpus.windows = next;
            continue;
        }
        let why = if args.limit.is_some() {
            "--limit stopped the run".to_owned()
        } else if args.write_only {
            "--write-only labels nothing".to_owned()
        } else {
            format!("{} windows labelled, the most the recipe allows or the corpus has", s.windows_finished)
        };
        anyhow::bail!(
            "{}: {train} train / {valid} valid examples one message at a time, fewer than the {} / {} that {} asks for \
             ([output] min_examples); {why}. Of the teacher's messages, {} had every record dropped ({}), and {} windows \
             had a reply that was not whole ({}). See {} for the rest.",
            out_dir.join(dataset::MESSAGES_DIR).display(),
            min.train,
            min.valid,
            args.recipe.display(),
            s.failed_messages,
            counts(&s.dropped),
            s.windows_finished.saturating_sub(s.windows_parsed),
            counts(&s.failures),
            out_dir.join("stats.md").display(),
        );
    }
    Ok(())
}

/// Writes the dataset, its stats and its README from the ledger, prints one line on it and
/// returns the stats. `teacher` is the one that labelled in this run (none: `--write-only`).
fn write_dataset(
    recipe: &DistillRecipe,
    corpus: &memkit_teacher::corpus::Corpus,
    teacher: Option<&memkit_teacher::Teacher>,
    out_dir: &std::path::Path,
    command: &str,
) -> anyhow::Result<stats::Stats> {
    let data = dataset::build(recipe, corpus)?;
    // Rewriting from the ledger: the teachers that labelled it, not the one the recipe names now.
    let teacher_id = teacher.map(|t| t.id().to_owned()).or_else(|| ledger_teachers(&data.entries)).unwrap_or_else(|| teacher_name(recipe));
    let price = teacher.map_or_else(|| price_of(recipe), |t| t.price());
    dataset::write_jsonl(&data, out_dir)?;
    memkit_teacher::frames::write(&data, out_dir)?;
    let batch = match &recipe.teacher {
        TeacherSpec::Local { batch, .. } => *batch,
        TeacherSpec::Openai { .. } => 1,
    };
    let s = stats::compute(&data, corpus, price, batch)?;
    stats::write(&s, out_dir, &recipe.name, &teacher_id, command)?;
    memkit_teacher::write_atomic(&out_dir.join("README.md"), readme(recipe, &s, &teacher_id, command).as_bytes())?;
    #[allow(clippy::print_stdout)]
    {
        println!(
            "{}: {} / {} windows labelled ({:.1}% valid JSON), {} records, {} train / {} valid examples ({} / {} one message at a time)",
            out_dir.display(),
            s.windows_finished,
            s.windows_drawn,
            100.0 * s.json_validity,
            s.records,
            s.train_examples,
            s.valid_examples,
            s.message_examples[0],
            s.message_examples[1],
        );
        println!("stats: {}", out_dir.join("stats.md").display());
    }
    Ok(s)
}

/// `name n, name n` of a tally, or `none`.
fn counts(tally: &std::collections::BTreeMap<String, usize>) -> String {
    if tally.is_empty() {
        return "none".into();
    }
    tally.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

/// The teacher ids of a ledger's entries, in order, joined (`None` for an empty ledger).
fn ledger_teachers(entries: &[memkit_teacher::ledger::Entry]) -> Option<String> {
    let ids: std::collections::BTreeSet<&str> = entries.iter().map(|e| e.model.as_str()).collect();
    (!ids.is_empty()).then(|| ids.into_iter().collect::<Vec<_>>().join(", "))
}

fn teacher_name(recipe: &DistillRecipe) -> String {
    match &recipe.teacher {
        TeacherSpec::Local { model, .. } => format!("local:{model}"),
        TeacherSpec::Openai { base_url, model, .. } => format!("openai:{model}@{base_url}"),
    }
}

fn price_of(recipe: &DistillRecipe) -> Option<memkit_teacher::recipe::Price> {
    match &recipe.teacher {
        TeacherSpec::Openai { price, .. } => *price,
        TeacherSpec::Local { .. } => None,
    }
}

fn readme(recipe: &DistillRecipe, s: &stats::Stats, teacher: &str, command: &str) -> String {
    format!(
        "# {name}\n\n{description}\n\nTeacher-labelled SFT data for a memory extractor, written by memkit.\n\n\
         - Teacher: `{teacher}`\n- Made with: `{command}` (after `memkit models fetch` of the teacher); re-running it skips \
         finished windows and rewrites these files from `ledger.jsonl`.\n\
         - Windows: {finished} labelled of {drawn} drawn ({train} train / {valid} valid examples, split by dialogue; \
         {incomplete} left out because a record the teacher found was dropped; {salvaged} of their messages whose own records \
         were all kept are in `messages/`, after the complete windows' examples; {failed} messages whose every record the teacher \
         wrote was dropped are no example, and {failed_windows} otherwise complete windows holding one are no whole example).\n\n\
         Files: `ledger.jsonl` (every finished window: how the teacher was asked, the validated and grounded records, \
         dropped records with the typed reason, each record's grounding decision with the teacher's own `source_id`, \
         re-asks, skipped messages, tokens and time), `failures.jsonl` (replies that were not whole, with the typed \
         reason and the raw text, and failed requests), `train.jsonl` / `valid.jsonl` (complete windows only: \
         `{{\"window_id\", \"source\", \"messages\": [system, user, assistant]}}`: the student's extraction prompt of the whole \
         window exactly as memkit renders it at inference, and the records as compact JSON), `train.parquet` / `valid.parquet` (the same rows, \
         `messages` as `list<struct<role, content>>`: `datasets.load_dataset(\"parquet\", ...)` reads them), \
         `records.parquet` (one row per kept record: window, split, source, teacher, `source_id`, content, type and \
         dimensions), `stats.md` / `stats.json`, `extract_prompt.j2` / `extract_window.json` (the template the prompts \
         were rendered from and the window they were cut into: training carries both into the checkpoint, and memkit asks \
         the trained model that way), and `messages/` (the same windows one new message at a time, the message before it \
         as context, with its own `train.jsonl` / `valid.jsonl` and the same two files).\n\n\
         Sources: LongMemEval-S filler sessions (no question's evidence, in no haystack of the evaluation split) and \
         MemoryBank dialogues; never LoCoMo.\n",
        name = recipe.name,
        description = recipe.description,
        finished = s.windows_finished,
        drawn = s.windows_drawn,
        train = s.train_examples,
        valid = s.valid_examples,
        incomplete = s.windows_incomplete,
        salvaged = s.salvaged_message_examples,
        failed = s.failed_messages,
        failed_windows = s.windows_with_failed_messages,
    )
}

/// The recipe's windows; an error names the recipe.
fn select(recipe: &DistillRecipe, args: &Args) -> anyhow::Result<memkit_teacher::corpus::Corpus> {
    memkit_teacher::corpus::select(&recipe.corpus, &args.data_dir).with_context(|| format!("recipe {}", args.recipe.display()))
}
