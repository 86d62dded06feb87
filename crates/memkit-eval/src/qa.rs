//! Question answering over what each system retrieves (`[qa]` in an eval recipe).
//!
//! For a seeded sample of the scored questions, every system's units that fit the QA budget (in
//! rank order, up to its adaptive stop) become the memories of `prompts/answer.j2`; an answer
//! model replies, and each reply is scored with the official LoCoMo F1 (category rules, NLTK
//! Porter stemming; LongMemEval answers get the plain token F1) and by an LLM judge
//! (`prompts/judge.j2`, a JSON verdict constrained by its schema). The models come from the
//! caller through [`ChatModel`] (the CLI builds them from the recipe: a local GGUF or an
//! OpenAI-compatible endpoint, with a reply cache).

use memkit_infer::chat::{ChatModel, ChatRequest};
use memkit_prompt::{AnswerMemory, ChatMessage, JudgeLabel, JudgeVerdict, Prompts};
use serde::{Deserialize, Serialize};

use crate::recipe::QaSpec;
use crate::{Error, Result};

/// Asks `model` every chat of `chats`, greedy, at most `max_tokens` tokens each, constrained to
/// `schema` when given; the replies' texts, in order. A backend failure is an error.
fn ask(model: &dyn ChatModel, chats: Vec<Vec<ChatMessage>>, max_tokens: usize, schema: Option<serde_json::Value>) -> Result<Vec<String>> {
    let requests: Vec<ChatRequest> =
        chats.into_iter().map(|messages| ChatRequest { schema: schema.clone(), ..ChatRequest::new(messages, max_tokens) }).collect();
    model
        .complete(&requests)
        .into_iter()
        .map(|r| r.map(|reply| reply.text).map_err(|e| Error::Qa(format!("{}: {e}", model.id()))))
        .collect()
}

/// One question put to one system.
#[derive(Debug, Clone)]
pub struct QaItem {
    /// The system's report name.
    pub system: String,
    /// The question id.
    pub question_id: String,
    /// The question text.
    pub question: String,
    /// When it is asked.
    pub date: Option<chrono::NaiveDateTime>,
    /// The gold answer.
    pub gold: String,
    /// LoCoMo category (1–4), or `None` (LongMemEval: plain F1).
    pub category: Option<u8>,
    /// LongMemEval question type, or the LoCoMo category name, for the per-kind table.
    pub kind: String,
    /// The retrieved memories that fit the budget, in rank order.
    pub memories: Vec<AnswerMemory>,
    /// Their tokens.
    pub context_tokens: usize,
    /// The budget they were taken within.
    pub budget: usize,
}

/// One scored answer (a line of the report's `qa.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QaResult {
    /// The system's report name.
    pub system: String,
    /// The context budget the answer was given within.
    pub budget: usize,
    /// The question id.
    pub question_id: String,
    /// The question.
    pub question: String,
    /// LoCoMo category name or LongMemEval question type.
    pub kind: String,
    /// The gold answer.
    pub gold: String,
    /// The answer model's reply.
    pub answer: String,
    /// Context tokens given to the answer model.
    pub context_tokens: usize,
    /// Official LoCoMo F1 (or token F1 for LongMemEval).
    pub f1: f64,
    /// The judge's label, `None` when the judge is off or its reply did not parse.
    pub correct: Option<bool>,
    /// The judge's reason, or its unparsable reply.
    pub judge_reason: String,
}

/// The JSON schema of a [`JudgeVerdict`] (reason first, bounded).
pub fn judge_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "reason": { "type": "string", "maxLength": 300 },
            "label": { "type": "string", "enum": ["CORRECT", "WRONG"] }
        },
        "required": ["reason", "label"],
        "additionalProperties": false
    })
}

/// Whether question `id` is in the seeded sample of `n` out of `total` scored questions: the
/// `n` ids with the smallest hash under `seed` (stable when questions are added or removed).
pub fn sample(ids: &[&str], n: usize, seed: u64) -> std::collections::HashSet<String> {
    let mut ranked: Vec<(u64, &str)> = ids.iter().map(|id| (memkit_data::stable_hash(id, seed), *id)).collect();
    ranked.sort_unstable();
    ranked.into_iter().take(n).map(|(_, id)| id.to_owned()).collect()
}

/// Answers, scores and judges `items` in chunks of `chunk` (each chunk one model call, so a
/// caching model keeps what finished). `progress` is told the answers done.
pub fn answer_and_judge(
    items: &[QaItem],
    spec: &QaSpec,
    answerer: &dyn ChatModel,
    judge: Option<&dyn ChatModel>,
    progress: &dyn Fn(usize),
) -> Result<Vec<QaResult>> {
    let prompts = Prompts::embedded().map_err(|e| Error::Qa(e.to_string()))?;
    let chunk = spec.chunk.max(1);
    let mut out = Vec::with_capacity(items.len());
    for group in items.chunks(chunk) {
        let chats = group
            .iter()
            .map(|i| Ok(prompts.render_answer(&i.question, i.date, &i.memories).map_err(|e| Error::Qa(e.to_string()))?.to_messages()))
            .collect::<Result<Vec<_>>>()?;
        let answers = ask(answerer, chats, spec.max_tokens, None)?;
        let verdicts = match judge {
            Some(judge) => {
                let chats = group
                    .iter()
                    .zip(&answers)
                    .map(|(i, a)| {
                        Ok(prompts.render_judge(&i.question, &i.gold, a.trim()).map_err(|e| Error::Qa(e.to_string()))?.to_messages())
                    })
                    .collect::<Result<Vec<_>>>()?;
                ask(judge, chats, 160, Some(judge_schema()))?.into_iter().map(Some).collect()
            }
            None => vec![None; group.len()],
        };
        for ((item, answer), verdict) in group.iter().zip(answers).zip(verdicts) {
            let answer = answer.trim().to_owned();
            let f1 = match item.category {
                Some(c) => crate::locomo_f1::qa_score(&answer, &item.gold, c)?,
                None => crate::locomo_f1::f1_score(&answer, &item.gold),
            };
            let (correct, judge_reason) = match verdict {
                None => (None, String::new()),
                Some(reply) => match serde_json::from_str::<JudgeVerdict>(reply.trim()) {
                    Ok(v) => (Some(v.label == JudgeLabel::Correct), v.reason),
                    Err(_) => (None, reply),
                },
            };
            out.push(QaResult {
                system: item.system.clone(),
                budget: item.budget,
                question_id: item.question_id.clone(),
                question: item.question.clone(),
                kind: item.kind.clone(),
                gold: item.gold.clone(),
                answer,
                context_tokens: item.context_tokens,
                f1,
                correct,
                judge_reason,
            });
        }
        progress(group.len());
    }
    Ok(out)
}

