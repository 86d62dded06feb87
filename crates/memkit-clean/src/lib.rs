//! Record cleaning: the one policy that every extractor's records pass, whoever wrote them (the
//! rule extractor, the teacher, a trained student, a served model), so that labels, student
//! output and memory are cleaned alike and compared alike.
//!
//! [`Cleaner::clean`] is the one entry point: a window and the records an extractor wrote for it
//! (with the parser's errors) in; the kept records, each dropped record with a typed
//! [`DropReason`], and grounding's decisions out. In order:
//!
//! 1. [`ground`]: each record is pointed at the new message of the window that says it, dropped
//!    when none does or when a context-only message says it better, and its free dimensions are
//!    cleared where the source message does not support them;
//! 2. [`validate`]: a new message as the source, third person, the source message's speaker, a
//!    normalised time, a person of the conversation, the speaker it is about;
//! 3. [`duplicate`]: one record per fact.
//!
//! Every threshold was chosen on the project's gold set (`data/gold/`), never on reported
//! benchmark data; each constant's doc comment says how.
//!
//! Grounding's support mixes in a sentence embedder's cosine when the cleaner has one
//! ([`Cleaner::with_embedder`]); [`Cleaner::id`] names the thresholds and the embedder, and the
//! ledgers and resume keys record it, so runs cleaned two ways are never mixed unknowingly.
//!
//! ```
//! use memkit_clean::{Cleaner, DropReason};
//! use memkit_data::{Window, WindowMessage};
//! use memkit_schema::parse_extractor_output;
//!
//! let window = Window::of("d/w0", 0, vec![WindowMessage::user(1, "Ann", "I adopted a cat named Tom last week.")]);
//! let reply = parse_extractor_output(
//!     r#"{"memories": [
//!         {"source_id": 1, "source_speaker": "Ann", "content": "Ann adopted a cat named Tom.", "dimension": {"memory_type": "episodic"}},
//!         {"source_id": 1, "source_speaker": "Ann", "content": "I adopted a cat.", "dimension": {"memory_type": "episodic"}}]}"#,
//! );
//! let cleaned = Cleaner::default().clean(&window, &reply.records, &reply.errors)?;
//! assert_eq!(cleaned.records.len(), 1);
//! assert_eq!(cleaned.dropped[0].reason, DropReason::FirstPerson);
//! # Ok::<(), memkit_clean::Error>(())
//! ```

pub mod duplicate;
pub mod ground;
pub mod validate;

use memkit_data::Window;
use memkit_schema::{ExtractedMemory, RecordError};
use memkit_text::embed::Embedder;

pub use ground::{Decision, Grounded, Grounder, GroundingConfig, GroundingTally};
pub use validate::{Cleaned, DropReason, Dropped, other_person, outside_suffix, whole_failure};

