//! A small blocking client for OpenAI-compatible `/v1/chat/completions` endpoints (OpenAI, vLLM,
//! SGLang, llama.cpp server, Ollama, `memkit serve`), and the request/response types that
//! [`serve`](crate::serve) shares.
//!
//! Transient failures (HTTP 429 and 5xx, timeouts, refused or dropped connections) are retried
//! with exponential backoff and full jitter, up to [`OpenAiConfig::max_retries`] times; other
//! HTTP errors fail at once with the server's message. Plain `http://` works out of the box;
//! `https://` needs the crate feature `https` (ureq's rustls).

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use memkit_prompt::ChatMessage;
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use crate::reply::RepeatedItem;
use crate::{Error, Result};

/// The environment variable holding the API key unless [`OpenAiConfig::api_key_env`] names
/// another.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// `response_format` of a chat-completions request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object (not constrained by `memkit serve`: send a schema instead).
    JsonObject,
    /// JSON that validates against a schema (structured outputs).
    JsonSchema {
        /// The schema and its name.
        json_schema: JsonSchemaFormat,
    },
}

/// The `json_schema` member of [`ResponseFormat::JsonSchema`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchemaFormat {
    /// A name for the schema (`[a-zA-Z0-9_-]`, at most 64 characters for OpenAI).
    pub name: String,
    /// The JSON Schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
    /// Whether the server must follow the schema exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `stop`: one string or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several stop strings.
    Many(Vec<String>),
}

impl Stop {
    /// The stop strings as a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// A `/v1/chat/completions` request (the fields memkit uses; others are ignored by the server).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    /// The model name the server knows.
    #[serde(default)]
    pub model: String,
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// Sampling temperature; 0 is greedy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Seed of the sampler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// Text, JSON or JSON-schema output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// memkit's extension, applied by `memkit serve` and ignored by other servers: end the JSON
    /// reply at its first array item that nearly repeats an earlier one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at_repeat: Option<RepeatedItem>,
}

impl ChatCompletionRequest {
    /// A request with the server's defaults for everything but the model and messages.
    pub fn new(model: impl Into<String>, messages: Vec<ChatMessage>) -> Self {
        Self {
            model: model.into(),
            messages,
            max_tokens: None,
            temperature: None,
            top_p: None,
            seed: None,
            stop: None,
            response_format: None,
            end_at_repeat: None,
        }
    }
}

/// The message of a [`Choice`]; `content` is `null` when a model only calls tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseMessage {
    /// `assistant`.
    pub role: String,
    /// The completion.
    #[serde(default)]
    pub content: Option<String>,
}

/// One completion of a response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// Position in `choices`.
    #[serde(default)]
    pub index: usize,
    /// The reply.
    pub message: ResponseMessage,
    /// `stop` or `length`.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// Token counts of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CompletionUsage {
    /// Tokens read.
    #[serde(default)]
    pub prompt_tokens: usize,
    /// Tokens generated.
    #[serde(default)]
    pub completion_tokens: usize,
    /// Their sum.
    #[serde(default)]
    pub total_tokens: usize,
    /// How many of the prompt tokens came from the server's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// Details of [`CompletionUsage::prompt_tokens`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens the server did not evaluate again (a cached prefix).
    #[serde(default)]
    pub cached_tokens: usize,
}

/// A `/v1/chat/completions` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    /// Response id.
    #[serde(default)]
    pub id: String,
    /// `chat.completion`.
    #[serde(default)]
    pub object: String,
    /// Unix seconds.
    #[serde(default)]
    pub created: u64,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// The completions (one unless `n` was asked).
    pub choices: Vec<Choice>,
    /// Token counts, when the server reports them.
    #[serde(default)]
    pub usage: Option<CompletionUsage>,
}

impl ChatCompletionResponse {
    /// The text of the first choice (empty when the server sent `null`).
    pub fn content(&self) -> Option<&str> {
        self.choices.first().map(|c| c.message.content.as_deref().unwrap_or(""))
    }

