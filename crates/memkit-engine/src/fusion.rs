//! Fusing the routes' ranked lists, and [`TriPath`]: DimMem's BM25 + dense + dimension retrieval.
//!
//! Three [`Fusion`] strategies, all deduplicating by document and by normalised content
//! ([`crate::text::dedup_key`]), keeping the first occurrence:
//!
//! - [`Fusion::DedupConcat`] (DimMem's default): each route's top `per_route_k` (15) concatenated
//!   in route order (BM25, dense, dimension), capped at `cap` (45). The output keeps that order;
//!   each hit's score is the best min-max-normalised route score the record got, in `[0, 1]`, for
//!   the adaptive stopping that may follow.
//! - [`Fusion::Rrf`]: reciprocal rank fusion, `Σ 1 / (k + rank)` with `k = 60`, rank from 1.
//! - [`Fusion::Weighted`]: `Σ w_route · minmax_route(score)` over the routes that found the record.
//!
//! Recipes pick one with a `kind` tag:
//!
//! ```
//! use memkit_engine::fusion::Fusion;
//! let f: Fusion = serde_json::from_str(r#"{"kind": "rrf"}"#).unwrap();
//! assert_eq!(f, Fusion::Rrf { k: 60.0, per_route_k: 15, cap: 45 });
//! ```

use std::collections::{HashMap, HashSet};

use memkit_schema::{MemoryRecord, ParsedQuery};
use serde::{Deserialize, Serialize};
use tracing::instrument;

use crate::bm25::{Bm25Index, Bm25Params, sort_hits};
use crate::dense::{DenseIndex, Embedder};
use crate::dimension::{DimensionIndex, DimensionWeights};
use crate::text::dedup_key;
use crate::{Error, Hit, Result, Retriever};

/// The three routes of DimMem's tri-path retrieval, in fusion order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// Lexical BM25.
    Bm25,
    /// Embedding cosine.
    Dense,
    /// Dimension match.
    Dimension,
}

/// One route's ranked hits.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteHits {
    /// Which route.
    pub route: Route,
    /// Best first.
    pub hits: Vec<Hit>,
}

/// Per-route weights of [`Fusion::Weighted`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouteWeights {
    /// BM25 weight.
    pub bm25: f32,
    /// Dense weight.
    pub dense: f32,
    /// Dimension-match weight.
    pub dimension: f32,
}

impl Default for RouteWeights {
    fn default() -> Self {
        RouteWeights { bm25: 1.0, dense: 1.0, dimension: 1.0 }
    }
}

impl RouteWeights {
    fn get(&self, route: Route) -> f32 {
        match route {
            Route::Bm25 => self.bm25,
            Route::Dense => self.dense,
            Route::Dimension => self.dimension,
        }
    }
}

fn default_per_route_k() -> usize {
    15
}
fn default_cap() -> usize {
    45
}
fn default_rrf_k() -> f32 {
    60.0
}

/// How the routes' lists become one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fusion {
    /// DimMem: concatenate each route's top `per_route_k` in route order, dedup, cap.
    DedupConcat {
        /// Hits taken from each route.
        #[serde(default = "default_per_route_k")]
        per_route_k: usize,
        /// Most hits returned.
        #[serde(default = "default_cap")]
        cap: usize,
    },
    /// Reciprocal rank fusion.
    Rrf {
        /// The RRF constant (60 in Cormack et al., 2009).
        #[serde(default = "default_rrf_k")]
        k: f32,
        /// Hits taken from each route.
        #[serde(default = "default_per_route_k")]
        per_route_k: usize,
        /// Most hits returned.
        #[serde(default = "default_cap")]
        cap: usize,
    },
    /// Weighted sum of min-max-normalised route scores.
    Weighted {
        /// Route weights.
        #[serde(default)]
        weights: RouteWeights,
        /// Hits taken from each route.
        #[serde(default = "default_per_route_k")]
        per_route_k: usize,
        /// Most hits returned.
        #[serde(default = "default_cap")]
        cap: usize,
    },
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::DedupConcat { per_route_k: default_per_route_k(), cap: default_cap() }
    }
}

