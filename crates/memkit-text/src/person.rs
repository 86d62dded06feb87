//! Who a sentence speaks as.

/// Whether `text` speaks in the first person singular (outside quotes it should name the
/// speaker: "Emily plays piano", not "I play piano").
pub fn first_person(text: &str) -> bool {
    const WORDS: [&str; 9] = ["i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself"];
    let mut in_quote = false;
    for raw in text.split_whitespace() {
        let starts = raw.starts_with(['"', '\u{201c}']);
        let word: String = raw.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'').replace('\u{2019}', "'").to_lowercase();
        if starts {
            in_quote = true;
        }
        if !in_quote && WORDS.contains(&word.as_str()) {
            return true;
        }
        if raw.ends_with(['"', '\u{201d}']) || raw.trim_end_matches(['.', ',', '!', '?']).ends_with(['"', '\u{201d}']) {
            in_quote = false;
        }
    }
    false
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
}
