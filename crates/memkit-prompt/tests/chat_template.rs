//! Chat templates against Python jinja2 (golden files), and assistant spans for training.
//!
//! The fixtures in `tests/fixtures/chat_templates/` are the real chat templates of Qwen2.5-Instruct
//! and SmolLM2-135M-Instruct (read from the GGUF metadata of the packaged models), a probe of the
//! Jinja features HF templates use, the conversations in `cases.json`, and what Python jinja2
//! renders from them set up as transformers does (`generate.py`; see the README there).

use std::path::{Path, PathBuf};

use memkit_prompt::{ChatMessage, ChatTemplate, render_for_training};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat_templates")
}

/// bos/eos per template, as in `generate.py`.
fn tokens(stem: &str) -> (Option<&'static str>, Option<&'static str>) {
    match stem {
        "qwen2.5-instruct" => (None, Some("<|im_end|>")),
        "smollm2-instruct" => (Some("<|im_start|>"), Some("<|im_end|>")),
        "hf-features" => (Some("<s>"), Some("</s>")),
        other => panic!("no tokens for fixture template {other}; add it here and in generate.py"),
    }
}

fn template(stem: &str) -> ChatTemplate {
    let source = std::fs::read_to_string(fixtures().join(format!("{stem}.jinja"))).unwrap();
    let (bos, eos) = tokens(stem);
    ChatTemplate::new(source, bos, eos).unwrap()
}

fn first_difference(a: &str, b: &str) -> String {
    let at = a.bytes().zip(b.bytes()).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    let from = at.saturating_sub(40);
    let snippet = |s: &str| String::from_utf8_lossy(&s.as_bytes()[from.min(s.len())..(at + 40).min(s.len())]).into_owned();
    format!("first difference at byte {at}:\n  rust:   {:?}\n  python: {:?}", snippet(a), snippet(b))
}

#[test]
fn renders_are_byte_identical_to_python_jinja2() {
    let cases: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(fixtures().join("cases.json")).unwrap()).unwrap();
    let mut templates: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension()? == "jinja").then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    templates.sort();
    assert_eq!(templates, ["hf-features", "qwen2.5-instruct", "smollm2-instruct"]);
    let mut checked = 0;
    for stem in &templates {
        let t = template(stem);
        for case in &cases {
            let name = case["name"].as_str().unwrap();
            let expected = std::fs::read_to_string(fixtures().join("expected").join(stem).join(format!("{name}.txt"))).unwrap();
            let tools = case.get("tools").filter(|t| !t.is_null());
            let got = t
                .render_with_tools(&case["messages"], tools, case["add_generation_prompt"].as_bool().unwrap())
                .unwrap_or_else(|e| panic!("{stem}/{name}: {e:#}"));
            assert!(got == expected, "{stem}/{name}: {}", first_difference(&got, &expected));
            checked += 1;
        }
    }
    assert_eq!(checked, 3 * cases.len());
}

#[test]
fn typed_messages_render_like_their_json() {
    let t = template("qwen2.5-instruct");
    let messages = [ChatMessage::system("Be brief."), ChatMessage::user("Hi, who are you?")];
    let as_json = serde_json::to_value(messages.clone()).unwrap();
    assert_eq!(t.render(&messages, true).unwrap(), t.render_with_tools(&as_json, None::<&()>, true).unwrap());
}

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("Extract memories."),
        ChatMessage::user("1.Ann: I adopted a dog."),
        ChatMessage::assistant("{\"memories\":[]}"),
        ChatMessage::user("1.Bo: Grüße aus Köln 🌍"),
        ChatMessage::assistant("Bo greets from Köln."),
    ]
}

#[test]
fn training_spans_cover_each_reply_and_its_end_marker_on_qwen() {
    let (text, spans) = render_for_training(&template("qwen2.5-instruct"), &conversation()).unwrap();
    let covered: Vec<&str> = spans.iter().map(|r| &text[r.clone()]).collect();
    assert_eq!(covered, ["{\"memories\":[]}<|im_end|>", "Bo greets from Köln.<|im_end|>"]);
    // The text before each span ends with the generation prompt.
    for span in &spans {
        assert!(text[..span.start].ends_with("<|im_start|>assistant\n"));
    }
    assert!(text.ends_with("Bo greets from Köln.<|im_end|>\n"));
}

#[test]
fn training_spans_on_smollm2_without_a_system_message() {
    let messages = &conversation()[1..];
    let (text, spans) = render_for_training(&template("smollm2-instruct"), messages).unwrap();
    assert!(text.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"));
    let covered: Vec<&str> = spans.iter().map(|r| &text[r.clone()]).collect();
    assert_eq!(covered, ["{\"memories\":[]}<|im_end|>", "Bo greets from Köln.<|im_end|>"]);
}

#[test]
fn an_empty_reply_still_trains_the_end_marker() {
    let messages = [ChatMessage::user("Hi"), ChatMessage::assistant("")];
    let (text, spans) = render_for_training(&template("qwen2.5-instruct"), &messages).unwrap();
    assert_eq!(spans.len(), 1);
    assert_eq!(&text[spans[0].clone()], "<|im_end|>");
}

#[test]
fn tokenizer_config_gives_template_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer_config.json");
    let source = std::fs::read_to_string(fixtures().join("smollm2-instruct.jinja")).unwrap();
    let config = serde_json::json!({
        "bos_token": {"content": "<|im_start|>", "lstrip": false},
        "eos_token": "<|im_end|>",
        "chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": source}],
    });
    std::fs::write(&path, config.to_string()).unwrap();
    let t = ChatTemplate::from_tokenizer_config(&path).unwrap();
    assert_eq!((t.bos_token(), t.eos_token(), t.source()), (Some("<|im_start|>"), Some("<|im_end|>"), source.as_str()));

    std::fs::write(&path, r#"{"eos_token": "</s>"}"#).unwrap();
    let err = ChatTemplate::from_tokenizer_config(&path).unwrap_err().to_string();
    assert!(err.contains("tokenizer_config.json") && err.contains("chat_template"), "{err}");
}