    /// The first choice's `finish_reason` (`stop`, `length`, …), when the server sent one.
    pub fn finish_reason(&self) -> Option<&str> {
        self.choices.first().and_then(|c| c.finish_reason.as_deref())
    }
}

/// Where and how the client connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The API root including `/v1`, e.g. `https://api.openai.com/v1` or
    /// `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// The model name sent with each request.
    pub model: String,
    /// Environment variable read for the API key (sent as a bearer token when set).
    pub api_key_env: String,
    /// Limit on one attempt, from connecting to the end of the body.
    pub timeout: Duration,
    /// Retries after the first attempt for transient failures.
    pub max_retries: u32,
    /// Base delay before the first retry; it doubles per retry (full jitter, capped at 60 s).
    pub backoff: Duration,
}

impl OpenAiConfig {
    /// A config for `model` at `base_url`: key from `OPENAI_API_KEY`, 120 s timeout, 4 retries
    /// from 500 ms.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: DEFAULT_API_KEY_ENV.to_owned(),
            timeout: Duration::from_secs(120),
            max_retries: 4,
            backoff: Duration::from_millis(500),
        }
    }
}

/// A blocking OpenAI-compatible client; cheap to share between threads (`&self` calls).
#[derive(Debug)]
pub struct OpenAiClient {
    config: OpenAiConfig,
    agent: ureq::Agent,
    api_key: Option<String>,
    url: String,
}

/// Why one attempt failed, and whether trying again may help.
struct Failure {
    reason: String,
    retry: bool,
    status: Option<u16>,
}

impl OpenAiClient {
    /// A client for `config`; reads the API key from `config.api_key_env` now.
    pub fn new(config: OpenAiConfig) -> Self {
        let agent = ureq::Agent::config_builder().timeout_global(Some(config.timeout)).http_status_as_error(false).build().into();
        let api_key = std::env::var(&config.api_key_env).ok().filter(|k| !k.is_empty());
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        Self { config, agent, api_key, url }
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The extraction prompt template the server announces for the configured model
    /// (`GET /models`, the model's `memkit.extract_prompt`: what `memkit serve` of a trained
    /// student says), or `None`: no such field, no such model, or no answer (one attempt; an
    /// endpoint without `/models` is not an error).
    pub fn served_extract_prompt(&self) -> Option<String> {
        self.served_memkit()?["extract_prompt"].as_str().map(str::to_owned)
    }

    /// The window the server announces the configured model was trained on (`GET /models`, the
    /// model's `memkit.extract_window`), or `None`, as for [`Self::served_extract_prompt`].
    pub fn served_extract_window(&self) -> Option<memkit_prompt::TrainedWindow> {
        let window: memkit_prompt::TrainedWindow = serde_json::from_value(self.served_memkit()?["extract_window"].take()).ok()?;
        window.check().ok().map(|()| window)
    }

    /// The `memkit` object of the configured model in the server's `/models` list.
    fn served_memkit(&self) -> Option<serde_json::Value> {
        let url = format!("{}/models", self.config.base_url.trim_end_matches('/'));
        let mut call = self.agent.get(&url);
        if let Some(key) = &self.api_key {
            call = call.header("Authorization", &format!("Bearer {key}"));
        }
        let mut response = call.call().inspect_err(|e| debug!(%url, error = %e, "no model list")).ok()?;
        if !response.status().is_success() {
            return None;
        }
        let list: serde_json::Value = serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?;
        let models = list["data"].as_array()?;
        let model = models.iter().find(|m| m["id"] == self.config.model.as_str())?;
        model.get("memkit").cloned()
    }

    /// Sends `request` (its `model` is replaced by the configured one when empty) and returns
    /// the parsed response, retrying transient failures.
    pub fn chat(&self, request: &ChatCompletionRequest) -> Result<ChatCompletionResponse> {
        let mut body = request.clone();
        if body.model.is_empty() {
            body.model.clone_from(&self.config.model);
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            match self.attempt(&body) {
                Ok(response) => {
                    debug!(url = %self.url, attempt, millis = started.elapsed().as_millis() as u64, "chat completion");
                    return Ok(response);
                }
                Err(failure) if failure.retry && attempt <= self.config.max_retries => {
                    let delay = self.delay(attempt);
                    warn!(url = %self.url, attempt, reason = %failure.reason, delay_ms = delay.as_millis() as u64, "retrying");
                    std::thread::sleep(delay);
                }
                Err(failure) => {
                    return Err(match failure.status {
                        Some(status) if !failure.retry => Error::Api { url: self.url.clone(), status, message: failure.reason },
                        _ => Error::Http { url: self.url.clone(), attempts: attempt, reason: failure.reason },
                    });
                }
            }
        }
    }

    /// Exponential backoff with full jitter: uniform in `[0, backoff * 2^(retry-1)]`, capped.
    fn delay(&self, retry: u32) -> Duration {
        let cap = self.config.backoff.saturating_mul(1 << (retry - 1).min(16)).min(Duration::from_secs(60));
        // A fresh RandomState is randomly seeded: enough jitter without a rand dependency.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(retry);
        let unit = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
        cap.mul_f64(unit)
    }

    fn attempt(&self, body: &ChatCompletionRequest) -> Result<ChatCompletionResponse, Failure> {
        let mut call = self.agent.post(&self.url);
        if let Some(key) = &self.api_key {
            call = call.header("Authorization", &format!("Bearer {key}"));
        }
        let transport = |e: ureq::Error| {
            let retry =
                matches!(e, ureq::Error::Timeout(_) | ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::BodyStalled);
            Failure { reason: e.to_string(), retry, status: None }
        };
        let mut response = call.send_json(body).map_err(transport)?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(transport)?;
        if !(200..300).contains(&status) {
            let retry = status == 429 || status >= 500;
            return Err(Failure { reason: format!("HTTP {status}: {}", api_message(&text)), retry, status: Some(status) });
        }
        serde_json::from_str(&text).map_err(|e| Failure {
            reason: format!("response is not a chat completion ({e}): {}", cut(&text, 300)),
            retry: false,
            status: Some(status),
        })
    }
}

/// The `error.message` of an OpenAI error body, else the body cut short.
fn api_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| cut(body, 300))
}

fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_serialises_like_openai() {
        let mut request = ChatCompletionRequest::new("m", vec![ChatMessage::user("hi")]);
        request.stop = Some(Stop::One("\n".into()));
        request.response_format = Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat { name: "x".into(), schema: Some(serde_json::json!({"type": "object"})), strict: Some(true) },
        });
        let value = serde_json::to_value(&request).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "stop": "\n",
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": true}}
            })
        );
        let back: ChatCompletionRequest = serde_json::from_value(value).unwrap();
        assert_eq!(back, request);
    }

    #[test]
    fn response_with_null_content_and_no_usage_parses() {
        let response: ChatCompletionResponse =
            serde_json::from_str(r#"{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"tool_calls"}]}"#).unwrap();
        assert_eq!(response.content(), Some(""));
        assert_eq!(response.usage, None);
    }

    #[test]
    fn backoff_is_jittered_and_capped() {
        let mut config = OpenAiConfig::new("http://127.0.0.1:1/v1", "m");
        config.backoff = Duration::from_millis(100);
        let client = OpenAiClient::new(config);
        let delays: Vec<Duration> = (0..32).map(|_| client.delay(3)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(400)), "{delays:?}");
        assert!(delays.windows(2).any(|w| w[0] != w[1]), "no jitter: {delays:?}");
        assert!(client.delay(40) <= Duration::from_secs(60));
    }

    #[test]
    fn error_message_is_taken_from_the_body() {
        assert_eq!(api_message(r#"{"error":{"message":"bad key","type":"auth"}}"#), "bad key");
        assert_eq!(api_message("plain"), "plain");
    }
}
