//! The benchmark question type shared by LoCoMo and LongMemEval.

use chrono::NaiveDateTime;
use serde::{Deserialize, Serialize};

/// One benchmark question with its gold answer and evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// Unique id: LoCoMo `conv-26/q0` (sample id and index in `qa`); LongMemEval `question_id`.
    pub id: String,
    /// The question text.
    pub question: String,
    /// Gold answer; integer answers become strings. Empty for LoCoMo category-5 questions that
    /// have only an `adversarial_answer`.
    pub answer: String,
    /// LoCoMo category 1–5 (see [`locomo_category_name`]); `None` for LongMemEval.
    pub category: Option<u8>,
    /// LoCoMo category 5: the tempting but wrong answer.
    pub adversarial_answer: Option<String>,
    /// Gold evidence turn ids (LoCoMo `dia_id`s; LongMemEval turns with `has_answer`).
    pub evidence: Vec<String>,
    /// Gold evidence session ids (LoCoMo sessions of the evidence turns; LongMemEval
    /// `answer_session_ids`).
    pub evidence_sessions: Vec<String>,
    /// LongMemEval `question_type`; for LoCoMo the category name (`multi-hop`, `temporal`, ...).
    pub question_type: Option<String>,
    /// When the question is asked (LongMemEval `question_date`); `None` for LoCoMo.
    pub question_date: Option<NaiveDateTime>,
    /// Unanswerable by design: LongMemEval `_abs` ids and LoCoMo category 5.
    pub abstention: bool,
}

/// The meaning of a LoCoMo category (from LoCoMo's `task_eval/evaluation.py`).
pub fn locomo_category_name(category: u8) -> Option<&'static str> {
    Some(match category {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        5 => "adversarial",
        _ => return None,
    })
}