/// What can go wrong while cleaning: only the embedder can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The grounding embedder failed.
    #[error("grounding embedder: {0}")]
    Embed(#[from] memkit_text::embed::EmbedError),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The cleaning policy: grounding's thresholds and embedder, then validation and the
/// near-duplicate rule.
#[derive(Debug, Default)]
pub struct Cleaner {
    grounder: Grounder,
}

impl Cleaner {
    /// A cleaner that grounds with `grounding` by term coverage alone.
    pub fn new(grounding: GroundingConfig) -> Self {
        Self { grounder: Grounder::new(grounding) }
    }

    /// Mixes `embedder`'s cosine into grounding's support.
    #[must_use]
    pub fn with_embedder(self, embedder: Box<dyn Embedder>) -> Self {
        Self { grounder: self.grounder.with_embedder(embedder) }
    }

    /// The grounding step.
    pub fn grounder(&self) -> &Grounder {
        &self.grounder
    }

    /// Names the policy as it runs: `grounding=<min_support>/<margin>/<embed_weight>[/fields]
    /// embedder=<model id>|none` (or `grounding=off`). Ledgers and resume keys record it.
    pub fn id(&self) -> String {
        let g = self.grounder.config();
        if !g.enabled {
            return "grounding=off".into();
        }
        format!(
            "grounding={}/{}/{}{} embedder={}",
            g.min_support,
            g.margin,
            g.embed_weight,
            if g.fields { "/fields" } else { "" },
            self.grounder.embedder_id().unwrap_or("none")
        )
    }

    /// Cleans the `records` an extractor wrote for `window` (with the `errors` its reply
    /// parsed with): grounds, validates and drops near duplicates. Every record of the reply
    /// ends in [`Cleaned::records`] or [`Cleaned::dropped`].
    pub fn clean(&self, window: &Window, records: &[ExtractedMemory], errors: &[RecordError]) -> Result<Cleaned> {
        let (mut records, mut errors) = (records.to_vec(), errors.to_vec());
        let grounding = self.grounder.ground(window, &mut records, &mut errors)?;
        Ok(Cleaned { grounding, ..validate::validate(window, &records, &errors) })
    }
}

#[cfg(test)]
mod tests {
    use memkit_data::WindowMessage;

    use super::*;

    fn record(source_id: u32, speaker: &str, content: &str) -> ExtractedMemory {
        let value = serde_json::json!({"source_id": source_id, "source_speaker": speaker, "content": content,
            "dimension": {"memory_type": "fact", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}});
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_student_record_and_a_teacher_record_with_the_same_flaw_are_dropped_for_the_same_reason() {
        let window = Window::of(
            "conv/w0",
            0,
            vec![WindowMessage::user(1, "Jon", "Lost my job as a banker yesterday."), WindowMessage::user(2, "Gina", "I love dancing.")],
        );
        // The same flaws, as a teacher's decomposed reply would have them and as a student
        // writes them in one reply: a first-person record, and a record about the other speaker.
        let teacher = [record(1, "Jon", "I lost my job as a banker."), record(1, "Jon", "Gina lost her job as a banker.")];
        let student = [record(1, "Jon", "I lost my job as a banker yesterday."), record(1, "Jon", "Gina lost a job as a banker.")];
        let cleaner = Cleaner::default();
        let reasons = |records: &[ExtractedMemory]| -> Vec<DropReason> {
            let cleaned = cleaner.clean(&window, records, &[]).unwrap();
            assert!(cleaned.records.is_empty(), "{cleaned:?}");
            cleaned.dropped.iter().map(|d| d.reason).collect()
        };
        assert_eq!(reasons(&teacher), [DropReason::FirstPerson, DropReason::OtherPerson]);
        assert_eq!(reasons(&student), reasons(&teacher));
    }

    #[test]
    fn grounding_runs_before_validation_and_every_record_is_accounted_for() {
        let window = Window::of(
            "conv/w1",
            1,
            vec![
                WindowMessage::user(1, "Jon", "I lost my job as a banker yesterday."),
                WindowMessage::user(2, "Gina", "I lost my job at Door Dash too."),
                WindowMessage::user(3, "Jon", "I will open a dance studio."),
            ],
        );
        // Pointed at Jon's message 3, said in Gina's message 2: grounding re-points it and sets
        // the speaker, so validation finds no speaker mismatch.
        let repointed = record(3, "Jon", "Gina lost her job at Door Dash.");
        // Nothing in the window says it.
        let unsupported = record(3, "Jon", "Jon moved to Lisbon for a design job.");
        let broken = RecordError { index: Some(2), kind: memkit_schema::ErrorKind::Schema, reason: "bad".into(), raw: "{}".into() };
        let cleaned = Cleaner::default().clean(&window, &[repointed, unsupported], &[broken]).unwrap();
        assert_eq!(cleaned.records.len(), 1);
        assert_eq!((cleaned.records[0].source_id, cleaned.records[0].source_speaker.as_str()), (2, "Gina"));
        let decisions: Vec<Decision> = cleaned.grounding.iter().map(|g| g.decision).collect();
        assert_eq!(decisions, [Decision::Repointed, Decision::Unsupported]);
        let mut reasons: Vec<DropReason> = cleaned.dropped.iter().map(|d| d.reason).collect();
        reasons.sort();
        assert_eq!(reasons, [DropReason::Schema, DropReason::Unsupported]);
        // The record that did not parse was something the extractor found: the target lacks it.
        assert!(!cleaned.complete());
    }

    #[test]
    fn the_id_names_the_thresholds_and_the_embedder() {
        assert_eq!(Cleaner::default().id(), "grounding=0.5/0.05/0.5/fields embedder=none");
        let off = Cleaner::new(GroundingConfig { enabled: false, ..GroundingConfig::default() });
        assert_eq!(off.id(), "grounding=off");
    }
}
