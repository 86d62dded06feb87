//! QA items: what each system's ranking puts before the answer model, and the scored answers.

use std::collections::HashSet;

use chrono::NaiveDateTime;
use memkit_data::Question;
use memkit_prompt::AnswerMemory;

use crate::qa::QaItem;
use crate::recipe::QaSpec;
use crate::recipe::SystemSpec;
use crate::report::{QaMetrics, QaSection, QaSystemMetrics};
use crate::{Result, SystemMetrics, TokenCounter};

use super::rank::{Prepared, Ranking};
use super::{QaModels, Reporter};

pub(super) fn qa_sample(spec: Option<&QaSpec>, scored: &[&str]) -> HashSet<String> {
    spec.map(|qa| crate::qa::sample(scored, qa.questions, qa.seed)).unwrap_or_default()
}

/// Whether `system` answers the QA sample.
pub(super) fn answers_qa(spec: Option<&QaSpec>, system: &SystemSpec) -> bool {
    spec.is_some_and(|qa| qa.systems.is_empty() || qa.systems.iter().any(|n| n == system.name()))
}

/// Question `q` put to `system`, asked on `date`, with the memories of its ranking that fit
/// `budget` tokens. The kind is the question type (LoCoMo's category name, LongMemEval's type);
/// only LoCoMo questions have a category, which picks the official F1 rule.
pub(super) fn qa_item(
    system: &SystemSpec,
    q: &Question,
    date: Option<NaiveDateTime>,
    prepared: &Prepared,
    ranking: &Ranking,
    counter: &TokenCounter,
    budget: usize,
) -> QaItem {
    let (memories, context_tokens) = memories_within(prepared, ranking, counter, budget);
    QaItem {
        budget,
        system: system.name().to_owned(),
        question_id: q.id.clone(),
        question: q.question.clone(),
        date,
        gold: q.answer.clone(),
        category: q.category,
        kind: q.question_type.clone().unwrap_or_default(),
        memories,
        context_tokens,
    }
}

/// The memories of a ranking that fit `budget` tokens (in rank order until the first that
/// does not fit, and no further than an adaptive stop: [`Ranking::returned`]), and their tokens.
pub(super) fn memories_within(prepared: &Prepared, ranking: &Ranking, counter: &TokenCounter, budget: usize) -> (Vec<AnswerMemory>, usize) {
    let (mut memories, mut used) = (Vec::new(), 0);
    for &i in ranking.returned() {
        let t = prepared.units[i].tokens(counter);
        if used + t > budget {
            break;
        }
        used += t;
        memories.push(prepared.units[i].memory.clone());
    }
    (memories, used)
}

pub(super) fn answer_questions(
    spec: &QaSpec,
    models: &QaModels,
    items: &[QaItem],
    systems: &[SystemMetrics],
    baseline: Option<&str>,
    reporter: &dyn Reporter,
) -> Result<QaSection> {
    reporter.start("QA", items.len() as u64);
    let judge = if spec.judged { Some(models.judge.as_deref().unwrap_or(&*models.answer)) } else { None };
    let results = crate::qa::answer_and_judge(items, spec, &*models.answer, judge, &|n| reporter.advance(n as u64))?;
    reporter.finish();
    let budgets = spec.budget.as_slice().to_vec();
    let mut per_system = systems
        .iter()
        .flat_map(|s| budgets.iter().map(move |&b| (s, b)))
        .filter(|&(s, b)| results.iter().any(|r| r.system == s.name && r.budget == b))
        .map(|(s, budget)| {
            let q = crate::qa::summarize(results.iter().filter(|r| r.system == s.name && r.budget == budget));
            QaSystemMetrics {
                name: s.name.clone(),
                budget,
                questions: q.questions,
                f1: q.f1,
                judge_accuracy: q.judge_accuracy,
                judge_unparsed: q.judge_unparsed,
                mean_context_tokens: q.context_tokens,
                f1_difference: None,
                judge_difference: None,
            }
        })
        .collect::<Vec<_>>();
    if let Some(baseline) = baseline {
        for s in per_system.iter_mut().filter(|s| s.name != baseline) {
            (s.f1_difference, s.judge_difference) = qa_differences(&results, &s.name, baseline, s.budget);
        }
    }
    let questions = items.iter().map(|i| i.question_id.as_str()).collect::<HashSet<_>>().len();
    Ok(QaSection {
        metrics: QaMetrics {
            answer_model: models.answer.id().to_owned(),
            judge_model: judge.map(|j| j.id().to_owned()),
            questions,
            seed: spec.seed,
            budgets,
            systems: per_system,
            baseline: baseline.map(str::to_owned),
        },
        results,
    })
}

