//! Extractors: a window of dialogue in, memory records out.
//!
//! Every [`Extractor`] renders the same prompt (memkit-prompt's `extract` template, or the one a
//! trained model carries), asks its model for JSON that follows memkit-schema's extractor schema,
//! and parses the reply with the lenient parser. Records whose `source_id` is not a new message
//! of the window ([`memkit_clean::outside_suffix`]), and records that nearly repeat an earlier
//! one of the same reply ([`memkit_clean::duplicate::repeated`]), are moved to the errors. The
//! rest of record cleaning (grounding, validation) is memkit-clean's [`Cleaner`](memkit_clean::Cleaner),
//! which every caller runs on every extractor's records.
//!
//! [`ChatExtractor`] is the one extractor: any [`ChatModel`] asked one request per window, with
//! the schema and the repeat stop. [`OpenAiExtractor`] asks an OpenAI-compatible endpoint
//! (`response_format` `json_schema`); [`LocalExtractor`] (feature `llama`) a GGUF model
//! in-process, its chat template from the GGUF, windows decoded in batches after the shared
//! system message, constrained by the schema. A trained student carries the prompt it learnt
//! (`memkit.extract_prompt` in its GGUF, see [`memkit_prompt::GGUF_PROMPT_KEY`], or a served
//! model's `/v1/models` entry), and the extractor renders that instead of `extract.j2`.

use memkit_clean::duplicate::NEAR_DUPLICATE_F1;
use memkit_data::Window;
use memkit_prompt::{ChatMessage, ExtractOptions, Prompts};
use memkit_schema::{
    ErrorKind, ExtractedMemory, ExtractorSchemaOptions, MemoryRecord, Pointer, RecordError, extractor_json_schema, parse_extractor_output,
};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::chat::{ChatModel, ChatRequest, OpenAiChat, Reply};
use crate::openai::OpenAiClient;
use crate::reply::{RepeatedItem, Usage};

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
    /// What grounding did with each parsed record, when the records were cleaned (see
    /// [`memkit_clean::Cleaner`]); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grounding: Vec<memkit_clean::Grounded>,
}

impl Extraction {
    /// Parses `raw` for `window` and keeps only records from the window's suffix. A reply that
    /// hit its token limit gets a whole-reply [`ErrorKind::Truncated`] error. Near duplicates are
    /// left to cleaning ([`memkit_clean::Cleaner`]), which drops them after validation: a small
    /// model writes one fact twice, once under each speaker's name, and a repeat rule that ran
    /// first dropped the valid copy as a repeat of the invalid one.
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
            match memkit_clean::outside_suffix(window, record.source_id) {
                None => records.push(record),
                Some((kind, reason)) => {
                    let raw = serde_json::to_string(&record).unwrap_or_default();
                    errors.push(RecordError { index, kind, reason, raw });
                }
            }
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
                    turn_ids: vec![message.turn.id.clone()],
                    speaker: message.turn.speaker.clone(),
                    timestamp: message.turn.timestamp.map(|t| t.format("%Y-%m-%dT%H:%M:%S").to_string()).unwrap_or_default(),
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

/// The one extractor: a [`ChatModel`] asked for one window per request, with the extraction
/// prompt (the one the model carries, if it carries one), the extractor schema and the repeat
/// stop ([`end_at_repeated_record`]); windows handed over together go to the model in one call
/// (a local model decodes them as one batch after their shared system turn).
#[derive(Debug)]
pub struct ChatExtractor<M> {
    model: M,
    prompts: Prompts,
    config: ExtractConfig,
    schema: serde_json::Value,
    /// The extraction prompt the model carries.
    trained: Option<String>,
}

impl<M: ChatModel> ChatExtractor<M> {
    /// An extractor over `model` with the embedded prompts, asking with `trained` (the
    /// extraction prompt template the model carries) when there is one.
    pub fn over(model: M, config: ExtractConfig, trained: Option<String>) -> Result<Self> {
        let prompts = with_trained(Prompts::embedded()?, trained.as_deref())?;
        if trained.is_some() {
            tracing::info!(model = model.id(), "asking with the extraction prompt the model carries");
        }
        Ok(Self { model, prompts, schema: config.json_schema(), config, trained })
    }

