//! A content-addressed cache of model replies: sha256 of (model id, rendered messages,
//! generation parameters) → the raw reply and its usage. Entries are written to a temp file and
//! renamed, so a crash never leaves half an entry; re-running a recipe costs nothing.
//! [`CachedChat`] puts any chat model behind it (the eval's answer, judge and query models).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use memkit_infer::chat::{ChatModel, ChatRequest, Reply, Sample};
use memkit_infer::reply::Usage;
use memkit_prompt::ChatMessage;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::recipe::GenerationSpec;
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

/// The parameters of a teacher's request: everything besides the model and the messages that
/// shapes its reply.
#[derive(Debug, Serialize)]
struct Params<'a> {
    generation: &'a GenerationSpec,
    temperature: f32,
    avoid_repeats: bool,
    schema: Option<&'a serde_json::Value>,
    /// Absent for a greedy request, so greedy keys are the ones written before sampling existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    sample: Option<Sample>,
}

/// The cache key of a teacher's request: the model, the messages, the caps, the schema and the
/// decoding (greedy, or the sample's temperature, nucleus and seed).
pub fn request_key(model: &str, request: &ChatRequest, generation: &GenerationSpec) -> String {
    let params = Params {
        generation,
        temperature: request.sample.map_or(0.0, |s| s.temperature),
        avoid_repeats: request.avoid_repeats,
        schema: request.schema.as_ref(),
        sample: request.sample,
    };
    key(model, &request.messages, &params)
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

    /// Replies to `requests`, each with its key: from the cache where it has them, from `model`
    /// otherwise, a batch of `model.parallel()` at a time, each batch's replies stored before
    /// the next batch is asked (a run killed mid-way keeps every finished batch). Per request,
    /// the reply and whether the cache had it, or the backend's failure (never cached); the
    /// outer error is a cache that cannot be read or written.
    pub fn answer(&self, model: &dyn ChatModel, requests: &[(&ChatRequest, &str)]) -> Result<Vec<memkit_infer::Result<(Reply, bool)>>> {
        let mut out: Vec<Option<memkit_infer::Result<(Reply, bool)>>> = Vec::with_capacity(requests.len());
        for (_, key) in requests {
            out.push(match self.get(key)? {
                Some(e) => Some(Ok((Reply { text: e.raw, usage: e.usage }, true))),
                None => None,
            });
        }
        let missing: Vec<usize> = (0..requests.len()).filter(|&i| out[i].is_none()).collect();
        for batch in missing.chunks(model.parallel().max(1)) {
            let asked: Vec<ChatRequest> = batch.iter().map(|&i| requests[i].0.clone()).collect();
            let mut replies = model.complete(&asked).into_iter();
            for &i in batch {
                out[i] = Some(match replies.next() {
                    Some(Ok(reply)) => {
                        self.put(requests[i].1, &Entry { model: model.id().to_owned(), raw: reply.text.clone(), usage: reply.usage })?;
                        Ok((reply, false))
                    }
                    Some(Err(e)) => Err(e),
                    None => Err(memkit_infer::Error::Backend(format!("{}: fewer replies than requests", model.id()))),
                });
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
}

/// A chat model whose replies are kept in a [`Cache`], keyed by the model id, the messages, the
/// token limit, the schema, repeat damping and the draw's sampling (none for a greedy request): a
/// re-run asks nothing again and an interrupted run resumes. Only replies are cached, never
/// backend failures.
pub struct CachedChat {
    model: Box<dyn ChatModel>,
    cache: Cache,
    requests: AtomicUsize,
    hits: AtomicUsize,
}

/// How many requests a [`CachedChat`] has had, and how many the cache answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Requests made.
    pub requests: usize,
    /// Of those, answered from the cache.
    pub hits: usize,
}

impl CacheStats {
    /// `hits / requests`, 0 with no request.
    pub fn hit_rate(&self) -> f64 {
        if self.requests == 0 { 0.0 } else { self.hits as f64 / self.requests as f64 }
    }
}

impl CachedChat {
    /// `model` behind `cache`.
    pub fn new(model: Box<dyn ChatModel>, cache: Cache) -> Self {
        Self { model, cache, requests: AtomicUsize::new(0), hits: AtomicUsize::new(0) }
    }

    /// Requests and cache hits so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats { requests: self.requests.load(Ordering::Relaxed), hits: self.hits.load(Ordering::Relaxed) }
    }

    fn key(&self, request: &ChatRequest) -> String {
        let mut params = serde_json::json!({
            "max_tokens": request.max_tokens,
            "schema": request.schema,
            "temperature": 0,
            "avoid_repeats": request.avoid_repeats,
        });
        // A draw is its own request; greedy keys stay the ones written before draws existed.
        if let Some(sample) = request.sample {
            params["sample"] = serde_json::json!(sample);
        }
        key(self.model.id(), &request.messages, &params)
    }
}

impl ChatModel for CachedChat {
    fn id(&self) -> &str {
        self.model.id()
    }

    fn parallel(&self) -> usize {
        self.model.parallel()
    }

    fn complete(&self, requests: &[ChatRequest]) -> Vec<memkit_infer::Result<Reply>> {
        let keys: Vec<String> = requests.iter().map(|r| self.key(r)).collect();
        let keyed: Vec<(&ChatRequest, &str)> = requests.iter().zip(&keys).map(|(r, k)| (r, k.as_str())).collect();
        self.requests.fetch_add(requests.len(), Ordering::Relaxed);
        let mut out = Vec::with_capacity(requests.len());
        match self.cache.answer(self.model.as_ref(), &keyed) {
            Ok(answers) => {
                for answer in answers {
                    out.push(match answer {
                        Ok((reply, cached)) => {
                            self.hits.fetch_add(usize::from(cached), Ordering::Relaxed);
                            Ok(reply)
                        }
                        Err(e) => Err(e),
                    });
                }
            }
            Err(e) => {
                let message = format!("reply cache {}: {e}", self.cache.dir().display());
                for _ in requests {
                    out.push(Err(memkit_infer::Error::Backend(message.clone())));
                }
            }
        }
        out
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

    #[test]
    fn a_greedy_key_is_the_one_written_before_sampling_and_each_draw_has_its_own() {
        let generation = GenerationSpec::default();
        let greedy = ChatRequest::new(vec![ChatMessage::user("hi")], 9);
        // The parameters as they were serialised before requests could be sampled.
        let before = key(
            "m",
            &greedy.messages,
            &serde_json::json!({"generation": generation, "temperature": 0.0, "avoid_repeats": false, "schema": null}),
        );
        assert_eq!(request_key("m", &greedy, &generation), before);
        let draw = |seed| request_key("m", &greedy.clone().with_sample(Sample { temperature: 0.7, top_p: 0.95, seed }), &generation);
        assert_ne!(draw(1), before);
        assert_ne!(draw(1), draw(2));
        assert_eq!(draw(1), draw(1));
    }

    /// Counts the requests that reach it; replies with the user text reversed, and fails on
    /// "down".
    struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);
    impl ChatModel for Counting {
        fn id(&self) -> &str {
            "counting"
        }
        fn complete(&self, requests: &[ChatRequest]) -> Vec<memkit_infer::Result<Reply>> {
            self.0.fetch_add(requests.len(), std::sync::atomic::Ordering::SeqCst);
            let mut out = Vec::new();
            for r in requests {
                out.push(match r.messages[0].content.as_str() {
                    "down" => Err(memkit_infer::Error::Backend("down".into())),
                    text => Ok(Reply { text: text.chars().rev().collect(), usage: Usage { completion_tokens: 2, ..Usage::default() } }),
                });
            }
            out
        }
    }

    #[test]
    fn a_cached_chat_asks_only_what_it_has_not_seen_and_never_caches_a_failure() {
        use std::sync::atomic::Ordering::SeqCst;
        let dir = tempfile::tempdir().unwrap();
        let requests = |texts: &[&str], max_tokens: usize| -> Vec<ChatRequest> {
            texts.iter().map(|t| ChatRequest::new(vec![ChatMessage::user(*t)], max_tokens)).collect()
        };
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let chat = CachedChat::new(Box::new(Counting(asked.clone())), Cache::new(dir.path()));
        let first = chat.complete(&requests(&["abc", "down"], 8));
        assert_eq!(first[0].as_ref().unwrap().text, "cba");
        assert_eq!(first[0].as_ref().unwrap().usage.completion_tokens, 2);
        assert!(first[1].is_err());
        assert_eq!(asked.load(SeqCst), 2);
        // A new chat over the same folder: the reply comes from disk, the failure is asked again.
        let chat = CachedChat::new(Box::new(Counting(asked.clone())), Cache::new(dir.path()));
        let second = chat.complete(&requests(&["abc", "down", "xy"], 8));
        assert_eq!(second[0].as_ref().unwrap(), first[0].as_ref().unwrap());
        assert!(second[1].is_err());
        assert_eq!(second[2].as_ref().unwrap().text, "yx");
        assert_eq!(asked.load(SeqCst), 4, "only \"down\" and \"xy\" reach the model");
        assert_eq!(chat.stats(), CacheStats { requests: 3, hits: 1 });
        assert!((chat.stats().hit_rate() - 1.0 / 3.0).abs() < 1e-12);
        // Another token limit is another request, and so is a draw.
        assert_eq!(chat.complete(&requests(&["abc"], 9))[0].as_ref().unwrap().text, "cba");
        assert_eq!(asked.load(SeqCst), 5);
        let draw = ChatRequest::new(vec![ChatMessage::user("abc")], 8).with_sample(Sample { temperature: 0.7, top_p: 0.95, seed: 1 });
        assert_eq!(chat.complete(&[draw])[0].as_ref().unwrap().text, "cba");
        assert_eq!(asked.load(SeqCst), 6);
    }

    /// Takes two requests a call; on each call, notes how many replies the cache holds, and
    /// fails its third call.
    struct Batched {
        dir: std::path::PathBuf,
        seen: std::sync::Mutex<Vec<usize>>,
    }
    impl ChatModel for Batched {
        fn id(&self) -> &str {
            "batched"
        }
        fn parallel(&self) -> usize {
            2
        }
        fn complete(&self, requests: &[ChatRequest]) -> Vec<memkit_infer::Result<Reply>> {
            let stored = stored(&self.dir);
            let mut seen = self.seen.lock().unwrap();
            seen.push(stored);
            let failing = seen.len() == 3;
            let mut out = Vec::new();
            for r in requests {
                out.push(if failing {
                    Err(memkit_infer::Error::Backend("killed".into()))
                } else {
                    Ok(Reply { text: r.messages[0].content.clone(), usage: Usage::default() })
                });
            }
            out
        }
    }

    fn stored(dir: &Path) -> usize {
        let Ok(shards) = std::fs::read_dir(dir) else { return 0 };
        shards.map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count()).sum()
    }

    #[test]
    fn replies_reach_the_disk_batch_by_batch_so_a_failure_keeps_the_finished_ones() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let model = Batched { dir: dir.path().to_owned(), seen: Default::default() };
        let requests: Vec<ChatRequest> = (0..6).map(|i| ChatRequest::new(vec![ChatMessage::user(format!("r{i}"))], 8)).collect();
        let keys: Vec<String> = (0..6).map(|i| format!("{i:02}{}", "0".repeat(62))).collect();
        let keyed: Vec<(&ChatRequest, &str)> = requests.iter().zip(&keys).map(|(r, k)| (r, k.as_str())).collect();
        let answers = cache.answer(&model, &keyed).unwrap();
        // Three calls of two: before each, the replies of every earlier call were on disk.
        assert_eq!(*model.seen.lock().unwrap(), vec![0, 2, 4]);
        assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 4);
        assert!(answers[4].is_err() && answers[5].is_err());
        assert_eq!(stored(dir.path()), 4, "the failed batch is not cached");
        // Asked again: the four come from the cache, the two failures reach the model.
        let again = cache.answer(&model, &keyed).unwrap();
        assert_eq!(again.iter().map(|a| a.as_ref().unwrap().1).collect::<Vec<_>>(), [true, true, true, true, false, false]);
        assert_eq!(again[5].as_ref().unwrap().0.text, "r5");
    }
}
