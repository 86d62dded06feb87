//! Extraction agreement: how closely one extractor's records (a student's) follow another's (its
//! teacher's) on the same windows (SPEC §7).
//!
//! Records of a window are matched one-to-one, greedily by descending content similarity
//! (LoCoMo's token F1: normalised, Porter-stemmed tokens), keeping pairs with similarity ≥
//! [`MATCH_THRESHOLD`] and the same `source_id`. Record precision / recall / F1 count matched
//! pairs; per-field agreement is measured on the matched pairs only: memory type and time
//! exactly (after trimming and lower-casing), location / reason / purpose by token F1 ≥ 0.5 or
//! both empty, keywords by Jaccard overlap of the lower-cased sets.
//!
//! A score on a few dozen windows moves with the draw of the windows, so the F1 comes with its
//! 95% bootstrap interval over windows, and with where the unmatched records are: on windows the
//! reference left empty (none of them can match), or windows the candidate left empty.

use std::collections::{BTreeMap, HashSet};

use memkit_schema::ExtractedMemory;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::locomo_f1::f1_score;

/// Least content similarity (token F1) of a matched pair.
pub const MATCH_THRESHOLD: f64 = 0.5;

/// Resamples of the windows behind [`Agreement::f1_interval`] (seeded, so a score is repeatable).
pub const BOOTSTRAP_RESAMPLES: usize = 1000;

/// One window's records from both extractors; `candidate` is `None` when its reply did not
/// parse at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowPair<'a> {
    /// The reference (teacher) records.
    pub reference: &'a [ExtractedMemory],
    /// The candidate (student) records, or `None` for an unparsable reply.
    pub candidate: Option<&'a [ExtractedMemory]>,
}

/// Agreement over many windows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// Windows compared.
    pub windows: usize,
    /// Share of windows whose candidate reply parsed.
    pub json_validity: f64,
    /// Reference records.
    pub reference_records: usize,
    /// Candidate records (parsed windows).
    pub candidate_records: usize,
    /// Matched pairs.
    pub matched: usize,
    /// `matched / candidate_records`.
    pub precision: f64,
    /// `matched / reference_records`.
    pub recall: f64,
    /// Harmonic mean of precision and recall.
    pub f1: f64,
    /// Mean content similarity of matched pairs.
    pub content_similarity: f64,
    /// Per field (type, time, location, reason, purpose, keywords): mean agreement on matched pairs.
    pub fields: BTreeMap<String, f64>,
    /// Per field: agreement summed over matched pairs, per reference record (a field counts
    /// only where the record was found and the field agrees; `fields` × `recall`).
    #[serde(default)]
    pub field_recall: BTreeMap<String, f64>,
    /// The 95% bootstrap interval of `f1`: the 2.5th and 97.5th percentiles (nearest rank) of the
    /// F1 over [`BOOTSTRAP_RESAMPLES`] draws of as many windows, with replacement. How far the
    /// score could move on another sample of windows like these.
    #[serde(default)]
    pub f1_interval: [f64; 2],
    /// Windows whose reference has no record.
    #[serde(default)]
    pub reference_empty_windows: usize,
    /// Candidate records in those windows: all unmatched, a share of `1 - precision`.
    #[serde(default)]
    pub candidate_records_where_reference_empty: usize,
    /// Windows whose reference has records and whose candidate parsed with none.
    #[serde(default)]
    pub candidate_empty_windows: usize,
    /// Windows left out because the reference's own reply did not parse: their target is
    /// unknown, so they are neither compared nor counted in `windows`.
    #[serde(default)]
    pub reference_unparsable_windows: usize,
}