/// Min-max normalised scores of a list: best 1, worst 0; a list of equal scores is all 1.
fn min_max(hits: &[Hit]) -> Vec<f32> {
    let (lo, hi) = hits.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), h| (lo.min(h.score), hi.max(h.score)));
    hits.iter().map(|h| if hi > lo { (h.score - lo) / (hi - lo) } else { 1.0 }).collect()
}

impl Fusion {
    /// Hits each route should return.
    pub fn per_route_k(&self) -> usize {
        match self {
            Fusion::DedupConcat { per_route_k, .. } | Fusion::Rrf { per_route_k, .. } | Fusion::Weighted { per_route_k, .. } => {
                *per_route_k
            }
        }
    }

    /// Most hits the fused list holds.
    pub fn cap(&self) -> usize {
        match self {
            Fusion::DedupConcat { cap, .. } | Fusion::Rrf { cap, .. } | Fusion::Weighted { cap, .. } => *cap,
        }
    }

    /// Checks the settings (positive sizes, finite non-negative weights and RRF constant).
    pub fn validate(&self) -> Result<()> {
        if self.per_route_k() == 0 || self.cap() == 0 {
            return Err(Error::Config(format!("fusion: per_route_k ({}) and cap ({}) must be at least 1", self.per_route_k(), self.cap())));
        }
        match self {
            Fusion::Rrf { k, .. } if !k.is_finite() || *k < 0.0 => {
                Err(Error::Config(format!("fusion: rrf k = {k} must be finite and ≥ 0")))
            }
            Fusion::Weighted { weights: w, .. } if [w.bm25, w.dense, w.dimension].iter().any(|x| !x.is_finite() || *x < 0.0) => {
                Err(Error::Config(format!("fusion: route weights {w:?} must be finite and ≥ 0")))
            }
            _ => Ok(()),
        }
    }

    /// Fuses route lists (in route order) into one list. `dedup_keys[doc]` is the normalised
    /// content of each document ([`crate::text::dedup_key`]); documents past its end are
    /// deduplicated by number only.
    pub fn fuse(&self, routes: &[RouteHits], dedup_keys: &[String]) -> Vec<Hit> {
        let k = self.per_route_k();
        let lists: Vec<(Route, &[Hit])> = routes.iter().map(|r| (r.route, &r.hits[..r.hits.len().min(k)])).collect();
        let mut fused: Vec<Hit> = match self {
            Fusion::DedupConcat { .. } => {
                let mut best: HashMap<usize, f32> = HashMap::new();
                let mut order: Vec<usize> = Vec::new();
                for (_, hits) in &lists {
                    for (h, s) in hits.iter().zip(min_max(hits)) {
                        let e = best.entry(h.doc).or_insert_with(|| {
                            order.push(h.doc);
                            s
                        });
                        *e = e.max(s);
                    }
                }
                // Keeps concatenation order: the list is not re-sorted.
                let out = order.into_iter().map(|doc| Hit { doc, score: best[&doc] }).collect();
                return dedup(out, dedup_keys, self.cap());
            }
            Fusion::Rrf { k: c, .. } => {
                let mut score: HashMap<usize, f32> = HashMap::new();
                for (_, hits) in &lists {
                    for (rank, h) in hits.iter().enumerate() {
                        *score.entry(h.doc).or_default() += 1.0 / (c + rank as f32 + 1.0);
                    }
                }
                score.into_iter().map(|(doc, score)| Hit { doc, score }).collect()
            }
            Fusion::Weighted { weights, .. } => {
                let mut score: HashMap<usize, f32> = HashMap::new();
                for (route, hits) in &lists {
                    for (h, s) in hits.iter().zip(min_max(hits)) {
                        *score.entry(h.doc).or_default() += weights.get(*route) * s;
                    }
                }
                score.into_iter().map(|(doc, score)| Hit { doc, score }).collect()
            }
        };
        sort_hits(&mut fused, usize::MAX);
        dedup(fused, dedup_keys, self.cap())
    }
}

