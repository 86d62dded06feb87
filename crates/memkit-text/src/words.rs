//! Text normalisation shared by the lexical routes: lowercase word tokens, stop words, a light
//! stemmer, normalised phrases and capitalised-name spotting.
//!
//! Every lexical comparison in the engine (BM25 terms, keyword and location overlap, the hashing
//! embedder, dedup keys) goes through these functions, so a record and a query are always cut
//! the same way.

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
    "a", "about", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been", "before", "being", "both", "but",
    "by", "can", "could", "did", "do", "does", "doing", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him",
    "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "of", "on", "or", "our", "she", "so", "some", "than",
    "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "to", "too", "up", "was", "we", "were", "what",
    "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
];

/// Whether a lowercase token is a stop word.
pub fn is_stop_word(token: &str) -> bool {
    STOP_WORDS.binary_search(&token).is_ok()
}

/// Chat filler: interjections, thanks and praise ("hey", "thanks", "awesome") that say nothing
/// to remember, retrieve by or group by, in any conversation. Each use adds the words its own job
/// needs to skip: the rule extractor's keywords (time words, which have their own dimension),
/// HingeMem's topics (common verbs), the teacher's phatic-message filter (greetings, farewells).
pub const FILLER: &[&str] = &[
    "amazing", "awesome", "cool", "glad", "good", "great", "hey", "hi", "lol", "much", "nice", "sure", "thank", "thanks", "well", "wow",
    "yeah", "yes",
];

/// Whether a lowercase token is chat filler ([`FILLER`]).
pub fn is_filler(token: &str) -> bool {
    FILLER.binary_search(&token).is_ok()
}

/// Chat's vague words: common verbs, adverbs and intensifiers ("really", "know", "like", "get")
/// that name no topic and make no keyword, in any conversation. The rule extractor's keywords and
/// HingeMem's topics skip them besides [`FILLER`]; the teacher's phatic-message filter does not (a
/// message of them still says something: "I really love that one").
pub const VAGUE: &[&str] =
    &["also", "definitely", "even", "get", "got", "know", "like", "lot", "love", "one", "really", "time", "totally", "way"];

/// Whether a lowercase token is a vague word ([`VAGUE`]).
pub fn is_vague(token: &str) -> bool {
    VAGUE.binary_search(&token).is_ok()
}

/// Tokens without stop words.
pub fn content_tokens(text: &str) -> Vec<String> {
    tokens(text).into_iter().filter(|t| !is_stop_word(t)).collect()
}

/// The terms every lexical route indexes: content tokens (stop words removed), stemmed.
pub fn terms(text: &str) -> Vec<String> {
    tokens(text).into_iter().filter(|t| !is_stop_word(t)).map(|t| stem(&t)).collect()
}

/// A phrase reduced to its terms joined by one space ("The Blue Lakes!" → "blue lake"), so two
/// spellings of one noun phrase compare equal.
pub fn normalize_phrase(text: &str) -> String {
    terms(text).join(" ")
}

/// The dedup key of a record's content: every token, lowercase, one space apart. Stop words and
/// word forms are kept, so only contents that differ in case, spacing or punctuation collide.
pub fn dedup_key(text: &str) -> String {
    tokens(text).join(" ")
}

fn is_vowel(word: &[u8], i: usize) -> bool {
    match word[i] {
        b'a' | b'e' | b'i' | b'o' | b'u' => true,
        // `y` is a vowel after a consonant ("happy"), a consonant at the start or after a vowel.
        b'y' => i > 0 && !is_vowel(word, i - 1),
        _ => false,
    }
}

/// Porter's measure m: the number of vowel-consonant sequences in `[C](VC){m}[V]`.
fn measure(word: &[u8]) -> usize {
    let mut m = 0;
    let mut prev_vowel = false;
    for i in 0..word.len() {
        let v = is_vowel(word, i);
        if prev_vowel && !v {
            m += 1;
        }
        prev_vowel = v;
    }
    m
}

/// consonant-vowel-consonant at the end, last consonant not w, x or y ("hop", "mak").
fn ends_cvc(word: &[u8]) -> bool {
    let n = word.len();
    n >= 3 && !is_vowel(word, n - 3) && is_vowel(word, n - 2) && !is_vowel(word, n - 1) && !matches!(word[n - 1], b'w' | b'x' | b'y')
}

