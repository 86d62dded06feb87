//! `memkit distill` killed with SIGKILL mid-run, then run again: every window ends up in the
//! ledger exactly once, and the windows finished before the kill are not labelled again.
//!
//! Uses the real binary, the real SmolLM2-135M teacher (skipped unless installed, failing when
//! `MEMKIT_REQUIRE_MODELS=1`) and real MemoryBank windows.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn window_ids(lines: &[String]) -> Vec<String> {
    lines.iter().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["window_id"].as_str().unwrap().to_owned()).collect()
}

/// A recipe over `windows` MemoryBank windows with the SmolLM2 teacher in-process; `labelling`
/// is the recipe's `[labelling]` section (empty: the defaults, decomposed for a local teacher).
fn write_recipe(
    dir: &std::path::Path,
    windows: usize,
    gguf: &std::path::Path,
    labelling: &str,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let (recipe, out) = (dir.join("recipe.toml"), dir.join("out"));
    std::fs::write(
        &recipe,
        format!(
            "name = \"t\"\nout_dir = \"{}\"\n[corpus]\nwindows = {windows}\n\
             window = {{ size = 6, overlap = 1, user_only = true, max_message_chars = 300 }}\n\
             [corpus.memorybank]\npath = \"memorybank/memory_bank_en.json\"\n\
             [teacher]\nkind = \"local\"\nmodel = \"{}\"\nthreads = 1\nbatch = 1\n{labelling}\n[generation]\nmax_tokens = 160\n",
            out.display(),
            gguf.display()
        ),
    )
    .unwrap();
    (recipe, out)
}

