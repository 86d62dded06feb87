//! `memkit serve` end to end on loopback: the real server over the real SmolLM2-135M-Instruct
//! (GGUF Q4_1) on 127.0.0.1 with a free port, called by the OpenAI client, and the two
//! extractors (HTTP and in-process) on the same windows.
//!
//! There is no golden output: the checks are the protocol (finish reasons, usage counts that
//! follow `max_tokens`, OpenAI error shape), schema-constrained output that must parse, and the
//! equivalence of the served and the in-process extractor under greedy decoding (both evaluate
//! the system prompt as a separate prefix and the window as its own prompt, so each window
//! must give the same tokens).
//!
//! The model comes from the models directory (`models::installed_for_tests`); the
//! model tests are skipped when it is missing, unless `MEMKIT_REQUIRE_MODELS=1`.

#![cfg(feature = "serve")]

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use memkit_data::{Window, WindowConfig, windows};
use memkit_infer::extract::LocalExtractor;
use memkit_infer::generate::{EngineOptions, LlamaEngine};
use memkit_infer::openai::{ChatCompletionRequest, JsonSchemaFormat, OpenAiClient, OpenAiConfig, ResponseFormat};
use memkit_infer::serve::Server;
use memkit_infer::{Error, ExtractConfig, Extractor, OpenAiExtractor, models};
use memkit_prompt::ChatMessage;
use memkit_schema::{Dialogue, ExtractorSchemaOptions, Role, Session, Turn, parse_extractor_output};

const MODEL_ID: &str = "smollm2-135m";

/// The installed SmolLM2 GGUF, or `None` (test skipped); see [`models::installed_for_tests`].
fn smollm2() -> Option<PathBuf> {
    models::installed_for_tests(models::SMOLLM2_135M.name)
}

/// One llama.cpp thread: tests run in parallel on a small machine.
fn engine(path: &PathBuf) -> LlamaEngine {
    LlamaEngine::load(path, EngineOptions { n_ctx: 4096, n_threads: 1, n_seq_max: 3, ..EngineOptions::default() }).unwrap()
}

/// The server, started once for the whole file on a free loopback port; it lives until the
/// test process exits.
fn server() -> Option<SocketAddr> {
    static SERVER: OnceLock<SocketAddr> = OnceLock::new();
    let path = smollm2()?;
    Some(*SERVER.get_or_init(|| {
        let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), engine(&path), MODEL_ID).unwrap();
        let addr = server.local_addr();
        std::thread::spawn(move || server.run().map_err(|e| e.to_string()));
        addr
    }))
}

fn client(addr: SocketAddr) -> OpenAiClient {
    let mut config = OpenAiConfig::new(format!("http://{addr}/v1"), MODEL_ID);
    // Generation on a busy 2-core machine can take a while; never retry a slow answer.
    config.timeout = Duration::from_secs(300);
    config.max_retries = 0;
    OpenAiClient::new(config)
}

/// Small caps keep SmolLM2's replies short and finite.
fn extract_config() -> ExtractConfig {
    ExtractConfig {
        schema: ExtractorSchemaOptions { max_memories: 2, max_keywords: 2, max_content_chars: 80 },
        max_string_chars: Some(24),
        max_tokens: 300,
    }
}

fn dialogue() -> Dialogue {
    let date = NaiveDate::from_ymd_opt(2023, 5, 8).unwrap().and_hms_opt(13, 56, 0).unwrap();
    let lines = [
        ("Caroline", "Hey Mel! I went to a LGBTQ support group yesterday in Boston."),
        ("Melanie", "That's great, Caroline! I painted a sunrise over the lake last week."),
        ("Caroline", "I want to become a counselor next year to help people like me."),
        ("Melanie", "You'd be amazing at it. My kids love the beach, we go every summer."),
        ("Caroline", "I adopted a dog named Oscar two weeks ago."),
    ];
    let turns = lines
        .iter()
        .enumerate()
        .map(|(i, (speaker, text))| Turn {
            timestamp: Some(date + chrono::Duration::minutes(i as i64)),
            ..Turn::new(format!("D1:{}", i + 1), *speaker, Role::User, *text)
        })
        .collect();
    Dialogue { id: "tiny".into(), sessions: vec![Session { id: "session_1".into(), date: Some(date), turns }] }
}

