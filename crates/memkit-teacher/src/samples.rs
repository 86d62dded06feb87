//! Several replies per request (issue 41): the greedy reply and `n - 1` seeded draws at a
//! temperature, made one reply before it goes where a single reply goes (the first-person re-ask,
//! assembly and cleaning). A small teacher's noise differs from draw to draw; two ways to use it:
//!
//! - [`Choose::Vote`], self-consistency: the records that at least `agree` whole replies hold,
//!   each in the wording of the first reply that holds it. Two records are one by the
//!   near-duplicate rule of record cleaning ([`memkit_clean::duplicate::repeated`]).
//! - [`Choose::Best`], best-of-n with the cleaning policy as verifier: the whole reply of which
//!   cleaning (grounding, validation, one record per fact) keeps the most records, fewer drops
//!   breaking a tie, then the earlier reply (the greedy one first).
//!
//! A reply that is not whole (not JSON, broken, cut at the token limit) holds nothing. When none
//! is whole the greedy reply stays as it came, so its failure is counted as any failed reply is.
//! The usage is every reply's, summed.

use memkit_clean::{Cleaned, Cleaner, whole_failure};
use memkit_data::Window;
use memkit_infer::Extraction;
use memkit_infer::chat::{ChatRequest, Sample};
use memkit_infer::reply::Usage;
use memkit_schema::ExtractedMemory;
use serde::{Deserialize, Serialize};

use crate::Result;

/// How the replies of one request become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Choose {
    /// Self-consistency: keep the records enough replies hold.
    #[default]
    Vote,
    /// Best-of-n: keep the reply cleaning keeps most of.
    Best,
}

/// How many replies a request gets, and how they become one (`[labelling.samples]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Samples {
    /// Replies per request: the greedy one and `n - 1` draws (1: the greedy reply alone).
    pub n: usize,
    /// Vote or best.
    pub choose: Choose,
    /// Vote: replies that must hold a record for it to be kept (1 to `n`).
    pub agree: usize,
    /// Temperature of the draws.
    pub temperature: f32,
    /// Nucleus of the draws.
    pub top_p: f32,
}

impl Default for Samples {
    /// One greedy reply.
    fn default() -> Self {
        Self { n: 1, choose: Choose::Vote, agree: 1, temperature: 0.7, top_p: 0.95 }
    }
}

impl Samples {
    /// Why the settings cannot run: no reply, an agreement outside 1..=n, a temperature that is
    /// not above 0, a nucleus outside (0, 1].
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.n == 0 {
            return Err("n must be at least 1".into());
        }
        if self.choose == Choose::Vote && !(1..=self.n).contains(&self.agree) {
            return Err(format!("agree = {} must be between 1 and n = {}", self.agree, self.n));
        }
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return Err(format!("temperature = {} must be above 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p = {} must be in (0, 1]", self.top_p));
        }
        Ok(())
    }

    /// Whether a request gets more than the greedy reply.
    pub fn several(&self) -> bool {
        self.n > 1
    }

    /// The draws that go with the greedy `request`: seeds 1 to `n - 1`.
    pub fn draws(&self, request: &ChatRequest) -> Vec<ChatRequest> {
        (1..self.n as u32)
            .map(|seed| request.clone().with_sample(Sample { temperature: self.temperature, top_p: self.top_p, seed }))
            .collect()
    }

    /// A short name for file and row names: `vote3of2`, `best3` (`greedy` for one reply).
    pub fn label(&self) -> String {
        match (self.several(), self.choose) {
            (false, _) => "greedy".into(),
            (true, Choose::Vote) => format!("vote{}of{}", self.n, self.agree),
            (true, Choose::Best) => format!("best{}", self.n),
        }
    }

    /// A description for logs and stats.
    pub fn describe(&self) -> String {
        let draws = format!("greedy + {} at temperature {}, top-p {}", self.n.saturating_sub(1), self.temperature, self.top_p);
        match (self.several(), self.choose) {
            (false, _) => "one greedy reply per request".into(),
            (true, Choose::Vote) => format!("{} replies per request ({draws}), a record kept when {} hold it", self.n, self.agree),
            (true, Choose::Best) => format!("best of {} replies per request ({draws}) by what cleaning keeps", self.n),
        }
    }

    /// The replies to one request (the greedy one first) as one reply (see the module doc).
    pub fn choose(&self, window: &Window, replies: &[(String, Usage)], cleaner: &Cleaner) -> Result<(String, Usage)> {
        match self.choose {
            Choose::Vote => Ok(vote(window, replies, self.agree)),
            Choose::Best => best(window, replies, cleaner),
        }
    }
}

/// Every reply's tokens and time, summed; `hit_max_tokens` from `cut`.
fn summed(replies: &[(String, Usage)], cut: bool) -> Usage {
    let usage = replies.iter().fold(Usage::default(), |sum, (_, u)| sum.plus(*u));
    Usage { hit_max_tokens: cut, ..usage }
}

