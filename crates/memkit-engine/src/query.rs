//! Query parsing: a question becomes a [`ParsedQuery`] (SPEC §1, §6).
//!
//! [`QueryParser`] is the seam; [`RuleQueryParser`] is the fast default, made of hand-written
//! rules and no model (DimMem's model-backed parser is [`crate::llm::LlmQueryParser`], feature
//! `llm`):
//!
//! - **time**: relative expressions ("yesterday", "last week", "two weeks ago", "last Friday",
//!   "in the past month", "this year") resolved against the question date, and absolute ones
//!   ("on 8 May 2023", "May 8", "in May 2023", "in 2023"), with `since` / `after` / `before` /
//!   `around` / `between … and …` operators, through [`memkit_text::time`]. A month or day without a
//!   year takes the latest one not after the question date. The time a question asks *for*
//!   ("When did…") gives no constraint; an explicit time in it still does ("When did Ann go
//!   camping in June?").
//! - **answer_dim** from the question word: when / how long / what year → time, where / which city
//!   → location, why / what made / what inspired / the reason → reason, what for / purpose /
//!   in order to → purpose, who / which → keywords, everything else → content.
//! - **keywords**: capitalised names and quoted titles as phrases, then the remaining content
//!   words, minus question scaffolding and time words.
//! - **target types** from cue words: like / prefer / favourite / usually → profile;
//!   did / went / happened / when / a time constraint → episodic; is / works / lives / own → fact.
//!   All three together means any.
//! - **assistant context** from cues such as "you said", "you recommended", "remind me",
//!   "last time", "our previous conversation".
//! - **query_anchor**: the question with I / me / my → "the user" / "the user's".
//!
//! ```
//! use chrono::NaiveDate;
//! use memkit_engine::query::{QueryParser, RuleQueryParser};
//! use memkit_schema::AnswerDim;
//! let date = NaiveDate::from_ymd_opt(2023, 5, 29).unwrap().and_hms_opt(12, 0, 0).unwrap();
//! let q = RuleQueryParser::new().parse("Where did I go hiking last week?", Some(date)).unwrap();
//! assert_eq!(q.answer_dim, AnswerDim::Location);
//! assert_eq!(q.time.unwrap().to_string(), "on 2023-05-22/2023-05-28");
//! assert_eq!(q.query_anchor, "Where did the user go hiking last week?");
//! ```

use std::sync::LazyLock;

use chrono::NaiveDateTime;
use memkit_schema::{AnswerDim, MemoryType, ParsedQuery};
use memkit_text::time::find_time;
use regex::Regex;

use crate::Result;
use crate::text::{CALENDAR_WORDS, content_tokens, location_mentions, named_phrases};

/// Turns a question into retrieval fields.
pub trait QueryParser {
    /// Parses one question; `question_date` anchors relative time expressions.
    fn parse(&self, question: &str, question_date: Option<NaiveDateTime>) -> Result<ParsedQuery>;

    /// Parses many questions, in order (a model-backed parser asks them in batches).
    fn parse_all(&self, questions: &[(&str, Option<NaiveDateTime>)]) -> Result<Vec<ParsedQuery>> {
        questions.iter().map(|&(question, date)| self.parse(question, date)).collect()
    }
}

/// The rule-based parser (no model); see the module docs for the rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuleQueryParser;

impl RuleQueryParser {
    /// A parser; it has no settings.
    pub fn new() -> Self {
        RuleQueryParser
    }
}

