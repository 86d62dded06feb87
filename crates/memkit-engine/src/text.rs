//! Text normalisation shared by the lexical routes: lowercase word tokens and stop words.

/// Lowercase alphanumeric tokens (apostrophes inside words dropped: "Ann's" → "anns").
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() {
            cur.extend(c.to_lowercase());
        } else if (c == '\'' || c == '’') && !cur.is_empty() {
            continue;
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// English stop words removed before lexical matching.
pub const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been", "before", "being", "both", "but", "by",
    "can", "could", "did", "do", "does", "doing", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him",
    "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "of", "on", "or", "our", "she", "so", "some", "than",
    "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "to", "too", "up", "was", "we", "were", "what",
    "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
];

/// Whether a lowercase token is a stop word.
pub fn is_stop_word(token: &str) -> bool {
    STOP_WORDS.binary_search(&token).is_ok()
}

/// Tokens without stop words.
pub fn content_tokens(text: &str) -> Vec<String> {
    tokens(text).into_iter().filter(|t| !is_stop_word(t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn tokens_lowercase_and_split() {
        assert_eq!(tokens("Ann's dog, Rex-2!"), ["anns", "dog", "rex", "2"]);
        assert_eq!(content_tokens("What did the user buy in May?"), ["user", "buy", "may"]);
    }
}
