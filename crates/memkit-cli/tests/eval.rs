//! `memkit eval` with DimMem's and HingeMem's language-model steps, on the real
//! Qwen2.5-Coder-0.5B (skipped unless installed, failing when `MEMKIT_REQUIRE_MODELS=1`): a
//! recipe whose engine system has `query_parser = "llm"` parses every question once, one with
//! `update = "llm"` consolidates its records, and a HingeMem system with `boundaries = "llm"`
//! segments with the model. Each reports its fallbacks, and a second run takes every reply from
//! the reply cache. A `[qa]` section at two budgets answers every question within each.

use std::path::Path;
use std::process::Command;

fn eval(recipe: &Path, reports: &Path, cache: &Path) -> serde_json::Value {
    eval_with(recipe, reports, cache, &[])
}

/// [`eval`] with more arguments.
fn eval_with(recipe: &Path, reports: &Path, cache: &Path, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let name = recipe.file_stem().unwrap().to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_memkit"))
        .args(["--no-progress", "--quiet", "eval", "--recipe"])
        .arg(recipe)
        .arg("--reports-dir")
        .arg(reports)
        .arg("--data-dir")
        .arg(memkit_data::shared_data_dir())
        .args(args)
        .env("MEMKIT_CACHE_DIR", cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&std::fs::read_to_string(reports.join(name).join("metrics.json")).unwrap()).unwrap()
}

/// Writes `<dir>/<name>.toml`: a recipe over LoCoMo conv-26's first session with `systems`
/// (the rest of the recipe, TOML).
fn recipe_on_conv26_session1(dir: &Path, name: &str, systems: &str) -> std::path::PathBuf {
    let recipe = dir.join(format!("{name}.toml"));
    let head = format!(
        "name = \"{name}\"\n[dataset]\nkind = \"locomo\"\npath = \"locomo/locomo10.json\"\nconversations = [\"conv-26\"]\nsessions = 1\n"
    );
    std::fs::write(&recipe, head + systems).unwrap();
    recipe
}

fn cached_replies(dir: &Path) -> usize {
    walk(dir).filter(|p| p.extension().is_some_and(|e| e == "json")).count()
}

fn walk(dir: &Path) -> Box<dyn Iterator<Item = std::path::PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Box::new(std::iter::empty()) };
    Box::new(entries.flatten().flat_map(|e| {
        let p = e.path();
        if p.is_dir() { walk(&p) } else { Box::new(std::iter::once(p)) }
    }))
}

#[test]
fn an_llm_parsed_system_is_evaluated_counted_and_cached() {
    let Some(gguf) = memkit_infer::models::installed_for_tests(memkit_infer::models::QWEN2_5_CODER_0_5B.name) else { return };
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_on_conv26_session1(
        dir.path(),
        "llm-parser",
        &format!(
            r#"
[[systems]]
kind = "engine"
name = "rules"
records = "rule"

[[systems]]
kind = "engine"
name = "llm"
records = "rule"
query_parser = "llm"

[query_model]
model = {{ kind = "local", model = {gguf:?}, threads = 2 }}
chunk = 4
"#
        ),
    );
    let (reports, cache) = (dir.path().join("reports"), dir.path().join("cache"));
    let metrics = eval(&recipe, &reports, &cache);
    let systems = metrics["systems"].as_array().unwrap();
    let questions = systems[0]["questions"].as_u64().unwrap() as usize;
    assert!(questions > 0, "{metrics}");
    assert_eq!(systems[1]["questions"].as_u64().unwrap() as usize, questions);
    // Only the LLM system reports fallbacks, and there are at most as many as questions.
    assert!(systems[0].get("query_parser_fallbacks").is_none(), "{}", systems[0]);
    let fallbacks = systems[1]["query_parser_fallbacks"].as_u64().unwrap() as usize;
    assert!(fallbacks <= questions, "{fallbacks} of {questions}");
    let report = std::fs::read_to_string(reports.join("llm-parser/report.md")).unwrap();
    assert!(report.contains("prompts/query.j2") && report.contains("fell back to the rule parser"), "{report}");
    // Every question is parsed once (the same text twice is one cached reply).
    let parses = cached_replies(&cache.join("qa"));
    assert!(parses > 0);

    // Again: the same figures, nothing new in the cache.
    let again = eval(&recipe, &reports, &cache);
    assert_eq!(cached_replies(&cache.join("qa")), parses);
    assert_eq!(again["systems"][1]["evidence_recall_at"], systems[1]["evidence_recall_at"]);
    assert_eq!(again["systems"][1]["query_parser_fallbacks"], systems[1]["query_parser_fallbacks"]);
}

