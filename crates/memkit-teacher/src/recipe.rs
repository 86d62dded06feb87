//! Distill recipes: TOML files in `recipes/distill/` naming the corpus, the teacher and the
//! output. Unknown keys are errors, so a typo fails loudly.
//!
//! ```toml
//! name = "lme-filler"
//! [corpus]
//! windows = 300
//! [corpus.longmemeval_s]
//! path = "longmemeval/longmemeval_s_cleaned_subset200.json"
//! [teacher]
//! kind = "local"
//! model = "qwen2.5-coder-1.5b-instruct"
//! ```

use std::path::{Path, PathBuf};

use memkit_clean::GroundingConfig;
use memkit_data::{SplitRatios, WindowConfig};
use memkit_infer::ExtractConfig;
use memkit_prompt::PromptName;
use memkit_schema::ExtractorSchemaOptions;
use serde::{Deserialize, Serialize};

use crate::samples::Samples;
use crate::{Error, Result};

/// A whole distill recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistillRecipe {
    /// Dataset name: the output goes to `data/distilled/<name>/` unless `out_dir` says otherwise.
    pub name: String,
    /// One line for the dataset README.
    #[serde(default)]
    pub description: String,
    /// Output folder (relative to the working directory). Default `data/distilled/<name>`.
    #[serde(default)]
    pub out_dir: Option<PathBuf>,
    /// Which dialogues, cut how, and how many windows.
    pub corpus: CorpusSpec,
    /// Who labels the windows.
    pub teacher: TeacherSpec,
    /// How the teacher is asked: a whole window at once, or a few messages at a time.
    #[serde(default)]
    pub labelling: LabellingSpec,
    /// Grounding of the teacher's records in the window (re-point, drop the unsupported).
    #[serde(default)]
    pub grounding: GroundingConfig,
    /// Caps of the prompt, the output schema and decoding.
    #[serde(default)]
    pub generation: GenerationSpec,
    /// Train/valid split of the labelled windows.
    #[serde(default)]
    pub output: OutputSpec,
}

/// The training corpus: never LoCoMo (evaluation only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorpusSpec {
    /// Windows to label, drawn in a seeded order that does not depend on `windows`: raising it
    /// keeps every window labelled so far and adds new ones.
    pub windows: usize,
    /// Seed of the window order.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// How dialogues are cut (default: 15 user messages with 3 of context, each message cut to
    /// 1,500 characters).
    #[serde(default = "default_window")]
    pub window: WindowConfig,
    /// Windows whose rendered dialogue lines are longer than this are skipped (and counted).
    #[serde(default = "default_max_window_chars")]
    pub max_window_chars: usize,
    /// LongMemEval-S filler sessions.
    #[serde(default)]
    pub longmemeval_s: Option<LongMemEvalSource>,
    /// MemoryBank dialogues.
    #[serde(default)]
    pub memorybank: Option<MemoryBankSource>,
    /// The BYU chit-chat dataset: two people per dialogue (`[corpus.chitchat]`).
    #[serde(default)]
    pub chitchat: Option<ChitchatSource>,
}

/// LongMemEval-S filler sessions: sessions that are no question's evidence and appear in no
/// haystack of a question in the evaluation split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LongMemEvalSource {
    /// The LongMemEval-S file, relative to the data dir or absolute.
    pub path: PathBuf,
    /// Share of questions held out as the evaluation split (their haystacks are never used).
    #[serde(default = "default_eval_share")]
    pub eval_share: f64,
    /// Seed of the question split (memkit-data's `assign_split` on question ids; the `test`
    /// part is the evaluation split).
    #[serde(default = "default_split_seed")]
    pub split_seed: u64,
}

impl LongMemEvalSource {
    /// The question split: `test` is the evaluation split.
    pub fn ratios(&self) -> SplitRatios {
        SplitRatios { train: 1.0 - self.eval_share, valid: 0.0, test: self.eval_share }
    }
}

/// MemoryBank: one dialogue per user, one session per day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryBankSource {
    /// The MemoryBank file (`memory_bank_en.json`), relative to the data dir or absolute.
    pub path: PathBuf,
}

/// The BYU chit-chat dataset (memkit-data's `load_chitchat`): conversations between two people,
/// a dialogue per pair. Both speakers are users, so `user_only` windows keep both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChitchatSource {
    /// Its `dataset.json`, relative to the data dir or absolute; default: the installed one
    /// (`memkit models fetch chitchat-dataset`).
    #[serde(default)]
    pub path: Option<PathBuf>,
}

