//! Distilled chat examples → token ids with an assistant-only loss mask, and batches: one
//! example per row, rows of similar length together, or several examples packed into each row.
//!
//! Each line of `train.jsonl` / `valid.jsonl` is `{"window_id": "...", "messages": [...]}`.
//! The messages are rendered with the model's chat template by memkit-prompt's
//! [`render_for_training`], which also returns the byte spans of the assistant turns; the text
//! is tokenised with `tokenizer.json`, and a token is trained on when its byte offsets overlap
//! an assistant span. No string search on ids, so the mask matches the template exactly.

use std::fs;
use std::io::{BufRead, BufReader};
use std::ops::Range;
use std::path::{Path, PathBuf};

use burn::tensor::{Device, Int, Tensor, TensorData};
use memkit_prompt::{ChatMessage, ChatTemplate, render_for_training};
use serde::Deserialize;
use tokenizers::Tokenizer;

use crate::model::Packing;
use crate::rng::SplitMix64;
use crate::{Error, Result};

/// One line of a distilled JSONL file.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatExample {
    /// Which dialogue window the example was distilled from.
    pub window_id: String,
    /// System, user and assistant turns; the assistant turns are trained on.
    pub messages: Vec<ChatMessage>,
}

/// Reads a JSONL file of [`ChatExample`]s (blank lines are skipped).
pub fn read_examples(path: &Path) -> Result<Vec<ChatExample>> {
    let file = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut examples = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let example =
            serde_json::from_str(&line).map_err(|source| Error::Json { path: path.to_path_buf(), line: Some(index + 1), source })?;
        examples.push(example);
    }
    Ok(examples)
}

/// Token ids of one example and which of them the loss is computed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizedExample {
    /// Token ids of the rendered conversation.
    pub ids: Vec<u32>,
    /// `true` for tokens of an assistant turn (reply and end-of-turn marker).
    pub target: Vec<bool>,
}

impl TokenizedExample {
    /// Tokens the loss is taken on: the assistant tokens after the first position (the first
    /// token is never predicted, so it cannot be a target).
    pub fn loss_targets(&self) -> usize {
        self.target.iter().skip(1).filter(|t| **t).count()
    }
}

/// The mean loss tokens of an optimiser step over an epoch of `batches` micro-batches,
/// `grad_accum` to a step: what `memkit train` divides each step's summed loss by, so that every
/// target token weighs the same in every step, however the step's batches were cut.
pub fn targets_per_step(examples: &[TokenizedExample], batches: usize, grad_accum: usize) -> f64 {
    let targets: usize = examples.iter().map(TokenizedExample::loss_targets).sum();
    (targets as f64 * grad_accum as f64 / batches.max(1) as f64).max(1.0)
}

/// What tokenising a file did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DataStats {
    /// Examples kept.
    pub examples: usize,
    /// Examples cut to `max_seq_len` (they keep the assistant tokens that fit).
    pub truncated: usize,
    /// Examples dropped because no assistant token fits in `max_seq_len`.
    pub dropped: usize,
    /// Tokens of the kept examples.
    pub tokens: usize,
    /// Assistant (loss) tokens of the kept examples.
    pub target_tokens: usize,
    /// Length of the kept examples in tokens: median, 90th percentile (nearest rank) and
    /// longest. A long prompt shows here, against `target_tokens` (prompt distillation cuts it).
    pub length_p50: usize,
    /// See [`DataStats::length_p50`].
    pub length_p90: usize,
    /// See [`DataStats::length_p50`].
    pub length_max: usize,
}

/// A tokenizer and the chat template that renders examples for it.
pub struct ChatTokenizer {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    path: PathBuf,
}

