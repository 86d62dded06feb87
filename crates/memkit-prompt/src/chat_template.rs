//! Hugging Face chat templates, rendered the way transformers renders them.
//!
//! transformers compiles a chat template in an `ImmutableSandboxedEnvironment(trim_blocks=True,
//! lstrip_blocks=True)` with the `loopcontrols` extension, replaces the `tojson` filter with
//! `json.dumps(ensure_ascii=False, ...)`, adds the globals `raise_exception` and `strftime_now`,
//! and renders with `messages`, `tools`, `documents`, `add_generation_prompt` and the tokenizer's
//! special tokens. [`ChatTemplate`] sets up minijinja the same way (plus minijinja-contrib's
//! Python-method shim for `.strip()`, `.items()` ...), so its output is byte-identical; the golden
//! tests in `tests/chat_template.rs` check that against Python jinja2 on real templates.
//!
//! Not supported: the `{% generation %}` tag of transformers' assistant-mask extension (use
//! [`render_for_training`] instead, which works with any prefix-stable template).

use std::ops::Range;
use std::path::Path;

use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, Error as JinjaError, ErrorKind, Value, context};
use serde::Serialize;

use crate::pyjson::tojson_filter;
use crate::{ChatMessage, ChatRole, Error, Result};

const TEMPLATE_NAME: &str = "chat_template";

/// A compiled Hugging Face chat template with its special tokens.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

/// A minijinja environment configured like transformers' `_compile_jinja_template`.
pub(crate) fn hf_environment() -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build();
    // The default delimiters always build; keep minijinja's defaults if that ever changes.
    if let Ok(syntax) = syntax {
        env.set_syntax(syntax);
    }
    // transformers renders with autoescape off; minijinja would escape templates named *.html.
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson_filter);
    env.add_function("raise_exception", |message: String| -> Result<Value, JinjaError> {
        Err(JinjaError::new(ErrorKind::InvalidOperation, message))
    });
    env.add_function("strftime_now", |format: String| -> Result<String, JinjaError> {
        let mut out = String::new();
        // chrono reports an unknown specifier as a fmt error (`to_string` would panic).
        std::fmt::write(&mut out, format_args!("{}", chrono::Local::now().format(&format)))
            .map_err(|_| JinjaError::new(ErrorKind::InvalidOperation, format!("strftime_now: invalid format {format:?}")))?;
        Ok(out)
    });
    env
}

impl ChatTemplate {
    /// Compiles `source` (the `chat_template` of a `tokenizer_config.json`, or GGUF
    /// `tokenizer.chat_template`). `bos_token` / `eos_token` are passed to the template when set,
    /// as transformers passes only the special tokens a tokenizer defines.
    pub fn new(source: impl Into<String>, bos_token: Option<&str>, eos_token: Option<&str>) -> Result<Self> {
        let source = source.into();
        let mut env = hf_environment();
        env.add_template_owned(TEMPLATE_NAME, source.clone()).map_err(Error::ChatTemplate)?;
        Ok(ChatTemplate { env, source, bos_token: bos_token.map(str::to_string), eos_token: eos_token.map(str::to_string) })
    }

    /// Reads `chat_template`, `bos_token` and `eos_token` from a Hugging Face
    /// `tokenizer_config.json` (a template list picks the one named `default`; a token may be a
    /// string or an `{"content": ...}` object).
    pub fn from_tokenizer_config(path: &Path) -> Result<Self> {
        let err = |reason: String| Error::TokenizerConfig { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io { path: path.to_path_buf(), source: e })?;
        let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(format!("not valid JSON: {e}")))?;
        let source = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str())
                .ok_or_else(|| err("`chat_template` is a list without a template named \"default\"".into()))?
                .to_string(),
            Some(_) => return Err(err("`chat_template` is neither a string nor a list".into())),
            None => return Err(err("no `chat_template` key (a base model without a chat template?)".into())),
        };
        let token = |key: &str| -> Result<Option<String>> {
            match config.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                Some(obj) => match obj.get("content").and_then(|c| c.as_str()) {
                    Some(s) => Ok(Some(s.to_string())),
                    None => Err(err(format!("`{key}` is neither a string nor an object with `content`"))),
                },
            }
        };
        let (bos, eos) = (token("bos_token")?, token("eos_token")?);
        Self::new(source, bos.as_deref(), eos.as_deref())
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The beginning-of-sequence token, if the tokenizer has one.
    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    /// The end-of-sequence token, if the tokenizer has one.
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends where the assistant's reply
    /// begins. No tools.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with_tools(messages, None::<&()>, add_generation_prompt)
    }

    /// Renders any serialisable `messages` (OpenAI shape, e.g. with `tool_calls`) and `tools`
    /// (a list of function schemas; `None` is Python's `tools=None`).
    pub fn render_with_tools<M, T>(&self, messages: &M, tools: Option<&T>, add_generation_prompt: bool) -> Result<String>
    where
        M: Serialize + ?Sized,
        T: Serialize + ?Sized,
    {
        let template = self.env.get_template(TEMPLATE_NAME).map_err(Error::ChatTemplate)?;
        let tools = tools.map_or(Value::from(()), |t| Value::from(Serde(t)));
        let ctx = context! {
            messages => Value::from(Serde(messages)),
            tools => tools,
            documents => Value::from(()),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_deref().map_or(Value::UNDEFINED, Value::from),
            eos_token => self.eos_token.as_deref().map_or(Value::UNDEFINED, Value::from),
        };
        template.render(ctx).map_err(Error::ChatTemplate)
    }
}

