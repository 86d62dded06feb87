//! Time expressions in text (SPEC §6): relative ones ("yesterday", "last week", "two weeks ago",
//! "last Friday", "in the past month", "this year", "tomorrow", "next Friday") resolved against a
//! reference date, and absolute ones ("on 8 May 2023", "May 8", "in May 2023", "in 2023"), with
//! `since` / `after` / `before` / `around` / `between … and …` operators. A month or day without
//! a year takes the latest one not after the reference date.
//!
//! One implementation for the query parser (a question's time constraint, against the question
//! date), the rule extractor and grounding (the time a message mentions, against its date).

use std::ops::Range;
use std::sync::LazyLock;

use chrono::{Datelike, Days, Months, NaiveDate, Weekday};
use memkit_schema::{TimeConstraint, TimeSpan};
use regex::Regex;

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
        (re(r"\btomorrow\b".into()), |_, r| on(Some(day_span(r? + Days::new(1))))),
        // next Friday, this coming Friday: the first Friday after the reference date.
        (re(r"\b(?:next|this coming|coming)\s+(?P<w>monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tue|wed|thu|fri|sat|sun)\b".into()), |c, r| {
            let (r, w) = (r?, weekday(&c["w"])?);
            let ahead = (7 + w.num_days_from_monday() - r.weekday().num_days_from_monday() - 1) % 7 + 1;
            on(Some(day_span(r + Days::new(ahead.into()))))
        }),
        // next week / month / year: the following calendar unit; next weekend: its Saturday–Sunday.
        (re(r"\bnext\s+(?P<u>week|month|year|weekend)\b".into()), |c, r| {
            let r = r?;
            match &c["u"] {
                "week" => {
                    let monday = week_start(r) + Days::new(7);
                    on(range_span(monday, monday + Days::new(6)))
                }
                "month" => {
                    let d = r.checked_add_months(Months::new(1))?;
                    on(month_span(d.year(), d.month()))
                }
                "year" => on(year_span(r.year() + 1)),
                _ => {
                    let saturday = week_start(r) + Days::new(12);
                    on(range_span(saturday, saturday + Days::new(1)))
                }
            }
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
pub fn find_time(text: &str, reference: Option<NaiveDate>) -> Option<(TimeConstraint, Range<usize>)> {
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
/// use memkit_text::time::resolve_time;
/// let may8 = NaiveDate::from_ymd_opt(2023, 5, 8);
/// assert_eq!(resolve_time("I went there yesterday", may8).unwrap().to_string(), "on 2023-05-07");
/// // Without a reference a month has no year.
/// assert_eq!(resolve_time("in June", None), None);
/// assert_eq!(resolve_time("between May 2023 and July 2023", None).unwrap().to_string(), "between 2023-05 and 2023-07");
/// ```
pub fn resolve_time(text: &str, reference: Option<NaiveDate>) -> Option<TimeConstraint> {
    find_time(text, reference).map(|(c, _)| c)
}

/// The time a message mentions, as a record's `time` holds it: the span of its first time
/// expression read as "on" or "around" (an operator such as "since" or "before" says when
/// something did not happen, and gives none), relative expressions resolved against the
/// message's date.
///
/// ```
/// use chrono::NaiveDate;
/// use memkit_text::time::mentioned_time;
/// let fri = NaiveDate::from_ymd_opt(2023, 1, 20);
/// assert_eq!(mentioned_time("Lost my job as a banker yesterday", fri).unwrap().to_string(), "2023-01-19");
/// assert_eq!(mentioned_time("Wanna see my moves next Fri?", fri).unwrap().to_string(), "2023-01-27");
/// assert_eq!(mentioned_time("I love contemporary dance", fri), None);
/// ```
pub fn mentioned_time(text: &str, reference: Option<NaiveDate>) -> Option<TimeSpan> {
    match resolve_time(text, reference)? {
        TimeConstraint::On(span) | TimeConstraint::Around(span) => Some(span),
        _ => None,
    }
}

/// The normalised form of a `time` that has exactly one (`2023-05-20T10:00:00` → `2023-05-20`,
/// `2023/05/20` → `2023-05-20`, `May 2023` → `2023-05`, `May 20, 2023` → `2023-05-20`); `None`
/// when it is already normal or has no exact form ("last week").
pub fn normalise_time(time: &str) -> Option<String> {
    let t = time.trim();
    if t.is_empty() || t.parse::<TimeSpan>().is_ok() {
        return None;
    }
    if let Some(day) = t.get(..10).filter(|_| t.len() > 10 && t.as_bytes()[10] == b'T')
        && NaiveDate::parse_from_str(day, "%Y-%m-%d").is_ok()
    {
        return Some(day.to_owned());
    }
    // A four-digit year at the end, and a day only when there are three parts ("May 20, 2023").
    let parts = t.split_whitespace().count();
    let year_last = t.rsplit(' ').next().is_some_and(|y| y.len() == 4 && y.bytes().all(|b| b.is_ascii_digit()));
    if let Ok(d) = NaiveDate::parse_from_str(t, "%Y/%m/%d") {
        return Some(d.format("%Y-%m-%d").to_string());
    }
    if year_last && parts == 3 {
        for format in ["%B %d, %Y", "%B %d %Y", "%d %B %Y", "%b %d, %Y", "%b %d %Y", "%d %b %Y"] {
            if let Ok(d) = NaiveDate::parse_from_str(t, format) {
                return Some(d.format("%Y-%m-%d").to_string());
            }
        }
    }
    if year_last && parts == 2 {
        for format in ["%B %Y", "%b %Y"] {
            if let Ok(d) = NaiveDate::parse_from_str(&format!("1 {t}"), &format!("%d {format}")) {
                return Some(d.format("%Y-%m").to_string());
            }
        }
    }
    None
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
    fn future_expressions_resolve_forwards() {
        // 2023-01-20 is a Friday: "next Friday" is a week on, never today.
        let r = day(2023, 1, 20);
        assert_eq!(t("tomorrow", r), "on 2023-01-21");
        assert_eq!(t("next fri", r), "on 2023-01-27");
        assert_eq!(t("next Monday", r), "on 2023-01-23");
        assert_eq!(t("this coming Sunday", r), "on 2023-01-22");
        assert_eq!(t("next week", r), "on 2023-01-23/2023-01-29");
        assert_eq!(t("next weekend", r), "on 2023-01-28/2023-01-29");
        assert_eq!(t("next month", r), "on 2023-02");
        assert_eq!(t("next year", r), "on 2024");
        assert_eq!(t("tomorrow", None), "");
    }

    #[test]
    fn mentioned_time_is_the_span_without_operators() {
        let r = day(2023, 5, 29);
        assert_eq!(mentioned_time("two weeks ago", r).unwrap().to_string(), "2023-05-15");
        assert_eq!(mentioned_time("last week", r).unwrap().to_string(), "2023-05-22/2023-05-28");
        assert_eq!(mentioned_time("since March", r), None);
        assert_eq!(mentioned_time("nothing here", r), None);
    }

    #[test]
    fn times_with_one_exact_normal_form_are_normalised() {
        let cases = [
            ("2023-05-20T10:00:00", Some("2023-05-20")),
            ("2023/05/20", Some("2023-05-20")),
            ("May 2023", Some("2023-05")),
            ("May 20, 2023", Some("2023-05-20")),
            ("20 May 2023", Some("2023-05-20")),
            ("2023-05", None),
            ("last week", None),
            ("", None),
        ];
        for (time, expected) in cases {
            assert_eq!(normalise_time(time).as_deref(), expected, "{time}");
        }
    }
}
