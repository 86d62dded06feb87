//! The dimension-match route: scores how well a record's typed fields satisfy the parsed
//! query's constraints (DimMem's `R_dim`).
//!
//! Each field the query has contributes a score in `[0, 1]`:
//!
//! | field | query side | record side | score |
//! |---|---|---|---|
//! | type | `target_memory_type` | `memory_type` | 1 if the record type is a target |
//! | time | `time` | `dims.time` as a [`TimeSpan`] | 1 if [`TimeConstraint::matches`]; 0 when the record time is empty or unparseable |
//! | location | `location` | `dims.location` | 1 on phrase containment either way, else share of query location terms present |
//! | keyword phrase | `keywords` | `dims.keywords` | share of query keywords equal (normalised) to a record keyword |
//! | keyword token | `keywords` | `dims.keywords` | share of query keyword terms present in the record keyword terms |
//! | anchor token | `query_anchor` | `content` | share of anchor terms present in the content |
//!
//! The record score is `Σ w_f · s_f / Σ w_f` over the fields the query actually has, so a query
//! with only a time constraint is scored on time alone (plus the anchor), and a query with no
//! field at all gives no hits. Terms are [`crate::text::terms`] (stop words out, light stemming).

use std::collections::{HashMap, HashSet};

use memkit_schema::{MemoryRecord, MemoryType, ParsedQuery, TimeConstraint, TimeSpan};
use serde::{Deserialize, Serialize};

use crate::bm25::top_k;
use crate::text::{normalize_phrase, terms};
use crate::{Error, Hit, Result, Retriever};

/// Weights of the dimension fields (DimMem's LongMemEval weights by default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DimensionWeights {
    /// Record type ∈ target types.
    pub memory_type: f32,
    /// Time constraint satisfied.
    pub time: f32,
    /// Location phrase / token overlap.
    pub location: f32,
    /// Exact (normalised) keyword phrase matches.
    pub keyword_phrase: f32,
    /// Keyword token overlap.
    pub keyword_token: f32,
    /// Query-anchor token overlap with the content. DimMem's five published weights sum to
    /// 0.95; the default 0.05 fills the rest, so the defaults sum to one and the anchor acts as a
    /// weak lexical tie-break between records that match the structured fields equally.
    pub anchor_token: f32,
}

impl Default for DimensionWeights {
    fn default() -> Self {
        DimensionWeights { memory_type: 0.15, time: 0.30, location: 0.20, keyword_phrase: 0.15, keyword_token: 0.15, anchor_token: 0.05 }
    }
}

impl DimensionWeights {
    /// Checks that every weight is finite and non-negative.
    pub fn validate(&self) -> Result<()> {
        let all = [
            ("memory_type", self.memory_type),
            ("time", self.time),
            ("location", self.location),
            ("keyword_phrase", self.keyword_phrase),
            ("keyword_token", self.keyword_token),
            ("anchor_token", self.anchor_token),
        ];
        for (name, w) in all {
            if !w.is_finite() || w < 0.0 {
                return Err(Error::Config(format!("dimension weight {name} = {w}: must be a finite number ≥ 0")));
            }
        }
        Ok(())
    }
}

/// Per-field scores of one record against one query; `None` where the query lacks the field.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FieldScores {
    /// Type match.
    pub memory_type: Option<f32>,
    /// Time match.
    pub time: Option<f32>,
    /// Location match.
    pub location: Option<f32>,
    /// Keyword phrase match.
    pub keyword_phrase: Option<f32>,
    /// Keyword token match.
    pub keyword_token: Option<f32>,
    /// Anchor token overlap.
    pub anchor_token: Option<f32>,
}

impl FieldScores {
    /// The weighted mean over the fields present; 0 when none is.
    pub fn combine(&self, w: &DimensionWeights) -> f32 {
        let parts = [
            (self.memory_type, w.memory_type),
            (self.time, w.time),
            (self.location, w.location),
            (self.keyword_phrase, w.keyword_phrase),
            (self.keyword_token, w.keyword_token),
            (self.anchor_token, w.anchor_token),
        ];
        let (mut num, mut den) = (0.0, 0.0);
        for (score, weight) in parts {
            if let Some(s) = score {
                num += weight * s;
                den += weight;
            }
        }
        if den > 0.0 { num / den } else { 0.0 }
    }
}

