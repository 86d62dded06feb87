//! Self-consistency (issue 41): one request asked `samples` times, the greedy reply and draws at
//! a temperature, and only the records that at least `agree` of the replies hold are kept. A
//! small teacher's noise differs from draw to draw; what it says every time is more likely in the
//! message. Two records are the same record by the near-duplicate rule of record cleaning
//! ([`memkit_clean::duplicate::repeated`]). The kept records become one reply, which then goes where a
//! single reply goes: the first-person re-ask, assembly and cleaning.

use memkit_clean::whole_failure;
use memkit_data::Window;
use memkit_infer::Extraction;
use memkit_infer::chat::{ChatRequest, Sample};
use memkit_infer::reply::Usage;
use memkit_schema::ExtractedMemory;
use serde::{Deserialize, Serialize};

/// How many replies a request gets and how many must hold a record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SelfConsistency {
    /// Replies per request: the greedy one and `samples - 1` draws (1: the greedy reply alone).
    pub samples: usize,
    /// Replies that must hold a record for it to be kept (1 to `samples`).
    pub agree: usize,
    /// Temperature of the draws.
    pub temperature: f32,
    /// Nucleus of the draws.
    pub top_p: f32,
}

impl Default for SelfConsistency {
    /// One greedy reply: no vote.
    fn default() -> Self {
        Self { samples: 1, agree: 1, temperature: 0.7, top_p: 0.95 }
    }
}

impl SelfConsistency {
    /// Why the settings cannot run: no reply, an agreement outside 1..=samples, a temperature
    /// that is not above 0, a nucleus outside (0, 1].
    pub fn check(&self) -> Result<(), String> {
        if self.samples == 0 {
            return Err("samples must be at least 1".into());
        }
        if !(1..=self.samples).contains(&self.agree) {
            return Err(format!("agree = {} must be between 1 and samples = {}", self.agree, self.samples));
        }
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return Err(format!("temperature = {} must be above 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p = {} must be in (0, 1]", self.top_p));
        }
        Ok(())
    }

    /// Whether replies are voted on at all.
    pub fn votes(&self) -> bool {
        self.samples > 1
    }

    /// The draws that go with the greedy `request`: seeds 1 to `samples - 1`.
    pub fn draws(&self, request: &ChatRequest) -> Vec<ChatRequest> {
        (1..self.samples as u32)
            .map(|seed| request.clone().with_sample(Sample { temperature: self.temperature, top_p: self.top_p, seed }))
            .collect()
    }

    /// A description for logs and stats: `3 replies (greedy + 2 at T 0.7), kept by 2`.
    pub fn describe(&self) -> String {
        if self.votes() {
            format!(
                "{} replies per request (greedy + {} at temperature {}, top-p {}), a record kept when {} hold it",
                self.samples,
                self.samples - 1,
                self.temperature,
                self.top_p,
                self.agree
            )
        } else {
            "one greedy reply per request".into()
        }
    }
}

/// The replies to one request (the greedy one first) as one reply: the records that at least
/// `agree` whole replies hold, each in the wording of the first reply that holds it, as the JSON
/// the extractor schema describes. Replies that are not whole (not JSON, broken, cut at the token
/// limit) hold nothing. When none is whole the greedy reply is returned as it came, so its
/// failure is counted as any failed reply is. Usage is the sum of every reply's.
pub fn vote(window: &Window, replies: &[(String, Usage)], agree: usize) -> (String, Usage) {
    let mut usage = Usage::default();
    for (_, u) in replies {
        usage.prompt_tokens += u.prompt_tokens;
        usage.completion_tokens += u.completion_tokens;
        usage.millis += u.millis;
    }
    // Each distinct record with the replies that hold it.
    let mut records: Vec<ExtractedMemory> = Vec::new();
    let mut holders: Vec<Vec<usize>> = Vec::new();
    let mut whole = 0;
    for (i, (text, u)) in replies.iter().enumerate() {
        let parsed = Extraction::from_output(window, text.clone(), *u);
        if whole_failure(&parsed.errors).is_some() {
            continue;
        }
        whole += 1;
        for record in parsed.records {
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
    let Some((greedy, greedy_usage)) = replies.first() else {
        return (r#"{"memories":[]}"#.into(), usage);
    };
    if whole == 0 {
        return (greedy.clone(), Usage { hit_max_tokens: greedy_usage.hit_max_tokens, ..usage });
    }
    let kept: Vec<ExtractedMemory> = records.into_iter().zip(&holders).filter(|(_, h)| h.len() >= agree).map(|(r, _)| r).collect();
    let text = serde_json::json!({ "memories": kept }).to_string();
    (text, usage)
}

#[cfg(test)]
mod tests {
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
        let cut = (
            "{\"memories\": [{\"source_id\": 1, \"content\": \"The user adopted".to_owned(),
            Usage { hit_max_tokens: true, ..Usage::default() },
        );
        let good = reply(&[(1, "The user adopted a beagle named Rex.")]);
        // The cut reply's record does not count: one vote of two needed.
        assert!(contents(&vote(&window(), &[cut.clone(), good.clone()], 2).0).is_empty());
        assert_eq!(contents(&vote(&window(), &[cut.clone(), good], 1).0), ["The user adopted a beagle named Rex."]);
        let (text, usage) = vote(&window(), &[cut.clone(), cut.clone()], 1);
        assert_eq!(text, cut.0);
        assert!(usage.hit_max_tokens, "the failure stays a failure");
    }

    #[test]
    fn draws_are_seeded_one_to_samples_minus_one() {
        let sc = SelfConsistency { samples: 3, agree: 2, temperature: 0.7, top_p: 0.9 };
        let greedy = ChatRequest::new(Vec::new(), 10);
        let seeds: Vec<u32> = sc.draws(&greedy).iter().map(|r| r.sample.unwrap().seed).collect();
        assert_eq!(seeds, [1, 2]);
        assert!(SelfConsistency::default().draws(&greedy).is_empty());
        assert_eq!(sc.check(), Ok(()));
        assert!(SelfConsistency { agree: 4, ..sc }.check().unwrap_err().contains("agree = 4"));
        assert!(SelfConsistency { samples: 0, ..sc }.check().is_err());
        assert!(SelfConsistency { temperature: 0.0, ..sc }.check().is_err());
    }
}
