//! The dense route: cosine similarity between embedded query anchor and record text.
//!
//! [`DenseIndex`] keeps one vector per record, embedded from `content + reason + purpose`
//! ([`document_text`]), and answers a query by embedding its `query_anchor` and taking the exact
//! cosine top-k (a flat scan: the corpora here are thousands of records, not millions).
//!
//! [`HashingEmbedder`] is a lexical baseline embedder: a hashed bag of stemmed words plus
//! character trigrams. It needs no model and is deterministic, so tests and model-less runs
//! still have a third route; it rewards shared words and word pieces, not meaning.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use memkit_schema::{MemoryRecord, ParsedQuery};

use crate::bm25::sort_hits;
use crate::text::{stem, tokens};
use crate::{Error, Hit, Result, Retriever};

pub use memkit_text::embed::{EmbedError, Embedder, cosine};

/// An embedder that keeps every vector it computed, by text, in memory: a run that embeds the
/// same records or questions again (an eval recipe with several dense systems) pays once. Made
/// [`CachedEmbedder::persistent`], it also keeps them in an SQLite file, so the next run (another
/// recipe over the same dialogues, the same recipe again) pays nothing for texts seen before.
pub struct CachedEmbedder<E> {
    inner: E,
    cache: Mutex<HashMap<String, Vec<f32>>>,
    /// The vectors kept across runs, by the model's fingerprint and text; the file's path; the
    /// fingerprint.
    disk: Option<(Mutex<rusqlite::Connection>, PathBuf, String)>,
}

impl<E: Embedder> CachedEmbedder<E> {
    /// Wraps `inner` with an empty cache.
    pub fn new(inner: E) -> Self {
        CachedEmbedder { inner, cache: Mutex::new(HashMap::new()), disk: None }
    }

