//! Extractors: a window of dialogue in, memory records out.
//!
//! Every [`Extractor`] renders the same prompt (memkit-prompt's `extract` template), asks its
//! model for JSON that follows memkit-schema's extractor schema, and parses the reply with the
//! lenient parser. Records whose `source_id` is not a suffix message of the window (a
//! context-only message, or a number past the window), and records that nearly repeat an
//! earlier one of the same reply ([`repeated`]), are moved to the errors.
//!
//! - [`OpenAiExtractor`]: any OpenAI-compatible endpoint, with `response_format` `json_schema`;
//! - [`LocalExtractor`] (feature `llama`): a GGUF model in-process, its chat template from the
//!   GGUF, the system message computed once per batch (prefix reuse) and decoding constrained
//!   by the schema. A trained student's GGUF carries the prompt it learnt
//!   (`memkit.extract_prompt`, see [`memkit_prompt::GGUF_PROMPT_KEY`]), and the extractor
//!   renders that instead of `extract.j2`.

use std::time::Instant;

use memkit_data::Window;
use memkit_prompt::{ChatMessage, ExtractOptions, Prompts};
use memkit_schema::{
    ErrorKind, ExtractedMemory, ExtractorSchemaOptions, MemoryRecord, Pointer, RecordError, extractor_json_schema, parse_extractor_output,
};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::chat::RepeatedItem;
use crate::openai::{ChatCompletionRequest, JsonSchemaFormat, OpenAiClient, ResponseFormat};

/// Tokens and time one window took.
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

/// Content token F1 (LoCoMo's, [`memkit_text::f1::f1_score`]) at which two records of one reply
/// count as one. Small models loop: they write the same record again until the record cap.
pub const NEAR_DUPLICATE_F1: f64 = 0.8;

/// Content token F1 at which two records of the same source message count as one fact said
/// twice: the teacher words one fact of a message two or three ways ("The user is looking for a
/// charity event" and "The user is looking for charity events in their area"). Chosen on the
/// gold set (the teacher's gold records re-scored with
/// `reports/smollm2-135m-messages/same_message_duplicates.py`): from 0.8 (the loop rule alone) to 0.7 / 0.6 / 0.5 the teacher's
/// gold F1 went 0.364 / 0.373 / 0.399 / 0.391, its matched records 68 / 67 / 67 / 63. Records of
/// different messages keep the looser loop rule: two people, or two days, can do the same thing.
pub const SAME_MESSAGE_DUPLICATE_F1: f64 = 0.6;

/// The first of `earlier` that `record` nearly repeats: content token F1 ≥
/// [`NEAR_DUPLICATE_F1`], or ≥ [`SAME_MESSAGE_DUPLICATE_F1`] with the same `source_id`. The one
/// near-duplicate rule of extraction, distillation and the agreement scorers.
pub fn repeated<'a>(record: &ExtractedMemory, earlier: &'a [ExtractedMemory]) -> Option<&'a ExtractedMemory> {
    earlier.iter().find(|k| {
        let min = if k.source_id == record.source_id { SAME_MESSAGE_DUPLICATE_F1 } else { NEAR_DUPLICATE_F1 };
        memkit_text::f1::f1_score(&record.content, &k.content) >= min
    })
}

/// The generation rule of every extractor: the reply ends at its first record whose content
/// nearly repeats an earlier record's ([`NEAR_DUPLICATE_F1`], whatever its message), a record
/// [`repeated`] would drop, so a looping model stops instead of decoding repeats up to its
/// token limit.
pub fn end_at_repeated_record() -> RepeatedItem {
    RepeatedItem { field: "content".into(), min_f1: NEAR_DUPLICATE_F1 }
}

