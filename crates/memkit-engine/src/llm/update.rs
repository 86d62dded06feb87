//! DimMem's language-model update consolidator.
//!
//! [`LlmConsolidator`] shows a chat model the stored and the new record of a pair that passed
//! the update's type, keyword and cosine filters (`prompts/update.j2`) and asks MERGE, SUPERSEDE
//! or KEEP_BOTH, decoded under [`UpdateVerdict::json_schema`]. It implements the same
//! [`Consolidator`] trait as the [`RuleConsolidator`], so [`crate::update::update`] takes either.
//!
//! What the model writes is checked:
//! - a reply cut at its token limit, or one that does not parse, is decided by the rules instead
//!   (counted in [`ConsolidatorStats::fallbacks`]);
//! - a merge's combined sentence is kept only when it holds at least half of the terms of
//!   each record ([`covers_both`]): `update.j2` asks it to keep every detail, and a merged
//!   text that lost them would lose memory. Otherwise the merge keeps the longer content, as the
//!   rules do (counted in [`ConsolidatorStats::merged_text_rejected`]).
//!
//! ```no_run
//! # fn main() -> memkit_engine::Result<()> {
//! use std::sync::Arc;
//! use memkit_engine::llm::LlmConsolidator;
//! use memkit_engine::update::{UpdateConfig, update};
//! # use memkit_engine::store::SqliteStore;
//! # fn model() -> Arc<dyn memkit_infer::chat::ChatModel> { unimplemented!() }
//! # fn embedder() -> Box<dyn memkit_engine::dense::Embedder> { unimplemented!() }
//! # let (mut store, records) = (SqliteStore::open_in_memory()?, Vec::new());
//! let consolidator = LlmConsolidator::new(model())?;
//! let stats = update(&mut store, records, &*embedder(), &consolidator, &UpdateConfig::default())?;
//! println!("{} merges, {} fallbacks", stats.merges, consolidator.stats().fallbacks);
//! # Ok(()) }
//! ```

use std::collections::HashSet;
use std::sync::Arc;

use memkit_infer::chat::{ChatModel, ChatRequest, Reply};
use memkit_prompt::{UpdateAction, UpdateVerdict};
use memkit_schema::MemoryRecord;
use serde::Serialize;

use super::{Step, step_methods};
use crate::text::terms;
use crate::update::{Consolidator, RuleConsolidator, Verdict};
use crate::{Error, Result};

/// How an [`LlmConsolidator`] has fared so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ConsolidatorStats {
    /// Pairs put to the model.
    pub asked: usize,
    /// Of those, decided by the rules instead: the reply was cut off or did not parse.
    pub fallbacks: usize,
    /// The model's verdicts, by action (fallbacks not included).
    pub merges: usize,
    /// See `merges`.
    pub supersedes: usize,
    /// See `merges`.
    pub keep_both: usize,
    /// Merges whose combined sentence dropped too much of the two records, so the longer
    /// content was kept instead ([`covers_both`]).
    pub merged_text_rejected: usize,
}

/// DimMem's update consolidator: a chat model decides each pair through `update.j2`.
pub struct LlmConsolidator {
    step: Step<ConsolidatorStats>,
    rules: RuleConsolidator,
}

impl LlmConsolidator {
    /// Most tokens of one reply by default: a decision, a combined sentence and a reason.
    pub const DEFAULT_MAX_TOKENS: usize = 200;

    /// A consolidator asking `model` with the embedded prompts, the default rules as fallback.
    pub fn new(model: Arc<dyn ChatModel>) -> Result<Self> {
        Ok(Self { step: Step::new(model, Self::DEFAULT_MAX_TOKENS)?, rules: RuleConsolidator::default() })
    }

    step_methods!(ConsolidatorStats);

    fn request(&self, new: &MemoryRecord, old: &MemoryRecord) -> Result<ChatRequest> {
        let messages = self.step.prompts.render_update(old, new).map_err(|e| Error::Prompt(e.to_string()))?.to_messages();
        Ok(ChatRequest::new(messages, self.step.max_tokens).with_schema(UpdateVerdict::json_schema()))
    }
}

/// The verdict a reply holds, or `None` when it was cut at its token limit or is not an
/// [`UpdateVerdict`].
pub fn decode_verdict(reply: &Reply) -> Option<UpdateVerdict> {
    if reply.usage.hit_max_tokens {
        return None;
    }
    serde_json::from_str(reply.text.trim()).ok()
}

/// Whether `merged` keeps at least half of the terms (stemmed content words) of `old` and of
/// `new`, each.
pub fn covers_both(merged: &str, old: &str, new: &str) -> bool {
    let merged: HashSet<String> = terms(merged).into_iter().collect();
    let covered = |text: &str| {
        let words: HashSet<String> = terms(text).into_iter().collect();
        words.is_empty() || 2 * words.intersection(&merged).count() >= words.len()
    };
    !merged.is_empty() && covered(old) && covered(new)
}

