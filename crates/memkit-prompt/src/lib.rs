//! The one source of prompt text in memkit.
//!
//! The teacher asks with these prompts, the student is trained on what they render, and
//! inference renders them again, so training text and run-time text cannot drift apart. Two
//! parts:
//!
//! - [`Prompts`]: the templates of `prompts/*.j2` (embedded at build time, overridable from a
//!   folder), one render function per prompt, each returning a system and a user message
//!   ([`ChatMessages`]): [`Prompts::render_extract`] (and
//!   [`render_window`](Prompts::render_window) for the student's short prompt),
//!   [`render_query`](Prompts::render_query),
//!   [`render_boundary`](Prompts::render_boundary), [`render_update`](Prompts::render_update),
//!   [`render_answer`](Prompts::render_answer), [`render_judge`](Prompts::render_judge). The
//!   replies they ask for parse into memkit-schema's `ExtractorOutput` / `ParsedQuery` or into
//!   [`Segmentation`], [`UpdateVerdict`], [`JudgeVerdict`].
//! - [`ChatTemplate`]: a model's Hugging Face chat template, rendered byte-identically to
//!   transformers (golden tests against Python jinja2 on the Qwen2.5 and SmolLM2 templates), and
//!   [`render_for_training`], which returns the byte spans of the assistant turns for the loss
//!   mask.
//!
//! ```
//! use memkit_data::{Window, WindowMessage};
//! use memkit_prompt::{ChatTemplate, ExtractOptions, Prompts, render_for_training};
//!
//! let ts = chrono::NaiveDate::from_ymd_opt(2023, 5, 8).unwrap().and_hms_opt(13, 56, 0).unwrap();
//! let message = |number: u32, speaker: &str, text: &str| {
//!     let mut message = WindowMessage::user(number, speaker, text).at(ts);
//!     message.turn.id = format!("D1:{number}");
//!     message
//! };
//! let window = Window {
//!     id: "demo/w1".into(),
//!     dialogue_id: "demo".into(),
//!     index: 1,
//!     context: 1,
//!     max_message_chars: 8000,
//!     messages: vec![message(1, "Ann", "I adopted a dog."), message(2, "Bo", "What's its name?"), message(3, "Ann", "Rex!")],
//! };
//!
//! let prompts = Prompts::embedded()?;
//! let prompt = prompts.render_extract(&window, &ExtractOptions::default())?;
//! assert!(prompt.user.starts_with("Messages 1-1 are context only"));
//! assert!(prompt.user.ends_with("3.Ann: Rex!"));
//!
//! // What the student is trained on: the prompt plus the teacher's reply, in the model's template.
//! let template = ChatTemplate::new(
//!     "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
//!      {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
//!     None,
//!     Some("<|im_end|>"),
//! )?;
//! let reply = r#"{"memories":[]}"#;
//! let (text, spans) = render_for_training(&template, &prompt.with_reply(reply))?;
//! assert_eq!(&text[spans[0].clone()], format!("{reply}<|im_end|>"));
//! # Ok::<(), memkit_prompt::Error>(())
//! ```
//!
//! # Features
//!
//! No optional features. minijinja runs with `loop_controls`, `preserve_order` and `serde`, plus
//! minijinja-contrib's `pycompat` (Python string and dict methods in templates).

mod chat;
mod chat_template;
mod error;
mod outputs;
mod prompts;
mod pyjson;
mod window;

pub use chat::{ChatMessage, ChatMessages, ChatRole};
pub use chat_template::{ChatTemplate, render_for_training};
pub use error::{Error, Result};
pub use memkit_schema::UpdateAction;
pub use outputs::{JudgeLabel, JudgeVerdict, SegmentRecord, Segmentation, UpdateVerdict};
pub use prompts::{AnswerMemory, ExtractOptions, GGUF_PROMPT_KEY, PromptName, Prompts, TRAINED_PROMPT_FILE};
pub use window::{GGUF_WINDOW_OVERLAP_KEY, GGUF_WINDOW_SIZE_KEY, TRAINED_WINDOW_FILE, TrainedWindow};
