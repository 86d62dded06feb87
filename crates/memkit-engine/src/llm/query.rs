//! DimMem's language-model query parser.
//!
//! [`LlmQueryParser`] fills a [`ParsedQuery`] from `prompts/query.j2`, decoded under
//! [`query_json_schema`] so that a complete reply always deserialises. A reply cut at its token
//! limit, or one that does not parse (a server that ignores the schema), falls back to the
//! [`RuleQueryParser`] for that question and is counted ([`ParserStats`]); a backend failure is
//! an error, never a silent fallback. What the model writes is checked where a rule can check
//! it: a time constraint stays only when the question names a time ([`ground_time`]), because
//! a 1.5B model copies the question's date into `time` for questions that ask *for* a time
//! (39% of LoCoMo conv-26's questions, `reports/locomo-llm-parser/`).
//!
//! ```no_run
//! # fn main() -> memkit_engine::Result<()> {
//! use std::sync::Arc;
//! use memkit_engine::llm::LlmQueryParser;
//! use memkit_engine::query::QueryParser;
//! use memkit_infer::chat::OpenAiChat;
//! use memkit_infer::openai::{OpenAiClient, OpenAiConfig};
//! let client = OpenAiClient::new(OpenAiConfig::new("http://127.0.0.1:8080/v1", "qwen2.5-coder-1.5b-instruct"));
//! let parser = LlmQueryParser::new(Arc::new(OpenAiChat::new(client, 4)))?;
//! let parsed = parser.parse_all(&[("Why did I cancel my trip to Rome last month?", None)])?;
//! println!("{:?} ({} fallbacks)", parsed[0].answer_dim, parser.stats().fallbacks);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use chrono::NaiveDateTime;
use memkit_infer::chat::{ChatModel, ChatRequest, Reply};
use memkit_schema::{ParsedQuery, query_json_schema};
use memkit_text::time::find_time;
use serde::Serialize;

use super::{Step, step_methods};
use crate::query::{QueryParser, RuleQueryParser};
use crate::{Error, Result};

/// How an [`LlmQueryParser`] has fared so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ParserStats {
    /// Questions put to the model.
    pub asked: usize,
    /// Of those, parsed by the rule parser instead: the reply was cut off or did not parse.
    pub fallbacks: usize,
    /// Time constraints dropped because the question names no time ([`ground_time`]).
    pub times_dropped: usize,
}

/// DimMem's query parser: a chat model reads the question and its date through `query.j2`.
pub struct LlmQueryParser {
    step: Step<ParserStats>,
    grounded_time: bool,
}

impl LlmQueryParser {
    /// Most tokens of one reply by default: room for a long anchor and eight keywords.
    pub const DEFAULT_MAX_TOKENS: usize = 200;

    /// A parser asking `model` with the embedded prompts.
    pub fn new(model: Arc<dyn ChatModel>) -> Result<Self> {
        Ok(Self { step: Step::new(model, Self::DEFAULT_MAX_TOKENS)?, grounded_time: true })
    }

    /// Whether a time constraint must be named in the question to stay ([`ground_time`]; on by
    /// default). Off gives the model's parse as it came.
    #[must_use]
    pub fn with_grounded_time(mut self, on: bool) -> Self {
        self.grounded_time = on;
        self
    }

    step_methods!(ParserStats);

    fn request(&self, question: &str, date: Option<NaiveDateTime>) -> Result<ChatRequest> {
        let messages = self.step.prompts.render_query(question, date).map_err(|e| Error::Prompt(e.to_string()))?.to_messages();
        Ok(ChatRequest::new(messages, self.step.max_tokens).with_schema(query_json_schema()))
    }
}

/// Drops `parsed.time` unless the question names a time (an expression memkit-text's
/// `find_time` finds, relative ones included: "last week", "in May 2023", "before 8 May");
/// returns whether it dropped one. A question that asks *for* a time ("When did …?") names none,
/// and neither does one with no time at all.
pub fn ground_time(parsed: &mut ParsedQuery, question: &str, question_date: Option<NaiveDateTime>) -> bool {
    if parsed.time.is_some() && find_time(question, question_date.map(|d| d.date())).is_none() {
        parsed.time = None;
        return true;
    }
    false
}

/// The parsed query a reply holds, or `None` when it was cut at its token limit, is not a
/// [`ParsedQuery`], or has an empty anchor.
pub fn decode_query(reply: &Reply) -> Option<ParsedQuery> {
    if reply.usage.hit_max_tokens {
        return None;
    }
    let parsed: ParsedQuery = serde_json::from_str(reply.text.trim()).ok()?;
    (!parsed.query_anchor.trim().is_empty()).then_some(parsed)
}

impl QueryParser for LlmQueryParser {
    fn parse(&self, question: &str, question_date: Option<NaiveDateTime>) -> Result<ParsedQuery> {
        Ok(self.parse_all(&[(question, question_date)])?.remove(0))
    }

