//! Every committed eval recipe parses and passes its checks: a misspelt key or a system that
//! cannot run on its dataset fails here, not minutes into `just eval`.

use std::path::PathBuf;

use memkit_eval::recipe::{EvalRecipe, SystemSpec, UpdateKind};

#[test]
fn every_committed_recipe_is_valid() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../recipes/eval");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let recipe = EvalRecipe::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            names.push(recipe.name);
        }
    }
    assert!(names.len() >= 8, "{names:?}");
    // The HingeMem ablation recipes carry the rows their reports discuss.
    let hinge = EvalRecipe::from_file(&dir.join("locomo-hinge.toml")).unwrap();
    let embedding = hinge.systems.iter().find(|s| s.name() == "rule sentences, embedding topic shifts").unwrap();
    assert!(embedding.uses_dense(), "embedding topic shifts need the embedder");
    assert!(matches!(hinge.systems[2], SystemSpec::Hinge { .. }));
}

/// `query_parser = "llm"` needs `[query_model]`, and `[query_model]` needs a system that uses it.
#[test]
fn the_llm_query_parser_and_its_model_come_together() {
    let dir = tempfile::tempdir().unwrap();
    let check = |systems: &str, model: &str| {
        let path = dir.path().join("r.toml");
        let text = format!("name = \"r\"\n[dataset]\nkind = \"locomo\"\npath = \"x.json\"\n{systems}\n{model}");
        std::fs::write(&path, text).unwrap();
        EvalRecipe::from_file(&path).map(|_| ()).map_err(|e| e.to_string())
    };
    let llm = "[[systems]]\nkind = \"engine\"\nname = \"e\"\nrecords = \"rule\"\nquery_parser = \"llm\"";
    let rule = "[[systems]]\nkind = \"hinge\"\nname = \"h\"\nquery_parser = \"rule\"";
    let model = "[query_model]\nmodel = { kind = \"local\", model = \"qwen2.5-coder-1.5b-instruct\" }";
    assert_eq!(check(llm, model), Ok(()));
    assert!(check(llm, "").unwrap_err().contains("no [query_model]"));
    assert!(check(rule, model).unwrap_err().contains("no system has query_parser"));
    assert!(check(&llm.replace("\"llm\"", "\"model\""), model).unwrap_err().contains("unknown variant"));
    let parsed: SystemSpec = toml::from_str(&llm.replace("[[systems]]\n", "")).unwrap();
    assert_eq!(parsed.query_parser(), memkit_eval::recipe::QueryParserKind::Llm);
}

/// `update = "llm"` needs `[update_model]`, and `[update_model]` needs a system that uses it; a
/// system that consolidates needs the embedder (the update's cosine filter).
#[test]
fn the_llm_update_and_its_model_come_together() {
    let dir = tempfile::tempdir().unwrap();
    let check = |systems: &str, model: &str| {
        let path = dir.path().join("r.toml");
        let text = format!(
            "name = \"r\"\n[dataset]\nkind = \"longmemeval\"\npath = \"x.json\"\nquestion_types = [\"knowledge-update\"]\n{systems}\n{model}"
        );
        std::fs::write(&path, text).unwrap();
        EvalRecipe::from_file(&path).map(|_| ()).map_err(|e| e.to_string())
    };
    let llm = "[[systems]]\nkind = \"engine\"\nname = \"e\"\nrecords = \"rule\"\nupdate = \"llm\"";
    let rule = "[[systems]]\nkind = \"engine\"\nname = \"e\"\nrecords = \"rule\"\nupdate = \"rule\"";
    let model = "[update_model]\nmodel = { kind = \"local\", model = \"qwen2.5-coder-1.5b-instruct\" }";
    assert_eq!(check(llm, model), Ok(()));
    assert_eq!(check(rule, ""), Ok(()));
    assert!(check(llm, "").unwrap_err().contains("no [update_model]"));
    assert!(check(rule, model).unwrap_err().contains("no system has update"));
    assert!(check(&llm.replace("\"llm\"", "\"always\""), model).unwrap_err().contains("unknown variant"));
    for (text, kind) in [
        (llm, UpdateKind::Llm),
        (rule, UpdateKind::Rule),
        ("[[systems]]\nkind = \"engine\"\nname = \"e\"\nrecords = \"rule\"", UpdateKind::None),
    ] {
        let parsed: SystemSpec = toml::from_str(&text.replace("[[systems]]\n", "")).unwrap();
        assert_eq!(parsed.update(), kind);
        assert_eq!(parsed.uses_dense(), kind != UpdateKind::None, "{kind:?}");
    }
}

