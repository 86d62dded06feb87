//! `memkit serve` (feature `serve`): an OpenAI-compatible chat-completions server over one GGUF
//! model, so that other tools can use a local extractor and the HTTP teacher client can be
//! tested against a real server.
//!
//! Routes:
//!
//! - `POST /v1/chat/completions`: messages are rendered with the GGUF's chat template and
//!   generated with `max_tokens` (default 512), `temperature` (absent or 0: greedy, so the
//!   server is deterministic unless asked otherwise), `top_p`, `seed`, `stop`, and
//!   `response_format` (`json_schema` → constrained decoding; `json_object` → any JSON
//!   object). The answer is `choices[0].message.content` with `finish_reason` (`stop` or
//!   `length`) and `usage`. Errors come back as `{"error": {"message", "type"}}`.
//! - `GET /v1/models`: the one model. A trained student's GGUF carries the extraction prompt it
//!   learnt (`memkit.extract_prompt`) and the window it learnt from (`memkit.extract_window.*`);
//!   the model object then has them as `"memkit": {"extract_prompt": ..., "extract_window":
//!   {"size", "overlap"}}`, memkit's [`OpenAiExtractor`](crate::OpenAiExtractor) asks with the
//!   prompt and `memkit extract --endpoint` cuts dialogues in that window.
//! - `GET /health`: `{"status": "ok"}`.
//!
//! Requests take turns on the engine (one context decodes one batch at a time): each runs on
//! tokio's blocking pool behind a mutex. A leading system message is evaluated as a separate
//! prefix exactly as [`LocalExtractor`](crate::extract::LocalExtractor) does, so a served
//! extractor gives the same greedy tokens as the in-process one.
//!
//! [`Limits`] bound what one request may ask (`max_tokens`, prompt tokens, body bytes) and how
//! many requests may be in the server at once (running or waiting for the model); a request
//! past a limit gets a 400, 413 or 429 that names the limit, and nothing else is disturbed.
//! [`Server::run`] stops on Ctrl-C or SIGTERM gracefully: it stops accepting connections and
//! lets the requests already in flight finish before it returns.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tracing::{info, warn};

use crate::chat::GgufChat;
use crate::generate::{FinishReason, GenerateRequest, LlamaEngine, Sampling};
use crate::openai::{
    ChatCompletionRequest, ChatCompletionResponse, Choice, CompletionUsage, PromptTokensDetails, ResponseFormat, ResponseMessage,
};
use crate::{Error, Result};

/// `max_tokens` when a request does not set it (or the [`Limits::max_tokens`] cap, if lower).
pub const DEFAULT_MAX_TOKENS: usize = 512;

/// What the server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest `max_tokens` a request may ask for (400 above it).
    pub max_tokens: usize,
    /// Longest prompt, in tokens after the chat template (400 above it); the KV cache
    /// (`n_ctx`) must also hold the prompt plus `max_tokens`.
    pub max_prompt_tokens: usize,
    /// Requests in the server at once, generating or waiting for the model (429 above it).
    pub max_concurrent: usize,
    /// Largest request body in bytes (413 above it).
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_tokens: 4096, max_prompt_tokens: 16_384, max_concurrent: 16, max_body_bytes: 4 << 20 }
    }
}

struct AppState {
    engine: Mutex<LlamaEngine>,
    chat: GgufChat,
    model_id: String,
    /// The extraction prompt the GGUF carries.
    extract_prompt: Option<String>,
    /// The window it was trained on (`memkit.extract_window.*`), announced beside the prompt.
    extract_window: Option<memkit_prompt::TrainedWindow>,
    limits: Limits,
    in_flight: AtomicUsize,
    served: AtomicUsize,
}

/// A place in the server, taken while a request is in it; dropping it frees the place.
struct Admission<'a>(&'a AtomicUsize);

impl<'a> Admission<'a> {
    /// Takes a place unless `limit` requests are in already.
    fn try_enter(in_flight: &'a AtomicUsize, limit: usize) -> Option<Self> {
        in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1)).ok().map(|_| Admission(in_flight))
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A handle on a running server: how many requests are in it, how many were answered.
#[derive(Clone)]
pub struct ServerHandle(Arc<AppState>);

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle").field("in_flight", &self.in_flight()).field("served", &self.served()).finish()
    }
}

impl ServerHandle {
    /// Requests in the server now (generating or waiting).
    pub fn in_flight(&self) -> usize {
        self.0.in_flight.load(Ordering::Acquire)
    }

    /// Chat completions answered (successfully) so far.
    pub fn served(&self) -> usize {
        self.0.served.load(Ordering::Acquire)
    }
}

