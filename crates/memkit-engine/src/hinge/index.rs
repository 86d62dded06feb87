//! Query-adaptive retrieval over hyperedges.

use std::collections::{HashMap, HashSet};

use memkit_schema::{AnswerDim, Dialogue, Hyperedge, MemoryRecord, ParsedQuery, TimeSpan};
use serde::{Deserialize, Serialize};

use super::edges::{
    Node, NodeKind, SalienceWeights, build_hyperedges, describe, edge_nodes, merge_hyperedges, node_salience, unplaced_records,
};
use super::segment::Segmenter;
use crate::bm25::{Bm25Index, Bm25Params};
use crate::stopping::{QueryType, StopConfig, adaptive_stop, classify_query, sort_hits};
use crate::store::StoredNode;
use crate::text::{content_tokens, tokens};
use crate::{Hit, Result, Retriever};

/// Settings of [`HingeIndex`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HingeConfig {
    /// Merge hyperedges while field-aware Jaccard is strictly above this.
    pub merge_threshold: f32,
    /// Topic nodes per hyperedge.
    pub topics_per_edge: usize,
    /// Salience component weights.
    pub salience: SalienceWeights,
    /// λ_S: weight of the salience term Ω_S.
    pub salience_lambda: f32,
    /// λ_T: weight of the topic term Ω_T.
    pub topic_lambda: f32,
    /// Apply the adaptive stop (otherwise plain top-k, and [`HingeIndex::read`] opens
    /// `open_edges` hyperedges).
    pub adaptive: bool,
    /// Hyperedges [`HingeIndex::read`] opens when `adaptive` is off.
    pub open_edges: usize,
    /// Thresholds of the adaptive stop.
    pub stop: StopConfig,
    /// BM25 term-frequency saturation.
    pub k1: f32,
    /// BM25 length normalisation.
    pub b: f32,
    /// Token cap of a hyperedge's composed description (0: no description, members only).
    pub description_tokens: usize,
}

impl Default for HingeConfig {
    fn default() -> Self {
        HingeConfig {
            merge_threshold: 0.8,
            topics_per_edge: 3,
            salience: SalienceWeights::default(),
            salience_lambda: 0.5,
            topic_lambda: 0.2,
            adaptive: true,
            open_edges: 3,
            stop: StopConfig::default(),
            k1: 1.2,
            b: 0.75,
            description_tokens: 64,
        }
    }
}

/// Priority π of each element type for a query, in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ElementPriority {
    /// Persons.
    pub person: f32,
    /// Times.
    pub time: f32,
    /// Locations.
    pub location: f32,
    /// Topics.
    pub topic: f32,
}

impl ElementPriority {
    /// π of one kind.
    pub fn of(&self, kind: NodeKind) -> f32 {
        match kind {
            NodeKind::Person => self.person,
            NodeKind::Time => self.time,
            NodeKind::Location => self.location,
            NodeKind::Topic => self.topic,
        }
    }
}

/// Element priority for a query: every type starts at 0.5; the element the question asks for
/// rises to 1 (time for "when" / a time constraint, location for "where", person for "who");
/// recall queries gather every event of a topic (topic 1); judgment queries check what a person
/// did about something (person and topic at least 0.75).
pub fn element_priority(query: &ParsedQuery, query_type: QueryType) -> ElementPriority {
    let mut p = ElementPriority { person: 0.5, time: 0.5, location: 0.5, topic: 0.5 };
    match query.answer_dim {
        AnswerDim::Time => p.time = 1.0,
        AnswerDim::Location => p.location = 1.0,
        _ => {}
    }
    if query.time.is_some() {
        p.time = 1.0;
    }
    if !query.location.is_empty() {
        p.location = 1.0;
    }
    if tokens(&query.query_anchor).first().is_some_and(|w| w == "who" || w == "whom") {
        p.person = 1.0;
    }
    match query_type {
        QueryType::Recall => p.topic = 1.0,
        QueryType::Judgment => {
            p.person = p.person.max(0.75);
            p.topic = p.topic.max(0.75);
        }
        QueryType::Precision => {}
    }
    p
}