/// Compares candidate records with reference records window by window.
pub fn agreement(pairs: &[WindowPair<'_>]) -> Agreement {
    let mut out = Agreement { windows: pairs.len(), ..Agreement::default() };
    let mut parsed = 0;
    let mut similarity = 0.0;
    let mut field_sums: BTreeMap<&'static str, f64> = BTreeMap::new();
    // Per window: (matched, candidate records, reference records), for the interval.
    let mut counts = Vec::with_capacity(pairs.len());
    for pair in pairs {
        out.reference_records += pair.reference.len();
        out.reference_empty_windows += usize::from(pair.reference.is_empty());
        let Some(candidate) = pair.candidate else {
            counts.push([0, 0, pair.reference.len()]);
            continue;
        };
        parsed += 1;
        out.candidate_records += candidate.len();
        if pair.reference.is_empty() {
            out.candidate_records_where_reference_empty += candidate.len();
        } else if candidate.is_empty() {
            out.candidate_empty_windows += 1;
        }
        let matched = match_records(pair.reference, candidate);
        counts.push([matched.len(), candidate.len(), pair.reference.len()]);
        for (r, c, sim) in matched {
            out.matched += 1;
            similarity += sim;
            for (field, score) in field_agreement(r, c) {
                *field_sums.entry(field).or_default() += score;
            }
        }
    }
    let share = |n: f64, of: usize| if of == 0 { 0.0 } else { n / of as f64 };
    out.json_validity = share(parsed as f64, out.windows);
    out.precision = share(out.matched as f64, out.candidate_records);
    out.recall = share(out.matched as f64, out.reference_records);
    out.f1 = f1(out.matched, out.candidate_records, out.reference_records);
    out.f1_interval = f1_interval(&counts);
    out.content_similarity = share(similarity, out.matched);
    out.field_recall = field_sums.iter().map(|(k, v)| ((*k).to_owned(), share(*v, out.reference_records))).collect();
    out.fields = field_sums.into_iter().map(|(k, v)| (k.to_owned(), share(v, out.matched))).collect();
    out
}

/// Record F1 from counts: `2 · matched / (candidate + reference)`, the harmonic mean of
/// precision and recall; 0 when nothing matched.
fn f1(matched: usize, candidate: usize, reference: usize) -> f64 {
    if matched == 0 { 0.0 } else { 2.0 * matched as f64 / (candidate + reference) as f64 }
}

/// The 95% percentile bootstrap interval of the F1 of per-window `[matched, candidate,
/// reference]` counts ([`Agreement::f1_interval`]).
fn f1_interval(counts: &[[usize; 3]]) -> [f64; 2] {
    if counts.is_empty() {
        return [0.0, 0.0];
    }
    let mut rng = StdRng::seed_from_u64(0);
    let mut scores: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| {
            let mut sum = [0; 3];
            for _ in 0..counts.len() {
                let window = counts[rng.random_range(0..counts.len())];
                (0..3).for_each(|i| sum[i] += window[i]);
            }
            f1(sum[0], sum[1], sum[2])
        })
        .collect();
    scores.sort_by(f64::total_cmp);
    // Nearest rank: the p-th percentile of n sorted values is the ceil(p · n)-th.
    let rank = |p: f64| scores[((p * scores.len() as f64).ceil() as usize).clamp(1, scores.len()) - 1];
    [rank(0.025), rank(0.975)]
}

/// Greedy one-to-one matching by descending similarity; ties keep input order.
fn match_records<'a>(
    reference: &'a [ExtractedMemory],
    candidate: &'a [ExtractedMemory],
) -> Vec<(&'a ExtractedMemory, &'a ExtractedMemory, f64)> {
    let mut scored = Vec::new();
    for (i, r) in reference.iter().enumerate() {
        for (j, c) in candidate.iter().enumerate() {
            if r.source_id != c.source_id {
                continue;
            }
            let sim = f1_score(&c.content, &r.content);
            if sim >= MATCH_THRESHOLD {
                scored.push((i, j, sim));
            }
        }
    }
    scored.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    let (mut used_r, mut used_c) = (HashSet::new(), HashSet::new());
    let mut out = Vec::new();
    for (i, j, sim) in scored {
        if used_r.insert(i) {
            if used_c.insert(j) {
                out.push((&reference[i], &candidate[j], sim));
            } else {
                used_r.remove(&i);
            }
        }
    }
    out
}

