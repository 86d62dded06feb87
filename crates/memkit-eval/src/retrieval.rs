//! Retrieval metrics: evidence recall at token budgets (LoCoMo, SPEC §7) and LongMemEval's
//! recall_any@k / recall_all@k / nDCG@k.
//!
//! # Evidence recall at a token budget
//!
//! Input per question: the retrieved units in rank order, each as `(token_count, turn_ids)` where
//! the turn ids are the dataset turns the unit points to (LoCoMo `D3:7`), and the gold evidence
//! turn ids. Units are taken in rank order while they fit; **the first unit that does not fit
//! ends the context** (it is neither cut nor skipped over). This is the rule a prompt builder that
//! fills a context window in rank order follows, it keeps the context a prefix of the ranking at
//! every budget (so recall never falls when the budget grows), and it does not reward a system
//! whose top unit is too long by quietly packing lower-ranked short units behind it.
//! recall = |gold ∩ covered| / |gold| with gold ids deduplicated. Questions without gold evidence
//! have no recall: the functions return `None` and [`EvidenceRecall`] counts them apart.
//!
//! For systems that stop adaptively (HingeMem's cut, SPEC §6) [`recall_of_list`] gives the recall
//! of the whole returned list together with the tokens it actually uses.
//!
//! ```
//! use memkit_eval::retrieval::recall_at_budget;
//! let a = ["D1:3"];
//! let b = ["D1:9", "D2:1"];
//! let units = [(200, &a[..]), (400, &b[..])];
//! let r = recall_at_budget(&units, &["D1:3", "D2:1"], 500).unwrap();
//! assert_eq!((r.recall, r.tokens_used, r.units_used), (0.5, 200, 1));
//! ```
//!
//! # LongMemEval
//!
//! [`evaluate_retrieval`] and [`evaluate_retrieval_turn2session`] are line-for-line ports of
//! `src/retrieval/eval_utils.py` of
//! [xiaowu0162/LongMemEval](https://github.com/xiaowu0162/LongMemEval) (commit `9e0b455f`),
//! including its quirks: the first two ranks both have discount 1 in DCG, the ideal DCG is taken
//! over the relevance of the whole corpus, an empty gold set gives recall_any 0 and recall_all 1,
//! and the turn→session variant widens k until k distinct sessions are covered. Following the
//! official `run_retrieval.py`, callers evaluate at `k ∈` [`LONGMEMEVAL_KS`] and **exclude
//! abstention questions** (question id containing `_abs`, see [`is_abstention`]) and questions
//! whose haystack has no `has_answer` turn before averaging; [`LongMemEvalMeans`] averages what
//! it is given. `tests/longmemeval_golden.rs` checks 300 random rankings against the Python code.

use std::collections::{BTreeMap, HashSet};

/// The token budgets of SPEC §7.
pub const BUDGETS: [usize; 5] = [250, 500, 1000, 2000, 4000];

/// The k values of LongMemEval's official retrieval evaluation.
pub const LONGMEMEVAL_KS: [usize; 6] = [1, 3, 5, 10, 30, 50];

/// Recall of the context built from a ranked list under one budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetRecall {
    /// The budget in tokens.
    pub budget: usize,
    /// Share of the gold evidence turns covered by the units taken.
    pub recall: f64,
    /// Tokens of the units taken (≤ budget).
    pub tokens_used: usize,
    /// Number of units taken, a prefix of the ranking.
    pub units_used: usize,
}

/// Recall of a whole (adaptively stopped) list and the tokens it uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ListRecall {
    /// Share of the gold evidence turns covered by all units.
    pub recall: f64,
    /// Sum of the units' tokens.
    pub tokens: usize,
    /// Number of units.
    pub units: usize,
}

fn gold_set<G: AsRef<str>>(gold: &[G]) -> Option<HashSet<&str>> {
    let set: HashSet<&str> = gold.iter().map(AsRef::as_ref).collect();
    (!set.is_empty()).then_some(set)
}

fn coverage<S: AsRef<str>>(units: &[(usize, &[S])], gold: &HashSet<&str>) -> f64 {
    let covered: HashSet<&str> = units.iter().flat_map(|(_, ids)| ids.iter().map(AsRef::as_ref)).filter(|id| gold.contains(id)).collect();
    covered.len() as f64 / gold.len() as f64
}

