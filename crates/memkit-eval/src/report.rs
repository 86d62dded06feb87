//! Report folders: `reports/<name>/report.md`, `metrics.json` and the plots.
//!
//! A report holds no date or timing, so re-running the same command rewrites the same bytes and
//! a `git diff` shows only what changed. Every file is written to a temporary sibling first and
//! renamed into place, so an interrupted run leaves the previous report intact (SPEC §9).
//!
//! `metrics.json` has the shape
//! `{"dataset": .., "systems": [{"name": .., "evidence_recall_at": {"250": x, ..},
//! "mean_context_tokens": x, "questions": n, ..}]}`; LongMemEval systems add `recall_any_at`,
//! `recall_all_at` and `ndcg_at` keyed by k. Maps keyed by numbers are written in numeric order
//! (`"250"` before `"1000"`).
//!
//! ```no_run
//! use memkit_eval::{Report, SystemMetrics};
//! let mut bm25 = SystemMetrics::new("bm25-turns");
//! bm25.evidence_recall_at.insert("250".into(), 0.52);
//! bm25.mean_context_tokens = 3900.0;
//! bm25.questions = 1540;
//! let report = Report {
//!     name: "locomo-bm25".into(),
//!     dataset: "locomo10".into(),
//!     command: "memkit eval --recipe recipes/eval/locomo-bm25.toml".into(),
//!     systems: vec![bm25],
//!     agreements: vec![],
//!     qa: None,
//!     notes: vec![],
//! };
//! report.write("reports".as_ref())?;
//! # Ok::<(), memkit_eval::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::metrics::{CategoryMetrics, SystemMetrics};
use crate::metrics::{sorted_entries, sorted_keys};
use crate::plot;
use crate::{Error, Result};

/// The content of `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsFile {
    /// Dataset name.
    pub dataset: String,
    /// One entry per system, in report order.
    pub systems: Vec<SystemMetrics>,
    /// Extraction agreement figures, when the recipe asks for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agreements: Vec<NamedAgreement>,
    /// Question-answering figures, when the recipe has `[qa]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qa: Option<QaMetrics>,
}

/// The QA part of `metrics.json`: the setup and one summary per system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QaMetrics {
    /// The answer model.
    pub answer_model: String,
    /// The judge, or `None` when answers are scored with F1 only.
    pub judge_model: Option<String>,
    /// Questions in the seeded sample.
    pub questions: usize,
    /// The sample's seed.
    pub seed: u64,
    /// Context budgets the answer model reads within (each system answers at each).
    pub budgets: Vec<usize>,
    /// Per system and budget, in report order.
    pub systems: Vec<QaSystemMetrics>,
    /// The recipe's baseline system the differences are taken to, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
}

/// One system's QA figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QaSystemMetrics {
    /// The system's report name.
    pub name: String,
    /// The context budget of these answers.
    pub budget: usize,
    /// Questions answered.
    pub questions: usize,
    /// Mean official F1.
    pub f1: f64,
    /// Share judged correct over the verdicts that parsed.
    pub judge_accuracy: Option<f64>,
    /// Verdicts that did not parse (left out of the accuracy).
    pub judge_unparsed: usize,
    /// Mean context tokens the answer model read.
    pub mean_context_tokens: f64,
    /// F1 minus the recipe baseline's on the same questions and budget, with its 95% paired
    /// bootstrap interval (absent for the baseline and without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f1_difference: Option<crate::bootstrap::Interval>,
    /// Judge correctness (1 or 0) minus the baseline's, on the questions both verdicts parsed for,
    /// with its interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_difference: Option<crate::bootstrap::Interval>,
}

/// QA of a report: the figures and every answer (written to `qa.jsonl`).
#[derive(Debug, Clone, PartialEq)]
pub struct QaSection {
    /// The figures.
    pub metrics: QaMetrics,
    /// Every scored answer, system by system.
    pub results: Vec<crate::qa::QaResult>,
}

/// A benchmark report: the figures of several systems on one dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Folder name under `reports/`.
    pub name: String,
    /// Dataset name (`locomo10`, `longmemeval_s_subset200`, …).
    pub dataset: String,
    /// The exact command that produced the report, so anyone can re-run it.
    pub command: String,
    /// The systems compared.
    pub systems: Vec<SystemMetrics>,
    /// Extraction agreement of candidate extractors with a reference (student vs teacher).
    pub agreements: Vec<NamedAgreement>,
    /// Question answering on a seeded sample, when the recipe asks for it.
    pub qa: Option<QaSection>,
    /// Free-text notes (sampling, tokenizer, exclusions), one bullet each.
    pub notes: Vec<String>,
}

