//! Chat completions behind one trait: a GGUF model in-process ([`LocalChat`], feature `llama`)
//! or any OpenAI-compatible server ([`OpenAiChat`]). The teacher, the extractors and the eval's
//! answer and judge models all ask their models through it.
//!
//! A [`ChatRequest`] is the messages, a token limit, an optional JSON schema (constrained
//! decoding in-process, `response_format` on a server), whether to damp repeats and whether to
//! end a JSON list at its first repeated item; the reply is the text with its [`Usage`]. Replies
//! are greedy unless the request carries a [`Sample`].

use std::time::Instant;

use memkit_prompt::ChatMessage;

use crate::Result;
use crate::openai::{ChatCompletionRequest, JsonSchemaFormat, OpenAiClient, ResponseFormat};
pub use crate::reply::{RepeatedItem, Usage};

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
    /// Draw the reply at a temperature instead of greedily.
    pub sample: Option<Sample>,
}

/// A reply drawn at a temperature: nucleus sampling with a seed, so the same request with the
/// same seed gives the same text in-process (a server may not promise that).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Above 0.
    pub temperature: f32,
    /// In (0, 1]; 1 disables the nucleus cut.
    pub top_p: f32,
    /// Seed of the draw.
    pub seed: u32,
}

impl ChatRequest {
    /// A greedy request without schema or repetition control.
    pub fn new(messages: Vec<ChatMessage>, max_tokens: usize) -> Self {
        Self { messages, max_tokens, schema: None, avoid_repeats: false, end_at_repeat: None, sample: None }
    }