/// What the index keeps of a record: its fields already parsed and cut into terms.
#[derive(Debug, Clone)]
struct RecordFeatures {
    memory_type: MemoryType,
    time: Option<TimeSpan>,
    /// Normalised location with a space on each side, for whole-word containment.
    location_padded: String,
    location_terms: HashSet<String>,
    keyword_phrases: HashSet<String>,
    keyword_terms: HashSet<String>,
    content_terms: HashSet<String>,
}

impl RecordFeatures {
    fn new(r: &MemoryRecord) -> Self {
        let d = &r.dims;
        RecordFeatures {
            memory_type: r.memory_type,
            time: d.time.trim().parse().ok(),
            location_padded: padded(&d.location),
            location_terms: terms(&d.location).into_iter().collect(),
            keyword_phrases: d.keywords.iter().map(|k| normalize_phrase(k)).filter(|k| !k.is_empty()).collect(),
            keyword_terms: d.keywords.iter().flat_map(|k| terms(k)).collect(),
            content_terms: terms(&r.content).into_iter().collect(),
        }
    }
}

/// The query side, prepared once per search.
#[derive(Debug, Clone)]
struct QueryFeatures {
    types: Vec<MemoryType>,
    time: Option<TimeConstraint>,
    location_padded: String,
    location_terms: Vec<String>,
    keyword_phrases: Vec<String>,
    keyword_terms: Vec<String>,
    anchor_terms: Vec<String>,
}

fn unique(v: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    v.into_iter().filter(|t| seen.insert(t.clone())).collect()
}

impl QueryFeatures {
    fn new(q: &ParsedQuery) -> Self {
        // "all three types" filters nothing; treat it like "any".
        let types = if q.target_memory_type.len() >= MemoryType::ALL.len() { Vec::new() } else { q.target_memory_type.clone() };
        QueryFeatures {
            types,
            time: q.time,
            location_padded: padded(&q.location),
            location_terms: unique(terms(&q.location)),
            keyword_phrases: unique(q.keywords.iter().map(|k| normalize_phrase(k)).filter(|k| !k.is_empty()).collect()),
            keyword_terms: unique(q.keywords.iter().flat_map(|k| terms(k)).collect()),
            anchor_terms: unique(terms(&q.query_anchor)),
        }
    }

    fn is_empty(&self) -> bool {
        self.types.is_empty()
            && self.time.is_none()
            && self.location_terms.is_empty()
            && self.keyword_phrases.is_empty()
            && self.anchor_terms.is_empty()
    }
}

fn share(query: &[String], record: &HashSet<String>) -> f32 {
    if query.is_empty() {
        return 0.0;
    }
    query.iter().filter(|t| record.contains(*t)).count() as f32 / query.len() as f32
}

/// A phrase normalised and padded with spaces ("" when it has no term), so that substring
/// search finds whole-word runs only.
fn padded(text: &str) -> String {
    let p = normalize_phrase(text);
    if p.is_empty() { p } else { format!(" {p} ") }
}

/// Whether `needle`'s words appear as a contiguous run inside `hay`'s words (both padded).
fn contains_phrase(hay: &str, needle: &str) -> bool {
    !needle.is_empty() && hay.contains(needle)
}

fn field_scores(q: &QueryFeatures, r: &RecordFeatures) -> FieldScores {
    let present = |cond: bool, f: &dyn Fn() -> f32| cond.then(f);
    FieldScores {
        memory_type: present(!q.types.is_empty(), &|| f32::from(u8::from(q.types.contains(&r.memory_type)))),
        time: q.time.map(|c| r.time.map_or(0.0, |t| f32::from(u8::from(c.matches(&t))))),
        location: present(!q.location_terms.is_empty(), &|| location_score(q, r)),
        keyword_phrase: present(!q.keyword_phrases.is_empty(), &|| {
            q.keyword_phrases.iter().filter(|p| r.keyword_phrases.contains(*p)).count() as f32 / q.keyword_phrases.len() as f32
        }),
        keyword_token: present(!q.keyword_terms.is_empty(), &|| share(&q.keyword_terms, &r.keyword_terms)),
        anchor_token: present(!q.anchor_terms.is_empty(), &|| share(&q.anchor_terms, &r.content_terms)),
    }
}