/// HingeMem's retriever over hyperedges.
///
/// For a query with type `τ` (from [`classify_query`] on the anchor unless given) and element
/// priority `π` ([`element_priority`]), each hyperedge `e` gets
///
/// - `ξ(e)`: BM25 of the query's content tokens (anchor, keywords, location) over the edge's
///   description, its members' contents and its node names, divided by the best `ξ` of the
///   query, so `ξ ∈ [0, 1]`;
/// - `Ω_S(e) = λ_S · Σ_{k∈K} π_k · max_{v ∈ M_k(e)} (1 + s(v))/2 / Σ_{k∈K} π_k`, where `M_k(e)`
///   are the edge's nodes of kind `k` that the query matches, `K` the kinds the query matches in
///   any hyperedge, and `s` is [`node_salience`]. A match is worth at least half, salience adds
///   the rest; one node per kind counts (many matching words are ξ's business); normalising over
///   `K` rather than all four kinds lets a query that only pins a time (plus a name everywhere)
///   still separate the hyperedges of that time. `Ω_S ∈ [0, λ_S]`;
/// - `Ω_T(e) = λ_T · mean_{t ∈ M_topic(e)} (r(t) − ½)` with rarity
///   `r(t) = ln(N / df(t)) / ln N ∈ [0, 1]` over the `N` hyperedges: a matched topic found in few
///   hyperedges adds up to `λ_T / 2`, one found in most subtracts up to `λ_T / 2` (0 without a
///   matched topic or when `N ≤ 1`);
///
/// and `ξ̂ = ξ + Ω_S + Ω_T`. Hyperedges with `ξ > 0` or a matched node are ranked by `ξ̂`, cut by
/// the adaptive stop for `τ`, then capped at `k`.
///
/// A node matches when: a person's name token is in the query; a topic word is in the query; all
/// tokens of a location are in the query (or in its location field); a time's day satisfies the
/// query's time constraint.
///
/// [`HingeIndex::read`] turns the ranking into what a reader takes under a budget: the parts of
/// the hyperedges (descriptions and member records), best first.
#[derive(Debug, Clone)]
pub struct HingeIndex {
    edges: Vec<Hyperedge>,
    nodes: Vec<Vec<Node>>,
    salience: HashMap<Node, f32>,
    topic_df: HashMap<String, usize>,
    bm25: Bm25Index,
    /// The member records of all hyperedges.
    records: Vec<MemoryRecord>,
    /// Per hyperedge: its members, as positions in `records`.
    members: Vec<Vec<usize>>,
    /// Per hyperedge: the members its description quotes in full.
    quoted: Vec<Vec<usize>>,
    /// Per member record: its hyperedge.
    record_edge: Vec<usize>,
    /// BM25 over the member records' contents.
    record_bm25: Bm25Index,
    config: HingeConfig,
}

/// A piece of a hyperedge that a reader takes: its description or one member record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// The description of the hyperedge at this position in [`HingeIndex::hyperedges`].
    Description(usize),
    /// The member record at this position in [`HingeIndex::records`].
    Member(usize),
}

/// What a reader takes for a query, best first ([`HingeIndex::read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// Parts of the opened hyperedges, then of the other matched ones.
    pub parts: Vec<Part>,
    /// How many of `parts` belong to the hyperedges the adaptive stop opened.
    pub opened_parts: usize,
    /// How many hyperedges the adaptive stop opened.
    pub opened_edges: usize,
}

impl HingeIndex {
    /// Segments a dialogue, builds hyperedges over its records (use
    /// [`crate::rule_extractor::raw_turn_records`] for raw turns), merges them, composes their
    /// descriptions within [`HingeConfig::description_tokens`] as `count` counts tokens, and
    /// indexes them.
    #[tracing::instrument(skip_all, fields(dialogue = %dialogue.id))]
    pub fn build(
        dialogue: &Dialogue,
        records: &[MemoryRecord],
        segmenter: &dyn Segmenter,
        config: HingeConfig,
        count: &dyn Fn(&str) -> usize,
    ) -> Result<Self> {
        let segments = segmenter.segment(dialogue)?;
        let unplaced = unplaced_records(dialogue, records);
        if unplaced > 0 {
            tracing::warn!(unplaced, records = records.len(), "records point at no turn of the dialogue; they join no hyperedge");
        }
        let edges = build_hyperedges(dialogue, &segments, records, config.topics_per_edge);
        let mut merged = merge_hyperedges(edges, config.merge_threshold);
        let by_id: HashMap<&str, &MemoryRecord> = records.iter().map(|r| (r.id.as_str(), r)).collect();
        for edge in &mut merged {
            let members: Vec<&MemoryRecord> = edge.members.iter().filter_map(|id| by_id.get(id.as_str()).copied()).collect();
            edge.description =
                if config.description_tokens > 0 { describe(edge, &members, config.description_tokens, count).text } else { String::new() };
        }
        tracing::debug!(segments = segments.len(), hyperedges = merged.len(), "built hyperedges");
        Ok(Self::from_hyperedges(merged, records, config, count))
    }