/// What an extractor made of one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extraction {
    /// [`Window::id`].
    pub window_id: String,
    /// Records that parsed and point into the window's suffix.
    pub records: Vec<ExtractedMemory>,
    /// Records that did not parse or point elsewhere, and whole-output failures.
    pub errors: Vec<RecordError>,
    /// The model's reply as it came.
    pub raw: String,
    /// Tokens and time.
    pub usage: Usage,
    /// What grounding did with each parsed record (empty when it did not run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grounding: Vec<crate::ground::Grounded>,
}

impl Extraction {
    /// Parses `raw` for `window` and keeps only records from the window's suffix that do not
    /// nearly repeat an earlier one ([`ErrorKind::Duplicate`]). A reply that hit its token limit
    /// gets a whole-reply [`ErrorKind::Truncated`] error.
    pub fn from_output(window: &Window, raw: String, usage: Usage) -> Self {
        let mut outcome = parse_extractor_output(&raw);
        if usage.hit_max_tokens {
            let reason = format!("the reply stopped at its token limit after {} tokens", usage.completion_tokens);
            outcome.errors.insert(0, RecordError { index: None, kind: ErrorKind::Truncated, reason, raw: String::new() });
        }
        // The parsed records keep their order: the k-th one sits at the k-th position of the
        // `memories` array that did not fail to parse.
        let failed: std::collections::HashSet<usize> = outcome.errors.iter().filter_map(|e| e.index).collect();
        let mut positions = (0..).filter(|i| !failed.contains(i));
        let mut errors = outcome.errors;
        let mut records = Vec::with_capacity(outcome.records.len());
        for record in outcome.records {
            let index = positions.next();
            if window.in_suffix(record.source_id) {
                match repeated(&record, &records) {
                    None => records.push(record),
                    Some(earlier) => {
                        let reason = format!("nearly repeats the earlier record {:?}", earlier.content);
                        let raw = serde_json::to_string(&record).unwrap_or_default();
                        errors.push(RecordError { index, kind: ErrorKind::Duplicate, reason, raw });
                    }
                }
                continue;
            }
            let (kind, reason) = if (record.source_id as usize) <= window.context {
                (ErrorKind::ContextSource, format!("source_id {} is a context-only message (1..={})", record.source_id, window.context))
            } else {
                (
                    ErrorKind::SourcePastWindow,
                    format!("source_id {} is past the window's {} messages", record.source_id, window.messages.len()),
                )
            };
            let raw = serde_json::to_string(&record).unwrap_or_default();
            errors.push(RecordError { index, kind, reason, raw });
        }
        Self { window_id: window.id.clone(), records, errors, raw, usage, grounding: Vec::new() }
    }

    /// The records as stored memory: ids `<window id>#<n>`, pointers to the source message's
    /// turn, speaker and timestamp in `window`.
    pub fn to_records(&self, window: &Window) -> Vec<MemoryRecord> {
        self.records
            .iter()
            .enumerate()
            .filter_map(|(n, record)| {
                let message = window.message(record.source_id)?;
                let pointer = Pointer {
                    window_id: window.id.clone(),
                    turn_ids: vec![message.turn_id.clone()],
                    speaker: message.speaker.clone(),
                    timestamp: message.timestamp.map(|t| t.format("%Y-%m-%dT%H:%M:%S").to_string()).unwrap_or_default(),
                };
                Some(record.clone().into_record(format!("{}#{n}", window.id), pointer))
            })
            .collect()
    }
}

/// Turns windows into records.
pub trait Extractor: Send + Sync {
    /// Names the model and backend, e.g. `gguf:SmolLM2-135M-Instruct.Q4_1.gguf`.
    fn id(&self) -> &str;

    /// One [`Extraction`] per window, in order. Bad model output is reported per window in
    /// [`Extraction::errors`]; `Err` means the backend itself failed.
    fn extract(&self, windows: &[Window]) -> Result<Vec<Extraction>>;
}

