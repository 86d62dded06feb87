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
    reporter: &dyn Reporter,
) -> Result<QaSection> {
    reporter.start("QA", items.len() as u64);
    let judge = if spec.judged { Some(models.judge.as_deref().unwrap_or(&*models.answer)) } else { None };
    let results = crate::qa::answer_and_judge(items, spec, &*models.answer, judge, &|n| reporter.advance(n as u64))?;
    reporter.finish();
    let budgets = spec.budget.as_slice().to_vec();
    let per_system = systems
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
            }
        })
        .collect();
    let questions = items.iter().map(|i| i.question_id.as_str()).collect::<HashSet<_>>().len();
    Ok(QaSection {
        metrics: QaMetrics {
            answer_model: models.answer.id().to_owned(),
            judge_model: judge.map(|j| j.id().to_owned()),
            questions,
            seed: spec.seed,
            budgets,
            systems: per_system,
        },
        results,
    })
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
}
