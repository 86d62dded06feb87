//! Ending a JSON reply at its first repeated array item, as tokens arrive.
//!
//! A small model asked for a list of objects loops: it writes the same object again until its
//! item cap or token limit, and every repeat is decoded only to be dropped. [`ItemWatch`] scans
//! the reply's bytes once, tracks the open arrays and objects (strings and escapes skipped,
//! keys told from values), and as soon as the watched string field of an object that is an
//! array item is closed, compares it with that field of the earlier items of the same array.
//! On a near repeat it gives the reply cut after the item before it, with the open containers
//! closed: still JSON, what the reply would be had the model stopped there, and the rest of the
//! repeated item is never decoded.

use memkit_text::f1::f1_score;

use super::request::RepeatedItem;

/// An open container of the reply.
#[derive(Debug, Clone)]
enum Open {
    /// An object: whether the next string is a key, and the last key read.
    Object { expect_key: bool, key: Option<String> },
    /// An array, the field values of its object items so far, and where its last item ended.
    Array { seen: Vec<String>, last_end: Option<usize> },
}

/// The scan state of one reply.
#[derive(Debug, Clone)]
pub(crate) struct ItemWatch {
    rule: RepeatedItem,
    open: Vec<Open>,
    /// The watched field of the object item being read, once read.
    field: Option<String>,
    /// Where the string being read began (its opening quote), while in one.
    string_start: Option<usize>,
    escaped: bool,
    /// Bytes of the reply scanned so far.
    scanned: usize,
}

impl ItemWatch {
    pub(crate) fn new(rule: RepeatedItem) -> Self {
        Self { rule, open: Vec::new(), field: None, string_start: None, escaped: false, scanned: 0 }
    }

    /// Whether the innermost container is an object that is an item of an array.
    fn in_item(&self) -> bool {
        matches!(self.open.as_slice(), [.., Open::Array { .. }, Open::Object { .. }])
    }

    /// Scans the bytes of `text` added since the last call. On the first array item whose
    /// field nearly repeats an earlier item's, returns the reply to end with: `text` up to the
    /// end of the item before it, then the closers of the containers around the item.
    pub(crate) fn feed(&mut self, text: &[u8]) -> Option<Vec<u8>> {
        for i in self.scanned..text.len() {
            let byte = text[i];
            self.scanned = i + 1;
            if let Some(start) = self.string_start {
                match (self.escaped, byte) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => {
                        self.string_start = None;
                        if let Some(reply) = self.string(text, start, i) {
                            return Some(reply);
                        }
                    }
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => self.string_start = Some(i),
                b'{' => {
                    if matches!(self.open.last(), Some(Open::Array { .. })) {
                        self.field = None;
                    }
                    self.open.push(Open::Object { expect_key: true, key: None });
                }
                b'[' => self.open.push(Open::Array { seen: Vec::new(), last_end: None }),
                b':' | b',' => {
                    if let Some(Open::Object { expect_key, .. }) = self.open.last_mut() {
                        *expect_key = byte == b',';
                    }
                }
                b']' => {
                    self.open.pop();
                }
                b'}' => {
                    let was_item = self.in_item();
                    self.open.pop();
                    if was_item && let Some(Open::Array { seen, last_end }) = self.open.last_mut() {
                        seen.extend(self.field.take());
                        *last_end = Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// A string closed at `end` (its quotes at `start` and `end`): a key, or a value that may be
    /// the watched field of an item, which may repeat an earlier item's.
    fn string(&mut self, text: &[u8], start: usize, end: usize) -> Option<Vec<u8>> {
        let in_item = self.in_item();
        let Some(Open::Object { expect_key, key }) = self.open.last_mut() else { return None };
        let value = serde_json::from_slice::<String>(&text[start..=end]).ok()?;
        if *expect_key {
            *key = Some(value);
            return None;
        }
        if !in_item || key.as_deref() != Some(self.rule.field.as_str()) {
            return None;
        }
        let [.., Open::Array { seen, last_end }, _] = self.open.as_slice() else { return None };
        if let (true, Some(cut)) = (seen.iter().any(|s| f1_score(&value, s) >= self.rule.min_f1), *last_end) {
            let mut reply = text[..cut].to_vec();
            let around = &self.open[..self.open.len() - 1];
            reply.extend(around.iter().rev().map(|o| if matches!(o, Open::Array { .. }) { b']' } else { b'}' }));
            return Some(reply);
        }
        self.field = Some(value);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> ItemWatch {
        ItemWatch::new(RepeatedItem { field: "content".into(), min_f1: 0.8 })
    }

    /// Feeds `pieces` one at a time; the reply to end with, and the piece it came at.
    fn feed(pieces: &[&str]) -> Option<(usize, String)> {
        let mut w = watch();
        let mut text = Vec::new();
        for (k, piece) in pieces.iter().enumerate() {
            text.extend_from_slice(piece.as_bytes());
            if let Some(reply) = w.feed(&text) {
                return Some((k, String::from_utf8(reply).unwrap()));
            }
        }
        None
    }

    #[test]
    fn a_repeated_item_ends_the_reply_after_the_item_before_it() {
        let a = r#"{"content":"Ann runs a bakery in Leeds.","keywords":["bakery"]}"#;
        let b = r#"{"content":"Ann has two dogs.","dim":{"x":"}"}}"#;
        // Against a (stemmed, articles dropped): 5 shared tokens of 6 and 5 → F1 = 10/11 ≈ 0.91.
        let again = [r#"{"content":"Ann runs a bak"#, r#"ery in Leeds today.""#, r#","keywords":[]}"#];
        let pieces = [r#"{"memories":["#, a, ",", b, ",", again[0], again[1], again[2], ",", a];
        let (at, reply) = feed(&pieces).unwrap();
        assert_eq!(at, 6, "found as soon as the repeated content closes, not before or after");
        assert_eq!(reply, format!(r#"{{"memories":[{a},{b}]}}"#));
        serde_json::from_str::<serde_json::Value>(&reply).unwrap();
    }

    #[test]
    fn different_items_strings_and_escapes_do_not_end_the_reply() {
        // "Ann has two cats." against "Ann has two dogs.": 3 of 4 tokens each → F1 0.75 < 0.8.
        let pieces = [
            r#"{"memories":[{"content":"Ann has two dogs."},"#,
            r#"{"content":"Ann has two cats."},"#,
            // Brackets and an escaped quote inside a string are text, not structure; a key is
            // not a value, and only the watched field counts.
            r#"{"content":"She said \"}], {\" once.","note":"Ann has two dogs."},"#,
            r#"{"Ann has two dogs.":"content","content":"Ann sings."}]}"#,
        ];
        assert_eq!(feed(&pieces), None);
    }

    #[test]
    fn items_are_compared_within_their_own_array() {
        let pieces = [r#"{"a":[{"content":"Ann sings."}],"b":[{"content":"Ann sings."}]}"#];
        assert_eq!(feed(&pieces), None);
    }
}