/// Length of the longest prefix of `units` whose tokens fit in `budget`, and those tokens.
fn prefix_within<S>(units: &[(usize, &[S])], budget: usize) -> (usize, usize) {
    let mut used = 0usize;
    for (i, (tokens, _)) in units.iter().enumerate() {
        match used.checked_add(*tokens) {
            Some(total) if total <= budget => used = total,
            _ => return (i, used),
        }
    }
    (units.len(), used)
}

/// Evidence recall of the ranked `units` under `budget` tokens (see the module docs for the
/// rule). `None` when `gold` is empty.
pub fn recall_at_budget<S: AsRef<str>, G: AsRef<str>>(units: &[(usize, &[S])], gold: &[G], budget: usize) -> Option<BudgetRecall> {
    let gold = gold_set(gold)?;
    let (n, tokens_used) = prefix_within(units, budget);
    Some(BudgetRecall { budget, recall: coverage(&units[..n], &gold), tokens_used, units_used: n })
}

/// [`recall_at_budget`] for each of `budgets`, in the given order. `None` when `gold` is empty.
pub fn recall_at_budgets<S: AsRef<str>, G: AsRef<str>>(
    units: &[(usize, &[S])],
    gold: &[G],
    budgets: &[usize],
) -> Option<Vec<BudgetRecall>> {
    budgets.iter().map(|&b| recall_at_budget(units, gold, b)).collect()
}

/// Recall of the whole list of `units`, and the tokens it actually uses. `None` when `gold` is
/// empty.
pub fn recall_of_list<S: AsRef<str>, G: AsRef<str>>(units: &[(usize, &[S])], gold: &[G]) -> Option<ListRecall> {
    let gold = gold_set(gold)?;
    Some(ListRecall { recall: coverage(units, &gold), tokens: units.iter().map(|(t, _)| t).sum(), units: units.len() })
}

/// Running means of evidence recall over questions, for one system (or one category).
#[derive(Debug, Clone, PartialEq)]
pub struct EvidenceRecall {
    budgets: Vec<usize>,
    recall_sums: Vec<f64>,
    tokens_sums: Vec<usize>,
    list_recall_sum: f64,
    list_tokens_sum: usize,
    questions: usize,
    without_gold: usize,
    /// Each question's recall per budget, in the order added (for paired intervals).
    per_question: Vec<Vec<f64>>,
}

impl EvidenceRecall {
    /// An empty accumulator over `budgets` (usually [`BUDGETS`]).
    pub fn new(budgets: &[usize]) -> Self {
        Self {
            budgets: budgets.to_vec(),
            recall_sums: vec![0.0; budgets.len()],
            tokens_sums: vec![0; budgets.len()],
            list_recall_sum: 0.0,
            list_tokens_sum: 0,
            questions: 0,
            without_gold: 0,
            per_question: Vec::new(),
        }
    }

    /// Adds one question. Returns `false` (and counts it in [`Self::without_gold`]) when `gold`
    /// is empty: such a question has no recall and is left out of every mean.
    pub fn add<S: AsRef<str>, G: AsRef<str>>(&mut self, units: &[(usize, &[S])], gold: &[G]) -> bool {
        let (Some(at), Some(list)) = (recall_at_budgets(units, gold, &self.budgets), recall_of_list(units, gold)) else {
            self.without_gold += 1;
            return false;
        };
        for (i, r) in at.iter().enumerate() {
            self.recall_sums[i] += r.recall;
            self.tokens_sums[i] += r.tokens_used;
        }
        self.per_question.push(at.iter().map(|r| r.recall).collect());
        self.list_recall_sum += list.recall;
        self.list_tokens_sum += list.tokens;
        self.questions += 1;
        true
    }

    /// Each question's recall at the budget at `index` (of the budgets given to [`Self::new`]),
    /// in the order the questions were added.
    pub fn per_question(&self, index: usize) -> Vec<f64> {
        self.per_question.iter().map(|r| r[index]).collect()
    }

    /// Questions that entered the means.
    pub fn questions(&self) -> usize {
        self.questions
    }

    /// Questions left out because they have no gold evidence.
    pub fn without_gold(&self) -> usize {
        self.without_gold
    }

    fn mean(&self, sum: f64) -> f64 {
        if self.questions == 0 { 0.0 } else { sum / self.questions as f64 }
    }

