//! Teacher backends behind one trait: a GGUF model in-process (memkit-infer's
//! [`LocalExtractor`]: prefix-cached system prompt, batched, schema-constrained) and any
//! OpenAI-compatible server ([`OpenAiExtractor`]: retries with backoff and jitter, timeouts,
//! `response_format` JSON schema), several requests in flight.

use std::path::{Path, PathBuf};
use std::time::Duration;

use memkit_data::Window;
use memkit_infer::openai::{OpenAiClient, OpenAiConfig};
use memkit_infer::{ExtractConfig, Extraction, Extractor, OpenAiExtractor};

use crate::recipe::{Price, TeacherSpec};
use crate::{Error, Result};

/// Labels windows.
pub trait Teacher: Send + Sync {
    /// The model id (part of the cache key).
    fn id(&self) -> &str;
    /// Windows worth handing over in one call (the batch, or the requests in flight).
    fn parallel(&self) -> usize;
    /// One result per window, in order; an `Err` is a backend failure (timeout, HTTP error,
    /// engine error), never bad model output.
    fn label(&self, windows: &[Window]) -> Vec<std::result::Result<Extraction, String>>;
    /// Prices for the cost estimate, if known.
    fn price(&self) -> Option<Price> {
        None
    }
}

/// A GGUF teacher in-process.
#[derive(Debug)]
pub struct LocalTeacher {
    extractor: memkit_infer::extract::LocalExtractor,
    batch: usize,
}

impl LocalTeacher {
    /// Loads `model` (a packaged model name or a `.gguf` path).
    pub fn load(model: &str, threads: Option<usize>, batch: usize, n_ctx: Option<u32>, config: ExtractConfig) -> Result<Self> {
        let path = resolve_model(model)?;
        let extractor = memkit_infer::extract::LocalExtractor::load(&path, batch, threads, n_ctx, config)?;
        Ok(Self { extractor, batch })
    }
}

/// A packaged model's GGUF, or the path itself.
pub fn resolve_model(model: &str) -> Result<PathBuf> {
    if model.ends_with(".gguf") || Path::new(model).is_file() {
        let path = PathBuf::from(model);
        return if path.is_file() { Ok(path) } else { Err(Error::ModelMissing { model: model.to_owned() }) };
    }
    memkit_infer::models::spec(model)?;
    memkit_infer::models::locate(model).ok_or_else(|| Error::ModelMissing { model: model.to_owned() })
}

impl Teacher for LocalTeacher {
    fn id(&self) -> &str {
        self.extractor.id()
    }
    fn parallel(&self) -> usize {
        self.batch
    }
    fn label(&self, windows: &[Window]) -> Vec<std::result::Result<Extraction, String>> {
        match self.extractor.extract(windows) {
            Ok(extractions) => extractions.into_iter().map(Ok).collect(),
            Err(e) => windows.iter().map(|_| Err(e.to_string())).collect(),
        }
    }
}

/// An OpenAI-compatible teacher.
#[derive(Debug)]
pub struct HttpTeacher {
    extractor: OpenAiExtractor,
    concurrency: usize,
    price: Option<Price>,
}

impl HttpTeacher {
    /// A client for `config` with `concurrency` requests in flight.
    pub fn new(config: OpenAiConfig, concurrency: usize, price: Option<Price>, extract: ExtractConfig) -> Result<Self> {
        Ok(Self { extractor: OpenAiExtractor::new(OpenAiClient::new(config), extract)?, concurrency, price })
    }

    /// The client an `openai` recipe teacher describes; `None` for another kind of teacher.
    pub fn from_spec(spec: &TeacherSpec, extract: ExtractConfig) -> Option<Result<Self>> {
        let TeacherSpec::Openai { base_url, model, api_key_env, concurrency, timeout_s, max_retries, price } = spec else {
            return None;
        };
        let mut config = OpenAiConfig::new(base_url.clone(), model.clone());
        config.api_key_env.clone_from(api_key_env);
        config.timeout = Duration::from_secs(*timeout_s);
        config.max_retries = *max_retries;
        Some(Self::new(config, *concurrency, *price, extract))
    }

    /// The extractor (for batch-API request building).
    pub fn extractor(&self) -> &OpenAiExtractor {
        &self.extractor
    }
}

impl Teacher for HttpTeacher {
    fn id(&self) -> &str {
        self.extractor.id()
    }
    fn parallel(&self) -> usize {
        self.concurrency
    }
    fn label(&self, windows: &[Window]) -> Vec<std::result::Result<Extraction, String>> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = windows
                .iter()
                .map(|w| {
                    scope.spawn(move || self.extractor.extract(std::slice::from_ref(w)).map(|mut v| v.remove(0)).map_err(|e| e.to_string()))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(result) => result,
                    Err(_) => Err("the request thread panicked".to_owned()),
                })
                .collect()
        })
    }
    fn price(&self) -> Option<Price> {
        self.price
    }
}

/// Builds the teacher a recipe names.
pub fn from_spec(spec: &TeacherSpec, extract: ExtractConfig) -> Result<Box<dyn Teacher>> {
    Ok(match spec {
        TeacherSpec::Local { model, threads, batch, n_ctx } => Box::new(LocalTeacher::load(model, *threads, *batch, *n_ctx, extract)?),
        TeacherSpec::Openai { .. } => Box::new(HttpTeacher::from_spec(spec, extract).expect("an openai teacher")?),
    })
}
