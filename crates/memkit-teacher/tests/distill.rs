//! Distillation end to end on real MemoryBank windows.
//!
//! - Teachers that fail: a loopback HTTP server that answers 500, answers garbage, never
//!   answers, or answers a completion that is not JSON. Finished windows must be kept,
//!   failed requests retried on the next run, bad replies ledgered with their raw text.
//! - The real thing (skipped unless SmolLM2-135M is installed, or failing when
//!   `MEMKIT_REQUIRE_MODELS=1`): `memkit serve` over SmolLM2 as an OpenAI teacher and the same
//!   GGUF in-process write the same records; a second run asks nothing; a lost ledger is
//!   rebuilt from the cache. With three replies per request (the greedy one from the cache of a
//!   plain run, two seeded draws) a vote of all three keeps only what the greedy reply held, and
//!   best-of-3 keeps at least as many records as the greedy reply.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use memkit_teacher::ledger::{self, Entry, Failure, Status};
use memkit_teacher::ledger::{failures_path, ledger_path};
use memkit_teacher::teacher::from_spec;
use memkit_teacher::{DistillRecipe, Error, RunOptions, RunSummary, run};

fn recipe(out: &Path, windows: usize, teacher: &str) -> DistillRecipe {
    let text = format!(
        r#"
name = "test"
out_dir = "{out}"
[corpus]
windows = {windows}
window = {{ size = 6, overlap = 1, user_only = true, max_message_chars = 300 }}
[corpus.memorybank]
path = "memorybank/memory_bank_en.json"
[teacher]
{teacher}
[labelling]
mode = "window"
avoid_repeats = false
[generation]
max_memories = 4
max_tokens = 160
"#,
        out = out.display()
    );
    DistillRecipe::from_toml(&text).unwrap()
}

fn openai(base_url: &str, retries: u32) -> String {
    format!("kind = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\nconcurrency = 1\ntimeout_s = 1\nmax_retries = {retries}")
}

fn options(cache: &Path) -> RunOptions {
    RunOptions { cache_dir: cache.to_owned(), limit: None }
}

fn distill(recipe: &DistillRecipe, cache: &Path) -> Result<RunSummary, Error> {
    let teacher = from_spec(&recipe.teacher, recipe.generation.max_tokens)?;
    let cleaner = memkit_clean::Cleaner::new(recipe.grounding);
    let corpus = memkit_teacher::corpus::select(&recipe.corpus, &memkit_data::shared_data_dir())?;
    run(recipe, &corpus, &options(cache), &teacher, &cleaner, &memkit_teacher::run::Silent)
}

/// How the fake teacher answers.
#[derive(Clone, Copy)]
enum Mode {
    Status500,
    Garbage,
    Hang,
    NotJsonContent,
    /// A completion cut at `max_tokens`: one whole record, then a record cut off.
    CutAtLimit,
}

/// A loopback HTTP server answering every request per `mode`; counts requests.
fn bad_server(mode: Mode) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || answer(stream, mode));
        }
    });
    (format!("http://{addr}/v1"), count)
}

