//! Walking parsed JSON by hand, so that every error names the file and the JSON path.
//!
//! serde's derive would be shorter, but its errors carry only a line and column, and the
//! datasets have shapes derive handles badly (a string *or* a list of ids, ints where strings are
//! usual, orphan keys). The path is built only when an error is reported: the happy path on the
//! 100 MB LongMemEval-S file allocates nothing for it.

use std::path::Path;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::{Error, Result};

/// The file (and line, for JSONL) a value came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub file: &'a Path,
    pub line: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
enum Segment<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

/// A position inside a JSON value: a chain of keys and indices back to the root.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At<'a> {
    source: Source<'a>,
    parent: Option<&'a At<'a>>,
    segment: Segment<'a>,
}

impl<'a> At<'a> {
    pub fn root(source: Source<'a>) -> Self {
        At { source, parent: None, segment: Segment::Root }
    }

    pub fn key<'b>(&'b self, key: &'b str) -> At<'b> {
        At { source: self.source, parent: Some(self), segment: Segment::Key(key) }
    }

    pub fn index(&self, index: usize) -> At<'_> {
        At { source: self.source, parent: Some(self), segment: Segment::Index(index) }
    }

    /// `[3].conversation.session_7[12].text`, or `(root)`.
    pub fn path(&self) -> String {
        let mut segments = Vec::new();
        let mut at = Some(self);
        while let Some(a) = at {
            segments.push(a.segment);
            at = a.parent;
        }
        let mut out = String::new();
        for segment in segments.into_iter().rev() {
            match segment {
                Segment::Root => {}
                Segment::Key(k) if out.is_empty() => out.push_str(k),
                Segment::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        if out.is_empty() { "(root)".to_string() } else { out }
    }

    pub fn error(&self, message: impl Into<String>) -> Error {
        Error::Schema { path: self.source.file.to_path_buf(), line: self.source.line, json_path: self.path(), message: message.into() }
    }

    fn expected(&self, what: &str, found: &Value) -> Error {
        self.error(format!("expected {what}, found {}", memkit_schema::json_kind(found)))
    }

    pub fn object(&self, v: Value) -> Result<Map<String, Value>> {
        match v {
            Value::Object(m) => Ok(m),
            other => Err(self.expected("an object", &other)),
        }
    }

    pub fn array(&self, v: Value) -> Result<Vec<Value>> {
        match v {
            Value::Array(a) => Ok(a),
            other => Err(self.expected("an array", &other)),
        }
    }

    pub fn string(&self, v: Value) -> Result<String> {
        match v {
            Value::String(s) => Ok(s),
            other => Err(self.expected("a string", &other)),
        }
    }

    /// A string, or `None` for null.
    pub fn opt_string(&self, v: Option<Value>) -> Result<Option<String>> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.string(v).map(Some),
        }
    }

    /// Answers are usually strings, but some are JSON numbers: both become strings.
    pub fn string_or_number(&self, v: Value) -> Result<String> {
        match v {
            Value::String(s) => Ok(s),
            Value::Number(n) => Ok(n.to_string()),
            other => Err(self.expected("a string or a number", &other)),
        }
    }

    pub fn bool(&self, v: Value) -> Result<bool> {
        match v {
            Value::Bool(b) => Ok(b),
            other => Err(self.expected("a boolean", &other)),
        }
    }

    pub fn u64(&self, v: Value) -> Result<u64> {
        match &v {
            Value::Number(n) => n.as_u64().ok_or_else(|| self.error(format!("expected a non-negative integer, found {n}"))),
            other => Err(self.expected("an integer", other)),
        }
    }

    /// Removes `key` from the object at this position, or reports it missing.
    pub fn required(&self, map: &mut Map<String, Value>, key: &str) -> Result<Value> {
        map.remove(key).ok_or_else(|| self.error(format!("missing key `{key}`")))
    }

    /// Rejects keys left in `map` after the known ones were taken (typos in users' own files).
    pub fn no_unknown_keys(&self, map: &Map<String, Value>, known: &[&str]) -> Result<()> {
        match map.keys().next() {
            None => Ok(()),
            Some(k) => Err(self.error(format!("unknown key `{k}` (expected one of: {})", known.join(", ")))),
        }
    }
}

/// Reads a whole file.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

/// Parses a top-level JSON array and hands each entry to `f` as soon as it is parsed, so only
/// one entry's `Value` tree is alive at a time (LongMemEval-S is 100 MB of text).
pub(crate) fn for_each_entry(path: &Path, bytes: &[u8], mut f: impl FnMut(usize, Value) -> Result<()>) -> Result<()> {
    struct Entries<'f, F> {
        f: &'f mut F,
        failed: &'f mut Option<Error>,
    }
    impl<'de, F: FnMut(usize, Value) -> Result<()>> Visitor<'de> for Entries<'_, F> {
        type Value = ();
        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            formatter.write_str("a JSON array of entries")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
            let mut index = 0;
            while let Some(entry) = seq.next_element::<Value>()? {
                if let Err(e) = (self.f)(index, entry) {
                    *self.failed = Some(e);
                    // Stops the parse; the real error is in `failed`.
                    return Err(de::Error::custom("entry rejected"));
                }
                index += 1;
            }
            Ok(())
        }
    }
    impl<'de, F: FnMut(usize, Value) -> Result<()>> DeserializeSeed<'de> for Entries<'_, F> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    let mut failed = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Entries { f: &mut f, failed: &mut failed }.deserialize(&mut de).and_then(|()| de.end());
    match (failed, parsed) {
        (Some(e), _) => Err(e),
        (None, Err(e)) => Err(Error::json(path.to_path_buf(), 0, &e)),
        (None, Ok(())) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_read_like_jq() {
        let file = Path::new("f.json");
        let root = At::root(Source { file, line: None });
        assert_eq!(root.path(), "(root)");
        let i = root.index(3);
        let c = i.key("conversation");
        let s = c.key("session_7");
        let t = s.index(12);
        assert_eq!(t.key("text").path(), "[3].conversation.session_7[12].text");
        assert_eq!(root.key("id").path(), "id");
        let e = t.key("text").string(json!(5)).unwrap_err();
        assert_eq!(e.to_string(), "f.json: [3].conversation.session_7[12].text: expected a string, found a number");
    }

    #[test]
    fn entries_stream_and_errors_stop_the_parse() {
        let file = Path::new("f.json");
        let mut seen = Vec::new();
        for_each_entry(file, b"[1, 2, 3]", |i, v| {
            seen.push((i, v));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(0, json!(1)), (1, json!(2)), (2, json!(3))]);

        let err =
            for_each_entry(file, b"[1, \"x\", 3]", |i, v| At::root(Source { file, line: None }).index(i).u64(v).map(|_| ())).unwrap_err();
        assert_eq!(err.to_string(), "f.json: [1]: expected an integer, found a string");

        let err = for_each_entry(file, b"[1, 2", |_, _| Ok(())).unwrap_err();
        assert!(matches!(err, Error::Json { line: 1, .. }), "{err}");
        let err = for_each_entry(file, b"{}", |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("expected a JSON array"), "{err}");
    }
}
