//! `memkit compare`: a student's records against its teacher's on held-out distilled windows, or
//! any records against the hand-written gold set.

use std::path::{Path, PathBuf};

use anyhow::Context;
use memkit_clean::{Cleaned, Cleaner, GroundingConfig};
use memkit_data::Window;
use memkit_eval::agreement::{Agreement, WindowPair, agreement};
use memkit_infer::Extraction;
use memkit_infer::extract::LocalExtractor;
use memkit_infer::reply::Usage;
use memkit_prompt::{ChatMessage, ChatRole};
use memkit_schema::parse_extractor_output;
use serde::Deserialize;

use crate::progress::Bars;

/// Compare a model's records with the teacher's on held-out windows of a distilled dataset, or
/// records files with the gold set.
///
/// With --model and --data: reads rows of a distilled `valid.jsonl` (system, user, assistant =
/// the teacher's records), asks the model for the same system and user messages with the same
/// schema constraint, and reports JSON validity, record precision / recall / F1 against the
/// teacher (one-to-one matching on content token F1 ≥ 0.5 and the same source message) and
/// per-field agreement on matched records. An HF checkpoint folder is converted to a GGUF (f16)
/// first.
///
/// With --replies instead of --model: scores replies already made (a training run writes the
/// replies of each scored export beside it, `replies.jsonl`) without running a model, e.g. with a
/// newer scorer. --save-replies keeps a --model run's replies in that form.
///
/// With --gold: compares each --records file (`memkit extract` output, any extractor) with the
/// hand-written gold records (data/gold/): a record matches a gold record of the same dialogue
/// and source turn with content token F1 ≥ 0.5; per-field agreement on the matches, and per-field
/// recall (matched and agreeing, per gold record). --report writes report.md and metrics.json.
///
/// Examples:
///   memkit compare --model checkpoints/student --data data/distilled/lme-filler/valid.jsonl --limit 20
///   memkit compare --replies checkpoints/student/best/replies.jsonl --data data/distilled/lme-filler/valid.jsonl
///   memkit compare --gold data/gold/locomo-conv-30.jsonl --records rule=rule.jsonl --records teacher=teacher.jsonl
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// A GGUF file, a packaged model name, or an HF checkpoint folder (e.g. a `memkit train` run).
    #[arg(long, required_unless_present_any = ["gold", "replies"], conflicts_with_all = ["gold", "replies"])]
    model: Option<String>,
    /// Replies already made for the first rows of --data (JSONL of `{"window_id", "reply"}`, as
    /// training writes beside each scored export), to score instead of asking a model.
    #[arg(long, conflicts_with = "gold")]
    replies: Option<PathBuf>,
    /// A distilled `valid.jsonl` (or `train.jsonl`).
    #[arg(long, required_unless_present = "gold", conflicts_with = "gold")]
    data: Option<PathBuf>,
    /// Gold record files (JSONL, see data/gold/README.md) to compare --records with.
    #[arg(long, requires = "records")]
    gold: Vec<PathBuf>,
    /// NAME=FILE: a records file (`memkit extract` output) to compare with the gold; repeatable.
    #[arg(long, value_name = "NAME=FILE")]
    records: Vec<String>,
    /// With --gold: write report.md and metrics.json into this folder.
    #[arg(long, requires = "gold")]
    report: Option<PathBuf>,
    /// Compare on at most this many windows (the first ones).
    #[arg(long)]
    limit: Option<usize>,
    #[command(flatten)]
    generation: super::GenerationArgs,
    /// Also write the figures as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// With --model: also write the model's replies here (JSONL, one per row), so a later
    /// `--replies` run can score them again without the model.
    #[arg(long, requires = "model")]
    save_replies: Option<PathBuf>,
}

/// One row of a distilled dataset: the window's prompt and the teacher's reply, and the window
/// itself (datasets written since the window is stored with them).
#[derive(Debug, Clone, Deserialize)]
pub struct Row {
    pub window_id: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    window: Option<Window>,
}

/// What cleaning did to the model's replies before matching.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Cleaning {
    /// Records dropped (every reason of the cleaning policy; near repeats alone for rows without
    /// their window).
    pub dropped: usize,
    /// Rows of a dataset written before windows were stored: their replies lose near repeats
    /// only, not the rest of the labels' cleaning.
    pub rows_without_window: usize,
}