    /// Mean recall per budget, keyed by the budget in decimal (`"250"`, …), as
    /// [`crate::SystemMetrics::evidence_recall_at`] wants it. Zero when no question was added.
    pub fn recall_at(&self) -> BTreeMap<String, f64> {
        self.budgets.iter().zip(&self.recall_sums).map(|(b, s)| (b.to_string(), self.mean(*s))).collect()
    }

    /// Mean tokens actually used per budget (a budget is an upper bound, not the spend).
    pub fn tokens_at(&self) -> BTreeMap<String, f64> {
        self.budgets.iter().zip(&self.tokens_sums).map(|(b, s)| (b.to_string(), self.mean(*s as f64))).collect()
    }

    /// Mean recall of the whole returned lists ([`recall_of_list`]).
    pub fn list_recall(&self) -> f64 {
        self.mean(self.list_recall_sum)
    }

    /// Mean tokens of the whole returned lists: the context tokens per query of a system that
    /// sends its full list to the answer model.
    pub fn list_tokens(&self) -> f64 {
        self.mean(self.list_tokens_sum as f64)
    }
}

/// One LongMemEval evaluation at one k.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongMemEvalScores {
    /// 1 when any gold id is in the top k.
    pub recall_any: f64,
    /// 1 when every gold id is in the top k.
    pub recall_all: f64,
    /// nDCG@k with binary relevance.
    pub ndcg_any: f64,
}

/// True for LongMemEval abstention questions (`_abs` in the question id), which the official
/// retrieval evaluation leaves out.
pub fn is_abstention(question_id: &str) -> bool {
    question_id.contains("_abs")
}

/// The official `dcg`: relevance 0 undiscounted, then rank i (0-based, i ≥ 1) divided by
/// log2(i + 1).
fn dcg(relevances: &[f64], k: usize) -> f64 {
    let r = &relevances[..k.min(relevances.len())];
    match r.split_first() {
        None => 0.0,
        Some((first, rest)) => first + rest.iter().enumerate().map(|(i, x)| x / ((i + 2) as f64).log2()).sum::<f64>(),
    }
}

fn ndcg<S: AsRef<str>>(rankings: &[usize], correct: &HashSet<&str>, corpus_ids: &[S], k: usize) -> f64 {
    let relevances: Vec<f64> = corpus_ids.iter().map(|id| if correct.contains(id.as_ref()) { 1.0 } else { 0.0 }).collect();
    let ranked: Vec<f64> = rankings.iter().take(k).map(|&i| relevances[i]).collect();
    let mut ideal = relevances;
    ideal.sort_by(|a, b| b.total_cmp(a));
    let ideal_dcg = dcg(&ideal, k);
    if ideal_dcg == 0.0 {
        return 0.0;
    }
    dcg(&ranked, k) / ideal_dcg
}

/// The official `evaluate_retrieval`: `rankings` are indices into `corpus_ids` in rank order (a
/// prefix of a full ranking is fine), `correct_docs` the gold corpus ids.
///
/// # Panics
/// When a ranking index is out of `corpus_ids`' bounds (the Python code raises IndexError).
pub fn evaluate_retrieval<S: AsRef<str>, C: AsRef<str>>(
    rankings: &[usize],
    correct_docs: &[C],
    corpus_ids: &[S],
    k: usize,
) -> LongMemEvalScores {
    let recalled: HashSet<&str> = rankings.iter().take(k).map(|&i| corpus_ids[i].as_ref()).collect();
    let correct: HashSet<&str> = correct_docs.iter().map(AsRef::as_ref).collect();
    let hit = |d: &&str| recalled.contains(d);
    LongMemEvalScores {
        recall_any: if correct_docs.iter().map(AsRef::as_ref).any(|d| hit(&d)) { 1.0 } else { 0.0 },
        recall_all: if correct_docs.iter().map(AsRef::as_ref).all(|d| hit(&d)) { 1.0 } else { 0.0 },
        ndcg_any: ndcg(rankings, &correct, corpus_ids, k),
    }
}

/// The official `strip_turn_id`: drop the last `_`-separated part (`"s1_3"` → `"s1"`, `"x"` → `""`).
fn strip_turn_id(id: &str) -> &str {
    id.rfind('_').map_or("", |i| &id[..i])
}

