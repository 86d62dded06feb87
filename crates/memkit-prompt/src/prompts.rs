//! The prompt templates of `prompts/` and one render function per prompt.

use std::path::Path;

use chrono::NaiveDateTime;
use memkit_data::Window;
use memkit_schema::{ExtractorSchemaOptions, MemoryRecord, MemoryType};
use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior, Value, context};
use serde::{Deserialize, Serialize};

use crate::chat_template::hf_environment;
use crate::{ChatMessages, Error, Result};

/// The file beside a training dataset (`train.jsonl`) and a trained checkpoint (`config.json`)
/// that holds the extraction template its examples were rendered with.
pub const TRAINED_PROMPT_FILE: &str = "extract_prompt.j2";

/// The GGUF metadata key that carries [`TRAINED_PROMPT_FILE`]'s text.
pub const GGUF_PROMPT_KEY: &str = "memkit.extract_prompt";

/// The prompts memkit renders; each is one file `prompts/<name>.j2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptName {
    /// Window → memory records (`extract.j2`): the long instructions a base model or a
    /// window-mode teacher is asked with.
    Extract,
    /// Window → memory records, in one short instruction (`student.j2`): what a fine-tuned
    /// student learns and is asked with (prompt distillation).
    Student,
    /// Window and a small group of its messages → their records: the decomposed teacher's job
    /// (`teach.j2`).
    Teach,
    /// Rejected records → the follow-up that names each problem (`repair.j2`).
    Repair,
    /// Question → parsed query fields (`query.j2`).
    Query,
    /// Window → HingeMem segments (`boundary.j2`).
    Boundary,
    /// Stored + new record → MERGE / SUPERSEDE / KEEP_BOTH (`update.j2`).
    Update,
    /// Question + memories → answer (`answer.j2`).
    Answer,
    /// Question + gold + candidate → CORRECT / WRONG (`judge.j2`).
    Judge,
}

impl PromptName {
    /// All prompts, in a fixed order.
    pub const ALL: [PromptName; 9] = [
        PromptName::Extract,
        PromptName::Student,
        PromptName::Teach,
        PromptName::Repair,
        PromptName::Query,
        PromptName::Boundary,
        PromptName::Update,
        PromptName::Answer,
        PromptName::Judge,
    ];

    /// The file name, e.g. `extract.j2`.
    pub fn file_name(self) -> &'static str {
        match self {
            PromptName::Extract => "extract.j2",
            PromptName::Student => "student.j2",
            PromptName::Teach => "teach.j2",
            PromptName::Repair => "repair.j2",
            PromptName::Query => "query.j2",
            PromptName::Boundary => "boundary.j2",
            PromptName::Update => "update.j2",
            PromptName::Answer => "answer.j2",
            PromptName::Judge => "judge.j2",
        }
    }

    /// The source compiled into the binary.
    pub fn embedded_source(self) -> &'static str {
        match self {
            PromptName::Extract => include_str!("../../../prompts/extract.j2"),
            PromptName::Student => include_str!("../../../prompts/student.j2"),
            PromptName::Teach => include_str!("../../../prompts/teach.j2"),
            PromptName::Repair => include_str!("../../../prompts/repair.j2"),
            PromptName::Query => include_str!("../../../prompts/query.j2"),
            PromptName::Boundary => include_str!("../../../prompts/boundary.j2"),
            PromptName::Update => include_str!("../../../prompts/update.j2"),
            PromptName::Answer => include_str!("../../../prompts/answer.j2"),
            PromptName::Judge => include_str!("../../../prompts/judge.j2"),
        }
    }
}

/// Options of the extraction prompt; they are stated in the system message, so keep them fixed
/// for a run (and equal to the decoding caps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractOptions {
    /// At most this many records per window.
    pub max_memories: usize,
    /// At most this many keywords per record.
    pub max_keywords: usize,
}

impl Default for ExtractOptions {
    /// The caps of [`ExtractorSchemaOptions::default`].
    fn default() -> Self {
        ExtractorSchemaOptions::default().into()
    }
}

impl From<ExtractorSchemaOptions> for ExtractOptions {
    fn from(o: ExtractorSchemaOptions) -> Self {
        ExtractOptions { max_memories: o.max_memories, max_keywords: o.max_keywords }
    }
}