/// Two windows of 3 messages, the second with 1 context message.
fn tiny_windows() -> Vec<Window> {
    let config = WindowConfig { size: 3, overlap: 1, user_only: false, max_message_chars: WindowConfig::DEFAULT_MAX_MESSAGE_CHARS };
    let all = windows(&dialogue(), &config);
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[1].context, 1);
    all
}

#[test]
fn client_gets_a_completion_and_max_tokens_holds() {
    let Some(addr) = server() else { return };
    let health: serde_json::Value = ureq::get(&format!("http://{addr}/health")).call().unwrap().body_mut().read_json().unwrap();
    assert_eq!(health["status"], "ok");
    let models: serde_json::Value = ureq::get(&format!("http://{addr}/v1/models")).call().unwrap().body_mut().read_json().unwrap();
    assert_eq!(models["data"][0]["id"], MODEL_ID);

    let client = client(addr);
    let messages = vec![ChatMessage::system("Answer in one short sentence."), ChatMessage::user("What is the capital of France?")];
    let mut request = ChatCompletionRequest::new("", messages);
    request.max_tokens = Some(24);
    let response = client.chat(&request).unwrap();
    assert_eq!(response.model, MODEL_ID);
    let text = response.content().unwrap();
    assert!(!text.trim().is_empty(), "{response:?}");
    let usage = response.usage.unwrap();
    assert!((1..=24).contains(&usage.completion_tokens), "{usage:?}");
    assert!(usage.prompt_tokens > 10, "{usage:?}");
    assert_eq!(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);

    // Greedy is the default, so a cut run is a prefix of the longer one.
    request.max_tokens = Some(2);
    let cut = client.chat(&request).unwrap();
    assert_eq!(cut.choices[0].finish_reason.as_deref(), Some("length"), "{cut:?}");
    let cut_usage = cut.usage.unwrap();
    assert_eq!(cut_usage.completion_tokens, 2);
    // The system turn may still be in the cache from the first request (other tests share
    // the server, so it may not): cached tokens are reported either way, never above the
    // prompt.
    let cached = cut_usage.prompt_tokens_details.expect("cached tokens are reported").cached_tokens;
    assert!(cached == 0 || cached < cut_usage.prompt_tokens, "{cut_usage:?}");
    assert!(text.starts_with(cut.content().unwrap()), "{text:?} vs {cut:?}");
}

#[test]
fn bad_request_is_an_openai_error_without_retries() {
    let Some(addr) = server() else { return };
    let mut config = OpenAiConfig::new(format!("http://{addr}/v1"), MODEL_ID);
    config.backoff = Duration::from_secs(30);
    let mut request = ChatCompletionRequest::new("", vec![ChatMessage::user("hi")]);
    request.top_p = Some(2.0);
    let started = Instant::now();
    let err = OpenAiClient::new(config).chat(&request).unwrap_err();
    assert!(matches!(&err, Error::Api { status: 400, message, .. } if message.contains("top_p")), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30), "a 400 was retried");
}

#[test]
fn json_schema_response_format_gives_parseable_records() {
    let Some(addr) = server() else { return };
    let messages = vec![
        ChatMessage::system("Extract memories from the dialogue as JSON."),
        ChatMessage::user("1.Caroline: I went to a support group yesterday in Boston.\n2.Melanie: I painted a sunrise last week."),
    ];
    let mut request = ChatCompletionRequest::new(MODEL_ID, messages);
    request.max_tokens = Some(300);
    request.response_format = Some(ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat { name: "memories".into(), schema: Some(extract_config().json_schema()), strict: Some(true) },
    });
    let response = client(addr).chat(&request).unwrap();
    let text = response.content().unwrap();
    assert_eq!(response.choices[0].finish_reason.as_deref(), Some("stop"), "{text}");
    let value: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    assert!(value["memories"].as_array().is_some_and(|m| m.len() <= 2), "{text}");
    let outcome = parse_extractor_output(text);
    assert!(outcome.errors.is_empty(), "{outcome:?}");
}

