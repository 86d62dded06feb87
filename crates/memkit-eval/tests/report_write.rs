//! Writing a report folder and reading metrics.json back.

use std::collections::BTreeMap;

use memkit_eval::report::{METRICS_JSON, RECALL_SVG, REPORT_MD, TOKENS_SVG};
use memkit_eval::retrieval::{BUDGETS, EvidenceRecall, LONGMEMEVAL_KS, LongMemEvalMeans, evaluate_retrieval};
use memkit_eval::{CategoryMetrics, Report, SystemMetrics};

fn system(name: &str, shift: f64, tokens: f64) -> SystemMetrics {
    let mut s = SystemMetrics::new(name);
    for (i, b) in BUDGETS.iter().enumerate() {
        s.evidence_recall_at.insert(b.to_string(), (0.4 + shift + 0.08 * i as f64).min(1.0));
    }
    s.mean_context_tokens = tokens;
    s.questions = 1540;
    s
}

fn report() -> Report {
    let mut a = system("bm25-turns", 0.12, 3900.0);
    a.per_category.insert(
        "1".into(),
        CategoryMetrics { questions: 282, evidence_recall_at: a.evidence_recall_at.clone(), f1: Some(0.41), extra: Default::default() },
    );
    a.extra.insert("latency_ms_mean".into(), serde_json::json!(1.75));
    let mut b = system("dimension-fused", 0.2, 2600.0);
    let mut lme = LongMemEvalMeans::new(&LONGMEMEVAL_KS);
    let ids = ["s1", "answer_s2", "s3"];
    lme.add(|k| evaluate_retrieval(&[0, 1, 2], &["answer_s2"], &ids, k));
    b.recall_any_at = Some(lme.recall_any_at());
    b.recall_all_at = Some(lme.recall_all_at());
    b.ndcg_at = Some(lme.ndcg_at());
    Report {
        name: "locomo-demo".into(),
        dataset: "locomo10".into(),
        command: "memkit eval --recipe recipes/eval/locomo-bm25.toml".into(),
        systems: vec![a, b],
        agreements: vec![],
        qa: None,
        notes: vec!["tokens counted with o200k_base".into()],
    }
}

#[test]
fn write_then_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let report = report();
    let dir = report.write(tmp.path()).unwrap();
    assert_eq!(dir, tmp.path().join("locomo-demo"));
    for f in [REPORT_MD, METRICS_JSON, RECALL_SVG, TOKENS_SVG] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    // No temporary files are left behind.
    let names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 4, "{names:?}");

    let back = Report::read_metrics(&dir.join(METRICS_JSON)).unwrap();
    assert_eq!(back, report.metrics_file());

    // The exact top-level shape the runners and plots rely on.
    let raw: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(METRICS_JSON)).unwrap()).unwrap();
    let top: Vec<&String> = raw.as_object().unwrap().keys().collect();
    assert_eq!(top, ["dataset", "systems"]);
    let s0 = &raw["systems"][0];
    assert_eq!(s0["name"], "bm25-turns");
    assert_eq!(s0["questions"], 1540);
    assert_eq!(s0["mean_context_tokens"], 3900.0);
    assert_eq!(s0["latency_ms_mean"], 1.75);
    let budgets: Vec<&String> = s0["evidence_recall_at"].as_object().unwrap().keys().collect();
    assert_eq!(budgets, ["250", "500", "1000", "2000", "4000"]);
    assert!(s0.get("recall_any_at").is_none());
    let s1 = &raw["systems"][1];
    let ks: Vec<&String> = s1["ndcg_at"].as_object().unwrap().keys().collect();
    assert_eq!(ks, ["1", "3", "5", "10", "30", "50"]);
    assert_eq!(s1["recall_any_at"]["1"], 0.0);
    assert_eq!(s1["recall_any_at"]["3"], 1.0);

    let md = std::fs::read_to_string(dir.join(REPORT_MD)).unwrap();
    assert!(md.contains("memkit eval --recipe recipes/eval/locomo-bm25.toml"));
    assert!(md.contains("## recall_any@k"));
    assert!(md.contains("## Per category"));

    let svg = std::fs::read_to_string(dir.join(RECALL_SVG)).unwrap();
    assert!(svg.starts_with("<svg"));
    for label in ["bm25-turns", "dimension-fused", "4000", "evidence recall"] {
        assert!(svg.contains(label), "{label} not in the recall plot");
    }
    let svg = std::fs::read_to_string(dir.join(TOKENS_SVG)).unwrap();
    assert!(svg.contains("dimension-fused") && svg.contains("3900"));
}