/// Drops later hits whose content repeats an earlier one's, then caps.
fn dedup(hits: Vec<Hit>, dedup_keys: &[String], cap: usize) -> Vec<Hit> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for h in hits {
        if let Some(key) = dedup_keys.get(h.doc)
            && !seen.insert(key.as_str())
        {
            continue;
        }
        out.push(h);
        if out.len() == cap {
            break;
        }
    }
    out
}

/// Settings of [`TriPath`], as they appear in a recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TriPathConfig {
    /// The routes to run, in fusion order (dedup-concat takes them in this order). Default
    /// `["bm25", "dimension"]`, the routes that need no model; DimMem's tri-path is
    /// `["bm25", "dense", "dimension"]`, which needs a dense index ([`TriPath::with_dense`]).
    /// Fewer routes give the ablations (a route alone, pairs).
    pub routes: Vec<Route>,
    /// BM25 parameters.
    pub bm25: Bm25Params,
    /// Dimension-match weights.
    pub dimension: DimensionWeights,
    /// Fusion strategy.
    pub fusion: Fusion,
}

impl Default for TriPathConfig {
    fn default() -> Self {
        TriPathConfig {
            routes: vec![Route::Bm25, Route::Dimension],
            bm25: Bm25Params::default(),
            dimension: DimensionWeights::default(),
            fusion: Fusion::default(),
        }
    }
}

impl TriPathConfig {
    /// memkit's retrieval, what `memkit query` runs: BM25 + dense (all-MiniLM-L6-v2) when the
    /// embedder is there, else BM25 alone; weighted fusion of min-max-normalised scores (weights
    /// 1), 400 hits from each route, 400 kept; no adaptive stop.
    ///
    /// Chosen on held-out questions (`reports/longmemeval-oracle-heldout-routes/`: the 281
    /// non-abstention LongMemEval oracle questions outside the reported S subset, rule
    /// sentences), evidence recall at 250 / 500 / 1,000 tokens: BM25 + dense weighted 0.820 /
    /// 0.864 / 0.883, RRF 0.817 / 0.862 / 0.884, the tri-path weighted 0.811 / 0.867 / 0.883,
    /// DimMem's dedup-concat 15/45 0.803 / 0.856 / 0.878, dense alone 0.805 / 0.861 / 0.882; without
    /// the embedder BM25 alone 0.803 / 0.857 / 0.881 against BM25 + dimension 0.800 / 0.854 /
    /// 0.880. The adaptive stop returned lists that reached 0.617 at any budget.
    pub fn recommended(dense: bool) -> Self {
        let routes = if dense { vec![Route::Bm25, Route::Dense] } else { vec![Route::Bm25] };
        let fusion = Fusion::Weighted { weights: RouteWeights::default(), per_route_k: 400, cap: 400 };
        TriPathConfig { routes, fusion, ..TriPathConfig::default() }
    }

    /// Checks the routes (at least one, none twice) and the fusion settings.
    pub fn validate(&self) -> Result<()> {
        if self.routes.is_empty() {
            return Err(Error::Config("routes: name at least one of \"bm25\", \"dense\", \"dimension\"".into()));
        }
        if let Some(r) = self.routes.iter().enumerate().find_map(|(i, r)| self.routes[..i].contains(r).then_some(r)) {
            return Err(Error::Config(format!("routes: {r:?} is listed twice")));
        }
        self.fusion.validate()
    }

    /// True when the dense route is on (it needs an embedder).
    pub fn uses_dense(&self) -> bool {
        self.routes.contains(&Route::Dense)
    }
}

/// DimMem's tri-path retrieval over one corpus: BM25, optional dense, dimension match, fused.
pub struct TriPath {
    routes: Vec<Route>,
    bm25: Bm25Index,
    dense: Option<DenseIndex<Box<dyn Embedder>>>,
    dimension: DimensionIndex,
    dedup_keys: Vec<String>,
    fusion: Fusion,
}