    /// The extraction prompt template the model carries, if any.
    pub fn trained_prompt(&self) -> Option<&str> {
        self.trained.as_deref()
    }

    /// Uses these prompts instead of the embedded ones (a prompt the model carries still
    /// replaces their extraction prompt).
    pub fn with_prompts(mut self, prompts: Prompts) -> Result<Self> {
        self.prompts = with_trained(prompts, self.trained.as_deref())?;
        Ok(self)
    }

    /// The chat model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The request for one window (`to_openai` of it is what an OpenAI batch-API line holds).
    pub fn request(&self, window: &Window) -> Result<ChatRequest> {
        Ok(self.chat_request(render_messages(&self.prompts, window, &self.config)?))
    }

    fn chat_request(&self, messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest::new(messages, self.config.max_tokens).with_schema(self.schema.clone()).with_end_at_repeat(end_at_repeated_record())
    }

    /// Replies to already rendered extraction chats (system and user messages, e.g. the prompts
    /// of a distilled dataset), constrained by the schema, in one call.
    pub fn complete(&self, chats: &[Vec<ChatMessage>]) -> Result<Vec<Reply>> {
        let requests: Vec<ChatRequest> = chats.iter().map(|c| self.chat_request(c.clone())).collect();
        self.model.complete(&requests).into_iter().collect()
    }
}

impl<M: ChatModel> Extractor for ChatExtractor<M> {
    fn id(&self) -> &str {
        self.model.id()
    }

    fn extract(&self, windows: &[Window]) -> Result<Vec<Extraction>> {
        let chats = windows.iter().map(|w| render_messages(&self.prompts, w, &self.config)).collect::<Result<Vec<_>>>()?;
        Ok(windows
            .iter()
            .zip(self.complete(&chats)?)
            .map(|(window, reply)| Extraction::from_output(window, reply.text, reply.usage))
            .collect())
    }
}

/// An extractor over an OpenAI-compatible endpoint, one request per window, greedy
/// (`temperature: 0`), with the schema as a strict `json_schema` response format.
pub type OpenAiExtractor = ChatExtractor<OpenAiChat>;

impl ChatExtractor<OpenAiChat> {
    /// An extractor with the embedded prompts. It asks the server's model list once: when the
    /// model comes with an extraction prompt (a trained student behind `memkit serve`), it
    /// asks with that prompt.
    pub fn new(client: OpenAiClient, config: ExtractConfig) -> Result<Self> {
        let trained = client.served_extract_prompt();
        Self::over(OpenAiChat::new(client, 1), config, trained)
    }
}

/// An extractor over a GGUF model in-process ([`LocalChat`](crate::chat::LocalChat)): windows
/// of one call are decoded in batches after the shared system prompt, greedily, constrained by
/// the schema.
#[cfg(feature = "llama")]
pub type LocalExtractor = ChatExtractor<crate::chat::LocalChat>;

#[cfg(feature = "llama")]
impl ChatExtractor<crate::chat::LocalChat> {
    /// An extractor with the embedded prompts and the GGUF's chat template; the extraction
    /// prompt is the one the GGUF carries ([`memkit_prompt::GGUF_PROMPT_KEY`]), if it carries one.
    pub fn new(engine: crate::generate::LlamaEngine, config: ExtractConfig) -> Result<Self> {
        let trained = engine.meta_str(memkit_prompt::GGUF_PROMPT_KEY);
        Self::over(crate::chat::LocalChat::new(engine)?, config, trained)
    }