/// A server bound to its address, not yet serving.
pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<AppState>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).field("model_id", &self.state.model_id).finish_non_exhaustive()
    }
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) for `engine`, announced as `model_id`, with the
    /// default [`Limits`].
    pub fn bind(addr: SocketAddr, engine: LlamaEngine, model_id: impl Into<String>) -> Result<Self> {
        Self::bind_with_limits(addr, engine, model_id, Limits::default())
    }

    /// [`Server::bind`] with explicit limits.
    pub fn bind_with_limits(addr: SocketAddr, engine: LlamaEngine, model_id: impl Into<String>, limits: Limits) -> Result<Self> {
        if limits.max_tokens == 0 || limits.max_prompt_tokens == 0 || limits.max_concurrent == 0 || limits.max_body_bytes == 0 {
            let message = format!("server limits must all be at least 1: {limits:?}");
            return Err(Error::Serve { addr: addr.to_string(), source: std::io::Error::new(std::io::ErrorKind::InvalidInput, message) });
        }
        let chat = GgufChat::from_engine(&engine)?;
        let serve_err = |source| Error::Serve { addr: addr.to_string(), source };
        let listener = TcpListener::bind(addr).map_err(serve_err)?;
        let addr = listener.local_addr().map_err(serve_err)?;
        // tokio's listener must be non-blocking.
        listener.set_nonblocking(true).map_err(serve_err)?;
        let extract_prompt = engine.meta_str(memkit_prompt::GGUF_PROMPT_KEY);
        // A window that leaves no new message is not announced (converting it back names the error).
        let extract_window = memkit_prompt::TrainedWindow::from_metadata(|key| engine.meta_str(key)?.parse().ok()).ok().flatten();
        let state = Arc::new(AppState {
            engine: Mutex::new(engine),
            chat,
            model_id: model_id.into(),
            extract_prompt,
            extract_window,
            limits,
            in_flight: AtomicUsize::new(0),
            served: AtomicUsize::new(0),
        });
        Ok(Self { listener, addr, state })
    }

    /// A handle for watching the server once it runs.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle(Arc::clone(&self.state))
    }

    /// The bound address (with the port chosen when port 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until Ctrl-C or SIGTERM, then shuts down gracefully (see [`Server::run_until`]);
    /// blocks the calling thread.
    pub fn run(self) -> Result<()> {
        self.run_until(shutdown_signal())
    }

    /// Serves until `shutdown` completes, then stops accepting connections and returns once the
    /// requests in flight are answered; blocks the calling thread.
    pub fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let serve_err = |source| Error::Serve { addr: self.addr.to_string(), source };
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(serve_err)?;
        let state = Arc::clone(&self.state);
        let app = router(self.state);
        info!(addr = %self.addr, limits = ?state.limits, "serving OpenAI-compatible API");
        runtime
            .block_on(async move {
                let listener = tokio::net::TcpListener::from_std(self.listener)?;
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        shutdown.await;
                        info!("shutting down: no new connections; finishing the requests in flight");
                    })
                    .await
            })
            .map_err(serve_err)?;
        info!(served = state.served.load(Ordering::Acquire), "server stopped");
        Ok(())
    }
}

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

/// Binds `addr` and serves `engine` as `model_id` until Ctrl-C or SIGTERM.
pub fn serve(addr: SocketAddr, engine: LlamaEngine, model_id: &str) -> Result<()> {
    Server::bind(addr, engine, model_id)?.run()
}

fn router(state: Arc<AppState>) -> Router {
    let body_limit = state.limits.max_body_bytes;
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(list_models))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// An error in OpenAI's shape.
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = if self.status.is_client_error() { "invalid_request_error" } else { "server_error" };
        (self.status, Json(json!({"error": {"message": self.message, "type": kind, "code": null}}))).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        use crate::generate::GenerateError as G;
        let client_fault = matches!(
            &error,
            Error::Prompt(_)
                | Error::Generate(G::InvalidRequest { .. } | G::JsonSchema { .. } | G::ContextFull { .. } | G::TokenOutOfRange { .. })
        );
        let status = if client_fault { StatusCode::BAD_REQUEST } else { StatusCode::INTERNAL_SERVER_ERROR };
        Self { status, message: error.to_string() }
    }
}

