//! OpenAI batch-API files: export the unfinished windows' requests as batch JSONL
//! (`{"custom_id", "method", "url", "body"}` per line), and import a batch results file
//! (`{"custom_id", "response": {"status_code", "body"}}` per line) into the reply cache, so the
//! next `memkit distill` run finishes those windows without a request.

use std::collections::HashMap;
use std::path::Path;

use memkit_infer::openai::ChatCompletionResponse;
use memkit_infer::reply::Usage;
use memkit_prompt::Prompts;
use serde::{Deserialize, Serialize};

use crate::cache::{self, Cache};
use crate::corpus::Corpus;
use crate::label::{self, Ask};
use crate::recipe::DistillRecipe;
use crate::run::pending;
use crate::teacher::Teacher;
use crate::{Error, Result, write_atomic};

#[derive(Debug, Serialize)]
struct RequestLine<'a> {
    custom_id: &'a str,
    method: &'static str,
    url: &'static str,
    body: memkit_infer::openai::ChatCompletionRequest,
}

#[derive(Debug, Deserialize)]
struct ResultLine {
    custom_id: String,
    #[serde(default)]
    response: Option<ResponseEnvelope>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct ResponseEnvelope {
    status_code: u16,
    body: serde_json::Value,
}

/// The requests of a window in a batch file: `custom_id` is the window id for a window asked
/// in one request, `<window id>#<k>` for the k-th request of a decomposed window.
fn batch_asks(recipe: &DistillRecipe, window: &memkit_data::Window, teacher: &Teacher, prompts: &Prompts) -> Result<Vec<(String, Ask)>> {
    let mode = recipe.labelling.mode_for(&recipe.teacher);
    let plan = label::plan(window, mode, &recipe.labelling, &recipe.generation, prompts, teacher.id())?;
    let single = plan.asks.len() == 1;
    Ok(plan
        .asks
        .into_iter()
        .enumerate()
        .map(|(k, ask)| (if single { window.id.clone() } else { format!("{}#{k}", window.id) }, ask))
        .collect())
}

/// Writes the batch requests of every window of `corpus` not yet in the ledger; returns the
/// number of requests. Re-asks (first-person records) happen in the run after the import.
pub fn export(recipe: &DistillRecipe, corpus: &Corpus, teacher: &Teacher, model: &str, path: &Path) -> Result<usize> {
    let prompts = Prompts::embedded()?;
    let mut text = String::new();
    let mut n = 0;
    for w in pending(recipe, corpus)? {
        for (custom_id, ask) in batch_asks(recipe, &w.window, teacher, &prompts)? {
            let line =
                RequestLine { custom_id: &custom_id, method: "POST", url: "/v1/chat/completions", body: ask.request.to_openai(model) };
            text.push_str(&serde_json::to_string(&line).expect("plain data"));
            text.push('\n');
            n += 1;
        }
    }
    write_atomic(path, text.as_bytes())?;
    Ok(n)
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imported {
    /// Replies stored in the cache.
    pub stored: usize,
    /// Lines with an error or a non-200 status (the window stays unfinished).
    pub failed: usize,
}

/// Stores the replies of a batch results file in the cache under `teacher`'s keys.
pub fn import(recipe: &DistillRecipe, corpus: &Corpus, teacher: &Teacher, cache: &Cache, path: &Path) -> Result<Imported> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
    let prompts = Prompts::embedded()?;
    let mut keys: HashMap<String, String> = HashMap::new();
    for w in &corpus.windows {
        keys.extend(batch_asks(recipe, &w.window, teacher, &prompts)?.into_iter().map(|(id, ask)| (id, ask.key)));
    }
    let mut imported = Imported::default();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |message: String| Error::BatchResult { path: path.to_owned(), line: i + 1, message };
        let result: ResultLine = serde_json::from_str(line).map_err(|e| bad(format!("not a batch result line: {e}")))?;
        let key = keys
            .get(result.custom_id.as_str())
            .ok_or_else(|| bad(format!("custom_id {:?} is no request of this recipe", result.custom_id)))?;
        let response = match (result.response, result.error) {
            (Some(r), None) if r.status_code == 200 => r.body,
            (response, error) => {
                let status = response.map(|r| r.status_code);
                tracing::warn!(request = %result.custom_id, ?status, ?error, "batch request failed; its window stays unfinished");
                imported.failed += 1;
                continue;
            }
        };
        let response: ChatCompletionResponse =
            serde_json::from_value(response).map_err(|e| bad(format!("response body is not a chat completion: {e}")))?;
        let counts = response.usage.unwrap_or_default();
        let usage = Usage {
            prompt_tokens: counts.prompt_tokens,
            completion_tokens: counts.completion_tokens,
            millis: 0,
            hit_max_tokens: response.finish_reason() == Some("length"),
        };
        let raw = response.content().unwrap_or_default().to_owned();
        cache.put(key, &cache::Entry { model: teacher.id().to_owned(), raw, usage })?;
        imported.stored += 1;
    }
    Ok(imported)
}
