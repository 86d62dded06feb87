//! Ending a JSON reply at its first repeated array item, as tokens arrive.
//!
//! A small model asked for a list of objects loops: it writes the same object again until its
//! item cap or token limit, and every repeat is decoded only to be dropped. [`ItemWatch`] scans
//! the reply's bytes once, tracks the open arrays and objects (strings and escapes skipped),
//! and when an object that is an array item closes, compares its string field with the earlier
//! items of the same array. On a near repeat it gives the reply cut after the item before it,
//! with the open containers closed: still JSON, and what the reply would be had the model
//! stopped there.

use memkit_text::f1::f1_score;

use super::request::RepeatedItem;

/// An open container of the reply.
#[derive(Debug, Clone)]
enum Open {
    Object,
    /// An array, the field values of its object items so far, and where its last item ended.
    Array {
        seen: Vec<String>,
        last_end: Option<usize>,
    },
}

/// The scan state of one reply.
#[derive(Debug, Clone)]
pub(crate) struct ItemWatch {
    rule: RepeatedItem,
    open: Vec<Open>,
    /// Where the object item being read began.
    item_start: Option<usize>,
    in_string: bool,
    escaped: bool,
    /// Bytes of the reply scanned so far.
    scanned: usize,
}

impl ItemWatch {
    pub(crate) fn new(rule: RepeatedItem) -> Self {
        Self { rule, open: Vec::new(), item_start: None, in_string: false, escaped: false, scanned: 0 }
    }

    /// Scans the bytes of `text` added since the last call. On the first array item whose
    /// field nearly repeats an earlier item's, returns the reply to end with: `text` up to the
    /// end of the item before it, then the closers of the containers still open around it.
    pub(crate) fn feed(&mut self, text: &[u8]) -> Option<Vec<u8>> {
        for i in self.scanned..text.len() {
            let byte = text[i];
            self.scanned = i + 1;
            if self.in_string {
                match (self.escaped, byte) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' => {
                    if matches!(self.open.last(), Some(Open::Array { .. })) {
                        self.item_start = Some(i);
                    }
                    self.open.push(Open::Object);
                }
                b'[' => self.open.push(Open::Array { seen: Vec::new(), last_end: None }),
                b']' => {
                    self.open.pop();
                }
                b'}' => {
                    self.open.pop();
                    let Some(Open::Array { seen, last_end }) = self.open.last_mut() else { continue };
                    let Some(start) = self.item_start.take() else { continue };
                    let value = serde_json::from_slice::<serde_json::Value>(&text[start..=i]).ok();
                    let field = value.as_ref().and_then(|v| v.get(&self.rule.field)).and_then(serde_json::Value::as_str);
                    if let Some(field) = field {
                        if let (true, Some(end)) = (seen.iter().any(|s| f1_score(field, s) >= self.rule.min_f1), *last_end) {
                            let mut reply = text[..end].to_vec();
                            reply.extend(self.open.iter().rev().map(|o| if matches!(o, Open::Array { .. }) { b']' } else { b'}' }));
                            return Some(reply);
                        }
                        seen.push(field.to_owned());
                    }
                    *last_end = Some(i + 1);
                }
                _ => {}
            }
        }
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
        let a_again = r#"{"content":"Ann runs a bakery in Leeds today.","keywords":[]}"#;
        let pieces = [r#"{"memories":["#, a, ",", b, ",", &a_again[..20], &a_again[20..], ",", a];
        let (at, reply) = feed(&pieces).unwrap();
        assert_eq!(at, 6, "found when the repeat closes, not before");
        assert_eq!(reply, format!(r#"{{"memories":[{a},{b}]}}"#));
        serde_json::from_str::<serde_json::Value>(&reply).unwrap();
    }

    #[test]
    fn different_items_strings_and_escapes_do_not_end_the_reply() {
        // "Ann has two cats." against "Ann has two dogs.": 3 of 4 tokens each → F1 0.75 < 0.8.
        let pieces = [
            r#"{"memories":[{"content":"Ann has two dogs."},"#,
            r#"{"content":"Ann has two cats."},"#,
            // Brackets and an escaped quote inside a string are text, not structure.
            r#"{"content":"She said \"}], {\" once."}]}"#,
        ];
        assert_eq!(feed(&pieces), None);
    }

    #[test]
    fn items_are_compared_within_their_own_array() {
        let pieces = [r#"{"a":[{"content":"Ann sings."}],"b":[{"content":"Ann sings."}]}"#];
        assert_eq!(feed(&pieces), None);
    }
}
