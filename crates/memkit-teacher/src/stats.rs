//! Dataset statistics: `stats.json` (machine-readable) and `stats.md` (for people) from the
//! ledger entries of the drawn windows.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use polars::prelude::{DataFrame, DataType, PolarsResult, SeriesMethods};
use serde::{Deserialize, Serialize};

use memkit_clean::GroundingTally;

use crate::corpus::{Corpus, SourceKind};
use crate::dataset::{Dataset, windows_per_source};
use crate::ledger::Status;
use crate::recipe::Price;
use crate::{Error, Result, frames, write_atomic};

/// Everything `stats.md` shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Windows the recipe draws.
    pub windows_drawn: usize,
    /// Windows finished (ledger).
    pub windows_finished: usize,
    /// Finished windows per source.
    pub windows_per_source: BTreeMap<SourceKind, usize>,
    /// Finished windows per teacher model id (a dataset can grow under several teachers:
    /// the same weights in-process and behind a server, say).
    #[serde(default)]
    pub windows_per_teacher: BTreeMap<String, usize>,
    /// Finished windows per labelling mode (`window`, `decomposed`; `window` for entries written
    /// before the mode was recorded).
    #[serde(default)]
    pub windows_per_mode: BTreeMap<String, usize>,
    /// Finished windows whose reply parsed.
    pub windows_parsed: usize,
    /// Whole-reply failures per kind (`not_json`, `broken_json`, `truncated`).
    #[serde(default)]
    pub failures: BTreeMap<String, usize>,
    /// Parsed windows left out of the dataset because a record the teacher found was dropped.
    #[serde(default)]
    pub windows_incomplete: usize,
    /// Examples one message at a time salvaged from those windows: their messages whose own
    /// records were all kept.
    #[serde(default)]
    pub salvaged_message_examples: usize,
    /// Messages left out because every record the teacher wrote for them was dropped (no known
    /// target).
    #[serde(default)]
    pub failed_messages: usize,
    /// Complete windows that are no whole example for holding such a message.
    #[serde(default)]
    pub windows_with_failed_messages: usize,
    /// Teacher requests made (repairs included).
    #[serde(default)]
    pub requests: usize,
    /// New messages the prefilter skipped, and the new messages of the finished windows.
    #[serde(default)]
    pub messages_skipped: usize,
    /// New (non-assistant) messages of the parsed windows.
    #[serde(default)]
    pub messages: usize,
    /// Re-asks of replies with first-person or other-speaker records.
    #[serde(default)]
    pub repairs: usize,
    /// Of those, the re-asks that fixed their reply.
    #[serde(default)]
    pub repairs_fixed: usize,
    /// Re-asks of replies cleaning kept none of (the recipe's `repair_dropped`).
    #[serde(default)]
    pub repairs_dropped: usize,
    /// Of those, the re-asks whose reply kept a record.
    #[serde(default)]
    pub repairs_dropped_fixed: usize,
    /// Times rewritten to their exact normal form.
    #[serde(default)]
    pub time_fixes: usize,
    /// Grounding decisions over the parsed windows' records.
    #[serde(default)]
    pub grounding: GroundingTally,
    /// `windows_parsed / windows_finished`.
    pub json_validity: f64,
    /// Examples in train / valid.
    pub train_examples: usize,
    /// Examples in valid.
    pub valid_examples: usize,
    /// Examples one new message at a time (`messages/`), in train and valid.
    #[serde(default)]
    pub message_examples: [usize; 2],
    /// Of those, the ones whose target has no record.
    #[serde(default)]
    pub empty_message_examples: usize,
    /// Records kept after validation.
    pub records: usize,
    /// Records dropped by validation, per reason.
    pub dropped: BTreeMap<String, usize>,
    /// `records / (records + dropped)`.
    pub record_validity: f64,
    /// Parsed windows with no records kept.
    pub empty_windows: usize,
    /// Mean records per parsed window.
    pub records_per_window: f64,
    /// Kept records per type.
    pub type_mix: BTreeMap<String, usize>,
    /// Share of kept records with a non-empty field (time, location, reason, purpose, keywords).
    pub fill_rates: BTreeMap<String, f64>,
    /// Teacher prompt tokens (all finished windows).
    pub prompt_tokens: usize,
    /// Teacher completion tokens.
    pub completion_tokens: usize,
    /// Mean wall-clock seconds per window the teacher took (windows labelled without the cache;
    /// a batch's time is shared by its windows).
    pub seconds_per_window: f64,
    /// Completion tokens per wall-clock second of teacher time (same windows).
    pub completion_tokens_per_second: f64,
    /// Estimated cost in US dollars, when the recipe gives prices.
    pub cost_usd: Option<f64>,
    /// Windows skipped as too long.
    pub skipped_long: usize,
    /// LongMemEval-S filler sessions used / excluded.
    pub lme_sessions_used: usize,
    /// LongMemEval-S sessions excluded as evidence or evaluation haystack.
    pub lme_sessions_excluded: usize,
}