/// Location score: 1 on phrase containment either way, else the share of query terms present.
fn location_score(q: &QueryFeatures, r: &RecordFeatures) -> f32 {
    if contains_phrase(&r.location_padded, &q.location_padded) || contains_phrase(&q.location_padded, &r.location_padded) {
        1.0
    } else {
        share(&q.location_terms, &r.location_terms)
    }
}

/// Dimension match over a corpus of records.
///
/// Scoring is sparse: posting lists (type, location term, keyword phrase, keyword term,
/// content term) and the list of timed records lead to the records a field can score, so a
/// query touches only those instead of every record. Each field's contribution is added in the
/// fixed field order of [`FieldScores::combine`], so the scores are bit-for-bit those of scoring
/// every record with [`DimensionIndex::field_scores`] (a unit test checks it).
#[derive(Debug, Clone, Default)]
pub struct DimensionIndex {
    weights: DimensionWeights,
    records: Vec<RecordFeatures>,
    by_type: HashMap<MemoryType, Vec<u32>>,
    timed: Vec<(u32, TimeSpan)>,
    location_terms: HashMap<String, Vec<u32>>,
    keyword_phrases: HashMap<String, Vec<u32>>,
    keyword_terms: HashMap<String, Vec<u32>>,
    content_terms: HashMap<String, Vec<u32>>,
}

fn post<'a>(postings: &mut HashMap<String, Vec<u32>>, keys: impl IntoIterator<Item = &'a String>, doc: u32) {
    for k in keys {
        postings.entry(k.clone()).or_default().push(doc);
    }
}

/// For each record in any of `lists` (one posting list per query item), calls `add(doc, count)`
/// once with how many of the lists hold it. `counts` is an all-zero scratch with a slot per
/// record; taking each count on the second pass makes later visits no-ops and leaves it all zero
/// for the next field.
fn for_each_count(lists: &[&Vec<u32>], counts: &mut [u32], mut add: impl FnMut(u32, u32)) {
    for &doc in lists.iter().copied().flatten() {
        counts[doc as usize] += 1;
    }
    for &doc in lists.iter().copied().flatten() {
        let count = std::mem::take(&mut counts[doc as usize]);
        if count > 0 {
            add(doc, count);
        }
    }
}

impl DimensionIndex {
    /// Indexes the records' fields.
    pub fn new(records: &[MemoryRecord], weights: DimensionWeights) -> Result<Self> {
        weights.validate()?;
        let mut index = DimensionIndex { weights, ..Default::default() };
        for r in records {
            index.add(r);
        }
        Ok(index)
    }

