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
                                "time": text,
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
}