    /// Wraps `inner` with a cache kept in the SQLite file at `path` (created with its folder
    /// when missing; WAL, so runs in other processes read and add to it at the same time). A
    /// vector is keyed by `fingerprint` and the exact text: the fingerprint must change whenever
    /// the vectors would (memkit-infer's `SentenceEmbedder::fingerprint` hashes the weights and
    /// tokenizer), since a model id alone does not name its weights.
    pub fn persistent(inner: E, path: &Path, fingerprint: &str) -> Result<Self> {
        let wrap = |source| Error::Store { path: path.to_path_buf(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::Embed(format!("embedding cache {}: {e}", dir.display())))?;
        }
        let conn = rusqlite::Connection::open(path).map_err(wrap)?;
        conn.busy_timeout(std::time::Duration::from_secs(60)).map_err(wrap)?;
        let _mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(wrap)?;
        // A rowid table: its rows (a vector is 1.5 KB) are too large for WITHOUT ROWID to pay.
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL, UNIQUE (model, text))",
        )
        .map_err(wrap)?;
        let disk = Some((Mutex::new(conn), path.to_path_buf(), fingerprint.to_owned()));
        Ok(CachedEmbedder { inner, cache: Mutex::new(HashMap::new()), disk })
    }

    /// The vectors of `texts` the file holds for this fingerprint (a stored vector of the wrong
    /// length counts as missing, and is replaced).
    fn read_disk(&self, texts: &[&str]) -> Result<HashMap<String, Vec<f32>>, EmbedError> {
        let Some((conn, path, fingerprint)) = &self.disk else { return Ok(HashMap::new()) };
        let fail = |e: rusqlite::Error| EmbedError(format!("embedding cache {}: {e}", path.display()));
        let conn = conn.lock().map_err(|_| EmbedError("the embedding cache lock was poisoned by a panic".into()))?;
        let mut select = conn.prepare_cached("SELECT vector FROM embeddings WHERE model = ?1 AND text = ?2").map_err(fail)?;
        let mut found = HashMap::new();
        for text in texts {
            let blob: Option<Vec<u8>> = match select.query_row((fingerprint, text), |r| r.get(0)) {
                Ok(blob) => Some(blob),
                Err(rusqlite::Error::QueryReturnedNoRows) => None,
                Err(e) => return Err(fail(e)),
            };
            if let Some(blob) = blob.filter(|b| b.len() == 4 * self.inner.dim()) {
                let v = blob.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
                found.insert((*text).to_string(), v);
            }
        }
        Ok(found)
    }

    /// Adds freshly computed vectors to the file, in one transaction.
    fn write_disk(&self, fresh: &[(&str, &Vec<f32>)]) -> Result<(), EmbedError> {
        let Some((conn, path, fingerprint)) = &self.disk else { return Ok(()) };
        let fail = |e: rusqlite::Error| EmbedError(format!("embedding cache {}: {e}", path.display()));
        let mut conn = conn.lock().map_err(|_| EmbedError("the embedding cache lock was poisoned by a panic".into()))?;
        let tx = conn.transaction().map_err(fail)?;
        {
            let mut insert =
                tx.prepare_cached("INSERT OR REPLACE INTO embeddings (model, text, vector) VALUES (?1, ?2, ?3)").map_err(fail)?;
            for (text, v) in fresh {
                let blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                insert.execute((fingerprint, text, blob)).map_err(fail)?;
            }
        }
        tx.commit().map_err(fail)
    }

    /// Number of distinct texts embedded so far.
    pub fn len(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.len())
    }

    /// True before the first text is embedded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<E: Embedder> Embedder for CachedEmbedder<E> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    /// Embeds only the texts not seen before, in memory or in the file (each once, in one call
    /// to the inner embedder).
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let poisoned = |_| EmbedError("the embedding cache lock was poisoned by a panic".into());
        let mut missing: Vec<&str> = {
            let cache = self.cache.lock().map_err(poisoned)?;
            texts.iter().copied().filter(|t| !cache.contains_key(*t)).collect()
        };
        missing.sort_unstable();
        missing.dedup();
        let stored = self.read_disk(&missing)?;
        missing.retain(|t| !stored.contains_key(*t));
        let fresh = if missing.is_empty() { Vec::new() } else { self.inner.embed(&missing)? };
        self.write_disk(&missing.iter().copied().zip(&fresh).collect::<Vec<_>>())?;
        let mut cache = self.cache.lock().map_err(poisoned)?;
        cache.extend(stored);
        for (text, v) in missing.iter().zip(fresh) {
            cache.insert((*text).to_string(), v);
        }
        texts
            .iter()
            .map(|t| cache.get(*t).cloned().ok_or_else(|| EmbedError(format!("{} returned too few vectors", self.inner.model_id()))))
            .collect()
    }
}

/// The text the dense route embeds for a record: content, reason and purpose.
pub fn document_text(record: &MemoryRecord) -> String {
    let d = &record.dims;
    [record.content.as_str(), d.reason.as_str(), d.purpose.as_str()].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" ")
}

/// The store's cache key for an embedder's vectors of [`document_text`] (the dense route).
pub fn document_cache_key(model_id: &str) -> String {
    format!("{model_id}#document")
}

/// Exact cosine search over one embedding per record.
pub struct DenseIndex<E> {
    embedder: E,
    dim: usize,
    /// Row-major `[len, dim]`.
    vectors: Vec<f32>,
}

impl<E: Embedder> std::fmt::Debug for DenseIndex<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenseIndex").field("model_id", &self.embedder.model_id()).field("dim", &self.dim).field("len", &self.len()).finish()
    }
}

impl<E: Embedder> DenseIndex<E> {
    /// An empty index for an embedder.
    pub fn new(embedder: E) -> Self {
        let dim = embedder.dim();
        DenseIndex { embedder, dim, vectors: Vec::new() }
    }

    /// Embeds every record's [`document_text`], `batch_size` texts per call.
    pub fn build(embedder: E, records: &[MemoryRecord], batch_size: usize) -> Result<Self> {
        let mut index = DenseIndex::new(embedder);
        index.add_records(records, batch_size)?;
        Ok(index)
    }

    /// An index over vectors computed earlier (the store caches them per model id).
    pub fn from_vectors(embedder: E, vectors: Vec<Vec<f32>>) -> Result<Self> {
        let mut index = DenseIndex::new(embedder);
        for v in vectors {
            index.push(v)?;
        }
        Ok(index)
    }

