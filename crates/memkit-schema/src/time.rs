//! Time values of records (`YYYY`, `YYYY-MM`, `YYYY-MM-DD`, `A/B`) and query time constraints.

use chrono::{Datelike, NaiveDate};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Granularity of a time value; decides the "around" tolerance (±3 days, ±31 days, ±366 days).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// `YYYY-MM-DD`.
    Day,
    /// `YYYY-MM`.
    Month,
    /// `YYYY`.
    Year,
}

/// An inclusive span of days, with the granularity it was written at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeSpan {
    /// First day.
    pub start: NaiveDate,
    /// Last day (inclusive).
    pub end: NaiveDate,
    /// The coarsest granularity of the written value.
    pub granularity: Granularity,
}

fn parse_point(s: &str) -> Option<(NaiveDate, NaiveDate, Granularity)> {
    let parts: Vec<&str> = s.trim().split('-').collect();
    let num = |p: &str, len: usize| (p.len() == len && p.bytes().all(|b| b.is_ascii_digit())).then(|| p.parse::<u32>().ok()).flatten();
    match parts.as_slice() {
        [y] => {
            let y = num(y, 4)? as i32;
            Some((NaiveDate::from_ymd_opt(y, 1, 1)?, NaiveDate::from_ymd_opt(y, 12, 31)?, Granularity::Year))
        }
        [y, m] => {
            let (y, m) = (num(y, 4)? as i32, num(m, 2)?);
            let start = NaiveDate::from_ymd_opt(y, m, 1)?;
            let next = if m == 12 { NaiveDate::from_ymd_opt(y + 1, 1, 1)? } else { NaiveDate::from_ymd_opt(y, m + 1, 1)? };
            Some((start, next.pred_opt()?, Granularity::Month))
        }
        [y, m, d] => {
            let day = NaiveDate::from_ymd_opt(num(y, 4)? as i32, num(m, 2)?, num(d, 2)?)?;
            Some((day, day, Granularity::Day))
        }
        _ => None,
    }
}

impl TimeSpan {
    /// A single day.
    pub fn day(d: NaiveDate) -> Self {
        TimeSpan { start: d, end: d, granularity: Granularity::Day }
    }

    /// Whether two spans share at least one day.
    pub fn overlaps(&self, other: &TimeSpan) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// The "around" tolerance in days for this span's granularity.
    pub fn around_days(&self) -> i64 {
        match self.granularity {
            Granularity::Day => 3,
            Granularity::Month => 31,
            Granularity::Year => 366,
        }
    }
}

impl FromStr for TimeSpan {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let err = || Error::InvalidTime(s.to_string());
        let (a, b) = match s.split_once('/') {
            Some((a, b)) => (parse_point(a).ok_or_else(err)?, parse_point(b).ok_or_else(err)?),
            None => {
                let p = parse_point(s).ok_or_else(err)?;
                (p, p)
            }
        };
        if b.1 < a.0 {
            return Err(err());
        }
        let rank = |g: Granularity| match g {
            Granularity::Day => 0,
            Granularity::Month => 1,
            Granularity::Year => 2,
        };
        let granularity = if rank(a.2) >= rank(b.2) { a.2 } else { b.2 };
        Ok(TimeSpan { start: a.0, end: b.1, granularity })
    }
}

impl fmt::Display for TimeSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let single = |d: NaiveDate, g: Granularity| match g {
            Granularity::Day => d.format("%Y-%m-%d").to_string(),
            Granularity::Month => d.format("%Y-%m").to_string(),
            Granularity::Year => d.year().to_string(),
        };
        let whole = TimeSpan::from_str(&single(self.start, self.granularity)).ok();
        match whole {
            Some(w) if w.start == self.start && w.end == self.end => f.write_str(&single(self.start, self.granularity)),
            _ => write!(f, "{}/{}", self.start.format("%Y-%m-%d"), self.end.format("%Y-%m-%d")),
        }
    }
}

/// A query's time constraint (SPEC §1). Serialised as its text form (`between 2023-05 and 2023-06`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeConstraint {
    /// The record's time overlaps the span.
    On(TimeSpan),
    /// The record's time starts before the span.
    Before(TimeSpan),
    /// The record's time ends after the span.
    After(TimeSpan),
    /// Within ±3 days / ±31 days / ±366 days of the span, by granularity.
    Around(TimeSpan),
    /// Between two spans (inclusive).
    Between(TimeSpan, TimeSpan),
}

