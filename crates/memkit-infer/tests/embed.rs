//! The sentence embedder: golden vectors of the real all-MiniLM-L6-v2, and batching, padding
//! and truncation on a tiny randomly initialised BERT that the tests build themselves.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::bert::{BertModel, Config};
use memkit_infer::{SentenceEmbedder, models};
use serde::Deserialize;

// ---------------------------------------------------------------------------------------------
// Real model, against tests/fixtures/minilm_golden.json (see tests/fixtures/README.md).

#[derive(Deserialize)]
struct Golden {
    model_safetensors_sha256: String,
    max_seq_length: usize,
    dim: usize,
    sentences: Vec<GoldenSentence>,
    cosines: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct GoldenSentence {
    text: String,
    first16: Vec<f32>,
    projections: Projections,
}

#[derive(Deserialize)]
struct Projections {
    sin: f32,
    cos: f32,
}

fn golden() -> Golden {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm_golden.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The installed embedder, or `None` (test skipped); see [`models::installed_for_tests`].
fn real_model_dir() -> Option<PathBuf> {
    models::installed_for_tests(models::ALL_MINILM_L6_V2.name)
}

/// How far two embeddings of the same ids may differ when padded or batched differently. Padding
/// is masked out entirely, so only f32 rounding may differ: the matmul kernels block and sum in an
/// order that depends on the batch's shape and on the CPU (a CI machine differed by more than 1e-6
/// at batch size 32 in `batching_does_not_change_vectors`; this one by 4.9e-7). Padding left
/// unmasked moves a vector by 0.42 there ("dog", batch size 2), so this still catches a leak.
const ROUNDING: f32 = 1e-5;

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
fn minilm_matches_numpy_reference() {
    let Some(dir) = real_model_dir() else { return };
    let golden = golden();
    let embedder = SentenceEmbedder::load(&dir).unwrap();
    assert_eq!(embedder.model_id(), "sentence-transformers/all-MiniLM-L6-v2");
    assert_eq!(embedder.dim(), golden.dim);
    assert_eq!(embedder.max_seq_length(), golden.max_seq_length);

    // One call with mixed lengths, so padding inside a batch is exercised too.
    let texts: Vec<&str> = golden.sentences.iter().map(|s| s.text.as_str()).collect();
    let vectors = embedder.embed(&texts).unwrap();
    assert_eq!(vectors.len(), texts.len());

    for (vector, expected) in vectors.iter().zip(&golden.sentences) {
        let label = &expected.text[..expected.text.len().min(40)];
        assert_eq!(vector.len(), golden.dim);
        let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{label}: norm {norm}");

        let head = &vector[..16];
        let diff = max_abs_diff(head, &expected.first16);
        assert!(diff < 1e-4, "{label}: first 16 dims differ by {diff}");
        let cos = cosine(head, &expected.first16);
        assert!(cos > 0.9999, "{label}: cosine {cos} to the reference");

        // Whole-vector checks: fixed projections on sin(i) and cos(i), i = 1..=dim.
        let project = |f: fn(f32) -> f32| -> f32 { vector.iter().enumerate().map(|(i, x)| x * f((i + 1) as f32)).sum() };
        let sin = project(f32::sin);
        let cos = project(f32::cos);
        assert!((sin - expected.projections.sin).abs() < 1e-4, "{label}: {sin}");
        assert!((cos - expected.projections.cos).abs() < 1e-4, "{label}: {cos}");
    }

    for (i, row) in golden.cosines.iter().enumerate() {
        for (j, &expected) in row.iter().enumerate() {
            let actual = cosine(&vectors[i], &vectors[j]);
            assert!((actual - expected).abs() < 1e-4, "cosine({i}, {j}) = {actual}, reference {expected}");
        }
    }
}

#[test]
fn minilm_batch_size_does_not_change_vectors() {
    let Some(dir) = real_model_dir() else { return };
    let golden = golden();
    let texts: Vec<&str> = golden.sentences.iter().map(|s| s.text.as_str()).collect();
    let one = SentenceEmbedder::load(&dir).unwrap().with_batch_size(1);
    let three = SentenceEmbedder::load(&dir).unwrap().with_batch_size(3);
    for (a, b) in one.embed(&texts).unwrap().iter().zip(three.embed(&texts).unwrap()) {
        assert!(max_abs_diff(a, &b) < ROUNDING);
    }
}

#[test]
fn installed_minilm_weights_have_the_recorded_hash() {
    // The fixture was computed from exactly the weights the registry pins.
    let entry = models::ALL_MINILM_L6_V2.files.iter().find(|f| f.path == "model.safetensors").unwrap();
    assert_eq!(entry.sha256, golden().model_safetensors_sha256);
}

// ---------------------------------------------------------------------------------------------
// Tiny random BERT: behaviour that does not need the real weights.

const WORDS: [&str; 12] = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far", "away", "today", "a", "park"];

/// Writes config.json, model.safetensors (random init) and a word-level tokenizer.json for a
/// 2-layer BERT with hidden size 8 into a temporary directory.
fn tiny_bert(max_seq_length: Option<usize>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({
        "vocab_size": WORDS.len() + 4,
        "hidden_size": 8,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 16,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "max_position_embeddings": 32,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0
    });
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let config: Config = serde_json::from_value(config).unwrap();

    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    BertModel::load(vb, &config).unwrap();
    varmap.save(dir.path().join("model.safetensors")).unwrap();

    let mut vocab = serde_json::Map::new();
    for (id, token) in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"].iter().chain(WORDS.iter()).enumerate() {
        vocab.insert((*token).to_owned(), id.into());
    }
    let special = |id: u32, content: &str| {
        serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                           "rstrip": false, "normalized": false, "special": true})
    };
    let tokenizer = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        // Fixed padding like MiniLM's hub tokenizer.json; the embedder must ignore it.
        "padding": {"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": null,
                    "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
        "added_tokens": [special(0, "[PAD]"), special(1, "[UNK]"), special(2, "[CLS]"),
                         special(3, "[SEP]")],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}
            }
        },
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer.to_string()).unwrap();

    if let Some(limit) = max_seq_length {
        let sbert = serde_json::json!({"max_seq_length": limit, "do_lower_case": false});
        std::fs::write(dir.path().join("sentence_bert_config.json"), sbert.to_string()).unwrap();
    }
    dir
}

