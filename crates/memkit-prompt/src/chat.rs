//! Chat messages in the OpenAI shape, shared by the teacher, training and inference crates.

use serde::{Deserialize, Serialize};

/// Who speaks a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    /// Instructions.
    System,
    /// The request.
    User,
    /// The model's reply.
    Assistant,
    /// A tool result.
    Tool,
}

impl ChatRole {
    /// The lowercase name used in JSON and chat templates.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatRole::System => "system",
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
            ChatRole::Tool => "tool",
        }
    }
}

/// One chat message, `{"role": "user", "content": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: ChatRole,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message with this role and text.
    pub fn new(role: ChatRole, content: impl Into<String>) -> Self {
        ChatMessage { role, content: content.into() }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(ChatRole::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(ChatRole::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(ChatRole::Assistant, content)
    }
}

/// A rendered prompt: one system and one user message.
///
/// The system message holds the instructions only, never window data, so it is the same for
/// every request of a run and an inference engine can compute it once (prefix reuse).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatMessages {
    /// The instructions.
    pub system: String,
    /// The request (the window, question, records...).
    pub user: String,
}

impl ChatMessages {
    /// `[system, user]`: what a model is asked.
    pub fn to_messages(&self) -> Vec<ChatMessage> {
        vec![ChatMessage::system(self.system.clone()), ChatMessage::user(self.user.clone())]
    }

    /// `[system, user, assistant]`: a training example with `reply` as the target.
    pub fn with_reply(&self, reply: impl Into<String>) -> Vec<ChatMessage> {
        let mut messages = self.to_messages();
        messages.push(ChatMessage::assistant(reply));
        messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_serialise_in_the_openai_shape() {
        let m = ChatMessage::user("hi");
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"role":"user","content":"hi"}"#);
        let back: ChatMessage = serde_json::from_str(r#"{"role":"assistant","content":"x"}"#).unwrap();
        assert_eq!(back, ChatMessage::assistant("x"));
        assert!(serde_json::from_str::<ChatMessage>(r#"{"role":"narrator","content":"x"}"#).is_err());
    }

    #[test]
    fn a_training_example_appends_the_reply() {
        let p = ChatMessages { system: "s".into(), user: "u".into() };
        let roles: Vec<ChatRole> = p.with_reply("r").iter().map(|m| m.role).collect();
        assert_eq!(roles, [ChatRole::System, ChatRole::User, ChatRole::Assistant]);
    }
}