#[test]
fn served_and_local_extractors_agree() {
    let Some(addr) = server() else { return };
    let Some(path) = smollm2() else { return };
    let windows = tiny_windows();

    let mut config = OpenAiConfig::new(format!("http://{addr}/v1"), MODEL_ID);
    config.timeout = Duration::from_secs(300);
    let remote = OpenAiExtractor::new(OpenAiClient::new(config), extract_config()).unwrap();
    let local = LocalExtractor::new(engine(&path), extract_config()).unwrap();
    assert!(local.id().starts_with("gguf:") && remote.id().starts_with("openai:smollm2-135m@"), "{} {}", local.id(), remote.id());

    let served = remote.extract(&windows).unwrap();
    // One window per call, as the server decodes them: batched with other windows, prompts of
    // 64 tokens or more may differ in the last bits (see `LlamaEngine::generate_batch`), and
    // greedy decoding then can pick other tokens (seen here for the second window).
    let in_process: Vec<_> = windows.iter().map(|w| local.extract(std::slice::from_ref(w)).unwrap().remove(0)).collect();
    let batched = local.extract(&windows).unwrap();
    assert_eq!(batched.len(), windows.len());
    assert_eq!(batched[0].usage.prompt_tokens, in_process[0].usage.prompt_tokens);
    for (window, ((s, l), b)) in windows.iter().zip(served.iter().zip(&in_process).zip(&batched)) {
        for e in [s, l, b] {
            assert_eq!(e.window_id, window.id);
            // Constrained decoding: the whole output parses; only records that point outside
            // the window's suffix may be dropped. Both ends stop the reply at its first repeated
            // record (`end_at_repeated_record`), so none is left to drop as a duplicate.
            serde_json::from_str::<serde_json::Value>(&e.raw).unwrap_or_else(|err| panic!("not JSON ({err}): {}", e.raw));
            let dropped = |k: memkit_schema::ErrorKind| {
                use memkit_schema::ErrorKind::{ContextSource, SourcePastWindow};
                matches!(k, ContextSource | SourcePastWindow)
            };
            assert!(e.errors.iter().all(|r| dropped(r.kind)), "{:?}", e.errors);
            assert!(e.records.iter().all(|r| window.in_suffix(r.source_id)), "{:?}", e.records);
            assert!(e.usage.prompt_tokens > 100 && e.usage.completion_tokens > 0, "{:?}", e.usage);
        }
        assert_eq!(s.raw, l.raw, "served and in-process greedy outputs differ for {}", window.id);
        assert_eq!(s.records, l.records);
        assert_eq!(s.usage.prompt_tokens, l.usage.prompt_tokens);
        assert_eq!(s.usage.completion_tokens, l.usage.completion_tokens);
    }
}

/// Prompt distillation over HTTP: a served GGUF that carries an extraction prompt and window
/// announces them in `/v1/models`, and the HTTP extractor asks with the prompt, as the
/// in-process one does; the plain model announces nothing.
#[test]
fn a_served_student_announces_the_prompt_it_carries() {
    use memkit_infer::convert::{ConvertOptions, OutType, gguf_to_hf, hf_to_gguf};
    use memkit_prompt::{PromptName, Prompts, TRAINED_PROMPT_FILE, TRAINED_WINDOW_FILE, TrainedWindow};

    let Some(addr) = server() else { return };
    assert_eq!(client(addr).served_extract_window(), None);
    let Some(path) = smollm2() else { return };
    assert_eq!(OpenAiExtractor::new(client(addr), extract_config()).unwrap().trained_prompt(), None);

    // SmolLM2 relabelled as a student: its weights with the student prompt beside them.
    let dir = tempfile::tempdir().unwrap();
    let hf = dir.path().join("hf");
    gguf_to_hf(&path, &hf).unwrap();
    let template = PromptName::Student.embedded_source();
    std::fs::write(hf.join(TRAINED_PROMPT_FILE), template).unwrap();
    let trained = TrainedWindow { size: 2, overlap: 1 };
    std::fs::write(hf.join(TRAINED_WINDOW_FILE), trained.to_json()).unwrap();
    let student = dir.path().join("student.gguf");
    hf_to_gguf(&hf, &student, &ConvertOptions { dtype: OutType::Q8_0, name: None }).unwrap();
    let server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), engine(&student), "student").unwrap();
    let student_addr = server.local_addr();
    std::thread::spawn(move || server.run().map_err(|e| e.to_string()));

    let mut config = OpenAiConfig::new(format!("http://{student_addr}/v1"), "student");
    config.max_retries = 0;
    assert_eq!(OpenAiClient::new(config.clone()).served_extract_window(), Some(trained));
    let remote = OpenAiExtractor::new(OpenAiClient::new(config), extract_config()).unwrap();
    assert_eq!(remote.trained_prompt(), Some(template));
    let local = LocalExtractor::new(engine(&student), extract_config()).unwrap();
    assert_eq!(local.trained_prompt(), Some(template));
    let window = &tiny_windows()[0];
    let expected = Prompts::embedded().unwrap().render_window(PromptName::Student, window, &extract_config().prompt_options()).unwrap();
    let request = remote.request(window).unwrap();
    assert_eq!(
        (request.messages[0].content.as_str(), request.messages[1].content.as_str()),
        (expected.system.as_str(), expected.user.as_str())
    );
}

