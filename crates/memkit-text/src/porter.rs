//! NLTK's Porter stemmer, default mode (`NLTK_EXTENSIONS`), ported rule by rule.
//!
//! The official LoCoMo F1 stems every token with `nltk.stem.PorterStemmer()`, so a score only
//! matches the papers when the stems match NLTK's byte for byte. NLTK's default mode differs from
//! Porter's 1980 paper in several places, all reproduced here:
//!
//! - an irregular-forms pool (`skies` → `sky`, `dying` → `die`, `news` → `news`, `proceed` …);
//! - words of one or two characters are returned lowercased, unstemmed;
//! - step 1a: a four-letter word ending `ies` becomes `…ie` (`dies` → `die`);
//! - step 1b: `ied` → `ie` for four-letter words, `i` otherwise (`spied` → `spi`);
//! - step 1c: `y` → `i` only after a consonant that is not the first letter (`enjoy` stays);
//! - step 2: `alli` → `al` is tried first and step 2 re-run; `bli` → `ble` (not `abli`); extra
//!   rules `fulli` → `ful` and `logi` → `log` (the `l` counts towards the measure);
//! - condition `*o` also holds for a two-letter vowel–consonant stem.
//!
//! Words are handled as Unicode scalar values (Python indexes code points the same way); any
//! character other than `a e i o u` (and `y` after a vowel) counts as a consonant, as in NLTK.
//! Ported from `nltk/stem/porter.py` (NLTK 3.10.4); `tests/porter_golden.rs` checks 3,400 words
//! against NLTK itself.
//!
//! ```
//! use memkit_text::porter::stem;
//! assert_eq!(stem("running"), "run");
//! assert_eq!(stem("Flies"), "fli");
//! assert_eq!(stem("dies"), "die");
//! assert_eq!(stem("generalization"), "gener");
//! ```

/// Stems `word` exactly as NLTK's `PorterStemmer().stem(word)` does (lowercasing first).
pub fn stem(word: &str) -> String {
    let lower = word.to_lowercase();
    if let Some(irregular) = irregular(&lower) {
        return irregular.to_string();
    }
    // NLTK tests the length of the word as given, before lowercasing.
    if word.chars().count() <= 2 {
        return lower;
    }
    let mut w: Vec<char> = lower.chars().collect();
    w = step1a(w);
    w = step1b(w);
    w = step1c(w);
    w = step2(w);
    w = step3(w);
    w = step4(w);
    w = step5a(w);
    w = step5b(w);
    w.into_iter().collect()
}

/// NLTK's irregular-forms pool: form → stem.
fn irregular(word: &str) -> Option<&'static str> {
    Some(match word {
        "sky" | "skies" => "sky",
        "dying" => "die",
        "lying" => "lie",
        "tying" => "tie",
        "news" => "news",
        "innings" | "inning" => "inning",
        "outings" | "outing" => "outing",
        "cannings" | "canning" => "canning",
        "howe" => "howe",
        "proceed" => "proceed",
        "exceed" => "exceed",
        "succeed" => "succeed",
        _ => return None,
    })
}

fn is_vowel(c: char) -> bool {
    matches!(c, 'a' | 'e' | 'i' | 'o' | 'u')
}

/// Consonant flags for every position: `y` is a consonant iff it starts the word or follows a
/// vowel.
fn consonant_flags(w: &[char]) -> Vec<bool> {
    let mut flags: Vec<bool> = Vec::with_capacity(w.len());
    for (i, &c) in w.iter().enumerate() {
        let flag = if is_vowel(c) {
            false
        } else if c == 'y' {
            i == 0 || !flags[i - 1]
        } else {
            true
        };
        flags.push(flag);
    }
    flags
}

fn is_consonant(w: &[char], i: usize) -> bool {
    consonant_flags(&w[..=i])[i]
}

/// Porter's measure m: the number of vowel→consonant transitions.
fn measure(stem: &[char]) -> usize {
    let flags = consonant_flags(stem);
    flags.windows(2).filter(|p| !p[0] && p[1]).count()
}

fn contains_vowel(stem: &[char]) -> bool {
    consonant_flags(stem).iter().any(|&c| !c)
}

/// Condition `*d`: ends with a double consonant.
fn ends_double_consonant(w: &[char]) -> bool {
    let n = w.len();
    n >= 2 && w[n - 1] == w[n - 2] && is_consonant(w, n - 1)
}

/// Condition `*o`, with NLTK's two-letter extension.
fn ends_cvc(w: &[char]) -> bool {
    let n = w.len();
    (n >= 3 && is_consonant(w, n - 3) && !is_consonant(w, n - 2) && is_consonant(w, n - 1) && !matches!(w[n - 1], 'w' | 'x' | 'y'))
        || (n == 2 && !is_consonant(w, 0) && is_consonant(w, 1))
}

fn ends_with(w: &[char], suffix: &str) -> bool {
    let s: Vec<char> = suffix.chars().collect();
    w.len() >= s.len() && w[w.len() - s.len()..] == s[..]
}

