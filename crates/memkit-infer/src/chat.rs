//! Chat completions behind one trait: a GGUF model in-process ([`LocalChat`](crate::extract::LocalChat),
//! feature `llama`) or any OpenAI-compatible server ([`OpenAiChat`]). The teacher, the
//! extractors and the eval's answer and judge models all ask their models through it.
//!
//! A [`ChatRequest`] is the messages, a token limit, an optional JSON schema (constrained
//! decoding in-process, `response_format` on a server), whether to damp repeats and whether to
//! end a JSON list at its first repeated item; the reply is the text with its [`Usage`]. Replies
//! are greedy.

use std::time::Instant;

use memkit_prompt::ChatMessage;
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::extract::Usage;
use crate::openai::{ChatCompletionRequest, JsonSchemaFormat, OpenAiClient, ResponseFormat};

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

/// One chat completion to make.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The conversation, ending with the user turn.
    pub messages: Vec<ChatMessage>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// The reply must be JSON that validates against this schema.
    pub schema: Option<serde_json::Value>,
    /// Damp repeats of the reply's own earlier text (in-process: llama.cpp's DRY sampler with
    /// its recommended settings; a server decodes as it does).
    pub avoid_repeats: bool,
    /// End the JSON reply at its first array item that nearly repeats an earlier one.
    pub end_at_repeat: Option<RepeatedItem>,
}

impl ChatRequest {
    /// A request without schema or repetition control.
    pub fn new(messages: Vec<ChatMessage>, max_tokens: usize) -> Self {
        Self { messages, max_tokens, schema: None, avoid_repeats: false, end_at_repeat: None }
    }

    /// Sets [`Self::schema`].
    #[must_use]
    pub fn with_schema(mut self, schema: serde_json::Value) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Sets [`Self::end_at_repeat`].
    #[must_use]
    pub fn with_end_at_repeat(mut self, rule: RepeatedItem) -> Self {
        self.end_at_repeat = Some(rule);
        self
    }

    /// The OpenAI-compatible request for `model`: greedy (`temperature: 0`), with the schema as
    /// a strict `json_schema` response format.
    pub fn to_openai(&self, model: &str) -> ChatCompletionRequest {
        let mut request = ChatCompletionRequest::new(model, self.messages.clone());
        request.max_tokens = Some(self.max_tokens);
        request.temperature = Some(0.0);
        request.response_format = self.schema.as_ref().map(|schema| ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat { name: "reply".into(), schema: Some(schema.clone()), strict: Some(true) },
        });
        request.end_at_repeat = self.end_at_repeat.clone();
        request
    }
}

/// A model's reply to one [`ChatRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The text as it came.
    pub text: String,
    /// Tokens and time; `hit_max_tokens` when the reply was cut at the limit.
    pub usage: Usage,
}

/// Answers chat requests.
pub trait ChatModel: Send + Sync {
    /// Names the model and backend (`gguf:<file>`, `openai:<model>@<url>`); part of cache keys.
    fn id(&self) -> &str;
    /// Requests worth handing over in one call (a local batch, or the requests in flight).
    fn parallel(&self) -> usize {
        1
    }
    /// One result per request, in order. An `Err` is a backend failure (timeout, HTTP error,
    /// engine error), never bad model output.
    fn complete(&self, requests: &[ChatRequest]) -> Vec<Result<Reply>>;
}

/// An OpenAI-compatible server, `concurrency` requests in flight.
#[derive(Debug)]
pub struct OpenAiChat {
    id: String,
    client: OpenAiClient,
    concurrency: usize,
}

impl OpenAiChat {
    /// A chat model over `client`.
    pub fn new(client: OpenAiClient, concurrency: usize) -> Self {
        let id = format!("openai:{}@{}", client.config().model, client.config().base_url);
        Self { id, client, concurrency: concurrency.max(1) }
    }

    /// The client.
    pub fn client(&self) -> &OpenAiClient {
        &self.client
    }

    fn one(&self, request: &ChatRequest) -> Result<Reply> {
        let started = Instant::now();
        let response = self.client.chat(&request.to_openai(&self.client.config().model))?;
        let counts = response.usage.unwrap_or_default();
        let usage = Usage {
            prompt_tokens: counts.prompt_tokens,
            completion_tokens: counts.completion_tokens,
            millis: started.elapsed().as_millis() as u64,
            hit_max_tokens: response.finish_reason() == Some("length"),
        };
        Ok(Reply { text: response.content().unwrap_or_default().to_owned(), usage })
    }
}

impl ChatModel for OpenAiChat {
    fn id(&self) -> &str {
        &self.id
    }

    fn parallel(&self) -> usize {
        self.concurrency
    }

    fn complete(&self, requests: &[ChatRequest]) -> Vec<Result<Reply>> {
        let mut out = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(self.concurrency) {
            std::thread::scope(|scope| {
                let handles: Vec<_> = chunk.iter().map(|r| scope.spawn(move || self.one(r))).collect();
                for handle in handles {
                    out.push(handle.join().unwrap_or_else(|_| Err(crate::Error::Backend("a request thread panicked".into()))));
                }
            });
        }
        out
    }
}
