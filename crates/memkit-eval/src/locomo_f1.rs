//! The official LoCoMo QA score, ported from `task_eval/evaluation.py` of
//! [snap-research/locomo](https://github.com/snap-research/locomo) (branch `code`, commit
//! `92286325`).
//!
//! Per question the official `eval_question_answering` does:
//!
//! | category | answer used | score |
//! |---|---|---|
//! | 1 (multi-hop) | as is | [`f1_multi`]: split both sides on `,`, mean over gold parts of the best prediction part |
//! | 2 (temporal), 4 (single-hop) | as is | [`f1_score`] |
//! | 3 (open-domain) | `answer.split(';')[0].strip()` | [`f1_score`] |
//! | 5 (adversarial) | ignored | 1 if the lowercased prediction contains `no information available` or `not mentioned`, else 0 |
//!
//! [`f1_score`] is token F1 over [`normalize_answer`]d, Porter-stemmed tokens (NLTK's stemmer,
//! [`memkit_text::porter`]). Normalisation follows the official order: drop `,`, lowercase, drop ASCII
//! punctuation (`string.punctuation`), replace the words `a`, `an`, `the` **and `and`** by a space,
//! collapse whitespace. Whitespace is Python's `str.split()` set (Unicode White_Space plus the
//! ASCII separators U+001C..U+001F). Answers that LoCoMo stores as integers are scored as their
//! decimal text, as the official `str(answer)` does ([`answer_text`]).
//!
//! `tests/locomo_f1_golden.rs` checks 310 (prediction, answer, category) triples against the
//! official Python code within 1e-9.
//!
//! ```
//! use memkit_eval::locomo_f1::{qa_score, f1_score};
//! assert_eq!(f1_score("The painting", "paintings"), 1.0);
//! assert_eq!(qa_score("Not mentioned in the chat.", "", 5).unwrap(), 1.0);
//! assert_eq!(qa_score("pottery, hiking", "hiking, pottery, camping", 1).unwrap(), 2.0 / 3.0);
//! ```

pub use memkit_text::f1::{f1_score, is_python_space, normalize_answer};

use crate::{Error, Result};

/// The official multi-answer `f1`: both sides split on `,`; the mean over gold parts of the best
/// [`f1_score`] of any prediction part.
pub fn f1_multi(prediction: &str, ground_truth: &str) -> f64 {
    let predictions: Vec<&str> = prediction.split(',').map(|p| p.trim_matches(is_python_space)).collect();
    let golds: Vec<&str> = ground_truth.split(',').map(|g| g.trim_matches(is_python_space)).collect();
    let total: f64 = golds.iter().map(|g| predictions.iter().map(|p| f1_score(p, g)).fold(f64::NEG_INFINITY, f64::max)).sum();
    total / golds.len() as f64
}

/// The phrases that make a category-5 (adversarial) prediction count as a correct abstention.
pub const ABSTENTION_PHRASES: [&str; 2] = ["no information available", "not mentioned"];

/// The official per-question score for a LoCoMo QA item of `category` (1..=5). `answer` is the
/// gold answer as text (see [`answer_text`]); it is ignored for category 5.
pub fn qa_score(prediction: &str, answer: &str, category: u8) -> Result<f64> {
    Ok(match category {
        1 => f1_multi(prediction, answer),
        2 | 4 => f1_score(prediction, answer),
        3 => {
            let first = answer.split(';').next().unwrap_or("");
            f1_score(prediction, first.trim_matches(is_python_space))
        }
        5 => {
            let lower = prediction.to_lowercase();
            let abstains = ABSTENTION_PHRASES.iter().any(|p| lower.contains(p));
            if abstains { 1.0 } else { 0.0 }
        }
        other => return Err(Error::UnknownCategory(other)),
    })
}

/// A LoCoMo `answer` value as the official code sees it (`str(answer)`): strings as they are,
/// integers (a few temporal answers are years) in decimal.
pub fn answer_text(answer: &serde_json::Value) -> Result<String> {
    match answer {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        other => Err(Error::AnswerType(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn category_rules() {
        // Category 3 keeps the part before the first ';'.
        assert_eq!(qa_score("likely yes", "Likely yes; she said so", 3).unwrap(), 1.0);
        assert!(qa_score("likely yes", "Likely yes; she said so", 4).unwrap() < 1.0);
        // Category 1 splits on commas; a missing part costs recall.
        // Gold "a" normalises to nothing and scores 0; gold "b" is matched: mean 0.5.
        assert_eq!(qa_score("a, b", "b, a", 1).unwrap(), 0.5);
        assert_eq!(qa_score("tea, cake", "cake, tea", 1).unwrap(), 1.0);
        assert_eq!(qa_score("tea", "cake, tea", 1).unwrap(), 0.5);
        // Category 5 looks only at the prediction.
        assert_eq!(qa_score("NOT MENTIONED.", "anything", 5).unwrap(), 1.0);
        assert_eq!(qa_score("She never said.", "anything", 5).unwrap(), 0.0);
        assert!(matches!(qa_score("x", "x", 6), Err(Error::UnknownCategory(6))));
    }

    #[test]
    fn answers_as_text() {
        assert_eq!(answer_text(&serde_json::json!(2022)).unwrap(), "2022");
        assert_eq!(answer_text(&serde_json::json!("May")).unwrap(), "May");
        assert!(answer_text(&serde_json::Value::Null).is_err());
    }
}