/// One agreement figure of a report: `candidate`'s records against `reference`'s, window by window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedAgreement {
    /// Report name (`student vs teacher`).
    pub name: String,
    /// The figures.
    #[serde(flatten)]
    pub agreement: crate::agreement::Agreement,
}

/// File names inside a report folder.
pub const REPORT_MD: &str = "report.md";
/// See [`REPORT_MD`].
pub const METRICS_JSON: &str = "metrics.json";
/// See [`REPORT_MD`].
pub const RECALL_SVG: &str = "recall_vs_budget.svg";
/// See [`REPORT_MD`].
pub const TOKENS_SVG: &str = "tokens_per_query.svg";
/// Every QA answer with its scores, one JSON object per line.
pub const QA_JSONL: &str = "qa.jsonl";

impl Report {
    /// Writes `<reports_dir>/<name>/` with `report.md`, `metrics.json`, `recall_vs_budget.svg`
    /// and `tokens_per_query.svg`, each atomically. Returns the report folder.
    #[tracing::instrument(skip(self), fields(name = %self.name))]
    pub fn write(&self, reports_dir: &Path) -> Result<PathBuf> {
        let dir = reports_dir.join(&self.name);
        std::fs::create_dir_all(&dir).map_err(|source| Error::Write { path: dir.clone(), source })?;
        let json_path = dir.join(METRICS_JSON);
        let mut json =
            serde_json::to_string_pretty(&self.metrics_file()).map_err(|source| Error::Json { path: json_path.clone(), source })?;
        json.push('\n');
        write_atomic(&json_path, json.as_bytes())?;
        write_atomic(&dir.join(REPORT_MD), self.to_markdown().as_bytes())?;
        let svg_path = dir.join(RECALL_SVG);
        let svg = plot::recall_vs_budget(&self.systems, &self.name).map_err(|message| Error::Plot { path: svg_path.clone(), message })?;
        write_atomic(&svg_path, svg.as_bytes())?;
        let svg_path = dir.join(TOKENS_SVG);
        let svg = plot::tokens_per_query(&self.systems, &self.name).map_err(|message| Error::Plot { path: svg_path.clone(), message })?;
        write_atomic(&svg_path, svg.as_bytes())?;
        if let Some(qa) = &self.qa {
            let path = dir.join(QA_JSONL);
            let mut lines = String::new();
            for r in &qa.results {
                lines.push_str(&serde_json::to_string(r).map_err(|source| Error::Json { path: path.clone(), source })?);
                lines.push('\n');
            }
            write_atomic(&path, lines.as_bytes())?;
        }
        tracing::info!(dir = %dir.display(), "report written");
        Ok(dir)
    }

    /// The `metrics.json` content.
    pub fn metrics_file(&self) -> MetricsFile {
        MetricsFile {
            dataset: self.dataset.clone(),
            systems: self.systems.clone(),
            agreements: self.agreements.clone(),
            qa: self.qa.as_ref().map(|q| q.metrics.clone()),
        }
    }

    /// The `report.md` content: one table per metric, the command, the notes.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# {}\n", self.name);
        let _ = writeln!(md, "Dataset: `{}`\n", self.dataset);
        let _ = writeln!(md, "Produced by:\n\n```sh\n{}\n```\n", self.command);

        let budgets = sorted_keys(self.systems.iter().map(|s| &s.evidence_recall_at));
        if !budgets.is_empty() {
            md.push_str("## Evidence recall at token budgets\n\n");
            md.push_str(&table(
                "system",
                &budgets,
                Some("questions"),
                self.systems.iter().map(|s| {
                    (
                        s.name.clone(),
                        budgets.iter().map(|b| s.evidence_recall_at.get(b).map(|x| format!("{x:.4}"))).collect(),
                        Some(s.questions.to_string()),
                    )
                }),
            ));
            md.push_str(&format!("![recall vs budget]({RECALL_SVG})\n\n"));
        }