fn field_agreement(r: &ExtractedMemory, c: &ExtractedMemory) -> [(&'static str, f64); 6] {
    let exact = |a: &str, b: &str| f64::from(u8::from(a.trim().eq_ignore_ascii_case(b.trim())));
    let text = |a: &str, b: &str| match (a.trim().is_empty(), b.trim().is_empty()) {
        (true, true) => 1.0,
        (false, false) => f64::from(u8::from(f1_score(b, a) >= 0.5)),
        _ => 0.0,
    };
    let set = |k: &[String]| k.iter().map(|s| s.trim().to_lowercase()).filter(|s| !s.is_empty()).collect::<HashSet<_>>();
    let (kr, kc) = (set(&r.dimension.keywords), set(&c.dimension.keywords));
    let keywords = if kr.is_empty() && kc.is_empty() { 1.0 } else { kr.intersection(&kc).count() as f64 / kr.union(&kc).count() as f64 };
    let (rd, cd) = (&r.dimension, &c.dimension);
    [
        ("type", f64::from(u8::from(rd.memory_type == cd.memory_type))),
        ("time", exact(&rd.time, &cd.time)),
        ("location", text(&rd.location, &cd.location)),
        ("reason", text(&rd.reason, &cd.reason)),
        ("purpose", text(&rd.purpose, &cd.purpose)),
        ("keywords", keywords),
    ]
}

#[cfg(test)]
mod tests {
    use memkit_schema::{ExtractedDimension, MemoryType};

    use super::*;

    fn record(source_id: u32, content: &str, memory_type: MemoryType, time: &str, keywords: &[&str]) -> ExtractedMemory {
        ExtractedMemory {
            source_id,
            source_speaker: "Ann".into(),
            content: content.into(),
            dimension: ExtractedDimension {
                memory_type,
                time: time.into(),
                location: String::new(),
                reason: String::new(),
                purpose: String::new(),
                keywords: keywords.iter().map(|k| k.to_string()).collect(),
            },
        }
    }

    #[test]
    fn identical_records_agree_fully() {
        let teacher = [record(2, "Ann adopted a cat named Tom.", MemoryType::Episodic, "2023-05-01", &["cat", "Tom"])];
        let a = agreement(&[WindowPair { reference: &teacher, candidate: Some(&teacher) }]);
        assert_eq!((a.matched, a.precision, a.recall, a.f1, a.json_validity), (1, 1.0, 1.0, 1.0, 1.0));
        assert!(a.fields.values().all(|&v| v == 1.0), "{:?}", a.fields);
    }

    #[test]
    fn partial_matches_and_unparsable_windows_count() {
        let teacher = [
            record(2, "Ann adopted a cat named Tom.", MemoryType::Episodic, "2023-05-01", &["cat", "Tom"]),
            record(3, "Ann works as a nurse in Leeds.", MemoryType::Profile, "", &["nurse"]),
        ];
        let student = [
            // Same source, similar content, different type and one of two keywords.
            record(2, "Ann adopted a cat called Tom.", MemoryType::Fact, "2023-05-01", &["cat"]),
            // Same content but another source message: no match.
            record(4, "Ann works as a nurse in Leeds.", MemoryType::Profile, "", &["nurse"]),
            // Nothing like any teacher record.
            record(3, "The weather was nice.", MemoryType::Fact, "", &[]),
        ];
        let a = agreement(&[
            WindowPair { reference: &teacher, candidate: Some(&student) },
            WindowPair { reference: &teacher[..1], candidate: None },
        ]);
        assert_eq!(a.windows, 2);
        assert_eq!(a.json_validity, 0.5);
        assert_eq!((a.reference_records, a.candidate_records, a.matched), (3, 3, 1));
        assert!((a.precision - 1.0 / 3.0).abs() < 1e-12 && (a.recall - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(a.fields["type"], 0.0);
        assert_eq!(a.fields["time"], 1.0);
        assert_eq!(a.fields["keywords"], 0.5);
        // One of three reference records matched, its keywords half alike: 0.5 / 3.
        assert!((a.field_recall["keywords"] - 0.5 / 3.0).abs() < 1e-12);
        assert_eq!(a.field_recall["type"], 0.0);
        assert!(a.content_similarity > 0.5 && a.content_similarity < 1.0);
    }

    #[test]
    fn matching_is_one_to_one() {
        let teacher = [record(1, "Ann likes tea.", MemoryType::Fact, "", &[])];
        let student = [record(1, "Ann likes tea.", MemoryType::Fact, "", &[]), record(1, "Ann likes tea.", MemoryType::Fact, "", &[])];
        let a = agreement(&[WindowPair { reference: &teacher, candidate: Some(&student) }]);
        assert_eq!(a.matched, 1);
        assert_eq!(a.precision, 0.5);
    }

    #[test]
    fn empty_windows_are_counted_on_each_side() {
        let tea = [record(1, "Ann likes tea.", MemoryType::Fact, "", &[])];
        let two = [record(1, "Ann likes tea.", MemoryType::Fact, "", &[]), record(1, "Ann is tired.", MemoryType::Fact, "", &[])];
        let a = agreement(&[
            // The reference found nothing; the candidate's two records cannot match.
            WindowPair { reference: &[], candidate: Some(&two) },
            // The candidate found nothing where the reference found a record.
            WindowPair { reference: &tea, candidate: Some(&[]) },
            // Both empty: agreement, counted on neither side.
            WindowPair { reference: &[], candidate: Some(&[]) },
            // Unparsable: not a window the candidate left empty.
            WindowPair { reference: &tea, candidate: None },
        ]);
        assert_eq!((a.reference_empty_windows, a.candidate_records_where_reference_empty, a.candidate_empty_windows), (2, 2, 1));
        assert_eq!((a.matched, a.f1, a.f1_interval), (0, 0.0, [0.0, 0.0]));
    }

    #[test]
    fn the_interval_is_a_point_when_every_window_scores_alike() {
        // Every window: two reference records, two candidate records, one match. Any resample
        // has matched = m, candidate = reference = 2m, so F1 = 2m / 4m = 0.5.
        let teacher =
            [record(1, "Ann likes tea.", MemoryType::Fact, "", &[]), record(1, "Ann owns a red bike.", MemoryType::Fact, "", &[])];
        let student =
            [record(1, "Ann likes tea.", MemoryType::Fact, "", &[]), record(1, "The weather was nice.", MemoryType::Fact, "", &[])];
        let pairs = vec![WindowPair { reference: &teacher, candidate: Some(&student) }; 5];
        let a = agreement(&pairs);
        assert_eq!((a.f1, a.f1_interval), (0.5, [0.5, 0.5]));
    }

    #[test]
    fn the_interval_spans_the_spread_of_the_windows() {
        // Two windows of one record each, one matched and one not. A resample of two windows
        // holds the matched one twice (F1 1, probability 1/4), once (0.5, 1/2) or never (0, 1/4).
        // In 1,000 resamples about 250 score 0 and 250 score 1, so the 25th smallest is 0 and
        // the 975th is 1: the interval is [0, 1] around the F1 of 0.5.
        let hit = [record(1, "Ann likes tea.", MemoryType::Fact, "", &[])];
        let miss = [record(1, "The weather was nice.", MemoryType::Fact, "", &[])];
        let a = agreement(&[WindowPair { reference: &hit, candidate: Some(&hit) }, WindowPair { reference: &hit, candidate: Some(&miss) }]);
        assert_eq!((a.f1, a.f1_interval), (0.5, [0.0, 1.0]));
    }
}
