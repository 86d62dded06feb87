//! One system's figures, accumulated over questions.

use std::collections::{BTreeMap, HashMap, HashSet};

use memkit_data::Question;
use memkit_engine::recall::RecallStats;
use memkit_engine::update::UpdateStats;
use memkit_schema::Dialogue;
use serde_json::json;

use crate::pointers::PointerTally;
use crate::retrieval::{EvidenceRecall, LongMemEvalMeans, evaluate_retrieval, recall_of_list};
use crate::{CategoryMetrics, SystemMetrics, TokenCounter};

use super::rank::{Prepared, Ranker, Ranking};

/// Accumulates one system's figures over questions.
pub(super) struct Tally {
    pub(super) budgets: Vec<usize>,
    pub(super) main: EvidenceRecall,
    pub(super) per_category: BTreeMap<String, EvidenceRecall>,
    pub(super) adaptive_recall: f64,
    pub(super) adaptive_tokens: f64,
    pub(super) adaptive_n: usize,
    pub(super) full_tokens: f64,
    pub(super) latency_ms: f64,
    pub(super) queries: usize,
    pub(super) units: usize,
    pub(super) dialogues: usize,
    pub(super) session: Option<LongMemEvalMeans>,
    pub(super) turn: Option<LongMemEvalMeans>,
    pub(super) pointers: Option<PointerTally>,
    /// Summed update figures of systems that consolidate their records.
    update: Option<UpdateStats>,
    /// Tokens of every HingeMem description.
    pub(super) descriptions: Vec<usize>,
    /// Assistant recall over all questions (systems with it on).
    pub(super) recall: Option<RecallStats>,
    /// Assistant replies read within the largest budget, over all questions.
    pub(super) replies_in_budget: usize,
}

impl Tally {
    pub(super) fn new(budgets: &[usize], ks: Option<&[usize]>) -> Self {
        Tally {
            budgets: budgets.to_vec(),
            main: EvidenceRecall::new(budgets),
            per_category: BTreeMap::new(),
            adaptive_recall: 0.0,
            adaptive_tokens: 0.0,
            adaptive_n: 0,
            full_tokens: 0.0,
            latency_ms: 0.0,
            queries: 0,
            units: 0,
            dialogues: 0,
            session: ks.map(LongMemEvalMeans::new),
            turn: ks.map(LongMemEvalMeans::new),
            pointers: None,
            update: None,
            descriptions: Vec::new(),
            recall: None,
            replies_in_budget: 0,
        }
    }

    /// Counts one dialogue's prepared system (units, pointer checks, HingeMem descriptions).
    pub(super) fn add_dialogue(&mut self, prepared: &Prepared, counter: &TokenCounter) {
        self.dialogues += 1;
        self.units += prepared.units.len();
        if let Ranker::Hinge(index) = &prepared.ranker {
            self.descriptions.extend(prepared.units[..index.hyperedges().len()].iter().map(|u| u.tokens(counter)));
        }
        if let Some(p) = prepared.pointers {
            self.pointers.get_or_insert_with(PointerTally::default).add(p);
        }
        if let Some(u) = prepared.update {
            let t = self.update.get_or_insert_with(UpdateStats::default);
            t.new_records += u.new_records;
            t.keyword_candidates += u.keyword_candidates;
            t.cosine_candidates += u.cosine_candidates;
            t.pairs_decided += u.pairs_decided;
            t.merges += u.merges;
            t.supersedes += u.supersedes;
            t.kept += u.kept;
        }
    }

