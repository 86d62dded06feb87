//! Hyperedges over typed nodes: construction from segments, strict merging, node salience.

use std::collections::{BTreeMap, HashMap, HashSet};

use memkit_schema::{Dialogue, Hyperedge, MemoryRecord, Turn};
use serde::{Deserialize, Serialize};

use super::segment::{Segment, extract_locations};
use crate::text::{content_tokens, is_filler, is_vague};
use crate::update::jaccard;

/// The four element types HingeMem watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// A participant.
    Person,
    /// A day (`YYYY-MM-DD`).
    Time,
    /// A place.
    Location,
    /// A topic keyword.
    Topic,
}

impl NodeKind {
    /// All kinds, in a fixed order.
    pub const ALL: [NodeKind; 4] = [NodeKind::Person, NodeKind::Time, NodeKind::Location, NodeKind::Topic];

    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Person => "person",
            NodeKind::Time => "time",
            NodeKind::Location => "location",
            NodeKind::Topic => "topic",
        }
    }

    /// The kind named by [`NodeKind::as_str`].
    pub fn parse(s: &str) -> Option<NodeKind> {
        NodeKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// An element node: its kind and its normalised (lowercase) name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Node {
    /// Person, time, location or topic.
    pub kind: NodeKind,
    /// Lowercase name.
    pub name: String,
}

/// The nodes a hyperedge connects (lowercased, deduplicated, sorted).
pub fn edge_nodes(edge: &Hyperedge) -> Vec<Node> {
    let mut out: Vec<Node> = [
        (NodeKind::Person, &edge.persons),
        (NodeKind::Time, &edge.times),
        (NodeKind::Location, &edge.locations),
        (NodeKind::Topic, &edge.topics),
    ]
    .into_iter()
    .flat_map(|(kind, names)| names.iter().map(move |n| Node { kind, name: n.trim().to_lowercase() }))
    .filter(|n| !n.name.is_empty())
    .collect();
    out.sort();
    out.dedup();
    out
}

/// Words that are never a topic besides [`FILLER`](memkit_text::words::FILLER) and
/// [`VAGUE`](memkit_text::words::VAGUE): more common verbs, and words seen as spurious topics.
const NOT_TOPICS: &[&str] = &[
    "just",
    "sounds",
    "think",
    "going",
    "see",
    "make",
    "made",
    "feel",
    "things",
    "thing",
    "always",
    "still",
    "new",
    "want",
    "hear",
    "happy",
    "wonderful",
    "right",
];

