//! The lexical route: Okapi BM25 over a record's content, reason, purpose and keywords.
//!
//! Scoring follows SPEC §6 (and Lucene/tantivy): `k1 = 1.2`, `b = 0.75`,
//! `idf = ln(1 + (N − df + 0.5) / (df + 0.5))`, which stays positive even for terms in every
//! document. Terms come from [`crate::text::terms`] (stop words removed, light stemming), so the
//! index and the query are cut the same way.
//!
//! A query term written twice counts twice, as in rank-bm25 and a Lucene boolean query: the
//! [`Retriever`] impl searches `query_anchor` followed by the keywords, so a keyword the parser
//! picked out weighs more than the other words of the question.
//!
//! ```
//! use memkit_engine::bm25::Bm25Index;
//! let index = Bm25Index::from_texts(["Ann adopted a dog", "Bob bought a car", "Ann's dog barks"]);
//! let hits = index.search_text("dog", 10);
//! assert_eq!(hits.len(), 2);
//! ```

use std::collections::HashMap;

use memkit_schema::{MemoryRecord, ParsedQuery};
use serde::{Deserialize, Serialize};

use crate::text::terms;
use crate::{Hit, Result, Retriever};

/// BM25's two free parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation (0 = none, 1 = full).
    pub b: f32,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 1.2, b: 0.75 }
    }
}

/// Inverse document frequency of a term found in `doc_freq` of `doc_count` documents.
pub fn idf(doc_freq: u64, doc_count: u64) -> f32 {
    let (df, n) = (doc_freq as f64, doc_count as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32
}

/// The text BM25 indexes for a record: content, reason, purpose and keywords, space-separated.
pub fn record_text(record: &MemoryRecord) -> String {
    let d = &record.dims;
    let mut parts: Vec<&str> = vec![&record.content, &d.reason, &d.purpose];
    parts.extend(d.keywords.iter().map(String::as_str));
    parts.retain(|p| !p.is_empty());
    parts.join(" ")
}

/// The query text BM25 searches for a parsed query: the anchor, then the keywords.
pub fn query_text(query: &ParsedQuery) -> String {
    let mut text = query.query_anchor.clone();
    for k in &query.keywords {
        text.push(' ');
        text.push_str(k);
    }
    text
}

/// An inverted index with BM25 scoring. Documents are numbered in insertion order.
#[derive(Debug, Clone, Default)]
pub struct Bm25Index {
    params: Bm25Params,
    /// term → (doc, term frequency), docs ascending.
    postings: HashMap<String, Vec<(u32, u32)>>,
    doc_len: Vec<u32>,
    total_len: u64,
}

impl Bm25Index {
    /// An empty index.
    pub fn new(params: Bm25Params) -> Self {
        Bm25Index { params, ..Default::default() }
    }

    /// An index over records (fields: content, reason, purpose, keywords), default parameters.
    pub fn from_records(records: &[MemoryRecord]) -> Self {
        let mut index = Bm25Index::new(Bm25Params::default());
        for r in records {
            index.add_record(r);
        }
        index
    }

    /// An index over plain texts (raw turns, sessions), default parameters.
    pub fn from_texts<I, S>(texts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut index = Bm25Index::new(Bm25Params::default());
        for t in texts {
            index.add_text(t.as_ref());
        }
        index
    }

    /// The parameters in use.
    pub fn params(&self) -> Bm25Params {
        self.params
    }

    /// Replaces the parameters; the index itself does not change (scoring reads them).
    pub fn set_params(&mut self, params: Bm25Params) {
        self.params = params;
    }

    /// Adds a record; returns its document number.
    pub fn add_record(&mut self, record: &MemoryRecord) -> usize {
        self.add_text(&record_text(record))
    }

    /// Adds a plain text; returns its document number.
    pub fn add_text(&mut self, text: &str) -> usize {
        self.add_terms(&terms(text))
    }

    /// Adds a document already cut into terms (another tokenisation than
    /// [`crate::text::terms`], e.g. HingeMem's content tokens); returns its document number.
    pub fn add_terms(&mut self, terms: &[String]) -> usize {
        let doc = self.doc_len.len();
        let doc_id = u32::try_from(doc).expect("more than u32::MAX documents");
        let mut tf: HashMap<String, u32> = HashMap::new();
        for t in terms {
            *tf.entry(t.clone()).or_default() += 1;
        }
        for (term, count) in tf {
            self.postings.entry(term).or_default().push((doc_id, count));
        }
        let len = u32::try_from(terms.len()).unwrap_or(u32::MAX);
        self.doc_len.push(len);
        self.total_len += u64::from(len);
        doc
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.doc_len.len()
    }

    /// True when nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.doc_len.is_empty()
    }

    /// Number of documents containing a term (give the term as [`crate::text::terms`] cuts it).
    pub fn doc_freq(&self, term: &str) -> usize {
        self.postings.get(term).map_or(0, Vec::len)
    }

    fn avg_len(&self) -> f32 {
        if self.doc_len.is_empty() { 0.0 } else { self.total_len as f32 / self.doc_len.len() as f32 }
    }

    /// BM25 score of every document for a list of query terms (duplicates count again).
    pub fn scores(&self, query_terms: &[String]) -> Vec<f32> {
        let mut scores = vec![0.0f32; self.len()];
        let avg = self.avg_len().max(f32::MIN_POSITIVE);
        let Bm25Params { k1, b } = self.params;
        for term in query_terms {
            let Some(postings) = self.postings.get(term) else { continue };
            let w = idf(postings.len() as u64, self.len() as u64);
            for &(doc, tf) in postings {
                let tf = tf as f32;
                let norm = k1 * (1.0 - b + b * self.doc_len[doc as usize] as f32 / avg);
                scores[doc as usize] += w * tf * (k1 + 1.0) / (tf + norm);
            }
        }
        scores
    }

    /// The best `k` documents for a free text; documents sharing no term are not hits.
    pub fn search_text(&self, text: &str, k: usize) -> Vec<Hit> {
        top_k(&self.scores(&terms(text)), k)
    }
}