#[test]
fn kill_9_mid_run_loses_at_most_the_window_in_flight() {
    let Some(gguf) = common::smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let windows = 4;
    let (recipe, out) = write_recipe(dir.path(), windows, &gguf, "");
    let distill = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_memkit"));
        command
            .args(["--no-progress", "--quiet", "distill", "--recipe"])
            .arg(&recipe)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .arg("--data-dir")
            .arg(memkit_data::shared_data_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    };
    let ledger = out.join("ledger.jsonl");

    let mut child = distill().spawn().unwrap();
    let started = Instant::now();
    while common::ledger_lines(&ledger).is_empty() {
        assert!(child.try_wait().unwrap().is_none(), "distill exited before finishing a window");
        assert!(started.elapsed() < Duration::from_secs(600), "no window finished in 10 minutes");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = window_ids(&common::ledger_lines(&ledger));
    assert!(!before.is_empty() && before.len() < windows, "killed after {} of {windows} windows", before.len());

    let output = distill().output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let after = window_ids(&common::ledger_lines(&ledger));
    assert_eq!(after.len(), windows, "each window exactly once: {after:?}");
    assert_eq!(&after[..before.len()], &before[..], "finished windows were kept, not redone");
    let mut unique = after.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), windows);
    // The dataset files were written from the ledger: one example per whole, complete window.
    let train = std::fs::read_to_string(out.join("train.jsonl")).unwrap();
    let valid = std::fs::read_to_string(out.join("valid.jsonl")).unwrap();
    let examples = common::ledger_lines(&ledger)
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["status"] == "ok" && e["complete"] == true)
        .count();
    assert_eq!(train.lines().count() + valid.lines().count(), examples);
    // Rendered with the student's short prompt, whose template travels with the data.
    let template = memkit_prompt::PromptName::Student.embedded_source();
    assert_eq!(std::fs::read_to_string(out.join(memkit_prompt::TRAINED_PROMPT_FILE)).unwrap(), template);
    let system = memkit_prompt::Prompts::embedded().unwrap().with_trained_prompt(template).unwrap();
    let system = system.extract_system(&memkit_prompt::ExtractOptions::default()).unwrap();
    for line in train.lines().chain(valid.lines()) {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(row["messages"][0]["content"], system.as_str());
    }
    // The same windows one new message at a time: the message before it as context (the
    // default `labelling.context` is 2, capped by the window's start), its own records renumbered
    // to it, and together exactly the window's records.
    let messages_dir = out.join(memkit_teacher::dataset::MESSAGES_DIR);
    assert_eq!(std::fs::read_to_string(messages_dir.join(memkit_prompt::TRAINED_PROMPT_FILE)).unwrap(), template);
    // Each dataset names the window it was cut into, the shape a student trained there is asked
    // in: the recipe's windows (6, 1 of context), and one new message after `labelling.context`
    // (2) of context.
    let window = |dir: &std::path::Path| memkit_prompt::TrainedWindow::read(dir).unwrap().unwrap();
    assert_eq!(window(&out), memkit_prompt::TrainedWindow { size: 6, overlap: 1 });
    assert_eq!(window(&messages_dir), memkit_prompt::TrainedWindow { size: 3, overlap: 2 });
    let rows = |text: &str| -> Vec<serde_json::Value> { text.lines().map(|l| serde_json::from_str(l).unwrap()).collect() };
    let reply = |row: &serde_json::Value| -> Vec<serde_json::Value> {
        let content = row["messages"][2]["content"].as_str().unwrap();
        serde_json::from_str::<serde_json::Value>(content).unwrap()["memories"].as_array().unwrap().clone()
    };
    for (whole, one_by_one) in [(&train, "train.jsonl"), (&valid, "valid.jsonl")] {
        let one_by_one = rows(&std::fs::read_to_string(messages_dir.join(one_by_one)).unwrap());
        for window in rows(whole) {
            let id = format!("{}/m", window["window_id"].as_str().unwrap());
            let parts: Vec<&serde_json::Value> = one_by_one.iter().filter(|r| r["window_id"].as_str().unwrap().starts_with(&id)).collect();
            let window_lines = window["messages"][1]["content"].as_str().unwrap().split("\n\n").nth(1).unwrap().lines().count();
            assert!(parts.len() + 1 >= window_lines && parts.len() <= window_lines, "{id}: {} parts", parts.len());
            let mut contents = Vec::new();
            for part in &parts {
                assert_eq!(part["messages"][0]["content"], system.as_str());
                let lines = part["messages"][1]["content"].as_str().unwrap().split("\n\n").nth(1).unwrap().lines().count();
                assert!((1..=3).contains(&lines), "{}: {lines} messages", part["window_id"]);
                for record in reply(part) {
                    assert_eq!(record["source_id"], lines, "{}: a record of the asked message", part["window_id"]);
                    contents.push(record["content"].as_str().unwrap().to_owned());
                }
            }
            let mut expected: Vec<String> = reply(&window).iter().map(|r| r["content"].as_str().unwrap().to_owned()).collect();
            contents.sort();
            expected.sort();
            assert_eq!(contents, expected, "{id}: the parts hold the window's records");
        }
    }
    let entries: Vec<serde_json::Value> = common::ledger_lines(&ledger).iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(entries.iter().all(|e| e["mode"] == "decomposed"), "a local teacher labels in decomposed mode by default");
    assert!(out.join("stats.md").is_file());
    for name in ["train.parquet", "valid.parquet", "records.parquet"] {
        let bytes = std::fs::read(out.join(name)).unwrap();
        assert!(bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"), "{name} is a parquet file");
    }

    // Every window is in the ledger: a run writes the dataset without starting the teacher, so a
    // clone of finished labels needs no teacher model (here, one that is not there at all).
    let (same_recipe, _) = write_recipe(dir.path(), windows, std::path::Path::new("/nonexistent/teacher.gguf"), "");
    assert_eq!(same_recipe, recipe);
    let output = distill().output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read_to_string(out.join("train.jsonl")).unwrap(), train, "the same dataset, from the ledger");
}