/// The rows of a distilled `valid.jsonl` / `train.jsonl`, at most `limit` (the first ones).
pub fn read_rows(data: &Path, limit: Option<usize>) -> anyhow::Result<Vec<Row>> {
    let text = std::fs::read_to_string(data).with_context(|| format!("cannot read {}", data.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let row: Row = serde_json::from_str(line).with_context(|| format!("{}:{}: not a distilled row", data.display(), i + 1))?;
        anyhow::ensure!(
            row.messages.len() == 3 && row.messages[2].role == ChatRole::Assistant,
            "{}:{}: window {} needs [system, user, assistant] messages",
            data.display(),
            i + 1,
            row.window_id
        );
        rows.push(row);
    }
    rows.truncate(limit.unwrap_or(usize::MAX));
    anyhow::ensure!(!rows.is_empty(), "{} holds no rows", data.display());
    Ok(rows)
}

/// The extractor's records on the rows' prompts against the teacher's, `batch` windows at a time,
/// with the extractor's replies in row order and what cleaning dropped. The replies are cleaned
/// as the teacher's labels were (`cleaner`: grounding, validation, one record per fact), so both
/// sides are compared as memory would keep them.
pub fn agreement_on(
    extractor: &LocalExtractor,
    rows: &[Row],
    batch: usize,
    cleaner: &Cleaner,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<(Agreement, Vec<String>, Cleaning)> {
    let mut outputs = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(batch.max(1)) {
        let chats: Vec<Vec<ChatMessage>> = chunk.iter().map(|r| r.messages[..2].to_vec()).collect();
        outputs.extend(extractor.complete(&chats)?.into_iter().map(|reply| reply.text));
        bar.inc(chunk.len() as u64);
    }
    let (agreement, cleaning) = score_replies(rows, &outputs, cleaner)?;
    Ok((agreement, outputs, cleaning))
}

/// Writes `replies` (one per row, in row order) as a `replies.jsonl` that --replies reads.
pub fn write_replies(rows: &[Row], replies: &[String], path: &Path) -> anyhow::Result<()> {
    let lines: String = rows
        .iter()
        .zip(replies)
        .map(|(row, reply)| serde_json::json!({"window_id": row.window_id, "reply": reply}).to_string() + "\n")
        .collect();
    std::fs::write(path, lines).with_context(|| format!("cannot write {}", path.display()))
}

/// One reply of a `replies.jsonl`.
#[derive(Debug, Deserialize)]
struct Reply {
    window_id: String,
    reply: String,
}

/// The replies of a `replies.jsonl`, in file order; a bad line is an error naming it.
fn read_replies(path: &Path) -> anyhow::Result<Vec<(usize, Reply)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let reply = serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not a reply (expected {{\"window_id\", \"reply\"}})", path.display(), i + 1))?;
            Ok((i + 1, reply))
        })
        .collect()
}

/// The replies' texts in row order: the n-th reply must be for the n-th row's window.
fn replies_for(rows: &[Row], replies: Vec<(usize, Reply)>, path: &Path) -> anyhow::Result<Vec<String>> {
    rows.iter()
        .enumerate()
        .zip(replies)
        .map(|((i, row), (line, reply))| {
            anyhow::ensure!(
                reply.window_id == row.window_id,
                "{}:{line}: the reply of window {}, where row {} of the data is window {}",
                path.display(),
                reply.window_id,
                i + 1,
                row.window_id
            );
            Ok(reply.reply)
        })
        .collect()
}

/// The agreement of replies (one per row, in row order) with the rows' teacher replies, each
/// reply cleaned as the labels were when its row carries the window (near repeats dropped only
/// otherwise), and what cleaning dropped ([`agreement_on`]). A reply that did not parse whole
/// scores as invalid.
fn score_replies(rows: &[Row], outputs: &[String], cleaner: &Cleaner) -> anyhow::Result<(Agreement, Cleaning)> {
    let teacher: Vec<_> = rows.iter().map(|r| parse_extractor_output(&r.messages[2].content).records).collect();
    let mut cleaning = Cleaning::default();
    let mut student = Vec::with_capacity(outputs.len());
    for (row, raw) in rows.iter().zip(outputs) {
        let parsed = parse_extractor_output(raw);
        if parsed.errors.iter().any(|e| e.index.is_none()) {
            student.push(None);
            continue;
        }
        let kept = match &row.window {
            Some(window) => {
                let extraction = Extraction::from_output(window, raw.clone(), Usage::default());
                cleaner
                    .clean(window, &extraction.records, &extraction.errors)
                    .with_context(|| format!("cleaning window {}", row.window_id))?
            }
            None => {
                cleaning.rows_without_window += 1;
                let mut kept = Cleaned { records: parsed.records, ..Cleaned::default() };
                kept.drop_duplicates();
                kept
            }
        };
        cleaning.dropped += kept.dropped.len();
        student.push(Some(kept.records));
    }
    let pairs: Vec<WindowPair<'_>> =
        teacher.iter().zip(&student).map(|(t, s)| WindowPair { reference: t, candidate: s.as_deref() }).collect();
    Ok((agreement(&pairs), cleaning))
}