/// The teacher backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TeacherSpec {
    /// A GGUF model in-process through llama.cpp (no key, no server).
    Local {
        /// A packaged model name (`memkit models list`) or a `.gguf` path.
        model: String,
        /// Threads for llama.cpp (default: the cores available).
        #[serde(default)]
        threads: Option<usize>,
        /// Windows decoded together after the shared system prompt. A `kill -9` loses at most
        /// this many windows.
        #[serde(default = "default_batch")]
        batch: usize,
        /// KV-cache size in tokens (default: enough for the batch).
        #[serde(default)]
        n_ctx: Option<u32>,
    },
    /// Any OpenAI-compatible `/v1/chat/completions` server.
    Openai {
        /// API root including `/v1`.
        base_url: String,
        /// Model name sent with each request.
        model: String,
        /// Environment variable holding the API key.
        #[serde(default = "default_api_key_env")]
        api_key_env: String,
        /// Requests in flight at once.
        #[serde(default = "default_concurrency")]
        concurrency: usize,
        /// Limit on one attempt, in seconds.
        #[serde(default = "default_timeout_s")]
        timeout_s: u64,
        /// Retries of a transient failure (backoff with full jitter).
        #[serde(default = "default_retries")]
        max_retries: u32,
        /// Prices for the cost estimate in the stats.
        #[serde(default)]
        price: Option<Price>,
    },
}

/// How the teacher labels a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The whole window in one request, with the extraction prompt the student learns
    /// (`extract.j2`): for strong endpoint teachers.
    Window,
    /// A few new messages per request (`teach.j2`), the window as context, the source ids fixed
    /// by the schema; the replies are assembled into one window target. The default for local
    /// teachers: a small model does well when its job is small.
    Decomposed,
}

/// How the teacher is asked, and what is done with its replies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LabellingSpec {
    /// `window` or `decomposed`; default: decomposed for a local teacher, window for a server.
    pub mode: Option<Mode>,
    /// New messages per request in decomposed mode (1 to 3; default 1: with two speakers in one
    /// request the 1.5B teacher wrote one speaker's facts about the other).
    pub group: usize,
    /// Decomposed mode: messages before a request's first message shown as its context (the
    /// rest of the window is not shown: a 1.5B teacher shown 25 messages wrote about all of them).
    pub context: usize,
    /// Decomposed mode: skip messages with nothing to remember (greetings, thanks, reactions,
    /// a photo without words) without asking the teacher.
    pub prefilter: bool,
    /// Ask once more, naming the problem, when records come back in the first person or about
    /// the other speaker.
    pub repair: bool,
    /// With `repair`: also ask once more when cleaning keeps none of a reply's records, naming
    /// why each was dropped (not supported by the message, or naming no one). Without it, 413
    /// of 1,419 labelled messages had no target because every record was dropped, and on the
    /// gold set 17 of 30 such messages hold a gold memory.
    pub repair_dropped: bool,
    /// Damp repeats inside a reply (llama.cpp's DRY sampler; local teachers).
    pub avoid_repeats: bool,
    /// Ask each request several times and make the replies one: self-consistency or best-of-n
    /// (`[labelling.samples]`; default one greedy reply).
    pub samples: Samples,
}

impl Default for LabellingSpec {
    fn default() -> Self {
        Self {
            mode: None,
            group: 1,
            context: 2,
            prefilter: true,
            repair: true,
            repair_dropped: false,
            avoid_repeats: true,
            samples: Samples::default(),
        }
    }
}

impl LabellingSpec {
    /// The mode, resolved for `teacher`.
    pub fn mode_for(&self, teacher: &TeacherSpec) -> Mode {
        self.mode.unwrap_or(match teacher {
            TeacherSpec::Local { .. } => Mode::Decomposed,
            TeacherSpec::Openai { .. } => Mode::Window,
        })
    }
}

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens.
    pub prompt_per_mtok: f64,
    /// Per million completion tokens.
    pub completion_per_mtok: f64,
}

/// Caps of the prompt, the output schema and decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GenerationSpec {
    /// Records per window.
    pub max_memories: usize,
    /// Keywords per record.
    pub max_keywords: usize,
    /// Characters of a record's content.
    pub max_content_chars: usize,
    /// Characters of the other free strings.
    pub max_string_chars: usize,
    /// Most tokens per reply.
    pub max_tokens: usize,
}

impl Default for GenerationSpec {
    fn default() -> Self {
        let schema = ExtractorSchemaOptions::default();
        Self {
            max_memories: schema.max_memories,
            max_keywords: schema.max_keywords,
            max_content_chars: schema.max_content_chars,
            max_string_chars: 120,
            max_tokens: 1024,
        }
    }
}

impl GenerationSpec {
    /// The extractor configuration these caps make.
    pub fn extract_config(&self) -> ExtractConfig {
        ExtractConfig {
            schema: ExtractorSchemaOptions {
                max_memories: self.max_memories,
                max_keywords: self.max_keywords,
                max_content_chars: self.max_content_chars,
            },
            max_string_chars: Some(self.max_string_chars),
            max_tokens: self.max_tokens,
        }
    }
}