    /// Asks in groups of the model's [`ChatModel::parallel`] requests.
    fn parse_all(&self, questions: &[(&str, Option<NaiveDateTime>)]) -> Result<Vec<ParsedQuery>> {
        let requests = questions.iter().map(|(q, d)| self.request(q, *d)).collect::<Result<Vec<_>>>()?;
        let replies = self.step.ask(&requests)?;
        let mut out = Vec::with_capacity(questions.len());
        for (&(question, date), reply) in questions.iter().zip(replies) {
            self.step.count(|s| s.asked += 1);
            match decode_query(&reply) {
                Some(mut parsed) => {
                    if self.grounded_time && ground_time(&mut parsed, question, date) {
                        self.step.count(|s| s.times_dropped += 1);
                    }
                    out.push(parsed);
                }
                None => {
                    self.step.count(|s| s.fallbacks += 1);
                    tracing::debug!(question, reply = %reply.text, cut = reply.usage.hit_max_tokens, "query reply unusable, rule parser used");
                    out.push(RuleQueryParser.parse(question, date)?);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use memkit_infer::reply::Usage;
    use memkit_schema::{AnswerDim, MemoryType};

    use super::*;
    use crate::llm::scripted::Scripted;

    const GOOD: &str = r#"{"query_anchor":"the reason the user cancelled the trip to Rome","need_assistant_context":false,"target_memory_type":["episodic"],"keywords":["trip","Rome"],"time":"on 2023-06","location":"Rome","answer_dim":"reason"}"#;

    #[test]
    fn a_complete_reply_is_the_parse_and_a_cut_or_broken_one_falls_back_to_the_rules() {
        let date = chrono::NaiveDate::from_ymd_opt(2023, 7, 10).unwrap().and_hms_opt(9, 0, 0);
        let questions = [
            ("Why did I cancel my trip to Rome last month?", date),
            ("Where did I go hiking last week?", date),
            ("What did you recommend for dinner?", None),
        ];
        // The second reply stopped at the token limit; the third is not JSON.
        let model = Scripted::new(&[(GOOD, false), (&GOOD[..GOOD.len() - 1], true), ("Sure! Here is the JSON.", false)]);
        let parser = LlmQueryParser::new(model.clone()).unwrap();
        let parsed = parser.parse_all(&questions).unwrap();

        assert_eq!(parsed[0].query_anchor, "the reason the user cancelled the trip to Rome");
        assert_eq!(parsed[0].answer_dim, AnswerDim::Reason);
        assert_eq!(parsed[0].target_memory_type, [MemoryType::Episodic]);
        assert_eq!(parsed[0].time.unwrap().to_string(), "on 2023-06");
        assert_eq!(parsed[0].location, "Rome");
        for (i, (question, date)) in questions.iter().enumerate().skip(1) {
            assert_eq!(parsed[i], RuleQueryParser.parse(question, *date).unwrap(), "{question}");
        }
        assert_eq!(parser.stats(), ParserStats { asked: 3, fallbacks: 2, times_dropped: 0 });

        // Every request is query.j2 for its question, under the query schema.
        let asked = model.asked.lock().unwrap();
        assert_eq!(asked.len(), 3);
        for (request, (question, _)) in asked.iter().zip(&questions) {
            assert!(request.messages[1].content.contains(question), "{:?}", request.messages[1]);
            assert_eq!(request.schema.as_ref(), Some(&query_json_schema()));
            assert_eq!(request.max_tokens, LlmQueryParser::DEFAULT_MAX_TOKENS);
        }
        assert!(asked[0].messages[1].content.contains("2023-07-10"));
    }

    /// The model's time stays when the question names one, and goes when it asks for one.
    #[test]
    fn a_time_the_question_does_not_name_is_dropped() {
        let date = chrono::NaiveDate::from_ymd_opt(2023, 10, 22).unwrap().and_hms_opt(9, 0, 0);
        let copied = GOOD.replace("on 2023-06", "on 2023-10-22");
        let model = Scripted::new(&[(GOOD, false), (&copied, false), (&copied, false)]);
        let questions =
            [("Why did I cancel my trip to Rome last month?", date), ("When did I go to Rome?", date), ("When did I go to Rome?", date)];
        let parser = LlmQueryParser::new(model.clone()).unwrap();
        let parsed = parser.parse_all(&questions[..2]).unwrap();
        assert_eq!(parsed[0].time.unwrap().to_string(), "on 2023-06", "\"last month\" is a time the question names");
        assert_eq!(parsed[1].time, None, "\"When did …?\" names no time");
        assert_eq!(parser.stats(), ParserStats { asked: 2, fallbacks: 0, times_dropped: 1 });
        let as_parsed = LlmQueryParser::new(model).unwrap().with_grounded_time(false);
        assert_eq!(as_parsed.parse_all(&questions[2..]).unwrap()[0].time.unwrap().to_string(), "on 2023-10-22");
    }

    #[test]
    fn an_empty_anchor_is_no_parse() {
        let empty = GOOD.replace("the reason the user cancelled the trip to Rome", " ");
        let reply = |text: &str| Reply { text: text.to_owned(), usage: Usage::default() };
        assert!(decode_query(&reply(GOOD)).is_some());
        assert_eq!(decode_query(&reply(&empty)), None);
        assert_eq!(decode_query(&reply(&GOOD.replace("on 2023-06", "last month"))), None);
    }
}
