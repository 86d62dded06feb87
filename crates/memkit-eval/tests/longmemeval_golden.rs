//! LongMemEval's official evaluate_retrieval / evaluate_retrieval_turn2session on 300 random
//! rankings (fixture: see tests/fixtures/README.md).

mod common;

use memkit_eval::retrieval::{LONGMEMEVAL_KS, LongMemEvalScores, evaluate_retrieval, evaluate_retrieval_turn2session};

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

fn check(got: LongMemEvalScores, expected: &serde_json::Value, what: &str, errors: &mut Vec<String>) {
    let e: Vec<f64> = expected.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let g = [got.recall_any, got.recall_all, got.ndcg_any];
    if g.iter().zip(&e).any(|(a, b)| (a - b).abs() > 1e-9) {
        errors.push(format!("{what}: official {e:?}, ours {g:?}"));
    }
}

#[test]
fn scores_match_the_official_code() {
    let rows = common::jsonl("longmemeval_retrieval_golden.jsonl");
    assert_eq!(rows.len(), 300);
    let mut errors = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let corpus_ids = strings(&row["corpus_ids"]);
        let correct = strings(&row["correct_docs"]);
        let rankings: Vec<usize> = row["rankings"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        for k in LONGMEMEVAL_KS {
            let key = k.to_string();
            check(
                evaluate_retrieval(&rankings, &correct, &corpus_ids, k),
                &row["turn"][&key],
                &format!("line {} turn @{k}", i + 1),
                &mut errors,
            );
            check(
                evaluate_retrieval_turn2session(&rankings, &correct, &corpus_ids, k),
                &row["turn2session"][&key],
                &format!("line {} turn2session @{k}", i + 1),
                &mut errors,
            );
        }
    }
    assert!(errors.is_empty(), "{} mismatches:\n{}", errors.len(), errors.join("\n"));
}