impl std::fmt::Debug for TriPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriPath")
            .field("len", &self.len())
            .field("routes", &self.routes)
            .field("dense", &self.dense)
            .field("fusion", &self.fusion)
            .finish()
    }
}

impl TriPath {
    /// Indexes the records for the BM25 and dimension routes; a configuration with the dense
    /// route needs [`TriPath::with_dense`] before it can search.
    pub fn new(records: &[MemoryRecord], config: TriPathConfig) -> Result<Self> {
        config.validate()?;
        let mut bm25 = Bm25Index::new(config.bm25);
        for r in records {
            bm25.add_record(r);
        }
        Ok(TriPath {
            routes: config.routes,
            bm25,
            dense: None,
            dimension: DimensionIndex::new(records, config.dimension)?,
            dedup_keys: records.iter().map(|r| dedup_key(&r.content)).collect(),
            fusion: config.fusion,
        })
    }

    /// Adds the dense index; it must hold one vector per record, in the same order, and the
    /// configuration must name the dense route.
    pub fn with_dense(mut self, dense: DenseIndex<Box<dyn Embedder>>) -> Result<Self> {
        if !self.routes.contains(&Route::Dense) {
            return Err(Error::Config(format!("a dense index was given but the routes {:?} do not name \"dense\"", self.routes)));
        }
        if dense.len() != self.len() {
            return Err(Error::Config(format!(
                "dense index of {} ({} vectors) does not match the {} records",
                dense.embedder().model_id(),
                dense.len(),
                self.len()
            )));
        }
        self.dense = Some(dense);
        Ok(self)
    }

    /// Adds one record to every route (embedding it when the dense route is on).
    pub fn add(&mut self, record: &MemoryRecord) -> Result<usize> {
        if let Some(dense) = &mut self.dense {
            dense.add_records(std::slice::from_ref(record), 1)?;
        }
        self.dimension.add(record);
        self.dedup_keys.push(dedup_key(&record.content));
        Ok(self.bm25.add_record(record))
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.bm25.len()
    }

    /// True when there is no record.
    pub fn is_empty(&self) -> bool {
        self.bm25.is_empty()
    }

    /// The fusion in use.
    pub fn fusion(&self) -> &Fusion {
        &self.fusion
    }

    /// The routes in use, in fusion order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Each route's top hits (`per_route_k` of the fusion), in route order.
    pub fn route_hits(&self, query: &ParsedQuery) -> Result<Vec<RouteHits>> {
        let k = self.fusion.per_route_k();
        self.routes
            .iter()
            .map(|&route| {
                let hits = match route {
                    Route::Bm25 => self.bm25.search(query, k)?,
                    Route::Dimension => self.dimension.search(query, k)?,
                    Route::Dense => match &self.dense {
                        Some(dense) => dense.search(query, k)?,
                        None => {
                            return Err(Error::Config(
                                "the routes name \"dense\" but no dense index was added (TriPath::with_dense)".into(),
                            ));
                        }
                    },
                };
                Ok(RouteHits { route, hits })
            })
            .collect()
    }
}

impl Retriever for TriPath {
    fn name(&self) -> &str {
        "tri_path"
    }