async fn list_models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let mut model = json!({"id": state.model_id, "object": "model", "created": 0, "owned_by": "memkit"});
    if let Some(prompt) = &state.extract_prompt {
        model["memkit"]["extract_prompt"] = json!(prompt);
    }
    if let Some(window) = &state.extract_window {
        model["memkit"]["extract_window"] = json!(window);
    }
    Json(json!({"object": "list", "data": [model]}))
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Json<ChatCompletionRequest>, JsonRejection>,
) -> std::result::Result<Json<ChatCompletionResponse>, ApiError> {
    let Json(request) = body.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!("request body over the server's limit of {} bytes", state.limits.max_body_bytes)
        } else {
            rejection.body_text()
        };
        ApiError { status: if status.is_client_error() { status } else { StatusCode::BAD_REQUEST }, message }
    })?;
    let response = tokio::task::spawn_blocking(move || {
        let limit = state.limits.max_concurrent;
        let Some(_admission) = Admission::try_enter(&state.in_flight, limit) else {
            return Err(ApiError {
                status: StatusCode::TOO_MANY_REQUESTS,
                message: format!("server busy: {limit} requests are in flight (the limit); retry later"),
            });
        };
        let response = complete(&state, request);
        if response.is_ok() {
            state.served.fetch_add(1, Ordering::AcqRel);
        }
        response
    })
    .await
    .map_err(|e| ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, message: format!("generation task failed: {e}") })?;
    if let Err(error) = &response {
        warn!(status = %error.status, message = %error.message, "chat completion failed");
    }
    response.map(Json)
}

/// The engine request for an API request, checked against the limits.
fn generate_request(request: &ChatCompletionRequest, prompt: String, limits: &Limits) -> std::result::Result<GenerateRequest, ApiError> {
    let max_tokens = request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS.min(limits.max_tokens));
    if max_tokens == 0 {
        return Err(ApiError::bad_request("max_tokens must be at least 1"));
    }
    if max_tokens > limits.max_tokens {
        return Err(ApiError::bad_request(format!("max_tokens {max_tokens} is over the server's limit of {}", limits.max_tokens)));
    }
    let temperature = request.temperature.unwrap_or(0.0);
    let top_p = request.top_p.unwrap_or(1.0);
    if !(temperature >= 0.0 && temperature.is_finite()) {
        return Err(ApiError::bad_request(format!("temperature must be 0 or more, got {temperature}")));
    }
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_request(format!("top_p must be in (0, 1], got {top_p}")));
    }
    let sampling = if temperature == 0.0 {
        Sampling::Greedy
    } else {
        // OpenAI seeds are 64-bit; llama.cpp's are 32-bit.
        let seed = request.seed.unwrap_or(0) as u32;
        Sampling::Temperature { temperature, top_p, seed }
    };
    let mut generate = GenerateRequest::new(prompt).with_max_tokens(max_tokens).with_sampling(sampling);
    if let Some(stop) = request.stop.clone() {
        generate = generate.with_stop(stop.into_vec().into_iter().filter(|s| !s.is_empty()));
    }
    if let Some(rule) = &request.end_at_repeat {
        if !(rule.min_f1 > 0.0 && rule.min_f1 <= 1.0) {
            return Err(ApiError::bad_request(format!("end_at_repeat.min_f1 must be in (0, 1], got {}", rule.min_f1)));
        }
        if rule.field.is_empty() {
            return Err(ApiError::bad_request("end_at_repeat.field must name a string field"));
        }
        generate = generate.with_end_at_repeat(rule.clone());
    }
    match &request.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => generate = generate.with_json_schema(json!({"type": "object"})),
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            let schema =
                json_schema.schema.clone().ok_or_else(|| ApiError::bad_request("response_format.json_schema.schema is missing"))?;
            generate = generate.with_json_schema(schema);
        }
    }
    Ok(generate)
}

fn complete(state: &AppState, request: ChatCompletionRequest) -> std::result::Result<ChatCompletionResponse, ApiError> {
    if request.messages.is_empty() {
        return Err(ApiError::bad_request("messages must not be empty"));
    }
    let rendered = state.chat.render(&request.messages)?;
    let generate = generate_request(&request, rendered.suffix.clone(), &state.limits)?;
    let generation = {
        // The engine trusts its cached prefix only after a call finished, so a poisoned lock
        // leaves nothing half-done.
        let mut engine = state.engine.lock().unwrap_or_else(PoisonError::into_inner);
        let prompt_tokens = engine.tokenize(&rendered.prefix, true).len() + engine.tokenize(&rendered.suffix, false).len();
        if prompt_tokens > state.limits.max_prompt_tokens {
            return Err(ApiError::bad_request(format!(
                "the prompt is {prompt_tokens} tokens, over the server's limit of {}",
                state.limits.max_prompt_tokens
            )));
        }
        engine.generate_batch(&rendered.prefix, std::slice::from_ref(&generate))?.remove(0)
    };
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let finish_reason = match generation.finish_reason {
        FinishReason::Stop | FinishReason::StopString | FinishReason::Repeat => "stop",
        FinishReason::Length => "length",
    };
    Ok(ChatCompletionResponse {
        id: format!("chatcmpl-{created:x}{:x}", generation.completion_tokens),
        object: "chat.completion".into(),
        created,
        model: state.model_id.clone(),
        choices: vec![Choice {
            index: 0,
            message: ResponseMessage { role: "assistant".into(), content: Some(generation.text) },
            finish_reason: Some(finish_reason.into()),
        }],
        usage: Some(CompletionUsage {
            prompt_tokens: generation.prompt_tokens,
            completion_tokens: generation.completion_tokens,
            total_tokens: generation.prompt_tokens + generation.completion_tokens,
            prompt_tokens_details: Some(PromptTokensDetails { cached_tokens: generation.cached_tokens }),
        }),
    })
}