impl TimeConstraint {
    /// Whether a record time satisfies the constraint.
    pub fn matches(&self, t: &TimeSpan) -> bool {
        match self {
            TimeConstraint::On(s) => s.overlaps(t),
            TimeConstraint::Before(s) => t.start < s.start,
            TimeConstraint::After(s) => t.end > s.end,
            TimeConstraint::Around(s) => {
                let pad = chrono::Duration::days(s.around_days());
                t.start <= s.end + pad && s.start - pad <= t.end
            }
            TimeConstraint::Between(a, b) => t.start <= b.end && a.start <= t.end,
        }
    }
}

impl FromStr for TimeConstraint {
    type Err = Error;
    /// Parses `on X`, `before X`, `after X`, `around X`, `between A and B`; a bare time means `on`.
    fn from_str(s: &str) -> Result<Self, Error> {
        let err = || Error::InvalidTimeConstraint(s.to_string());
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        let (op, rest) = lower.split_once(char::is_whitespace).unwrap_or(("", lower.as_str()));
        let span = |x: &str| TimeSpan::from_str(x.trim()).map_err(|_| err());
        match op {
            "on" | "in" | "during" => Ok(TimeConstraint::On(span(rest)?)),
            "before" => Ok(TimeConstraint::Before(span(rest)?)),
            "after" | "since" => Ok(TimeConstraint::After(span(rest)?)),
            "around" | "about" => Ok(TimeConstraint::Around(span(rest)?)),
            "between" => {
                let (a, b) = rest.split_once(" and ").ok_or_else(err)?;
                Ok(TimeConstraint::Between(span(a)?, span(b)?))
            }
            _ => Ok(TimeConstraint::On(span(t)?)),
        }
    }
}

impl Serialize for TimeConstraint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TimeConstraint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for TimeConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeConstraint::On(s) => write!(f, "on {s}"),
            TimeConstraint::Before(s) => write!(f, "before {s}"),
            TimeConstraint::After(s) => write!(f, "after {s}"),
            TimeConstraint::Around(s) => write!(f, "around {s}"),
            TimeConstraint::Between(a, b) => write!(f, "between {a} and {b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(y: i32, m: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, day).unwrap()
    }

    #[test]
    fn spans_parse_by_granularity() {
        let m: TimeSpan = "2024-02".parse().unwrap();
        assert_eq!((m.start, m.end), (d(2024, 2, 1), d(2024, 2, 29)));
        let y: TimeSpan = "2023".parse().unwrap();
        assert_eq!((y.start, y.end, y.granularity), (d(2023, 1, 1), d(2023, 12, 31), Granularity::Year));
        let r: TimeSpan = "2023-05-01/2023-06".parse().unwrap();
        assert_eq!((r.start, r.end), (d(2023, 5, 1), d(2023, 6, 30)));
        for bad in ["", "May 2023", "2023-13", "2023-02-30", "23-01-01", "2023-06/2023-05", "2023-5"] {
            assert!(bad.parse::<TimeSpan>().is_err(), "{bad}");
        }
    }

    #[test]
    fn spans_display_round_trip() {
        for s in ["2023", "2023-05", "2023-05-07", "2023-05-01/2023-05-09"] {
            assert_eq!(s.parse::<TimeSpan>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn constraints_match_as_specified() {
        let rec: TimeSpan = "2023-05-10".parse().unwrap();
        let c = |s: &str| s.parse::<TimeConstraint>().unwrap().matches(&rec);
        assert!(c("on 2023-05"));
        assert!(!c("on 2023-06"));
        assert!(c("before 2023-05-11"));
        assert!(!c("before 2023-05-10"));
        assert!(c("after 2023-05-09"));
        assert!(c("around 2023-05-07"));
        assert!(!c("around 2023-05-06"));
        assert!(c("around 2023-06"));
        assert!(c("between 2023-05-01 and 2023-05-10"));
        assert!(!c("between 2023-05-11 and 2023-05-20"));
        assert!(c("2023"));
        assert!("whenever".parse::<TimeConstraint>().is_err());
    }
}