        if let Some(baseline) = self.systems.iter().find_map(|s| s.difference.as_ref().map(|d| d.baseline.clone())) {
            let _ = writeln!(md, "## Difference to {}\n", cell(&baseline));
            md.push_str(
                "Evidence recall minus the baseline's, question by question; in brackets the 95% paired bootstrap interval \
                 (2,000 resamples of the questions, percentile method). An interval that excludes 0 is a difference these \
                 questions resolve.\n\n",
            );
            md.push_str(&table(
                "system",
                &budgets,
                None,
                self.systems.iter().filter_map(|s| {
                    let d = s.difference.as_ref()?;
                    let cells =
                        budgets.iter().map(|b| d.at.get(b).map(|i| format!("{:+.4} [{:+.4}, {:+.4}]", i.diff, i.low, i.high))).collect();
                    Some((s.name.clone(), cells, None))
                }),
            ));
        }

        md.push_str("## Context tokens per query\n\n");
        md.push_str("| system | mean tokens | questions |\n|---|---:|---:|\n");
        for s in &self.systems {
            let _ = writeln!(md, "| {} | {:.1} | {} |", cell(&s.name), s.mean_context_tokens, s.questions);
        }
        md.push_str(&format!("\n![tokens per query]({TOKENS_SVG})\n\n"));

        for (title, get) in [
            ("recall_any@k", (|s: &SystemMetrics| s.recall_any_at.as_ref()) as fn(&SystemMetrics) -> Option<&BTreeMap<String, f64>>),
            ("recall_all@k", |s| s.recall_all_at.as_ref()),
            ("nDCG@k", |s| s.ndcg_at.as_ref()),
        ] {
            let ks = sorted_keys(self.systems.iter().filter_map(get));
            if ks.is_empty() {
                continue;
            }
            let _ = writeln!(md, "## {title}\n");
            let header: Vec<String> = ks.iter().map(|k| format!("@{k}")).collect();
            md.push_str(&table(
                "system",
                &header,
                None,
                self.systems.iter().filter_map(|s| {
                    let m = get(s)?;
                    Some((s.name.clone(), ks.iter().map(|k| m.get(k).map(|x| format!("{x:.4}"))).collect(), None))
                }),
            ));
        }

        if self.systems.iter().any(|s| !s.per_category.is_empty()) {
            md.push_str("## Per category\n\n");
            let budgets = sorted_keys(self.systems.iter().flat_map(|s| s.per_category.values().map(|c| &c.evidence_recall_at)));
            let has_f1 = self.systems.iter().any(|s| s.per_category.values().any(|c| c.f1.is_some()));
            let mut header: Vec<String> = vec!["category".into(), "questions".into()];
            header.extend(budgets.iter().map(|b| format!("recall@{b}")));
            if has_f1 {
                header.push("F1".into());
            }
            md.push_str(&table(
                "system",
                &header,
                None,
                self.systems.iter().flat_map(|s| {
                    sorted_entries(&s.per_category)
                        .into_iter()
                        .map(|(cat, c)| {
                            let mut cells = vec![Some(cat.clone()), Some(c.questions.to_string())];
                            cells.extend(budgets.iter().map(|b| c.evidence_recall_at.get(b).map(|x| format!("{x:.4}"))));
                            if has_f1 {
                                cells.push(c.f1.map(|x| format!("{x:.4}")));
                            }
                            (s.name.clone(), cells, None)
                        })
                        .collect::<Vec<_>>()
                }),
            ));
        }

        if self.systems.iter().any(|s| !s.extra.is_empty()) {
            md.push_str("## Other figures\n\n");
            let keys: Vec<String> = {
                let mut k: Vec<String> = self.systems.iter().flat_map(|s| s.extra.keys().cloned()).collect();
                k.sort();
                k.dedup();
                k
            };
            md.push_str(&table(
                "system",
                &keys,
                None,
                self.systems.iter().map(|s| (s.name.clone(), keys.iter().map(|k| s.extra.get(k).map(value_cell)).collect(), None)),
            ));
        }