impl QueryParser for RuleQueryParser {
    fn parse(&self, question: &str, question_date: Option<NaiveDateTime>) -> Result<ParsedQuery> {
        let reference = question_date.map(|d| d.date());
        let answer_dim = answer_dim(question);
        let found = find_time(question, reference);
        let time = found.as_ref().map(|(c, _)| *c);
        // Keywords are read from the question without its time expression ("8 May 2023").
        let mut without_time = question.to_string();
        if let Some((_, range)) = &found {
            without_time.replace_range(range.clone(), &" ".repeat(range.len()));
        }
        let location = location_mentions(&without_time).into_iter().next().unwrap_or_default();
        Ok(ParsedQuery {
            query_anchor: anchor(question),
            need_assistant_context: needs_assistant_context(question),
            target_memory_type: target_types(question, answer_dim, time.is_some()),
            keywords: keywords(&without_time),
            time,
            location,
            answer_dim,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Anchor and assistant context.

/// The question as a retrieval sentence: first person → "the user" (memkit-text's
/// [`third_person`](memkit_text::person::third_person)).
pub fn anchor(question: &str) -> String {
    memkit_text::person::third_person(question.trim(), "the user")
}

/// Phrases showing that the answer is something the assistant said before.
const ASSISTANT_CUES: &[&str] = &[
    "you said",
    "you recommended",
    "you told me",
    "you suggested",
    "you mentioned",
    "you gave me",
    "you provided",
    "you listed",
    "you shared",
    "you explained",
    "you advised",
    "you came up with",
    "you wrote",
    "did you say",
    "did you recommend",
    "did you suggest",
    "did you mention",
    "last time",
    "remind me",
    "our previous",
    "our last conversation",
    "our last chat",
    "our earlier",
    "our conversation",
    "previous conversation",
    "previous chat",
    "earlier you",
    "you earlier",
    "we discussed",
    "we talked about",
];

/// Whether the question asks about something the assistant said before.
pub fn needs_assistant_context(question: &str) -> bool {
    let lower = question.to_lowercase().replace('’', "'");
    ASSISTANT_CUES.iter().any(|c| lower.contains(c))
}

// ---------------------------------------------------------------------------------------------
// Answer dimension and target types.

fn pattern(p: &str) -> Regex {
    Regex::new(p).expect("valid regex")
}

/// Question words and what they ask for; the earliest match in the question wins.
static QUESTION_WORDS: LazyLock<Vec<(Regex, AnswerDim)>> = LazyLock::new(|| {
    vec![
        (pattern(r"\bhow (?:old|many|much|often)\b"), AnswerDim::Content),
        (pattern(r"\bhow many (?:days|weeks|months|years)\b"), AnswerDim::Time),
        (pattern(r"\bhow long\b"), AnswerDim::Time),
        (pattern(r"\bwhen\b"), AnswerDim::Time),
        (pattern(r"\b(?:what|which) (?:time|date|day|year|month|week|season)\b"), AnswerDim::Time),
        (pattern(r"\bwhere\b"), AnswerDim::Location),
        (pattern(r"\b(?:what|which) (?:city|country|place|state|town|location|venue|restaurant|address)\b"), AnswerDim::Location),
        (pattern(r"\bwhy\b|\bhow come\b"), AnswerDim::Reason),
        (pattern(r"\b(?:who|whom|whose|which)\b"), AnswerDim::Keywords),
        (pattern(r"\b(?:what|how)\b"), AnswerDim::Content),
    ]
});

/// Cues that turn a content question into a reason or purpose question ("What inspired…").
static REASON_CUES: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"\bwhat (?:made|makes|caused|causes|led|leads|prompted|inspired|inspires|motivated|motivates|drove|triggered)\b|\breasons?\b")
});
static PURPOSE_CUES: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"\bwhat for\b|\bfor what\b|\bpurpose\b|\bin order to\b|\bgoals?\b|\baims?\b|\bwhat\b[^?.!]*\bfor\s*\?"));

/// The dimension a question asks for.
pub fn answer_dim(question: &str) -> AnswerDim {
    let lower = question.to_lowercase();
    // Only the last sentence with a question mark asks; earlier ones set the scene.
    let clause = lower.rfind('?').map_or(lower.as_str(), |end| {
        let start = lower[..end].rfind(['.', '!', '?']).map_or(0, |i| i + 1);
        &lower[start..=end]
    });
    // The earliest question word decides; on a tie, the longer (more specific) pattern wins.
    let best = QUESTION_WORDS
        .iter()
        .filter_map(|(re, dim)| re.find(clause).map(|m| (m.start(), std::cmp::Reverse(m.len()), *dim)))
        .min_by_key(|&(start, len, _)| (start, len));
    let dim = best.map_or(AnswerDim::Content, |(_, _, d)| d);
    if dim == AnswerDim::Content {
        if REASON_CUES.is_match(clause) {
            return AnswerDim::Reason;
        }
        if PURPOSE_CUES.is_match(clause) {
            return AnswerDim::Purpose;
        }
    }
    dim
}

const PROFILE_CUES: &[&str] = &[
    "like",
    "likes",
    "love",
    "loves",
    "prefer",
    "prefers",
    "preferred",
    "preference",
    "favorite",
    "favourite",
    "usually",
    "enjoy",
    "enjoys",
    "hobby",
    "hobbies",
    "habit",
    "habits",
    "often",
    "always",
    "typically",
    "interested",
    "passionate",
    "fan",
    "tend",
    "tends",
];
const EPISODIC_CUES: &[&str] = &[
    "did",
    "went",
    "happened",
    "when",
    "ago",
    "yesterday",
    "attend",
    "attended",
    "visit",
    "visited",
    "trip",
    "bought",
    "plan",
    "planning",
    "planned",
    "event",
    "last",
    "recently",
    "first",
];
const FACT_CUES: &[&str] = &[
    "is",
    "are",
    "works",
    "work",
    "job",
    "lives",
    "live",
    "living",
    "name",
    "named",
    "own",
    "owns",
    "status",
    "relationship",
    "currently",
];

