//! Overlap-aware windows over a dialogue (SPEC §2).
//!
//! The message list is the whole dialogue across sessions (or, in user-only mode, its user
//! messages, each keeping the assistant reply that followed it). With
//! `step = max(1, size - overlap)`, windows start at `0, step, 2·step, …`; the last one may be
//! short, and no window starts once `start + size ≥ len`. Window 0 has no context; every later
//! window begins with `overlap` messages already covered by the previous one, which are context
//! only: records come from the rest, the *suffix*. So each message is in exactly one suffix.

use std::borrow::Cow;
use std::fmt::Write as _;

use chrono::NaiveDateTime;
use memkit_schema::{Dialogue, Role, Turn};
use serde::{Deserialize, Serialize};

/// How a dialogue is cut into windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// Messages per window (at least 1 is used).
    pub size: usize,
    /// Context messages shared with the previous window (at most `size - 1` is used).
    pub overlap: usize,
    /// Window over user messages only, each keeping the assistant reply that followed it.
    #[serde(default)]
    pub user_only: bool,
    /// Longer messages are rendered cut to head, middle and tail.
    #[serde(default = "default_max_message_chars")]
    pub max_message_chars: usize,
}

fn default_max_message_chars() -> usize {
    WindowConfig::DEFAULT_MAX_MESSAGE_CHARS
}

impl WindowConfig {
    /// Messages longer than this many characters are cut when rendered.
    pub const DEFAULT_MAX_MESSAGE_CHARS: usize = 8000;

    /// Checks the settings: a window needs at least one message, and the overlap must leave at
    /// least one new message per window (`overlap < size`). [`windows`] itself clamps bad values
    /// so it never loops; recipes and commands call this first so a typo is an error instead.
    pub fn validate(&self) -> crate::Result<()> {
        if self.size == 0 {
            return Err(crate::Error::Window("size is 0: a window needs at least one message".into()));
        }
        if self.overlap >= self.size {
            return Err(crate::Error::Window(format!(
                "overlap {} is not below size {}: every window must add at least one new message",
                self.overlap, self.size
            )));
        }
        if self.max_message_chars == 0 {
            return Err(crate::Error::Window("max_message_chars is 0".into()));
        }
        Ok(())
    }

    /// LoCoMo: 25 turns, overlap 5, all speakers.
    pub fn locomo() -> Self {
        WindowConfig { size: 25, overlap: 5, user_only: false, max_message_chars: Self::DEFAULT_MAX_MESSAGE_CHARS }
    }

    /// LongMemEval: 15 user messages, overlap 3, assistant replies kept for recall.
    pub fn longmemeval() -> Self {
        WindowConfig { size: 15, overlap: 3, user_only: true, max_message_chars: Self::DEFAULT_MAX_MESSAGE_CHARS }
    }

    /// The size actually used (at least 1).
    pub fn effective_size(&self) -> usize {
        self.size.max(1)
    }

    /// The overlap actually used (below the size).
    pub fn effective_overlap(&self) -> usize {
        self.overlap.min(self.effective_size() - 1)
    }

    /// `max(1, size - overlap)`.
    pub fn step(&self) -> usize {
        self.effective_size() - self.effective_overlap()
    }

    /// How many windows a list of `messages` messages gives: 0 for none, 1 up to `size`, then
    /// `1 + ceil((messages - size) / step)`.
    pub fn window_count(&self, messages: usize) -> usize {
        let size = self.effective_size();
        match messages {
            0 => 0,
            n if n <= size => 1,
            n => 1 + (n - size).div_ceil(self.step()),
        }
    }
}

/// One message of a window: a dialogue [`Turn`] numbered inside the window.
///
/// In JSON the turn's fields sit beside `number` (flattened); files written before the message
/// held a `Turn` name its id `turn_id`, which still reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowMessage {
    /// 1-based number inside the window: the extractor's `source_id`.
    pub number: u32,
    /// The dialogue turn: id, speaker, role, full text (cut only when rendered), photo caption,
    /// time. Its evidence flag is cleared: a window carries no answer labels.
    #[serde(flatten)]
    pub turn: Turn,
    /// User-only mode: the assistant turn(s) that followed this message in its session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assistant_reply: Option<String>,
}