impl ChatTokenizer {
    /// Loads `tokenizer.json` and the chat template of `tokenizer_config.json` from `dir`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let tokenizer = Tokenizer::from_file(&path).map_err(|e| Error::Tokenizer { path: path.clone(), reason: e.to_string() })?;
        let template = ChatTemplate::from_tokenizer_config(&dir.join("tokenizer_config.json"))?;
        Ok(ChatTokenizer { tokenizer, template, path })
    }

    /// Renders and tokenises one conversation. Special tokens come from the template text,
    /// so none are added (as transformers' `apply_chat_template(tokenize=True)` does).
    pub fn tokenize(&self, messages: &[ChatMessage]) -> Result<TokenizedExample> {
        let (text, spans) = render_for_training(&self.template, messages)?;
        let encoding =
            self.tokenizer.encode(text.as_str(), false).map_err(|e| Error::Tokenizer { path: self.path.clone(), reason: e.to_string() })?;
        let target = encoding.get_offsets().iter().map(|&(start, end)| overlaps(start..end, &spans)).collect();
        Ok(TokenizedExample { ids: encoding.get_ids().to_vec(), target })
    }

    /// Tokenises every example, cutting each to `max_seq_len` tokens; examples left without an
    /// assistant token are dropped.
    pub fn tokenize_all(&self, examples: &[ChatExample], max_seq_len: usize) -> Result<(Vec<TokenizedExample>, DataStats)> {
        let mut stats = DataStats::default();
        let mut out = Vec::with_capacity(examples.len());
        for example in examples {
            let mut tokenized = self.tokenize(&example.messages)?;
            if tokenized.ids.len() > max_seq_len {
                tokenized.ids.truncate(max_seq_len);
                tokenized.target.truncate(max_seq_len);
                stats.truncated += 1;
            }
            let targets = tokenized.loss_targets();
            if targets == 0 {
                stats.dropped += 1;
                continue;
            }
            stats.examples += 1;
            stats.tokens += tokenized.ids.len();
            stats.target_tokens += targets;
            out.push(tokenized);
        }
        let mut lengths: Vec<usize> = out.iter().map(|e| e.ids.len()).collect();
        lengths.sort_unstable();
        let rank = |q: f64| lengths.get(((q * lengths.len() as f64).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0);
        (stats.length_p50, stats.length_p90, stats.length_max) = (rank(0.5), rank(0.9), lengths.last().copied().unwrap_or(0));
        Ok((out, stats))
    }
}

fn overlaps(token: Range<usize>, spans: &[Range<usize>]) -> bool {
    spans.iter().any(|span| token.start < span.end && token.end > span.start)
}

/// A micro-batch: its rows, each the indices (into the examples) of the examples it holds, one
/// per row or several when packed.
pub type Rows = Vec<Vec<usize>>;

/// Input positions of an example (its last token is only ever a target).
fn inputs(example: &TokenizedExample) -> usize {
    example.ids.len() - 1
}

/// The share of a batch grid's input positions that are right-padding: what
/// [`bucket_batches`] and [`pack_batches`] save against batches cut in file order (`train.log`'s
/// plan gives them).
pub fn padding_share(examples: &[TokenizedExample], batches: &[Rows]) -> f64 {
    let (mut padded, mut total) = (0usize, 0usize);
    for rows in batches {
        let fills: Vec<usize> = rows.iter().map(|row| row.iter().map(|&i| inputs(&examples[i])).sum()).collect();
        let grid = fills.len() * fills.iter().copied().max().unwrap_or(0);
        padded += grid - fills.iter().sum::<usize>();
        total += grid;
    }
    if total == 0 { 0.0 } else { padded as f64 / total as f64 }
}

/// Batches of `batch_size` in file order, one example per row: the baseline of [`padding_share`].
pub fn file_order_batches(examples: usize, batch_size: usize) -> Vec<Rows> {
    let order: Vec<usize> = (0..examples).collect();
    order.chunks(batch_size.max(1)).map(|batch| batch.iter().map(|&i| vec![i]).collect()).collect()
}

/// Groups examples of similar length into batches of `batch_size` rows of one example each
/// (sorted by length, then cut), so little compute goes to padding.
pub fn bucket_batches(examples: &[TokenizedExample], batch_size: usize) -> Vec<Rows> {
    let mut order: Vec<usize> = (0..examples.len()).collect();
    order.sort_by_key(|&i| (examples[i].ids.len(), i));
    order.chunks(batch_size.max(1)).map(|batch| batch.iter().map(|&i| vec![i]).collect()).collect()
}