/// Caps of the prompt, the schema and decoding, shared by all extractors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractConfig {
    /// Records, keywords and content length (stated in the prompt and enforced by the schema).
    pub schema: ExtractorSchemaOptions,
    /// `maxLength` added to every free string of the schema (speaker, time, location, reason,
    /// purpose, keywords): without it a small model can loop inside one string until
    /// `max_tokens`, and the output is cut-off JSON. `None` leaves them unbounded.
    pub max_string_chars: Option<usize>,
    /// Most tokens per reply.
    pub max_tokens: usize,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        Self { schema: ExtractorSchemaOptions::default(), max_string_chars: Some(120), max_tokens: 2048 }
    }
}

impl ExtractConfig {
    /// The extractor JSON Schema with these caps.
    pub fn json_schema(&self) -> serde_json::Value {
        let mut schema = extractor_json_schema(self.schema);
        if let Some(max) = self.max_string_chars {
            bound_strings(&mut schema, max);
        }
        schema
    }

    /// The prompt's options.
    pub fn prompt_options(&self) -> ExtractOptions {
        self.schema.into()
    }
}

/// Adds `maxLength` to every string schema that has neither a length cap nor an enum.
fn bound_strings(schema: &mut serde_json::Value, max_length: usize) {
    match schema {
        serde_json::Value::Object(map) => {
            let is_string = map.get("type").and_then(|t| t.as_str()) == Some("string");
            if is_string && !map.contains_key("maxLength") && !map.contains_key("enum") {
                map.insert("maxLength".into(), max_length.into());
            }
            map.values_mut().for_each(|v| bound_strings(v, max_length));
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| bound_strings(v, max_length)),
        _ => {}
    }
}

/// `prompts` with the extraction prompt a model carries, if it carries one.
fn with_trained(prompts: Prompts, trained: Option<&str>) -> Result<Prompts> {
    Ok(match trained {
        Some(source) => prompts.with_trained_prompt(source)?,
        None => prompts,
    })
}

fn render_messages(prompts: &Prompts, window: &Window, config: &ExtractConfig) -> Result<Vec<ChatMessage>> {
    Ok(prompts.render_extract(window, &config.prompt_options())?.to_messages())
}

/// An extractor over an OpenAI-compatible endpoint, one request per window, greedy
/// (`temperature: 0`), with the schema as a strict `json_schema` response format.
#[derive(Debug)]
pub struct OpenAiExtractor {
    id: String,
    client: OpenAiClient,
    prompts: Prompts,
    config: ExtractConfig,
    schema: serde_json::Value,
    /// The extraction prompt the served model carries.
    trained: Option<String>,
}

impl OpenAiExtractor {
    /// An extractor with the embedded prompts. It asks the server's model list once: when the
    /// model comes with an extraction prompt (a trained student behind `memkit serve`), it
    /// asks with that prompt.
    pub fn new(client: OpenAiClient, config: ExtractConfig) -> Result<Self> {
        let id = format!("openai:{}@{}", client.config().model, client.config().base_url);
        let trained = client.served_extract_prompt();
        let prompts = with_trained(Prompts::embedded()?, trained.as_deref())?;
        if trained.is_some() {
            tracing::info!(%id, "asking with the extraction prompt the served model carries");
        }
        Ok(Self { id, client, prompts, schema: config.json_schema(), config, trained })
    }

    /// The extraction prompt template the served model carries, if any.
    pub fn trained_prompt(&self) -> Option<&str> {
        self.trained.as_deref()
    }

    /// Uses these prompts instead of the embedded ones (a prompt the model carries still
    /// replaces their extraction prompt).
    pub fn with_prompts(mut self, prompts: Prompts) -> Result<Self> {
        self.prompts = with_trained(prompts, self.trained.as_deref())?;
        Ok(self)
    }