    /// Adds one record; returns its doc number.
    pub fn add(&mut self, record: &MemoryRecord) -> usize {
        let doc = self.records.len();
        let id = u32::try_from(doc).expect("fewer than 2^32 records");
        let f = RecordFeatures::new(record);
        self.by_type.entry(f.memory_type).or_default().push(id);
        if let Some(t) = f.time {
            self.timed.push((id, t));
        }
        post(&mut self.location_terms, &f.location_terms, id);
        post(&mut self.keyword_phrases, &f.keyword_phrases, id);
        post(&mut self.keyword_terms, &f.keyword_terms, id);
        post(&mut self.content_terms, &f.content_terms, id);
        self.records.push(f);
        doc
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when there is no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The weights in use.
    pub fn weights(&self) -> &DimensionWeights {
        &self.weights
    }

    /// Per-field scores of one record (for explaining a ranking); `None` past the end.
    pub fn field_scores(&self, query: &ParsedQuery, doc: usize) -> Option<FieldScores> {
        let r = self.records.get(doc)?;
        Some(field_scores(&QueryFeatures::new(query), r))
    }

    /// The combined score of every record, in doc order.
    pub fn scores(&self, query: &ParsedQuery) -> Vec<f32> {
        let q = QueryFeatures::new(query);
        let n = self.records.len();
        if q.is_empty() {
            return vec![0.0; n];
        }
        let w = &self.weights;
        // The fields the query has, in combine()'s order, and their weight sum.
        let den: f32 = [
            (!q.types.is_empty(), w.memory_type),
            (q.time.is_some(), w.time),
            (!q.location_terms.is_empty(), w.location),
            (!q.keyword_phrases.is_empty(), w.keyword_phrase),
            (!q.keyword_terms.is_empty(), w.keyword_token),
            (!q.anchor_terms.is_empty(), w.anchor_token),
        ]
        .iter()
        .filter(|(present, _)| *present)
        .fold(0.0, |acc, (_, weight)| acc + weight);
        if den <= 0.0 {
            return vec![0.0; n];
        }
        let mut num = vec![0.0f32; n];
        // A matching type or time scores 1, so it adds its weight.
        let mut types = q.types.clone();
        types.sort();
        types.dedup();
        for t in &types {
            for &doc in self.by_type.get(t).into_iter().flatten() {
                num[doc as usize] += w.memory_type;
            }
        }
        if let Some(c) = q.time {
            for (doc, span) in &self.timed {
                if c.matches(span) {
                    num[*doc as usize] += w.time;
                }
            }
        }
        // Share fields: per record, how many query items its postings hold (location first, in
        // combine()'s order), turned into weight · count / items once per record.
        let mut counts = vec![0u32; n];
        if !q.location_terms.is_empty() {
            // Phrase containment either way scores 1. The query phrase inside the record's means
            // every query term is there, so the share is already 1; the record's phrase inside
            // the query's needs all the record's terms in the query, so only then is the
            // substring test run (a common term such as "new" would otherwise send thousands of
            // records through it).
            let lists: Vec<&Vec<u32>> = q.location_terms.iter().filter_map(|t| self.location_terms.get(t)).collect();
            for_each_count(&lists, &mut counts, |doc, count| {
                let r = &self.records[doc as usize];
                let inside_query = count as usize == r.location_terms.len() && contains_phrase(&q.location_padded, &r.location_padded);
                let score = if inside_query { 1.0 } else { count as f32 / q.location_terms.len() as f32 };
                num[doc as usize] += w.location * score;
            });
        }
        let shares = [
            (&q.keyword_phrases, &self.keyword_phrases, w.keyword_phrase),
            (&q.keyword_terms, &self.keyword_terms, w.keyword_token),
            (&q.anchor_terms, &self.content_terms, w.anchor_token),
        ];
        for (items, postings, weight) in shares {
            let lists: Vec<&Vec<u32>> = items.iter().filter_map(|k| postings.get(k)).collect();
            for_each_count(&lists, &mut counts, |doc, count| num[doc as usize] += weight * (count as f32 / items.len() as f32));
        }
        num.into_iter().map(|x| x / den).collect()
    }
}

impl Retriever for DimensionIndex {
    fn name(&self) -> &str {
        "dimension"
    }

