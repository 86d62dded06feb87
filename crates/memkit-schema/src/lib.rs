//! Plain serde types shared by every memkit crate.
//!
//! A **memory record** `m = <id, content, type, dims, pointer>` is the unit of long-term memory
//! (SPEC §1): one self-contained sentence, typed `fact` / `episodic` / `profile`, with the
//! dimensions time, location, reason, purpose and keywords, and a pointer back to the source turn.
//!
//! Model output is parsed leniently and per record by [`parse_extractor_output`]: one bad record is
//! reported and dropped, never the whole window, and the parser never panics.
//!
//! ```
//! use memkit_schema::parse_extractor_output;
//! let raw = "Sure!\n```json\n{\"memories\": [{\"source_id\": 2, \"source_speaker\": \"Ann\",
//!   \"content\": \"Ann adopted a dog named Rex.\", \"dimension\": {\"memory_type\": \"episodic\",
//!   \"time\": \"2023-05-07\", \"keywords\": [\"dog\", \"Rex\"],}},]}\n```";
//! let parsed = parse_extractor_output(raw);
//! assert_eq!(parsed.records.len(), 1);
//! assert!(parsed.errors.is_empty());
//! assert_eq!(parsed.records[0].dimension.keywords, ["dog", "Rex"]);
//! ```

mod dialogue;
mod error;
mod json_schema;
mod lenient;
mod query;
mod record;
mod time;

pub use dialogue::{Dialogue, Role, Session, Turn};
pub use error::{Error, Result};
pub use json_schema::{ExtractorSchemaOptions, extractor_json_schema, query_json_schema};
pub use lenient::{ErrorKind, ParseOutcome, RecordError, json_kind, parse_extractor_output};
pub use query::{AnswerDim, Hyperedge, ParsedQuery};
pub use record::{
    Dimensions, ExtractedDimension, ExtractedMemory, ExtractorOutput, MemoryRecord, MemoryType, Pointer, UpdateAction, window_ledger_path,
};
pub use time::{TimeConstraint, TimeSpan};