    /// Indexes hyperedges as they are (e.g. loaded from a store) with the records their
    /// `members` name (ids not among `records` are skipped); computes salience and which members
    /// each description quotes.
    pub fn from_hyperedges(edges: Vec<Hyperedge>, records: &[MemoryRecord], config: HingeConfig, count: &dyn Fn(&str) -> usize) -> Self {
        let nodes: Vec<Vec<Node>> = edges.iter().map(edge_nodes).collect();
        let salience = node_salience(&edges, &config.salience);
        let mut topic_df: HashMap<String, usize> = HashMap::new();
        for list in &nodes {
            for n in list.iter().filter(|n| n.kind == NodeKind::Topic) {
                *topic_df.entry(n.name.clone()).or_default() += 1;
            }
        }
        let by_id: HashMap<&str, &MemoryRecord> = records.iter().map(|r| (r.id.as_str(), r)).collect();
        let mut kept: Vec<MemoryRecord> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::with_capacity(edges.len());
        let mut quoted: Vec<Vec<usize>> = Vec::with_capacity(edges.len());
        for edge in &edges {
            let mine: Vec<&MemoryRecord> = edge.members.iter().filter_map(|id| by_id.get(id.as_str()).copied()).collect();
            let first = kept.len();
            kept.extend(mine.iter().map(|r| (*r).clone()));
            members.push((first..kept.len()).collect());
            // The description quotes what `describe` chose; recomputing it tells which members.
            let described = describe(edge, &mine, config.description_tokens, count);
            let q = if !edge.description.is_empty() && described.text == edge.description {
                described.quoted.iter().map(|&i| first + i).collect()
            } else {
                Vec::new()
            };
            quoted.push(q);
        }
        let docs: Vec<Vec<String>> = edges
            .iter()
            .zip(&nodes)
            .zip(&members)
            .map(|((e, ns), ms)| {
                let mut t = content_tokens(&e.description);
                t.extend(ms.iter().flat_map(|&m| content_tokens(&kept[m].content)));
                t.extend(ns.iter().flat_map(|n| content_tokens(&n.name)));
                t
            })
            .collect();
        let mut bm25 = Bm25Index::new(Bm25Params { k1: config.k1, b: config.b });
        for doc in &docs {
            bm25.add_terms(doc);
        }
        let mut record_bm25 = Bm25Index::new(Bm25Params { k1: config.k1, b: config.b });
        for r in &kept {
            record_bm25.add_terms(&content_tokens(&r.content));
        }
        let mut record_edge = vec![0; kept.len()];
        for (e, ms) in members.iter().enumerate() {
            for &m in ms {
                record_edge[m] = e;
            }
        }
        HingeIndex { edges, nodes, salience, topic_df, bm25, records: kept, members, quoted, record_edge, record_bm25, config }
    }

    /// The indexed hyperedges; a [`Hit::doc`] indexes this slice.
    pub fn hyperedges(&self) -> &[Hyperedge] {
        &self.edges
    }

    /// The member records of all hyperedges; a [`Part::Member`] indexes this slice.
    pub fn records(&self) -> &[MemoryRecord] {
        &self.records
    }

    /// The turn ids a part points to: a member's pointer, or the pointers of the members a
    /// description quotes (none when it quotes none).
    pub fn part_turn_ids(&self, part: Part) -> Vec<String> {
        match part {
            Part::Member(r) => self.records[r].pointer.turn_ids.clone(),
            Part::Description(e) => {
                let mut out: Vec<String> = Vec::new();
                for t in self.quoted[e].iter().flat_map(|&r| &self.records[r].pointer.turn_ids) {
                    if !out.contains(t) {
                        out.push(t.clone());
                    }
                }
                out
            }
        }
    }

    /// The dataset turn ids a hit covers (for evidence recall).
    pub fn turn_ids(&self, doc: usize) -> &[String] {
        &self.edges[doc].turn_ids
    }

    /// The turn ids of several hits, in hit order, without repeats.
    pub fn hit_turn_ids(&self, hits: &[Hit]) -> Vec<String> {
        let mut seen = HashSet::new();
        hits.iter().flat_map(|h| self.turn_ids(h.doc)).filter(|t| seen.insert(t.as_str())).cloned().collect()
    }

    /// Salience of a node (0 when absent).
    pub fn salience(&self, node: &Node) -> f32 {
        self.salience.get(node).copied().unwrap_or(0.0)
    }

    /// Every node with its salience, sorted, ready for [`crate::store::MemoryStore::put_nodes`].
    pub fn stored_nodes(&self) -> Vec<StoredNode> {
        let mut out: Vec<StoredNode> =
            self.salience.iter().map(|(n, &s)| StoredNode { kind: n.kind, name: n.name.clone(), salience: s }).collect();
        out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        out
    }