    /// Scores what the system returns ([`Ranking::returned`]): a ranked list up to the largest
    /// budget, each budget column the prefix that fits it; an adaptive list whole, its budget
    /// columns the prefixes of that list (never a unit past its stop), and its recall and tokens
    /// as the list it returns (`adaptive_recall`, `adaptive_tokens`, the tokens per query).
    pub(super) fn add_evidence(
        &mut self,
        prepared: &Prepared,
        ranking: &Ranking,
        counter: &TokenCounter,
        gold: &[String],
        category: Option<String>,
    ) {
        if let Some(r) = ranking.recall {
            let total = self.recall.get_or_insert_with(RecallStats::default);
            total.queries += r.queries;
            total.triggered += r.triggered;
            total.replies_attached += r.replies_attached;
            total.records_without_reply += r.records_without_reply;
        }
        let first_reply = prepared.recall.as_ref().map_or(usize::MAX, |r| r.first_unit);
        let max_budget = self.budgets.iter().copied().max().unwrap_or(0);
        let mut units: Vec<(usize, &[String])> = Vec::new();
        let mut used = 0;
        for &i in ranking.returned() {
            let u = &prepared.units[i];
            let t = u.tokens(counter);
            // A ranked list is read only up to the largest budget; an adaptive list is whole.
            if ranking.stop.is_none() && used + t > max_budget {
                break;
            }
            if i >= first_reply && used + t <= max_budget {
                self.replies_in_budget += 1;
            }
            used += t;
            units.push((t, &u.turn_ids));
        }
        let in_main = category.as_deref() != Some("5");
        if in_main {
            self.main.add(&units, gold);
        }
        if let Some(c) = category {
            self.per_category.entry(c).or_insert_with(|| EvidenceRecall::new(&self.budgets)).add(&units, gold);
        }
        if ranking.stop.is_some()
            && in_main
            && let Some(r) = recall_of_list(&units, gold)
        {
            self.adaptive_recall += r.recall;
            self.adaptive_tokens += r.tokens as f64;
            self.adaptive_n += 1;
        }
    }

    /// LongMemEval's rankings over turns and over sessions (when the tally has `ks`): each by
    /// first appearance in the unit ranking.
    pub(super) fn add_rankings(&mut self, dialogue: &Dialogue, prepared: &Prepared, ranking: &Ranking, q: &Question) {
        if self.session.is_none() && self.turn.is_none() {
            return;
        }
        let turn_ids: Vec<&str> = dialogue.turns().map(|t| t.id.as_str()).collect();
        let turn_pos: HashMap<&str, usize> = turn_ids.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let session_ids: Vec<&str> = dialogue.sessions.iter().map(|s| s.id.as_str()).collect();
        let session_pos: HashMap<&str, usize> = session_ids.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        let (mut turn_rank, mut session_rank) = (Vec::new(), Vec::new());
        let (mut seen_t, mut seen_s) = (HashSet::new(), HashSet::new());
        for &u in &ranking.order {
            for id in &prepared.units[u].turn_ids {
                if let Some(&p) = turn_pos.get(id.as_str())
                    && seen_t.insert(p)
                {
                    turn_rank.push(p);
                }
                if let Some(&p) = session_pos.get(session_of(id))
                    && seen_s.insert(p)
                {
                    session_rank.push(p);
                }
            }
        }
        if let Some(s) = self.session.as_mut() {
            s.add(|k| evaluate_retrieval(&session_rank, &q.evidence_sessions, &session_ids, k));
        }
        if let Some(t) = self.turn.as_mut()
            && !q.evidence.is_empty()
        {
            t.add(|k| evaluate_retrieval(&turn_rank, &q.evidence, &turn_ids, k));
        }
    }

