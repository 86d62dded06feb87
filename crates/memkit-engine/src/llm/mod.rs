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

use memkit_infer::chat::{ChatModel, ChatRequest, Reply};

use crate::{Error, Result};

/// Asks `model` for one reply to `request`; a backend failure (or a model that answers the
/// wrong number of requests) is an error.
fn ask_one(model: &dyn ChatModel, request: ChatRequest) -> Result<Reply> {
    let mut replies = model.complete(std::slice::from_ref(&request));
    if replies.len() != 1 {
        return Err(Error::Model(format!("{}: {} replies to 1 request", model.id(), replies.len())));
    }
    replies.pop().expect("one reply").map_err(|e| Error::Model(format!("{}: {e}", model.id())))
}

/// A chat model that replies from a script, in order, and remembers what it was asked.
#[cfg(test)]
pub(crate) mod scripted {
    use std::sync::{Arc, Mutex};

    use memkit_infer::chat::{ChatModel, ChatRequest, Reply};
    use memkit_infer::extract::Usage;

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