/// Computes the statistics of `dataset`; `batch` is the teacher's batch size, used for ledger
/// entries written before wall time was recorded per window. The type mix and fill rates are
/// counted on the same record table as `records.parquet` ([`frames::records`]).
pub fn compute(dataset: &Dataset, corpus: &Corpus, price: Option<Price>, batch: usize) -> Result<Stats> {
    let entries = &dataset.entries;
    let parsed: Vec<_> = entries.iter().filter(|e| e.status == Status::Ok).collect();
    let windows: std::collections::HashMap<&str, &memkit_data::Window> =
        corpus.windows.iter().map(|w| (w.window.id.as_str(), &w.window)).collect();
    let mut failures = BTreeMap::new();
    for e in entries.iter().filter(|e| e.status != Status::Ok) {
        *failures.entry(e.failure.map_or("unknown", |k| k.name()).to_owned()).or_default() += 1;
    }
    let mut dropped = BTreeMap::new();
    for d in parsed.iter().flat_map(|e| &e.dropped) {
        *dropped.entry(d.reason.name().to_owned()).or_default() += 1;
    }
    let n_dropped: usize = dropped.values().sum();
    let table = frames::records(dataset).map_err(|source| Error::Frame { what: "the record table".into(), source })?;
    let (type_mix, fill_rates) =
        record_counts(&table).map_err(|source| Error::Frame { what: "counting the record table".into(), source })?;
    let n_records = table.height();
    let share = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    let fresh: Vec<_> = entries.iter().filter(|e| !e.cached && (e.wall_ms > 0 || e.usage.millis > 0)).collect();
    let fresh_ms: u64 = fresh.iter().map(|e| if e.wall_ms > 0 { e.wall_ms } else { e.usage.millis / batch.max(1) as u64 }).sum();
    let fresh_out: usize = fresh.iter().map(|e| e.usage.completion_tokens).sum();
    let prompt_tokens = entries.iter().map(|e| e.usage.prompt_tokens).sum();
    let completion_tokens = entries.iter().map(|e| e.usage.completion_tokens).sum();
    Ok(Stats {
        windows_drawn: corpus.windows.len(),
        windows_finished: entries.len(),
        windows_per_source: windows_per_source(entries),
        windows_per_teacher: entries.iter().fold(BTreeMap::new(), |mut m, e| {
            *m.entry(e.model.clone()).or_default() += 1;
            m
        }),
        windows_per_mode: entries.iter().fold(BTreeMap::new(), |mut m, e| {
            let mut mode = match e.mode {
                Some(crate::recipe::Mode::Decomposed) => "decomposed mode".to_owned(),
                _ => "window mode".to_owned(),
            };
            if let Some(samples) = e.samples {
                mode = format!("{mode}, {}", samples.describe());
            }
            if e.repair_dropped {
                mode.push_str(", re-asked when cleaning kept nothing");
            }
            *m.entry(mode).or_default() += 1;
            m
        }),
        windows_parsed: parsed.len(),
        failures,
        windows_incomplete: dataset.incomplete,
        salvaged_message_examples: dataset.salvaged_messages,
        failed_messages: dataset.failed_messages,
        windows_with_failed_messages: dataset.windows_with_failed_messages,
        requests: entries.iter().map(|e| e.requests.max(1)).sum(),
        messages_skipped: parsed.iter().map(|e| e.skipped.len()).sum(),
        messages: parsed
            .iter()
            .filter_map(|e| windows.get(e.window_id.as_str()))
            .map(|w| w.suffix().iter().filter(|m| m.turn.role != memkit_schema::Role::Assistant).count())
            .sum(),
        repairs: parsed.iter().flat_map(|e| &e.repairs).filter(|r| !r.all_dropped).count(),
        repairs_fixed: parsed.iter().flat_map(|e| &e.repairs).filter(|r| !r.all_dropped && r.fixed).count(),
        repairs_dropped: parsed.iter().flat_map(|e| &e.repairs).filter(|r| r.all_dropped).count(),
        repairs_dropped_fixed: parsed.iter().flat_map(|e| &e.repairs).filter(|r| r.all_dropped && r.fixed).count(),
        time_fixes: parsed.iter().map(|e| e.time_fixes).sum(),
        grounding: GroundingTally::of(parsed.iter().flat_map(|e| &e.grounding)),
        json_validity: share(parsed.len(), entries.len()),
        train_examples: dataset.train.len(),
        valid_examples: dataset.valid.len(),
        message_examples: [dataset.train_messages.len(), dataset.valid_messages.len()],
        empty_message_examples: dataset
            .train_messages
            .iter()
            .chain(&dataset.valid_messages)
            .filter(|e| e.messages.last().is_some_and(|m| m.content == r#"{"memories":[]}"#))
            .count(),
        records: n_records,
        record_validity: share(n_records, n_records + n_dropped),
        dropped,
        empty_windows: parsed.iter().filter(|e| e.records.is_empty()).count(),
        records_per_window: share(n_records, parsed.len()),
        type_mix,
        fill_rates,
        prompt_tokens,
        completion_tokens,
        seconds_per_window: share(fresh_ms as usize, fresh.len()) / 1000.0,
        completion_tokens_per_second: share(fresh_out * 1000, fresh_ms as usize),
        cost_usd: price.map(|p| (prompt_tokens as f64 * p.prompt_per_mtok + completion_tokens as f64 * p.completion_per_mtok) / 1e6),
        skipped_long: corpus.skipped_long,
        lme_sessions_used: corpus.lme_sessions_used,
        lme_sessions_excluded: corpus.lme_sessions_excluded,
    })
}

/// Records per type, and the share of records with each [`frames::DIMENSIONS`] field filled
/// (non-blank text; at least one keyword).
fn record_counts(table: &DataFrame) -> PolarsResult<(BTreeMap<String, usize>, BTreeMap<String, f64>)> {
    let mut type_mix = BTreeMap::new();
    let counts = table.column("type")?.as_materialized_series().value_counts(false, false, "records".into(), false)?;
    for (t, n) in counts.column("type")?.str()?.iter().zip(counts.column("records")?.idx()?.iter()) {
        type_mix.insert(t.unwrap_or_default().to_owned(), n.unwrap_or_default() as usize);
    }
    let mut fill_rates = BTreeMap::new();
    for name in frames::DIMENSIONS {
        let column = table.column(name)?;
        let filled = match column.dtype() {
            DataType::List(_) => column.list()?.iter().filter(|k| k.as_ref().is_some_and(|k| !k.is_empty())).count(),
            _ => column.str()?.iter().filter(|v| v.is_some_and(|v| !v.trim().is_empty())).count(),
        };
        let rate = if table.height() == 0 { 0.0 } else { filled as f64 / table.height() as f64 };
        fill_rates.insert(name.to_owned(), rate);
    }
    Ok((type_mix, fill_rates))
}

/// `stats.md`.
pub fn markdown(stats: &Stats, title: &str, teacher: &str, command: &str) -> String {
    let mut md = String::new();
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let _ = writeln!(md, "# {title}: dataset statistics\n");
    let _ = writeln!(md, "Teacher: `{teacher}`. Written by `{command}` from `ledger.jsonl`.\n");
    let _ = writeln!(md, "| | |\n|---|---|");
    let _ = writeln!(md, "| windows finished / drawn | {} / {} |", stats.windows_finished, stats.windows_drawn);
    for (source, n) in &stats.windows_per_source {
        let _ = writeln!(md, "| · from {} | {n} |", source.as_str());
    }
    for (model, n) in &stats.windows_per_teacher {
        let _ = writeln!(md, "| · labelled by `{model}` | {n} |");
    }
    let _ =
        writeln!(md, "| JSON validity (windows) | {} ({} / {}) |", pct(stats.json_validity), stats.windows_parsed, stats.windows_finished);
    for (mode, n) in &stats.windows_per_mode {
        let _ = writeln!(md, "| · labelled in {mode} | {n} |");
    }
    for (kind, n) in &stats.failures {
        let _ = writeln!(md, "| · reply not whole: {kind} | {n} |");
    }
    let _ = writeln!(md, "| train / valid examples | {} / {} |", stats.train_examples, stats.valid_examples);
    let [train, valid] = stats.message_examples;
    let _ = writeln!(
        md,
        "| train / valid examples one message at a time (`messages/`); with no record | {train} / {valid}; {} |",
        stats.empty_message_examples
    );
    let _ = writeln!(md, "| windows left out: a record the teacher found was dropped | {} |", stats.windows_incomplete);
    let _ = writeln!(
        md,
        "| · their messages kept one at a time (every record of the message kept), in `messages/` | {} |",
        stats.salvaged_message_examples
    );
    let _ = writeln!(
        md,
        "| messages left out: the teacher wrote records for them and every one was dropped (no known target) | {} |",
        stats.failed_messages
    );
    let _ = writeln!(md, "| · complete windows not a whole example for holding one | {} |", stats.windows_with_failed_messages);
    let _ = writeln!(md, "| teacher requests (re-asks included) | {} |", stats.requests);
    if stats.messages > 0 {
        let _ = writeln!(
            md,
            "| new messages skipped by the prefilter | {} of {} ({}) |",
            stats.messages_skipped,
            stats.messages,
            pct(stats.messages_skipped as f64 / stats.messages as f64)
        );
    }
    let _ = writeln!(md, "| re-asks (first-person or other-speaker records) / fixed | {} / {} |", stats.repairs, stats.repairs_fixed);
    if stats.repairs_dropped > 0 {
        let _ = writeln!(md, "| re-asks (cleaning kept nothing) / fixed | {} / {} |", stats.repairs_dropped, stats.repairs_dropped_fixed);
    }
    let _ = writeln!(md, "| times normalised (exact forms) | {} |", stats.time_fixes);
    let g = &stats.grounding;
    let _ = writeln!(
        md,
        "| grounding: kept / re-pointed / unsupported / restating context | {} / {} / {} / {} |",
        g.kept, g.repointed, g.unsupported, g.context
    );
    let _ = writeln!(md, "| records kept | {} ({} of records passed validation) |", stats.records, pct(stats.record_validity));
    let _ = writeln!(md, "| records per window | {:.2} ({} windows with none) |", stats.records_per_window, stats.empty_windows);
    let _ = writeln!(md, "| teacher tokens in / out | {} / {} |", stats.prompt_tokens, stats.completion_tokens);
    let _ = writeln!(
        md,
        "| teacher time per window (requests this machine timed; not batch imports) | {:.1} s ({:.1} completion tokens/s) |",
        stats.seconds_per_window, stats.completion_tokens_per_second
    );
    if let Some(cost) = stats.cost_usd {
        let _ = writeln!(md, "| estimated cost | ${cost:.4} |");
    }
    let _ = writeln!(md, "| windows skipped as too long | {} |", stats.skipped_long);
    if stats.lme_sessions_used > 0 {
        let _ = writeln!(
            md,
            "| LongMemEval-S filler sessions used / excluded | {} / {} |",
            stats.lme_sessions_used, stats.lme_sessions_excluded
        );
    }
    let _ = writeln!(md, "\n## Type mix\n\n| type | records | share |\n|---|---|---|");
    for (t, n) in &stats.type_mix {
        let _ = writeln!(md, "| {t} | {n} | {} |", pct(*n as f64 / stats.records.max(1) as f64));
    }
    let _ = writeln!(md, "\n## Field fill rates (kept records)\n\n| field | filled |\n|---|---|");
    for (f, r) in &stats.fill_rates {
        let _ = writeln!(md, "| {f} | {} |", pct(*r));
    }
    let _ = writeln!(md, "\n## Records dropped by validation\n\n| reason | records |\n|---|---|");
    if stats.dropped.is_empty() {
        let _ = writeln!(md, "| (none) | 0 |");
    }
    for (reason, n) in &stats.dropped {
        let _ = writeln!(md, "| {reason} | {n} |");
    }
    md
}

/// Writes `stats.json` and `stats.md` into `out_dir`.
pub fn write(stats: &Stats, out_dir: &Path, title: &str, teacher: &str, command: &str) -> Result<()> {
    let json = serde_json::to_string_pretty(stats).expect("plain data");
    write_atomic(&out_dir.join("stats.json"), json.as_bytes())?;
    write_atomic(&out_dir.join("stats.md"), markdown(stats, title, teacher, command).as_bytes())
}