    /// The request for one window (also what an OpenAI batch-API file holds per line).
    pub fn request(&self, window: &Window) -> Result<ChatCompletionRequest> {
        let mut request =
            ChatCompletionRequest::new(self.client.config().model.clone(), render_messages(&self.prompts, window, &self.config)?);
        request.max_tokens = Some(self.config.max_tokens);
        request.temperature = Some(0.0);
        request.response_format = Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat { name: "memories".into(), schema: Some(self.schema.clone()), strict: Some(true) },
        });
        request.end_at_repeat = Some(end_at_repeated_record());
        Ok(request)
    }
}

impl Extractor for OpenAiExtractor {
    fn id(&self) -> &str {
        &self.id
    }

    fn extract(&self, windows: &[Window]) -> Result<Vec<Extraction>> {
        windows
            .iter()
            .map(|window| {
                let request = self.request(window)?;
                let started = Instant::now();
                let response = self.client.chat(&request)?;
                let counts = response.usage.unwrap_or_default();
                let usage = Usage {
                    prompt_tokens: counts.prompt_tokens,
                    completion_tokens: counts.completion_tokens,
                    millis: started.elapsed().as_millis() as u64,
                    hit_max_tokens: response.finish_reason() == Some("length"),
                };
                Ok(Extraction::from_output(window, response.content().unwrap_or_default().to_owned(), usage))
            })
            .collect()
    }
}

#[cfg(feature = "llama")]
pub use local::{GgufChat, LocalChat, LocalExtractor, RenderedChat};

#[cfg(feature = "llama")]
mod local {
    use std::sync::{Mutex, PoisonError};

    use memkit_data::Window;
    use memkit_prompt::{ChatMessage, ChatRole, ChatTemplate, GGUF_PROMPT_KEY, Prompts};