/// `system`'s F1 and judge correctness minus `baseline`'s at `budget`, question by question
/// (the judge on the questions both verdicts parsed for), with paired bootstrap intervals.
fn qa_differences(
    results: &[crate::qa::QaResult],
    system: &str,
    baseline: &str,
    budget: usize,
) -> (Option<crate::bootstrap::Interval>, Option<crate::bootstrap::Interval>) {
    use crate::bootstrap::{RESAMPLES, SEED, paired};
    let of = |name: &str| -> std::collections::HashMap<&str, &crate::qa::QaResult> {
        results.iter().filter(|r| r.system == name && r.budget == budget).map(|r| (r.question_id.as_str(), r)).collect()
    };
    let (mine, theirs) = (of(system), of(baseline));
    let mut ids: Vec<&str> = mine.keys().filter(|id| theirs.contains_key(*id)).copied().collect();
    ids.sort_unstable();
    let f1: (Vec<f64>, Vec<f64>) = ids.iter().map(|id| (mine[id].f1, theirs[id].f1)).unzip();
    let judged: (Vec<f64>, Vec<f64>) =
        ids.iter().filter_map(|id| Some((f64::from(u8::from(mine[id].correct?)), f64::from(u8::from(theirs[id].correct?))))).unzip();
    (paired(&f1.0, &f1.1, RESAMPLES, SEED), paired(&judged.0, &judged.1, RESAMPLES, SEED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::tally::tests::four_units;

    fn read(ranking: &Ranking, budget: usize) -> (Vec<String>, usize) {
        let (memories, used) = memories_within(&four_units(), ranking, &TokenCounter::Words13, budget);
        (memories.into_iter().map(|m| m.content).collect(), used)
    }

    #[test]
    fn the_answer_model_reads_the_prefix_that_fits_and_nothing_past_a_stop() {
        // Units of 100, 200, 300 and 50 tokens.
        let ranked = Ranking::new(vec![1, 0, 2, 3], None);
        // 200 + 100 fit 500; unit 2 (300 more) does not, and unit 3 after it is not read.
        assert_eq!(read(&ranked, 500), (vec!["unit 1".to_owned(), "unit 0".to_owned()], 300));
        assert_eq!(read(&ranked, 1000).1, 650);
        assert_eq!(read(&ranked, 150), (Vec::new(), 0), "the first unit does not fit: nothing is read");
        // The stop returns units 2 and 3: at 1,000 tokens they are all the model reads.
        let adaptive = Ranking::new(vec![2, 3, 1, 0], Some(2));
        assert_eq!(read(&adaptive, 1000), (vec!["unit 2".to_owned(), "unit 3".to_owned()], 350));
        assert_eq!(read(&adaptive, 320), (vec!["unit 2".to_owned()], 300));
    }

    /// Differences pair answers by question and budget; the judge's only where both verdicts
    /// parsed. q1: F1 1 vs 0, judged right vs wrong; q2: F1 0.5 vs 0.5, the system's verdict did
    /// not parse; q3 answered by the system only. F1: mean of (1, 0) = 0.5; judge: q1 alone, +1.
    #[test]
    fn qa_differences_pair_the_same_questions() {
        let result = |system: &str, q: &str, f1: f64, correct: Option<bool>| crate::qa::QaResult {
            system: system.into(),
            budget: 1000,
            question_id: q.into(),
            question: String::new(),
            kind: String::new(),
            gold: String::new(),
            answer: String::new(),
            context_tokens: 0,
            f1,
            correct,
            judge_reason: String::new(),
        };
        let results = [
            result("a", "q1", 1.0, Some(true)),
            result("b", "q1", 0.0, Some(false)),
            result("a", "q2", 0.5, None),
            result("b", "q2", 0.5, Some(true)),
            result("a", "q3", 1.0, Some(true)),
        ];
        let (f1, judge) = qa_differences(&results, "a", "b", 1000);
        assert_eq!(f1.unwrap().diff, 0.5);
        let judge = judge.unwrap();
        assert_eq!((judge.diff, judge.low, judge.high), (1.0, 1.0, 1.0));
        assert_eq!(qa_differences(&results, "a", "b", 500), (None, None), "no answers at that budget");
    }
}
