//! Adaptive stopping: properties over random score lists, and the query-type classifier on the
//! LoCoMo questions.

mod common;

use memkit_engine::Hit;
use memkit_engine::stopping::{QueryType, StopConfig, adaptive_stop, classify_query, cut_len};
use proptest::prelude::*;

const TYPES: [QueryType; 3] = [QueryType::Recall, QueryType::Precision, QueryType::Judgment];

fn sorted_desc(mut v: Vec<f32>) -> Vec<f32> {
    v.sort_by(|a, b| b.total_cmp(a));
    v
}

proptest! {
    #[test]
    fn cuts_keep_a_non_empty_prefix(scores in prop::collection::vec(0.0f32..100.0, 1..40)) {
        let scores = sorted_desc(scores);
        for qt in TYPES {
            let n = cut_len(&scores, qt, &StopConfig::default());
            prop_assert!(n >= 1 && n <= scores.len());
        }
    }

    #[test]
    fn cuts_ignore_the_score_scale(scores in prop::collection::vec(0.01f32..1.0, 1..40), exp in -8i32..8) {
        // Powers of two scale floats exactly, so the normalised scores are identical.
        let scores = sorted_desc(scores);
        let scaled: Vec<f32> = scores.iter().map(|s| s * 2f32.powi(exp)).collect();
        for qt in TYPES {
            prop_assert_eq!(cut_len(&scores, qt, &StopConfig::default()), cut_len(&scaled, qt, &StopConfig::default()));
        }
    }

    #[test]
    fn stricter_ratios_keep_no_more(scores in prop::collection::vec(0.0f32..1.0, 1..40)) {
        let scores = sorted_desc(scores);
        let loose = StopConfig { precision_ratio: 0.5, ..Default::default() };
        let cfg = StopConfig::default();
        prop_assert!(cut_len(&scores, QueryType::Precision, &cfg) <= cut_len(&scores, QueryType::Precision, &loose));
        // Recall keeps only scores above half the max, so never more than precision at 0.5.
        prop_assert!(cut_len(&scores, QueryType::Recall, &cfg) <= cut_len(&scores, QueryType::Precision, &loose));
    }

    #[test]
    fn adaptive_stop_keeps_the_best(scores in prop::collection::vec(0.0f32..10.0, 1..30)) {
        let hits: Vec<Hit> = scores.iter().enumerate().map(|(doc, &score)| Hit { doc, score }).collect();
        for qt in TYPES {
            let kept = adaptive_stop(&hits, qt, &StopConfig::default());
            let min_kept = kept.iter().map(|h| h.score).fold(f32::INFINITY, f32::min);
            let dropped = hits.iter().filter(|h| !kept.iter().any(|k| k.doc == h.doc));
            for h in dropped {
                prop_assert!(h.score <= min_kept);
            }
        }
    }
}

#[test]
fn a_fused_rrf_list_is_cut_like_any_other() {
    // RRF scores of a list where three routes agree on two records, then a tail.
    let scores = [3.0 / 61.0, 3.0 / 62.0, 1.0 / 61.0, 1.0 / 62.0, 1.0 / 63.0];
    let hits: Vec<Hit> = scores.iter().enumerate().map(|(doc, &score)| Hit { doc, score }).collect();
    // Normalised 1, 0.984, 0.333, …: the elbow after two; precision too keeps two.
    assert_eq!(adaptive_stop(&hits, QueryType::Recall, &StopConfig::default()).len(), 2);
    assert_eq!(adaptive_stop(&hits, QueryType::Precision, &StopConfig::default()).len(), 2);
}

#[test]
fn locomo_question_types_classify_plausibly() {
    // counts[category][type]
    let mut counts = [[0usize; 3]; 6];
    for sample in common::locomo() {
        for qa in &sample.questions {
            let category = usize::from(qa.category.unwrap());
            let t = match classify_query(&qa.question) {
                QueryType::Recall => 0,
                QueryType::Precision => 1,
                QueryType::Judgment => 2,
            };
            counts[category][t] += 1;
        }
    }
    let share = |c: usize, t: usize| counts[c][t] as f64 / counts[c].iter().sum::<usize>() as f64;
    // Category 2 (temporal, "When did…") is precision; category 3 (open-domain, "Would…",
    // "Is it likely…") is judgment; multi-hop (1) has the most recall questions.
    assert!(share(2, 1) > 0.9, "{counts:?}");
    assert!(share(3, 2) > 0.5, "{counts:?}");
    assert!(share(1, 0) > share(4, 0), "{counts:?}");
}
