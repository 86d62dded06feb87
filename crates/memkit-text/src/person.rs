//! Who a sentence speaks as: first-person singular words, found ([`first_person`]) or
//! rewritten for a named person ([`third_person`]).

use std::sync::LazyLock;

use regex::Regex;

/// The first-person singular words, lowercase, with `'` for the apostrophe.
pub const FIRST_PERSON_WORDS: [&str; 9] = ["i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself"];

/// Whether `text` speaks in the first person singular (outside quotes it should name the
/// speaker: "Emily plays piano", not "I play piano").
pub fn first_person(text: &str) -> bool {
    let mut in_quote = false;
    for raw in text.split_whitespace() {
        let starts = raw.starts_with(['"', '\u{201c}']);
        let word: String = raw.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'').replace('\u{2019}', "'").to_lowercase();
        if starts {
            in_quote = true;
        }
        if !in_quote && FIRST_PERSON_WORDS.contains(&word.as_str()) {
            return true;
        }
        if raw.ends_with(['"', '\u{201d}']) || raw.trim_end_matches(['.', ',', '!', '?']).ends_with(['"', '\u{201d}']) {
            in_quote = false;
        }
    }
    false
}

/// [`FIRST_PERSON_WORDS`] as they are written: "I" and its contractions capitalised, the others
/// in either case at a sentence start.
static FIRST_PERSON: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(?:I['’](?:m|ve|d|ll)|I|[Mm]y|[Mm]e|[Mm]ine|[Mm]yself)\b").expect("valid regex"));

/// `text` with every first-person singular word replaced for `person`: "I'm" → "<person> is",
/// "I've" → "has", "I'd" → "would", "I'll" → "will", "I" / "me" / "myself" → `person`, "my" /
/// "mine" → "<person>'s". The query parser asks its questions this way as "the user".
pub fn third_person(text: &str, person: &str) -> String {
    FIRST_PERSON
        .replace_all(text, |c: &regex::Captures<'_>| match c[0].replace('’', "'").to_lowercase().as_str() {
            "i'm" => format!("{person} is"),
            "i've" => format!("{person} has"),
            "i'd" => format!("{person} would"),
            "i'll" => format!("{person} will"),
            "i" | "me" | "myself" => person.to_owned(),
            _ => format!("{person}'s"),
        })
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_person_ignores_quotes_and_lookalikes() {
        assert!(first_person("I love hiking."));
        assert!(first_person("Ann told me about it."));
        assert!(first_person("Sold my car"));
        assert!(!first_person("Ann said \"I love it\"."));
        assert!(!first_person("Ann visited Milan in Italy."));
        assert!(!first_person("Ann's mine-craft server"));
    }

    #[test]
    fn third_person_names_the_speaker() {
        assert_eq!(third_person("I'm sure you told me my plan", "Ann"), "Ann is sure you told Ann Ann's plan");
        assert_eq!(third_person("My sister and I’ve been", "Bo"), "Bo's sister and Bo has been");
        // Each first-person word, as it starts a sentence, is found and rewritten.
        for word in FIRST_PERSON_WORDS {
            let written: String = word[..1].to_uppercase() + &word[1..];
            assert!(first_person(&written), "{written}");
            assert!(third_person(&written, "X").starts_with('X'), "{written}");
        }
    }
}
