//! The teacher: a chat model behind memkit-infer's [`ChatModel`] trait, a GGUF in-process
//! ([`LocalChat`](memkit_infer::chat::LocalChat): prefix-cached, batched, schema-constrained)
//! or any OpenAI-compatible server ([`OpenAiChat`]: retries with backoff and jitter, timeouts,
//! `response_format` JSON schema, several requests in flight), with its prices.

use std::path::{Path, PathBuf};
use std::time::Duration;

use memkit_infer::chat::{ChatModel, OpenAiChat};
use memkit_infer::openai::{OpenAiClient, OpenAiConfig};

use crate::recipe::{Price, TeacherSpec};
use crate::{Error, Result};

/// Labels windows: a chat model and what it costs.
pub struct Teacher {
    model: Box<dyn ChatModel>,
    price: Option<Price>,
}

impl std::fmt::Debug for Teacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Teacher").field("model", &self.model.id()).field("price", &self.price).finish()
    }
}

impl Teacher {
    /// A teacher over any chat model.
    pub fn new(model: Box<dyn ChatModel>, price: Option<Price>) -> Self {
        Self { model, price }
    }

    /// The model id (part of every cache key).
    pub fn id(&self) -> &str {
        self.model.id()
    }

    /// Requests worth handing over in one call.
    pub fn parallel(&self) -> usize {
        self.model.parallel().max(1)
    }

    /// The chat model, asked through the reply cache ([`crate::cache::Cache::answer`]).
    pub fn model(&self) -> &dyn ChatModel {
        self.model.as_ref()
    }

    /// Prices for the cost estimate, if known.
    pub fn price(&self) -> Option<Price> {
        self.price
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

/// Builds the teacher a recipe names; `max_tokens` sizes a local model's KV cache.
pub fn from_spec(spec: &TeacherSpec, max_tokens: usize) -> Result<Teacher> {
    Ok(match spec {
        TeacherSpec::Local { model, threads, batch, n_ctx } => {
            let path = resolve_model(model)?;
            let chat = memkit_infer::chat::LocalChat::load(&path, *batch, *threads, *n_ctx, max_tokens)?;
            Teacher::new(Box::new(chat), None)
        }
        TeacherSpec::Openai { base_url, model, api_key_env, concurrency, timeout_s, max_retries, price } => {
            let mut config = OpenAiConfig::new(base_url.clone(), model.clone());
            config.api_key_env.clone_from(api_key_env);
            config.timeout = Duration::from_secs(*timeout_s);
            config.max_retries = *max_retries;
            Teacher::new(Box::new(OpenAiChat::new(OpenAiClient::new(config), *concurrency)), *price)
        }
    })
}