/// Renders a conversation for supervised fine-tuning and returns the rendered text with the byte
/// ranges of the assistant turns, the part the loss is computed on.
///
/// The spans come from rendering, never from searching the text: for each assistant message `i`,
/// the conversation before it is rendered with the generation prompt (where the reply starts), and
/// the conversation through it without (where the turn ends). Both renderings must be prefixes of
/// the full one, or [`Error::NotPrefixStable`] is returned. Each span covers the reply and the
/// end-of-turn marker the template writes after it (`<|im_end|>`: the model must learn to stop),
/// but not the whitespace that follows the marker, which the model never generates because it
/// stops at the marker.
pub fn render_for_training(template: &ChatTemplate, messages: &[ChatMessage]) -> Result<(String, Vec<Range<usize>>)> {
    let full = template.render(messages, false)?;
    let mut spans = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        if message.role != ChatRole::Assistant {
            continue;
        }
        let before = template.render(&messages[..i], true)?;
        let through = if i + 1 == messages.len() { full.clone() } else { template.render(&messages[..=i], false)? };
        let not_prefix = |what: &str, of: &str| Error::NotPrefixStable { index: i, detail: format!("{what} is not a prefix of {of}") };
        if !through.starts_with(&before) {
            return Err(not_prefix("the rendering before the reply (with generation prompt)", "the rendering through it"));
        }
        if !full.starts_with(&through) {
            return Err(not_prefix("the rendering through the reply", "the full rendering"));
        }
        let end = before.len() + through[before.len()..].trim_end().len();
        if end > before.len() {
            spans.push(before.len()..end);
        }
    }
    Ok((full, spans))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render_str(source: &str) -> Result<String> {
        ChatTemplate::new(source, Some("<s>"), None)?.render(&[ChatMessage::user("hi")], false)
    }

    #[test]
    fn raise_exception_fails_the_render_with_its_message() {
        let err = render_str("{% if messages[0].role == 'user' %}{{ raise_exception('Only system first!') }}{% endif %}").unwrap_err();
        assert!(err.to_string().contains("Only system first!"), "{err}");
    }

    #[test]
    fn strftime_now_formats_the_current_date() {
        let out = render_str("{{ strftime_now('%Y') }}").unwrap();
        assert_eq!(out, chrono::Local::now().format("%Y").to_string());
    }

    #[test]
    fn unset_special_tokens_are_undefined_and_set_ones_are_strings() {
        assert_eq!(render_str("{{ bos_token }}|{{ eos_token is defined }}").unwrap(), "<s>|False");
    }

    #[test]
    fn templates_named_html_are_not_escaped_either() {
        let t = ChatTemplate::new("{{ messages[0].content }}", None, None).unwrap();
        assert_eq!(t.render(&[ChatMessage::user("<&>")], false).unwrap(), "<&>");
    }

    #[test]
    fn tojson_rejects_double_arguments_and_unknown_keywords() {
        assert!(render_str("{{ 1 | tojson(false, 2, indent=2) }}").is_err());
        assert!(render_str("{{ 1 | tojson(spaces=2) }}").is_err());
        assert_eq!(render_str("{{ [1, 'a'] | tojson(false, none, (',', ':')) }}").unwrap(), "[1,\"a\"]");
    }

    #[test]
    fn a_template_that_rewrites_earlier_turns_is_rejected_for_training() {
        // Drops every assistant turn except the last one, like reasoning-stripping templates.
        let source = "{% for m in messages %}{% if m.role != 'assistant' or loop.last %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
        let t = ChatTemplate::new(source, None, None).unwrap();
        let messages = [ChatMessage::user("a"), ChatMessage::assistant("b"), ChatMessage::user("c"), ChatMessage::assistant("d")];
        assert!(matches!(render_for_training(&t, &messages), Err(Error::NotPrefixStable { index: 1, .. })));
    }
}
