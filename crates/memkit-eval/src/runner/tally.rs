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

    /// Units of the ranking as `(tokens, turn ids)`, up to the largest budget (and past it for
    /// the adaptive list).
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
        for &i in &ranking.order {
            let u = &prepared.units[i];
            let t = u.tokens(counter);
            if used + t > max_budget && ranking.stop.is_none_or(|s| units.len() >= s) {
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
        if let (Some(stop), true) = (ranking.stop, in_main) {
            let all: Vec<(usize, &[String])> = ranking.order[..stop.min(ranking.order.len())]
                .iter()
                .map(|&i| (prepared.units[i].tokens(counter), &prepared.units[i].turn_ids[..]))
                .collect();
            if let Some(r) = recall_of_list(&all, gold) {
                self.adaptive_recall += r.recall;
                self.adaptive_tokens += r.tokens as f64;
                self.adaptive_n += 1;
            }
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
