//! HingeMem's adaptive stopping: how many of a ranked list to keep, by query type.
//!
//! Fixed top-k either floods the answer model with noise or misses evidence. HingeMem decides
//! the depth per query: a **recall** query ("how many times…", "list all…") keeps the head of the
//! list up to its knee, a **precision** query ("when did…") keeps only near-best hits, and a
//! **judgment** query ("would…", "did…?") keeps what the softmax singles out.
//!
//! The rules take any scored list (HingeMem's reranked hyperedges, DimMem's fused list), so they
//! work on scores divided by the list's maximum: RRF scores near 0.016 and BM25 scores near 12
//! are cut the same way. With `n_i = s_i / max`:
//!
//! - recall: the list ends at its elbow, the largest drop `n_{i-1} − n_i` when that drop exceeds
//!   `knee_drop` (0.1); of the rest keep `n_i > recall_floor` (0.5);
//! - precision: keep `n_i > precision_ratio` (0.8);
//! - judgment: `p = softmax(n / temperature)` (temperature 1), keep `p_i > judgment_ratio · max p`
//!   (0.8). This is the same as `n_i > 1 + temperature · ln 0.8 ≈ 0.777`.
//!
//! When the best score is not positive the ratios mean nothing, and only the best hit is kept.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::Hit;

/// What a question needs from retrieval (HingeMem's query analysis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryType {
    /// As many relevant units as possible (counting, listing).
    Recall,
    /// The single most relevant unit (one specific fact).
    Precision,
    /// Any relevant evidence to decide yes or no.
    Judgment,
}

/// Thresholds of the adaptive stops (HingeMem's values by default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StopConfig {
    /// Recall: the largest drop between consecutive normalised scores is the knee when it
    /// exceeds this.
    pub knee_drop: f32,
    /// Recall: keep normalised scores above this.
    pub recall_floor: f32,
    /// Precision: keep normalised scores above this.
    pub precision_ratio: f32,
    /// Judgment: keep softmax probabilities above this share of the largest one.
    pub judgment_ratio: f32,
    /// Judgment: softmax temperature over the normalised scores.
    pub temperature: f32,
}

impl Default for StopConfig {
    fn default() -> Self {
        StopConfig { knee_drop: 0.1, recall_floor: 0.5, precision_ratio: 0.8, judgment_ratio: 0.8, temperature: 1.0 }
    }
}

/// How many leading scores of a list sorted best first to keep.
///
/// Returns 0 only for an empty list.
pub fn cut_len(sorted_scores: &[f32], query_type: QueryType, config: &StopConfig) -> usize {
    let Some(&max) = sorted_scores.first() else {
        return 0;
    };
    if !(max > 0.0 && max.is_finite()) {
        return 1;
    }
    let norm: Vec<f32> = sorted_scores.iter().map(|s| s / max).collect();
    let prefix = |keep: &dyn Fn(usize, f32) -> bool| norm.iter().enumerate().take_while(|&(i, &n)| keep(i, n)).count();
    match query_type {
        QueryType::Recall => {
            // The elbow: the largest drop between neighbours (the first one on ties), if it
            // exceeds `knee_drop`; a list that only declines gently has no knee.
            let mut knee = norm.len();
            let mut largest = config.knee_drop;
            for i in 1..norm.len() {
                if norm[i - 1] - norm[i] > largest {
                    largest = norm[i - 1] - norm[i];
                    knee = i;
                }
            }
            prefix(&|i, n| i < knee && n > config.recall_floor)
        }
        QueryType::Precision => prefix(&|_, n| n > config.precision_ratio),
        QueryType::Judgment => {
            let t = config.temperature.max(f32::MIN_POSITIVE);
            // Softmax with the max subtracted; the normaliser cancels in p_i / max p.
            let weights: Vec<f32> = norm.iter().map(|n| ((n - 1.0) / t).exp()).collect();
            let total: f32 = weights.iter().sum();
            let p_max = weights[0] / total;
            prefix(&|i, _| weights[i] / total > config.judgment_ratio * p_max)
        }
    }
}

fn sort_key(h: &Hit) -> f32 {
    if h.score.is_nan() { f32::NEG_INFINITY } else { h.score }
}

/// Sorts hits best first; ties by lower `doc`, NaN scores last.
pub fn sort_hits(hits: &mut [Hit]) {
    hits.sort_by(|a, b| sort_key(b).partial_cmp(&sort_key(a)).unwrap_or(Ordering::Equal).then(a.doc.cmp(&b.doc)));
}

/// Sorts hits ([`sort_hits`]) and keeps the adaptive prefix for the query type.
pub fn adaptive_stop(hits: &[Hit], query_type: QueryType, config: &StopConfig) -> Vec<Hit> {
    let mut sorted = hits.to_vec();
    sort_hits(&mut sorted);
    let scores: Vec<f32> = sorted.iter().map(sort_key).collect();
    sorted.truncate(cut_len(&scores, query_type, config));
    sorted
}

/// Auxiliaries that open a yes/no question.
const YES_NO_OPENERS: &[&str] =
    &["am", "are", "can", "could", "did", "do", "does", "had", "has", "have", "is", "might", "should", "was", "were", "will", "would"];