/// `[qa] budget` is one token count or a list of distinct positive ones.
#[test]
fn a_qa_budget_is_a_count_or_a_list_of_distinct_counts() {
    let dir = tempfile::tempdir().unwrap();
    let check = |budget: &str| {
        let path = dir.path().join("r.toml");
        let text = format!(
            "name = \"r\"\n[dataset]\nkind = \"locomo\"\npath = \"x.json\"\n[[systems]]\nkind = \"bm25_turns\"\nname = \"t\"\n[qa]\n{budget}\nanswer = {{ kind = \"local\", model = \"m\" }}\n"
        );
        std::fs::write(&path, text).unwrap();
        EvalRecipe::from_file(&path).map(|r| r.qa.unwrap().budget.as_slice().to_vec()).map_err(|e| e.to_string())
    };
    assert_eq!(check(""), Ok(vec![1000]));
    assert_eq!(check("budget = 500"), Ok(vec![500]));
    assert_eq!(check("budget = [1000, 500]"), Ok(vec![1000, 500]));
    assert!(check("budget = [500, 500]").unwrap_err().contains("500 twice"));
    assert!(check("budget = []").unwrap_err().contains("budget"));
    assert!(check("budget = 0").unwrap_err().contains("budget"));
}

/// `records` is one source or a non-empty list of them; anything else names what it expects.
#[test]
fn records_are_one_source_or_a_list() {
    use memkit_eval::recipe::{Reading, RecordSource};
    let parse = |records: &str| {
        toml::from_str::<SystemSpec>(&format!("kind = \"engine\"\nname = \"e\"\nrecords = {records}"))
            .map(|s| s.record_sources().to_vec())
            .map_err(|e| e.to_string())
    };
    assert_eq!(parse("\"rule\""), Ok(vec![RecordSource::Rule]));
    assert_eq!(parse("[\"rule\", { file = \"x.jsonl\" }]"), Ok(vec![RecordSource::Rule, RecordSource::File("x.jsonl".into())]));
    assert!(parse("[]").unwrap_err().contains("the list is empty"));
    assert!(parse("\"rules\"").unwrap_err().contains("expected \"raw_turns\""));
    let hinge: SystemSpec = toml::from_str("kind = \"hinge\"\nname = \"h\"").unwrap();
    assert_eq!(hinge.record_sources(), [RecordSource::RawTurns]);
    let read = |text: &str| match toml::from_str::<SystemSpec>(&format!("kind = \"engine\"\nname = \"e\"\nrecords = \"rule\"\n{text}")) {
        Ok(SystemSpec::Engine { read, .. }) => Ok(read),
        Ok(_) => unreachable!(),
        Err(e) => Err(e.to_string()),
    };
    assert_eq!(read(""), Ok(Reading::Record));
    assert_eq!(read("read = \"source\""), Ok(Reading::Source));
    assert_eq!(read("read = \"sentence\""), Ok(Reading::Sentence));
    assert!(read("read = \"turns\"").unwrap_err().contains("unknown variant"));
}

/// The rows that report memkit's retrieval run exactly what `memkit query` runs
/// (`TriPathConfig::recommended`), so the figure a user reads is the configuration they get.
#[test]
fn the_keys_reports_measure_the_retrieval_memkit_query_runs() {
    use memkit_engine::fusion::TriPathConfig;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../recipes/eval");
    for file in ["locomo-keys-dev.toml", "locomo-keys.toml", "longmemeval-s-e2e.toml"] {
        let recipe = EvalRecipe::from_file(&dir.join(file)).unwrap();
        let mut engines = 0;
        for system in &recipe.systems {
            if let SystemSpec::Engine { retrieval, name, .. } = system {
                assert_eq!(*retrieval, TriPathConfig::recommended(true), "{file}: {name}");
                engines += 1;
            }
        }
        assert!(engines >= 6, "{file}: {engines} engine rows");
    }
    // The held-out choice: its rows for memkit's retrieval, with and without the embedder.
    let heldout = EvalRecipe::from_file(&dir.join("longmemeval-oracle-heldout-routes.toml")).unwrap();
    let retrieval_of = |name: &str| match heldout.systems.iter().find(|s| s.name() == name) {
        Some(SystemSpec::Engine { retrieval, .. }) => retrieval.clone(),
        other => panic!("no engine row {name:?}: {other:?}"),
    };
    assert_eq!(retrieval_of("sentences: BM25 + dense, weighted (memkit's retrieval)"), TriPathConfig::recommended(true));
    assert_eq!(retrieval_of("sentences: BM25"), TriPathConfig::recommended(false));
}

/// `baseline` must name a system of the recipe.
#[test]
fn the_baseline_is_a_system_of_the_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let check = |baseline: &str| {
        let path = dir.path().join("r.toml");
        let text = format!(
            "name = \"r\"\n{baseline}\n[dataset]\nkind = \"locomo\"\npath = \"x.json\"\n[[systems]]\nkind = \"bm25_turns\"\nname = \"t\"\n"
        );
        std::fs::write(&path, text).unwrap();
        EvalRecipe::from_file(&path).map(|r| r.baseline).map_err(|e| e.to_string())
    };
    assert_eq!(check(""), Ok(None));
    assert_eq!(check("baseline = \"t\""), Ok(Some("t".into())));
    assert!(check("baseline = \"u\"").unwrap_err().contains("baseline names \"u\""));
}