pub fn run(args: Args, bars: &Bars) -> anyhow::Result<()> {
    if !args.gold.is_empty() {
        return gold(&args);
    }
    let Some(data) = &args.data else { anyhow::bail!("--model or --replies, with --data; or --gold") };
    let cleaner = memkit_infer::embed::installed_cleaner(GroundingConfig::default())?;
    let (model, result, cleaning) = if let Some(path) = &args.replies {
        let replies = read_replies(path)?;
        let rows = read_rows(data, Some(args.limit.unwrap_or(usize::MAX).min(replies.len())))?;
        let outputs = replies_for(&rows, replies, path)?;
        let (result, cleaning) = score_replies(&rows, &outputs, &cleaner)?;
        (path.display().to_string(), result, cleaning)
    } else {
        let model = args.model.as_ref().context("--model or --replies")?;
        let rows = read_rows(data, args.limit)?;
        let gguf = super::model_gguf(model)?;
        let extractor = args.generation.local_extractor(&gguf)?;
        let bar = bars.bar(rows.len() as u64, "compare");
        let (result, replies, cleaning) = agreement_on(&extractor, &rows, args.generation.batch, &cleaner, &bar)?;
        bar.finish_and_clear();
        if let Some(path) = &args.save_replies {
            write_replies(&rows, &replies, path)?;
        }
        (model.clone(), result, cleaning)
    };
    print(&result, &model, data, cleaning, &cleaner.id());
    if let Some(out) = &args.out {
        let json = serde_json::json!({"model": model, "data": data, "agreement": result, "cleaning": cleaner.id(),
            "dropped_by_cleaning": cleaning.dropped, "rows_without_window": cleaning.rows_without_window});
        std::fs::write(out, serde_json::to_string_pretty(&json)?).with_context(|| format!("cannot write {}", out.display()))?;
    }
    Ok(())
}

