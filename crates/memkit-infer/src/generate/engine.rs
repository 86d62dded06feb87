//! [`LlamaEngine`]: one GGUF model and one llama.cpp context, with batched decoding over a
//! shared prefix.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::vocab::LlamaVocab;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde::{Deserialize, Serialize};
use tracing::instrument;

use super::error::GenerateError;
use super::repeat::ItemWatch;
use super::request::{FinishReason, GenerateRequest, Generation, Prompt, Sampling, Timings};
use super::stop::StopStrings;
use crate::Result;

/// Where DRY's repeat matching restarts: llama.cpp's defaults (`\n`, `:`, `"`, `*`) and `-`, so
/// that a JSON reply's keys and punctuation, and the dates its records share, repeat freely.
const DRY_BREAKERS: [&str; 5] = ["\n", ":", "\"", "*", "-"];

/// The sequence that holds the shared prefix; requests use sequences `1..n_seq_max`.
const PREFIX_SEQ: i32 = 0;

/// Whitespace allowed between JSON tokens unless the schema sets llguidance's `x-guidance`
/// options: what llama.cpp's JSON grammars allow (a space, or one or two newlines and an indent
/// of up to 20 spaces or tabs). llguidance's default allows any run of whitespace, on which a
/// small model can loop until `max_tokens`.
const JSON_WHITESPACE: &str = r"(?:[ ]|\n{1,2}[ \t]{0,20})";

/// Sizes of the context and of the thread pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineOptions {
    /// KV-cache cells, shared by all sequences (the cache is unified): the shared prefix plus,
    /// for every request decoded at the same time, its prompt and `max_tokens`. Default 4096.
    pub n_ctx: u32,
    /// Threads for prefill and decode. Default: the cores available to the process, which is
    /// right on an otherwise idle machine. llama.cpp is built without OpenMP, but ggml's own
    /// workers still meet at a spinning barrier after every operation, so when other work
    /// holds the cores, use fewer threads: on a 2-core machine under a load of about 4,
    /// SmolLM2-135M decoded at 1.7 tok/s with 2 threads and 44 tok/s with 1.
    pub n_threads: usize,
    /// Most tokens per `llama_decode` call (also the micro-batch); long prompts are evaluated
    /// in pieces of this size. Default 512, as llama-cpp-python.
    pub n_batch: u32,
    /// Sequences in the context: one holds the shared prefix and up to `n_seq_max - 1` requests
    /// decode together. At least 2; default 5 (batches of 4).
    pub n_seq_max: u32,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self { n_ctx: 4096, n_threads: std::thread::available_parallelism().map_or(1, usize::from), n_batch: 512, n_seq_max: 5 }
    }
}

impl EngineOptions {
    fn validate(&self) -> Result<(), GenerateError> {
        let invalid = |option, reason: &str| Err(GenerateError::InvalidOptions { option, reason: reason.to_owned() });
        if self.n_ctx == 0 {
            return invalid("n_ctx", "must be at least 1");
        }
        if self.n_threads == 0 {
            return invalid("n_threads", "must be at least 1");
        }
        if self.n_seq_max < 2 {
            return invalid("n_seq_max", "must be at least 2 (one sequence holds the shared prefix)");
        }
        if self.n_batch < self.n_seq_max {
            return invalid("n_batch", "must be at least n_seq_max (a decode step holds one token per sequence)");
        }
        Ok(())
    }
}

/// Facts about the loaded model, from llama.cpp and the GGUF metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelMeta {
    /// The GGUF file.
    pub path: PathBuf,
    /// `general.architecture`, e.g. `llama` or `qwen2`.
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// Parameters.
    pub n_params: u64,
    /// Bytes of the weight tensors.
    pub size_bytes: u64,
    /// Vocabulary size.
    pub n_vocab: i32,
    /// Context length the model was trained with.
    pub n_ctx_train: u32,
    /// Embedding width.
    pub n_embd: i32,
    /// Transformer blocks.
    pub n_layer: u32,
    /// Attention heads.
    pub n_head: u32,
    /// Key/value heads.
    pub n_head_kv: u32,
    /// Beginning-of-sequence token, if the vocabulary has one.
    pub bos: Option<i32>,
    /// End-of-sequence token, if the vocabulary has one.
    pub eos: Option<i32>,
    /// Whether tokenising with `add_special` prepends BOS.
    pub add_bos: bool,
    /// Every scalar metadata key and value (llama.cpp leaves out arrays such as the tokens).
    pub metadata: BTreeMap<String, String>,
}