/// Packs examples into rows of at most `row_len` input positions (best fit, longest first: each
/// example goes to the fullest row it fits in), then batches `batch_size` rows of similar fill.
/// Every example lands in exactly one row; one longer than `row_len` gets a row of its own.
pub fn pack_batches(examples: &[TokenizedExample], row_len: usize, batch_size: usize) -> Vec<Rows> {
    let mut order: Vec<usize> = (0..examples.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(inputs(&examples[i])), i));
    let mut rows: Vec<(usize, Vec<usize>)> = Vec::new(); // (fill, examples)
    // Rows by room left: the smallest room that takes an example is its best fit.
    let mut by_room: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
    for i in order {
        let len = inputs(&examples[i]);
        let fit = by_room.range(len..).next().map(|(&room, _)| room);
        let row = match fit {
            Some(room) => {
                let rows_here = by_room.get_mut(&room).expect("the room just found");
                let row = rows_here.pop().expect("a row with that room");
                if rows_here.is_empty() {
                    by_room.remove(&room);
                }
                row
            }
            None => {
                rows.push((0, Vec::new()));
                rows.len() - 1
            }
        };
        rows[row].0 += len;
        rows[row].1.push(i);
        if let Some(room) = row_len.checked_sub(rows[row].0).filter(|&room| room > 0) {
            by_room.entry(room).or_default().push(row);
        }
    }
    rows.sort_by_key(|(fill, members)| (std::cmp::Reverse(*fill), members[0]));
    rows.chunks(batch_size.max(1)).map(|batch| batch.iter().map(|(_, members)| members.clone()).collect()).collect()
}

/// The order batches are visited in during `epoch`: a shuffle seeded by `(seed, epoch)`, so a
/// resumed run visits the same batches as an uninterrupted one.
pub fn epoch_order(batches: usize, seed: u64, epoch: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..batches).collect();
    SplitMix64::new(seed ^ (epoch as u64).wrapping_mul(0xA24B_AED4_963E_E407)).shuffle(&mut order);
    order
}

/// A batch on the device: inputs, and the positions whose next token the loss reads (the
/// assistant tokens) with those tokens. Padding and prompt positions have no target, so the
/// vocabulary projection never runs on them.
pub struct Batch {
    /// `[batch, seq_len]` token ids (right-padded).
    pub inputs: Tensor<2, Int>,
    /// Where each example sits when a row holds several (`None`: one example per row).
    pub packing: Option<Packing>,
    /// `[targets]` flat indices (`row * seq_len + t`) of the positions whose next token is an
    /// assistant token.
    pub positions: Tensor<1, Int>,
    /// `[targets]` the token after each of those positions.
    pub targets: Tensor<1, Int>,
    /// Number of targets.
    pub target_tokens: usize,
    /// Non-padding input tokens.
    pub tokens: usize,
    /// Padding input tokens (right-padding up to the longest example).
    pub padding: usize,
}