    /// Ranks hyperedges for a query of a known type (see the type docs for the scores).
    pub fn search_typed(&self, query: &ParsedQuery, query_type: QueryType, k: usize) -> Result<Vec<Hit>> {
        if self.edges.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let hits = self.score_edges(query, query_type);
        let mut ranked = if self.config.adaptive {
            adaptive_stop(&hits, query_type, &self.config.stop)
        } else {
            let mut hits = hits;
            sort_hits(&mut hits);
            hits
        };
        ranked.truncate(k);
        Ok(ranked)
    }

    /// What a reader takes for a query of a known type, best first.
    ///
    /// The hyperedges are ranked by `ξ̂` and the adaptive stop for `τ` opens the first `n` of
    /// them ([`HingeConfig::open_edges`] when [`HingeConfig::adaptive`] is off). Each member record gets
    /// `ξ̂(e) / max ξ̂ + bm25(m) / max bm25`: its hyperedge's score plus its own BM25 against the
    /// query over all members, both scaled to `[0, 1]`. The members of the opened hyperedges come
    /// first, best first, then those of the other matched hyperedges. A hyperedge's description
    /// comes right before its first member, or where its best quoted member would be; members
    /// the description quotes are not repeated. So a budget takes the best parts first and never
    /// needs a whole segment to fit.
    pub fn read(&self, query: &ParsedQuery, query_type: QueryType) -> Reading {
        let mut hits = self.score_edges(query, query_type);
        sort_hits(&mut hits);
        let opened_edges = if self.config.adaptive {
            adaptive_stop(&hits, query_type, &self.config.stop).len()
        } else {
            self.config.open_edges.min(hits.len())
        };
        let record_scores = self.record_bm25.scores(&query_terms(query));
        let max_record = record_scores.iter().copied().fold(0.0f32, f32::max);
        let max_edge = hits.first().map_or(0.0, |h| h.score);
        let scale = |x: f32, max: f32| if max > 0.0 { x / max } else { 0.0 };

        let mut parts = Vec::new();
        let mut opened_parts = 0;
        for (group, edge_hits) in [&hits[..opened_edges], &hits[opened_edges..]].into_iter().enumerate() {
            // (score, edge rank, position, part): descriptions sort before members on ties.
            let mut scored: Vec<(f32, usize, usize, Part)> = Vec::new();
            for (rank, hit) in edge_hits.iter().enumerate() {
                let e = hit.doc;
                let edge_score = scale(hit.score, max_edge);
                let quoted = &self.quoted[e];
                let best_quoted = quoted.iter().map(|&r| scale(record_scores[r], max_record)).fold(f32::NEG_INFINITY, f32::max);
                if !self.edges[e].description.is_empty() {
                    scored.push((edge_score + best_quoted.max(0.0), rank, 0, Part::Description(e)));
                }
                for (pos, &r) in self.members[e].iter().enumerate().filter(|(_, r)| !quoted.contains(r)) {
                    scored.push((edge_score + scale(record_scores[r], max_record), rank, pos + 1, Part::Member(r)));
                }
            }
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            let mut described: HashSet<usize> = HashSet::new();
            for (_, _, _, part) in scored {
                let edge = match part {
                    Part::Description(e) => e,
                    Part::Member(r) => self.record_edge[r],
                };
                if described.insert(edge) && !self.edges[edge].description.is_empty() {
                    parts.push(Part::Description(edge));
                }
                if let Part::Member(_) = part {
                    parts.push(part);
                }
            }
            if group == 0 {
                opened_parts = parts.len();
            }
        }
        Reading { parts, opened_parts, opened_edges }
    }

