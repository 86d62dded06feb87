//! Extraction ledgers beside record files: extraction cost, grounding, and agreement between
//! extractors.

use std::collections::BTreeMap;

use memkit_schema::MemoryRecord;
use serde_json::json;

use crate::recipe::{RecordSource, SystemSpec};
use crate::{Error, Result, SystemMetrics};

/// For a records file: how many of its records belong to no evaluated dialogue (skipped, with a
/// warning); and for records written by `memkit extract` with a model, what extraction cost
/// ([`extraction_cost`](crate::cost::extraction_cost): wall seconds per timed window, completion
/// tokens per window), read from the window ledger next to the records file
/// (`<file>.windows.jsonl`), when there is one. With several record files, the figures are the
/// first file's.
pub(super) fn extraction_figures(system: &SystemSpec, dialogues: &[&str], metrics: &mut SystemMetrics) -> Result<()> {
    let Some(path) = system.record_sources().iter().find_map(|s| match s {
        RecordSource::File(path) => Some(path),
        _ => None,
    }) else {
        return Ok(());
    };
    // Records of dialogues this run does not evaluate are skipped: count them and say so.
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.clone(), source })?;
    let mut outside = 0usize;
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let record: MemoryRecord =
            serde_json::from_str(line).map_err(|e| Error::Dataset(format!("{}:{}: not a memory record: {e}", path.display(), i + 1)))?;
        outside += usize::from(!dialogues.iter().any(|d| record.pointer.belongs_to(d)));
    }
    if outside > 0 {
        tracing::warn!(system = system.name(), file = %path.display(), records = outside, "records of dialogues outside this evaluation: skipped");
    }
    metrics.extra.insert("records_outside_dataset".into(), json!(outside));
    // The window ledger, read once for the cost and for what cleaning did.
    let ledger = memkit_schema::window_ledger_path(path);
    let Some(entries) = crate::cost::read_ledger(&ledger)? else { return Ok(()) };
    if let Some(cost) = crate::cost::cost_of(&entries, &ledger)? {
        metrics.extra.insert("extraction_windows".into(), json!(cost.windows));
        if let Some(seconds) = cost.seconds_per_window {
            metrics.extra.insert("extraction_s_per_window".into(), json!(seconds));
        }
        metrics.extra.insert("extraction_tokens_per_window".into(), json!(cost.completion_tokens_per_window));
    }
    let mut empty = 0usize;
    let mut grounding: BTreeMap<String, usize> = BTreeMap::new();
    for (_, entry) in &entries {
        let extraction = &entry["extraction"];
        empty += usize::from(extraction["records"].as_array().is_none_or(Vec::is_empty));
        for decision in extraction["grounding"].as_array().into_iter().flatten() {
            *grounding.entry(decision["decision"].as_str().unwrap_or("unknown").to_owned()).or_default() += 1;
        }
    }
    if !entries.is_empty() {
        metrics.extra.insert("windows_without_records".into(), json!(empty));
        // What grounding did with the model's records (absent: written without grounding).
        if !grounding.is_empty() {
            metrics.extra.insert("grounding".into(), json!(grounding));
        }
    }
    Ok(())
}

/// One window of a `memkit extract` window ledger, as far as agreement needs it.
#[derive(serde::Deserialize)]
struct LedgerLine {
    extraction: LedgerExtraction,
}

#[derive(serde::Deserialize)]
struct LedgerExtraction {
    window_id: String,
    records: Vec<memkit_schema::ExtractedMemory>,
    #[serde(default)]
    errors: Vec<memkit_schema::RecordError>,
    #[serde(default)]
    raw: String,
}

/// Per window: the records, or `None` when the reply did not parse as a whole.
fn read_window_ledger(records_file: &std::path::Path) -> Result<BTreeMap<String, Option<Vec<memkit_schema::ExtractedMemory>>>> {
    let path = memkit_schema::window_ledger_path(records_file);
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Read { path: path.clone(), source })?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let entry: LedgerLine = serde_json::from_str(line)
            .map_err(|e| Error::Dataset(format!("{}:{}: not a window ledger line: {e}", path.display(), i + 1)))?;
        let e = entry.extraction;
        // Unparsable = the reply was not whole (not JSON, broken, cut off): an error of that kind
        // in the ledger, or, for ledgers written before errors had kinds, in the raw reply.
        // Records dropped for pointing outside the window are no parse failure.
        let whole = |errors: &[memkit_schema::RecordError]| errors.iter().any(|err| err.kind.is_whole_reply());
        let whole_failure = whole(&e.errors) || (!e.raw.is_empty() && whole(&memkit_schema::parse_extractor_output(&e.raw).errors));
        out.insert(e.window_id, (!whole_failure).then_some(e.records));
    }
    Ok(out)
}

