//! What an extraction cost, read from the window ledger `memkit extract` writes beside a records
//! file (`<records>.windows.jsonl`).
//!
//! Tokens are counted for every window: a window answered from a reply cache carries the usage
//! its replies had when they were made, so a re-run from the cache keeps the run's token cost.
//! Time is counted only for the windows that were timed: a window answered from the cache has no
//! time of its own (0 ms), and windows decoded together share their batch's wall time.

use std::path::Path;

use crate::{Error, Result};

/// The cost of the windows in one extraction ledger.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ExtractionCost {
    /// Windows in the ledger.
    pub windows: usize,
    /// Windows with a time of their own (not answered from a reply cache).
    pub timed_windows: usize,
    /// Mean wall seconds of a timed window (its share of its batch); `None` when none was timed.
    pub seconds_per_window: Option<f64>,
    /// Mean prompt tokens a window's requests read (re-asks included).
    pub prompt_tokens_per_window: f64,
    /// Mean tokens a window's requests generated (re-asks included).
    pub completion_tokens_per_window: f64,
}

/// The cost recorded in the window ledger beside `records`; `None` when there is no ledger or it
/// holds no window. A line that is not a ledger line is an error naming the file and line.
pub fn extraction_cost(records: &Path) -> Result<Option<ExtractionCost>> {
    let ledger = memkit_schema::window_ledger_path(records);
    match read_ledger(&ledger)? {
        Some(entries) => cost_of(&entries, &ledger),
        None => Ok(None),
    }
}

/// The lines of a window ledger, parsed, with their 1-based line numbers; `None` when there is
/// no ledger. A line that is not JSON is an error naming the file and line.
pub(crate) fn read_ledger(ledger: &Path) -> Result<Option<Vec<(usize, serde_json::Value)>>> {
    let text = match std::fs::read_to_string(ledger) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Read { path: ledger.to_owned(), source }),
    };
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let entry = serde_json::from_str(line)
            .map_err(|e| Error::Dataset(format!("{}:{}: not a window ledger line: {e}", ledger.display(), i + 1)))?;
        entries.push((i + 1, entry));
    }
    Ok(Some(entries))
}

/// The cost of a ledger's entries ([`read_ledger`]); `None` when it holds no window.
pub(crate) fn cost_of(entries: &[(usize, serde_json::Value)], ledger: &Path) -> Result<Option<ExtractionCost>> {
    let (mut windows, mut timed, mut seconds, mut prompt, mut completion) = (0usize, 0usize, 0.0f64, 0u64, 0u64);
    for (line, entry) in entries {
        let usage = &entry["extraction"]["usage"];
        let millis =
            usage["millis"].as_u64().ok_or_else(|| Error::Dataset(format!("{}:{line}: no extraction.usage.millis", ledger.display())))?;
        windows += 1;
        prompt += usage["prompt_tokens"].as_u64().unwrap_or(0);
        completion += usage["completion_tokens"].as_u64().unwrap_or(0);
        if millis > 0 {
            timed += 1;
            seconds += millis as f64 / entry["batch"].as_u64().unwrap_or(1).max(1) as f64 / 1000.0;
        }
    }
    Ok((windows > 0).then(|| ExtractionCost {
        windows,
        timed_windows: timed,
        seconds_per_window: (timed > 0).then(|| seconds / timed as f64),
        prompt_tokens_per_window: prompt as f64 / windows as f64,
        completion_tokens_per_window: completion as f64 / windows as f64,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(batch: u32, millis: u64, prompt: u64, completion: u64) -> String {
        format!(
            r#"{{"batch":{batch},"extraction":{{"usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion},"millis":{millis}}}}}}}"#
        )
    }

    /// Three windows: one of a batch of 2 that took 2,000 ms (its share 1 s), one from the cache
    /// (0 ms, 90 + 30 tokens), one alone that took 3,000 ms. Time over the 2 timed windows:
    /// (1 + 3) / 2 = 2 s. Tokens over all 3: prompt (100 + 90 + 110) / 3 = 100, completion
    /// (20 + 30 + 40) / 3 = 30.
    #[test]
    fn time_skips_cached_windows_and_splits_batches_while_tokens_count_every_window() {
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join("teacher.jsonl");
        assert_eq!(extraction_cost(&records).unwrap(), None, "no ledger");
        let ledger = memkit_schema::window_ledger_path(&records);
        std::fs::write(&ledger, [line(2, 2000, 100, 20), line(1, 0, 90, 30), line(1, 3000, 110, 40)].join("\n")).unwrap();
        let cost = extraction_cost(&records).unwrap().unwrap();
        assert_eq!((cost.windows, cost.timed_windows, cost.seconds_per_window), (3, 2, Some(2.0)));
        assert_eq!((cost.prompt_tokens_per_window, cost.completion_tokens_per_window), (100.0, 30.0));

        std::fs::write(&ledger, line(1, 0, 8, 4)).unwrap();
        let cost = extraction_cost(&records).unwrap().unwrap();
        assert_eq!(
            (cost.timed_windows, cost.seconds_per_window, cost.completion_tokens_per_window),
            (0, None, 4.0),
            "every window from the cache"
        );

        std::fs::write(&ledger, "").unwrap();
        assert_eq!(extraction_cost(&records).unwrap(), None, "an empty ledger");

        std::fs::write(&ledger, format!("{}\n{{\"batch\": 1}}", line(1, 5, 1, 1))).unwrap();
        let e = extraction_cost(&records).unwrap_err().to_string();
        assert!(e.contains("teacher.jsonl.windows.jsonl:2") && e.contains("millis"), "{e}");
    }
}