/// Each window's validated records, by window id.
fn records_by_window(lines: &[String]) -> Vec<(String, serde_json::Value)> {
    let mut v: Vec<_> = lines
        .iter()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            (e["window_id"].as_str().unwrap().to_owned(), e["records"].clone())
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn teacher_url_points_the_same_recipe_at_memkit_serve() {
    use std::io::{BufRead, BufReader};

    let Some(gguf) = common::smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Whole windows, no repetition control: what a server decodes, so the records must agree.
    let (recipe, out) = write_recipe(dir.path(), 2, &gguf, "[labelling]\nmode = \"window\"\navoid_repeats = false");
    let distill = |extra: &[&str], cache: &str| {
        Command::new(env!("CARGO_BIN_EXE_memkit"))
            .args(["--no-progress", "--quiet", "distill", "--recipe"])
            .arg(&recipe)
            .arg("--cache-dir")
            .arg(dir.path().join(cache))
            .arg("--data-dir")
            .arg(memkit_data::shared_data_dir())
            .args(extra)
            .output()
            .unwrap()
    };
    let local = distill(&[], "cache-local");
    assert!(local.status.success(), "{}", String::from_utf8_lossy(&local.stderr));
    let local_lines = common::ledger_lines(&out.join("ledger.jsonl"));
    std::fs::remove_dir_all(&out).unwrap();

    let mut server = Command::new(env!("CARGO_BIN_EXE_memkit"))
        .args(["--no-progress", "serve", "--port", "0", "--threads", "1", "--model"])
        .arg(&gguf)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(server.stderr.take().unwrap());
    let url = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "memkit serve exited before it was ready");
        if let Some(at) = line.find("url=") {
            break line[at + 4..].split_whitespace().next().unwrap().to_owned();
        }
    };
    let served = distill(&["--teacher-url", &url, "--concurrency", "2"], "cache-served");
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(served.status.success(), "{}", String::from_utf8_lossy(&served.stderr));
    let served_lines = common::ledger_lines(&out.join("ledger.jsonl"));

    assert_eq!(local_lines.len(), 2);
    assert_eq!(records_by_window(&served_lines), records_by_window(&local_lines), "same model, greedy: same records");
    for line in &served_lines {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(e["model"].as_str().unwrap().starts_with(&format!("openai:{}@http://", gguf.display())), "{}", e["model"]);
    }
    let stats = std::fs::read_to_string(out.join("stats.md")).unwrap();
    assert!(stats.contains("--teacher-url") && stats.contains("| · labelled by `openai:"), "{stats}");
}

/// A recipe `name` in `dir` drawing one window from `corpus` (a `[corpus.<source>]` section) for
/// a served teacher at a port nothing listens on: for runs that must fail before asking it.
fn served_recipe(dir: &std::path::Path, name: &str, corpus: &str) -> std::path::PathBuf {
    let recipe = dir.join(name);
    let text = format!(
        "name = \"t\"\n[corpus]\nwindows = 1\n{corpus}\n\
         [teacher]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n"
    );
    std::fs::write(&recipe, text).unwrap();
    recipe
}

#[test]
fn threads_is_for_local_teachers_and_at_least_one() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = served_recipe(dir.path(), "served.toml", "[corpus.memorybank]\npath = \"memorybank/memory_bank_en.json\"");
    let distill = |threads: &str| {
        Command::new(env!("CARGO_BIN_EXE_memkit"))
            .args(["--no-progress", "distill", "--recipe"])
            .arg(&recipe)
            .args(["--threads", threads])
            .output()
            .unwrap()
    };
    let served = distill("2");
    assert!(!served.status.success());
    let stderr = String::from_utf8_lossy(&served.stderr);
    assert!(stderr.contains("--threads sets a local teacher") && stderr.contains("served.toml"), "{stderr}");
    let zero = distill("0");
    assert!(!zero.status.success());
    assert!(String::from_utf8_lossy(&zero.stderr).contains("--threads"));
}

/// A corpus whose packaged dataset is not installed: the error names the recipe, the section and
/// the command that installs it.
#[test]
fn a_missing_packaged_dataset_names_the_recipe_and_the_fetch_command() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = served_recipe(dir.path(), "chitchat.toml", "[corpus.chitchat]");
    let out = Command::new(env!("CARGO_BIN_EXE_memkit"))
        .args(["--no-progress", "distill", "--recipe"])
        .arg(&recipe)
        .env("MEMKIT_MODELS_DIR", dir.path().join("no-models"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("recipe {}", recipe.display())), "{stderr}");
    assert!(stderr.contains("[corpus.chitchat] names no path and chitchat-dataset is not installed"), "{stderr}");
    assert!(stderr.contains("memkit models fetch chitchat-dataset"), "{stderr}");
}