/// The official `evaluate_retrieval_turn2session`: turn-level ids and rankings scored at
/// session level, k widened until the top covers k distinct sessions (or the corpus runs out).
///
/// # Panics
/// As [`evaluate_retrieval`].
pub fn evaluate_retrieval_turn2session<S: AsRef<str>, C: AsRef<str>>(
    rankings: &[usize],
    correct_docs: &[C],
    corpus_ids: &[S],
    k: usize,
) -> LongMemEvalScores {
    let correct: Vec<&str> = correct_docs.iter().map(|d| strip_turn_id(d.as_ref())).collect::<HashSet<_>>().into_iter().collect();
    let sessions: Vec<&str> = corpus_ids.iter().map(|d| strip_turn_id(d.as_ref())).collect();
    let distinct = |k: usize| rankings.iter().take(k).map(|&i| sessions[i]).collect::<HashSet<_>>().len();
    let mut effective_k = k;
    while effective_k <= sessions.len() && distinct(effective_k) < k {
        effective_k += 1;
    }
    evaluate_retrieval(rankings, &correct, &sessions, effective_k)
}

/// Running means of LongMemEval scores over questions, keyed by k.
#[derive(Debug, Clone, PartialEq)]
pub struct LongMemEvalMeans {
    ks: Vec<usize>,
    sums: Vec<[f64; 3]>,
    questions: usize,
}

impl LongMemEvalMeans {
    /// An empty accumulator over `ks` (usually [`LONGMEMEVAL_KS`]).
    pub fn new(ks: &[usize]) -> Self {
        Self { ks: ks.to_vec(), sums: vec![[0.0; 3]; ks.len()], questions: 0 }
    }

    /// Adds one question; `score(k)` is [`evaluate_retrieval`] or
    /// [`evaluate_retrieval_turn2session`] at k.
    pub fn add(&mut self, score: impl Fn(usize) -> LongMemEvalScores) {
        for (k, sum) in self.ks.iter().zip(&mut self.sums) {
            let s = score(*k);
            sum[0] += s.recall_any;
            sum[1] += s.recall_all;
            sum[2] += s.ndcg_any;
        }
        self.questions += 1;
    }

    /// Questions added.
    pub fn questions(&self) -> usize {
        self.questions
    }

    fn means(&self, field: usize) -> BTreeMap<String, f64> {
        self.ks
            .iter()
            .zip(&self.sums)
            .map(|(k, s)| {
                let mean = if self.questions == 0 { 0.0 } else { s[field] / self.questions as f64 };
                (k.to_string(), mean)
            })
            .collect()
    }

    /// Mean recall_any@k keyed by k in decimal.
    pub fn recall_any_at(&self) -> BTreeMap<String, f64> {
        self.means(0)
    }

    /// Mean recall_all@k keyed by k in decimal.
    pub fn recall_all_at(&self) -> BTreeMap<String, f64> {
        self.means(1)
    }

