//! DimMem's language-model steps, through a chat model (memkit-infer's [`ChatModel`]: a GGUF in
//! process or any OpenAI-compatible endpoint). Feature `llm`.
//!
//! - [`LlmQueryParser`] ([`query`]): fills a `ParsedQuery` from `prompts/query.j2`, falling
//!   back to the rule parser on an unusable reply.
//! - [`LlmConsolidator`] ([`update`]): decides merge, supersede or keep-both for a record pair
//!   from `prompts/update.j2`, behind the same [`Consolidator`](crate::update::Consolidator)
//!   trait as the rule decider, falling back to the rules on an unusable reply.
//! - [`LlmSegmenter`] ([`segment`]): HingeMem's boundaries from `prompts/boundary.j2`, behind
//!   the same [`Segmenter`](crate::hinge::Segmenter) trait as the rule segmenter, falling back
//!   to the rules for a piece whose reply is unusable.
//!
//! Each reply is decoded under a JSON schema, so a complete reply always deserialises; what the
//! model writes is then checked where a rule can check it, and every fallback is counted. A
//! backend failure is an error, never a silent fallback. Caching is the model's business: wrap
//! it (memkit-teacher's `CachedChat`) and re-runs are free.
//!
//! [`ChatModel`]: memkit_infer::chat::ChatModel

pub mod query;
pub mod segment;
pub mod update;

pub use query::{LlmQueryParser, ParserStats, decode_query, ground_time};
pub use segment::{LlmSegmenter, SegmenterStats, decode_boundaries};
pub use update::{ConsolidatorStats, LlmConsolidator, covers_both, decode_verdict};

use std::sync::{Arc, Mutex};

use memkit_infer::chat::{ChatModel, ChatRequest, Reply};
use memkit_prompt::Prompts;

use crate::{Error, Result};

/// What each language-model step holds: the model, the prompts it renders, the most tokens of
/// one reply, and its counters `S` (the step's public stats).
struct Step<S> {
    model: Arc<dyn ChatModel>,
    prompts: Prompts,
    max_tokens: usize,
    stats: Mutex<S>,
}

impl<S: Copy + Default> Step<S> {
    /// A step asking `model` with the embedded prompts.
    fn new(model: Arc<dyn ChatModel>, max_tokens: usize) -> Result<Self> {
        let prompts = Prompts::embedded().map_err(|e| Error::Prompt(e.to_string()))?;
        Ok(Self { model, prompts, max_tokens, stats: Mutex::new(S::default()) })
    }

    /// Updates the counters.
    fn count(&self, f: impl FnOnce(&mut S)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The counters so far.
    fn stats(&self) -> S {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One reply per request, in order, asked in groups of the model's
    /// [`ChatModel::parallel`] requests. A backend failure (or a model that answers the wrong
    /// number of requests) is an error.
    fn ask(&self, requests: &[ChatRequest]) -> Result<Vec<Reply>> {
        let mut out = Vec::with_capacity(requests.len());
        for group in requests.chunks(self.model.parallel().max(1)) {
            let replies = self.model.complete(group);
            if replies.len() != group.len() {
                return Err(Error::Model(format!("{}: {} replies to {} requests", self.model.id(), replies.len(), group.len())));
            }
            for reply in replies {
                out.push(reply.map_err(|e| Error::Model(format!("{}: {e}", self.model.id())))?);
            }
        }
        Ok(out)
    }

    /// The reply to one request.
    fn ask_one(&self, request: ChatRequest) -> Result<Reply> {
        Ok(self.ask(std::slice::from_ref(&request))?.remove(0))
    }
}

/// The builder methods every step shares, on a struct with a `step: Step<$stats>` field.
macro_rules! step_methods {
    ($stats:ty) => {
        /// Renders with `prompts` (a folder of overrides) instead of the embedded ones.
        #[must_use]
        pub fn with_prompts(mut self, prompts: memkit_prompt::Prompts) -> Self {
            self.step.prompts = prompts;
            self
        }

        /// Sets the most tokens of one reply.
        #[must_use]
        pub fn with_max_tokens(mut self, max_tokens: usize) -> Self {
            self.step.max_tokens = max_tokens.max(1);
            self
        }

        /// The model's id (`gguf:<file>`, `openai:<model>@<url>`).
        pub fn model_id(&self) -> &str {
            self.step.model.id()
        }

        /// What it has done so far.
        pub fn stats(&self) -> $stats {
            self.step.stats()
        }
    };
}
use step_methods;

/// A chat model that replies from a script, in order, and remembers what it was asked.
#[cfg(test)]
pub(crate) mod scripted {
    use std::sync::{Arc, Mutex};

    use memkit_infer::chat::{ChatModel, ChatRequest, Reply};
    use memkit_infer::reply::Usage;

    pub(crate) struct Scripted {
        replies: Mutex<Vec<(String, bool)>>,
        pub(crate) asked: Mutex<Vec<ChatRequest>>,
    }

    impl Scripted {
        /// Replies in order; `true` marks a reply cut at its token limit.
        pub(crate) fn new(replies: &[(&str, bool)]) -> Arc<Self> {
            Arc::new(Self {
                replies: Mutex::new(replies.iter().rev().map(|(t, cut)| ((*t).to_owned(), *cut)).collect()),
                asked: Mutex::new(Vec::new()),
            })
        }
    }

    impl ChatModel for Scripted {
        fn id(&self) -> &str {
            "scripted"
        }
        fn parallel(&self) -> usize {
            2
        }
        fn complete(&self, requests: &[ChatRequest]) -> Vec<memkit_infer::Result<Reply>> {
            self.asked.lock().unwrap().extend(requests.iter().cloned());
            let mut out = Vec::new();
            for _ in requests {
                let (text, cut) = self.replies.lock().unwrap().pop().expect("a scripted reply");
                out.push(Ok(Reply { text, usage: Usage { hit_max_tokens: cut, ..Usage::default() } }));
            }
            out
        }
    }
}
