//! The JSON Schema of the extractor output, used for constrained decoding and `response_format`.

use serde_json::{Value, json};

/// Caps that keep small models out of repetition loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractorSchemaOptions {
    /// `maxItems` of `memories`.
    pub max_memories: usize,
    /// `maxItems` of `keywords`.
    pub max_keywords: usize,
    /// `maxLength` of `content`.
    pub max_content_chars: usize,
}

impl Default for ExtractorSchemaOptions {
    fn default() -> Self {
        ExtractorSchemaOptions { max_memories: 12, max_keywords: 6, max_content_chars: 400 }
    }
}

/// The form of a record's `time` (SPEC §1): empty, a year, a month, a day, or a range of two of
/// those (`2023`, `2023-05`, `2023-05-20`, `2023-05-01/2023-05-07`). Decoding constrained by the
/// schema cannot write any other form.
pub const TIME_PATTERN: &str = "^(DATE(/DATE)?)?$";

/// [`TIME_PATTERN`] with its date spelled out (regex syntax shared by llguidance, OpenAI's
/// structured outputs and the `regex` crate).
pub fn time_pattern() -> String {
    TIME_PATTERN.replace("DATE", "[0-9]{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12][0-9]|3[01]))?)?")
}

/// The JSON Schema (draft 2020-12 subset that llguidance and OpenAI structured outputs accept) of
/// `{"memories": [{source_id, source_speaker, content, dimension: {...}}]}`.
pub fn extractor_json_schema(opts: ExtractorSchemaOptions) -> Value {
    let text = json!({"type": "string"});
    json!({
        "type": "object",
        "properties": {
            "memories": {
                "type": "array",
                "maxItems": opts.max_memories,
                "items": {
                    "type": "object",
                    "properties": {
                        "source_id": {"type": "integer", "minimum": 1},
                        "source_speaker": text,
                        "content": {"type": "string", "minLength": 1, "maxLength": opts.max_content_chars},
                        "dimension": {
                            "type": "object",
                            "properties": {
                                "memory_type": {"type": "string", "enum": ["fact", "episodic", "profile"]},
                                "time": {"type": "string", "pattern": time_pattern()},
                                "location": text,
                                "reason": text,
                                "purpose": text,
                                "keywords": {"type": "array", "items": text, "maxItems": opts.max_keywords}
                            },
                            "required": ["memory_type", "time", "location", "reason", "purpose", "keywords"],
                            "additionalProperties": false
                        }
                    },
                    "required": ["source_id", "source_speaker", "content", "dimension"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["memories"],
        "additionalProperties": false
    })
}

/// The JSON Schema of a [`ParsedQuery`](crate::ParsedQuery) as `prompts/query.j2` asks for it:
/// every field required, `time` either `null` or a constraint in its text form (`on X`,
/// `before X`, `after X`, `around X`, `between A and B`, each date as in [`TIME_PATTERN`]), so a
/// reply decoded under it always deserialises.
pub fn query_json_schema() -> Value {
    let date = "[0-9]{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12][0-9]|3[01]))?)?";
    let time = format!("^((on|before|after|around) {date}|between {date} and {date})$");
    let text = |max: usize| json!({"type": "string", "maxLength": max});
    json!({
        "type": "object",
        "properties": {
            "query_anchor": {"type": "string", "minLength": 1, "maxLength": 300},
            "need_assistant_context": {"type": "boolean"},
            "target_memory_type": {"type": "array", "items": {"type": "string", "enum": ["fact", "episodic", "profile"]}, "maxItems": 3},
            "keywords": {"type": "array", "items": text(60), "maxItems": 8},
            "time": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": time}]},
            "location": text(80),
            "answer_dim": {"type": "string", "enum": ["time", "location", "reason", "purpose", "keywords", "content", ""]}
        },
        "required": ["query_anchor", "need_assistant_context", "target_memory_type", "keywords", "time", "location", "answer_dim"],
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ExtractorOutput;

    #[test]
    fn schema_lists_every_field_of_the_output_type() {
        let s = extractor_json_schema(ExtractorSchemaOptions::default());
        let item = &s["properties"]["memories"]["items"];
        let example: ExtractorOutput = serde_json::from_value(json!({"memories": [{
            "source_id": 1, "source_speaker": "A", "content": "A likes tea.",
            "dimension": {"memory_type": "profile", "time": "", "location": "", "reason": "", "purpose": "", "keywords": ["tea"]}
        }]}))
        .unwrap();
        let v = serde_json::to_value(&example).unwrap();
        let rec = v["memories"][0].as_object().unwrap();
        for k in rec.keys() {
            assert!(item["properties"].get(k).is_some(), "{k}");
        }
        for k in v["memories"][0]["dimension"].as_object().unwrap().keys() {
            assert!(item["properties"]["dimension"]["properties"].get(k).is_some(), "{k}");
        }
        assert_eq!(s["properties"]["memories"]["maxItems"], 12);
    }

    #[test]
    fn the_query_schema_names_every_field_and_its_time_pattern_admits_what_constraints_parse() {
        let s = query_json_schema();
        let fields = serde_json::to_value(crate::ParsedQuery::default()).unwrap();
        let fields = fields.as_object().unwrap();
        for k in fields.keys() {
            assert!(s["properties"].get(k).is_some(), "{k}");
        }
        assert_eq!(s["required"].as_array().unwrap().len(), fields.len());
        let pattern = regex::Regex::new(s["properties"]["time"]["anyOf"][1]["pattern"].as_str().unwrap()).unwrap();
        for ok in ["on 2023-06", "before 2023-05-20", "after 2022", "around 2023-05-08", "between 2023-05 and 2023-06-15"] {
            assert!(pattern.is_match(ok), "{ok:?}");
            assert!(ok.parse::<crate::TimeConstraint>().is_ok(), "{ok:?}");
        }
        for bad in ["last month", "2023-06", "on June 2023", "between 2023-05", "on 2023-06 ", "since 2023"] {
            assert!(!pattern.is_match(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_time_pattern_admits_what_time_spans_parse() {
        let pattern = regex::Regex::new(&time_pattern()).unwrap();
        for ok in ["", "2023", "2023-05", "2023-05-20", "2023-05-01/2023-05-07", "2022/2023", "2023-12-31"] {
            assert!(pattern.is_match(ok), "{ok:?}");
            assert!(ok.is_empty() || ok.parse::<crate::TimeSpan>().is_ok(), "{ok:?}");
        }
        for bad in ["last week", "2023-5-20", "2023-13", "2023-05-32", "2023-05-20T10:00", "May 2023", "2023-05-20 ", "2023/"] {
            assert!(!pattern.is_match(bad), "{bad:?}");
        }
    }
}