    /// The fused list (at most `min(k, cap)` hits). With [`Fusion::DedupConcat`] the order is
    /// the concatenation order, not the score order.
    #[instrument(skip_all, fields(k))]
    fn search(&self, query: &ParsedQuery, k: usize) -> Result<Vec<Hit>> {
        let mut hits = self.fusion.fuse(&self.route_hits(query)?, &self.dedup_keys);
        hits.truncate(k);
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dense::HashingEmbedder;
    use memkit_schema::{Dimensions, MemoryType};

    fn hits(pairs: &[(usize, f32)]) -> Vec<Hit> {
        pairs.iter().map(|&(doc, score)| Hit { doc, score }).collect()
    }

    fn routes() -> Vec<RouteHits> {
        vec![
            RouteHits { route: Route::Bm25, hits: hits(&[(0, 9.0), (1, 5.0), (2, 1.0)]) },
            RouteHits { route: Route::Dense, hits: hits(&[(3, 0.9), (0, 0.8), (4, 0.1)]) },
            RouteHits { route: Route::Dimension, hits: hits(&[(5, 1.0), (1, 0.5)]) },
        ]
    }

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("content {i}")).collect()
    }

    fn docs(h: &[Hit]) -> Vec<usize> {
        h.iter().map(|h| h.doc).collect()
    }

    #[test]
    fn dedup_concat_keeps_route_order_and_best_normalised_score() {
        let out = Fusion::default().fuse(&routes(), &keys(6));
        assert_eq!(docs(&out), [0, 1, 2, 3, 4, 5]);
        // doc 0: 1.0 in BM25; doc 1: max(0.5 from BM25, 0 from dimension); doc 4: last of dense.
        let scores: Vec<f32> = out.iter().map(|h| h.score).collect();
        assert_eq!(scores, [1.0, 0.5, 0.0, 1.0, 0.0, 1.0]);
        // per_route_k truncates each route before concatenating; cap truncates the result.
        let out = Fusion::DedupConcat { per_route_k: 1, cap: 45 }.fuse(&routes(), &keys(6));
        assert_eq!(docs(&out), [0, 3, 5]);
        let out = Fusion::DedupConcat { per_route_k: 15, cap: 2 }.fuse(&routes(), &keys(6));
        assert_eq!(docs(&out), [0, 1]);
    }

    #[test]
    fn dedup_uses_normalised_content() {
        let mut k = keys(6);
        k[3] = dedup_key("Content 0!");
        k[0] = dedup_key("content   0");
        let out = Fusion::default().fuse(&routes(), &k);
        assert_eq!(docs(&out), [0, 1, 2, 4, 5]);
    }

    #[test]
    fn rrf_sums_reciprocal_ranks() {
        let out = Fusion::Rrf { k: 60.0, per_route_k: 15, cap: 45 }.fuse(&routes(), &keys(6));
        // doc 0: 1/61 + 1/62; doc 1: 1/62 + 1/62; doc 3 and 5: 1/61.
        assert_eq!(docs(&out), [0, 1, 3, 5, 2, 4]);
        assert!((out[0].score - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-7);
        assert!((out[1].score - 2.0 / 62.0).abs() < 1e-7);
    }

    #[test]
    fn weighted_sums_min_max_scores() {
        let w = RouteWeights { bm25: 1.0, dense: 2.0, dimension: 0.5 };
        let out = Fusion::Weighted { weights: w, per_route_k: 15, cap: 45 }.fuse(&routes(), &keys(6));
        // doc 3: 2·1 = 2; doc 0: 1 + 2·0.875 = 2.75; doc 1: 0.5 + 0; doc 5: 0.5.
        assert_eq!(out[0].doc, 0);
        assert!((out[0].score - 2.75).abs() < 1e-6);
        assert_eq!(out[1].doc, 3);
        assert_eq!(docs(&out[2..4]), [1, 5]);
    }

    #[test]
    fn fusion_config_is_tagged_and_strict() {
        let f: Fusion = serde_json::from_str(r#"{"kind": "weighted", "weights": {"dense": 0.5}}"#).unwrap();
        assert_eq!(f, Fusion::Weighted { weights: RouteWeights { dense: 0.5, ..Default::default() }, per_route_k: 15, cap: 45 });
        assert_eq!(serde_json::from_str::<Fusion>(r#"{"kind": "dedup_concat"}"#).unwrap(), Fusion::default());
        assert!(serde_json::from_str::<Fusion>(r#"{"kind": "rrf", "kk": 3}"#).is_err());
        assert!(serde_json::from_str::<Fusion>(r#"{"kind": "max"}"#).is_err());
        assert!(Fusion::DedupConcat { per_route_k: 0, cap: 3 }.validate().is_err());
        let c: TriPathConfig = serde_json::from_str(r#"{"fusion": {"kind": "rrf", "k": 10}}"#).unwrap();
        assert_eq!(c.fusion, Fusion::Rrf { k: 10.0, per_route_k: 15, cap: 45 });
        assert_eq!(c.routes, [Route::Bm25, Route::Dimension]);
        let c: TriPathConfig = serde_json::from_str(r#"{"routes": ["dense"]}"#).unwrap();
        assert!(c.uses_dense() && c.validate().is_ok());
        assert!(serde_json::from_str::<TriPathConfig>(r#"{"routes": ["bm25", "sparse"]}"#).is_err());
        let twice: TriPathConfig = serde_json::from_str(r#"{"routes": ["bm25", "bm25"]}"#).unwrap();
        assert!(twice.validate().is_err());
        assert!(TriPathConfig { routes: vec![], ..Default::default() }.validate().is_err());
    }

    fn rec(t: MemoryType, content: &str, time: &str, keywords: &[&str]) -> MemoryRecord {
        MemoryRecord {
            id: content.into(),
            content: content.into(),
            memory_type: t,
            dims: Dimensions { time: time.into(), keywords: keywords.iter().map(|k| k.to_string()).collect(), ..Default::default() },
            pointer: Default::default(),
        }
    }

    #[test]
    fn tri_path_fuses_all_routes() {
        let records = vec![
            rec(MemoryType::Episodic, "Melanie ran a charity race.", "2023-05-20", &["charity race"]),
            rec(MemoryType::Profile, "Melanie loves running.", "", &["running"]),
            rec(MemoryType::Episodic, "Caroline went to a support group.", "2023-05-07", &["support group"]),
            rec(MemoryType::Episodic, "Melanie ran a charity race!", "2023-05-20", &["charity race"]),
        ];
        let mut tri = TriPath::new(&records, TriPathConfig::default()).unwrap();
        let q = ParsedQuery {
            query_anchor: "What did Caroline do in May 2023?".into(),
            keywords: vec!["Caroline".into()],
            time: Some("on 2023-05".parse().unwrap()),
            target_memory_type: vec![MemoryType::Episodic],
            ..Default::default()
        };
        let out = tri.search(&q, 10).unwrap();
        assert_eq!(out[0].doc, 2, "BM25 finds Caroline first");
        // The dimension route adds the other May episode; its duplicate (doc 3) is dropped.
        assert_eq!(docs(&out), [2, 0]);

        let all = TriPathConfig { routes: vec![Route::Bm25, Route::Dense, Route::Dimension], ..Default::default() };
        let dense = || DenseIndex::build(Box::new(HashingEmbedder::default()) as Box<dyn Embedder>, &records, 2).unwrap();
        // A dense index needs the dense route, a dense route needs the index, and it must cover every record.
        assert!(TriPath::new(&records, TriPathConfig::default()).unwrap().with_dense(dense()).is_err());
        let missing = TriPath::new(&records, all.clone()).unwrap();
        assert!(matches!(missing.search(&q, 10), Err(Error::Config(_))));
        let empty: Box<dyn Embedder> = Box::new(HashingEmbedder::default());
        assert!(TriPath::new(&records, all.clone()).unwrap().with_dense(DenseIndex::new(empty)).is_err());
        tri = TriPath::new(&records, all).unwrap().with_dense(dense()).unwrap();
        let routes = tri.route_hits(&q).unwrap();
        assert_eq!(routes.iter().map(|r| r.route).collect::<Vec<_>>(), [Route::Bm25, Route::Dense, Route::Dimension]);
        let out = tri.search(&q, 10).unwrap();
        // Dense returns every record, so the fused list now covers the corpus minus the duplicate.
        assert_eq!(out[0].doc, 2);
        let mut found = docs(&out);
        found.sort_unstable();
        assert_eq!(found, [0, 1, 2]);
        assert_eq!(tri.add(&rec(MemoryType::Fact, "Caroline is a counselor.", "", &[])).unwrap(), 4);
        assert_eq!(tri.search(&q, 1).unwrap().len(), 1);
    }
}
