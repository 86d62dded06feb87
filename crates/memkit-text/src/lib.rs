//! Text normalisation, one implementation of each idea, shared by every crate that compares
//! text.
//!
//! - [`words`]: lowercase word tokens, stop words, the light stemmer and terms of the engine's
//!   lexical routes (BM25, dimension match), phrase normalisation, names and place mentions. Also
//!   what grounding and the pointer check count as a record's terms.
//! - [`porter`]: NLTK's Porter stemmer, byte for byte, for the official LoCoMo F1.
//! - [`f1`]: LoCoMo's token F1 over normalised, Porter-stemmed tokens: the QA score, record
//!   matching in extraction agreement, near-duplicate records.
//! - [`person`]: first-person detection (records must name their subject).
//! - [`cues`]: whether a message states a reason or a purpose.
//! - [`time`]: time expressions resolved against a reference date (questions, messages), and the
//!   one normal form of a record's `time`.
//! - [`embed`]: the [`Embedder`](embed::Embedder) trait every sentence embedder implements.
//!
//! ```
//! use memkit_text::{f1::f1_score, person::first_person, words::terms};
//! assert_eq!(terms("Caroline went hiking"), ["caroline", "went", "hike"]);
//! assert_eq!(f1_score("running dogs", "run dog"), 1.0);
//! assert!(first_person("I moved to Lisbon"));
//! ```

pub mod cues;
pub mod embed;
pub mod f1;
pub mod person;
pub mod porter;
pub mod time;
pub mod words;