/// A light English stemmer: plurals and third person (Harman's S-stemmer), then `-ing` / `-ed`
/// with Porter's step-1b repairs (undouble "runn" → "run", restore the e of "mak" → "make",
/// "creat" → "create").
///
/// Why light: the engine compares short sentences and noun phrases, where Porter's later steps
/// (`-ational`, `-ness`…) merge words a reader would keep apart, while plural and tense are the
/// variation that actually splits matches ("painting" vs "paints" vs "painted"). The input is
/// expected lowercase; non-ASCII words pass through unchanged.
pub fn stem(word: &str) -> String {
    if word.len() <= 3 || !word.is_ascii() || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return word.to_string();
    }
    let mut w = word.to_string();
    // Step 1: plurals and third person singular.
    if let Some(base) = w.strip_suffix("ies").filter(|_| w.len() > 4) {
        w = format!("{base}y");
    } else if ["sses", "ches", "shes", "xes", "zzes"].iter().any(|s| w.ends_with(s)) {
        w.truncate(w.len() - 2);
    } else if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        w.truncate(w.len() - 1);
    }
    // Step 2: -ing / -ed, only when a vowel remains and the stem keeps three letters.
    for suffix in ["ing", "ed"] {
        let Some(base) = w.strip_suffix(suffix) else { continue };
        let b = base.as_bytes();
        if b.len() < 3 || !(0..b.len()).any(|i| is_vowel(b, i)) || (suffix == "ed" && base.ends_with('e')) {
            break;
        }
        let mut base = base.to_string();
        let bb = base.as_bytes();
        let n = bb.len();
        if base.ends_with("at") || base.ends_with("bl") || base.ends_with("iz") {
            base.push('e');
        } else if bb[n - 1] == bb[n - 2] && !is_vowel(bb, n - 1) && !matches!(bb[n - 1], b'l' | b's' | b'z') {
            base.pop();
        } else if measure(bb) == 1 && ends_cvc(bb) {
            base.push('e');
        }
        w = base;
        break;
    }
    w
}

/// Words that start a sentence or a question with a capital letter without naming anything.
const NOT_NAMES: &[&str] = &[
    "A", "After", "Also", "An", "And", "Any", "Are", "As", "At", "But", "By", "Can", "Could", "Did", "Do", "Does", "For", "From", "Had",
    "Has", "Have", "He", "Hello", "Given", "Based", "Please", "Remind", "Tell", "Since", "Last", "Before", "During", "Her", "Hey", "Hi",
    "His", "How", "I", "If", "In", "Is", "It", "Its", "Just", "My", "No", "Not", "Of", "Oh", "Ok", "Okay", "On", "Or", "Our", "She", "So",
    "That", "The", "Their", "Then", "There", "These", "They", "This", "To", "Was", "We", "Were", "What", "When", "Where", "Which", "While",
    "Who", "Why", "Will", "With", "Would", "Wow", "Yeah", "Yes", "You", "Your",
];

/// Month and weekday names: capitalised, but times, not names.
pub const CALENDAR_WORDS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// Titles written with a dot that do not end a sentence ("Dr. Seuss").
fn is_abbreviation(word: &str) -> bool {
    matches!(word, "Dr." | "Mr." | "Mrs." | "Ms." | "St." | "Jr." | "Prof." | "Mt.")
}

/// A capitalised or quoted span of a text, with its byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPhrase {
    /// Byte offset of the phrase in the text.
    pub start: usize,
    /// The phrase as written (quotes stripped).
    pub text: String,
    /// True for a quoted title rather than a capitalised name.
    pub quoted: bool,
}