/// The `k` best positive scores, best first, ties by lower doc.
pub(crate) fn top_k(scores: &[f32], k: usize) -> Vec<Hit> {
    let mut hits: Vec<Hit> = scores.iter().enumerate().filter(|(_, s)| **s > 0.0).map(|(doc, &score)| Hit { doc, score }).collect();
    sort_hits(&mut hits, k);
    hits
}

/// Sorts hits best first (ties by lower doc) and keeps the first `k`.
pub(crate) fn sort_hits(hits: &mut Vec<Hit>, k: usize) {
    let order = |a: &Hit, b: &Hit| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc));
    if hits.len() > k && k > 0 {
        hits.select_nth_unstable_by(k - 1, order);
    }
    hits.truncate(k);
    hits.sort_by(order);
}

impl Retriever for Bm25Index {
    fn name(&self) -> &str {
        "bm25"
    }

    fn search(&self, query: &ParsedQuery, k: usize) -> Result<Vec<Hit>> {
        Ok(self.search_text(&query_text(query), k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memkit_schema::{Dimensions, MemoryType};

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() < 1e-5
    }

    #[test]
    fn idf_matches_hand_computed_values() {
        // Same check as tantivy's src/query/bm25.rs: df 1 of 2 gives ln 2.
        assert!(close(idf(1, 2), std::f32::consts::LN_2));
        // ln(1 + (10 - 3 + 0.5) / 3.5) = ln(3.142857…) = 1.145132
        assert!(close(idf(3, 10), 1.145_132));
        // A term in every document still scores above zero: ln(1 + 0.5/10.5).
        assert!(close(idf(10, 10), (1.0f32 + 0.5 / 10.5).ln()));
        assert!(idf(1, 1000) > idf(10, 1000));
    }

    #[test]
    fn scores_match_hand_computed_bm25() {
        // Terms after stop words and stemming: d0 = [dog, dog, park] (3), d1 = [cat, park] (2),
        // d2 = [bird] (1). avgdl = 2.
        let index = Bm25Index::from_texts(["the dog and the dogs in a park", "a cat in the park", "bird"]);
        assert_eq!(index.doc_freq("dog"), 1);
        let scores = index.scores(&["dog".to_string()]);
        // idf(1,3) = ln(1 + 2.5/1.5) = ln(8/3); tf 2, dl 3:
        // 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 1.5)) = 4.4 / 3.65
        let want = (8.0f32 / 3.0).ln() * 4.4 / 3.65;
        assert!(close(scores[0], want), "{} vs {want}", scores[0]);
        assert_eq!(&scores[1..], &[0.0, 0.0]);

        let scores = index.scores(&["park".to_string()]);
        // idf(2,3) = ln(1 + 1.5/2.5) = ln 1.6; d1: tf 1, dl 2 = avgdl → 2.2 / 2.2 = 1.
        assert!(close(scores[1], 1.6f32.ln()));
        // d0: tf 1, dl 3 → 2.2 / (1 + 1.2 * 1.375) = 2.2 / 2.65.
        assert!(close(scores[0], 1.6f32.ln() * 2.2 / 2.65));
    }

    #[test]
    fn parameters_change_scores() {
        let mut index = Bm25Index::from_texts(["dog dog dog park park", "dog"]);
        let before = index.scores(&["dog".to_string()]);
        index.set_params(Bm25Params { k1: 1.2, b: 0.0 });
        let after = index.scores(&["dog".to_string()]);
        // With b = 0 the short document loses its length bonus.
        assert!(close(after[1], idf(2, 2)));
        assert!(before[1] > after[1]);
    }

    #[test]
    fn search_ranks_ties_by_doc_and_skips_non_matches() {
        let index = Bm25Index::from_texts(["apple pie", "banana", "apple tart", "apple pie"]);
        let hits = index.search_text("apple pie", 10);
        let docs: Vec<usize> = hits.iter().map(|h| h.doc).collect();
        assert_eq!(docs, [0, 3, 2]);
        assert_eq!(index.search_text("apple", 1).len(), 1);
        assert!(index.search_text("zebra", 5).is_empty());
        assert!(Bm25Index::default().search_text("x", 3).is_empty());
    }

    #[test]
    fn records_index_reason_purpose_and_keywords() {
        let record = |content: &str, reason: &str, purpose: &str, keywords: &[&str]| MemoryRecord {
            id: content.into(),
            content: content.into(),
            memory_type: MemoryType::Episodic,
            dims: Dimensions {
                reason: reason.into(),
                purpose: purpose.into(),
                keywords: keywords.iter().map(|k| k.to_string()).collect(),
                location: "Marathon City".into(),
                ..Default::default()
            },
            pointer: Default::default(),
        };
        let records = [
            record("Ann ran a race.", "to support a charity", "", &[]),
            record("Ann bought shoes.", "", "training for the marathon", &[]),
            record("Bob cooked.", "", "", &["lasagna"]),
        ];
        let index = Bm25Index::from_records(&records);
        assert_eq!(index.search_text("charity", 3)[0].doc, 0);
        assert_eq!(index.search_text("marathon", 3)[0].doc, 1);
        assert_eq!(index.search_text("lasagna", 3)[0].doc, 2);
        // Location is a dimension-route field, not a BM25 field.
        assert!(index.search_text("city", 3).is_empty());

        let query = ParsedQuery { query_anchor: "What did Bob cook?".into(), keywords: vec!["lasagna".into()], ..Default::default() };
        let hits = index.search(&query, 2).unwrap();
        assert_eq!(hits[0].doc, 2);
    }

    #[test]
    fn incremental_add_equals_rebuild() {
        let texts = ["red fox", "lazy dog", "red dog barks", "fox den"];
        let mut grown = Bm25Index::from_texts(&texts[..2]);
        for t in &texts[2..] {
            grown.add_text(t);
        }
        let whole = Bm25Index::from_texts(texts);
        let q = terms("red dog");
        assert_eq!(grown.scores(&q), whole.scores(&q));
    }
}