/// One hyperedge per segment over the memory records extracted from its turns (raw-turn records
/// give one member per turn): the segment's speakers as persons, its message days and the
/// members' times as times, the members' locations and the places their contents cue as
/// locations, the `topics_per_edge` highest tf·idf content words of the members' contents and
/// keywords (idf across this dialogue's segments) as topics, the members' ids as `members` and
/// their pointers as `turn_ids`.
///
/// A record belongs to the segment of the first of its turns that the dialogue has; records
/// pointing at no turn of the dialogue are left out (see [`unplaced_records`]), and a segment
/// without records gets no hyperedge. The description is left empty: [`describe`] composes it
/// once merging has settled the members.
pub fn build_hyperedges(dialogue: &Dialogue, segments: &[Segment], records: &[MemoryRecord], topics_per_edge: usize) -> Vec<Hyperedge> {
    let turns: Vec<&Turn> = dialogue.turns().collect();
    let session_of: Vec<usize> = dialogue.sessions.iter().enumerate().flat_map(|(i, s)| std::iter::repeat_n(i, s.turns.len())).collect();
    let speakers: HashSet<String> = turns.iter().map(|t| t.speaker.to_lowercase()).collect();
    let mut segment_of: HashMap<&str, usize> = HashMap::new();
    for (k, seg) in segments.iter().enumerate() {
        for t in &turns[seg.turns.clone()] {
            segment_of.insert(t.id.as_str(), k);
        }
    }
    let mut members: Vec<Vec<&MemoryRecord>> = vec![Vec::new(); segments.len()];
    for r in records {
        if let Some(&k) = r.pointer.turn_ids.iter().find_map(|t| segment_of.get(t.as_str())) {
            members[k].push(r);
        }
    }

    let seg_tokens: Vec<Vec<String>> = members
        .iter()
        .map(|rs| {
            rs.iter()
                .flat_map(|r| content_tokens(&r.content).into_iter().chain(r.dims.keywords.iter().flat_map(|k| content_tokens(k))))
                .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
                .filter(|w| !speakers.contains(w) && !is_filler(w) && !is_vague(w) && !NOT_TOPICS.contains(&w.as_str()))
                .collect()
        })
        .collect();
    let mut df: HashMap<&str, usize> = HashMap::new();
    for toks in &seg_tokens {
        for w in toks.iter().map(String::as_str).collect::<HashSet<_>>() {
            *df.entry(w).or_default() += 1;
        }
    }
    let n = segments.iter().zip(&members).filter(|(_, m)| !m.is_empty()).count().max(1) as f32;

    segments
        .iter()
        .enumerate()
        .filter(|(k, _)| !members[*k].is_empty())
        .map(|(k, seg)| {
            let seg_turns = &turns[seg.turns.clone()];
            let mut persons: Vec<String> = Vec::new();
            let mut times: Vec<String> = Vec::new();
            let mut locations: Vec<String> = Vec::new();
            for (t, i) in seg_turns.iter().zip(seg.turns.clone()) {
                push_unique(&mut persons, &t.speaker);
                let day = t.timestamp.or(dialogue.sessions[session_of[i]].date).map(|d| d.format("%Y-%m-%d").to_string());
                if let Some(day) = day {
                    push_unique(&mut times, &day);
                }
            }
            let mut turn_ids: Vec<String> = Vec::new();
            for r in &members[k] {
                if !r.dims.time.is_empty() {
                    push_unique(&mut times, &r.dims.time);
                }
                if !r.dims.location.is_empty() {
                    push_unique(&mut locations, &r.dims.location);
                }
                for l in extract_locations(&r.content, &speakers) {
                    push_unique(&mut locations, &l);
                }
                for t in &r.pointer.turn_ids {
                    if !turn_ids.contains(t) {
                        turn_ids.push(t.clone());
                    }
                }
            }
            let mut tf: BTreeMap<&str, usize> = BTreeMap::new();
            for w in &seg_tokens[k] {
                *tf.entry(w).or_default() += 1;
            }
            let mut scored: Vec<(&str, f32)> = tf.into_iter().map(|(w, c)| (w, c as f32 * (1.0 + (n / df[w] as f32).ln()))).collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
            let topics = scored.into_iter().take(topics_per_edge).map(|(w, _)| w.to_string()).collect();
            Hyperedge {
                id: format!("{}/h{k}", dialogue.id),
                persons,
                times,
                locations,
                topics,
                description: String::new(),
                boundary_reason: seg.boundary_reason.as_str().to_string(),
                turn_ids,
                members: members[k].iter().map(|r| r.id.clone()).collect(),
            }
        })
        .collect()
}

/// How many records point at no turn of the dialogue (they join no hyperedge).
pub fn unplaced_records(dialogue: &Dialogue, records: &[MemoryRecord]) -> usize {
    let ids: HashSet<&str> = dialogue.turns().map(|t| t.id.as_str()).collect();
    records.iter().filter(|r| !r.pointer.turn_ids.iter().any(|t| ids.contains(t.as_str()))).count()
}

/// A hyperedge's compact description and the members it quotes in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    /// The text, at most the cap in tokens.
    pub text: String,
    /// Positions in the `members` given to [`describe`] of the records quoted, in that order.
    pub quoted: Vec<usize>,
}

/// Composes a hyperedge's description within `cap` tokens (as `count` counts them): a header of
/// its persons, days (first and last), locations, topics and member types, then the contents of
/// its most salient members (most of the edge's topic words, earlier first on ties) while they
/// fit, in dialogue order:
///
/// `Ann, Bob · 2023-05-08 · Lisbon · conference, talk · 2 episodic, 1 profile: Bob gave a talk…`
///
/// A header longer than the cap is cut at a word. Quoted members are listed in `quoted`, so a
/// reader can skip them once the description is read.
pub fn describe(edge: &Hyperedge, members: &[&MemoryRecord], cap: usize, count: &dyn Fn(&str) -> usize) -> Description {
    let mut fields: Vec<String> = Vec::new();
    if !edge.persons.is_empty() {
        fields.push(edge.persons.join(", "));
    }
    let mut days: Vec<&str> = edge.times.iter().map(String::as_str).filter(|t| !t.is_empty()).collect();
    days.sort_unstable();
    match days.as_slice() {
        [] => {}
        [one] => fields.push((*one).to_string()),
        [first, .., last] => fields.push(format!("{first} to {last}")),
    }
    if !edge.locations.is_empty() {
        fields.push(edge.locations.join(", "));
    }
    if !edge.topics.is_empty() {
        fields.push(edge.topics.join(", "));
    }
    let mut types: BTreeMap<&str, usize> = BTreeMap::new();
    for r in members {
        *types.entry(r.memory_type.as_str()).or_default() += 1;
    }
    if !types.is_empty() {
        fields.push(types.iter().map(|(t, n)| format!("{n} {t}")).collect::<Vec<_>>().join(", "));
    }
    let mut header = fields.join(" · ");
    while !header.is_empty() && count(&header) > cap {
        header = header.rsplit_once(' ').map_or(String::new(), |(h, _)| h.to_string());
    }

    let topics: HashSet<&str> = edge.topics.iter().map(String::as_str).collect();
    let mut salient: Vec<(usize, usize)> = members
        .iter()
        .enumerate()
        .map(|(i, r)| (i, content_tokens(&r.content).iter().filter(|w| topics.contains(w.as_str())).count()))
        .filter(|&(_, hits)| hits > 0)
        .collect();
    salient.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut quoted: Vec<usize> = Vec::new();
    let mut text = header.clone();
    for (i, _) in salient {
        let mut chosen = quoted.clone();
        chosen.push(i);
        chosen.sort_unstable();
        let candidate = compose(&header, members, &chosen);
        if count(&candidate) <= cap {
            quoted = chosen;
            text = candidate;
        }
    }
    Description { text, quoted }
}