/// Capitalised names ("Lake Michigan", "Dr. Seuss", "Caroline") and quoted titles ('Sapiens',
/// "Rack Fest") in order of appearance.
///
/// A run of capitalised words is one phrase; lowercase "of"/"the"/"and"/"de" inside a run are kept
/// ("Bank of America"). Sentence-initial function words ("What", "My"), "I", and month or weekday
/// names are not names.
pub fn named_phrases(text: &str) -> Vec<NamedPhrase> {
    let mut out: Vec<NamedPhrase> = Vec::new();
    // Quoted spans first: their words are then not reported again as capitalised words.
    let mut quoted: Vec<(usize, usize)> = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        // A single quote opens a title only at a word start (not "Ann's").
        let opens = c == b'"' || (c == b'\'' && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()));
        if opens && let Some(len) = text[i + 1..].find(c as char) {
            let inner = text[i + 1..i + 1 + len].trim();
            let words = inner.split_whitespace().count();
            if !inner.is_empty() && words <= 8 {
                out.push(NamedPhrase { start: i + 1, text: inner.trim_matches(|c: char| !c.is_alphanumeric()).to_string(), quoted: true });
                quoted.push((i, i + 1 + len));
                i += len + 2;
                continue;
            }
        }
        i += 1;
    }

    // Words with their byte spans.
    let mut words: Vec<(usize, &str)> = Vec::new();
    let mut start = None;
    for (j, ch) in text.char_indices() {
        let part_of_word = ch.is_alphanumeric() || ch == '\'' || ch == '’' || ch == '-' || ch == '.' || ch == '&';
        match (part_of_word, start) {
            (true, None) => start = Some(j),
            (false, Some(s)) => {
                words.push((s, &text[s..j]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        words.push((s, &text[s..]));
    }

    let in_quotes = |pos: usize| quoted.iter().any(|&(a, b)| pos > a && pos < b);
    let is_cap = |w: &str| {
        // "I'm", "I've", "I’d" are the speaker, not a name.
        if w.starts_with("I'") || w.starts_with("I’") {
            return false;
        }
        let w = w.trim_end_matches(['.', '\'', '’', '-']);
        let w = w.strip_suffix("'s").or_else(|| w.strip_suffix("’s")).unwrap_or(w);
        w.chars().next().is_some_and(|c| c.is_uppercase())
            && !NOT_NAMES.contains(&w)
            && !CALENDAR_WORDS.contains(&w.to_lowercase().as_str())
            && w.chars().any(|c| c.is_alphabetic())
    };
    let clean = |w: &str| -> String {
        let w = if is_abbreviation(w) { w } else { w.trim_end_matches(['.', ',', '-']) };
        let w = w.strip_suffix("'s").or_else(|| w.strip_suffix("’s")).unwrap_or(w);
        w.trim_end_matches(['\'', '’']).to_string()
    };
    let mut k = 0;
    while k < words.len() {
        let (pos, w) = words[k];
        if in_quotes(pos) || !is_cap(w) {
            k += 1;
            continue;
        }
        let mut parts = vec![clean(w)];
        let mut end = k + 1;
        // A possessive or a sentence end closes the run ("Ann's dog", "Paris. Then").
        let closes = |w: &str| w.ends_with("'s") || w.ends_with("’s") || (w.ends_with('.') && !is_abbreviation(w));
        if !closes(w) {
            while end < words.len() {
                let (p, next) = words[end];
                if in_quotes(p) {
                    break;
                }
                // Only spaces may separate words of one name.
                let gap = &text[words[end - 1].0 + words[end - 1].1.len()..p];
                if gap.chars().any(|c| !c.is_whitespace()) {
                    break;
                }
                if is_cap(next) {
                    parts.push(clean(next));
                    end += 1;
                    if closes(next) {
                        break;
                    }
                } else if matches!(next, "of" | "the" | "and" | "de" | "van" | "von")
                    && end + 1 < words.len()
                    && is_cap(words[end + 1].1)
                    && text[p + next.len()..words[end + 1].0].chars().all(char::is_whitespace)
                {
                    parts.push(next.to_string());
                    end += 1;
                } else {
                    break;
                }
            }
        }
        out.push(NamedPhrase { start: pos, text: parts.join(" "), quoted: false });
        k = end;
    }
    out.sort_by_key(|p| p.start);
    out
}

/// Lowercase words that may follow a place name without making it a modifier ("in Paris last
/// week").
const AFTER_PLACE: &[&str] = &[
    "yesterday",
    "today",
    "tonight",
    "tomorrow",
    "last",
    "next",
    "ago",
    "recently",
    "once",
    "twice",
    "again",
    "alone",
    "together",
    "soon",
    "early",
    "late",
    "during",
    "since",
    "until",
    "near",
    "around",
    "without",
    "lately",
    "every",
    "each",
    "not",
    "yet",
    "already",
];

/// Capitalised places after a locative preposition ("in Paris", "at the Louvre", "to Lake
/// Michigan"), in order of appearance.
pub fn location_mentions(text: &str) -> Vec<String> {
    const PREPOSITIONS: &[&str] = &["in", "at", "to", "from", "near", "around", "into", "visiting", "visit", "visited"];
    named_phrases(text)
        .into_iter()
        .filter(|p| {
            if p.quoted {
                return false;
            }
            let before = text[..p.start].trim_end_matches(['"', '\'', ' ']);
            let mut words = before.rsplit(' ');
            let last = words.next().unwrap_or("").to_lowercase();
            let last = if last == "the" { words.next().unwrap_or("").to_lowercase() } else { last };
            // A name that modifies a following noun ("the LGBTQ support group") is no place.
            let after = text[p.start..].strip_prefix(p.text.as_str()).unwrap_or("");
            let next = after.split_whitespace().next().unwrap_or("");
            let modifies = next.chars().next().is_some_and(char::is_lowercase) && {
                let w = next.trim_end_matches(|c: char| !c.is_alphanumeric());
                !is_stop_word(w) && !AFTER_PLACE.contains(&w)
            };
            PREPOSITIONS.contains(&last.as_str()) && !modifies && !p.text.chars().all(|c| c.is_ascii_digit())
        })
        .map(|p| p.text)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(FILLER.windows(2).all(|w| w[0] < w[1]));
        assert!(VAGUE.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn filler_is_chat_filler_only() {
        assert!(is_filler("thanks") && is_filler("wow") && is_filler("yes"));
        assert!(!is_filler("puppy") && !is_filler("Thanks") && !is_filler("the"));
    }

    #[test]
    fn tokens_lowercase_and_split() {
        assert_eq!(tokens("Ann's dog, Rex-2!"), ["anns", "dog", "rex", "2"]);
        assert_eq!(content_tokens("What did the user buy in May?"), ["user", "buy", "may"]);
    }

    #[test]
    fn stemmer_folds_plural_and_tense() {
        let cases = [
            ("dogs", "dog"),
            ("classes", "class"),
            ("churches", "church"),
            ("boxes", "box"),
            ("studies", "study"),
            ("ties", "tie"),
            ("sizes", "size"),
            ("painting", "paint"),
            ("painted", "paint"),
            ("paints", "paint"),
            ("running", "run"),
            ("hopped", "hop"),
            ("making", "make"),
            ("hiking", "hike"),
            ("created", "create"),
            ("visited", "visit"),
            ("opened", "open"),
            ("filling", "fill"),
            ("camping", "camp"),
            ("thing", "thing"),
            ("sing", "sing"),
            ("bus", "bus"),
            ("this", "this"),
            ("caroline", "caroline"),
            ("carolines", "caroline"),
            ("used", "used"),
            ("baked", "bake"),
            ("2023", "2023"),
            ("café", "café"),
        ];
        for (word, want) in cases {
            assert_eq!(stem(word), want, "{word}");
        }
        // The same stem for the forms a question and a record use.
        assert_eq!(stem("hike"), stem("hiking"));
        assert_eq!(stem("bake"), stem("baking"));
    }

    #[test]
    fn phrases_normalise_case_articles_and_plurals() {
        assert_eq!(normalize_phrase("The Blue Lakes!"), "blue lake");
        assert_eq!(normalize_phrase("blue  lake"), "blue lake");
        assert_eq!(dedup_key("Ann  adopted a DOG."), "ann adopted a dog");
        assert_eq!(terms("She was painting sunsets"), ["paint", "sunset"]);
    }

    #[test]
    fn named_phrases_find_names_and_titles() {
        let got = |s: &str| named_phrases(s).into_iter().map(|p| p.text).collect::<Vec<_>>();
        assert_eq!(got("How many bass did I catch at Lake Michigan?"), ["Lake Michigan"]);
        assert_eq!(got("Would Caroline likely have Dr. Seuss books?"), ["Caroline", "Dr. Seuss"]);
        assert_eq!(got("How many pages do I have left to read in 'Sapiens'?"), ["Sapiens"]);
        assert_eq!(got("When did Melanie read the book \"nothing is impossible\"?"), ["Melanie", "nothing is impossible"]);
        assert_eq!(got("What are Melanie's pets' names?"), ["Melanie"]);
        assert_eq!(got("I moved to the Bank of America tower in May."), ["Bank of America"]);
        assert_eq!(got("What did I do last Friday in June?"), Vec::<String>::new());
        assert_eq!(
            got("Which group did I join first, 'Page Turners' or 'Marketing Professionals'?"),
            ["Page Turners", "Marketing Professionals"]
        );
    }

    #[test]
    fn locations_follow_prepositions() {
        assert_eq!(location_mentions("the Airbnb in San Francisco"), ["San Francisco"]);
        assert_eq!(location_mentions("my fishing trip to Lake Michigan?"), ["Lake Michigan"]);
        assert_eq!(location_mentions("a concert at the Hollywood Bowl with Ann"), ["Hollywood Bowl"]);
        assert!(location_mentions("What did Caroline research in May?").is_empty());
        assert!(location_mentions("How many pages are left in 'Sapiens'?").is_empty());
        assert!(location_mentions("I went to the LGBTQ support group").is_empty());
        assert_eq!(location_mentions("We met in Paris yesterday, then flew to Rome."), ["Paris", "Rome"]);
    }
}
