//! What a caller asks for ([`GenerateRequest`]) and what it gets back ([`Generation`]).

use serde::{Deserialize, Serialize};

pub use crate::reply::RepeatedItem;

/// The prompt of a request: text already rendered with the chat template, or token ids.
///
/// Text is tokenised with special tokens parsed (`<|im_start|>` becomes its control token).
/// After a shared prefix (see [`LlamaEngine::generate_batch`](super::LlamaEngine::generate_batch))
/// it is tokenised on its own and appended, so split prefix and suffix at a token boundary
/// such as the end of a chat turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prompt {
    /// Rendered text.
    Text(String),
    /// Token ids of the model's vocabulary, used as they are (no BOS is added).
    Tokens(Vec<i32>),
}

impl From<String> for Prompt {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl From<Vec<i32>> for Prompt {
    fn from(tokens: Vec<i32>) -> Self {
        Self::Tokens(tokens)
    }
}

/// How the next token is chosen, like candle's `generation::Sampling`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Sampling {
    /// The most likely token (deterministic).
    #[default]
    Greedy,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches `top_p`,
    /// scale logits by `1 / temperature`, draw with a generator seeded by `seed`.
    Temperature {
        /// Above 0; 1 leaves the distribution as it is.
        temperature: f32,
        /// In (0, 1]; 1 disables the nucleus cut.
        top_p: f32,
        /// Seed of the draw: the same seed and prompt give the same text.
        seed: u32,
    },
}

/// DRY ("don't repeat yourself") repetition control, as llama.cpp's `dry` sampler does it: a
/// token that would extend a sequence already generated earlier in the reply, beyond
/// `allowed_length` tokens, loses `multiplier · base^(length - allowed_length)` of its logit.
/// Matching restarts at the breakers `\n`, `:`, `"`, `*` (llama.cpp's defaults) and `-`, so a
/// JSON reply's repeated keys, punctuation and dates are free while a sentence copied from an
/// earlier record is not. Only the reply counts, not the prompt: copying from the conversation
/// is fine.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dry {
    /// Strength (llama.cpp's `--dry-multiplier`; 0 turns it off).
    pub multiplier: f32,
    /// Growth with the length of the repeat (`--dry-base`).
    pub base: f32,
    /// Repeats of up to this many tokens are free (`--dry-allowed-length`).
    pub allowed_length: i32,
}

impl Default for Dry {
    /// llama.cpp's recommended multiplier (0.8) and base (1.75), and repeats of up to 3 tokens
    /// free (llama.cpp: 2), so short values that records share (a place, a keyword) are not
    /// pushed to a worse spelling.
    fn default() -> Self {
        Self { multiplier: 0.8, base: 1.75, allowed_length: 3 }
    }
}

/// One generation request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateRequest {
    /// The prompt (after the shared prefix, if any).
    pub prompt: Prompt,
    /// Most tokens to generate; at least 1.
    pub max_tokens: usize,
    /// Greedy or temperature sampling.
    pub sampling: Sampling,
    /// Generation ends when the text contains one of these; the text is cut before it.
    pub stop: Vec<String>,
    /// Constrains the output to JSON that validates against this schema (llguidance). Unless
    /// the schema sets llguidance's `x-guidance` options, whitespace between JSON tokens is
    /// limited as in llama.cpp's JSON grammars. Strings without `maxLength` are unbounded: a
    /// weak model can fill `max_tokens` inside one, and the text is then cut-off JSON.
    pub json_schema: Option<serde_json::Value>,
    /// Repetition control (none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry: Option<Dry>,
    /// Ends a JSON reply at its first array item that nearly repeats an earlier one (none by
    /// default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at_repeat: Option<RepeatedItem>,
}

impl GenerateRequest {
    /// A greedy request of at most 256 tokens, without stop strings or schema.
    pub fn new(prompt: impl Into<Prompt>) -> Self {
        Self {
            prompt: prompt.into(),
            max_tokens: 256,
            sampling: Sampling::Greedy,
            stop: Vec::new(),
            json_schema: None,
            dry: None,
            end_at_repeat: None,
        }
    }

    /// Sets [`Self::max_tokens`].
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: usize) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Sets [`Self::sampling`].
    #[must_use]
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Sets [`Self::stop`].
    #[must_use]
    pub fn with_stop(mut self, stop: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.stop = stop.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`Self::dry`].
    #[must_use]
    pub fn with_dry(mut self, dry: Dry) -> Self {
        self.dry = Some(dry);
        self
    }

    /// Sets [`Self::end_at_repeat`].
    #[must_use]
    pub fn with_end_at_repeat(mut self, rule: RepeatedItem) -> Self {
        self.end_at_repeat = Some(rule);
        self
    }

    /// Sets [`Self::json_schema`].
    #[must_use]
    pub fn with_json_schema(mut self, schema: serde_json::Value) -> Self {
        self.json_schema = Some(schema);
        self
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-generation token (for JSON: the document was complete).
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The text reached one of the request's stop strings.
    StopString,
    /// A JSON array item repeated an earlier one ([`GenerateRequest::end_at_repeat`]): the text
    /// ends after the item before it, closed.
    Repeat,
}

/// Wall-clock time spent on a request, in milliseconds.
///
/// In a batch, prefill covers the shared prefix (computed once for all requests) and the
/// prompt prefill of the request's chunk; decode covers the batched steps the request took
/// part in, whose time other requests of the chunk share. Sampling time is included.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Timings {
    /// Evaluating the prompt (and sampling the first token).
    pub prefill_ms: f64,
    /// Generating the remaining tokens.
    pub decode_ms: f64,
}

/// The result of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    /// The completion, cut before a stop string; end-of-generation and control tokens are not
    /// rendered. Invalid UTF-8 (a character cut by `max_tokens`) becomes U+FFFD.
    pub text: String,
    /// Tokens the model read: the shared prefix plus the request's prompt.
    pub prompt_tokens: usize,
    /// Of those, the shared prefix's tokens that a previous call left in the cache, so that
    /// this call did not evaluate them (OpenAI's `usage.prompt_tokens_details.cached_tokens`).
    #[serde(default)]
    pub cached_tokens: usize,
    /// Tokens generated, not counting the end-of-generation token.
    pub completion_tokens: usize,
    /// Why generation ended.
    pub finish_reason: FinishReason,
    /// Where the time went.
    pub timings: Timings,
}
