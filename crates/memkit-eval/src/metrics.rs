//! The figures of one system on one dataset ([`SystemMetrics`], [`CategoryMetrics`]), and the
//! order reports and plots list them in: numeric keys (budgets, `k`, categories) in numeric
//! order, other keys after them in text order.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

/// Serialises a string-keyed map with numeric keys in numeric order, other keys after them.
fn numeric_order<S: Serializer, V: Serialize>(map: &BTreeMap<String, V>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(sorted_entries(map))
}

fn numeric_order_opt<S: Serializer>(map: &Option<BTreeMap<String, f64>>, s: S) -> Result<S::Ok, S::Error> {
    match map {
        Some(m) => numeric_order(m, s),
        None => s.serialize_none(),
    }
}

/// Map entries with numeric keys first, in numeric order, then the rest in text order.
pub fn sorted_entries<V>(map: &BTreeMap<String, V>) -> Vec<(&String, &V)> {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_by(|(a, _), (b, _)| key_order(a, b));
    entries
}

fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.total_cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    }
}

pub(crate) fn sorted_keys<'a, V: 'a>(maps: impl Iterator<Item = &'a BTreeMap<String, V>>) -> Vec<String> {
    let mut keys: Vec<String> = maps.flat_map(|m| m.keys().cloned()).collect();
    keys.sort_by(|a, b| key_order(a, b));
    keys.dedup();
    keys
}

/// Figures of one question category (LoCoMo categories 1–5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoryMetrics {
    /// Questions of this category that entered the means.
    pub questions: usize,
    /// Mean evidence recall per budget, keyed `"250"` … `"4000"`.
    #[serde(default, serialize_with = "numeric_order")]
    pub evidence_recall_at: BTreeMap<String, f64>,
    /// Mean official LoCoMo F1, when QA was run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f1: Option<f64>,
    /// Any other per-category figure (judge accuracy, …).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// All figures of one system (one retrieval configuration) on one dataset.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemMetrics {
    /// Short system name, used in tables and legends.
    pub name: String,
    /// Mean evidence recall per budget, keyed by the budget in decimal (`"250"` … `"4000"`).
    #[serde(default, serialize_with = "numeric_order")]
    pub evidence_recall_at: BTreeMap<String, f64>,
    /// Mean tokens of context sent per query (o200k_base unless the notes say otherwise).
    pub mean_context_tokens: f64,
    /// Questions in the means.
    pub questions: usize,
    /// Figures per category, keyed by the category (`"1"` … `"5"` for LoCoMo).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_category: BTreeMap<String, CategoryMetrics>,
    /// LongMemEval recall_any@k keyed by k.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "numeric_order_opt")]
    pub recall_any_at: Option<BTreeMap<String, f64>>,
    /// LongMemEval recall_all@k keyed by k.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "numeric_order_opt")]
    pub recall_all_at: Option<BTreeMap<String, f64>>,
    /// LongMemEval nDCG@k keyed by k.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "numeric_order_opt")]
    pub ndcg_at: Option<BTreeMap<String, f64>>,
    /// The evidence-recall difference to the recipe's `baseline` system on the same questions,
    /// per budget, with its paired bootstrap interval (absent for the baseline itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difference: Option<Difference>,
    /// Any other figure (latency, F1, judge accuracy, embeddings saved, …), flattened into the
    /// system's JSON object.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A system's evidence recall minus the baseline's, question by question.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// The baseline system's name.
    pub baseline: String,
    /// Per budget (keyed like `evidence_recall_at`): the mean difference and its 95% paired
    /// bootstrap interval ([`crate::bootstrap`]).
    #[serde(serialize_with = "numeric_order")]
    pub at: BTreeMap<String, crate::bootstrap::Interval>,
}

impl SystemMetrics {
    /// Empty metrics for the system `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), ..Self::default() }
    }
}