/// Each records file against the gold: a table on stdout, and the report when asked.
fn gold(args: &Args) -> anyhow::Result<()> {
    let mut gold = Vec::new();
    for path in &args.gold {
        gold.extend(memkit_eval::gold::read_gold(path)?);
    }
    let mut rows = Vec::new();
    for spec in &args.records {
        let (name, path) = spec.split_once('=').with_context(|| format!("--records {spec:?}: expected NAME=FILE"))?;
        let records = super::read_records(Path::new(path))?;
        let per_file: Vec<(String, Agreement)> = args
            .gold
            .iter()
            .map(|g| Ok((g.display().to_string(), memkit_eval::gold::compare(&memkit_eval::gold::read_gold(g)?, &records))))
            .collect::<anyhow::Result<_>>()?;
        let cost = memkit_eval::cost::extraction_cost(Path::new(path))?;
        rows.push((name.to_owned(), path.to_owned(), cost, memkit_eval::gold::compare(&gold, &records), per_file));
    }
    let mut md = String::new();
    use std::fmt::Write as _;
    let command = format!(
        "memkit compare {} {}",
        args.gold.iter().map(|g| format!("--gold {}", g.display())).collect::<Vec<_>>().join(" "),
        args.records.iter().map(|r| format!("--records {r}")).collect::<Vec<_>>().join(" ")
    );
    let _ = writeln!(
        md,
        "# Extraction against the gold set

Made by `{command}`{}.
",
        args.report.as_ref().map(|r| format!(" --report {}", r.display())).unwrap_or_default()
    );
    let _ = writeln!(md, "A record matches a gold record of the same dialogue and source turn when their contents reach token F1 ≥ 0.5 (LoCoMo's F1: normalised, Porter-stemmed tokens); matching is one-to-one. *Agreement* is per field on the matched pairs; *field recall* counts a gold record when it was matched and the field agrees.
");
    let _ = writeln!(
        md,
        "| records | gold | records | matched | precision | recall | F1 | s / window | tokens in / out per window |
|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (name, _, cost, a, _) in &rows {
        let seconds = cost.and_then(|c| c.seconds_per_window).map_or_else(|| "–".to_owned(), |s| format!("{s:.1}"));
        let tokens =
            cost.map_or_else(|| "–".to_owned(), |c| format!("{:.0} / {:.0}", c.prompt_tokens_per_window, c.completion_tokens_per_window));
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {:.3} | {:.3} | **{:.3}** | {seconds} | {tokens} |",
            a.reference_records, a.candidate_records, a.matched, a.precision, a.recall, a.f1
        );
    }
    let _ = writeln!(
        md,
        "
*s / window*: a model's seconds per window on this machine, from the extraction ledger beside the records (`<records>.windows.jsonl`: each window's time, shared time split by the windows decoded with it, over the windows not answered from the reply cache); – where there is none (the rule extractor, observations, a run answered from the cache). *Tokens in / out per window*: the prompt tokens a window's requests read and the tokens they generated, re-asks and samples included, over every window (a reply from the cache keeps the usage it had when it was made): the cost of a labelling method on any machine, where its seconds were not timed."
    );
    let fields = ["type", "time", "location", "reason", "purpose", "keywords"];
    let _ = writeln!(
        md,
        "
## Per field: agreement on matched pairs / field recall

| records | {} |
|---|{}",
        fields.join(" | "),
        "---:|".repeat(fields.len())
    );
    for (name, _, _, a, _) in &rows {
        let cells: Vec<String> = fields
            .iter()
            .map(|f| format!("{:.2} / {:.3}", a.fields.get(*f).unwrap_or(&0.0), a.field_recall.get(*f).unwrap_or(&0.0)))
            .collect();
        let _ = writeln!(md, "| {name} | {} |", cells.join(" | "));
    }
    if args.gold.len() > 1 {
        let _ = writeln!(
            md,
            "
## Per gold file (precision / recall / F1)
"
        );
        let _ = writeln!(
            md,
            "| records | {} |
|---|{}",
            args.gold.iter().map(|g| format!("`{}`", g.display())).collect::<Vec<_>>().join(" | "),
            "---:|".repeat(args.gold.len())
        );
        for (name, _, _, _, per_file) in &rows {
            let cells: Vec<String> = per_file.iter().map(|(_, a)| format!("{:.3} / {:.3} / {:.3}", a.precision, a.recall, a.f1)).collect();
            let _ = writeln!(md, "| {name} | {} |", cells.join(" | "));
        }
    }
    #[allow(clippy::print_stdout)]
    {
        println!("{md}");
    }
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let metrics: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, path, cost, a, per_file)| {
                serde_json::json!({"name": name, "records": path, "seconds_per_window": cost.and_then(|c| c.seconds_per_window), "cost": cost, "agreement": a,
                    "per_gold_file": per_file.iter().map(|(g, a)| serde_json::json!({"gold": g, "agreement": a})).collect::<Vec<_>>()})
            })
            .collect();
        let json = serde_json::json!({"command": command, "gold": args.gold, "systems": metrics});
        std::fs::write(dir.join("metrics.json"), serde_json::to_string_pretty(&json)? + "\n")
            .with_context(|| format!("cannot write {}", dir.display()))?;
        std::fs::write(dir.join("report.md"), &md).with_context(|| format!("cannot write {}", dir.display()))?;
    }
    Ok(())
}

