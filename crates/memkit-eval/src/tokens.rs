//! One fixed token count for every report.
//!
//! Token budgets (SPEC §7) and "tokens per query" only compare across systems and papers when
//! every figure is counted the same way. We count with **o200k_base**, the tokenizer of the
//! gpt-4o / gpt-4.1 family that DimMem's and LightMem's answer models use, so our figures sit on
//! the same scale as the papers' token numbers. Text is encoded as ordinary text: a special-token
//! string such as `<|endoftext|>` inside a dialogue counts as the plain characters it is.
//!
//! Building the BPE tables takes a noticeable fraction of a second, so the tokenizer is built once
//! per process (a `OnceLock`) and shared by every [`TokenCounter`].
//!
//! [`TokenCounter::Words13`] (whitespace words × 1.3, rounded up) is kept as a comparison point:
//! it is how the BM25 reference figures in SPEC §7 were measured.
//!
//! ```
//! use memkit_eval::TokenCounter;
//! let words = TokenCounter::Words13;
//! assert_eq!(words.count("Caroline went to the support group."), 8); // 6 words × 1.3 = 7.8
//! ```

use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

use crate::{Error, Result};

/// Counts tokens of retrieved context with one fixed scheme.
#[derive(Clone, Copy)]
pub enum TokenCounter {
    /// o200k_base BPE (gpt-4o / gpt-4.1): the figure every report uses.
    O200k(&'static CoreBPE),
    /// Whitespace-separated words × 1.3, rounded up: the SPEC §7 reference scheme.
    Words13,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

static O200K: OnceLock<std::result::Result<CoreBPE, String>> = OnceLock::new();

impl TokenCounter {
    /// The o200k_base counter, building the shared tokenizer on first use.
    pub fn o200k() -> Result<Self> {
        let built = O200K.get_or_init(|| {
            tracing::debug!("building the o200k_base tokenizer");
            tiktoken_rs::o200k_base().map_err(|e| e.to_string())
        });
        match built {
            Ok(bpe) => Ok(Self::O200k(bpe)),
            Err(message) => Err(Error::Tokenizer(message.clone())),
        }
    }

    /// Number of tokens in `text`.
    pub fn count(&self, text: &str) -> usize {
        match self {
            Self::O200k(bpe) => bpe.encode_ordinary(text).len(),
            Self::Words13 => {
                // Integer arithmetic: 10 × 1.3 in f64 is 13.000000000000002 and would round up to 14.
                let words = text.split_whitespace().count();
                (words * 13).div_ceil(10)
            }
        }
    }

    /// The scheme's name as reports print it: `o200k_base` or `words*1.3`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::O200k(_) => "o200k_base",
            Self::Words13 => "words*1.3",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words13_rounds_up_without_float_error() {
        let c = TokenCounter::Words13;
        assert_eq!(c.count(""), 0);
        assert_eq!(c.count("one"), 2); // 1.3 -> 2
        assert_eq!(c.count("a b c d e f g h i j"), 13); // exactly 13, not 14
        assert_eq!(c.count("  a\tb\nc  "), 4); // 3.9 -> 4
    }

    #[test]
    fn o200k_counts_known_strings() {
        let c = TokenCounter::o200k().unwrap();
        assert_eq!(c.name(), "o200k_base");
        assert_eq!(c.count(""), 0);
        // "hello" and " world" are one o200k_base token each.
        assert_eq!(c.count("hello world"), 2);
        // Special-token text is ordinary text, not one special token.
        assert!(c.count("<|endoftext|>") > 1);
        // The tokenizer is built once and shared.
        let (TokenCounter::O200k(a), TokenCounter::O200k(b)) = (c, TokenCounter::o200k().unwrap()) else { unreachable!() };
        assert!(std::ptr::eq(a, b));
    }
}