/// One retrieved memory as the answer prompt shows it: a record, or a raw turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerMemory {
    /// The text.
    pub content: String,
    /// The record's type; `None` for a raw turn.
    pub memory_type: Option<MemoryType>,
    /// The time it refers to (a record's `time` dimension), or empty.
    pub time: String,
    /// The day it was said, `YYYY-MM-DD`, or empty.
    pub said_on: String,
    /// Who said it, or empty.
    pub speaker: String,
    /// The assistant reply that followed the source message (dynamic assistant recall).
    pub assistant_reply: Option<String>,
}

impl AnswerMemory {
    /// A memory record, with the day of its source message.
    pub fn from_record(record: &MemoryRecord) -> Self {
        let ts = record.pointer.timestamp.as_str();
        let said_on = NaiveDateTime::parse_from_str(ts, "%Y-%m-%dT%H:%M:%S")
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_else(|_| ts.to_string());
        AnswerMemory {
            content: record.content.clone(),
            memory_type: Some(record.memory_type),
            time: record.dims.time.clone(),
            said_on,
            speaker: record.pointer.speaker.clone(),
            assistant_reply: None,
        }
    }

    /// The same memory with the assistant reply attached.
    pub fn with_assistant_reply(mut self, reply: impl Into<String>) -> Self {
        self.assistant_reply = Some(reply.into());
        self
    }
}

impl From<&MemoryRecord> for AnswerMemory {
    fn from(record: &MemoryRecord) -> Self {
        Self::from_record(record)
    }
}

/// How question dates appear in prompts: `2023-05-30 (Tue) 23:40`.
fn question_date(date: Option<NaiveDateTime>) -> String {
    date.map(|d| d.format("%Y-%m-%d (%a) %H:%M").to_string()).unwrap_or_default()
}

/// The prompt templates, compiled: the embedded ones, or a folder's overrides.
#[derive(Debug)]
pub struct Prompts {
    env: Environment<'static>,
    sources: Vec<(PromptName, String)>,
}

impl Prompts {
    /// The prompts compiled into the binary (`prompts/*.j2` of this repository).
    pub fn embedded() -> Result<Self> {
        Self::with_sources(PromptName::ALL.map(|name| (name, name.embedded_source().to_string())))
    }

