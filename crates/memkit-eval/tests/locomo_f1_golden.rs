//! Official LoCoMo QA scores of 310 (prediction, answer, category) triples (fixture: see
//! tests/fixtures/README.md).

mod common;

use memkit_eval::locomo_f1::{answer_text, qa_score};

#[test]
fn scores_match_the_official_code() {
    let rows = common::jsonl("locomo_f1_golden.jsonl");
    assert!(rows.len() >= 300);
    let mut mismatches = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let prediction = row["prediction"].as_str().unwrap();
        let category = row["category"].as_u64().unwrap() as u8;
        let answer = answer_text(&row["answer"]).unwrap();
        let expected = row["score"].as_f64().unwrap();
        let got = qa_score(prediction, &answer, category).unwrap();
        if (got - expected).abs() > 1e-9 {
            mismatches.push(format!("line {}: cat {category} {prediction:?} vs {answer:?}: official {expected}, ours {got}", i + 1));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    // The fixture exercises every category and non-trivial scores.
    for c in 1..=5 {
        assert!(rows.iter().any(|r| r["category"] == c), "no category {c}");
    }
    let partial = rows.iter().filter(|r| (0.0..1.0).contains(&r["score"].as_f64().unwrap()) && r["score"] != 0.0).count();
    assert!(partial >= 50, "only {partial} partial scores");
}