/// Agreement of one recipe entry: the candidate's windows against the reference's, on the
/// windows both extracted. A window whose reference reply did not parse has no known target: it
/// is left out and counted (`reference_unparsable_windows`), never scored as "the reference
/// found nothing".
pub(super) fn agreement_of(spec: &crate::recipe::AgreementSpec) -> Result<crate::report::NamedAgreement> {
    let reference = read_window_ledger(&spec.reference)?;
    let candidate = read_window_ledger(&spec.candidate)?;
    let shared = || reference.iter().filter_map(|(id, r)| Some((r, candidate.get(id)?)));
    let unparsable = shared().filter(|(r, _)| r.is_none()).count();
    let pairs: Vec<crate::agreement::WindowPair<'_>> =
        shared().filter_map(|(r, c)| Some(crate::agreement::WindowPair { reference: r.as_deref()?, candidate: c.as_deref() })).collect();
    if pairs.is_empty() {
        return Err(Error::Dataset(format!(
            "agreement {:?}: {} and {} share no window",
            spec.name,
            memkit_schema::window_ledger_path(&spec.reference).display(),
            memkit_schema::window_ledger_path(&spec.candidate).display()
        )));
    }
    let mut agreement = crate::agreement::agreement(&pairs);
    agreement.reference_unparsable_windows = unparsable;
    Ok(crate::report::NamedAgreement { name: spec.name.clone(), agreement })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::AgreementSpec;

    fn memory(source_id: u32, content: &str) -> serde_json::Value {
        serde_json::json!({"source_id": source_id, "source_speaker": "Ann", "content": content,
            "dimension": {"memory_type": "fact", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
    }

    /// A window ledger line as `memkit extract` writes it.
    fn line(window: &str, kept: &[serde_json::Value], raw: &str, errors: serde_json::Value) -> String {
        serde_json::json!({"extractor": "m", "batch": 2, "extraction": {"window_id": window, "records": kept, "errors": errors,
            "raw": raw, "usage": {"prompt_tokens": 10, "completion_tokens": 4, "millis": 3000}}})
        .to_string()
    }

    #[test]
    fn agreement_reads_window_ledgers_and_only_unparsable_replies_count_as_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let (teacher, student) = (dir.path().join("teacher.jsonl"), dir.path().join("student.jsonl"));
        let cat = memory(4, "Ann adopted a cat named Tom");
        let paris = memory(5, "Ann moved to Paris in May");
        let reply = |records: &[&serde_json::Value]| serde_json::json!({"memories": records}).to_string();
        std::fs::write(
            memkit_schema::window_ledger_path(&teacher),
            [
                line("d/w0", &[cat.clone(), paris.clone()], &reply(&[&cat, &paris]), serde_json::json!([])),
                line("d/w1", std::slice::from_ref(&cat), &reply(&[&cat]), serde_json::json!([])),
            ]
            .join("\n"),
        )
        .unwrap();
        // w0: one record kept, one dropped for pointing at a context message (not a parse
        // failure, whatever its index says); w1: a reply that is not JSON at all.
        let context = memory(1, "Ann said hello");
        let dropped = serde_json::json!([{"index": null, "reason": "source_id 1 is a context-only message (1..=3)", "raw": ""}]);
        let lines = [
            line("d/w0", std::slice::from_ref(&cat), &reply(&[&cat, &context]), dropped),
            line("d/w1", &[], "I cannot", serde_json::json!([])),
        ];
        std::fs::write(memkit_schema::window_ledger_path(&student), lines.join("\n")).unwrap();

        let spec = AgreementSpec { name: "s vs t".into(), reference: teacher.clone(), candidate: student.clone() };
        let got = agreement_of(&spec).unwrap().agreement;
        assert_eq!((got.windows, got.json_validity), (2, 0.5));
        assert_eq!((got.reference_records, got.candidate_records, got.matched), (3, 1, 1));

        // Extraction cost: each window gets half of its batch's 3 s.
        let system: SystemSpec =
            toml::from_str(&format!("kind = \"engine\"\nname = \"x\"\nrecords = {{ file = {:?} }}", student.display().to_string()))
                .unwrap();
        // The records file: one record of the evaluated dialogue `d`, one of another.
        let record = |window: &str| serde_json::json!({"id": window, "content": "x", "type": "fact", "pointer": {"window_id": window}});
        std::fs::write(&student, format!("{}\n{}\n", record("d/w0"), record("elsewhere/w3"))).unwrap();
        let mut metrics = SystemMetrics::new("x");
        extraction_figures(&system, &["d"], &mut metrics).unwrap();
        assert_eq!(metrics.extra["records_outside_dataset"], serde_json::json!(1));
        assert_eq!(metrics.extra["extraction_s_per_window"], serde_json::json!(1.5));
        assert_eq!(metrics.extra["windows_without_records"], serde_json::json!(1));

        let missing = AgreementSpec { name: "none".into(), reference: teacher, candidate: dir.path().join("nothing.jsonl") };
        assert!(agreement_of(&missing).is_err());
    }

    #[test]
    fn a_window_whose_reference_did_not_parse_is_left_out_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (teacher, student) = (dir.path().join("teacher.jsonl"), dir.path().join("student.jsonl"));
        let cat = memory(4, "Ann adopted a cat named Tom");
        let reply = |records: &[&serde_json::Value]| serde_json::json!({"memories": records}).to_string();
        let teacher_lines = [
            line("d/w0", std::slice::from_ref(&cat), &reply(&[&cat]), serde_json::json!([])),
            // The teacher's reply was cut off: its target for w1 is unknown.
            line("d/w1", &[], r#"{"memories": [{"source_id": 4, "content": "Ann ha"#, serde_json::json!([])),
        ];
        std::fs::write(memkit_schema::window_ledger_path(&teacher), teacher_lines.join("\n")).unwrap();
        let paris = memory(5, "Ann moved to Paris in May");
        let student_lines = [
            line("d/w0", std::slice::from_ref(&cat), &reply(&[&cat]), serde_json::json!([])),
            line("d/w1", std::slice::from_ref(&paris), &reply(&[&paris]), serde_json::json!([])),
        ];
        std::fs::write(memkit_schema::window_ledger_path(&student), student_lines.join("\n")).unwrap();
        let spec = AgreementSpec { name: "s vs t".into(), reference: teacher, candidate: student };
        let got = agreement_of(&spec).unwrap().agreement;
        // Only w0 is compared: 1 of 1 matched. Scored as an empty reference, w1's record would
        // have been a false positive (precision 0.5).
        assert_eq!((got.windows, got.reference_unparsable_windows), (1, 1));
        assert_eq!((got.candidate_records, got.matched, got.precision, got.f1), (1, 1, 1.0, 1.0));
    }
}