fn answer(mut stream: TcpStream, mode: Mode) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let (status, body) = match mode {
        Mode::Status500 => ("500 Internal Server Error", r#"{"error":{"message":"boom","type":"server_error"}}"#.to_owned()),
        Mode::Garbage => ("200 OK", "<html>not json".to_owned()),
        Mode::Hang => {
            std::thread::sleep(Duration::from_secs(5));
            return;
        }
        Mode::CutAtLimit => {
            let record = r#"{"source_id":2,"source_speaker":"user","content":"The user likes tea.","dimension":{"memory_type":"profile","time":"","location":"","reason":"","purpose":"","keywords":[]}}"#;
            let content = format!(r#"{{"memories":[{record},{{"source_id":3,"source_speaker":"user","content":"The user ha"#);
            (
                "200 OK",
                serde_json::json!({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 160, "total_tokens": 170}})
                .to_string(),
            )
        }
        Mode::NotJsonContent => (
            "200 OK",
            serde_json::json!({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sure! Here are the memories you asked for."}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 9, "total_tokens": 19}})
            .to_string(),
        ),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

#[test]
fn failed_requests_are_ledgered_as_failures_and_retried_next_run() {
    // (mode, retries allowed, requests expected for 2 windows, reason text): a 500 is retried,
    // a 200 that is no chat completion is not (asking again gets the same).
    let cases = [(Mode::Status500, 1, 4, "HTTP 500"), (Mode::Garbage, 1, 2, "not a chat completion"), (Mode::Hang, 0, 2, "")];
    for (mode, retries, requests, what) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (url, count) = bad_server(mode);
        let recipe = recipe(&dir.path().join("out"), 2, &openai(&url, retries));
        let summary = distill(&recipe, &dir.path().join("cache")).unwrap();
        assert_eq!(summary.backend_failures, 2, "{url}");
        assert_eq!(summary.labelled + summary.unparsable, 0);
        let failures: Vec<Failure> = ledger::read(&failures_path(&recipe.out_dir())).unwrap();
        assert_eq!(count.load(Ordering::SeqCst), requests, "requests incl. retries: {failures:?}");
        assert_eq!(failures.len(), 2);
        assert!(failures.iter().all(|f| f.reason.contains(what) && f.raw.is_empty()), "{failures:?}");
        assert!(ledger::read::<Entry>(&ledger_path(&recipe.out_dir())).unwrap().is_empty());
        // Nothing finished, so the next run asks again.
        let again = distill(&recipe, &dir.path().join("cache")).unwrap();
        assert_eq!((again.already_done, again.backend_failures), (0, 2));
    }
}

#[test]
fn a_dead_teacher_stops_the_run_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = bad_server(Mode::Status500);
    let recipe = recipe(&dir.path().join("out"), 12, &openai(&url, 0));
    let err = distill(&recipe, &dir.path().join("cache")).unwrap_err().to_string();
    assert!(err.contains("8 teacher requests in a row failed") && err.contains("failures.jsonl"), "{err}");
}

#[test]
fn unparsable_replies_are_finished_with_their_raw_text() {
    let dir = tempfile::tempdir().unwrap();
    let (url, count) = bad_server(Mode::NotJsonContent);
    let recipe = recipe(&dir.path().join("out"), 3, &openai(&url, 0));
    let summary = distill(&recipe, &dir.path().join("cache")).unwrap();
    assert_eq!((summary.unparsable, summary.labelled, summary.backend_failures), (3, 0, 0));
    let entries: Vec<Entry> = ledger::read(&ledger_path(&recipe.out_dir())).unwrap();
    assert!(entries.iter().all(|e| e.status == Status::Unparsable && e.records.is_empty() && e.usage.completion_tokens == 9));
    let failures: Vec<Failure> = ledger::read(&failures_path(&recipe.out_dir())).unwrap();
    assert!(failures.iter().all(|f| f.raw.starts_with("Sure!")), "{failures:?}");
    // Finished windows are not asked again.
    let again = distill(&recipe, &dir.path().join("cache")).unwrap();
    assert_eq!((again.already_done, again.unparsable), (3, 0));
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

/// The installed SmolLM2 GGUF, or `None` (test skipped); see [`memkit_infer::models::installed_for_tests`].
fn smollm2() -> Option<PathBuf> {
    memkit_infer::models::installed_for_tests(memkit_infer::models::SMOLLM2_135M.name)
}

fn records(recipe: &DistillRecipe) -> Vec<(String, String)> {
    let entries: Vec<Entry> = ledger::read(&ledger_path(&recipe.out_dir())).unwrap();
    let mut out: Vec<(String, String)> =
        entries.iter().map(|e| (e.window_id.clone(), serde_json::to_string(&e.records).unwrap())).collect();
    out.sort();
    out
}

#[test]
fn served_and_local_teachers_agree_and_reruns_cost_nothing() {
    use memkit_infer::generate::{EngineOptions, LlamaEngine};
    let Some(gguf) = smollm2() else { return };
    let engine = LlamaEngine::load(&gguf, EngineOptions { n_ctx: 4096, n_threads: 1, n_seq_max: 2, ..EngineOptions::default() }).unwrap();
    let server = memkit_infer::serve::Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), engine, "smollm2").unwrap();
    let url = format!("http://{}/v1", server.local_addr());
    std::thread::spawn(move || server.run().map_err(|e| e.to_string()));

    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let http = recipe(&dir.path().join("http"), 3, &format!("{}\ntimeout_s = 600", openai(&url, 0).replace("\ntimeout_s = 1", "")));
    let first = distill(&http, &cache).unwrap();
    assert_eq!(first.labelled + first.unparsable, 3, "{first:?}");
    assert_eq!(first.from_cache, 0);

    let second = distill(&http, &cache).unwrap();
    assert_eq!((second.already_done, second.labelled, second.unparsable), (3, 0, 0));

    // A lost ledger is rebuilt from the cache without asking the teacher.
    std::fs::remove_file(ledger_path(&http.out_dir())).unwrap();
    let rebuilt = distill(&http, &cache).unwrap();
    assert_eq!(rebuilt.from_cache, 3);

    let local = recipe(&dir.path().join("local"), 3, &format!("kind = \"local\"\nmodel = \"{}\"\nthreads = 1\nbatch = 1", gguf.display()));
    let summary = distill(&local, &cache).unwrap();
    assert_eq!(summary.from_cache, 0, "the local teacher has its own cache keys");
    assert_eq!(records(&http), records(&local));
}

#[test]
fn several_replies_per_request_are_voted_on_or_the_best_is_kept() {
    use memkit_teacher::samples::{Choose, Samples};
    let Some(gguf) = smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let teacher = format!("kind = \"local\"\nmodel = \"{}\"\nthreads = 1\nbatch = 3", gguf.display());
    // No re-asks: a re-ask of the voted reply is another request than the greedy one's.
    let mut plain = recipe(&dir.path().join("plain"), 1, &teacher);
    plain.labelling.repair = false;
    let first = distill(&plain, &cache).unwrap();
    assert_eq!(first.labelled + first.unparsable, 1, "{first:?}");
    let mut voted = recipe(&dir.path().join("voted"), 1, &teacher);
    voted.labelling.repair = false;
    voted.labelling.samples = Samples { n: 3, agree: 3, ..Samples::default() };
    let summary = distill(&voted, &cache).unwrap();
    assert_eq!(summary.from_cache, 0, "the draws are new requests");
    let entries: Vec<Entry> = ledger::read(&ledger_path(&voted.out_dir())).unwrap();
    let greedy: Vec<Entry> = ledger::read(&ledger_path(&plain.out_dir())).unwrap();
    for e in &entries {
        let g = greedy.iter().find(|g| g.window_id == e.window_id).unwrap();
        // One window request became three.
        assert_eq!((g.requests, e.requests), (1, 3));
        assert!(e.usage.completion_tokens > g.usage.completion_tokens, "{e:?}");
        // A record every reply holds is in the greedy reply, in its wording.
        for r in &e.records {
            let quoted = serde_json::to_string(&r.content).unwrap();
            assert!(
                g.records.iter().any(|k| k.content == r.content) || g.dropped.iter().any(|d| d.raw.contains(&quoted)),
                "{r:?} not in {g:?}"
            );
        }
    }
    // Seeded draws: a lost ledger is rebuilt from the cache alone, record for record.
    let before = records(&voted);
    std::fs::remove_file(ledger_path(&voted.out_dir())).unwrap();
    assert_eq!(distill(&voted, &cache).unwrap().from_cache, 1);
    assert_eq!(records(&voted), before);

    // Best-of-3 over the same three replies (all cached): cleaning keeps at least as many of the
    // chosen reply as of the greedy one (a window-mode request is the whole window).
    let mut best = recipe(&dir.path().join("best"), 1, &teacher);
    best.labelling.repair = false;
    best.labelling.samples = Samples { n: 3, choose: Choose::Best, ..Samples::default() };
    assert_eq!(distill(&best, &cache).unwrap().from_cache, 1);
    let entries: Vec<Entry> = ledger::read(&ledger_path(&best.out_dir())).unwrap();
    assert_eq!(entries[0].samples, Some(best.labelling.samples));
    assert!(entries[0].records.len() >= greedy[0].records.len(), "{entries:?} {greedy:?}");
}

#[test]
fn replies_cut_at_the_token_limit_are_typed_failures_and_no_training_example() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = bad_server(Mode::CutAtLimit);
    let recipe = recipe(&dir.path().join("out"), 2, &openai(&url, 0));
    let summary = distill(&recipe, &dir.path().join("cache")).unwrap();
    assert_eq!((summary.unparsable, summary.labelled), (2, 0));
    let entries: Vec<Entry> = ledger::read(&ledger_path(&recipe.out_dir())).unwrap();
    assert!(
        entries.iter().all(|e| e.status == Status::Unparsable && e.failure == Some(memkit_schema::ErrorKind::Truncated)),
        "{entries:?}"
    );
    // The whole record before the cut is not kept either.
    assert!(entries.iter().all(|e| e.records.is_empty()));
    let failures: Vec<Failure> = ledger::read(&failures_path(&recipe.out_dir())).unwrap();
    assert!(failures.iter().all(|f| f.kind == Some(memkit_schema::ErrorKind::Truncated) && f.raw.contains("The user ha")), "{failures:?}");
    let corpus = memkit_teacher::corpus::select(&recipe.corpus, &memkit_data::shared_data_dir()).unwrap();
    let data = memkit_teacher::dataset::build(&recipe, &corpus).unwrap();
    assert!(data.train.is_empty() && data.valid.is_empty());
}