#[test]
fn rewriting_is_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let report = report();
    let dir = report.write(tmp.path()).unwrap();
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let first: BTreeMap<&str, Vec<u8>> = [REPORT_MD, METRICS_JSON, RECALL_SVG, TOKENS_SVG].into_iter().map(|f| (f, read(f))).collect();
    report.write(tmp.path()).unwrap();
    for (f, bytes) in first {
        assert_eq!(bytes, read(f), "{f} changed on rewrite");
    }
}

#[test]
fn evidence_recall_feeds_system_metrics() {
    let mut acc = EvidenceRecall::new(&BUDGETS);
    let long = ["D1:1"];
    let short = ["D2:4"];
    let units: [(usize, &[&str]); 2] = [(300, &long), (100, &short)];
    acc.add(&units, &["D2:4"]);
    let mut s = SystemMetrics::new("x");
    s.evidence_recall_at = acc.recall_at();
    s.questions = acc.questions();
    s.mean_context_tokens = acc.list_tokens();
    assert_eq!(s.evidence_recall_at["250"], 0.0);
    assert_eq!(s.evidence_recall_at["500"], 1.0);
    assert_eq!(s.mean_context_tokens, 400.0);
}

#[test]
fn unwritable_folder_names_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let blocker = tmp.path().join("file");
    std::fs::write(&blocker, "").unwrap();
    let err = report().write(&blocker).unwrap_err();
    assert!(err.to_string().contains("file"), "{err}");
}

#[test]
fn agreements_round_trip_and_get_a_table() {
    use memkit_eval::agreement::{WindowPair, agreement};
    use memkit_eval::report::NamedAgreement;
    use memkit_schema::ExtractedMemory;

    let record = |id: u32, content: &str, kind: &str| -> ExtractedMemory {
        serde_json::from_value(serde_json::json!({
            "source_id": id, "content": content, "dimension": {"memory_type": kind, "keywords": ["x"]}
        }))
        .unwrap()
    };
    let teacher = vec![record(4, "Ann adopted a cat named Tom", "fact"), record(6, "Ann moved to Paris in May", "episodic")];
    let student = vec![record(4, "Ann adopted a cat called Tom", "fact")];
    let figures = agreement(&[
        WindowPair { reference: &teacher, candidate: Some(&student) },
        WindowPair { reference: &teacher[..1], candidate: None },
    ]);
    let mut report = report();
    report.agreements = vec![NamedAgreement { name: "student vs teacher".into(), agreement: figures.clone() }];
    let tmp = tempfile::tempdir().unwrap();
    let dir = report.write(tmp.path()).unwrap();
    let back = Report::read_metrics(&dir.join(METRICS_JSON)).unwrap();
    assert_eq!(back.agreements, report.agreements);
    assert_eq!((figures.windows, figures.matched, figures.reference_records), (2, 1, 3));
    assert_eq!(figures.json_validity, 0.5);
    let md = std::fs::read_to_string(dir.join(REPORT_MD)).unwrap();
    let row = md.lines().find(|l| l.starts_with("| student vs teacher |")).expect("an agreement row");
    assert!(row.contains("| 2 | 0.500 | 3 | 1 | 1.000 |"), "{row}");
}