/// The memory types a question's answer is likely stored as; empty means any.
pub fn target_types(question: &str, answer_dim: AnswerDim, has_time: bool) -> Vec<MemoryType> {
    let words: Vec<String> = crate::text::tokens(question);
    let has = |cues: &[&str]| words.iter().any(|w| cues.contains(&w.as_str()));
    let mut types = Vec::new();
    if has(FACT_CUES) {
        types.push(MemoryType::Fact);
    }
    if has(EPISODIC_CUES) || has_time || answer_dim == AnswerDim::Time {
        types.push(MemoryType::Episodic);
    }
    if has(PROFILE_CUES) {
        types.push(MemoryType::Profile);
    }
    if types.len() == MemoryType::ALL.len() {
        types.clear();
    }
    types
}

// ---------------------------------------------------------------------------------------------
// Keywords.

/// Words that shape a question but name nothing worth matching.
const QUERY_NOISE: &[&str] = &[
    "ago",
    "also",
    "anything",
    "back",
    "chat",
    "confirm",
    "conversation",
    "currently",
    "day",
    "days",
    "done",
    "earlier",
    "ever",
    "far",
    "first",
    "get",
    "go",
    "going",
    "got",
    "kind",
    "know",
    "last",
    "lately",
    "let",
    "like",
    "likely",
    "long",
    "look",
    "looking",
    "many",
    "mention",
    "mentioned",
    "might",
    "month",
    "months",
    "much",
    "name",
    "names",
    "number",
    "one",
    "please",
    "previous",
    "recall",
    "recently",
    "recommend",
    "recommended",
    "remember",
    "remind",
    "said",
    "say",
    "should",
    "something",
    "suggest",
    "suggested",
    "tell",
    "thing",
    "things",
    "think",
    "time",
    "times",
    "today",
    "told",
    "total",
    "type",
    "us",
    "user",
    "want",
    "wanted",
    "week",
    "weekend",
    "weeks",
    "wondering",
    "year",
    "years",
    "yesterday",
    "past",
    "still",
    "usually",
    "often",
    "always",
    "happened",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "old",
    "new",
    "ones",
    "im",
    "ive",
    "id",
    "ill",
    "youre",
    "youve",
    "dont",
    "didnt",
    "doesnt",
    "cant",
    "wont",
    "whats",
    "thats",
];

/// Key phrases of a question: capitalised names and quoted titles as written, then the other
/// content words in lowercase, each once.
pub fn keywords(question: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut covered: Vec<String> = Vec::new();
    for p in named_phrases(question) {
        if !out.iter().any(|o| o.eq_ignore_ascii_case(&p.text)) && !p.text.is_empty() {
            covered.extend(crate::text::tokens(&p.text));
            out.push(p.text);
        }
    }
    for t in content_tokens(question) {
        let noise = QUERY_NOISE.contains(&t.as_str()) || CALENDAR_WORDS.contains(&t.as_str()) || t.len() < 2;
        if !noise && !covered.contains(&t) && !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_dims_follow_question_words() {
        let cases = [
            ("When did Caroline go to the LGBTQ support group?", AnswerDim::Time),
            ("How long was I in Korea for?", AnswerDim::Time),
            ("How many days ago did I attend the service?", AnswerDim::Time),
            ("How old was I when my grandma gave me the necklace?", AnswerDim::Content),
            ("Where did Caroline move from 4 years ago?", AnswerDim::Location),
            ("Which city did I visit?", AnswerDim::Location),
            ("Why did Ann quit her job?", AnswerDim::Reason),
            ("What inspired Caroline to paint?", AnswerDim::Reason),
            ("What was the purpose of my trip?", AnswerDim::Purpose),
            ("What did Caroline research adoption agencies for?", AnswerDim::Purpose),
            ("Who supports Caroline when she has a negative experience?", AnswerDim::Keywords),
            ("What did Caroline research?", AnswerDim::Content),
            ("Did I finish reading 'The Nightingale'?", AnswerDim::Content),
            ("I was going through our chat. Where is the venue you recommended?", AnswerDim::Location),
        ];
        for (q, want) in cases {
            assert_eq!(answer_dim(q), want, "{q}");
        }
    }

    #[test]
    fn anchor_rewrites_first_person() {
        assert_eq!(anchor("Where did I put my keys?"), "Where did the user put the user's keys?");
        assert_eq!(anchor("I'm sure you told me, remind me"), "the user is sure you told the user, remind the user");
        assert_eq!(anchor("My sister and I’ve been"), "the user's sister and the user has been");
        assert_eq!(anchor("Imagine mine, myself"), "Imagine the user's, the user");
    }
}