/// A ledger entry written by hand: records and drops as `(source_id, content)` /
/// `(reason, raw)`.
fn entry(window_id: &str, complete: bool, records: &[(u32, &str)], dropped: &[(&str, String)]) -> String {
    let record = |id: u32, content: &str| {
        serde_json::json!({"source_id": id, "source_speaker": "user", "content": content, "dimension": {"memory_type": "fact",
            "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
    };
    serde_json::json!({
        "window_id": window_id, "source": "memorybank", "model": "m", "key": "k", "status": "ok",
        "records": records.iter().map(|&(id, c)| record(id, c)).collect::<Vec<_>>(),
        "dropped": dropped.iter().map(|(reason, raw)| serde_json::json!({"reason": reason, "raw": raw})).collect::<Vec<_>>(),
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "millis": 1},
        "complete": complete,
    })
    .to_string()
}

#[test]
fn an_incomplete_window_keeps_the_messages_whose_records_were_all_kept() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe(&dir.path().join("out"), 4, &openai("http://127.0.0.1:9", 0));
    let corpus = memkit_teacher::corpus::select(&recipe.corpus, &memkit_data::shared_data_dir()).unwrap();
    let [w0, w1, w2, w3] = [0, 1, 2, 3].map(|i| &corpus.windows[i].window);
    let (first, last) = (w1.context as u32 + 1, w1.messages.len() as u32);
    // w0 is complete. w1 lost a record of its first new message (first person, its JSON names
    // it) and dropped a duplicate of its last (not a finding: nothing lost there). w2 lost a
    // record cut off before it named its message, so none of w2 can be trusted. w3 is complete,
    // but the teacher's only record of its first new message was impersonal: that message has
    // no known target, the window is no whole example, and its other messages stay.
    let ledger = [
        entry(&w0.id, true, &[(w0.context as u32 + 1, "The user likes tea.")], &[]),
        entry(
            &w1.id,
            false,
            &[(last, "The user walks the dog.")],
            &[
                ("first_person", format!(r#"{{"source_id":{first},"source_speaker":"user","content":"I like rain."}}"#)),
                ("duplicate", format!(r#"{{"source_id":{last},"source_speaker":"user","content":"The user walks the dog."}}"#)),
            ],
        ),
        entry(&w2.id, false, &[(3, "The user reads.")], &[("truncated", r#"{"sour"#.to_owned())]),
        entry(
            &w3.id,
            true,
            &[(w3.messages.len() as u32, "The user swims.")],
            &[("impersonal", format!(r#"{{"source_id":{},"source_speaker":"user","content":"Tea is a drink."}}"#, w3.context + 1))],
        ),
    ];
    std::fs::create_dir_all(recipe.out_dir()).unwrap();
    std::fs::write(ledger_path(&recipe.out_dir()), ledger.join("\n") + "\n").unwrap();

    let data = memkit_teacher::dataset::build(&recipe, &corpus).unwrap();
    assert_eq!(data.incomplete, 2);
    let whole: Vec<&str> = data.train.iter().chain(&data.valid).map(|e| e.window_id.as_str()).collect();
    assert_eq!(whole, [w0.id.as_str()], "only the complete window is a whole example");
    let of = |w: &memkit_data::Window| -> Vec<String> {
        data.train_messages
            .iter()
            .chain(&data.valid_messages)
            .map(|e| e.window_id.clone())
            .filter(|id| id.starts_with(&format!("{}/", w.id)))
            .collect()
    };
    assert_eq!(of(w0).len(), w0.suffix().len());
    let expected: Vec<String> = (first + 1..=last).map(|n| format!("{}/m{n}", w1.id)).collect();
    assert_eq!(of(w1), expected, "every new message of w1 but the one that lost a record");
    assert!(of(w2).is_empty());
    let kept: Vec<String> = (w3.context as u32 + 2..=w3.messages.len() as u32).map(|n| format!("{}/m{n}", w3.id)).collect();
    assert_eq!(of(w3), kept, "every new message of w3 but the one whose only record was dropped");
    assert_eq!((data.failed_messages, data.windows_with_failed_messages), (1, 1));
    assert_eq!(data.salvaged_messages, expected.len());
    // The salvaged messages follow the complete windows' in their split, and carry their records.
    for split in [&data.train_messages, &data.valid_messages] {
        let salvaged = split.iter().position(|e| e.window_id.starts_with(&format!("{}/", w1.id))).unwrap_or(split.len());
        assert!(split[salvaged..].iter().all(|e| e.window_id.starts_with(&format!("{}/", w1.id))));
    }
    let walk = data.train_messages.iter().chain(&data.valid_messages).find(|e| e.window_id == format!("{}/m{last}", w1.id)).unwrap();
    assert!(walk.messages.last().unwrap().content.contains("The user walks the dog."), "{walk:?}");
}