/// Rule-based query type from the question text.
///
/// Judgment cues win first ("would", "likely", "might", "could", "do you think": inference and
/// counterfactuals), then recall cues
/// ("how many", "list", "what are all", "which … have", plural "what kinds/activities/…"), then a
/// yes/no opener ("did", "is", …) is judgment; every other question asks for one specific fact
/// (precision).
pub fn classify_query(question: &str) -> QueryType {
    let lower = question.to_lowercase();
    let words = crate::text::tokens(&lower);
    let has = |phrase: &str| contains_phrase(&words, phrase);
    let first = words.first().map(String::as_str).unwrap_or("");

    let judgment_cue =
        ["would", "likely", "might", "could", "potentially", "probably", "do you think", "is it possible"].iter().any(|p| has(p));
    if judgment_cue {
        return QueryType::Judgment;
    }
    let recall_cue =
        ["how many", "how often", "how many times", "list", "what are all", "all the", "what are", "in what ways"].iter().any(|p| has(p))
            || (first == "which" && ["have", "has", "did"].iter().any(|w| has(w)))
            || (first == "what"
                && ["kinds", "types", "activities", "things", "events", "books", "places", "items", "hobbies"]
                    .iter()
                    .any(|w| words.get(1).is_some_and(|x| x == w)));
    if recall_cue {
        return QueryType::Recall;
    }
    if YES_NO_OPENERS.contains(&first) {
        return QueryType::Judgment;
    }
    QueryType::Precision
}

fn contains_phrase(words: &[String], phrase: &str) -> bool {
    let parts: Vec<&str> = phrase.split(' ').collect();
    words.windows(parts.len()).any(|w| w.iter().zip(&parts).all(|(a, b)| a == b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(scores: &[f32], qt: QueryType) -> usize {
        cut_len(scores, qt, &StopConfig::default())
    }

    #[test]
    fn recall_cuts_at_the_elbow() {
        // Normalised: 1.0, 0.95, 0.9, 0.6 → the drop 0.9→0.6 (0.3) is the knee: keep 3.
        assert_eq!(cut(&[10.0, 9.5, 9.0, 6.0, 5.9], QueryType::Recall), 3);
        // No drop above 0.1; the floor 0.5 stops it: 1.0 .92 .84 .76 .68 .60 .52 | .44
        let gentle: Vec<f32> = (0..10).map(|i| 1.0 - 0.08 * i as f32).collect();
        assert_eq!(cut(&gentle, QueryType::Recall), 7);
        // A knee right after the top keeps one.
        assert_eq!(cut(&[1.0, 0.7, 0.69], QueryType::Recall), 1);
        // Drops 0.15, 0.05, 0.25, 0.05: the largest (before 0.55) is the elbow, not the first
        // drop above 0.1 → keep 3.
        assert_eq!(cut(&[1.0, 0.85, 0.8, 0.55, 0.5], QueryType::Recall), 3);
    }

    #[test]
    fn precision_keeps_above_eighty_percent_of_max() {
        // Normalised 1.0, 0.9, 0.81, 0.8 (not strictly above), 0.5.
        assert_eq!(cut(&[0.5, 0.45, 0.405, 0.4, 0.25], QueryType::Precision), 3);
    }

    #[test]
    fn judgment_keeps_the_softmax_head() {
        // n = 1.0, 0.8, 0.77: p_i / p_max = e^(n−1) = 1, 0.8187, 0.7945 → keep 2 (> 0.8).
        assert_eq!(cut(&[2.0, 1.6, 1.54], QueryType::Judgment), 2);
        let cfg = StopConfig { temperature: 0.1, ..Default::default() };
        // Sharper softmax: e^(−0.2/0.1) = 0.135 → keep 1.
        assert_eq!(cut_len(&[2.0, 1.6], QueryType::Judgment, &cfg), 1);
    }

    #[test]
    fn degenerate_lists() {
        assert_eq!(cut(&[], QueryType::Recall), 0);
        assert_eq!(cut(&[0.0, 0.0], QueryType::Precision), 1);
        assert_eq!(cut(&[-1.0, -2.0], QueryType::Recall), 1);
    }

    #[test]
    fn adaptive_stop_sorts_first() {
        let hits = [Hit { doc: 3, score: 0.5 }, Hit { doc: 1, score: 1.0 }, Hit { doc: 2, score: 0.95 }, Hit { doc: 0, score: f32::NAN }];
        let kept = adaptive_stop(&hits, QueryType::Precision, &StopConfig::default());
        assert_eq!(kept.iter().map(|h| h.doc).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn classifier_rules() {
        use QueryType::*;
        let cases = [
            ("How many times has Melanie gone to the beach?", Recall),
            ("What activities does Melanie partake in?", Recall),
            ("List the books Caroline read.", Recall),
            ("Which cities have they visited?", Recall),
            ("What are Melanie's pets' names?", Recall),
            ("When did Caroline go to the LGBTQ support group?", Precision),
            ("Where did Melanie camp?", Precision),
            ("Who gave the user the painting?", Precision),
            ("What is Caroline's identity?", Precision),
            ("Would Caroline still want to pursue counseling?", Judgment),
            ("Is it likely that Melanie owns a dog?", Judgment),
            ("Do you think Caroline is an ally?", Judgment),
            ("Did Melanie go camping in July?", Judgment),
        ];
        for (q, want) in cases {
            assert_eq!(classify_query(q), want, "{q}");
        }
    }
}