impl WindowMessage {
    /// A user's message numbered `number` (turn id `t<number>`), with no caption, time or
    /// reply: the builder of tests and examples.
    pub fn user(number: u32, speaker: &str, text: &str) -> Self {
        Self { number, turn: Turn::new(format!("t{number}"), speaker, Role::User, text), assistant_reply: None }
    }

    /// The same message as the assistant's (speaker `assistant`).
    #[must_use]
    pub fn by_assistant(self) -> Self {
        Self { turn: Turn { speaker: "assistant".into(), role: Role::Assistant, ..self.turn }, ..self }
    }

    /// The same message written at `timestamp`.
    #[must_use]
    pub fn at(self, timestamp: NaiveDateTime) -> Self {
        Self { turn: Turn { timestamp: Some(timestamp), ..self.turn }, ..self }
    }
}

/// A window of consecutive messages; the first `context` ones are context only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// `<dialogue_id>/w<index>`.
    pub id: String,
    /// The dialogue it was cut from.
    pub dialogue_id: String,
    /// 0-based position in the dialogue's windows.
    pub index: usize,
    /// Number of leading context-only messages (0 for window 0, else the overlap).
    pub context: usize,
    /// Messages longer than this are cut when rendered.
    pub max_message_chars: usize,
    /// The messages, numbered from 1.
    pub messages: Vec<WindowMessage>,
}

impl Window {
    /// The window `id` (`<dialogue>/w<index>`) of `messages`, the first `context` of them
    /// context only, cut at the default message length: the builder of tests and examples.
    pub fn of(id: &str, context: usize, messages: Vec<WindowMessage>) -> Self {
        let (dialogue_id, index) = id.rsplit_once("/w").map_or((id, 0), |(d, i)| (d, i.parse().unwrap_or(0)));
        Self {
            id: id.into(),
            dialogue_id: dialogue_id.into(),
            index,
            context,
            max_message_chars: WindowConfig::DEFAULT_MAX_MESSAGE_CHARS,
            messages,
        }
    }

    /// The context-only messages.
    pub fn context_messages(&self) -> &[WindowMessage] {
        &self.messages[..self.context]
    }

    /// The messages records may come from (after the context).
    pub fn suffix(&self) -> &[WindowMessage] {
        &self.messages[self.context..]
    }

    /// Whether a `source_id` names a suffix message of this window.
    pub fn in_suffix(&self, number: u32) -> bool {
        (number as usize) > self.context && (number as usize) <= self.messages.len()
    }

    /// The message with this 1-based number.
    pub fn message(&self, number: u32) -> Option<&WindowMessage> {
        (number as usize).checked_sub(1).and_then(|i| self.messages.get(i))
    }

    /// The window of one message (`number`) with up to `context` messages before it as context,
    /// renumbered from 1 and named `<id>/m<number>`: a whole window asked one message at a time,
    /// as the decomposed teacher asked it. `None` when `number` is not in the window.
    pub fn around(&self, number: u32, context: usize) -> Option<Window> {
        let last = (number as usize).checked_sub(1).filter(|&i| i < self.messages.len())?;
        let first = last.saturating_sub(context);
        let messages = self.messages[first..=last].iter().zip(1..).map(|(m, n)| WindowMessage { number: n, ..m.clone() }).collect();
        Some(Window {
            id: format!("{}/m{number}", self.id),
            dialogue_id: self.dialogue_id.clone(),
            index: self.index,
            context: last - first,
            max_message_chars: self.max_message_chars,
            messages,
        })
    }

    /// One line per message, `[2023-05-08T13:56:00, Mon] 7.Caroline: text`, joined by `\n`.
    ///
    /// Line breaks inside a message are folded to spaces so each message stays on one line;
    /// a photo caption is appended as ` [shares photo: …]`; messages over `max_message_chars`
    /// are cut to head, middle and tail. Messages without a timestamp get no bracket.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (i, m) in self.messages.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            m.render_into(&mut out, self.max_message_chars);
        }
        out
    }
}