#[cfg(test)]
mod tests {
    use memkit_prompt::ChatMessage;

    use super::*;
    use crate::openai::{JsonSchemaFormat, Stop};
    use crate::reply::RepeatedItem;

    fn request() -> ChatCompletionRequest {
        ChatCompletionRequest::new("m", vec![ChatMessage::user("hi")])
    }

    #[test]
    fn sampling_follows_temperature_and_seed() {
        let greedy = generate_request(&request(), "p".into(), &Limits::default()).ok().unwrap();
        assert_eq!((greedy.sampling, greedy.max_tokens), (Sampling::Greedy, DEFAULT_MAX_TOKENS));
        let mut sampled = request();
        (sampled.temperature, sampled.top_p, sampled.seed, sampled.max_tokens) = (Some(0.7), Some(0.9), Some(7), Some(5));
        sampled.stop = Some(Stop::Many(vec!["\n".into(), String::new()]));
        let g = generate_request(&sampled, "p".into(), &Limits::default()).ok().unwrap();
        assert_eq!(g.sampling, Sampling::Temperature { temperature: 0.7, top_p: 0.9, seed: 7 });
        assert_eq!((g.max_tokens, g.stop, g.end_at_repeat), (5, vec!["\n".to_owned()], None));
    }

    #[test]
    fn the_repeat_rule_travels_to_the_engine() {
        let mut r = request();
        let rule = RepeatedItem { field: "content".into(), min_f1: 0.8 };
        r.end_at_repeat = Some(rule.clone());
        // As a client writes it on the wire.
        let wire: ChatCompletionRequest = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(generate_request(&wire, "p".into(), &Limits::default()).ok().unwrap().end_at_repeat, Some(rule));
    }

    #[test]
    fn bad_parameters_are_client_errors() {
        let cases: [fn(&mut ChatCompletionRequest); 7] = [
            |r| r.max_tokens = Some(0),
            |r| r.max_tokens = Some(Limits::default().max_tokens + 1),
            |r| r.temperature = Some(-1.0),
            |r| r.top_p = Some(0.0),
            |r| r.end_at_repeat = Some(RepeatedItem { field: "content".into(), min_f1: 0.0 }),
            |r| r.end_at_repeat = Some(RepeatedItem { field: String::new(), min_f1: 0.8 }),
            |r| {
                r.response_format =
                    Some(ResponseFormat::JsonSchema { json_schema: JsonSchemaFormat { name: "x".into(), schema: None, strict: None } })
            },
        ];
        for case in cases {
            let mut r = request();
            case(&mut r);
            let err = generate_request(&r, "p".into(), &Limits::default()).err().unwrap();
            assert_eq!(err.status, StatusCode::BAD_REQUEST, "{}", err.message);
        }
    }

    #[test]
    fn max_tokens_defaults_under_a_lower_limit() {
        let limits = Limits { max_tokens: 16, ..Limits::default() };
        assert_eq!(generate_request(&request(), "p".into(), &limits).ok().unwrap().max_tokens, 16);
        let mut r = request();
        r.max_tokens = Some(17);
        assert!(generate_request(&r, "p".into(), &limits).err().unwrap().message.contains("limit of 16"));
    }

    #[test]
    fn admission_holds_at_most_the_limit_and_frees_on_drop() {
        let in_flight = AtomicUsize::new(0);
        let a = Admission::try_enter(&in_flight, 2).unwrap();
        let b = Admission::try_enter(&in_flight, 2).unwrap();
        assert!(Admission::try_enter(&in_flight, 2).is_none(), "a third request is refused");
        assert_eq!(in_flight.load(Ordering::Acquire), 2);
        drop(a);
        let c = Admission::try_enter(&in_flight, 2).unwrap();
        drop((b, c));
        assert_eq!(in_flight.load(Ordering::Acquire), 0);
    }
}
