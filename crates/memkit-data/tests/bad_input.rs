//! Bad input gives errors that name the file and the JSON path (and line, for JSONL).

mod common;

use memkit_data::{Error, load_jsonl, load_locomo, load_longmemeval, load_memorybank};

fn message(result: Result<impl std::fmt::Debug, Error>) -> String {
    result.expect_err("bad input must fail").to_string()
}

#[test]
fn truncated_json_names_file_and_position() {
    let err = load_locomo(&common::fixture("locomo_truncated.json")).unwrap_err();
    let Error::Json { path, line, .. } = &err else { panic!("{err:?}") };
    assert!(path.ends_with("locomo_truncated.json"));
    assert!(*line > 1);
    let text = err.to_string();
    assert!(text.contains("locomo_truncated.json:") && text.contains("EOF while parsing"), "{text}");
}

#[test]
fn locomo_wrong_type_names_the_json_path() {
    let text = message(load_locomo(&common::fixture("locomo_wrong_type.json")));
    assert!(text.ends_with("locomo_wrong_type.json: [0].conversation.session_2[1].text: expected a string, found a number"), "{text}");
}

#[test]
fn locomo_bad_date_names_key_and_value() {
    let text = message(load_locomo(&common::fixture("locomo_bad_date.json")));
    assert!(text.contains("locomo_bad_date.json: [0].conversation.session_1_date_time: cannot read date \"May 8th 2023\""), "{text}");
}

#[test]
fn longmemeval_wrong_type_and_missing_key() {
    let text = message(load_longmemeval(&common::fixture("longmemeval_wrong_type.json")));
    assert!(
        text.ends_with("longmemeval_wrong_type.json: [1].haystack_sessions[0][0].has_answer: expected a boolean, found a string"),
        "{text}"
    );
    let text = message(load_longmemeval(&common::fixture("longmemeval_missing_key.json")));
    assert!(text.ends_with("longmemeval_missing_key.json: [0]: missing key `answer_session_ids`"), "{text}");
}

#[test]
fn wrong_top_level_shape_is_reported() {
    // A LoCoMo file handed to the MemoryBank loader, and the reverse.
    let text = message(load_memorybank(&common::fixture("locomo_small.json")));
    assert!(text.ends_with("locomo_small.json: (root): expected an object, found an array"), "{text}");
    let text = message(load_longmemeval(&common::fixture("locomo_small.json")));
    assert!(text.contains("locomo_small.json: [0]: missing key `question_id`"), "{text}");
}

#[test]
fn missing_file_names_the_path() {
    let text = message(load_locomo(&common::fixture("no_such_file.json")));
    assert!(text.contains("no_such_file.json: cannot read"), "{text}");
}

#[test]
fn jsonl_errors_name_the_line() {
    let text = message(load_jsonl(&common::fixture("dialogues_bad_key.jsonl")));
    assert!(text.contains("dialogues_bad_key.jsonl:3: sessions[0].turns[0]: unknown key `emotion`"), "{text}");
    let text = message(load_jsonl(&common::fixture("dialogues_wrong_type.jsonl")));
    assert!(text.ends_with("dialogues_wrong_type.jsonl:1: sessions[0].turns[0].text: expected a string, found an array"), "{text}");
    let err = load_jsonl(&common::fixture("dialogues_truncated.jsonl")).unwrap_err();
    assert!(matches!(err, Error::Json { line: 2, .. }), "{err}");
    assert!(err.to_string().contains("dialogues_truncated.jsonl:2:"), "{err}");
}