    /// The embedded prompts, with each `<name>.j2` found in `dir` replacing its embedded
    /// version. Any other `.j2` file there is an error (a misspelt override would otherwise be
    /// ignored); other files are ignored.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let io = |path: &Path, source| Error::Io { path: path.to_path_buf(), source };
        let mut sources = PromptName::ALL.map(|name| (name, name.embedded_source().to_string()));
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let path = entry.map_err(|e| io(dir, e))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("j2") {
                continue;
            }
            let file = path.file_name().and_then(|f| f.to_str()).unwrap_or_default();
            let Some(slot) = sources.iter_mut().find(|(name, _)| name.file_name() == file) else {
                let expected = PromptName::ALL.map(PromptName::file_name).join(", ");
                return Err(Error::UnknownPrompt { path, expected });
            };
            slot.1 = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
            tracing::info!(path = %path.display(), "prompt override");
        }
        Self::with_sources(sources)
    }

    /// These prompts, with the extraction prompt replaced by the template a trained extractor
    /// carries ([`TRAINED_PROMPT_FILE`] beside its checkpoint, [`GGUF_PROMPT_KEY`] in its
    /// GGUF): [`render_extract`](Self::render_extract) then renders what the model learnt.
    pub fn with_trained_prompt(self, source: &str) -> Result<Self> {
        let mut sources: [(PromptName, String); 9] = self.sources.try_into().expect("one source per prompt");
        sources.iter_mut().find(|(name, _)| *name == PromptName::Extract).expect("extract is a prompt").1 = source.to_owned();
        Self::with_sources(sources)
    }

    fn with_sources(sources: [(PromptName, String); 9]) -> Result<Self> {
        let mut env = hf_environment();
        // A misspelt variable in a prompt must fail, not render as nothing.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        for (name, source) in &sources {
            env.add_template_owned(name.file_name(), source.clone())
                .map_err(|e| Error::Prompt { name: name.file_name().into(), source: e })?;
        }
        Ok(Prompts { env, sources: sources.into() })
    }

    /// The source of a prompt as loaded.
    pub fn source(&self, name: PromptName) -> &str {
        self.sources.iter().find(|(n, _)| *n == name).map_or("", |(_, s)| s.as_str())
    }

    /// Renders the `system` and `user` blocks of a prompt with `ctx`, each trimmed.
    pub fn render(&self, name: PromptName, ctx: Value) -> Result<ChatMessages> {
        let err = |e| Error::Prompt { name: name.file_name().into(), source: e };
        let template = self.env.get_template(name.file_name()).map_err(err)?;
        let mut captured = template.render_captured(ctx).map_err(err)?;
        let (system, user) = captured
            .with_state_mut(|state| -> Result<_, minijinja::Error> { Ok((state.render_block("system")?, state.render_block("user")?)) })
            .map_err(err)?;
        Ok(ChatMessages { system: system.trim().to_string(), user: user.trim().to_string() })
    }

    /// The extraction prompt for a window: instructions, then the window lines
    /// ([`Window::render`]) with the context-only messages named.
    pub fn render_extract(&self, window: &Window, options: &ExtractOptions) -> Result<ChatMessages> {
        self.render_window(PromptName::Extract, window, options)
    }

    /// The system message of the extraction prompt (it does not depend on the window): what
    /// a tool that renders the user message itself, such as an Ollama `Modelfile`'s `SYSTEM`,
    /// needs.
    pub fn extract_system(&self, options: &ExtractOptions) -> Result<String> {
        let empty =
            Window { id: String::new(), dialogue_id: String::new(), index: 0, context: 0, max_message_chars: 0, messages: Vec::new() };
        Ok(self.render_extract(&empty, options)?.system)
    }

    /// A window prompt ([`PromptName::Extract`] or [`PromptName::Student`]; the others take
    /// other variables and fail to render).
    pub fn render_window(&self, name: PromptName, window: &Window, options: &ExtractOptions) -> Result<ChatMessages> {
        self.render(
            name,
            context! {
                lines => window.render(),
                message_count => window.messages.len(),
                context => window.context,
                max_memories => options.max_memories,
                max_keywords => options.max_keywords,
                window => Value::from(Serde(window)),
            },
        )
    }

    /// The decomposed teacher's prompt: records for the messages numbered `targets` (the
    /// extractor output's `source_id`s), with up to `earlier` messages of the window before the
    /// first of them as context.
    pub fn render_teach(&self, window: &Window, targets: &[u32], earlier: usize, options: &ExtractOptions) -> Result<ChatMessages> {
        let first = targets.first().copied().unwrap_or(1) as usize;
        let from = first.saturating_sub(1).saturating_sub(earlier);
        let earlier: Vec<String> =
            window.messages[from..first.saturating_sub(1)].iter().map(|m| m.render_line(window.max_message_chars)).collect();
        let targets: Vec<Value> = targets
            .iter()
            .filter_map(|&n| window.message(n))
            .map(|m| context! { number => m.number, speaker => m.turn.speaker.as_str(), line => m.render_line(window.max_message_chars) })
            .collect();
        self.render(
            PromptName::Teach,
            context! {
                earlier => earlier.join("\n"),
                targets => targets,
                max_memories => options.max_memories,
                max_keywords => options.max_keywords,
                window => Value::from(Serde(window)),
            },
        )
    }

    /// The follow-up after a reply whose records were rejected (`repair.j2`), one line per
    /// problem: the user turn to send after the model's reply.
    pub fn render_repair(&self, problems: &[String]) -> Result<String> {
        Ok(self.render(PromptName::Repair, context! { problems => problems.to_vec() })?.user)
    }

    /// The query-parsing prompt for a question asked at `date`.
    pub fn render_query(&self, question: &str, date: Option<NaiveDateTime>) -> Result<ChatMessages> {
        self.render(PromptName::Query, context! { question => question, question_date => question_date(date) })
    }

    /// The HingeMem segmentation prompt for a window.
    pub fn render_boundary(&self, window: &Window) -> Result<ChatMessages> {
        self.render(
            PromptName::Boundary,
            context! { lines => window.render(), message_count => window.messages.len(), window => Value::from(Serde(window)) },
        )
    }

    /// The update prompt for a stored record and a new one.
    pub fn render_update(&self, stored: &MemoryRecord, new: &MemoryRecord) -> Result<ChatMessages> {
        self.render(PromptName::Update, context! { old => Value::from(Serde(stored)), new => Value::from(Serde(new)) })
    }

    /// The answer prompt for a question asked at `date`, over retrieved memories in rank order.
    pub fn render_answer(&self, question: &str, date: Option<NaiveDateTime>, memories: &[AnswerMemory]) -> Result<ChatMessages> {
        self.render(
            PromptName::Answer,
            context! { question => question, question_date => question_date(date), memories => Value::from(Serde(memories)) },
        )
    }

    /// The judge prompt for a candidate answer against the gold one.
    pub fn render_judge(&self, question: &str, gold: &str, answer: &str) -> Result<ChatMessages> {
        self.render(PromptName::Judge, context! { question => question, gold => gold, answer => answer })
    }
}