    /// `ξ̂` of every hyperedge the query reaches (`ξ > 0` or a matched node), unsorted.
    fn score_edges(&self, query: &ParsedQuery, query_type: QueryType) -> Vec<Hit> {
        let terms = query_terms(query);
        let term_set: HashSet<&str> = terms.iter().map(String::as_str).collect();

        let base = self.bm25.scores(&terms);
        let max_base = base.iter().copied().fold(0.0f32, f32::max);
        let priority = element_priority(query, query_type);
        let n = self.edges.len() as f32;
        let location_query = query.location.to_lowercase();

        let matched_per_edge: Vec<Vec<&Node>> =
            self.nodes.iter().map(|nodes| nodes.iter().filter(|v| node_matches(v, &term_set, query, &location_query)).collect()).collect();
        let query_kinds: Vec<NodeKind> =
            NodeKind::ALL.into_iter().filter(|&k| matched_per_edge.iter().flatten().any(|v| v.kind == k)).collect();
        let priority_sum: f32 = query_kinds.iter().map(|&k| priority.of(k)).sum();

        let mut hits = Vec::new();
        for (doc, matched) in matched_per_edge.iter().enumerate() {
            if base[doc] <= 0.0 && matched.is_empty() {
                continue;
            }
            let xi = if max_base > 0.0 { base[doc] / max_base } else { 0.0 };
            let omega_s = if priority_sum > 0.0 {
                self.config.salience_lambda
                    * query_kinds
                        .iter()
                        .map(|&kind| {
                            let best =
                                matched.iter().filter(|v| v.kind == kind).map(|v| (1.0 + self.salience(v)) / 2.0).fold(0.0f32, f32::max);
                            priority.of(kind) * best
                        })
                        .sum::<f32>()
                    / priority_sum
            } else {
                0.0
            };
            let rarities: Vec<f32> = matched
                .iter()
                .filter(|v| v.kind == NodeKind::Topic)
                .map(|v| {
                    let df = self.topic_df.get(&v.name).copied().unwrap_or(1).max(1) as f32;
                    (n / df).ln() / n.ln()
                })
                .collect();
            let omega_t = if n > 1.0 && !rarities.is_empty() {
                self.config.topic_lambda * (rarities.iter().sum::<f32>() / rarities.len() as f32 - 0.5)
            } else {
                0.0
            };
            hits.push(Hit { doc, score: xi + omega_s + omega_t });
        }
        hits
    }
}

/// The query's content tokens (anchor, keywords, location), each once.
fn query_terms(query: &ParsedQuery) -> Vec<String> {
    let mut terms: Vec<String> = content_tokens(&query.query_anchor);
    terms.extend(query.keywords.iter().flat_map(|k| content_tokens(k)));
    terms.extend(content_tokens(&query.location));
    let mut seen = HashSet::new();
    terms.retain(|t| seen.insert(t.clone()));
    terms
}

fn node_matches(v: &Node, terms: &HashSet<&str>, query: &ParsedQuery, location_query: &str) -> bool {
    match v.kind {
        NodeKind::Person => tokens(&v.name).iter().any(|t| terms.contains(t.as_str())),
        NodeKind::Topic => terms.contains(v.name.as_str()),
        NodeKind::Location => {
            let toks = content_tokens(&v.name);
            (!toks.is_empty() && toks.iter().all(|t| terms.contains(t.as_str())))
                || (!location_query.is_empty() && (v.name.contains(location_query) || location_query.contains(&v.name)))
        }
        NodeKind::Time => match (&query.time, v.name.parse::<TimeSpan>()) {
            (Some(c), Ok(span)) => c.matches(&span),
            _ => false,
        },
    }
}

impl Retriever for HingeIndex {
    fn name(&self) -> &str {
        "hinge"
    }

    /// Classifies the anchor's query type, then [`HingeIndex::search_typed`].
    fn search(&self, query: &ParsedQuery, k: usize) -> Result<Vec<Hit>> {
        self.search_typed(query, classify_query(&query.query_anchor), k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_scores_follow_the_spec_bm25_formula() {
        let docs = [vec!["dog".to_string(), "park".to_string()], vec!["cat".to_string()]];
        let mut bm = Bm25Index::new(Bm25Params { k1: 1.2, b: 0.75 });
        docs.iter().for_each(|d| _ = bm.add_terms(d));
        let s = bm.scores(&["dog".to_string()]);
        // N=2, df=1: idf = ln(1 + 1.5/1.5) = ln 2; len 2, avg 1.5: norm = 0.25 + 0.75·2/1.5 = 1.25;
        // tf part = 1·2.2 / (1 + 1.2·1.25) = 0.88.
        assert!((s[0] - 2f32.ln() * 0.88).abs() < 1e-5);
        assert_eq!(s[1], 0.0);
    }

    #[test]
    fn priority_follows_the_question() {
        let q = ParsedQuery { query_anchor: "When did Ann move?".into(), answer_dim: AnswerDim::Time, ..Default::default() };
        let p = element_priority(&q, QueryType::Precision);
        assert_eq!((p.time, p.person, p.topic), (1.0, 0.5, 0.5));
        let q = ParsedQuery { query_anchor: "Who gave Ann the book?".into(), ..Default::default() };
        assert_eq!(element_priority(&q, QueryType::Recall).person, 1.0);
        assert_eq!(element_priority(&q, QueryType::Recall).topic, 1.0);
    }
}