    pub(super) fn finish(self, name: &str, full_context: bool, counter: &TokenCounter) -> SystemMetrics {
        let mut m = SystemMetrics::new(name);
        m.evidence_recall_at = self.main.recall_at();
        m.questions = self.main.questions();
        let largest = self.budgets.iter().max().map(|b| b.to_string()).unwrap_or_default();
        m.mean_context_tokens = if full_context {
            self.full_tokens / self.dialogues.max(1) as f64
        } else if self.adaptive_n > 0 {
            self.adaptive_tokens / self.adaptive_n as f64
        } else {
            self.main.tokens_at().get(&largest).copied().unwrap_or(0.0)
        };
        for (c, r) in self.per_category {
            m.per_category.insert(c, CategoryMetrics { questions: r.questions(), evidence_recall_at: r.recall_at(), ..Default::default() });
        }
        m.extra.insert("questions_without_gold".into(), json!(self.main.without_gold()));
        if self.adaptive_n > 0 {
            m.extra.insert("adaptive_recall".into(), json!(self.adaptive_recall / self.adaptive_n as f64));
            m.extra.insert("adaptive_tokens".into(), json!(self.adaptive_tokens / self.adaptive_n as f64));
        }
        m.extra.insert("mean_latency_ms".into(), json!(self.latency_ms / self.queries.max(1) as f64));
        m.extra.insert("units_per_dialogue".into(), json!(self.units as f64 / self.dialogues.max(1) as f64));
        m.extra.insert("token_counter".into(), json!(counter.name()));
        if !self.descriptions.is_empty() {
            let mut d = self.descriptions.clone();
            d.sort_unstable();
            let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
            m.extra.insert("hyperedges_per_dialogue".into(), json!(d.len() as f64 / self.dialogues.max(1) as f64));
            m.extra.insert("description_tokens_mean".into(), json!(d.iter().sum::<usize>() as f64 / d.len() as f64));
            m.extra.insert("description_tokens_p50".into(), json!(at(0.5)));
            m.extra.insert("description_tokens_p90".into(), json!(at(0.9)));
            m.extra.insert("description_tokens_max".into(), json!(d[d.len() - 1]));
        }
        if let Some(r) = self.recall {
            m.extra.insert("assistant_recall_trigger_rate".into(), json!(r.trigger_rate()));
            let largest = self.budgets.iter().max().copied().unwrap_or(0);
            m.extra.insert(
                format!("assistant_replies_read_at_{largest}_per_triggered_query"),
                json!(self.replies_in_budget as f64 / r.triggered.max(1) as f64),
            );
        }
        if let Some(u) = self.update {
            m.extra.insert("update_records_in".into(), json!(u.new_records));
            m.extra.insert("update_pairs_decided".into(), json!(u.pairs_decided));
            m.extra.insert("update_merges".into(), json!(u.merges));
            m.extra.insert("update_supersedes".into(), json!(u.supersedes));
            m.extra.insert("update_records_kept".into(), json!(u.kept));
        }
        if let Some(p) = self.pointers {
            m.extra.insert("pointer_accuracy".into(), json!(p.accuracy()));
            m.extra.insert("pointer_records_checked".into(), json!(p.checked));
        }
        if let Some(s) = self.session {
            m.recall_any_at = Some(s.recall_any_at());
            m.recall_all_at = Some(s.recall_all_at());
            m.ndcg_at = Some(s.ndcg_at());
            m.extra.insert("longmemeval_questions".into(), json!(s.questions()));
        }
        if let Some(t) = self.turn {
            m.extra.insert("turn_recall_any_at".into(), json!(t.recall_any_at()));
            m.extra.insert("turn_recall_all_at".into(), json!(t.recall_all_at()));
            m.extra.insert("turn_ndcg_at".into(), json!(t.ndcg_at()));
        }
        m
    }
}

/// The session of a LongMemEval turn id `<session>:<n>`.
fn session_of(turn_id: &str) -> &str {
    turn_id.rsplit_once(':').map_or(turn_id, |(s, _)| s)
}

#[cfg(test)]
pub(super) mod tests {
    use std::cell::OnceCell;

    use super::*;
    use crate::runner::rank::Unit;

    /// Units of fixed token counts: `(tokens, turn ids)`.
    pub(in crate::runner) fn prepared(units: &[(usize, &[&str])]) -> Prepared {
        let units = units
            .iter()
            .enumerate()
            .map(|(i, (tokens, turns))| Unit {
                tokens: OnceCell::from(*tokens),
                ..Unit::new(format!("unit {i}"), turns.iter().map(|t| t.to_string()).collect())
            })
            .collect();
        Prepared { units, ranker: Ranker::Chronological, pointers: None, recall: None, update: None }
    }

    /// 100, 200 (two turns), 300 and 50 tokens.
    pub(in crate::runner) fn four_units() -> Prepared {
        prepared(&[(100, &["D1:1"]), (200, &["D1:2", "D1:3"]), (300, &["D1:4"]), (50, &["D1:5"])])
    }