#[test]
fn llm_update_and_llm_boundaries_are_evaluated_counted_and_cached() {
    use memkit_infer::models::{ALL_MINILM_L6_V2, QWEN2_5_CODER_0_5B, installed_for_tests};
    let (Some(gguf), Some(_)) = (installed_for_tests(QWEN2_5_CODER_0_5B.name), installed_for_tests(ALL_MINILM_L6_V2.name)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_on_conv26_session1(
        dir.path(),
        "llm-steps",
        &format!(
            r#"
[[systems]]
kind = "engine"
name = "rule update"
records = "rule"
rule_extractor.per_sentence = true
update = "rule"

[[systems]]
kind = "engine"
name = "llm update"
records = "rule"
rule_extractor.per_sentence = true
update = "llm"

[[systems]]
kind = "hinge"
name = "llm boundaries"
records = "rule"
boundaries = "llm"

[update_model]
model = {{ kind = "local", model = {gguf:?}, threads = 2 }}

[boundary_model]
model = {{ kind = "local", model = {gguf:?}, threads = 2 }}
messages = 12
"#
        ),
    );
    let (reports, cache) = (dir.path().join("reports"), dir.path().join("cache"));
    let metrics = eval(&recipe, &reports, &cache);
    let systems = metrics["systems"].as_array().unwrap();
    // Both updating systems consolidate the same records; every record is merged, superseded
    // or kept.
    for s in &systems[..2] {
        let count = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
        assert!(count("update_records_in") > 0, "{s}");
        assert_eq!(count("update_records_in"), count("update_merges") + count("update_supersedes") + count("update_records_kept"), "{s}");
    }
    assert_eq!(systems[0]["update_records_in"], systems[1]["update_records_in"]);
    assert!(systems[2].get("update_records_in").is_none());
    let report = std::fs::read_to_string(reports.join("llm-steps/report.md")).unwrap();
    assert!(report.contains("prompts/update.j2") && report.contains("prompts/boundary.j2"), "{report}");
    // conv-26's first session (18 messages) in pieces of 12: two pieces.
    assert!(report.contains("2 pieces asked"), "{report}");
    // The first run finds nothing in the cache.
    let pairs = systems[1]["update_pairs_decided"].as_u64().unwrap();
    assert!(report.contains(&format!("update consolidator 0 of {pairs} (0.0%)")), "{report}");
    assert!(report.contains("boundary segmenter 0 of 2 (0.0%)"), "{report}");
    let replies = cached_replies(&cache.join("qa"));
    assert!(replies >= 2, "{replies}");

    // Again: the same figures, nothing new in the cache.
    let again = eval(&recipe, &reports, &cache);
    assert_eq!(cached_replies(&cache.join("qa")), replies);
    for i in 0..3 {
        assert_eq!(again["systems"][i]["evidence_recall_at"], systems[i]["evidence_recall_at"], "{}", systems[i]["name"]);
    }
    assert_eq!(again["systems"][1]["update_merges"], systems[1]["update_merges"]);
    let report = std::fs::read_to_string(reports.join("llm-steps/report.md")).unwrap();
    let all = if pairs == 0 { "0.0" } else { "100.0" };
    assert!(report.contains(&format!("update consolidator {pairs} of {pairs} ({all}%)")), "{report}");
    assert!(report.contains("boundary segmenter 2 of 2 (100.0%)"), "{report}");
}

#[test]
fn qa_at_several_budgets_answers_each_question_within_each_budget() {
    let Some(gguf) = memkit_infer::models::installed_for_tests(memkit_infer::models::QWEN2_5_CODER_0_5B.name) else { return };
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_on_conv26_session1(
        dir.path(),
        "qa-budgets",
        &format!(
            r#"
[[systems]]
kind = "bm25_turns"
name = "turns"

[qa]
questions = 2
budget = [60, 200]
max_tokens = 16
answer = {{ kind = "local", model = {gguf:?}, threads = 2 }}
"#
        ),
    );
    let (reports, cache) = (dir.path().join("reports"), dir.path().join("cache"));
    let metrics = eval(&recipe, &reports, &cache);
    let qa = &metrics["qa"];
    assert_eq!(qa["budgets"], serde_json::json!([60, 200]), "{qa}");
    // One row per budget, in the recipe's order, each over the same 2 questions.
    let rows = qa["systems"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{qa}");
    for (row, budget) in rows.iter().zip([60.0, 200.0]) {
        assert_eq!((row["name"].as_str(), row["budget"].as_f64(), row["questions"].as_u64()), (Some("turns"), Some(budget), Some(2)));
        assert!(row["mean_context_tokens"].as_f64().unwrap() <= budget, "{row}");
    }
    // The larger budget reads at least as much as the smaller one (the same ranking, cut later).
    assert!(rows[1]["mean_context_tokens"].as_f64() >= rows[0]["mean_context_tokens"].as_f64(), "{qa}");
    // Every answer says its budget and stays within it.
    let answers = std::fs::read_to_string(reports.join("qa-budgets/qa.jsonl")).unwrap();
    let answers: Vec<serde_json::Value> = answers.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(answers.len(), 4);
    assert!(answers.iter().all(|a| a["context_tokens"].as_u64() <= a["budget"].as_u64()), "{answers:?}");
    let report = std::fs::read_to_string(reports.join("qa-budgets/report.md")).unwrap();
    assert!(report.contains("at most 60 or 200 context tokens"), "{report}");

    // Again: every reply from the cache.
    let replies = cached_replies(&cache.join("qa"));
    let again = eval(&recipe, &reports, &cache);
    assert_eq!(cached_replies(&cache.join("qa")), replies);
    assert_eq!(again["qa"], metrics["qa"]);

    // The replies moved to a folder of their own (one a repository can carry) and named with
    // --cache-dir: every reply comes from there, and the default cache stays empty.
    let moved = dir.path().join("replies");
    std::fs::rename(cache.join("qa"), &moved).unwrap();
    let from_moved = eval_with(&recipe, &reports, &cache, &["--cache-dir".as_ref(), moved.as_os_str()]);
    assert_eq!((cached_replies(&moved), cached_replies(&cache.join("qa"))), (replies, 0));
    assert_eq!(from_moved["qa"], metrics["qa"]);
    let report = std::fs::read_to_string(reports.join("qa-budgets/report.md")).unwrap();
    assert!(report.contains(&format!("reply cache ({})", moved.display())), "{report}");
}

/// A LongMemEval recipe's `questions` keeps exactly the question ids it names (a named subset
/// for slow extractors); an id the file lacks is an error that names it. No model needed.
#[test]
fn a_longmemeval_subset_is_the_questions_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = |name: &str, ids: &str| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "name = \"{name}\"\n[dataset]\nkind = \"longmemeval\"\npath = \"longmemeval/longmemeval_s_cleaned_subset200.json\"\n\
                 questions = [{ids}]\n[[systems]]\nkind = \"bm25_turns\"\nname = \"BM25 raw turns\"\n"
            ),
        )
        .unwrap();
        path
    };
    let metrics = eval(&recipe("two", "\"0862e8bf\", \"001be529\""), &dir.path().join("reports"), &dir.path().join("cache"));
    assert_eq!(metrics["systems"][0]["questions"], 2);

    let out = Command::new(env!("CARGO_BIN_EXE_memkit"))
        .args(["--no-progress", "--quiet", "eval", "--recipe"])
        .arg(recipe("typo", "\"0862e8bf\", \"no-such-id\""))
        .arg("--reports-dir")
        .arg(dir.path().join("reports"))
        .arg("--data-dir")
        .arg(memkit_data::shared_data_dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"no-such-id\""), "{}", String::from_utf8_lossy(&out.stderr));
}