    /// Records with a positive score, best first.
    fn search(&self, query: &ParsedQuery, k: usize) -> Result<Vec<Hit>> {
        Ok(top_k(&self.scores(query), k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memkit_schema::Dimensions;

    fn rec(t: MemoryType, content: &str, time: &str, location: &str, keywords: &[&str]) -> MemoryRecord {
        MemoryRecord {
            id: content.into(),
            content: content.into(),
            memory_type: t,
            dims: Dimensions {
                time: time.into(),
                location: location.into(),
                keywords: keywords.iter().map(|k| k.to_string()).collect(),
                ..Default::default()
            },
            pointer: Default::default(),
        }
    }

    fn index(records: &[MemoryRecord]) -> DimensionIndex {
        DimensionIndex::new(records, DimensionWeights::default()).unwrap()
    }

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn type_field_scores_membership() {
        let idx = index(&[rec(MemoryType::Profile, "x", "", "", &[]), rec(MemoryType::Fact, "x", "", "", &[])]);
        let q = ParsedQuery { target_memory_type: vec![MemoryType::Profile, MemoryType::Episodic], ..Default::default() };
        assert_eq!(idx.scores(&q), [1.0, 0.0]);
        // All three types is no constraint at all.
        let q = ParsedQuery { target_memory_type: MemoryType::ALL.to_vec(), ..Default::default() };
        assert_eq!(idx.field_scores(&q, 0).unwrap().memory_type, None);
    }

    #[test]
    fn time_field_uses_constraint_and_zeroes_bad_record_times() {
        let idx = index(&[
            rec(MemoryType::Episodic, "a", "2023-05-07", "", &[]),
            rec(MemoryType::Episodic, "b", "2023-06", "", &[]),
            rec(MemoryType::Episodic, "c", "", "", &[]),
            rec(MemoryType::Episodic, "d", "last spring", "", &[]),
            rec(MemoryType::Episodic, "e", "2023-04-20/2023-05-02", "", &[]),
        ]);
        let q = ParsedQuery { time: Some("on 2023-05".parse().unwrap()), ..Default::default() };
        assert_eq!(idx.scores(&q), [1.0, 0.0, 0.0, 0.0, 1.0]);
        let q = ParsedQuery { time: Some("after 2023-05-10".parse().unwrap()), ..Default::default() };
        assert_eq!(idx.scores(&q), [0.0, 1.0, 0.0, 0.0, 0.0]);
        let q = ParsedQuery { time: Some("around 2023-05-04".parse().unwrap()), ..Default::default() };
        assert_eq!(idx.scores(&q), [1.0, 0.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn location_field_accepts_containment_and_partial_overlap() {
        let idx = index(&[
            rec(MemoryType::Fact, "x", "", "Lake Michigan, USA", &[]),
            rec(MemoryType::Fact, "x", "", "Michigan", &[]),
            rec(MemoryType::Fact, "x", "", "Lake Tahoe", &[]),
            rec(MemoryType::Fact, "x", "", "", &[]),
        ]);
        let q = ParsedQuery { location: "lake michigan".into(), ..Default::default() };
        let s = idx.scores(&q);
        assert_eq!(s[0], 1.0, "query phrase inside record location");
        assert_eq!(s[1], 1.0, "record location inside query phrase");
        assert!(close(s[2], 0.5), "one of two terms");
        assert_eq!(s[3], 0.0);
    }

    #[test]
    fn keyword_fields_score_phrases_and_tokens() {
        let idx = index(&[
            rec(MemoryType::Fact, "x", "", "", &["pottery class", "bowls"]),
            rec(MemoryType::Fact, "x", "", "", &["Pottery Classes"]),
            rec(MemoryType::Fact, "x", "", "", &["class schedule"]),
        ]);
        let q = ParsedQuery { keywords: vec!["pottery class".into(), "bowl".into()], ..Default::default() };
        let f: Vec<FieldScores> = (0..3).map(|d| idx.field_scores(&q, d).unwrap()).collect();
        assert_eq!(f[0].keyword_phrase, Some(1.0));
        assert_eq!(f[0].keyword_token, Some(1.0));
        // Case and plural fold away: one of two phrases, two of three tokens.
        assert_eq!(f[1].keyword_phrase, Some(0.5));
        assert!(close(f[1].keyword_token.unwrap(), 2.0 / 3.0));
        assert_eq!(f[2].keyword_phrase, Some(0.0));
        assert!(close(f[2].keyword_token.unwrap(), 1.0 / 3.0));
    }

    #[test]
    fn anchor_field_overlaps_content() {
        let idx = index(&[
            rec(MemoryType::Fact, "Ann adopted a puppy named Rex", "", "", &[]),
            rec(MemoryType::Fact, "Bob sold cars", "", "", &[]),
        ]);
        let q = ParsedQuery { query_anchor: "What puppy did Ann adopt?".into(), ..Default::default() };
        // terms: puppy, ann, adopt → record 0 has all three (adopted → adopt).
        assert_eq!(idx.scores(&q), [1.0, 0.0]);
        assert_eq!(idx.search(&q, 5).unwrap().len(), 1);
    }

    #[test]
    fn score_renormalises_over_present_fields() {
        let r = rec(MemoryType::Episodic, "Ann ran a charity race", "2023-05-20", "Boston", &["charity race"]);
        let idx = index(std::slice::from_ref(&r));
        let w = DimensionWeights::default();
        // Type matches, time does not: 0.15 / (0.15 + 0.30).
        let q =
            ParsedQuery { target_memory_type: vec![MemoryType::Episodic], time: Some("on 2023-06".parse().unwrap()), ..Default::default() };
        assert!(close(idx.scores(&q)[0], 0.15 / 0.45));
        // Add a matching location: (0.15 + 0.20) / 0.65.
        let q = ParsedQuery { location: "Boston".into(), ..q };
        assert!(close(idx.scores(&q)[0], 0.35 / 0.65));
        // Everything matches: 1 whatever the weights.
        let q = ParsedQuery {
            query_anchor: "charity race".into(),
            target_memory_type: vec![MemoryType::Episodic],
            keywords: vec!["charity race".into()],
            time: Some("on 2023-05".parse().unwrap()),
            location: "Boston".into(),
            ..Default::default()
        };
        assert!(close(idx.scores(&q)[0], 1.0));
        let fs = idx.field_scores(&q, 0).unwrap();
        assert!(close(fs.combine(&DimensionWeights { time: 5.0, ..w }), 1.0));
        // No field at all: no hits.
        assert!(idx.search(&ParsedQuery::default(), 3).unwrap().is_empty());
    }

    /// The sparse scoring must equal scoring every record field by field, bit for bit.
    #[test]
    fn sparse_scores_equal_the_full_scan() {
        let mut seed = 7u64;
        let mut pick = |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((seed >> 33) % n as u64) as usize
        };
        let words = ["lake", "the", "race", "pottery", "class", "Boston", "blue", "of", "dog", "running", "paris", "ran"];
        let times = ["", "2023-05-07", "2023-05", "2023", "2023-04-20/2023-05-02", "soon", "2022-12-31"];
        let phrase = |pick: &mut dyn FnMut(usize) -> usize, max: usize| {
            (0..pick(max)).map(|_| words[pick(words.len())]).collect::<Vec<_>>().join(" ")
        };
        let records: Vec<MemoryRecord> = (0..300)
            .map(|_| {
                let keywords: Vec<String> = (0..pick(4)).map(|_| phrase(&mut pick, 3)).collect();
                let k: Vec<&str> = keywords.iter().map(String::as_str).collect();
                rec(MemoryType::ALL[pick(3)], &phrase(&mut pick, 8), times[pick(times.len())], &phrase(&mut pick, 3), &k)
            })
            .collect();
        let w = DimensionWeights { location: 0.37, ..Default::default() };
        let idx = DimensionIndex::new(&records, w).unwrap();
        let constraints = ["on 2023-05", "before 2023-05-01", "after 2023", "around 2023-05-04", "between 2023-01 and 2023-04"];
        for _ in 0..200 {
            let q = ParsedQuery {
                query_anchor: phrase(&mut pick, 6),
                keywords: (0..pick(3)).map(|_| phrase(&mut pick, 2)).collect(),
                target_memory_type: (0..pick(3)).map(|_| MemoryType::ALL[pick(3)]).collect(),
                time: (pick(2) == 0).then(|| constraints[pick(constraints.len())].parse().unwrap()),
                location: phrase(&mut pick, 2),
                ..Default::default()
            };
            let full: Vec<u32> = (0..records.len()).map(|d| idx.field_scores(&q, d).unwrap().combine(&w).to_bits()).collect();
            let sparse: Vec<u32> = idx.scores(&q).iter().map(|s| s.to_bits()).collect();
            assert_eq!(sparse, full, "query {q:?}");
        }
    }

    #[test]
    fn weights_reject_typos_and_negatives() {
        let w: DimensionWeights = serde_json::from_str(r#"{"time": 0.5}"#).unwrap();
        assert_eq!(w, DimensionWeights { time: 0.5, ..Default::default() });
        assert!(serde_json::from_str::<DimensionWeights>(r#"{"tme": 0.5}"#).is_err());
        let bad = DimensionWeights { location: -1.0, ..Default::default() };
        assert!(matches!(DimensionIndex::new(&[], bad), Err(Error::Config(_))));
        let sum = w.memory_type + w.location + w.keyword_phrase + w.keyword_token + w.anchor_token + 0.30;
        assert!(close(sum, 1.0));
    }
}
