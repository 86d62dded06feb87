//! Stop strings, matched on the bytes of the completion as tokens arrive.
//!
//! Matching bytes rather than `str` lets a stop string straddle tokens and even split UTF-8
//! characters across tokens, which byte-level BPE vocabularies do.

/// The stop strings of one request.
#[derive(Debug, Clone)]
pub(crate) struct StopStrings {
    patterns: Vec<Vec<u8>>,
    longest: usize,
}

impl StopStrings {
    /// Empty strings are dropped: they would match before any token.
    pub(crate) fn new(stops: &[String]) -> Self {
        let patterns: Vec<Vec<u8>> = stops.iter().filter(|s| !s.is_empty()).map(|s| s.as_bytes().to_vec()).collect();
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        Self { patterns, longest }
    }

    /// The start of the earliest stop string in `text` that ends at or after `new_from`, the
    /// length `text` had before the latest token. Earlier bytes were checked already, so only a
    /// window of `longest - 1` bytes before `new_from` is searched again.
    pub(crate) fn find(&self, text: &[u8], new_from: usize) -> Option<usize> {
        let window = new_from.saturating_sub(self.longest.saturating_sub(1));
        let hay = &text[window..];
        self.patterns
            .iter()
            .filter_map(|pattern| hay.windows(pattern.len()).position(|w| w == pattern.as_slice()))
            .min()
            .map(|i| i + window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(list: &[&str]) -> StopStrings {
        StopStrings::new(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    /// Feeds `pieces` one at a time and returns the cut position when a stop string appears.
    fn feed(stop: &StopStrings, pieces: &[&str]) -> Option<(usize, usize)> {
        let mut text = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            let from = text.len();
            text.extend_from_slice(piece.as_bytes());
            if let Some(cut) = stop.find(&text, from) {
                return Some((i, cut));
            }
        }
        None
    }

    #[test]
    fn finds_a_stop_string_split_across_pieces() {
        let stop = stops(&["\n\nUser:"]);
        assert_eq!(feed(&stop, &["Hello", "\n", "\nUs", "er:", " hi"]), Some((3, 5)));
    }

    #[test]
    fn earliest_of_several_wins() {
        let stop = stops(&["END", "b"]);
        assert_eq!(feed(&stop, &["aaEbNDb"]), Some((0, 3)));
        assert_eq!(feed(&stop, &["xxEN", "D"]), Some((1, 2)));
    }

    #[test]
    fn no_match_and_empty_patterns() {
        assert_eq!(feed(&stops(&["zz"]), &["z", "a", "z"]), None);
        assert_eq!(feed(&stops(&[""]), &["anything"]), None);
        assert_eq!(feed(&stops(&[]), &["anything"]), None);
    }

    #[test]
    fn matches_inside_a_multibyte_character_boundary() {
        // "é" is two bytes; the stop string is the whole character, fed byte by byte.
        let stop = stops(&["é!"]);
        let mut text = Vec::new();
        let mut hit = None;
        for byte in "caf\u{e9}!".bytes() {
            let from = text.len();
            text.push(byte);
            hit = hit.or(stop.find(&text, from));
        }
        assert_eq!(hit, Some(3));
    }
}
