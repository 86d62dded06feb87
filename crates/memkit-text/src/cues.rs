//! Whether a message states a reason or a purpose at all, by its cue words.
//!
//! A small model fills `reason` and `purpose` for almost every record (190 and 167 of 231 teacher
//! records on the gold set, against 18 and 43 of 180 gold records). Grounding keeps them only
//! when the source message has an explicit cue. The cue lists were chosen on the gold set
//! (`data/gold/README.md`): broader lists ("after", "for", "want to") let most of the noise back.
//!
//! ```
//! use memkit_text::cues::{states_purpose, states_reason};
//! assert!(states_reason("I'm starting a dance studio 'cause I'm passionate about dancing"));
//! assert!(!states_reason("I love contemporary dance"));
//! assert!(states_purpose("I wanna start a studio so I can teach others"));
//! assert!(!states_purpose("I want to go to the beach"));
//! ```

use std::sync::LazyLock;

use regex::Regex;

static REASON: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:because|since|cause|cuz|due to|thanks to|that'?s why|the reason|as a result)\b|'cause\b").expect("valid regex")
});

static PURPOSE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:so that|in order to|so (?:i|we|you|they|he|she|it) (?:can|could|will|would)|to help|aims?|goals?|purpose)\b")
        .expect("valid regex")
});

/// The text has a causal cue ("because", "since", "'cause", "due to", "that's why", …).
pub fn states_reason(text: &str) -> bool {
    REASON.is_match(text)
}

/// The text has a purpose cue ("so that", "in order to", "so I can", "to help", "goal", …).
pub fn states_purpose(text: &str) -> bool {
    PURPOSE.is_match(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cues_are_whole_words() {
        assert!(states_reason("Due to the rain we stayed in."));
        assert!(states_reason("That's why I quit."));
        // "cause" inside another word is no cue.
        assert!(!states_reason("A worthy causeway."));
        assert!(states_purpose("I saved up in order to travel."));
        assert!(states_purpose("My goal is a marathon."));
        assert!(!states_purpose("Goalkeepers are tall."));
    }
}