    use super::{ExtractConfig, Extraction, Extractor, Usage, end_at_repeated_record, render_messages, with_trained};
    use crate::chat::{ChatModel, ChatRequest, Reply};
    use crate::generate::{Dry, FinishReason, GenerateRequest, Generation, LlamaEngine};
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
    fn load_engine(
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

    /// An extractor over a GGUF model in-process ([`LocalChat`]): windows of one call are
    /// decoded in batches after the shared system prompt, greedily, constrained by the schema.
    #[derive(Debug)]
    pub struct LocalExtractor {
        chat: LocalChat,
        prompts: Prompts,
        config: ExtractConfig,
        schema: serde_json::Value,
        /// The extraction prompt the GGUF carries.
        trained: Option<String>,
    }

    impl LocalExtractor {
        /// An extractor with the embedded prompts and the GGUF's chat template; the extraction
        /// prompt is the one the GGUF carries, if it carries one.
        pub fn new(engine: LlamaEngine, config: ExtractConfig) -> Result<Self> {
            let trained = engine.meta_str(GGUF_PROMPT_KEY);
            let prompts = with_trained(Prompts::embedded()?, trained.as_deref())?;
            if trained.is_some() {
                tracing::info!(model = %engine.model_meta()?.path.display(), "asking with the extraction prompt the model carries");
            }
            Ok(Self { chat: LocalChat::new(engine)?, prompts, schema: config.json_schema(), config, trained })
        }

        /// The extraction prompt template the model carries ([`GGUF_PROMPT_KEY`]), if any.
        pub fn trained_prompt(&self) -> Option<&str> {
            self.trained.as_deref()
        }

        /// Loads a GGUF sized for `batch` windows at once (see [`LocalChat::load`]).
        pub fn load(
            gguf: &std::path::Path,
            batch: usize,
            threads: Option<usize>,
            n_ctx: Option<u32>,
            config: ExtractConfig,
        ) -> Result<Self> {
            Self::new(load_engine(gguf, batch, threads, n_ctx, config.max_tokens)?, config)
        }

        /// Uses these prompts instead of the embedded ones (a prompt the model carries still
        /// replaces their extraction prompt).
        pub fn with_prompts(mut self, prompts: Prompts) -> Result<Self> {
            self.prompts = with_trained(prompts, self.trained.as_deref())?;
            Ok(self)
        }

        /// Replies to already rendered extraction chats (system and user messages, e.g. the
        /// prompts of a distilled dataset), constrained by the schema, in batches after their
        /// shared prefix.
        pub fn complete(&self, chats: &[Vec<ChatMessage>]) -> Result<Vec<Generation>> {
            let requests: Vec<ChatRequest> = chats
                .iter()
                .map(|c| {
                    ChatRequest::new(c.clone(), self.config.max_tokens)
                        .with_schema(self.schema.clone())
                        .with_end_at_repeat(end_at_repeated_record())
                })
                .collect();
            self.chat.complete(&requests)
        }
    }

    impl Extractor for LocalExtractor {
        fn id(&self) -> &str {
            self.chat.id()
        }

        fn extract(&self, windows: &[Window]) -> Result<Vec<Extraction>> {
            let chats = windows.iter().map(|w| render_messages(&self.prompts, w, &self.config)).collect::<Result<Vec<_>>>()?;
            Ok(windows
                .iter()
                .zip(self.complete(&chats)?)
                .map(|(window, g)| {
                    let usage = Usage {
                        prompt_tokens: g.prompt_tokens,
                        completion_tokens: g.completion_tokens,
                        millis: (g.timings.prefill_ms + g.timings.decode_ms).round() as u64,
                        hit_max_tokens: g.finish_reason == FinishReason::Length,
                    };
                    Extraction::from_output(window, g.text, usage)
                })
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use memkit_data::WindowMessage;
    use memkit_schema::Role;

    use super::*;

    fn window(context: usize, n: u32) -> Window {
        Window {
            id: "d/w1".into(),
            dialogue_id: "d".into(),
            index: 1,
            context,
            max_message_chars: 8000,
            messages: (1..=n)
                .map(|number| WindowMessage {
                    number,
                    turn_id: format!("t{number}"),
                    speaker: "Ann".into(),
                    role: Role::User,
                    text: "hi".into(),
                    caption: None,
                    timestamp: None,
                    assistant_reply: None,
                })
                .collect(),
        }
    }

    fn memory(source_id: u32) -> serde_json::Value {
        serde_json::json!({"source_id": source_id, "source_speaker": "Ann", "content": format!("Ann said {source_id}."),
            "dimension": {"memory_type": "fact", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
    }

    #[test]
    fn records_outside_the_suffix_become_errors() {
        let raw = serde_json::json!({"memories": [memory(1), memory(2), memory(3), memory(4), memory(5)]}).to_string();
        let extraction = Extraction::from_output(&window(2, 4), raw.clone(), Usage::default());
        let kept: Vec<u32> = extraction.records.iter().map(|r| r.source_id).collect();
        assert_eq!(kept, [3, 4]);
        assert_eq!(extraction.errors.len(), 3, "{:?}", extraction.errors);
        let kinds: Vec<ErrorKind> = extraction.errors.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [ErrorKind::ContextSource, ErrorKind::ContextSource, ErrorKind::SourcePastWindow]);
        assert_eq!(extraction.raw, raw);
        assert_eq!(extraction.window_id, "d/w1");
        // Each names its record's place in `memories` (None would mean the whole reply failed).
        let places: Vec<Option<usize>> = extraction.errors.iter().map(|e| e.index).collect();
        assert_eq!(places, [Some(0), Some(1), Some(4)]);
        // A record that does not parse keeps its place, and the next ones keep theirs.
        let broken = serde_json::json!({"memories": [{"source_id": 9, "content": 7}, memory(1), memory(3)]});
        let extraction = Extraction::from_output(&window(2, 4), broken.to_string(), Usage::default());
        let places: Vec<Option<usize>> = extraction.errors.iter().map(|e| e.index).collect();
        assert_eq!(places, [Some(0), Some(1)], "{:?}", extraction.errors);
    }

    #[test]
    fn records_that_nearly_repeat_an_earlier_kept_one_become_errors() {
        let said = |source_id: u32, content: &str| {
            let mut m = memory(source_id);
            m["content"] = content.into();
            m
        };
        let memories = [
            said(1, "Ann adopted a kitten."),
            said(3, "Ann adopted a puppy named Max."),
            said(3, "Ann adopted a puppy named Max."),
            // Tokens (LoCoMo's normalisation drops "a"): 7 against the kept record's 5, all 5 of
            // those shared: P 5/7, R 1, F1 = (10/7) / (12/7) = 0.83 ≥ 0.8.
            said(4, "Ann adopted a puppy named Max last week."),
            // 2 of 3 tokens shared with the kept one's 5: P 2/3, R 2/5, F1 = 0.5. The same
            // content at index 0 does not count: that record is not kept (a context message).
            said(4, "Ann adopted a kitten."),
        ];
        let raw = serde_json::json!({ "memories": memories }).to_string();
        let extraction = Extraction::from_output(&window(2, 4), raw, Usage::default());
        let kept: Vec<(u32, &str)> = extraction.records.iter().map(|r| (r.source_id, r.content.as_str())).collect();
        assert_eq!(kept, [(3, "Ann adopted a puppy named Max."), (4, "Ann adopted a kitten.")]);
        let errors: Vec<(ErrorKind, Option<usize>)> = extraction.errors.iter().map(|e| (e.kind, e.index)).collect();
        assert_eq!(errors, [(ErrorKind::ContextSource, Some(0)), (ErrorKind::Duplicate, Some(2)), (ErrorKind::Duplicate, Some(3))]);
        assert!(extraction.errors[2].raw.contains("last week"), "{:?}", extraction.errors[2]);
    }

    #[test]
    fn a_fact_said_twice_in_one_message_is_one_record_but_two_messages_keep_theirs() {
        let said = |source_id: u32, content: &str| {
            let mut m = memory(source_id);
            m["content"] = content.into();
            m
        };
        // Stemmed tokens: "ann adopt puppi name max" and "ann adopt puppi in may": 3 of 5 shared
        // each way, P = R = 3/5, F1 = 0.6: one fact for the same message (≥ 0.6), two records
        // for two messages (< 0.8).
        let memories =
            [said(3, "Ann adopted a puppy named Max."), said(3, "Ann adopted a puppy in May."), said(4, "Ann adopted a puppy in May.")];
        let raw = serde_json::json!({ "memories": memories }).to_string();
        let extraction = Extraction::from_output(&window(2, 4), raw, Usage::default());
        let kept: Vec<(u32, &str)> = extraction.records.iter().map(|r| (r.source_id, r.content.as_str())).collect();
        assert_eq!(kept, [(3, "Ann adopted a puppy named Max."), (4, "Ann adopted a puppy in May.")]);
        let errors: Vec<(ErrorKind, Option<usize>)> = extraction.errors.iter().map(|e| (e.kind, e.index)).collect();
        assert_eq!(errors, [(ErrorKind::Duplicate, Some(1))]);
    }

    #[test]
    fn free_strings_are_bounded_but_enums_and_caps_are_kept() {
        let config = ExtractConfig { max_string_chars: Some(33), ..ExtractConfig::default() };
        let schema = config.json_schema();
        let memory = &schema["properties"]["memories"]["items"]["properties"];
        assert_eq!(memory["source_speaker"]["maxLength"], 33);
        assert_eq!(memory["content"]["maxLength"], config.schema.max_content_chars);
        let dimension = &memory["dimension"]["properties"];
        assert_eq!(dimension["location"]["maxLength"], 33);
        assert_eq!(dimension["keywords"]["items"]["maxLength"], 33);
        assert!(dimension["memory_type"].get("maxLength").is_none());
        let unbounded = ExtractConfig { max_string_chars: None, ..config }.json_schema();
        assert!(unbounded["properties"]["memories"]["items"]["properties"]["source_speaker"].get("maxLength").is_none());
    }
}