    /// An index over `records` that reuses the vectors `store` caches for this embedder and
    /// embeds (and caches) only the rest, `batch_size` texts per call. The vectors are of
    /// [`document_text`], cached under [`document_cache_key`]: the update path caches vectors of
    /// a record's content alone under the plain model id, and the two must not mix.
    pub fn from_store(
        embedder: E,
        store: &mut (impl crate::store::MemoryStore + ?Sized),
        records: &[MemoryRecord],
        batch_size: usize,
    ) -> Result<Self> {
        let key = document_cache_key(embedder.model_id());
        let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
        let mut cached = store.get_embeddings(&key, &ids)?;
        let missing: Vec<&MemoryRecord> = records.iter().filter(|r| !cached.contains_key(&r.id)).collect();
        if !missing.is_empty() {
            let texts: Vec<String> = missing.iter().map(|r| document_text(r)).collect();
            let mut fresh = DenseIndex::new(&embedder);
            fresh.add_texts(&texts.iter().map(String::as_str).collect::<Vec<_>>(), batch_size)?;
            let computed: Vec<(String, Vec<f32>)> =
                missing.iter().enumerate().map(|(i, r)| (r.id.clone(), fresh.vector(i).expect("one vector per record").to_vec())).collect();
            store.put_embeddings(&key, &computed)?;
            cached.extend(computed);
        }
        let vectors = records.iter().map(|r| cached.remove(&r.id).expect("every record has a vector now")).collect();
        DenseIndex::from_vectors(embedder, vectors)
    }

    /// Embeds and appends records, `batch_size` texts per call (0 counts as 1).
    pub fn add_records(&mut self, records: &[MemoryRecord], batch_size: usize) -> Result<()> {
        let texts: Vec<String> = records.iter().map(document_text).collect();
        self.add_texts(&texts.iter().map(String::as_str).collect::<Vec<_>>(), batch_size)
    }

    /// Embeds and appends plain texts (raw turns), `batch_size` texts per call (0 counts as 1).
    pub fn add_texts(&mut self, texts: &[&str], batch_size: usize) -> Result<()> {
        for batch in texts.chunks(batch_size.max(1)) {
            let vectors = self.embedder.embed(batch)?;
            if vectors.len() != batch.len() {
                return Err(Error::Embed(format!(
                    "{} returned {} vectors for a batch of {} texts",
                    self.embedder.model_id(),
                    vectors.len(),
                    batch.len()
                )));
            }
            for v in vectors {
                self.push(v)?;
            }
        }
        Ok(())
    }

    fn push(&mut self, v: Vec<f32>) -> Result<()> {
        if v.len() != self.dim {
            return Err(Error::Embed(format!(
                "{}: vector {} has length {}, expected {}",
                self.embedder.model_id(),
                self.len(),
                v.len(),
                self.dim
            )));
        }
        self.vectors.extend_from_slice(&v);
        Ok(())
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.vectors.len().checked_div(self.dim).unwrap_or(0)
    }

    /// True when nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }

    /// The embedder.
    pub fn embedder(&self) -> &E {
        &self.embedder
    }

    /// The stored vector of a document.
    pub fn vector(&self, doc: usize) -> Option<&[f32]> {
        self.vectors.get(doc * self.dim..(doc + 1) * self.dim)
    }

    /// The best `k` documents for a free text, by cosine, best first.
    pub fn search_text(&self, text: &str, k: usize) -> Result<Vec<Hit>> {
        let q =
            self.embedder.embed(&[text])?.pop().ok_or_else(|| Error::Embed(format!("{} returned no vector", self.embedder.model_id())))?;
        if q.len() != self.dim {
            return Err(Error::Embed(format!("{}: query vector has length {}, expected {}", self.embedder.model_id(), q.len(), self.dim)));
        }
        Ok(self.search_vector(&q, k))
    }