        if !self.agreements.is_empty() {
            md.push_str("## Extraction agreement\n\n");
            md.push_str("Records matched one-to-one within a window (same source message, content token F1 ≥ 0.5); field agreement over matched pairs.\n\n");
            let fields: Vec<String> = sorted_fields(&self.agreements);
            let mut header: Vec<String> =
                ["windows", "JSON validity", "reference records", "candidate records", "precision", "recall", "F1", "content similarity"]
                    .map(String::from)
                    .to_vec();
            header.extend(fields.iter().cloned());
            md.push_str(&table(
                "candidate vs reference",
                &header,
                None,
                self.agreements.iter().map(|a| {
                    let g = &a.agreement;
                    let mut cells = vec![
                        Some(g.windows.to_string()),
                        Some(format!("{:.3}", g.json_validity)),
                        Some(g.reference_records.to_string()),
                        Some(g.candidate_records.to_string()),
                        Some(format!("{:.3}", g.precision)),
                        Some(format!("{:.3}", g.recall)),
                        Some(format!("{:.3}", g.f1)),
                        Some(format!("{:.3}", g.content_similarity)),
                    ];
                    cells.extend(fields.iter().map(|f| g.fields.get(f).map(|v| format!("{v:.3}"))));
                    (a.name.clone(), cells, None)
                }),
            ));
        }

        if let Some(qa) = &self.qa {
            let m = &qa.metrics;
            md.push_str("## Question answering\n\n");
            let judge = m.judge_model.as_deref().map_or_else(|| "none (F1 only)".to_owned(), |j| format!("`{j}`"));
            let _ = writeln!(
                md,
                "A seeded sample of {} questions (seed {}), the same for every system; the answer model reads at most {} context tokens of each system's ranking. Answer model `{}`, judge {judge}. Every answer is in [`{QA_JSONL}`]({QA_JSONL}).\n",
                m.questions,
                m.seed,
                m.budgets.iter().map(usize::to_string).collect::<Vec<_>>().join(" or "),
                m.answer_model
            );
            md.push_str(
                "| system | budget | questions | F1 | judge accuracy | unparsed verdicts | context tokens |\n|---|---:|---:|---:|---:|---:|---:|\n",
            );
            let differences = m.systems.iter().any(|s| s.f1_difference.is_some() || s.judge_difference.is_some());
            for s in &m.systems {
                let accuracy = s.judge_accuracy.map_or_else(|| "–".to_owned(), |a| format!("{a:.3}"));
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.3} | {accuracy} | {} | {:.1} |",
                    cell(&s.name),
                    s.budget,
                    s.questions,
                    s.f1,
                    s.judge_unparsed,
                    s.mean_context_tokens
                );
            }
            md.push('\n');
            if differences {
                let _ = writeln!(
                    md,
                    "Against {} on the same questions and budget (95% paired bootstrap intervals):\n",
                    qa.metrics.baseline.as_deref().map_or_else(|| "the baseline".to_owned(), cell)
                );
                md.push_str("| system | budget | F1 difference | judge difference |\n|---|---:|---:|---:|\n");
                let show = |i: Option<crate::bootstrap::Interval>| {
                    i.map_or_else(|| "–".to_owned(), |i| format!("{:+.3} [{:+.3}, {:+.3}]", i.diff, i.low, i.high))
                };
                for s in m.systems.iter().filter(|s| s.f1_difference.is_some() || s.judge_difference.is_some()) {
                    let _ = writeln!(md, "| {} | {} | {} | {} |", cell(&s.name), s.budget, show(s.f1_difference), show(s.judge_difference));
                }
                md.push('\n');
            }
        }

        if !self.notes.is_empty() {
            md.push_str("## Notes\n\n");
            for n in &self.notes {
                let _ = writeln!(md, "- {n}");
            }
            md.push('\n');
        }
        while md.ends_with("\n\n") {
            md.pop();
        }
        md
    }

    /// Reads a `metrics.json` back.
    pub fn read_metrics(path: &Path) -> Result<MetricsFile> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
        serde_json::from_str(&text).map_err(|source| Error::Json { path: path.to_path_buf(), source })
    }
}

/// The field names of all agreements, in order.
fn sorted_fields(agreements: &[NamedAgreement]) -> Vec<String> {
    let mut k: Vec<String> = agreements.iter().flat_map(|a| a.agreement.fields.keys().cloned()).collect();
    k.sort();
    k.dedup();
    k
}

/// Escapes `|` so a cell cannot break the table.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn value_cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(x) if !(n.is_i64() || n.is_u64()) => format!("{x:.4}"),
            _ => n.to_string(),
        },
        serde_json::Value::String(s) => cell(s),
        other => cell(&other.to_string()),
    }
}