/// llama.cpp's backend may be initialised once per process; every engine shares it.
static BACKEND: OnceLock<std::result::Result<LlamaBackend, String>> = OnceLock::new();

fn backend() -> Result<&'static LlamaBackend, GenerateError> {
    BACKEND
        .get_or_init(|| {
            // Before the first llama.cpp call, so that model-loading logs go to tracing too
            // rather than to stderr.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|message| GenerateError::Backend(message.clone()))
}

/// A GGUF model and its llama.cpp context.
///
/// Generation takes `&mut self`: a context decodes one batch at a time. Share an engine
/// between threads behind a `Mutex`.
pub struct LlamaEngine {
    // Declared before `model` so that it drops first: the context points into the model.
    context: LlamaContext<'static>,
    model: LlamaModel,
    /// Built on the first JSON-constrained request: it walks the whole vocabulary.
    parser_factory: Option<ParserFactory>,
    /// The prefix whose cells [`PREFIX_SEQ`] holds after the last call finished (empty when
    /// there is none to trust): a call with the same prefix starts from them.
    cached_prefix: Vec<LlamaToken>,
    path: PathBuf,
    options: EngineOptions,
}

impl std::fmt::Debug for LlamaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaEngine")
            .field("path", &self.path)
            .field("options", &self.options)
            .field("n_ctx", &self.context.n_ctx())
            .finish_non_exhaustive()
    }
}

/// A request being decoded, in its own sequence.
struct Slot<'r> {
    seq: i32,
    request: &'r GenerateRequest,
    prompt: Vec<LlamaToken>,
    sampler: LlamaSampler,
    stop: StopStrings,
    repeat: Option<ItemWatch>,
    /// Position of the next token of this sequence.
    pos: i32,
    /// Sampled and not yet decoded.
    pending: Option<LlamaToken>,
    text: Vec<u8>,
    completion_tokens: usize,
    finish_reason: Option<FinishReason>,
    prefill_ms: f64,
    decode_ms: f64,
}

