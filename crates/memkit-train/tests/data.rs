//! Tokenising distilled examples: the loss mask covers exactly the assistant reply and its
//! end-of-turn marker, and truncation is counted.

mod common;

use memkit_train::data::{ChatTokenizer, read_examples};
use tokenizers::Tokenizer;

#[test]
fn mask_covers_the_reply_and_end_of_turn_only() {
    let tokenizer = ChatTokenizer::from_dir(&common::fixtures()).unwrap();
    let examples = read_examples(&common::fixtures().join("train.jsonl")).unwrap();
    assert_eq!(examples.len(), 24);
    let raw = Tokenizer::from_file(common::fixtures().join("tokenizer.json")).unwrap();
    for example in &examples {
        let tokenized = tokenizer.tokenize(&example.messages).unwrap();
        let target: Vec<u32> = tokenized.ids.iter().zip(&tokenized.target).filter(|(_, t)| **t).map(|(id, _)| *id).collect();
        let reply = &example.messages[2].content;
        assert_eq!(raw.decode(&target, false).unwrap(), format!("{reply}<|im_end|>"), "{}", example.window_id);
        // The targets are one contiguous run at the end, before the trailing newline.
        let first = tokenized.target.iter().position(|t| *t).unwrap();
        let last = tokenized.target.iter().rposition(|t| *t).unwrap();
        assert!(tokenized.target[first..=last].iter().all(|t| *t));
        assert_eq!(raw.decode(&tokenized.ids[last + 1..], false).unwrap(), "\n");
    }
}

#[test]
fn truncation_and_dropping_are_counted() {
    let tokenizer = ChatTokenizer::from_dir(&common::fixtures()).unwrap();
    let examples = read_examples(&common::fixtures().join("valid.jsonl")).unwrap();
    let full = tokenizer.tokenize(&examples[0].messages).unwrap();
    let prompt_len = full.target.iter().position(|t| *t).unwrap();

    let (kept, stats) = tokenizer.tokenize_all(&examples, 10_000).unwrap();
    assert_eq!((stats.examples, stats.truncated, stats.dropped), (6, 0, 0));
    assert_eq!(kept[0], full);
    // The length summary, by nearest rank over the six lengths sorted: the 3rd (ceil(0.5 × 6))
    // and the 6th (ceil(0.9 × 6)).
    let mut lengths: Vec<usize> = kept.iter().map(|k| k.ids.len()).collect();
    lengths.sort_unstable();
    assert_eq!((stats.length_p50, stats.length_p90, stats.length_max), (lengths[2], lengths[5], lengths[5]));
    // Cut inside the reply: kept, truncated. Cut inside the prompt: dropped.
    let (kept, stats) = tokenizer.tokenize_all(&examples[..1], prompt_len + 3).unwrap();
    assert_eq!((stats.examples, stats.truncated, stats.dropped, stats.target_tokens), (1, 1, 0, 3));
    assert_eq!(kept[0].ids.len(), prompt_len + 3);
    let (_, stats) = tokenizer.tokenize_all(&examples[..1], prompt_len).unwrap();
    assert_eq!((stats.examples, stats.dropped), (0, 1));
}