#[test]
fn vectors_are_normalised_and_in_input_order() {
    let dir = tiny_bert(None);
    let embedder = SentenceEmbedder::load(dir.path()).unwrap();
    assert_eq!(embedder.dim(), 8);
    // Without sentence_bert_config.json or tokenizer truncation: the position limit.
    assert_eq!(embedder.max_seq_length(), 32);

    let texts = ["the cat sat on the mat today", "a dog", "the dog ran far away", "cat"];
    let together = embedder.embed(&texts).unwrap();
    assert_eq!(together.len(), texts.len());
    for (text, vector) in texts.iter().zip(&together) {
        let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{text}: norm {norm}");
        // Embedded alone (no padding at all) it must be the same vector.
        let alone = embedder.embed(&[text]).unwrap().remove(0);
        assert!(max_abs_diff(vector, &alone) < ROUNDING, "{text}");
    }
    assert!(max_abs_diff(&together[0], &together[1]) > 1e-3);
    assert!(embedder.embed(&[]).unwrap().is_empty());
}

#[test]
fn batching_does_not_change_vectors() {
    let dir = tiny_bert(None);
    let texts = ["the cat sat", "a park", "the dog ran far away today", "mat", "on the mat", "dog", "a cat ran", ""];
    let reference = SentenceEmbedder::load(dir.path()).unwrap().with_batch_size(1);
    let reference = reference.embed(&texts).unwrap();
    for batch_size in [2, 3, 32] {
        let embedder = SentenceEmbedder::load(dir.path()).unwrap().with_batch_size(batch_size);
        assert_eq!(embedder.batch_size(), batch_size);
        for ((a, b), text) in embedder.embed(&texts).unwrap().iter().zip(&reference).zip(texts) {
            let diff = max_abs_diff(a, b);
            assert!(diff < ROUNDING, "batch size {batch_size}, {text:?}: differs by {diff}");
        }
    }
}

#[test]
fn truncates_at_sentence_bert_max_seq_length() {
    let dir = tiny_bert(Some(6));
    let embedder = SentenceEmbedder::load(dir.path()).unwrap();
    assert_eq!(embedder.max_seq_length(), 6);
    // [CLS] + 4 words + [SEP] fit; the rest is cut.
    let vectors = embedder.embed(&["the cat sat on", "the cat sat on the mat today", "the cat sat"]).unwrap();
    assert!(max_abs_diff(&vectors[0], &vectors[1]) < ROUNDING);
    assert!(max_abs_diff(&vectors[0], &vectors[2]) > 1e-3);
}

#[test]
fn model_id_can_be_renamed() {
    let dir = tiny_bert(None);
    let embedder = SentenceEmbedder::load(dir.path()).unwrap().with_model_id("tiny/bert");
    assert_eq!(embedder.model_id(), "tiny/bert");
}

#[test]
fn missing_weights_error_names_the_file() {
    let dir = tiny_bert(None);
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let err = SentenceEmbedder::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("model.safetensors"), "{err}");
}
