//! Errors of memkit-data: each names the file, and the JSON path (and line, for JSONL) to fix.

use std::fmt::Write as _;
use std::path::PathBuf;

/// What can go wrong when loading a dataset or dialogue file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file (or one JSONL line) is not valid JSON, e.g. truncated.
    #[error("{}:{line}:{column}: invalid JSON: {reason}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line in the file.
        line: usize,
        /// 1-based column in that line.
        column: usize,
        /// What the JSON parser found wrong.
        reason: String,
    },
    /// Valid JSON that does not have the expected shape: a missing key, a wrong type, a date in
    /// an unknown format. `json_path` is like `[3].conversation.session_7[12].text`.
    #[error("{}{}: {json_path}: {message}", path.display(), line_suffix(*line))]
    Schema {
        /// The file.
        path: PathBuf,
        /// 1-based line, for line-oriented files (JSONL).
        line: Option<usize>,
        /// Where in the JSON value the problem is (`(root)` for the value itself).
        json_path: String,
        /// What was expected or found.
        message: String,
    },
    /// A window setting that cannot produce SPEC §2 windows (size 0, overlap ≥ size, ...).
    #[error("invalid window settings: {0}")]
    Window(String),
}

fn line_suffix(line: Option<usize>) -> String {
    let mut s = String::new();
    if let Some(l) = line {
        let _ = write!(s, ":{l}");
    }
    s
}

impl Error {
    /// Wraps a `serde_json` syntax error with the file name. serde_json puts the position in its
    /// message; we keep it in fields instead so the file, line and column read like a compiler's.
    pub(crate) fn json(path: PathBuf, line_offset: usize, e: &serde_json::Error) -> Self {
        let full = e.to_string();
        let reason = match full.rfind(" at line ") {
            Some(i) => full[..i].to_string(),
            None => full,
        };
        Error::Json { path, line: e.line() + line_offset, column: e.column(), reason }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_errors_name_file_line_and_path() {
        let e = Error::Schema {
            path: "locomo10.json".into(),
            line: None,
            json_path: "[3].conversation.session_7[12].text".into(),
            message: "expected a string".into(),
        };
        assert_eq!(e.to_string(), "locomo10.json: [3].conversation.session_7[12].text: expected a string");
        let e = Error::Schema { path: "d.jsonl".into(), line: Some(4), json_path: "id".into(), message: "m".into() };
        assert_eq!(e.to_string(), "d.jsonl:4: id: m");
    }

    #[test]
    fn json_errors_move_the_position_into_fields() {
        let je = serde_json::from_str::<serde_json::Value>("[1,\n2").unwrap_err();
        let e = Error::json("x.json".into(), 0, &je);
        assert_eq!(e.to_string(), "x.json:2:1: invalid JSON: EOF while parsing a list");
    }
}