impl Consolidator for LlmConsolidator {
    fn decide(&self, new: &MemoryRecord, old: &MemoryRecord, cosine: f32) -> Result<Verdict> {
        let reply = self.step.ask_one(self.request(new, old)?)?;
        self.step.count(|s| s.asked += 1);
        let Some(verdict) = decode_verdict(&reply) else {
            self.step.count(|s| s.fallbacks += 1);
            tracing::debug!(reply = %reply.text, cut = reply.usage.hit_max_tokens, "update reply unusable, rules used");
            return self.rules.decide(new, old, cosine);
        };
        Ok(match verdict.decision {
            UpdateAction::Merge => {
                let content = verdict.content.trim();
                let covered = covers_both(content, &old.content, &new.content);
                self.step.count(|s| {
                    s.merges += 1;
                    s.merged_text_rejected += usize::from(!covered);
                });
                let merged_content = covered.then(|| content.to_owned());
                Verdict { decision: UpdateAction::Merge, merged_content }
            }
            UpdateAction::Supersede => {
                self.step.count(|s| s.supersedes += 1);
                UpdateAction::Supersede.into()
            }
            UpdateAction::KeepBoth => {
                self.step.count(|s| s.keep_both += 1);
                UpdateAction::KeepBoth.into()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use memkit_schema::{MemoryType, Pointer};

    use super::*;
    use crate::llm::scripted::Scripted;

    fn rec(id: &str, content: &str, ts: &str) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            content: content.into(),
            memory_type: MemoryType::Fact,
            dims: Default::default(),
            pointer: Pointer { timestamp: ts.into(), speaker: "Ann".into(), ..Default::default() },
        }
    }

    #[test]
    fn the_model_decides_and_an_unusable_reply_falls_back_to_the_rules() {
        let old = rec("o", "Ann works at a bakery in Lyon.", "2023-01-05T10:00:00");
        let new = rec("n", "Ann works at a bank in Lyon.", "2023-06-01T10:00:00");
        let keep = r#"{"decision":"KEEP_BOTH","content":"","reason":"different jobs"}"#;
        let supersede = r#"{"decision":"SUPERSEDE","content":"","reason":"Ann changed jobs."}"#;
        // The second reply stopped at its token limit; the third is prose.
        let model = Scripted::new(&[(keep, false), (&supersede[..20], true), ("I think they are the same.", false)]);
        let c = LlmConsolidator::new(model.clone()).unwrap();
        assert_eq!(c.decide(&new, &old, 0.9).unwrap(), UpdateAction::KeepBoth.into());
        // The rules: a differing fact from a newer message supersedes.
        assert_eq!(c.decide(&new, &old, 0.9).unwrap(), UpdateAction::Supersede.into());
        assert_eq!(c.decide(&new, &old, 0.9).unwrap(), UpdateAction::Supersede.into());
        assert_eq!(c.stats(), ConsolidatorStats { asked: 3, fallbacks: 2, keep_both: 1, ..Default::default() });

        // Each request is update.j2 with the stored record first, under the verdict schema.
        let asked = model.asked.lock().unwrap();
        let user = &asked[0].messages[1].content;
        let (stored, fresh) = (user.find("bakery").unwrap(), user.find("bank").unwrap());
        assert!(stored < fresh, "{user}");
        assert!(user.contains("said: 2023-06-01T10:00:00 by Ann"), "{user}");
        assert_eq!(asked[0].schema.as_ref(), Some(&UpdateVerdict::json_schema()));
        assert_eq!(asked[0].max_tokens, LlmConsolidator::DEFAULT_MAX_TOKENS);
    }

    #[test]
    fn a_merged_sentence_that_drops_a_record_is_not_used() {
        let old = rec("o", "Ann adopted a cat named Miso.", "2023-01-05T10:00:00");
        let new = rec("n", "Ann's cat Miso is a grey tabby from the shelter.", "2023-02-01T10:00:00");
        let good = r#"{"decision":"MERGE","content":"Ann adopted a grey tabby cat named Miso from the shelter.","reason":"same cat"}"#;
        let lossy = r#"{"decision":"MERGE","content":"Ann has a cat.","reason":"same cat"}"#;
        let c = LlmConsolidator::new(Scripted::new(&[(good, false), (lossy, false)])).unwrap();
        let verdict = c.decide(&new, &old, 0.8).unwrap();
        assert_eq!(verdict.decision, UpdateAction::Merge);
        assert_eq!(verdict.merged_content.as_deref(), Some("Ann adopted a grey tabby cat named Miso from the shelter."));
        assert_eq!(c.decide(&new, &old, 0.8).unwrap(), UpdateAction::Merge.into(), "the longer content is kept");
        assert_eq!(c.stats(), ConsolidatorStats { asked: 2, merges: 2, merged_text_rejected: 1, ..Default::default() });
    }

    #[test]
    fn coverage_counts_content_words_of_each_record() {
        // Terms of old: ann, adopt, cat, name, miso; "Ann has a cat named Miso." keeps 4 of 5,
        // and both of "Miso is a cat.".
        assert!(covers_both("Ann has a cat named Miso.", "Ann adopted a cat named Miso.", "Miso is a cat."));
        // Terms of new: miso, grey, tabby, cat, shelter; it keeps 2 of 5.
        assert!(!covers_both("Ann has a cat named Miso.", "Ann adopted a cat named Miso.", "Miso is a grey tabby cat from the shelter."));
        assert!(!covers_both("", "a", "b"));
    }

    #[test]
    fn the_schema_admits_exactly_the_three_actions() {
        let schema = UpdateVerdict::json_schema();
        let names: Vec<String> = [UpdateAction::Merge, UpdateAction::Supersede, UpdateAction::KeepBoth]
            .iter()
            .map(|a| serde_json::to_value(a).unwrap().as_str().unwrap().to_owned())
            .collect();
        assert_eq!(schema["properties"]["decision"]["enum"], serde_json::json!(names));
        let example = UpdateVerdict { decision: UpdateAction::Merge, content: "x".into(), reason: "y".into() };
        let fields = serde_json::to_value(example).unwrap();
        assert_eq!(schema["required"].as_array().unwrap().len(), fields.as_object().unwrap().len());
    }
}
