//! Query parsing: a question becomes a [`ParsedQuery`] (SPEC §1, §6).
//!
//! [`QueryParser`] is the seam; [`RuleQueryParser`] is the fast default, made of hand-written
//! rules and no model:
//!
//! - **time**: relative expressions ("yesterday", "last week", "two weeks ago", "last Friday",
//!   "in the past month", "this year") resolved against the question date, and absolute ones
//!   ("on 8 May 2023", "May 8", "in May 2023", "in 2023"), with `since` / `after` / `before` /
//!   `around` / `between … and …` operators, through [`resolve_time`]. A month or day without a
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

use std::ops::Range;
use std::sync::LazyLock;

use chrono::{Datelike, Days, Months, NaiveDate, NaiveDateTime, Weekday};
use memkit_schema::{AnswerDim, MemoryType, ParsedQuery, TimeConstraint, TimeSpan};
use regex::Regex;

use crate::Result;
use crate::text::{CALENDAR_WORDS, content_tokens, location_mentions, named_phrases};

/// Turns a question into retrieval fields.
pub trait QueryParser {
    /// Parses one question; `question_date` anchors relative time expressions.
    fn parse(&self, question: &str, question_date: Option<NaiveDateTime>) -> Result<ParsedQuery>;
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

static FIRST_PERSON: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(?:I['’](?:m|ve|d|ll)|I|[Mm]y|[Mm]e|[Mm]ine|[Mm]yself)\b").expect("valid regex"));

/// The question as a retrieval sentence: first person → "the user".
pub fn anchor(question: &str) -> String {
    FIRST_PERSON
        .replace_all(question.trim(), |c: &regex::Captures| {
            let w = &c[0];
            let w = w.replace('’', "'");
            match w.as_str() {
                "I'm" => "the user is",
                "I've" => "the user has",
                "I'd" => "the user would",
                "I'll" => "the user will",
                "I" | "me" | "Me" | "myself" | "Myself" => "the user",
                _ => "the user's",
            }
            .to_string()
        })
        .into_owned()
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

// ---------------------------------------------------------------------------------------------
// Time expressions.

const MONTHS: &str = "january|february|march|april|may|june|july|august|september|october|november|december";
const MONTHS_SHORT: &str = "january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec";
const NUMBER: &str = r"\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a couple of|a few";

fn month_number(name: &str) -> Option<u32> {
    let key = name.get(..3)?;
    let i = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"].iter().position(|m| *m == key)?;
    Some(i as u32 + 1)
}

fn number(word: &str) -> Option<u32> {
    Some(match word {
        "a" | "an" | "one" => 1,
        "two" | "a couple of" => 2,
        "three" | "a few" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        "nine" => 9,
        "ten" => 10,
        "eleven" => 11,
        "twelve" => 12,
        w => w.parse().ok()?,
    })
}

fn weekday(name: &str) -> Option<Weekday> {
    name.parse().ok()
}

fn day_span(d: NaiveDate) -> TimeSpan {
    TimeSpan::day(d)
}

fn month_span(year: i32, month: u32) -> Option<TimeSpan> {
    format!("{year:04}-{month:02}").parse().ok()
}

fn year_span(year: i32) -> Option<TimeSpan> {
    format!("{year:04}").parse().ok()
}

fn range_span(start: NaiveDate, end: NaiveDate) -> Option<TimeSpan> {
    format!("{}/{}", start.format("%Y-%m-%d"), end.format("%Y-%m-%d")).parse().ok()
}

/// Latest year in which (month, day) is not after the reference date.
fn infer_year(month: u32, day: u32, reference: NaiveDate) -> i32 {
    if (month, day) <= (reference.month(), reference.day()) { reference.year() } else { reference.year() - 1 }
}

/// The Monday of a date's week.
fn week_start(d: NaiveDate) -> NaiveDate {
    d - Days::new(u64::from(d.weekday().num_days_from_monday()))
}

/// How a found expression reads when no operator precedes it: exactly, or loosely ("two weeks
/// ago" means roughly then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    On,
    Around,
}

#[derive(Debug, Clone)]
struct Found {
    range: Range<usize>,
    span: TimeSpan,
    default: Reading,
}

fn on(span: Option<TimeSpan>) -> Option<(TimeSpan, Reading)> {
    span.map(|s| (s, Reading::On))
}

/// One year earlier, same granularity (Feb 29 becomes Feb 28).
fn year_earlier(s: TimeSpan) -> Option<TimeSpan> {
    Some(TimeSpan { start: s.start.checked_sub_months(Months::new(12))?, end: s.end.checked_sub_months(Months::new(12))?, ..s })
}

type Resolver = fn(&regex::Captures, Option<NaiveDate>) -> Option<(TimeSpan, Reading)>;

static TIME_PATTERNS: LazyLock<Vec<(Regex, Resolver)>> = LazyLock::new(|| {
    let re = |p: String| Regex::new(&p).expect("valid regex");
    let patterns: Vec<(Regex, Resolver)> = vec![
        // 8 May 2023, 8th of May, 2023
        (re(format!(r"\b(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m>{MONTHS_SHORT})\.?,?\s+(?P<y>\d{{4}})\b")), |c, _| {
            let date = NaiveDate::from_ymd_opt(c["y"].parse().ok()?, month_number(&c["m"])?, c["d"].parse().ok()?)?;
            Some((day_span(date), Reading::On))
        }),
        // May 8, 2023
        (re(format!(r"\b(?P<m>{MONTHS_SHORT})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y>\d{{4}})\b")), |c, _| {
            let date = NaiveDate::from_ymd_opt(c["y"].parse().ok()?, month_number(&c["m"])?, c["d"].parse().ok()?)?;
            Some((day_span(date), Reading::On))
        }),
        // 8 May, 8th of May
        (re(format!(r"\b(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m>{MONTHS})\b")), |c, r| {
            let (m, d) = (month_number(&c["m"])?, c["d"].parse().ok()?);
            Some((day_span(NaiveDate::from_ymd_opt(infer_year(m, d, r?), m, d)?), Reading::On))
        }),
        // May 8, May 8th
        (re(format!(r"\b(?P<m>{MONTHS})\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b")), |c, r| {
            let (m, d) = (month_number(&c["m"])?, c["d"].parse().ok()?);
            Some((day_span(NaiveDate::from_ymd_opt(infer_year(m, d, r?), m, d)?), Reading::On))
        }),
        // May 2023
        (re(format!(r"\b(?P<m>{MONTHS_SHORT})\.?,?\s+(?P<y>\d{{4}})\b")), |c, _| {
            Some((month_span(c["y"].parse().ok()?, month_number(&c["m"])?)?, Reading::On))
        }),
        // in May, since March: a bare month needs a preposition ("may" is also a verb).
        (
            re(format!(
                r"\b(?:in|on|during|since|after|before|until|till|between|and|to|from|of|by|early|late|mid|last|this)[\s-]+(?P<m>{MONTHS})\b"
            )),
            |c, r| {
                let m = month_number(&c["m"])?;
                Some((month_span(infer_year(m, 1, r?), m)?, Reading::On))
            },
        ),
        // 2023-05-08, 2023-05
        (re(r"\b(?P<iso>\d{4}-\d{2}(?:-\d{2})?)\b".into()), |c, _| on(c["iso"].parse().ok())),
        // in 2023
        (re(r"\b(?P<y>(?:19|20)\d{2})\b".into()), |c, _| on(year_span(c["y"].parse().ok()?))),
        (re(r"\b(?:today|tonight|this morning|this afternoon|this evening)\b".into()), |_, r| on(Some(day_span(r?)))),
        (re(r"\b(?:the\s+)?day\s+before\s+yesterday\b".into()), |_, r| on(Some(day_span(r? - Days::new(2))))),
        (re(r"\b(?:yesterday|last night)\b".into()), |_, r| on(Some(day_span(r? - Days::new(1))))),
        // 3 days ago, two weeks ago, a month ago
        (re(format!(r"\b(?P<n>{NUMBER})\s+(?P<u>day|week|month|year)s?\s+ago\b")), |c, r| {
            let (r, n) = (r?, number(&c["n"])?);
            match &c["u"] {
                "day" => Some((day_span(r.checked_sub_days(Days::new(n.into()))?), Reading::On)),
                // "two weeks ago" is loose: ±3 days around the day.
                "week" => Some((day_span(r.checked_sub_days(Days::new(7 * u64::from(n)))?), Reading::Around)),
                "month" => {
                    let d = r.checked_sub_months(Months::new(n))?;
                    on(month_span(d.year(), d.month()))
                }
                _ => on(year_span(r.year() - n as i32)),
            }
        }),
        // in the past two weeks, over the last 3 days: a rolling range ending on the question date.
        (re(format!(r"\b(?:past|last)\s+(?P<n>{NUMBER})\s+(?P<u>day|week|month|year)s?\b")), |c, r| {
            let (r, n) = (r?, number(&c["n"])?);
            let start = match &c["u"] {
                "day" => r.checked_sub_days(Days::new(n.into()))?,
                "week" => r.checked_sub_days(Days::new(7 * u64::from(n)))?,
                "month" => r.checked_sub_months(Months::new(n))?,
                _ => r.checked_sub_months(Months::new(12 * n))?,
            };
            on(range_span(start, r))
        }),
        (re(r"\b(?:the\s+)?past\s+(?P<u>week|month|year)\b".into()), |c, r| {
            let r = r?;
            let start = match &c["u"] {
                "week" => r.checked_sub_days(Days::new(7))?,
                "month" => r.checked_sub_months(Months::new(1))?,
                _ => r.checked_sub_months(Months::new(12))?,
            };
            on(range_span(start, r))
        }),
        // last week / month / year: the previous calendar unit; last weekend: its Saturday–Sunday.
        (re(r"\b(?:last|previous|this past)\s+(?P<u>week|month|year|weekend)\b".into()), |c, r| {
            let r = r?;
            match &c["u"] {
                "week" => {
                    let monday = week_start(r) - Days::new(7);
                    on(range_span(monday, monday + Days::new(6)))
                }
                "month" => {
                    let d = r.checked_sub_months(Months::new(1))?;
                    on(month_span(d.year(), d.month()))
                }
                "year" => on(year_span(r.year() - 1)),
                _ => {
                    let saturday = week_start(r) - Days::new(2);
                    on(range_span(saturday, saturday + Days::new(1)))
                }
            }
        }),
        (re(r"\bthis\s+(?P<u>week|month|year|weekend)\b".into()), |c, r| {
            let r = r?;
            match &c["u"] {
                "week" => on(range_span(week_start(r), r)),
                "month" => on(month_span(r.year(), r.month())),
                "year" => on(year_span(r.year())),
                _ => {
                    let saturday = week_start(r) + Days::new(5);
                    on(range_span(saturday, saturday + Days::new(1)))
                }
            }
        }),
        // last Friday: the latest Friday before the question date.
        (re(r"\b(?:last|this past|past|previous)\s+(?P<w>monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b".into()), |c, r| {
            let (r, w) = (r?, weekday(&c["w"])?);
            let back = (7 + r.weekday().num_days_from_monday() - w.num_days_from_monday() - 1) % 7 + 1;
            on(Some(day_span(r - Days::new(back.into()))))
        }),
    ];
    patterns
});

/// Every time expression in a lowercase text, in order; overlapping ones keep the longest.
fn time_expressions(lower: &str, reference: Option<NaiveDate>) -> Vec<Found> {
    let mut all: Vec<Found> = Vec::new();
    for (re, resolve) in TIME_PATTERNS.iter() {
        for c in re.captures_iter(lower) {
            let whole = c.get(0).expect("group 0");
            // A bare month's match starts at its preposition; the expression starts at the month.
            let start = c.name("m").filter(|_| c.name("d").is_none() && c.name("y").is_none()).map_or(whole.start(), |m| m.start());
            if let Some((span, default)) = resolve(&c, reference) {
                all.push(Found { range: start..whole.end(), span, default });
            }
        }
    }
    all.sort_by_key(|f| (f.range.start, std::cmp::Reverse(f.range.end)));
    let mut kept: Vec<Found> = Vec::new();
    for f in all {
        if kept.last().is_none_or(|k| f.range.start >= k.range.end) {
            kept.push(f);
        }
    }
    kept
}

/// The first time constraint in a text and the byte range it covers (operator included).
fn find_time(text: &str, reference: Option<NaiveDate>) -> Option<(TimeConstraint, Range<usize>)> {
    // Lowercasing keeps byte offsets for ASCII; texts with other scripts are matched as they are.
    let lower = if text.is_ascii() { text.to_ascii_lowercase() } else { text.to_string() };
    let found = time_expressions(&lower, reference);
    let first = found.first()?;
    let before = lower[..first.range.start].trim_end();
    let op_start = |op: &str| before.len() - op.len();
    let ends =
        |op: &str| before.ends_with(op) && before[..before.len() - op.len()].chars().next_back().is_none_or(|c| !c.is_alphanumeric());
    let mut range = first.range.clone();

    let second = found.get(1).filter(|s| {
        let gap = lower[first.range.end..s.range.start].trim();
        matches!(gap, "and" | "to" | "until" | "till" | "-" | "through")
    });
    let constraint = if let Some(second) = second.filter(|_| ends("between") || ends("from")) {
        range = op_start(if ends("between") { "between" } else { "from" })..second.range.end;
        // "between May and July" asked in June: both years were inferred apart; keep the order.
        let start = if second.span.end < first.span.start { year_earlier(first.span)? } else { first.span };
        TimeConstraint::Between(start, second.span)
    } else if ends("since") {
        range.start = op_start("since");
        // "since March" includes March: the constraint is "after the day before it".
        TimeConstraint::After(day_span(first.span.start.pred_opt()?))
    } else if ends("after") {
        range.start = op_start("after");
        TimeConstraint::After(first.span)
    } else if let Some(op) = ["before", "until", "till", "prior to"].into_iter().find(|op| ends(op)) {
        range.start = op_start(op);
        TimeConstraint::Before(first.span)
    } else if let Some(op) = ["around", "about", "approximately", "roughly"].into_iter().find(|op| ends(op)) {
        range.start = op_start(op);
        TimeConstraint::Around(first.span)
    } else {
        match first.default {
            Reading::On => TimeConstraint::On(first.span),
            Reading::Around => TimeConstraint::Around(first.span),
        }
    };
    Some((constraint, range))
}

/// The first time expression of a text as a constraint, relative expressions resolved against
/// `reference` (without it only expressions with an explicit year resolve).
///
/// ```
/// use chrono::NaiveDate;
/// use memkit_engine::query::resolve_time;
/// let may8 = NaiveDate::from_ymd_opt(2023, 5, 8);
/// assert_eq!(resolve_time("I went there yesterday", may8).unwrap().to_string(), "on 2023-05-07");
/// // Without a reference a month has no year.
/// assert_eq!(resolve_time("in June", None), None);
/// assert_eq!(resolve_time("between May 2023 and July 2023", None).unwrap().to_string(), "between 2023-05 and 2023-07");
/// ```
pub fn resolve_time(text: &str, reference: Option<NaiveDate>) -> Option<TimeConstraint> {
    find_time(text, reference).map(|(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(y: i32, m: u32, d: u32) -> Option<NaiveDate> {
        NaiveDate::from_ymd_opt(y, m, d)
    }

    fn t(text: &str, reference: Option<NaiveDate>) -> String {
        resolve_time(text, reference).map(|c| c.to_string()).unwrap_or_default()
    }

    #[test]
    fn relative_expressions_resolve_against_the_reference() {
        // 2023-05-29 is a Monday.
        let r = day(2023, 5, 29);
        assert_eq!(t("yesterday", r), "on 2023-05-28");
        assert_eq!(t("the day before yesterday", r), "on 2023-05-27");
        assert_eq!(t("3 days ago", r), "on 2023-05-26");
        assert_eq!(t("two weeks ago", r), "around 2023-05-15");
        assert_eq!(t("a month ago", r), "on 2023-04");
        assert_eq!(t("2 years ago", r), "on 2021");
        assert_eq!(t("last week", r), "on 2023-05-22/2023-05-28");
        assert_eq!(t("last weekend", r), "on 2023-05-27/2023-05-28");
        assert_eq!(t("last month", r), "on 2023-04");
        assert_eq!(t("last year", r), "on 2022");
        assert_eq!(t("this year", r), "on 2023");
        assert_eq!(t("this week", r), "on 2023-05-29");
        assert_eq!(t("in the past two weeks", r), "on 2023-05-15/2023-05-29");
        assert_eq!(t("over the past month", r), "on 2023-04-29/2023-05-29");
        assert_eq!(t("last Friday", r), "on 2023-05-26");
        // On a Monday, "last Monday" is a week back, never today.
        assert_eq!(t("last monday", r), "on 2023-05-22");
        assert_eq!(t("yesterday", None), "");
    }

    #[test]
    fn absolute_expressions_and_operators() {
        let r = day(2023, 10, 1);
        assert_eq!(t("on 8 May 2023", None), "on 2023-05-08");
        assert_eq!(t("on the 8th of May, 2023", None), "on 2023-05-08");
        assert_eq!(t("May 8, 2023", None), "on 2023-05-08");
        assert_eq!(t("May 8", r), "on 2023-05-08");
        assert_eq!(t("on 8 December", r), "on 2022-12-08");
        assert_eq!(t("in May 2023", None), "on 2023-05");
        assert_eq!(t("in June", r), "on 2023-06");
        assert_eq!(t("in December", r), "on 2022-12");
        assert_eq!(t("in 2022", None), "on 2022");
        assert_eq!(t("on 2023-05-08", None), "on 2023-05-08");
        assert_eq!(t("since March", r), "after 2023-02-28");
        assert_eq!(t("after June 2023", None), "after 2023-06");
        assert_eq!(t("before June 2023", None), "before 2023-06");
        assert_eq!(t("between May and July", r), "between 2023-05 and 2023-07");
        assert_eq!(t("from 1 May 2023 to 3 May 2023", None), "between 2023-05-01 and 2023-05-03");
        // Both months take their year from the question date, and the range never runs backwards.
        assert_eq!(t("between May and July", day(2023, 6, 15)), "between 2022-05 and 2022-07");
        assert_eq!(t("between November and February", day(2023, 3, 1)), "between 2022-11 and 2023-02");
        assert_eq!(t("around 10 May 2023", None), "around 2023-05-10");
        // "may" the verb is not a month.
        assert_eq!(t("what may help me sleep", r), "");
    }

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