    /// The best `k` documents for an already embedded query.
    pub fn search_vector(&self, query: &[f32], k: usize) -> Vec<Hit> {
        if self.dim == 0 {
            return Vec::new();
        }
        let mut hits: Vec<Hit> = self
            .vectors
            .chunks_exact(self.dim)
            .enumerate()
            .map(|(doc, v)| Hit { doc, score: cosine(query, v) })
            .filter(|h| h.score.is_finite())
            .collect();
        sort_hits(&mut hits, k);
        hits
    }
}

impl<E: Embedder> Retriever for DenseIndex<E> {
    fn name(&self) -> &str {
        "dense"
    }

    /// Embeds `query_anchor` (the keywords when the anchor is empty) and returns the `k`
    /// nearest records, whatever their similarity.
    fn search(&self, query: &ParsedQuery, k: usize) -> Result<Vec<Hit>> {
        let text = if query.query_anchor.trim().is_empty() { query.keywords.join(" ") } else { query.query_anchor.clone() };
        self.search_text(&text, k)
    }
}

/// A deterministic hashed bag-of-words + character-trigram embedder: the lexical baseline for
/// the dense route.
///
/// Each stemmed content word adds weight 1 to its hashed bucket, and each character trigram of
/// the word (with `^`/`$` boundary marks) adds [`HashingEmbedder::TRIGRAM_WEIGHT`] spread over the
/// word's trigrams, so word forms the stemmer misses ("adoption" / "adopted") still overlap. A
/// second hash bit gives each feature a sign, which keeps collisions from adding up (the hashing
/// trick of Weinberger et al., 2009). Vectors are L2-normalised; a text with no content word
/// embeds to the zero vector, similar to nothing.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dim: usize,
    model_id: String,
}

impl HashingEmbedder {
    /// Total weight of a word's trigrams relative to the word itself.
    pub const TRIGRAM_WEIGHT: f32 = 0.5;

    /// An embedder with `dim` buckets (at least 1).
    pub fn new(dim: usize) -> Self {
        let dim = dim.max(1);
        HashingEmbedder { dim, model_id: format!("memkit/hashing-bow-trigram-{dim}") }
    }