fn compose(header: &str, members: &[&MemoryRecord], quoted: &[usize]) -> String {
    let body = quoted.iter().map(|&i| members[i].content.trim()).collect::<Vec<_>>().join(" ");
    match (header.is_empty(), body.is_empty()) {
        (_, true) => header.to_string(),
        (true, false) => body,
        (false, false) => format!("{header}: {body}"),
    }
}

fn push_unique(list: &mut Vec<String>, value: &str) {
    if !list.iter().any(|v| v.eq_ignore_ascii_case(value)) {
        list.push(value.to_string());
    }
}

fn lower_set(list: &[String]) -> HashSet<String> {
    list.iter().map(|s| s.trim().to_lowercase()).filter(|s| !s.is_empty()).collect()
}

/// Field-aware Jaccard of two hyperedges: the mean, over the fields (persons, times, locations,
/// topics) that at least one of them fills, of the Jaccard index of that field's node sets; 0
/// when neither fills any field.
pub fn field_jaccard(a: &Hyperedge, b: &Hyperedge) -> f32 {
    let fields = [(&a.persons, &b.persons), (&a.times, &b.times), (&a.locations, &b.locations), (&a.topics, &b.topics)];
    let scores: Vec<f32> =
        fields.iter().filter(|(x, y)| !x.is_empty() || !y.is_empty()).map(|(x, y)| jaccard(&lower_set(x), &lower_set(y))).collect();
    if scores.is_empty() { 0.0 } else { scores.iter().sum::<f32>() / scores.len() as f32 }
}

/// Merges hyperedges while some pair has field-aware Jaccard strictly above `threshold`
/// (HingeMem: 0.8). Each pass folds every edge into the first earlier kept edge it exceeds the
/// threshold with (fields united, descriptions, turn ids and members concatenated, the earlier id and
/// boundary reason kept); passes repeat until one changes nothing, so merges can cascade.
pub fn merge_hyperedges(edges: Vec<Hyperedge>, threshold: f32) -> Vec<Hyperedge> {
    let mut current = edges;
    loop {
        let before = current.len();
        let mut kept: Vec<Hyperedge> = Vec::with_capacity(before);
        for edge in current {
            match kept.iter_mut().find(|k| field_jaccard(k, &edge) > threshold) {
                Some(target) => absorb(target, edge),
                None => kept.push(edge),
            }
        }
        current = kept;
        if current.len() == before {
            return current;
        }
    }
}

fn absorb(target: &mut Hyperedge, edge: Hyperedge) {
    for (mine, theirs) in [
        (&mut target.persons, edge.persons),
        (&mut target.times, edge.times),
        (&mut target.locations, edge.locations),
        (&mut target.topics, edge.topics),
    ] {
        for v in theirs {
            push_unique(mine, &v);
        }
    }
    if !edge.description.is_empty() {
        if !target.description.is_empty() {
            target.description.push('\n');
        }
        target.description.push_str(&edge.description);
    }
    for t in edge.turn_ids {
        if !target.turn_ids.contains(&t) {
            target.turn_ids.push(t);
        }
    }
    for m in edge.members {
        if !target.members.contains(&m) {
            target.members.push(m);
        }
    }
}

/// Weights of the three salience components (normalised to sum 1; equal by default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SalienceWeights {
    /// Frequency: hyperedges containing the node.
    pub frequency: f32,
    /// Degree centrality: distinct nodes it co-occurs with.
    pub centrality: f32,
    /// Co-occurrence diversity: entropy of its co-occurrence counts over neighbours.
    pub diversity: f32,
}