/// The replies as parsed, `None` for one that is not whole.
fn parsed(window: &Window, replies: &[(String, Usage)]) -> Vec<Option<Extraction>> {
    replies
        .iter()
        .map(|(text, u)| {
            let e = Extraction::from_output(window, text.clone(), *u);
            whole_failure(&e.errors).is_none().then_some(e)
        })
        .collect()
}

/// The greedy reply as it came, with every reply's usage: what stays when no reply is whole.
fn greedy_as_it_came(replies: &[(String, Usage)]) -> (String, Usage) {
    let (text, usage) = replies.first().map_or(("", false), |(t, u)| (t.as_str(), u.hit_max_tokens));
    (text.to_owned(), summed(replies, usage))
}

/// Self-consistency: the records that at least `agree` whole replies hold, in the wording of the
/// first reply that holds each, as the JSON the extractor schema describes (a reply holding one
/// record twice votes once).
pub fn vote(window: &Window, replies: &[(String, Usage)], agree: usize) -> (String, Usage) {
    let parsed = parsed(window, replies);
    if parsed.iter().all(Option::is_none) {
        return greedy_as_it_came(replies);
    }
    let mut records: Vec<ExtractedMemory> = Vec::new();
    let mut holders: Vec<Vec<usize>> = Vec::new();
    for (i, extraction) in parsed.into_iter().enumerate() {
        for record in extraction.map(|e| e.records).unwrap_or_default() {
            match records.iter().position(|r| memkit_clean::duplicate::repeated(&record, std::slice::from_ref(r)).is_some()) {
                Some(k) if !holders[k].contains(&i) => holders[k].push(i),
                Some(_) => {}
                None => {
                    records.push(record);
                    holders.push(vec![i]);
                }
            }
        }
    }
    let kept: Vec<ExtractedMemory> = records.into_iter().zip(&holders).filter(|(_, h)| h.len() >= agree).map(|(r, _)| r).collect();
    (serde_json::json!({ "memories": kept }).to_string(), summed(replies, false))
}

/// Best-of-n: the whole reply of which `cleaner` keeps the most records, fewer drops breaking a
/// tie, then the earlier reply.
pub fn best(window: &Window, replies: &[(String, Usage)], cleaner: &Cleaner) -> Result<(String, Usage)> {
    let mut chosen: Option<(usize, (usize, std::cmp::Reverse<usize>))> = None;
    for (i, (text, _)) in replies.iter().enumerate() {
        let Some(cleaned) = verified(window, text, cleaner)? else { continue };
        let score = (cleaned.records.len(), std::cmp::Reverse(cleaned.dropped.len()));
        if chosen.is_none_or(|(_, s)| score > s) {
            chosen = Some((i, score));
        }
    }
    Ok(match chosen {
        Some((i, _)) => (replies[i].0.clone(), summed(replies, false)),
        None => greedy_as_it_came(replies),
    })
}

/// One reply on its own as cleaning leaves it (`None` when it is not whole): the verifier of
/// best-of-n and of the re-ask after every record was dropped ([`crate::label::problems`]).
/// A decomposed request's schema has no speaker: assembly sets it from the source message, and
/// so does the verifier.
pub fn verified(window: &Window, text: &str, cleaner: &Cleaner) -> Result<Option<Cleaned>> {
    let mut e = Extraction::from_output(window, text.to_owned(), Usage::default());
    if whole_failure(&e.errors).is_some() {
        return Ok(None);
    }
    for r in e.records.iter_mut().filter(|r| r.source_speaker.is_empty()) {
        if let Some(m) = window.message(r.source_id) {
            r.source_speaker.clone_from(&m.turn.speaker);
        }
    }
    Ok(Some(cleaner.clean(window, &e.records, &e.errors)?))
}

#[cfg(test)]
mod tests {
    use memkit_clean::GroundingConfig;
    use memkit_data::WindowMessage;

    use super::*;

    fn window() -> Window {
        Window::of(
            "lme/w0",
            0,
            vec![
                WindowMessage::user(1, "user", "I adopted a beagle named Rex last week and I run with him every morning."),
                WindowMessage::user(2, "user", "My sister lives in Porto."),
            ],
        )
    }