    /// Loads a GGUF sized for `batch` windows at once (see [`LocalChat::load`](crate::chat::LocalChat::load)).
    pub fn load(gguf: &std::path::Path, batch: usize, threads: Option<usize>, n_ctx: Option<u32>, config: ExtractConfig) -> Result<Self> {
        let engine = crate::chat::load_engine(gguf, batch, threads, n_ctx, config.max_tokens)?;
        Self::new(engine, config)
    }
}

#[cfg(test)]
mod tests {
    use memkit_data::WindowMessage;

    use super::*;

    fn window(context: usize, n: u32) -> Window {
        Window::of("d/w1", context, (1..=n).map(|number| WindowMessage::user(number, "Ann", "hi")).collect())
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

    /// What cleaning keeps of a parsed reply, grounding off: validation, then one record per fact.
    fn cleaned(window: &Window, extraction: &Extraction) -> (Vec<(u32, String)>, Vec<memkit_clean::DropReason>) {
        let cleaner = memkit_clean::Cleaner::new(memkit_clean::GroundingConfig { enabled: false, ..Default::default() });
        let out = cleaner.clean(window, &extraction.records, &extraction.errors).unwrap();
        (out.records.iter().map(|r| (r.source_id, r.content.clone())).collect(), out.dropped.iter().map(|d| d.reason).collect())
    }

    #[test]
    fn records_that_nearly_repeat_an_earlier_kept_one_are_dropped_by_cleaning() {
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
        let w = window(2, 4);
        let extraction = Extraction::from_output(&w, raw, Usage::default());
        // Parsing keeps every record of the suffix; only the context message's is an error.
        assert_eq!(extraction.records.len(), 4);
        let errors: Vec<(ErrorKind, Option<usize>)> = extraction.errors.iter().map(|e| (e.kind, e.index)).collect();
        assert_eq!(errors, [(ErrorKind::ContextSource, Some(0))]);
        let (kept, dropped) = cleaned(&w, &extraction);
        assert_eq!(kept, [(3, "Ann adopted a puppy named Max.".into()), (4, "Ann adopted a kitten.".into())]);
        use memkit_clean::DropReason;
        assert_eq!(dropped, [DropReason::ContextMessage, DropReason::Duplicate, DropReason::Duplicate]);
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
        let w = window(2, 4);
        let (kept, dropped) = cleaned(&w, &Extraction::from_output(&w, raw, Usage::default()));
        assert_eq!(kept, [(3, "Ann adopted a puppy named Max.".into()), (4, "Ann adopted a puppy in May.".into())]);
        assert_eq!(dropped, [memkit_clean::DropReason::Duplicate]);
    }

    /// See: issue 39. A small model writes a message's fact under each speaker's name; the copy
    /// with the wrong speaker is dropped by validation, and the right one is kept, not dropped
    /// as a repeat of the wrong one (stemmed tokens "jon love contemporari danc" against "gina
    /// love contemporari danc": 3 of 4 shared, F1 0.75 ≥ 0.6 for one message).
    #[test]
    fn the_valid_copy_of_a_fact_written_under_both_names_is_kept() {
        let w = Window::of(
            "conv-30/w6",
            1,
            vec![WindowMessage::user(1, "Gina", "What dances do you like?"), WindowMessage::user(2, "Jon", "I love contemporary dance.")],
        );
        let raw = serde_json::json!({"memories": [
            {"source_id": 2, "source_speaker": "Gina", "content": "Gina loves contemporary dances.", "dimension": {"memory_type": "profile"}},
            {"source_id": 2, "source_speaker": "Jon", "content": "Jon loves contemporary dances.", "dimension": {"memory_type": "profile"}}]})
        .to_string();
        let (kept, dropped) = cleaned(&w, &Extraction::from_output(&w, raw, Usage::default()));
        assert_eq!(kept, [(2, "Jon loves contemporary dances.".into())]);
        assert_eq!(dropped, [memkit_clean::DropReason::SpeakerMismatch]);
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