    /// Mean nDCG@k keyed by k in decimal.
    pub fn ndcg_at(&self) -> BTreeMap<String, f64> {
        self.means(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Unit<'a> = (usize, &'a [&'a str]);

    #[test]
    fn the_first_unit_that_does_not_fit_ends_the_context() {
        let units: [Unit; 3] = [(100, &["a"]), (300, &["b"]), (50, &["c"])];
        let gold = ["a", "b", "c"];
        let r = recall_at_budget(&units, &gold, 250).unwrap();
        // "c" would fit after skipping "b", but the context stops at "b".
        assert_eq!((r.units_used, r.tokens_used), (1, 100));
        assert!((r.recall - 1.0 / 3.0).abs() < 1e-15);
        let r = recall_at_budget(&units, &gold, 450).unwrap();
        assert_eq!((r.recall, r.tokens_used, r.units_used), (1.0, 450, 3));
        // A too-long first unit gives an empty context.
        let r = recall_at_budget(&units, &gold, 99).unwrap();
        assert_eq!((r.recall, r.tokens_used, r.units_used), (0.0, 0, 0));
    }

    #[test]
    fn gold_is_a_set_and_empty_gold_is_excluded() {
        let units: [Unit; 2] = [(10, &["a", "x"]), (10, &["a"])];
        assert_eq!(recall_at_budget(&units, &["a", "a", "b"], 100).unwrap().recall, 0.5);
        assert!(recall_at_budget(&units, &[] as &[&str], 100).is_none());
        assert!(recall_of_list(&units, &[] as &[&str]).is_none());
    }

    #[test]
    fn recall_is_monotone_in_the_budget() {
        let units: [Unit; 4] = [(120, &["x"]), (200, &["a"]), (700, &["b"]), (5, &["c"])];
        let rs = recall_at_budgets(&units, &["a", "b", "c"], &BUDGETS).unwrap();
        let recalls: Vec<f64> = rs.iter().map(|r| r.recall).collect();
        assert!(recalls.windows(2).all(|w| w[0] <= w[1]), "{recalls:?}");
        assert_eq!(rs[0].tokens_used, 120);
        assert_eq!(rs[2].tokens_used, 320); // 120 + 200, the 700-token unit ends it
        assert_eq!(rs[3].tokens_used, 1025);
    }

    #[test]
    fn accumulator_means_and_exclusions() {
        let mut acc = EvidenceRecall::new(&[100, 1000]);
        let u1: [Unit; 2] = [(50, &["a"]), (500, &["b"])];
        let u2: [Unit; 1] = [(80, &["z"])];
        assert!(acc.add(&u1, &["a", "b"]));
        assert!(acc.add(&u2, &["q"]));
        assert!(!acc.add(&u2, &[] as &[&str]));
        assert_eq!((acc.questions(), acc.without_gold()), (2, 1));
        let at = acc.recall_at();
        assert_eq!(at["100"], 0.25);
        assert_eq!(at["1000"], 0.5);
        assert_eq!(acc.tokens_at()["100"], 65.0);
        assert_eq!(acc.list_recall(), 0.5);
        assert_eq!(acc.list_tokens(), (550.0 + 80.0) / 2.0);
        assert_eq!(EvidenceRecall::new(&BUDGETS).recall_at()["4000"], 0.0);
    }

    #[test]
    fn dcg_discounts_ranks_one_and_two_equally() {
        assert_eq!(dcg(&[1.0, 1.0], 2), 2.0);
        assert!((dcg(&[0.0, 0.0, 1.0], 3) - 1.0 / 3f64.log2()).abs() < 1e-15);
        assert_eq!(dcg(&[], 3), 0.0);
        assert_eq!(dcg(&[1.0, 1.0], 1), 1.0);
    }

    #[test]
    fn evaluate_retrieval_by_hand() {
        let ids = ["s1", "answer_s2", "s3", "answer_s4"];
        let gold = ["answer_s2", "answer_s4"];
        let s = evaluate_retrieval(&[1, 0, 2, 3], &gold, &ids, 2);
        assert_eq!((s.recall_any, s.recall_all), (1.0, 0.0));
        assert_eq!(s.ndcg_any, 0.5); // dcg 1 / ideal dcg 2
        let s = evaluate_retrieval(&[1, 3], &gold, &ids, 10);
        assert_eq!((s.recall_any, s.recall_all, s.ndcg_any), (1.0, 1.0, 1.0));
        let none: [&str; 0] = [];
        let s = evaluate_retrieval(&[0], &none, &ids, 1);
        assert_eq!((s.recall_any, s.recall_all, s.ndcg_any), (0.0, 1.0, 0.0));
    }

    #[test]
    fn turn2session_widens_k_to_distinct_sessions() {
        let ids = ["s1_1", "s1_3", "answer_s2_1", "s3_1"];
        let gold = ["answer_s2_1"];
        // Top-2 turns are both from s1: k widens to 3 to cover 2 sessions, reaching answer_s2.
        let s = evaluate_retrieval_turn2session(&[0, 1, 2, 3], &gold, &ids, 2);
        assert_eq!(s.recall_any, 1.0);
        assert_eq!(strip_turn_id("noid"), "");
    }

    #[test]
    fn longmemeval_means() {
        let mut m = LongMemEvalMeans::new(&[1, 5]);
        let ids = ["a", "answer_b"];
        m.add(|k| evaluate_retrieval(&[1, 0], &["answer_b"], &ids, k));
        m.add(|k| evaluate_retrieval(&[0, 1], &["answer_b"], &ids, k));
        assert_eq!(m.questions(), 2);
        assert_eq!(m.recall_any_at()["1"], 0.5);
        assert_eq!(m.recall_all_at()["5"], 1.0);
        assert_eq!(m.ndcg_at()["5"], 1.0); // ranks 1 and 2 weigh the same
        assert!(is_abstention("gpt4_2655b836_abs"));
        assert!(!is_abstention("gpt4_2655b836"));
    }
}
