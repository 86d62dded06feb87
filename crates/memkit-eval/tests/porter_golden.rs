//! NLTK Porter stems of the LoCoMo QA vocabulary plus tricky forms (fixture: see
//! tests/fixtures/README.md).

mod common;

use memkit_eval::porter::stem;

#[test]
fn stems_match_nltk() {
    let path = common::fixture("porter_golden.tsv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut mismatches = Vec::new();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let (word, expected) = line.split_once('\t').unwrap_or_else(|| panic!("{}:{}: no tab", path.display(), i + 1));
        n += 1;
        let got = stem(word);
        if got != expected {
            mismatches.push(format!("{word:?}: nltk {expected:?}, ours {got:?}"));
        }
    }
    assert!(n >= 2000, "only {n} words in the fixture");
    assert!(mismatches.is_empty(), "{} of {n} differ:\n{}", mismatches.len(), mismatches.join("\n"));
}