#[test]
fn closed_port_fails_clearly_after_the_retry_budget() {
    // A port that was free a moment ago: nothing listens there now.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config = OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), "m");
    (config.max_retries, config.backoff, config.timeout) = (2, Duration::from_millis(20), Duration::from_secs(5));
    let started = Instant::now();
    let err = OpenAiClient::new(config).chat(&ChatCompletionRequest::new("", vec![ChatMessage::user("hi")])).unwrap_err();
    assert!(matches!(err, Error::Http { attempts: 3, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&format!("127.0.0.1:{port}")) && message.contains("3 attempt"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// POSTs a raw JSON body; the status and the JSON answer (errors are answers too).
fn post(addr: SocketAddr, body: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut response = agent
        .post(&format!("http://{addr}/v1/chat/completions"))
        .header("content-type", "application/json")
        .send(body)
        .unwrap_or_else(|e| panic!("POST to {addr}: {e}"));
    let status = response.status().as_u16();
    (status, response.body_mut().read_json().unwrap_or(serde_json::Value::Null))
}

fn chat_body(content: &str, max_tokens: usize) -> String {
    serde_json::json!({"model": MODEL_ID, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}).to_string()
}

/// Polls until `ready` holds (a minute at most).
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Each limit gives its own status and names itself; a request over the concurrency limit is
/// refused while another is generating; shutting down lets the request in flight finish.
#[test]
fn limits_hold_and_shutdown_finishes_the_request_in_flight() {
    use memkit_infer::serve::Limits;
    let Some(path) = smollm2() else { return };
    let limits = Limits { max_tokens: 256, max_prompt_tokens: 80, max_concurrent: 1, max_body_bytes: 4096 };
    let server = Server::bind_with_limits(SocketAddr::from(([127, 0, 0, 1], 0)), engine(&path), MODEL_ID, limits).unwrap();
    let (addr, handle) = (server.local_addr(), server.handle());
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let running = std::thread::spawn(move || {
        server
            .run_until(async move {
                let _ = tokio::task::spawn_blocking(move || stopped.recv()).await;
            })
            .map_err(|e| e.to_string())
    });

    let (status, body) = post(addr, &chat_body("hi", 257));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("limit of 256"), "{body}");
    let (status, body) = post(addr, &chat_body(&"word ".repeat(200), 8));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("limit of 80"), "{body}");
    let (status, body) = post(addr, &chat_body(&"x".repeat(5000), 8));
    assert_eq!(status, 413, "{body}");
    assert_eq!(handle.in_flight(), 0);

    // A long greedy answer (counting) keeps the model busy for seconds; a second request then
    // finds the one place taken.
    let count = chat_body("Count from 1 to 300, separated by commas.", 256);
    let first = {
        let count = count.clone();
        std::thread::spawn(move || post(addr, &count))
    };
    wait_for("the first request to be admitted", || handle.in_flight() == 1);
    let (status, body) = post(addr, &chat_body("hi", 8));
    assert_eq!(status, 429, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("busy"), "{body}");
    let (status, body) = first.join().unwrap();
    assert_eq!(status, 200, "{body}");

    // Shutdown while a request is generating: it is answered, then the server returns.
    let served = handle.served();
    let last = std::thread::spawn(move || post(addr, &count));
    wait_for("the last request to be admitted", || handle.in_flight() == 1);
    stop.send(()).unwrap();
    let (status, body) = last.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(!body["choices"][0]["message"]["content"].as_str().unwrap().is_empty(), "{body}");
    running.join().unwrap().unwrap();
    assert_eq!(handle.served(), served + 1);
    assert!(std::net::TcpStream::connect(addr).is_err(), "the server still accepts connections after shutdown");
}