/// Per-system means: questions, F1, judge accuracy (over parsed verdicts), unparsed verdicts,
/// context tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QaSummary {
    /// Questions answered.
    pub questions: usize,
    /// Mean F1.
    pub f1: f64,
    /// Share judged correct, over the verdicts that parsed.
    pub judge_accuracy: Option<f64>,
    /// Verdicts that did not parse.
    pub judge_unparsed: usize,
    /// Mean context tokens given to the answer model.
    pub context_tokens: f64,
}

/// The summary of `system`'s results.
pub fn summarize<'a>(results: impl IntoIterator<Item = &'a QaResult>) -> QaSummary {
    let (mut s, mut judged, mut correct) = (QaSummary::default(), 0usize, 0usize);
    for r in results {
        s.questions += 1;
        s.f1 += r.f1;
        s.context_tokens += r.context_tokens as f64;
        match r.correct {
            Some(c) => {
                judged += 1;
                correct += usize::from(c);
            }
            None if !r.judge_reason.is_empty() => s.judge_unparsed += 1,
            None => {}
        }
    }
    if s.questions > 0 {
        s.f1 /= s.questions as f64;
        s.context_tokens /= s.questions as f64;
    }
    s.judge_accuracy = (judged > 0).then(|| correct as f64 / judged as f64);
    s
}

#[cfg(test)]
mod tests {
    use memkit_infer::chat::Reply;

    use super::*;

    /// Answers with the gold text for questions about cats, "no idea" otherwise; judges by
    /// looking for the gold in the answer, except that it replies garbage for one question.
    struct Scripted;
    impl ChatModel for Scripted {
        fn id(&self) -> &str {
            "scripted"
        }
        fn complete(&self, requests: &[ChatRequest]) -> Vec<memkit_infer::Result<Reply>> {
            let mut out = Vec::new();
            for r in requests {
                out.push({
                    let user = &r.messages[1].content;
                    let text = match &r.schema {
                        None if user.contains("cat") => "  Tom  ".to_owned(),
                        None => "no idea".to_owned(),
                        Some(_) if user.contains("Question: garbage") => "not json".to_owned(),
                        Some(_) => {
                            let ok = user.contains("Candidate answer: Tom");
                            serde_json::json!({"reason": "r", "label": if ok { "CORRECT" } else { "WRONG" }}).to_string()
                        }
                    };
                    Ok(Reply { text, usage: Default::default() })
                });
            }
            out
        }
    }

    fn item(question: &str, memory: &str) -> QaItem {
        QaItem {
            system: "s".into(),
            question_id: question.into(),
            question: question.into(),
            date: None,
            gold: "Tom".into(),
            category: Some(4),
            kind: "single-hop".into(),
            memories: vec![AnswerMemory { content: memory.into(), ..AnswerMemory::default() }],
            context_tokens: 10,
            budget: 100,
        }
    }

    #[test]
    fn answers_are_scored_by_f1_and_the_judge_and_garbage_verdicts_are_counted() {
        let items = [item("What is the cat called?", "Ann's cat is Tom"), item("Where?", "Paris"), item("garbage", "x")];
        let spec = QaSpec { chunk: 2, ..QaSpec::default() };
        let done = std::cell::Cell::new(0);
        let results = answer_and_judge(&items, &spec, &Scripted, Some(&Scripted), &|n| done.set(done.get() + n)).unwrap();
        assert_eq!(done.get(), 3);
        assert_eq!(results[0].answer, "Tom");
        assert_eq!((results[0].f1, results[0].correct), (1.0, Some(true)));
        assert_eq!((results[1].f1, results[1].correct), (0.0, Some(false)));
        assert_eq!((results[2].correct, results[2].judge_reason.as_str()), (None, "not json"));
        let s = summarize(&results);
        assert_eq!((s.questions, s.judge_unparsed, s.judge_accuracy), (3, 1, Some(0.5)));
        assert!((s.f1 - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_sample_is_seeded_and_stable_under_additions() {
        let ids: Vec<String> = (0..200).map(|i| format!("q{i}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let a = sample(&refs, 20, 7);
        assert_eq!(a.len(), 20);
        assert_eq!(a, sample(&refs, 20, 7));
        assert_ne!(a, sample(&refs, 20, 8));
        // Adding questions only swaps in new ones that hash lower; old members stay or leave,
        // none is replaced by another old one.
        let mut more = refs.clone();
        more.extend(["new1", "new2"]);
        let b = sample(&more, 20, 7);
        assert!(b.iter().filter(|id| !id.starts_with("new")).all(|id| a.contains(id)));
    }
}