/// The agreement of a `--model` / `--data` run, on stdout.
#[allow(clippy::print_stdout)]
fn print(a: &Agreement, model: &str, data: &Path, cleaning: Cleaning, cleaner: &str) {
    println!("{model} vs the teacher on {} windows of {}", a.windows, data.display());
    println!("the model's records dropped by cleaning before matching, as the labels were ({cleaner}): {}", cleaning.dropped);
    if cleaning.rows_without_window > 0 {
        println!(
            "  {} rows carry no window (a dataset written before windows were stored: `memkit distill --write-only` adds them): near repeats dropped only",
            cleaning.rows_without_window
        );
    }
    println!("JSON validity      {:.1}%", 100.0 * a.json_validity);
    println!("records            teacher {} / model {} / matched {}", a.reference_records, a.candidate_records, a.matched);
    println!(
        "precision / recall / F1   {:.3} / {:.3} / {:.3} (F1 95% bootstrap interval over windows {:.3}–{:.3})",
        a.precision, a.recall, a.f1, a.f1_interval[0], a.f1_interval[1]
    );
    println!(
        "windows the teacher left empty: {} (model records there: {}); windows only the model left empty: {}",
        a.reference_empty_windows, a.candidate_records_where_reference_empty, a.candidate_empty_windows
    );
    println!("content similarity {:.3} (token F1 of matched records)", a.content_similarity);
    for (field, v) in &a.fields {
        println!("  {field:<9} {:.3}", v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(teacher: &str) -> Row {
        let message = |role, content: &str| ChatMessage { role, content: content.to_owned() };
        Row {
            window_id: "w".into(),
            messages: vec![message(ChatRole::System, "s"), message(ChatRole::User, "u"), message(ChatRole::Assistant, teacher)],
            window: None,
        }
    }

    fn records(contents: &[(u32, &str)]) -> String {
        let memories: Vec<_> = contents
            .iter()
            .map(|(id, c)| {
                serde_json::json!({"source_id": id, "source_speaker": "user", "content": c, "dimension": {"memory_type": "fact",
                    "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
            })
            .collect();
        serde_json::json!({ "memories": memories }).to_string()
    }

    /// A reply that loops is scored on what extraction keeps: the two repeats of the first
    /// record are dropped, leaving 2 records of which 1 matches one of the teacher's 2.
    #[test]
    fn repeated_records_are_dropped_before_matching() {
        let teacher = records(&[(1, "The user adopted a dog named Max."), (2, "The user lives in Oslo.")]);
        let reply = records(&[
            (1, "The user adopted a dog named Max."),
            (1, "The user adopted a dog named Max."),
            (1, "The user adopted a dog, named Max."),
            (2, "The user plays chess on Sundays."),
        ]);
        let (a, cleaning) = score_replies(&[row(&teacher)], &[reply], &Cleaner::default()).unwrap();
        assert_eq!(cleaning, Cleaning { dropped: 2, rows_without_window: 1 });
        assert_eq!((a.reference_records, a.candidate_records, a.matched), (2, 2, 1));
        // precision 1/2, recall 1/2, F1 1/2.
        assert!((a.f1 - 0.5).abs() < 1e-12, "{a:?}");
    }

    /// A row that carries its window has the reply cleaned as the labels were: a record no
    /// message supports is dropped by grounding (F1 1), where near repeats alone keep it
    /// (precision 1/2, recall 1, F1 2/3).
    #[test]
    fn replies_are_cleaned_like_the_labels_when_the_row_has_its_window() {
        use memkit_data::WindowMessage;
        let teacher = records(&[(1, "The user adopted a dog named Max.")]);
        let reply = records(&[(1, "The user adopted a dog named Max."), (1, "The user moved to Lisbon for a design job.")]);
        let mut with = row(&teacher);
        with.window = Some(Window::of("w", 0, vec![WindowMessage::user(1, "user", "I adopted a dog named Max last week.")]));
        let cleaner = Cleaner::default();
        let (a, cleaning) = score_replies(&[with], std::slice::from_ref(&reply), &cleaner).unwrap();
        assert_eq!(cleaning, Cleaning { dropped: 1, rows_without_window: 0 });
        assert_eq!((a.candidate_records, a.matched, a.f1), (1, 1, 1.0));
        let (a, cleaning) = score_replies(&[row(&teacher)], &[reply], &cleaner).unwrap();
        assert_eq!(cleaning, Cleaning { dropped: 0, rows_without_window: 1 });
        assert!((a.f1 - 2.0 / 3.0).abs() < 1e-12, "{a:?}");
    }

    /// `--save-replies` writes what `--replies` reads: the same texts, in row order.
    #[test]
    fn saved_replies_read_back_as_they_were_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("saved.jsonl");
        let mut rows = vec![row("{}"), row("{}")];
        rows[1].window_id = "v".into();
        let replies = vec!["{\"memories\":[]}".to_owned(), "not json, \"quoted\"\nover two lines".to_owned()];
        write_replies(&rows, &replies, &path).unwrap();
        assert_eq!(replies_for(&rows, read_replies(&path).unwrap(), &path).unwrap(), replies);
    }

    #[test]
    fn stored_replies_are_scored_in_row_order_and_a_stray_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replies.jsonl");
        let teacher = records(&[(1, "The user adopted a dog named Max.")]);
        let reply = |id: &str| serde_json::json!({"window_id": id, "reply": teacher}).to_string();
        let mut rows = vec![row(&teacher), row(&teacher)];
        rows[1].window_id = "v".into();

        std::fs::write(&path, format!("{}\n\n{}\n", reply("w"), reply("v"))).unwrap();
        let outputs = replies_for(&rows, read_replies(&path).unwrap(), &path).unwrap();
        assert_eq!(score_replies(&rows, &outputs, &Cleaner::default()).unwrap().0.f1, 1.0);

        std::fs::write(&path, format!("{}\n\n{}\n", reply("w"), reply("x"))).unwrap();
        let err = replies_for(&rows, read_replies(&path).unwrap(), &path).unwrap_err().to_string();
        assert!(err.ends_with("replies.jsonl:3: the reply of window x, where row 2 of the data is window v"), "{err}");

        std::fs::write(&path, format!("{}\n{{\"reply\": 1}}\n", reply("w"))).unwrap();
        let err = format!("{:#}", read_replies(&path).unwrap_err());
        assert!(err.contains("replies.jsonl:2: not a reply"), "{err}");
    }
}