/// A markdown table: first column `first`, then `header`, then an optional trailing column.
fn table(
    first: &str,
    header: &[String],
    trailing: Option<&str>,
    rows: impl IntoIterator<Item = (String, Vec<Option<String>>, Option<String>)>,
) -> String {
    let mut out = format!("| {first} |");
    let mut rule = String::from("|---|");
    for h in header.iter().map(String::as_str).chain(trailing) {
        let _ = write!(out, " {} |", cell(h));
        rule.push_str("---:|");
    }
    out.push('\n');
    out.push_str(&rule);
    out.push('\n');
    for (name, cells, last) in rows {
        let _ = write!(out, "| {} |", cell(&name));
        for c in cells.iter().map(Option::as_deref).chain(trailing.map(|_| last.as_deref())) {
            let _ = write!(out, " {} |", c.map_or("–".to_string(), cell));
        }
        out.push('\n');
    }
    out.push('\n');
    out
}

/// Writes `bytes` to a temporary sibling of `path`, then renames it over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let file_name = path.file_name().map_or_else(Default::default, |n| n.to_string_lossy());
    let tmp = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        Error::Write { path: path.to_path_buf(), source }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn system() -> SystemMetrics {
        let mut s = SystemMetrics::new("bm25");
        for (b, r) in [("250", 0.5), ("1000", 0.7), ("4000", 0.9), ("500", 0.6)] {
            s.evidence_recall_at.insert(b.into(), r);
        }
        s.questions = 10;
        s.mean_context_tokens = 812.26;
        s
    }

    #[test]
    fn budgets_serialise_in_numeric_order() {
        let json = serde_json::to_string(&system()).unwrap();
        let i250 = json.find("\"250\"").unwrap();
        let i500 = json.find("\"500\"").unwrap();
        let i1000 = json.find("\"1000\"").unwrap();
        let i4000 = json.find("\"4000\"").unwrap();
        assert!(i250 < i500 && i500 < i1000 && i1000 < i4000, "{json}");
        // LongMemEval maps are absent unless set.
        assert!(!json.contains("recall_any_at"));
    }

    #[test]
    fn extra_is_flattened_and_round_trips() {
        let mut s = system();
        s.extra.insert("latency_ms_p50".into(), serde_json::json!(3.5));
        s.recall_any_at = Some(BTreeMap::from([("10".into(), 0.8), ("5".into(), 0.7)]));
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["latency_ms_p50"], 3.5);
        let back: SystemMetrics = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn markdown_has_tables_in_numeric_order_and_no_dates() {
        let report = Report {
            name: "t".into(),
            dataset: "d".into(),
            command: "memkit eval --recipe x.toml".into(),
            systems: vec![system()],
            agreements: vec![],
            qa: None,
            notes: vec!["tokens: o200k_base".into()],
        };
        let md = report.to_markdown();
        assert!(md.contains("| system | 250 | 500 | 1000 | 4000 | questions |"), "{md}");
        assert!(md.contains("| bm25 | 0.5000 | 0.6000 | 0.7000 | 0.9000 | 10 |"), "{md}");
        assert!(md.contains("| bm25 | 812.3 | 10 |"), "{md}");
        assert!(md.contains("memkit eval --recipe x.toml"));
        assert!(md.contains("- tokens: o200k_base"));
        assert_eq!(md, report.to_markdown());
        assert!(!md.contains("## Difference to"), "no baseline, no section");
    }

    #[test]
    fn differences_to_the_baseline_get_their_own_table_and_round_trip() {
        let mut other = system();
        other.name = "engine".into();
        let at = BTreeMap::from([("250".to_owned(), crate::bootstrap::Interval { diff: 0.1, low: 0.05, high: 0.15 })]);
        other.difference = Some(crate::Difference { baseline: "bm25".into(), at });
        let back: SystemMetrics = serde_json::from_value(serde_json::to_value(&other).unwrap()).unwrap();
        assert_eq!(back, other);
        let report = Report {
            name: "t".into(),
            dataset: "d".into(),
            command: "c".into(),
            systems: vec![system(), other],
            agreements: vec![],
            qa: None,
            notes: vec![],
        };
        let md = report.to_markdown();
        assert!(md.contains("## Difference to bm25"), "{md}");
        assert!(md.contains("| engine | +0.1000 [+0.0500, +0.1500] | – | – | – |"), "{md}");
        assert!(!md.contains("| bm25 | +"), "the baseline has no row: {md}");
    }
}