/// How labelled windows are split into train and valid (by dialogue, so no dialogue is in both).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputSpec {
    /// Share of dialogues in the valid split.
    pub valid_share: f64,
    /// Seed of the split.
    pub split_seed: u64,
    /// The prompt the examples are rendered with: `"student"` (`prompts/student.j2`, one short
    /// instruction: prompt distillation, the default) or `"extract"` (the long instructions of
    /// `prompts/extract.j2`). The labels do not depend on it: `memkit distill --write-only`
    /// renders the dataset again with another.
    pub prompt: PromptName,
    /// The least the dataset one message at a time (`messages/`) must hold. With it, `memkit
    /// distill` labels further windows of the seeded order until the dataset does, and fails
    /// naming the cause when `max_windows` are labelled and it still does not. None by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_examples: Option<MinExamples>,
}

impl Default for OutputSpec {
    fn default() -> Self {
        Self { valid_share: 0.1, split_seed: 42, prompt: PromptName::Student, min_examples: None }
    }
}

/// The examples a dataset must hold (`[output] min_examples`), and how far distillation may go
/// for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MinExamples {
    /// Training examples one message at a time.
    pub train: usize,
    /// Validation examples one message at a time.
    pub valid: usize,
    /// The most windows labelled to get them (`[corpus] windows` more at a time).
    pub max_windows: usize,
}

impl MinExamples {
    /// Whether `train` and `valid` examples are enough.
    pub fn met_by(&self, train: usize, valid: usize) -> bool {
        train >= self.train && valid >= self.valid
    }
}

fn default_seed() -> u64 {
    13
}
fn default_split_seed() -> u64 {
    7
}
fn default_eval_share() -> f64 {
    0.5
}
fn default_window() -> WindowConfig {
    WindowConfig { max_message_chars: 1500, ..WindowConfig::longmemeval() }
}
fn default_max_window_chars() -> usize {
    8000
}
fn default_batch() -> usize {
    4
}
fn default_api_key_env() -> String {
    "OPENAI_API_KEY".into()
}
fn default_concurrency() -> usize {
    4
}
fn default_timeout_s() -> u64 {
    120
}
fn default_retries() -> u32 {
    4
}

impl TeacherSpec {
    /// The same model behind an OpenAI-compatible server at `base_url` (`memkit serve`,
    /// llama.cpp's `llama-server`, vLLM) with `concurrency` requests in flight and `timeout_s`
    /// per attempt: a local teacher's model name is sent as the request's model; an `openai`
    /// teacher keeps its key, retries and prices.
    pub fn served_at(&self, base_url: &str, concurrency: usize, timeout_s: u64) -> TeacherSpec {
        let (model, api_key_env, max_retries, price) = match self {
            TeacherSpec::Local { model, .. } => (model.clone(), default_api_key_env(), default_retries(), None),
            TeacherSpec::Openai { model, api_key_env, max_retries, price, .. } => {
                (model.clone(), api_key_env.clone(), *max_retries, *price)
            }
        };
        TeacherSpec::Openai { base_url: base_url.to_owned(), model, api_key_env, concurrency, timeout_s, max_retries, price }
    }
}