impl LlamaEngine {
    /// Loads a GGUF file (memory-mapped) and creates a context with a unified KV cache, which
    /// lets sequences share the cells of a common prefix.
    #[instrument(skip_all, fields(path = %path.as_ref().display()))]
    pub fn load(path: impl AsRef<Path>, options: EngineOptions) -> Result<Self> {
        let path = path.as_ref();
        options.validate()?;
        if !path.is_file() {
            return Err(GenerateError::ModelNotFound { path: path.to_path_buf() }.into());
        }
        let backend = backend()?;
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
            .map_err(|source| GenerateError::LoadModel { path: path.to_path_buf(), source })?;
        let threads = i32::try_from(options.n_threads).unwrap_or(i32::MAX);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(options.n_ctx))
            .with_n_batch(options.n_batch)
            .with_n_ubatch(options.n_batch)
            .with_n_seq_max(options.n_seq_max)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            // Without it, copying a prefix between sequences aborts the process.
            .with_kv_unified(true);
        let context = model.new_context(backend, params).map_err(|source| GenerateError::CreateContext {
            path: path.to_path_buf(),
            n_ctx: options.n_ctx,
            source,
        })?;
        // SAFETY: the lifetime only records that the context must not outlive the model (the
        // context keeps a pointer to the C model, not to the Rust value, so moving `model` is
        // fine). Both live in the same struct, `context` is declared first so it drops first,
        // and the `'static` context is never handed out.
        #[allow(unsafe_code)]
        let context = unsafe { std::mem::transmute::<LlamaContext<'_>, LlamaContext<'static>>(context) };
        tracing::debug!(n_ctx = context.n_ctx(), threads, "llama.cpp context ready");
        Ok(Self { context, model, parser_factory: None, cached_prefix: Vec::new(), path: path.to_path_buf(), options })
    }

    /// The options the engine was loaded with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// KV-cache cells of the context (llama.cpp may round `n_ctx` up).
    pub fn n_ctx(&self) -> u32 {
        self.context.n_ctx()
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`) are parsed;
    /// `add_special` prepends BOS where the model's metadata asks for it, as llama.cpp does.
    pub fn tokenize(&self, text: &str, add_special: bool) -> Vec<i32> {
        self.tokens(text, add_special).into_iter().map(|t| t.0).collect()
    }

    fn tokens(&self, text: &str, add_special: bool) -> Vec<LlamaToken> {
        self.model.vocab().tokenize(text.as_bytes(), add_special, true)
    }

    /// The text of `tokens`, special tokens included, so that it tokenises back to them.
    pub fn detokenize(&self, tokens: &[i32]) -> Result<String> {
        let tokens = self.checked_tokens(tokens)?;
        let bytes = self.model.vocab().detokenize(&tokens, false, true);
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn checked_tokens(&self, tokens: &[i32]) -> Result<Vec<LlamaToken>, GenerateError> {
        let n_vocab = self.model.n_vocab();
        tokens
            .iter()
            .map(
                |&token| {
                    if (0..n_vocab).contains(&token) {
                        Ok(LlamaToken(token))
                    } else {
                        Err(GenerateError::TokenOutOfRange { token, n_vocab })
                    }
                },
            )
            .collect()
    }

    /// The Jinja chat template in the GGUF metadata (`tokenizer.chat_template`), if any.
    pub fn chat_template(&self) -> Option<String> {
        let template = self.model.chat_template(None).ok()?;
        template.to_string().ok()
    }

    /// A string of the GGUF metadata, if the file has the key.
    pub fn meta_str(&self, key: &str) -> Option<String> {
        self.model.meta_val_str(key).ok()
    }

    /// Sizes, special tokens and scalar metadata of the model.
    pub fn model_meta(&self) -> Result<ModelMeta> {
        let mut metadata = BTreeMap::new();
        for index in 0..self.model.meta_count() {
            let at = |source| GenerateError::Metadata { key: format!("#{index}"), source };
            let key = self.model.meta_key_by_index(index).map_err(at)?;
            let value = self.model.meta_val_str_by_index(index).map_err(at)?;
            metadata.insert(key, value);
        }
        let vocab = self.model.vocab();
        let token = |t: LlamaToken| (t.0 >= 0).then_some(t.0);
        Ok(ModelMeta {
            path: self.path.clone(),
            architecture: metadata.get("general.architecture").cloned(),
            name: metadata.get("general.name").cloned(),
            n_params: self.model.n_params(),
            size_bytes: self.model.size(),
            n_vocab: self.model.n_vocab(),
            n_ctx_train: self.model.n_ctx_train(),
            n_embd: self.model.n_embd(),
            n_layer: self.model.n_layer(),
            n_head: self.model.n_head(),
            n_head_kv: self.model.n_head_kv(),
            bos: token(vocab.bos()),
            eos: token(vocab.eos()),
            add_bos: vocab.should_add_bos(),
            metadata,
        })
    }

    /// Generates one completion: [`Self::generate_batch`] without a shared prefix.
    pub fn generate(&mut self, request: &GenerateRequest) -> Result<Generation> {
        let mut generations = self.generate_batch("", std::slice::from_ref(request))?;
        Ok(generations.remove(0))
    }

    /// Generates a completion for each request after a shared `prefix` (system prompt and
    /// instructions, rendered text; may be empty).
    ///
    /// The prefix is evaluated once, in its own sequence, and each request's sequence starts
    /// from a copy of it (in a unified cache the copy shares the cells, it costs no compute);
    /// the request's prompt is appended after it. Up to `n_seq_max - 1` requests, and as many
    /// as fit the context, decode together, one token per sequence per `llama_decode` call;
    /// each has its own sampler and stops on its own. Results are in the order of `requests`.
    ///
    /// The prefix's cells stay in the cache after the call: the next call with the same
    /// prefix tokens skips evaluating it ([`Generation::cached_tokens`] says so), which gives
    /// the same cells and so the same outputs. Any other call clears the cache first, as does
    /// a call after one that failed midway, so nothing else carries over between calls. (Reusing
    /// only a shared start would evaluate the rest in a call of its own, which can change the
    /// last bits of the logits, and so make a reply depend on the call before it.)
    ///
    /// Each prompt is evaluated in calls of its own, so that a request's output does not
    /// depend on the requests batched with it (llama.cpp's kernels are not bit-identical
    /// across call shapes). With greedy sampling a request gives the same tokens here as alone
    /// with the same prefix, except that prompts of 64 tokens or more can differ in the last
    /// bits (the attention kernel for them groups cache cells in tiles by position).
    ///
    /// BOS is added to the prefix, or to the prompt when the prefix is empty.
    #[instrument(skip_all, fields(requests = requests.len(), prefix_bytes = prefix.len()))]
    pub fn generate_batch(&mut self, prefix: &str, requests: &[GenerateRequest]) -> Result<Vec<Generation>> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let n_ctx = self.context.n_ctx();
        let prefix_tokens = if prefix.is_empty() { Vec::new() } else { self.tokens(prefix, true) };
        let mut slots = Vec::with_capacity(requests.len());
        for (index, request) in requests.iter().enumerate() {
            let prompt = match &request.prompt {
                Prompt::Text(text) => self.tokens(text, prefix_tokens.is_empty()),
                Prompt::Tokens(tokens) => self.checked_tokens(tokens)?,
            };
            let invalid = |reason: &str| GenerateError::InvalidRequest { index, reason: reason.to_owned() };
            if prompt.is_empty() {
                return Err(invalid("the prompt has no tokens").into());
            }
            if request.max_tokens == 0 {
                return Err(invalid("max_tokens must be at least 1").into());
            }
            let needed = prefix_tokens.len() + prompt.len() + request.max_tokens;
            if needed > n_ctx as usize {
                return Err(GenerateError::ContextFull { index, needed, n_ctx }.into());
            }
            let sampler = self.sampler(index, request)?;
            slots.push(Slot {
                seq: 0,
                request,
                prompt,
                sampler,
                stop: StopStrings::new(&request.stop),
                repeat: request.end_at_repeat.clone().map(ItemWatch::new),
                pos: 0,
                pending: None,
                text: Vec::new(),
                completion_tokens: 0,
                finish_reason: None,
                prefill_ms: 0.0,
                decode_ms: 0.0,
            });
        }

        let n_batch = self.options.n_batch as usize;
        let mut batch = LlamaBatch::new(n_batch, 1);
        // Trusted again only once this call has finished: a failure midway may leave
        // request sequences in the cache.
        let reuse = !prefix_tokens.is_empty() && std::mem::take(&mut self.cached_prefix) == prefix_tokens;
        let reused = if reuse { prefix_tokens.len() } else { 0 };
        let started = Instant::now();
        if !reuse {
            self.context.clear_kv_cache();
            self.prefill_prefix(&prefix_tokens, &mut batch)?;
        }
        let prefix_ms = ms_since(started);

        // Chunks of at most n_seq_max - 1 requests whose prompts and completions fit the
        // cache beside the prefix; a request fits alone (checked above).
        let per_chunk = (self.options.n_seq_max - 1) as usize;
        let mut start = 0;
        while start < slots.len() {
            let mut end = start;
            let mut cells = prefix_tokens.len();
            while end < slots.len() && end - start < per_chunk {
                let needed = slots[end].prompt.len() + slots[end].request.max_tokens;
                if end > start && cells + needed > n_ctx as usize {
                    break;
                }
                cells += needed;
                end += 1;
            }
            let chunk = &mut slots[start..end];
            self.run_chunk(chunk, prefix_tokens.len(), &mut batch)?;
            for slot in chunk {
                slot.prefill_ms += prefix_ms;
            }
            start = end;
        }
        let prefix_len = prefix_tokens.len();
        self.cached_prefix = prefix_tokens;
        Ok(slots.into_iter().map(|slot| slot.into_generation(prefix_len, reused)).collect())
    }

    /// Evaluates the shared prefix into [`PREFIX_SEQ`], `n_batch` tokens per call; no logits.
    fn prefill_prefix(&mut self, tokens: &[LlamaToken], batch: &mut LlamaBatch) -> Result<(), GenerateError> {
        for (piece_index, piece) in tokens.chunks(self.options.n_batch as usize).enumerate() {
            batch.clear();
            let first = piece_index * self.options.n_batch as usize;
            for (offset, &token) in piece.iter().enumerate() {
                batch.add(token, position(first + offset), &[PREFIX_SEQ], false)?;
            }
            self.context.decode(batch)?;
        }
        Ok(())
    }

    /// Decodes `slots` together until each has finished, then frees their sequences (the
    /// prefix stays for the next chunk).
    fn run_chunk(&mut self, slots: &mut [Slot<'_>], prefix_len: usize, batch: &mut LlamaBatch) -> Result<(), GenerateError> {
        let n_batch = self.options.n_batch as usize;
        let context = &mut self.context;
        let vocab = self.model.vocab();
        for (k, slot) in slots.iter_mut().enumerate() {
            slot.seq = PREFIX_SEQ + 1 + i32::try_from(k).unwrap_or(i32::MAX);
            slot.pos = position(prefix_len);
            if prefix_len > 0 {
                // Full range: in a unified cache this tags the prefix cells with the new
                // sequence, nothing is recomputed or copied.
                context.kv_cache_seq_cp(PREFIX_SEQ, slot.seq, None, None)?;
            }
        }

        // Prompt prefill, one sequence at a time in its own llama_decode calls: the numerics
        // of llama.cpp's CPU kernels depend on the shape of a call (attention over 64 or more
        // query rows takes a tiled path), so packing several prompts into one call would make
        // a request's output depend on the requests batched with it. Only a prompt's last
        // token needs logits; its first completion token is sampled right after that call
        // (the next call overwrites the logits).
        let started = Instant::now();
        for slot in slots.iter_mut() {
            let n_prompt = slot.prompt.len();
            for (piece_index, piece) in slot.prompt.chunks(n_batch).enumerate() {
                batch.clear();
                for (offset, &token) in piece.iter().enumerate() {
                    let last = piece_index * n_batch + offset + 1 == n_prompt;
                    batch.add(token, slot.pos, &[slot.seq], last)?;
                    slot.pos += 1;
                }
                context.decode(batch)?;
            }
            slot.sample(context, &vocab, batch.n_tokens() - 1);
        }
        let prefill_ms = ms_since(started);

        // Batched decoding: one token per unfinished sequence per call. A step has fewer than
        // 64 rows, where the attention kernel skips other sequences' cells, so each sequence
        // gets what a step of its own would give (but llama.cpp splits a one-row step over 512
        // or more cells between threads, which can change the last bits).
        let mut owners: Vec<(usize, i32)> = Vec::with_capacity(slots.len());
        loop {
            batch.clear();
            owners.clear();
            for (k, slot) in slots.iter_mut().enumerate() {
                if let Some(token) = slot.pending.take() {
                    batch.add(token, slot.pos, &[slot.seq], true)?;
                    slot.pos += 1;
                    owners.push((k, batch.n_tokens() - 1));
                }
            }
            if owners.is_empty() {
                break;
            }
            let step = Instant::now();
            context.decode(batch)?;
            for &(owner, index) in &owners {
                slots[owner].sample(context, &vocab, index);
            }
            let step_ms = ms_since(step);
            for &(owner, _) in &owners {
                slots[owner].decode_ms += step_ms;
            }
        }

        for slot in slots.iter_mut() {
            slot.prefill_ms = prefill_ms;
            context.kv_cache_seq_rm(slot.seq, None, None)?;
        }
        Ok(())
    }

    /// The sampler chain of a request: the JSON-schema mask first, then the choice of token.
    fn sampler(&mut self, index: usize, request: &GenerateRequest) -> Result<LlamaSampler> {
        let mut chain = Vec::with_capacity(4);
        if let Some(schema) = &request.json_schema {
            chain.push(self.json_sampler(index, schema)?);
        }
        if let Some(dry) = request.dry.filter(|d| d.multiplier > 0.0) {
            // The sampler sees the reply only (the tokens it accepts), so the whole reply is its
            // window. (llama.cpp's `-1`, "the context", is clamped to 0 by this version, which
            // turns the sampler off.)
            let last_n = i32::try_from(request.max_tokens).unwrap_or(i32::MAX);
            chain.push(LlamaSampler::dry(&self.model, dry.multiplier, dry.base, dry.allowed_length, last_n, DRY_BREAKERS));
        }
        match request.sampling {
            Sampling::Greedy => chain.push(LlamaSampler::greedy()),
            Sampling::Temperature { temperature, top_p, seed } => {
                if !(temperature > 0.0 && temperature.is_finite()) {
                    return Err(
                        GenerateError::InvalidRequest { index, reason: format!("temperature must be above 0, got {temperature}") }.into()
                    );
                }
                if !(top_p > 0.0 && top_p <= 1.0) {
                    return Err(GenerateError::InvalidRequest { index, reason: format!("top_p must be in (0, 1], got {top_p}") }.into());
                }
                // llama.cpp's own order: truncate, then temperature, then draw.
                chain.push(LlamaSampler::top_p(top_p, 1));
                chain.push(LlamaSampler::temp(temperature));
                chain.push(LlamaSampler::dist(seed));
            }
        }
        Ok(LlamaSampler::chain_simple(chain))
    }

    /// An llguidance matcher for `schema`, as a sampler that masks every token that would make
    /// the output invalid (end-of-generation is allowed only once the JSON is complete).
    fn json_sampler(&mut self, index: usize, schema: &serde_json::Value) -> Result<LlamaSampler> {
        let schema_error = |message: String| GenerateError::JsonSchema { index, message };
        let factory = match &mut self.parser_factory {
            Some(factory) => factory,
            empty @ None => {
                let tok_env = LlamaSampler::llguidance_tok_env(&self.model);
                let mut factory = ParserFactory::new_simple(&tok_env).map_err(|e| schema_error(format!("{e:#}")))?;
                // llguidance writes warnings to stderr by default; a library must not.
                factory.quiet();
                empty.insert(factory)
            }
        };
        let mut schema = schema.clone();
        if let Some(object) = schema.as_object_mut() {
            object.entry("x-guidance").or_insert_with(|| serde_json::json!({ "whitespace_pattern": JSON_WHITESPACE }));
        }
        let grammar = TopLevelGrammar::from_json_schema(schema);
        let mut matcher = Matcher::new(factory.create_parser(grammar));
        // A matcher in the error state masks nothing: refuse it rather than decode unconstrained.
        if let Some(message) = matcher.get_error() {
            return Err(schema_error(message).into());
        }
        for warning in matcher.grammar_warnings() {
            tracing::warn!(request = index, %warning, "llguidance grammar warning");
        }
        Ok(LlamaSampler::from(matcher))
    }
}

impl Slot<'_> {
    /// Samples the token after the logits at batch index `index` and updates the stop state.
    fn sample(&mut self, context: &LlamaContext<'_>, vocab: &LlamaVocab<'_>, index: i32) {
        let token = self.sampler.sample(context, index);
        if vocab.is_eog(token) {
            self.finish_reason = Some(FinishReason::Stop);
            return;
        }
        self.completion_tokens += 1;
        let from = self.text.len();
        // Control tokens render as nothing, as in llama-cpp-python's completions.
        vocab.token_to_piece_into(token, &mut self.text, false, None);
        if let Some(cut) = self.stop.find(&self.text, from) {
            self.text.truncate(cut);
            self.finish_reason = Some(FinishReason::StopString);
        } else if let Some(reply) = self.repeat.as_mut().and_then(|w| w.feed(&self.text)) {
            self.text = reply;
            self.finish_reason = Some(FinishReason::Repeat);
        } else if self.completion_tokens >= self.request.max_tokens {
            self.finish_reason = Some(FinishReason::Length);
        } else {
            self.pending = Some(token);
        }
    }

    fn into_generation(self, prefix_len: usize, cached_tokens: usize) -> Generation {
        Generation {
            text: String::from_utf8_lossy(&self.text).into_owned(),
            prompt_tokens: prefix_len + self.prompt.len(),
            cached_tokens,
            completion_tokens: self.completion_tokens,
            // Every slot runs until it sets a reason; Length is the only other way out.
            finish_reason: self.finish_reason.unwrap_or(FinishReason::Length),
            timings: Timings { prefill_ms: self.prefill_ms, decode_ms: self.decode_ms },
        }
    }
}

/// A position in a sequence; contexts are far below `i32::MAX` tokens.
fn position(index: usize) -> i32 {
    i32::try_from(index).unwrap_or(i32::MAX)
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}
