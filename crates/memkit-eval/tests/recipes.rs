//! Every committed eval recipe parses and passes its checks: a misspelt key or a system that
//! cannot run on its dataset fails here, not minutes into `just eval`.

use std::path::PathBuf;

use memkit_eval::recipe::{EvalRecipe, SystemSpec};

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