impl DistillRecipe {
    /// Reads and checks a recipe file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
        Self::from_toml(&text).map_err(|e| match e {
            Error::Recipe { message, .. } => Error::Recipe { path: path.to_owned(), message },
            other => other,
        })
    }

    /// Parses and checks recipe text.
    pub fn from_toml(text: &str) -> Result<Self> {
        let recipe: Self = toml::from_str(text).map_err(|e| Error::Recipe { path: PathBuf::new(), message: e.to_string() })?;
        recipe.validate()?;
        Ok(recipe)
    }

    fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(Error::Recipe { path: PathBuf::new(), message });
        if self.name.is_empty() || self.name.contains(['/', '\\']) {
            return bad(format!("name {:?} must be a non-empty folder name", self.name));
        }
        if self.corpus.longmemeval_s.is_none() && self.corpus.memorybank.is_none() && self.corpus.chitchat.is_none() {
            return bad("corpus: name at least one source ([corpus.longmemeval_s], [corpus.memorybank] or [corpus.chitchat])".into());
        }
        if let Some(lme) = &self.corpus.longmemeval_s
            && !(0.0..1.0).contains(&lme.eval_share)
        {
            return bad(format!("corpus.longmemeval_s.eval_share = {} must be in [0, 1)", lme.eval_share));
        }
        self.corpus.window.validate().map_err(|e| Error::Recipe { path: PathBuf::new(), message: format!("corpus.window: {e}") })?;
        if !(1..=3).contains(&self.labelling.group) {
            return bad(format!("labelling.group = {} must be 1, 2 or 3 messages per request", self.labelling.group));
        }
        if let Err(e) = self.labelling.samples.check() {
            return bad(format!("labelling.samples: {e}"));
        }
        if !(0.0..1.0).contains(&self.output.valid_share) {
            return bad(format!("output.valid_share = {} must be in [0, 1)", self.output.valid_share));
        }
        if !matches!(self.output.prompt, PromptName::Student | PromptName::Extract) {
            let name = self.output.prompt.file_name().trim_end_matches(".j2");
            return bad(format!("output.prompt = \"{name}\" is not a window prompt: use \"student\" or \"extract\""));
        }
        if let Some(min) = &self.output.min_examples
            && (self.corpus.windows == 0 || min.max_windows < self.corpus.windows)
        {
            return bad(format!(
                "output.min_examples.max_windows = {} must be at least corpus.windows = {} (and that at least 1)",
                min.max_windows, self.corpus.windows
            ));
        }
        match &self.teacher {
            TeacherSpec::Local { batch: 0, .. } => bad("teacher.batch must be at least 1".into()),
            TeacherSpec::Openai { concurrency: 0, .. } => bad("teacher.concurrency must be at least 1".into()),
            _ => Ok(()),
        }
    }

    /// The output folder.
    pub fn out_dir(&self) -> PathBuf {
        self.out_dir.clone().unwrap_or_else(|| Path::new("data/distilled").join(&self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
name = "t"
[corpus]
windows = 5
[corpus.memorybank]
path = "memorybank/memory_bank_en.json"
[teacher]
kind = "local"
model = "smollm2-135m"
"#;

    #[test]
    fn a_served_local_teacher_asks_for_its_model_by_name() {
        let recipe = DistillRecipe::from_toml(MINIMAL).unwrap();
        let served = recipe.teacher.served_at("http://gpu:8080/v1", 32, 600);
        let TeacherSpec::Openai { base_url, model, concurrency, timeout_s, price, .. } = &served else { panic!("{served:?}") };
        assert_eq!(
            (base_url.as_str(), model.as_str(), *concurrency, *timeout_s, *price),
            ("http://gpu:8080/v1", "smollm2-135m", 32, 600, None)
        );
        let mut priced = served.clone();
        if let TeacherSpec::Openai { price, .. } = &mut priced {
            *price = Some(Price { prompt_per_mtok: 1.0, completion_per_mtok: 2.0 });
        }
        let moved = priced.served_at("http://other/v1", 4, 30);
        assert!(
            matches!(moved, TeacherSpec::Openai { ref base_url, concurrency: 4, timeout_s: 30, price: Some(_), .. } if base_url == "http://other/v1")
        );
    }

    #[test]
    fn a_minimal_recipe_gets_defaults() {
        let recipe = DistillRecipe::from_toml(MINIMAL).unwrap();
        assert_eq!(recipe.out_dir(), Path::new("data/distilled/t"));
        assert_eq!(recipe.corpus.window.size, 15);
        assert!(recipe.corpus.window.user_only);
        assert_eq!(recipe.generation.max_tokens, 1024);
        assert!(matches!(recipe.teacher, TeacherSpec::Local { batch: 4, .. }));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let typo = MINIMAL.replace("windows = 5", "windows = 5\nwindow_count = 3");
        let err = DistillRecipe::from_toml(&typo).unwrap_err().to_string();
        assert!(err.contains("window_count"), "{err}");
        let no_source = MINIMAL.replace("[corpus.memorybank]\npath = \"memorybank/memory_bank_en.json\"\n", "");
        assert!(DistillRecipe::from_toml(&no_source).unwrap_err().to_string().contains("at least one source"));
        let zero = MINIMAL.replace("model = \"smollm2-135m\"", "model = \"smollm2-135m\"\nbatch = 0");
        assert!(DistillRecipe::from_toml(&zero).unwrap_err().to_string().contains("batch"));
    }

    #[test]
    fn min_examples_reach_no_further_than_max_windows() {
        let asked = format!("{MINIMAL}[output]\nmin_examples = {{ train = 4, valid = 2, max_windows = 20 }}\n");
        let min = DistillRecipe::from_toml(&asked).unwrap().output.min_examples.unwrap();
        assert!(min.met_by(4, 2));
        assert!(!min.met_by(4, 1) && !min.met_by(3, 9));
        let short = asked.replace("max_windows = 20", "max_windows = 4");
        let err = DistillRecipe::from_toml(&short).unwrap_err().to_string();
        assert!(err.contains("max_windows = 4") && err.contains("corpus.windows = 5"), "{err}");
        let typo = asked.replace("valid = 2", "valid = 2, vaild = 3");
        assert!(DistillRecipe::from_toml(&typo).unwrap_err().to_string().contains("vaild"));
    }
}