    fn gold(turns: &[&str]) -> Vec<String> {
        turns.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn a_ranked_list_is_scored_per_budget_on_the_prefix_that_fits() {
        let (p, counter) = (four_units(), TokenCounter::Words13);
        let mut tally = Tally::new(&[250, 500, 1000], None);
        // Gold D1:2 (unit 1, which points at two turns) and D1:5 (unit 3).
        let ranking = Ranking::new(vec![1, 0, 2, 3], None);
        tally.add_evidence(&p, &ranking, &counter, &gold(&["D1:2", "D1:5"]), Some("1".into()));
        let m = tally.finish("ranked", false, &counter);
        // @250: unit 1 (200) fits, unit 0 would make 300: D1:2 of 2 gold turns, 0.5.
        // @500: units 1 and 0 (300); unit 2 (300 more) does not fit, and unit 3, which would,
        //       comes after it: the prefix stops at the first unit that does not fit. 0.5.
        // @1000: all four (650): 1.0.
        let at: Vec<f64> = ["250", "500", "1000"].iter().map(|b| m.evidence_recall_at[*b]).collect();
        assert_eq!(at, [0.5, 0.5, 1.0]);
        // Tokens per query of a ranked list: what it takes at the largest budget.
        assert_eq!(m.mean_context_tokens, 650.0);
        assert!(!m.extra.contains_key("adaptive_recall"));
    }

    #[test]
    fn an_adaptive_list_is_scored_on_what_it_returns_and_nothing_past_its_stop() {
        let (p, counter) = (four_units(), TokenCounter::Words13);
        let mut tally = Tally::new(&[250, 500, 1000], None);
        // The stop keeps units 2 and 3 (350 tokens); units 1 and 0 are ranked after it.
        let ranking = Ranking::new(vec![2, 3, 1, 0], Some(2));
        tally.add_evidence(&p, &ranking, &counter, &gold(&["D1:2", "D1:5"]), Some("1".into()));
        let m = tally.finish("adaptive", false, &counter);
        // @250: unit 2 (300) does not fit: 0. @500: units 2 and 3 (350): D1:5, 0.5.
        // @1000: still units 2 and 3 (unit 1, past the stop, would have reached D1:2): 0.5.
        let at: Vec<f64> = ["250", "500", "1000"].iter().map(|b| m.evidence_recall_at[*b]).collect();
        assert_eq!(at, [0.0, 0.5, 0.5]);
        assert_eq!((m.extra["adaptive_recall"].as_f64(), m.extra["adaptive_tokens"].as_f64()), (Some(0.5), Some(350.0)));
        assert_eq!(m.mean_context_tokens, 350.0);
    }

    #[test]
    fn category_5_is_reported_apart_and_questions_without_gold_are_counted() {
        let (p, counter) = (four_units(), TokenCounter::Words13);
        let mut tally = Tally::new(&[250, 1000], None);
        let ranking = Ranking::new(vec![0, 1, 2, 3], None);
        // Category 1: D1:1 (unit 0) of D1:1 and D1:4: 0.5 @250 (units 0: 100; unit 1 makes
        // 300), 1.0 @1000.
        tally.add_evidence(&p, &ranking, &counter, &gold(&["D1:1", "D1:4"]), Some("1".into()));
        // Category 2: D1:3, through unit 1's second pointer: 0 @250, 1.0 @1000.
        tally.add_evidence(&p, &ranking, &counter, &gold(&["D1:3"]), Some("2".into()));
        // Category 5 (adversarial): its own row only.
        tally.add_evidence(&p, &ranking, &counter, &gold(&["D1:1"]), Some("5".into()));
        // No gold: counted, not in the means.
        tally.add_evidence(&p, &ranking, &counter, &[], Some("1".into()));
        let m = tally.finish("s", false, &counter);
        assert_eq!(m.questions, 2);
        assert_eq!((m.evidence_recall_at["250"], m.evidence_recall_at["1000"]), (0.25, 1.0));
        assert_eq!(m.extra["questions_without_gold"], json!(1));
        let five = &m.per_category["5"];
        assert_eq!((five.questions, five.evidence_recall_at["250"]), (1, 1.0));
        assert_eq!(m.per_category["1"].questions, 1);
        assert_eq!(m.per_category["2"].evidence_recall_at["250"], 0.0);
    }
}