impl WindowMessage {
    /// This message's line, cut at `max_chars` (see [`Window::render`]).
    pub fn render_line(&self, max_chars: usize) -> String {
        let mut out = String::new();
        self.render_into(&mut out, max_chars);
        out
    }

    fn render_into(&self, out: &mut String, max_chars: usize) {
        let turn = &self.turn;
        if let Some(ts) = turn.timestamp {
            let _ = write!(out, "[{}] ", ts.format("%Y-%m-%dT%H:%M:%S, %a"));
        }
        let _ = write!(out, "{}.{}: ", self.number, turn.speaker);
        out.push_str(&truncate_middle(&fold_lines(&turn.text), max_chars));
        if let Some(caption) = &turn.caption {
            let _ = write!(out, " [shares photo: {}]", fold_lines(caption));
        }
    }
}

/// Replaces each line break (and the spaces around it) with one space.
fn fold_lines(text: &str) -> Cow<'_, str> {
    if !text.contains(['\n', '\r']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut pending_break = false;
    for c in text.chars() {
        if c == '\n' || c == '\r' {
            pending_break = true;
            out.truncate(out.trim_end_matches([' ', '\t']).len());
        } else if pending_break && (c == ' ' || c == '\t') {
        } else {
            if pending_break && !out.is_empty() {
                out.push(' ');
            }
            pending_break = false;
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The marker between the kept parts of a cut message.
pub const CUT_MARKER: &str = " […] ";

/// Cuts `text` to at most `max_chars` characters as head, middle and tail joined by
/// [`CUT_MARKER`]; unchanged when it fits. Counts and cuts on `char` boundaries.
pub fn truncate_middle(text: &str, max_chars: usize) -> Cow<'_, str> {
    let n = text.chars().count();
    if n <= max_chars {
        return Cow::Borrowed(text);
    }
    let byte_at = |char_index: usize| text.char_indices().nth(char_index).map_or(text.len(), |(b, _)| b);
    let marker = CUT_MARKER.chars().count();
    if max_chars < 2 * marker + 3 {
        return Cow::Owned(text[..byte_at(max_chars)].to_string());
    }
    let budget = max_chars - 2 * marker;
    let head = budget.div_ceil(3);
    let tail = budget / 3;
    let middle = budget - head - tail;
    let middle_start = (n - middle) / 2;
    let mut out = String::with_capacity(max_chars * 4);
    out.push_str(&text[..byte_at(head)]);
    out.push_str(CUT_MARKER);
    out.push_str(&text[byte_at(middle_start)..byte_at(middle_start + middle)]);
    out.push_str(CUT_MARKER);
    out.push_str(&text[byte_at(n - tail)..]);
    Cow::Owned(out)
}

/// The message list windows run over.
fn message_list(dialogue: &Dialogue, user_only: bool) -> Vec<WindowMessage> {
    let mut out = Vec::new();
    for session in &dialogue.sessions {
        let turns = &session.turns;
        for (i, t) in turns.iter().enumerate() {
            if user_only && t.role != Role::User {
                continue;
            }
            let assistant_reply = if user_only {
                let replies: Vec<&str> = turns[i + 1..].iter().take_while(|r| r.role == Role::Assistant).map(|r| r.text.as_str()).collect();
                (!replies.is_empty()).then(|| replies.join("\n\n"))
            } else {
                None
            };
            out.push(WindowMessage { number: 0, turn: Turn { has_answer: false, ..t.clone() }, assistant_reply });
        }
    }
    out
}

/// Cuts a dialogue into windows (see the module doc).
pub fn windows(dialogue: &Dialogue, config: &WindowConfig) -> Vec<Window> {
    let messages = message_list(dialogue, config.user_only);
    let (size, overlap, step) = (config.effective_size(), config.effective_overlap(), config.step());
    let mut out = Vec::with_capacity(config.window_count(messages.len()));
    let mut start = 0;
    while start < messages.len() {
        let end = (start + size).min(messages.len());
        let index = out.len();
        let mut window_messages = messages[start..end].to_vec();
        for (k, m) in window_messages.iter_mut().enumerate() {
            m.number = (k + 1) as u32;
        }
        out.push(Window {
            id: format!("{}/w{index}", dialogue.id),
            dialogue_id: dialogue.id.clone(),
            index,
            context: if index == 0 { 0 } else { overlap },
            max_message_chars: config.max_message_chars,
            messages: window_messages,
        });
        if start + size >= messages.len() {
            break;
        }
        start += step;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_are_unchanged_and_long_ones_keep_head_middle_tail() {
        assert_eq!(truncate_middle("abc", 3), "abc");
        let text: String = ('a'..='z').cycle().take(100).collect();
        let cut = truncate_middle(&text, 40);
        assert_eq!(cut.chars().count(), 40);
        assert!(cut.starts_with(&text[..10]) && cut.ends_with(&text[90..]), "{cut}");
        assert_eq!(cut.matches(CUT_MARKER).count(), 2);
        // The middle part comes from the centre of the text.
        let middle = cut.split(CUT_MARKER).nth(1).unwrap();
        assert_eq!(middle, &text[45..55]);
    }

    #[test]
    fn cuts_fall_on_char_boundaries() {
        let text = "é🙂ß".repeat(50);
        for max in [0, 5, 12, 13, 40, 149] {
            let cut = truncate_middle(&text, max);
            assert!(cut.chars().count() <= max, "{max}");
        }
    }

    #[test]
    fn a_window_around_one_message_keeps_its_context_and_numbers_from_one() {
        let message = |number: u32, text: &str| WindowMessage::user(number, "user", text);
        let w = Window {
            id: "d/w3".into(),
            dialogue_id: "d".into(),
            index: 3,
            context: 1,
            max_message_chars: 50,
            messages: vec![message(1, "a"), message(2, "b"), message(3, "c")],
        };
        let one = w.around(3, 1).unwrap();
        assert_eq!((one.id.as_str(), one.context, one.index), ("d/w3/m3", 1, 3));
        assert_eq!(one.render(), "1.user: b\n2.user: c");
        assert_eq!(one.messages[1].turn.id, "t3");
        // Less context than asked at the start of the window; none asked, none given.
        assert_eq!(w.around(1, 2).unwrap().render(), "1.user: a");
        assert_eq!(w.around(2, 0).unwrap().render(), "1.user: b");
        assert_eq!(w.around(3, 5).unwrap().context, 2);
        assert!(w.around(0, 1).is_none() && w.around(4, 1).is_none());
    }

    #[test]
    fn line_breaks_fold_to_single_spaces() {
        assert_eq!(fold_lines("a\nb"), "a b");
        assert_eq!(fold_lines("list:  \n\n  1. x\r\n2. y\n"), "list: 1. x 2. y");
        assert_eq!(fold_lines("\nstart"), "start");
    }

    #[test]
    fn degenerate_configs_are_clamped() {
        let c = WindowConfig { size: 0, overlap: 9, user_only: false, max_message_chars: 10 };
        assert_eq!((c.effective_size(), c.effective_overlap(), c.step()), (1, 0, 1));
        assert!(c.validate().unwrap_err().to_string().contains("size is 0"));
        assert!(WindowConfig { size: 4, overlap: 4, ..c }.validate().unwrap_err().to_string().contains("overlap 4 is not below size 4"));
        assert!(WindowConfig::locomo().validate().is_ok() && WindowConfig::longmemeval().validate().is_ok());
        let c = WindowConfig { size: 4, overlap: 9, ..c };
        assert_eq!((c.effective_overlap(), c.step()), (3, 1));
        assert_eq!(c.window_count(0), 0);
        assert_eq!(c.window_count(4), 1);
        assert_eq!(c.window_count(6), 3);
    }
}