impl Default for SalienceWeights {
    fn default() -> Self {
        SalienceWeights { frequency: 1.0, centrality: 1.0, diversity: 1.0 }
    }
}

/// Salience of every node of the hyperedges, in `[0, 1]`.
///
/// For node `v`: frequency `f(v)` = hyperedges containing `v`; degree centrality `d(v)` =
/// distinct other nodes sharing a hyperedge with `v`; diversity `h(v)` = Shannon entropy of
/// `v`'s co-occurrence counts over those neighbours (a node that meets many nodes evenly is more
/// of a hub than one that keeps meeting the same few). Each component is divided by its maximum
/// over all nodes, and salience is their weighted mean.
pub fn node_salience(edges: &[Hyperedge], weights: &SalienceWeights) -> HashMap<Node, f32> {
    let node_lists: Vec<Vec<Node>> = edges.iter().map(edge_nodes).collect();
    // Ordered maps: float sums in a fixed order give the same salience on every run.
    let mut frequency: BTreeMap<&Node, f32> = BTreeMap::new();
    let mut co: BTreeMap<&Node, BTreeMap<&Node, f32>> = BTreeMap::new();
    for nodes in &node_lists {
        for v in nodes {
            *frequency.entry(v).or_default() += 1.0;
            let row = co.entry(v).or_default();
            for u in nodes {
                if u != v {
                    *row.entry(u).or_default() += 1.0;
                }
            }
        }
    }
    let centrality: BTreeMap<&Node, f32> = co.iter().map(|(v, row)| (*v, row.len() as f32)).collect();
    let diversity: BTreeMap<&Node, f32> = co
        .iter()
        .map(|(v, row)| {
            let total: f32 = row.values().sum();
            let h = row.values().map(|c| c / total).map(|p| -p * p.ln()).sum::<f32>();
            (*v, if total > 0.0 { h } else { 0.0 })
        })
        .collect();
    let max_of = |m: &BTreeMap<&Node, f32>| m.values().copied().fold(0.0f32, f32::max);
    let (fmax, cmax, hmax) = (max_of(&frequency), max_of(&centrality), max_of(&diversity));
    let norm = |x: f32, max: f32| if max > 0.0 { x / max } else { 0.0 };
    let wsum = (weights.frequency + weights.centrality + weights.diversity).max(f32::MIN_POSITIVE);
    frequency
        .iter()
        .map(|(v, &f)| {
            let s = weights.frequency * norm(f, fmax)
                + weights.centrality * norm(centrality[v], cmax)
                + weights.diversity * norm(diversity[v], hmax);
            ((*v).clone(), s / wsum)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(persons: &[&str], times: &[&str], topics: &[&str]) -> Hyperedge {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        Hyperedge { persons: v(persons), times: v(times), topics: v(topics), ..Default::default() }
    }

    #[test]
    fn field_jaccard_averages_filled_fields() {
        let a = edge(&["Ann", "Bob"], &["2023-05-01"], &["dog", "park"]);
        let b = edge(&["ann", "bob"], &["2023-05-01"], &["dog", "walk"]);
        // persons 1, times 1, topics 1/3, locations skipped → (1 + 1 + 1/3) / 3.
        assert!((field_jaccard(&a, &b) - 7.0 / 9.0).abs() < 1e-6);
        assert_eq!(field_jaccard(&Hyperedge::default(), &Hyperedge::default()), 0.0);
    }

    #[test]
    fn merging_is_strict_and_cascades() {
        let a = edge(&["Ann"], &["2023-05-01"], &["dog", "park"]);
        let b = edge(&["Ann"], &["2023-05-01"], &["dog", "park"]);
        let c = edge(&["Ann"], &["2023-05-01"], &["dog", "walk"]); // 7/9 ≈ 0.78: not merged
        let mut a2 = a.clone();
        a2.turn_ids = vec!["x".into()];
        let merged = merge_hyperedges(vec![a, c, b, a2], 0.8);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].turn_ids, ["x"]);
    }

    #[test]
    fn salience_by_hand() {
        // Edges {A, t1} and {A, t2}: A has f=2, d=2, h=ln 2; t1, t2 have f=1, d=1, h=0.
        let edges = [edge(&["A"], &[], &["t1"]), edge(&["A"], &[], &["t2"])];
        let s = node_salience(&edges, &SalienceWeights::default());
        let a = s[&Node { kind: NodeKind::Person, name: "a".into() }];
        let t1 = s[&Node { kind: NodeKind::Topic, name: "t1".into() }];
        assert!((a - 1.0).abs() < 1e-6);
        assert!((t1 - (0.5 + 0.5 + 0.0) / 3.0).abs() < 1e-6);
    }
}