impl Batch {
    /// Shifts, right-pads and uploads `rows`, each the examples it holds (packed one after the
    /// other when several; the padding after them is a segment of its own).
    pub fn new(rows: &[Vec<&TokenizedExample>], device: &Device) -> Self {
        let len = rows.iter().map(|row| row.iter().map(|e| inputs(e)).sum::<usize>()).max().unwrap_or(0).max(1);
        let n = rows.len();
        let mut ids = vec![0i64; n * len];
        let mut packing = Packing { positions: vec![0; n * len], starts: vec![0; n * len] };
        let (mut positions, mut targets, mut tokens) = (Vec::new(), Vec::new(), 0);
        for (r, row) in rows.iter().enumerate() {
            let mut at = r * len;
            for example in row.iter().map(|e| Some(*e)).chain([None]) {
                // The examples, then the padding to the row's end.
                let span = example.map_or((r + 1) * len - at, inputs);
                for t in 0..span {
                    packing.positions[at + t] = t as u32;
                    packing.starts[at + t] = (at - r * len) as u32;
                }
                if let Some(example) = example {
                    for t in 0..span {
                        ids[at + t] = i64::from(example.ids[t]);
                        if example.target[t + 1] {
                            positions.push((at + t) as i64);
                            targets.push(i64::from(example.ids[t + 1]));
                        }
                    }
                    tokens += span;
                }
                at += span;
            }
        }
        let target_tokens = targets.len();
        Batch {
            inputs: Tensor::from_data(TensorData::new(ids, [n, len]), device),
            packing: rows.iter().any(|row| row.len() > 1).then_some(packing),
            positions: Tensor::from_data(TensorData::new(positions, [target_tokens]), device),
            targets: Tensor::from_data(TensorData::new(targets, [target_tokens]), device),
            target_tokens,
            tokens,
            padding: n * len - tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_half_open() {
        let spans = vec![5..10, 20..30];
        assert!(!overlaps(0..5, &spans));
        assert!(overlaps(4..6, &spans));
        assert!(overlaps(9..12, &spans));
        assert!(!overlaps(10..12, &spans));
        assert!(overlaps(29..31, &spans));
    }

    #[test]
    fn padding_share_counts_right_padding_by_hand() {
        let example = |len: usize| TokenizedExample { ids: vec![1; len + 1], target: vec![true; len + 1] };
        // Inputs of 2, 8, 2, 8 tokens. File order: [2, 8] and [2, 8] pad 6 + 6 of 32 positions;
        // by length: [2, 2] and [8, 8] pad nothing.
        let examples = vec![example(2), example(8), example(2), example(8)];
        let file = file_order_batches(examples.len(), 2);
        assert_eq!(file, vec![vec![vec![0], vec![1]], vec![vec![2], vec![3]]]);
        assert!((padding_share(&examples, &file) - 12.0 / 32.0).abs() < 1e-12);
        assert_eq!(padding_share(&examples, &bucket_batches(&examples, 2)), 0.0);
    }

    /// See: issue 42. Best fit, longest first, worked by hand for rows of 8 input positions.
    #[test]
    fn packing_puts_each_example_in_the_fullest_row_it_fits() {
        let example = |inputs: usize| TokenizedExample { ids: vec![1; inputs + 1], target: vec![true; inputs + 1] };
        // Inputs 6, 2, 5, 3, 4, 1. Longest first: 6 opens row A (room 2), 5 row B (room 3), 4 row
        // C (room 4); 3 fits B (room 3, the least room that takes it) and fills it; 2 fills A;
        // 1 goes to C (room 4 → 3). Rows by fill: A [0, 1] 8, B [2, 3] 8, C [4, 5] 5.
        let examples: Vec<_> = [6, 2, 5, 3, 4, 1].into_iter().map(example).collect();
        let batches = pack_batches(&examples, 8, 2);
        assert_eq!(batches, vec![vec![vec![0, 1], vec![2, 3]], vec![vec![4, 5]]]);
        assert_eq!(padding_share(&examples, &batches), 0.0);
        // One example per row, by length: [1, 2], [3, 4], [5, 6] pad 1 + 1 + 1 of 4 + 8 + 12.
        assert!((padding_share(&examples, &bucket_batches(&examples, 2)) - 3.0 / 24.0).abs() < 1e-12);
        // An example longer than a row gets a row of its own; every example is placed once.
        let examples: Vec<_> = [9, 3, 3].into_iter().map(example).collect();
        assert_eq!(pack_batches(&examples, 8, 4), vec![vec![vec![0], vec![1, 2]]]);
    }

    #[test]
    fn a_step_is_normalised_by_the_epochs_mean_targets_not_its_own() {
        let example =
            |targets: usize| TokenizedExample { ids: vec![1; 10], target: [vec![false; 10 - targets], vec![true; targets]].concat() };
        // Loss targets 3, 1 and 5, then 9 for an all-assistant example (its first position
        // predicts nothing). The first three in 4 micro-batches, 2 to a step: 9 targets in 2
        // steps, 4.5 a step.
        let examples = vec![example(3), example(1), example(5), example(10)];
        assert_eq!(examples.iter().map(TokenizedExample::loss_targets).collect::<Vec<_>>(), [3, 1, 5, 9]);
        assert!((targets_per_step(&examples[..3], 4, 2) - 4.5).abs() < 1e-12);
        assert!((targets_per_step(&examples, 2, 1) - 9.0).abs() < 1e-12);
        // Never below one token.
        assert_eq!(targets_per_step(&[], 0, 1), 1.0);
    }

    #[test]
    fn buckets_group_by_length_and_epochs_differ() {
        let example = |n: usize| TokenizedExample { ids: vec![1; n], target: vec![true; n] };
        let examples: Vec<_> = [9, 2, 7, 3, 8, 1].into_iter().map(example).collect();
        let batches = bucket_batches(&examples, 2);
        assert_eq!(batches, vec![vec![vec![5], vec![1]], vec![vec![3], vec![2]], vec![vec![4], vec![0]]]);
        let (a, b) = (epoch_order(50, 1, 0), epoch_order(50, 1, 1));
        assert_ne!(a, b);
        assert_eq!(a, epoch_order(50, 1, 0));
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    }
}
