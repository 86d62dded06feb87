//! Token F1 as the official LoCoMo scorer computes it (`task_eval/evaluation.py` of
//! [snap-research/locomo](https://github.com/snap-research/locomo), commit `92286325`):
//! normalise (drop `,`, lowercase, drop ASCII punctuation, replace the words `a`, `an`, `the`
//! and `and` by a space, collapse whitespace), stem every token with NLTK's Porter stemmer
//! ([`crate::porter`]), then F1 over the token multisets.
//!
//! memkit uses it wherever two sentences are compared for content: the LoCoMo QA score
//! (memkit-eval), record matching in extraction agreement, and near-duplicate records.
//!
//! ```
//! use memkit_text::f1::f1_score;
//! assert_eq!(f1_score("The painting", "paintings"), 1.0);
//! assert_eq!(f1_score("red red blue", "red blue"), 0.8);
//! ```

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;

use crate::porter;

/// Python's `str.isspace()`: Unicode White_Space plus the ASCII information separators.
pub fn is_python_space(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\u{1c}'..='\u{1f}')
}

fn articles() -> &'static Regex {
    static ARTICLES: OnceLock<Regex> = OnceLock::new();
    // `\b` is Unicode-aware in both the `regex` crate and Python's `regex` module.
    ARTICLES.get_or_init(|| Regex::new(r"\b(a|an|the|and)\b").expect("static regex"))
}

/// The official `normalize_answer`.
pub fn normalize_answer(s: &str) -> String {
    let s = s.replace(',', "").to_lowercase();
    let s: String = s.chars().filter(|c| !c.is_ascii_punctuation()).collect();
    let s = articles().replace_all(&s, " ");
    s.split(is_python_space).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ")
}

fn stemmed_tokens(s: &str) -> Vec<String> {
    normalize_answer(s).split(' ').filter(|w| !w.is_empty()).map(porter::stem).collect()
}

/// The official `f1_score`: token F1 of stemmed, normalised tokens; 0 when nothing is shared.
pub fn f1_score(prediction: &str, ground_truth: &str) -> f64 {
    let prediction = stemmed_tokens(prediction);
    let ground_truth = stemmed_tokens(ground_truth);
    let mut gold: HashMap<&str, usize> = HashMap::new();
    for t in &ground_truth {
        *gold.entry(t).or_default() += 1;
    }
    let mut same = 0usize;
    for t in &prediction {
        if let Some(n) = gold.get_mut(t.as_str())
            && *n > 0
        {
            *n -= 1;
            same += 1;
        }
    }
    if same == 0 {
        return 0.0;
    }
    // Same operation order as the Python code, so the floats agree bit for bit.
    let precision = same as f64 / prediction.len() as f64;
    let recall = same as f64 / ground_truth.len() as f64;
    (2.0 * precision * recall) / (precision + recall)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_follows_the_official_order() {
        assert_eq!(normalize_answer("The cat, and a Dog!"), "cat dog");
        // "and" is removed only as a whole word; "an" inside "band" stays.
        assert_eq!(normalize_answer("Band Andes and"), "band andes");
        // Commas join digits (removed before punctuation): "1,000" -> "1000".
        assert_eq!(normalize_answer("1,000 miles"), "1000 miles");
        // Apostrophes are ASCII punctuation, the typographic one is not.
        assert_eq!(normalize_answer("Caroline's Mel’s"), "carolines mel’s");
        assert_eq!(normalize_answer("a\u{1f}b\u{a0}c"), "b c");
        assert_eq!(normalize_answer("  "), "");
    }

    #[test]
    fn f1_counts_shared_tokens_with_multiplicity() {
        assert_eq!(f1_score("", "x"), 0.0);
        assert_eq!(f1_score("x", ""), 0.0);
        assert_eq!(f1_score("red red blue", "red blue"), 0.8);
        // precision 1/2, recall 1/3 -> 0.4
        assert!((f1_score("red green", "red blue yellow") - 0.4).abs() < 1e-15);
        // stemming makes inflections match
        assert_eq!(f1_score("running dogs", "run dog"), 1.0);
    }
}