    /// Sets [`Self::sample`].
    #[must_use]
    pub fn with_sample(mut self, sample: Sample) -> Self {
        self.sample = Some(sample);
        self
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

    /// The OpenAI-compatible request for `model`: greedy (`temperature: 0`) or the sample's
    /// temperature, `top_p` and seed, with the schema as a strict `json_schema` response format.
    pub fn to_openai(&self, model: &str) -> ChatCompletionRequest {
        let mut request = ChatCompletionRequest::new(model, self.messages.clone());
        request.max_tokens = Some(self.max_tokens);
        request.temperature = Some(self.sample.map_or(0.0, |s| s.temperature));
        if let Some(sample) = self.sample {
            request.top_p = Some(sample.top_p);
            request.seed = Some(u64::from(sample.seed));
        }
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

#[cfg(feature = "llama")]
pub(crate) use local::load_engine;
#[cfg(feature = "llama")]
pub use local::{GgufChat, LocalChat, RenderedChat};

#[cfg(feature = "llama")]
mod local {
    use std::sync::{Mutex, PoisonError};

    use memkit_prompt::{ChatMessage, ChatRole, ChatTemplate};

    use super::{ChatModel, ChatRequest, Reply, Sample, Usage};
    use crate::generate::{Dry, FinishReason, GenerateRequest, Generation, LlamaEngine, Sampling};
    use crate::{Error, Result};

    impl ChatModel for LocalChat {
        fn id(&self) -> &str {
            &self.id
        }

        fn parallel(&self) -> usize {
            self.batch
        }

        fn complete(&self, requests: &[ChatRequest]) -> Vec<Result<Reply>> {
            match LocalChat::complete(self, requests) {
                Ok(generations) => generations
                    .into_iter()
                    .map(|g| {
                        let usage = Usage {
                            prompt_tokens: g.prompt_tokens,
                            completion_tokens: g.completion_tokens,
                            millis: (g.timings.prefill_ms + g.timings.decode_ms).round() as u64,
                            hit_max_tokens: g.finish_reason == FinishReason::Length,
                        };
                        Ok(Reply { text: g.text, usage })
                    })
                    .collect(),
                Err(e) => {
                    let message = e.to_string();
                    requests.iter().map(|_| Err(Error::Backend(message.clone()))).collect()
                }
            }
        }
    }

    /// A chat rendered for llama.cpp: the leading system message (shared by the requests of a
    /// batch, evaluated once) and the rest, ending with the assistant header.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RenderedChat {
        /// The system turn, or empty when the chat has none or it is not a prefix of the whole.
        pub prefix: String,
        /// Everything after the prefix.
        pub suffix: String,
    }

    /// The chat template of a GGUF file with its BOS and EOS text.
    #[derive(Debug)]
    pub struct GgufChat {
        template: ChatTemplate,
        /// BOS text to strip from the rendered start: the engine adds the BOS token itself.
        bos: Option<String>,
    }

    impl GgufChat {
        /// The template in `engine`'s `tokenizer.chat_template`.
        pub fn from_engine(engine: &LlamaEngine) -> Result<Self> {
            let meta = engine.model_meta()?;
            let source = engine.chat_template().ok_or_else(|| Error::NoChatTemplate { path: meta.path.clone() })?;
            let text = |token: Option<i32>| token.map(|t| engine.detokenize(&[t])).transpose();
            let (bos, eos) = (text(meta.bos)?, text(meta.eos)?);
            let template = ChatTemplate::new(source, bos.as_deref(), eos.as_deref())?;
            Ok(Self { template, bos: bos.filter(|b| meta.add_bos && !b.is_empty()) })
        }

        /// Renders `messages` with the generation prompt, split after a leading system message
        /// when the template renders that message as a prefix of the whole (it does for
        /// ChatML, Llama 3 and Qwen templates).
        pub fn render(&self, messages: &[ChatMessage]) -> Result<RenderedChat> {
            let whole = self.strip_bos(self.template.render(messages, true)?);
            if messages.len() > 1 && messages[0].role == ChatRole::System {
                let prefix = self.strip_bos(self.template.render(&messages[..1], false)?);
                if let Some(suffix) = whole.strip_prefix(prefix.as_str()) {
                    return Ok(RenderedChat { suffix: suffix.to_owned(), prefix });
                }
            }
            Ok(RenderedChat { prefix: String::new(), suffix: whole })
        }

        fn strip_bos(&self, text: String) -> String {
            match &self.bos {
                Some(bos) => text.strip_prefix(bos.as_str()).map(str::to_owned).unwrap_or(text),
                None => text,
            }
        }
    }

    /// Chats with a GGUF model in-process: any chat rendered with the model's template, decoded
    /// in batches, greedily, after a shared prefix that the engine evaluates once and keeps
    /// cached across calls: the chats' system turn (chats with different system turns decode in
    /// one batch per system turn). Calls from several threads take turns on the one engine.
    #[derive(Debug)]
    pub struct LocalChat {
        id: String,
        engine: Mutex<LlamaEngine>,
        chat: GgufChat,
        batch: usize,
    }

    impl LocalChat {
        /// A chat over `engine` with the GGUF's chat template.
        pub fn new(engine: LlamaEngine) -> Result<Self> {
            let chat = GgufChat::from_engine(&engine)?;
            let path = engine.model_meta()?.path;
            let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
            let batch = (engine.options().n_seq_max as usize).saturating_sub(1).max(1);
            Ok(Self { id: format!("gguf:{name}"), engine: Mutex::new(engine), chat, batch })
        }

        /// Loads a GGUF sized for `batch` chats at once: one KV sequence per chat plus the
        /// shared system prompt, `n_ctx` cells (default: 2048 + `batch` × (4096 + `max_tokens`),
        /// room for a long prompt and the reply in each); `threads` defaults to the cores.
        pub fn load(gguf: &std::path::Path, batch: usize, threads: Option<usize>, n_ctx: Option<u32>, max_tokens: usize) -> Result<Self> {
            Self::new(load_engine(gguf, batch, threads, n_ctx, max_tokens)?)
        }

        /// `gguf:<file name>`.
        pub fn id(&self) -> &str {
            &self.id
        }

        /// Replies to `requests` (each chat ends with the user turn), greedily, in one batch
        /// after their shared prefix (see [`LocalChat`]).
        pub fn complete(&self, requests: &[ChatRequest]) -> Result<Vec<Generation>> {
            if requests.is_empty() {
                return Ok(Vec::new());
            }
            let rendered = requests.iter().map(|r| self.chat.render(&r.messages)).collect::<Result<Vec<_>>>()?;
            // Chats with the same system turn decode together after it. Each chat is split at its
            // own system turn whatever it is batched with, so that it gets the same tokens in any
            // batch (text split elsewhere can tokenize differently at the cut).
            let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
            for (i, chat) in rendered.iter().enumerate() {
                match groups.iter_mut().find(|(prefix, _)| *prefix == chat.prefix) {
                    Some((_, members)) => members.push(i),
                    None => groups.push((&chat.prefix, vec![i])),
                }
            }
            let mut out: Vec<Option<Generation>> = vec![None; requests.len()];
            for (prefix, members) in &groups {
                let generate: Vec<GenerateRequest> = members
                    .iter()
                    .map(|&i| {
                        let mut request = GenerateRequest::new(rendered[i].suffix.clone()).with_max_tokens(requests[i].max_tokens);
                        if let Some(schema) = &requests[i].schema {
                            request = request.with_json_schema(schema.clone());
                        }
                        if requests[i].avoid_repeats {
                            request = request.with_dry(Dry::default());
                        }
                        if let Some(rule) = &requests[i].end_at_repeat {
                            request = request.with_end_at_repeat(rule.clone());
                        }
                        if let Some(Sample { temperature, top_p, seed }) = requests[i].sample {
                            request = request.with_sampling(Sampling::Temperature { temperature, top_p, seed });
                        }
                        request
                    })
                    .collect();
                for (&i, generation) in members.iter().zip(self.generate(prefix, &generate)?) {
                    out[i] = Some(generation);
                }
            }
            Ok(out.into_iter().map(|g| g.expect("every chat is in one group")).collect())
        }

        fn generate(&self, prefix: &str, requests: &[GenerateRequest]) -> Result<Vec<Generation>> {
            // A panic inside llama.cpp bookkeeping leaves no state that the next call relies
            // on (the cached prefix is trusted only after a call finished), so a poisoned lock is
            // still usable.
            let mut engine = self.engine.lock().unwrap_or_else(PoisonError::into_inner);
            engine.generate_batch(prefix, requests)
        }
    }

    /// A GGUF engine sized for `batch` chats at once (see [`LocalChat::load`]).
    pub(crate) fn load_engine(
        gguf: &std::path::Path,
        batch: usize,
        threads: Option<usize>,
        n_ctx: Option<u32>,
        max_tokens: usize,
    ) -> Result<LlamaEngine> {
        let batch = batch.max(1) as u32;
        let mut options = crate::generate::EngineOptions { n_seq_max: batch + 1, ..Default::default() };
        options.n_ctx = n_ctx.unwrap_or(2048 + batch * (4096 + max_tokens as u32));
        if let Some(threads) = threads {
            options.n_threads = threads;
        }
        LlamaEngine::load(gguf, options)
    }
}