    fn reply(records: &[(u32, &str)]) -> (String, Usage) {
        let memories: Vec<serde_json::Value> = records
            .iter()
            .map(|(id, content)| {
                serde_json::json!({"source_id": id, "content": content, "dimension": {"memory_type": "fact", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
            })
            .collect();
        (
            serde_json::json!({ "memories": memories }).to_string(),
            Usage { prompt_tokens: 10, completion_tokens: 5, millis: 100, hit_max_tokens: false },
        )
    }

    fn cut() -> (String, Usage) {
        (
            "{\"memories\": [{\"source_id\": 1, \"content\": \"The user adopted".to_owned(),
            Usage { hit_max_tokens: true, ..Usage::default() },
        )
    }

    fn contents(text: &str) -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect()
    }

    #[test]
    fn records_that_enough_replies_hold_are_kept_in_the_first_wording() {
        let replies = [
            reply(&[(1, "The user adopted a beagle named Rex."), (1, "The user runs every morning on the beach.")]),
            // The same fact worded otherwise (token F1 0.8 with the first), and a new one.
            reply(&[(1, "The user adopted a beagle called Rex."), (2, "The user's sister lives in Porto.")]),
            // Holds the beagle twice: one reply is one vote.
            reply(&[
                (1, "The user adopted a beagle named Rex."),
                (1, "The user adopted a beagle named Rex!"),
                (2, "The user's sister lives in Porto."),
            ]),
        ];
        let (text, usage) = vote(&window(), &replies, 2);
        // Beagle: 3 of 3; morning runs: 1 of 3 (dropped); sister: 2 of 3.
        assert_eq!(contents(&text), ["The user adopted a beagle named Rex.", "The user's sister lives in Porto."]);
        assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.millis), (30, 15, 300));
        let merged = Extraction::from_output(&window(), text, usage);
        assert!(merged.errors.is_empty(), "{:?}", merged.errors);
        assert_eq!(merged.records[1].source_id, 2);

        // Agreement of 1 keeps every distinct record; of 3, the beagle alone.
        assert_eq!(contents(&vote(&window(), &replies, 1).0).len(), 3);
        assert_eq!(contents(&vote(&window(), &replies, 3).0), ["The user adopted a beagle named Rex."]);
    }

    #[test]
    fn a_reply_that_is_not_whole_holds_nothing_and_if_none_is_whole_the_greedy_one_stays() {
        let good = reply(&[(1, "The user adopted a beagle named Rex.")]);
        // The cut reply's record does not count: one vote of two needed.
        assert!(contents(&vote(&window(), &[cut(), good.clone()], 2).0).is_empty());
        assert_eq!(contents(&vote(&window(), &[cut(), good], 1).0), ["The user adopted a beagle named Rex."]);
        let cleaner = Cleaner::new(GroundingConfig::default());
        for (text, usage) in [vote(&window(), &[cut(), cut()], 1), best(&window(), &[cut(), cut()], &cleaner).unwrap()] {
            assert_eq!(text, cut().0);
            assert!(usage.hit_max_tokens, "the failure stays a failure");
        }
    }

    /// Best-of-n by term-coverage grounding: the reply with two supported records beats the
    /// one with one, and the one whose second record no message supports ("Mars"); among equals
    /// the earlier wins; a cut reply is never chosen. The replies have no speaker, as a
    /// decomposed request's: the verifier takes it from the source message.
    #[test]
    fn the_best_reply_is_the_one_cleaning_keeps_most_of() {
        let cleaner = Cleaner::new(GroundingConfig::default());
        let one = reply(&[(1, "The user adopted a beagle named Rex.")]);
        let two = reply(&[(1, "The user adopted a beagle named Rex."), (2, "The user's sister lives in Porto.")]);
        let unsupported = reply(&[(1, "The user adopted a beagle named Rex."), (2, "The user flew a rocket to Mars with Elon.")]);
        let (text, usage) = best(&window(), &[one.clone(), unsupported.clone(), two.clone(), cut()], &cleaner).unwrap();
        assert_eq!(text, two.0);
        assert_eq!((usage.completion_tokens, usage.hit_max_tokens), (15, false));
        // One kept each: the one with no drop wins over the earlier one with a drop.
        assert_eq!(best(&window(), &[unsupported, one.clone()], &cleaner).unwrap().0, one.0);
        let again = reply(&[(1, "The user adopted a beagle named Rex")]);
        assert_eq!(best(&window(), &[one.clone(), again], &cleaner).unwrap().0, one.0, "a tie keeps the greedy reply");
    }

    #[test]
    fn draws_are_seeded_one_to_n_minus_one_and_settings_are_checked() {
        let vote3 = Samples { n: 3, choose: Choose::Vote, agree: 2, temperature: 0.7, top_p: 0.9 };
        let greedy = ChatRequest::new(Vec::new(), 10);
        let seeds: Vec<u32> = vote3.draws(&greedy).iter().map(|r| r.sample.unwrap().seed).collect();
        assert_eq!(seeds, [1, 2]);
        assert!(Samples::default().draws(&greedy).is_empty());
        assert_eq!(
            (vote3.label(), Samples { choose: Choose::Best, ..vote3 }.label(), Samples::default().label()),
            ("vote3of2".into(), "best3".into(), "greedy".into())
        );
        assert_eq!(vote3.check(), Ok(()));
        assert!(Samples { agree: 4, ..vote3 }.check().unwrap_err().contains("agree = 4"));
        assert_eq!(Samples { agree: 4, choose: Choose::Best, ..vote3 }.check(), Ok(()), "best has no agreement");
        assert!(Samples { n: 0, ..vote3 }.check().is_err());
        assert!(Samples { temperature: 0.0, ..vote3 }.check().is_err());
    }
}
