//! A content-addressed cache of teacher replies: sha256 of (model id, rendered messages,
//! generation parameters) → the raw reply and its usage. Entries are written to a temp file and
//! renamed, so a crash never leaves half an entry; re-running a recipe costs nothing.

use std::path::{Path, PathBuf};

use memkit_infer::extract::Usage;
use memkit_prompt::ChatMessage;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// What the key is made of.
#[derive(Debug, Serialize)]
struct KeyParts<'a, P: Serialize> {
    model: &'a str,
    messages: &'a [ChatMessage],
    params: &'a P,
}

/// The cache key of one request: lower-case hex sha256.
pub fn key(model: &str, messages: &[ChatMessage], params: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(&KeyParts { model, messages, params }).expect("plain data serialises");
    Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// One cached reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The model id that wrote it.
    pub model: String,
    /// The reply as it came.
    pub raw: String,
    /// Tokens and time of the original request.
    pub usage: Usage,
}

/// The cache directory: `<dir>/<key[..2]>/<key>.json`.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// A cache rooted at `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The default root: `$MEMKIT_CACHE_DIR/teacher`, else `~/.cache/memkit/teacher`.
    pub fn default_dir() -> PathBuf {
        let root = std::env::var_os("MEMKIT_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/memkit")))
            .unwrap_or_else(|| PathBuf::from(".cache/memkit"));
        root.join("teacher")
    }

    /// The root directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(&key[..2]).join(format!("{key}.json"))
    }

    /// The entry under `key`; an unreadable entry (a disk error) is an error, a corrupt one is
    /// treated as absent and logged.
    pub fn get(&self, key: &str) -> Result<Option<Entry>> {
        let path = self.path(key);
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(entry) => Ok(Some(entry)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "corrupt cache entry, asking the teacher again");
                    Ok(None)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io { path, source }),
        }
    }

    /// Stores `entry` under `key` atomically.
    pub fn put(&self, key: &str, entry: &Entry) -> Result<()> {
        let path = self.path(key);
        let bytes = serde_json::to_vec(entry).expect("plain data serialises");
        crate::write_atomic(&path, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_changes_with_each_part_and_entries_round_trip() {
        let messages = [ChatMessage::user("hi")];
        let k = key("m", &messages, &1);
        assert_eq!(k.len(), 64);
        assert_eq!(k, key("m", &messages, &1));
        assert_ne!(k, key("n", &messages, &1));
        assert_ne!(k, key("m", &[ChatMessage::user("ho")], &1));
        assert_ne!(k, key("m", &messages, &2));

        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        assert_eq!(cache.get(&k).unwrap(), None);
        let entry = Entry {
            model: "m".into(),
            raw: "{}".into(),
            usage: Usage { prompt_tokens: 3, completion_tokens: 1, millis: 9, hit_max_tokens: false },
        };
        cache.put(&k, &entry).unwrap();
        assert_eq!(cache.get(&k).unwrap(), Some(entry));
        std::fs::write(cache.path(&k), b"{not json").unwrap();
        assert_eq!(cache.get(&k).unwrap(), None);
    }
}