fn with_suffix(stem: &[char], replacement: &str) -> Vec<char> {
    let mut out = stem.to_vec();
    out.extend(replacement.chars());
    out
}

/// A condition on the stem left after removing a suffix.
type Condition<'a> = &'a dyn Fn(&[char]) -> bool;

/// How a rule matches.
enum Suffix<'a> {
    /// A literal suffix (possibly empty, which always matches).
    Literal(&'a str),
    /// NLTK's `"*d"` pseudo-suffix: a double consonant (it also matches a literal `*d`).
    DoubleConsonant,
}

struct Rule<'a> {
    suffix: Suffix<'a>,
    replacement: String,
    condition: Option<Condition<'a>>,
}

fn rule<'a>(suffix: &'a str, replacement: &str, condition: Option<Condition<'a>>) -> Rule<'a> {
    Rule { suffix: Suffix::Literal(suffix), replacement: replacement.to_string(), condition }
}

/// NLTK's `_apply_rule_list`: the first rule whose suffix matches decides; if its condition fails
/// the word is returned unchanged and no later rule is tried.
fn apply_rule_list(w: Vec<char>, rules: &[Rule<'_>]) -> Vec<char> {
    for r in rules {
        let suffix = match r.suffix {
            Suffix::DoubleConsonant => {
                if ends_double_consonant(&w) {
                    let stem = &w[..w.len() - 2];
                    return if r.condition.is_none_or(|c| c(stem)) { with_suffix(stem, &r.replacement) } else { w };
                }
                "*d"
            }
            Suffix::Literal(s) => s,
        };
        if ends_with(&w, suffix) {
            let stem = &w[..w.len() - suffix.chars().count()];
            return if r.condition.is_none_or(|c| c(stem)) { with_suffix(stem, &r.replacement) } else { w };
        }
    }
    w
}

fn positive_measure(stem: &[char]) -> bool {
    measure(stem) > 0
}

fn measure_gt_1(stem: &[char]) -> bool {
    measure(stem) > 1
}

fn step1a(w: Vec<char>) -> Vec<char> {
    if ends_with(&w, "ies") && w.len() == 4 {
        return with_suffix(&w[..1], "ie");
    }
    apply_rule_list(w, &[rule("sses", "ss", None), rule("ies", "i", None), rule("ss", "ss", None), rule("s", "", None)])
}

fn step1b(w: Vec<char>) -> Vec<char> {
    if ends_with(&w, "ied") {
        let stem = &w[..w.len() - 3];
        return with_suffix(stem, if w.len() == 4 { "ie" } else { "i" });
    }
    if ends_with(&w, "eed") {
        let stem = &w[..w.len() - 3];
        return if measure(stem) > 0 { with_suffix(stem, "ee") } else { w };
    }
    let mut intermediate = None;
    for suffix in ["ed", "ing"] {
        if ends_with(&w, suffix) {
            let stem = &w[..w.len() - suffix.len()];
            if contains_vowel(stem) {
                intermediate = Some(stem.to_vec());
                break;
            }
        }
    }
    let Some(stem) = intermediate else {
        return w;
    };
    // `stem` holds a vowel, so it is not empty.
    let last = stem[stem.len() - 1];
    let not_lsz = move |_: &[char]| !matches!(last, 'l' | 's' | 'z');
    let short_cvc = |s: &[char]| measure(s) == 1 && ends_cvc(s);
    apply_rule_list(
        stem,
        &[
            rule("at", "ate", None),
            rule("bl", "ble", None),
            rule("iz", "ize", None),
            Rule { suffix: Suffix::DoubleConsonant, replacement: last.to_string(), condition: Some(&not_lsz) },
            rule("", "e", Some(&short_cvc)),
        ],
    )
}

fn step1c(w: Vec<char>) -> Vec<char> {
    let condition = |s: &[char]| s.len() > 1 && is_consonant(s, s.len() - 1);
    apply_rule_list(w, &[rule("y", "i", Some(&condition))])
}

fn step2(w: Vec<char>) -> Vec<char> {
    if ends_with(&w, "alli") && positive_measure(&w[..w.len() - 4]) {
        return step2(with_suffix(&w[..w.len() - 4], "al"));
    }
    let pm: Condition<'_> = &positive_measure;
    // NLTK's `logi` rule tests the measure of the stem plus its `l` (word[:-3]).
    let logi_stem = w[..w.len().saturating_sub(3)].to_vec();
    let logi = move |_: &[char]| positive_measure(&logi_stem);
    apply_rule_list(
        w,
        &[
            rule("ational", "ate", Some(pm)),
            rule("tional", "tion", Some(pm)),
            rule("enci", "ence", Some(pm)),
            rule("anci", "ance", Some(pm)),
            rule("izer", "ize", Some(pm)),
            rule("bli", "ble", Some(pm)),
            rule("alli", "al", Some(pm)),
            rule("entli", "ent", Some(pm)),
            rule("eli", "e", Some(pm)),
            rule("ousli", "ous", Some(pm)),
            rule("ization", "ize", Some(pm)),
            rule("ation", "ate", Some(pm)),
            rule("ator", "ate", Some(pm)),
            rule("alism", "al", Some(pm)),
            rule("iveness", "ive", Some(pm)),
            rule("fulness", "ful", Some(pm)),
            rule("ousness", "ous", Some(pm)),
            rule("aliti", "al", Some(pm)),
            rule("iviti", "ive", Some(pm)),
            rule("biliti", "ble", Some(pm)),
            rule("fulli", "ful", Some(pm)),
            rule("logi", "log", Some(&logi)),
        ],
    )
}

fn step3(w: Vec<char>) -> Vec<char> {
    let pm: Condition<'_> = &positive_measure;
    apply_rule_list(
        w,
        &[
            rule("icate", "ic", Some(pm)),
            rule("ative", "", Some(pm)),
            rule("alize", "al", Some(pm)),
            rule("iciti", "ic", Some(pm)),
            rule("ical", "ic", Some(pm)),
            rule("ful", "", Some(pm)),
            rule("ness", "", Some(pm)),
        ],
    )
}

fn step4(w: Vec<char>) -> Vec<char> {
    let m1: Condition<'_> = &measure_gt_1;
    let ion = |s: &[char]| measure(s) > 1 && matches!(s.last(), Some('s' | 't'));
    apply_rule_list(
        w,
        &[
            rule("al", "", Some(m1)),
            rule("ance", "", Some(m1)),
            rule("ence", "", Some(m1)),
            rule("er", "", Some(m1)),
            rule("ic", "", Some(m1)),
            rule("able", "", Some(m1)),
            rule("ible", "", Some(m1)),
            rule("ant", "", Some(m1)),
            rule("ement", "", Some(m1)),
            rule("ment", "", Some(m1)),
            rule("ent", "", Some(m1)),
            rule("ion", "", Some(&ion)),
            rule("ou", "", Some(m1)),
            rule("ism", "", Some(m1)),
            rule("ate", "", Some(m1)),
            rule("iti", "", Some(m1)),
            rule("ous", "", Some(m1)),
            rule("ive", "", Some(m1)),
            rule("ize", "", Some(m1)),
        ],
    )
}

/// Step 5a tries both of its rules (it cannot use the first-match rule list).
fn step5a(w: Vec<char>) -> Vec<char> {
    if ends_with(&w, "e") {
        let stem = &w[..w.len() - 1];
        let m = measure(stem);
        if m > 1 || (m == 1 && !ends_cvc(stem)) {
            return stem.to_vec();
        }
    }
    w
}

fn step5b(w: Vec<char>) -> Vec<char> {
    // NLTK tests the measure of the word minus one `l`, not of the stem.
    let minus_l = w[..w.len().saturating_sub(1)].to_vec();
    let condition = move |_: &[char]| measure(&minus_l) > 1;
    apply_rule_list(w, &[rule("ll", "l", Some(&condition))])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn measure_matches_the_paper() {
        for (word, m) in [
            ("tr", 0),
            ("ee", 0),
            ("tree", 0),
            ("y", 0),
            ("by", 0),
            ("trouble", 1),
            ("oats", 1),
            ("trees", 1),
            ("ivy", 1),
            ("troubles", 2),
            ("private", 2),
            ("oaten", 2),
            ("orrery", 2),
        ] {
            assert_eq!(measure(&chars(word)), m, "{word}");
        }
    }

    #[test]
    fn y_is_a_consonant_after_a_vowel_or_at_the_start() {
        assert!(is_consonant(&chars("toy"), 2));
        assert!(!is_consonant(&chars("syzygy"), 1));
        assert!(is_consonant(&chars("yes"), 0));
        assert!(!is_consonant(&chars("yy"), 1));
    }

    #[test]
    fn paper_examples_per_step() {
        for (word, stemmed) in [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("cats", "cat"),
            ("feed", "feed"),
            ("agreed", "agre"),
            ("plastered", "plaster"),
            ("motoring", "motor"),
            ("hopping", "hop"),
            ("falling", "fall"),
            ("filing", "file"),
            ("happy", "happi"),
            ("relational", "relat"),
            ("hopefulness", "hope"),
            ("adoption", "adopt"),
            ("controll", "control"),
            ("roll", "roll"),
        ] {
            assert_eq!(stem(word), stemmed, "{word}");
        }
    }

    #[test]
    fn nltk_extensions() {
        assert_eq!(stem("skies"), "sky");
        assert_eq!(stem("dying"), "die");
        assert_eq!(stem("ties"), "tie");
        assert_eq!(stem("spied"), "spi");
        assert_eq!(stem("enjoy"), "enjoy");
        assert_eq!(stem("generalli"), "gener");
        assert_eq!(stem("geology"), "geolog");
        assert_eq!(stem("IS"), "is");
    }
}
