//! Leaf types of a model's reply, shared by every module of memkit-infer (generation, chat
//! models, the OpenAI client and server, extractors) and by the crates above: what a reply
//! cost ([`Usage`]) and the rule that ends a JSON reply at its first repeated item
//! ([`RepeatedItem`]). This module imports nothing of the crate.

use serde::{Deserialize, Serialize};

/// Tokens and time one reply (or one window's replies) took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens the model read (for a local batch: the shared prefix plus the window's prompt).
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Wall-clock milliseconds (for a local batch: prefill and the decode steps it shared).
    pub millis: u64,
    /// The reply stopped at its `max_tokens` limit, so it is incomplete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hit_max_tokens: bool,
}

impl Usage {
    /// The cost of two replies together (the second cut off makes the sum cut off).
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self {
            prompt_tokens: self.prompt_tokens + other.prompt_tokens,
            completion_tokens: self.completion_tokens + other.completion_tokens,
            millis: self.millis + other.millis,
            hit_max_tokens: self.hit_max_tokens || other.hit_max_tokens,
        }
    }
}

/// When a JSON reply's array item counts as a repeat: its string `field` has token F1 (LoCoMo's,
/// stemmed) of at least `min_f1` with that of an earlier object item of the same array. The
/// reply then ends after the item before it, its open arrays and objects closed (finish reason
/// `stop`): small models asked for a list loop, and a repeat is dropped anyway. In-process and
/// behind `memkit serve` (the request's `end_at_repeat`, a memkit extension other servers ignore).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepeatedItem {
    /// The string field compared (e.g. a record's `content`).
    pub field: String,
    /// Token F1 at which two items are one.
    pub min_f1: f64,
}
