//! How many messages a trained extractor reads per request: the window its training examples
//! were cut into. It travels with the model like the prompt does (a file beside the dataset and
//! the checkpoint, two GGUF metadata keys), so `memkit extract` asks a published student the way
//! it learnt without being told.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The file beside a training dataset (`train.jsonl`) and a trained checkpoint (`config.json`)
/// that holds the [`TrainedWindow`] of its examples.
pub const TRAINED_WINDOW_FILE: &str = "extract_window.json";

/// The GGUF metadata key that carries [`TrainedWindow::size`].
pub const GGUF_WINDOW_SIZE_KEY: &str = "memkit.extract_window.size";

/// The GGUF metadata key that carries [`TrainedWindow::overlap`].
pub const GGUF_WINDOW_OVERLAP_KEY: &str = "memkit.extract_window.overlap";

/// The messages of one training example: `size` in all, the first `overlap` as context only (so
/// a dialogue is asked in windows of `size` messages, `overlap` shared with the window before).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainedWindow {
    /// Messages per request, context included.
    pub size: usize,
    /// Context messages among them.
    pub overlap: usize,
}

impl TrainedWindow {
    /// Reads [`TRAINED_WINDOW_FILE`] in `dir`: `None` when there is none, an error naming the file
    /// when it does not parse or leaves no new message (`overlap >= size`).
    pub fn read(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(TRAINED_WINDOW_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path, source }),
        };
        let bad = |reason: String| Error::TrainedWindow { path: path.clone(), reason };
        let window: Self = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        window.check().map_err(bad)?;
        Ok(Some(window))
    }

    /// The window a model's metadata names under [`GGUF_WINDOW_SIZE_KEY`] and
    /// [`GGUF_WINDOW_OVERLAP_KEY`] (`get` reads one key): `None` when either is missing, an error
    /// naming the keys when the pair leaves no new message.
    pub fn from_metadata(get: impl Fn(&str) -> Option<usize>) -> std::result::Result<Option<Self>, String> {
        let (Some(size), Some(overlap)) = (get(GGUF_WINDOW_SIZE_KEY), get(GGUF_WINDOW_OVERLAP_KEY)) else { return Ok(None) };
        let window = Self { size, overlap };
        window.check().map_err(|reason| format!("`{GGUF_WINDOW_SIZE_KEY}` / `{GGUF_WINDOW_OVERLAP_KEY}`: {reason}"))?;
        Ok(Some(window))
    }

    /// Checks that a window of this shape has a new message: `0 < size` and `overlap < size`.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.overlap >= self.size {
            return Err(format!("size {} with overlap {} leaves no new message per request", self.size, self.overlap));
        }
        Ok(())
    }

    /// The file's text (pretty JSON with a final newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_round_trips_and_bad_files_name_themselves() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(TrainedWindow::read(dir.path()).unwrap(), None);
        let window = TrainedWindow { size: 2, overlap: 1 };
        std::fs::write(dir.path().join(TRAINED_WINDOW_FILE), window.to_json()).unwrap();
        assert_eq!(TrainedWindow::read(dir.path()).unwrap(), Some(window));
        for bad in [r#"{"size": 2, "overlap": 2}"#, r#"{"size": 2, "overlap": 1, "stride": 1}"#, "{"] {
            std::fs::write(dir.path().join(TRAINED_WINDOW_FILE), bad).unwrap();
            let err = TrainedWindow::read(dir.path()).unwrap_err().to_string();
            assert!(err.contains(TRAINED_WINDOW_FILE), "{bad}: {err}");
        }
    }
}