    /// Embeds one text.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.dim];
        let mut add = |feature: &[u8], weight: f32| {
            let h = fnv1a(feature);
            let bucket = (h % self.dim as u64) as usize;
            let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
            v[bucket] += sign * weight;
        };
        for word in tokens(text).into_iter().filter(|t| !crate::text::is_stop_word(t)) {
            let word = stem(&word);
            let mut key = Vec::with_capacity(word.len() + 2);
            key.extend_from_slice(b"w:");
            key.extend_from_slice(word.as_bytes());
            add(&key, 1.0);
            let marked: Vec<char> = std::iter::once('^').chain(word.chars()).chain(std::iter::once('$')).collect();
            let count = marked.len().saturating_sub(2);
            for tri in marked.windows(3) {
                let s: String = tri.iter().collect();
                add(format!("t:{s}").as_bytes(), Self::TRIGRAM_WEIGHT / count as f32);
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

impl Default for HashingEmbedder {
    /// 384 buckets, the width of all-MiniLM-L6-v2, so stores can swap one for the other.
    fn default() -> Self {
        HashingEmbedder::new(384)
    }
}

/// FNV-1a, 64 bit: stable across runs and platforms (std's hasher is seeded per process).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Embedder for HashingEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memkit_schema::{Dimensions, MemoryType};

    fn rec(content: &str, reason: &str) -> MemoryRecord {
        MemoryRecord {
            id: content.into(),
            content: content.into(),
            memory_type: MemoryType::Fact,
            dims: Dimensions { reason: reason.into(), location: "ignored".into(), ..Default::default() },
            pointer: Default::default(),
        }
    }

    #[test]
    fn hashing_vectors_are_normalised_and_deterministic() {
        let e = HashingEmbedder::default();
        let a = e.embed_one("Caroline went to a support group");
        assert_eq!(a.len(), 384);
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-5);
        assert_eq!(a, HashingEmbedder::new(384).embed_one("Caroline went to a support group"));
        assert!(e.embed_one("the and of").iter().all(|x| *x == 0.0));
        assert_eq!(e.model_id(), "memkit/hashing-bow-trigram-384");
    }

    #[test]
    fn hashing_ranks_overlapping_texts_above_unrelated_ones() {
        let e = HashingEmbedder::default();
        let q = e.embed_one("What pottery did Melanie make with her kids?");
        let close = e.embed_one("Melanie made pottery bowls with her kids last weekend.");
        let partial = e.embed_one("Melanie likes painting sunsets.");
        let far = e.embed_one("Caroline researched adoption agencies.");
        let (c, p, f) = (cosine(&q, &close), cosine(&q, &partial), cosine(&q, &far));
        assert!(c > p && p > f, "{c} {p} {f}");
        // Trigrams tie word forms the stemmer keeps apart.
        let adoption = e.embed_one("adoption");
        assert!(cosine(&adoption, &e.embed_one("adopted")) > cosine(&adoption, &e.embed_one("painting")) + 0.1);
    }

    #[test]
    fn dense_index_searches_content_reason_and_purpose() {
        let records = [
            rec("Ann adopted a dog.", "she felt lonely after moving"),
            rec("Bob repaired his bicycle.", ""),
            rec("Ann's dog learned a trick.", ""),
        ];
        let index = DenseIndex::build(HashingEmbedder::default(), &records, 2).unwrap();
        assert_eq!(index.len(), 3);
        let hits = index.search_text("Why did Ann feel lonely?", 3).unwrap();
        assert_eq!(hits[0].doc, 0);
        assert_eq!(hits.len(), 3, "dense returns k hits whatever the similarity");
        let q = ParsedQuery { query_anchor: "bicycle repair".into(), ..Default::default() };
        assert_eq!(index.search(&q, 1).unwrap()[0].doc, 1);
        assert_eq!(document_text(&records[0]), "Ann adopted a dog. she felt lonely after moving");
    }

    struct Broken;
    impl Embedder for Broken {
        fn model_id(&self) -> &str {
            "broken"
        }
        fn dim(&self) -> usize {
            4
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            Ok(texts.iter().map(|_| vec![1.0, 0.0]).collect())
        }
    }

    #[test]
    fn wrong_vector_lengths_are_errors_naming_the_model() {
        let err = DenseIndex::build(Broken, &[rec("x", "")], 8).unwrap_err();
        assert!(err.to_string().contains("broken"), "{err}");
        assert!(DenseIndex::from_vectors(HashingEmbedder::new(3), vec![vec![0.0; 2]]).is_err());
        let boxed: Box<dyn Embedder> = Box::new(HashingEmbedder::new(8));
        let index = DenseIndex::from_vectors(boxed, vec![vec![0.0; 8], vec![1.0; 8]]).unwrap();
        assert_eq!(index.len(), 2);
        assert_eq!(index.vector(1).unwrap()[0], 1.0);
    }

    /// The hashing embedder, counting the texts it embeds.
    struct Counting(HashingEmbedder, Mutex<usize>);
    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            self.0.model_id()
        }
        fn dim(&self) -> usize {
            self.0.dim()
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            *self.1.lock().unwrap() += texts.len();
            self.0.embed(texts)
        }
    }

    #[test]
    fn an_index_from_the_store_embeds_each_record_once_across_runs() {
        let record = |id: &str, content: &str| MemoryRecord {
            id: id.into(),
            content: content.into(),
            memory_type: memkit_schema::MemoryType::Fact,
            dims: Default::default(),
            pointer: Default::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let mut store = crate::store::SqliteStore::open(dir.path().join("m.sqlite")).unwrap();
        let (a, b) = (record("a", "Ann moved to Paris"), record("b", "Ann adopted a cat"));
        use crate::store::MemoryStore;
        store.ingest(&crate::store::IngestBatch { records: vec![a.clone(), b.clone()], ..Default::default() }).unwrap();
        let counting = Counting(HashingEmbedder::default(), Mutex::new(0));
        let index = DenseIndex::from_store(&counting, &mut store, std::slice::from_ref(&a), 8).unwrap();
        assert_eq!(*counting.1.lock().unwrap(), 1);
        // A second run with one more record embeds only the new one, and the vectors are those
        // a fresh build computes, in the records' order.
        let index2 = DenseIndex::from_store(&counting, &mut store, &[b.clone(), a.clone()], 8).unwrap();
        assert_eq!(*counting.1.lock().unwrap(), 2);
        let built = DenseIndex::build(HashingEmbedder::default(), &[b, a], 8).unwrap();
        assert_eq!((index2.vector(0), index2.vector(1)), (built.vector(0), built.vector(1)));
        assert_eq!(index.vector(0), built.vector(1));
        // Cached under the document key, not the plain model id of the update path's content vectors.
        assert_eq!(store.get_embeddings(&document_cache_key(counting.model_id()), &["a", "b"]).unwrap().len(), 2);
        assert!(store.get_embeddings(counting.model_id(), &["a", "b"]).unwrap().is_empty());
    }

    #[test]
    fn cached_embedder_embeds_each_text_once_and_returns_the_same_vectors() {
        let plain = HashingEmbedder::default();
        let cached = CachedEmbedder::new(Counting(HashingEmbedder::default(), Mutex::new(0)));
        let first = cached.embed(&["a red fox", "a blue lake", "a red fox"]).unwrap();
        assert_eq!(first, plain.embed(&["a red fox", "a blue lake", "a red fox"]).unwrap());
        assert_eq!(*cached.inner.1.lock().unwrap(), 2, "the repeated text is embedded once");
        let again = cached.embed(&["a blue lake", "snow"]).unwrap();
        assert_eq!(again, plain.embed(&["a blue lake", "snow"]).unwrap());
        assert_eq!(*cached.inner.1.lock().unwrap(), 3, "only the new text is embedded");
        assert_eq!(cached.len(), 3);
    }

    #[test]
    fn a_persistent_cache_serves_a_later_run_and_replaces_a_vector_of_the_wrong_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache/embeddings.sqlite");
        let plain = HashingEmbedder::default();
        let first = CachedEmbedder::persistent(Counting(HashingEmbedder::default(), Mutex::new(0)), &path, "hashing").unwrap();
        assert_eq!(first.embed(&["a red fox", "a blue lake"]).unwrap(), plain.embed(&["a red fox", "a blue lake"]).unwrap());
        assert_eq!(*first.inner.1.lock().unwrap(), 2);
        drop(first);

        // A later run (a new process would open the same file) embeds only what is new.
        let later = CachedEmbedder::persistent(Counting(HashingEmbedder::default(), Mutex::new(0)), &path, "hashing").unwrap();
        let got = later.embed(&["a blue lake", "snow", "a red fox"]).unwrap();
        assert_eq!(got, plain.embed(&["a blue lake", "snow", "a red fox"]).unwrap());
        assert_eq!(*later.inner.1.lock().unwrap(), 1, "only \"snow\" is new");
        drop(later);

        // A stored vector of the wrong length is embedded again and replaced.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("UPDATE embeddings SET vector = x'00000000' WHERE text = 'snow'", []).unwrap();
        drop(conn);
        let third = CachedEmbedder::persistent(Counting(HashingEmbedder::default(), Mutex::new(0)), &path, "hashing").unwrap();
        assert_eq!(third.embed(&["snow"]).unwrap(), plain.embed(&["snow"]).unwrap());
        assert_eq!(*third.inner.1.lock().unwrap(), 1);
        let conn = rusqlite::Connection::open(&path).unwrap();
        let len: i64 = conn.query_row("SELECT length(vector) FROM embeddings WHERE text = 'snow'", [], |r| r.get(0)).unwrap();
        assert_eq!(len as usize, 4 * plain.dim());
        drop(conn);

        // Another fingerprint (other weights under the same model id) shares nothing.
        let other =
            CachedEmbedder::persistent(Counting(HashingEmbedder::default(), Mutex::new(0)), &path, "hashing, other weights").unwrap();
        other.embed(&["a red fox"]).unwrap();
        assert_eq!(*other.inner.1.lock().unwrap(), 1);
    }
}
