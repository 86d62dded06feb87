//! How the teacher is asked about one window, and how its replies become the window's records
//! (SPEC §3: the teacher decomposes, the student does not).
//!
//! - [`Mode::Window`]: one request, the extraction prompt the student learns (`extract.j2`) and
//!   the extractor schema. For strong endpoint teachers.
//! - [`Mode::Decomposed`]: the window's new messages, minus those the [`prefilter`] skips, in
//!   groups of 1–3 (default 1); one request per group with the teacher prompt (`teach.j2`: the
//!   group's messages and the few messages before them as context), a schema that allows only
//!   the group's message numbers as `source_id` and no speaker (it is set from the source message
//!   by construction). The requests share the system turn, which a local teacher keeps cached,
//!   and are decoded in batches. The group replies are [`assemble`]d into one extraction of the
//!   window, in message order: the per-window target the student learns.
//!
//! Either way a reply whose records speak in the first person gets one [`repair_request`] that
//! names each problem, and a `time` that has an exact normalised form gets it
//! ([`memkit_text::time::normalise_time`], in record cleaning).

use memkit_clean::{Cleaner, DropReason};
use memkit_data::{Window, WindowMessage};
use memkit_infer::chat::ChatRequest;
use memkit_infer::reply::Usage;
use memkit_infer::{ExtractConfig, Extraction};
use memkit_prompt::{ChatMessage, Prompts};
use memkit_schema::{ExtractedMemory, Role};
use memkit_text::person::first_person;
use memkit_text::words::{is_filler, tokens};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::cache::request_key;
use crate::recipe::{GenerationSpec, LabellingSpec, Mode};
use crate::samples::verified;

/// One request of a window's labelling.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The message numbers the request asks records for.
    pub targets: Vec<u32>,
    /// The request.
    pub request: ChatRequest,
    /// Its cache key.
    pub key: String,
    /// The same request drawn at a temperature, with their cache keys (none for one greedy
    /// reply; see [`crate::samples`]).
    pub draws: Vec<(ChatRequest, String)>,
}

/// What the teacher is asked about a window.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// How.
    pub mode: Mode,
    /// New messages skipped by the prefilter (decomposed mode).
    pub skipped: Vec<u32>,
    /// The requests, in message order.
    pub asks: Vec<Ask>,
}

/// Plans the requests for `window`.
pub fn plan(
    window: &Window,
    mode: Mode,
    labelling: &LabellingSpec,
    generation: &GenerationSpec,
    prompts: &Prompts,
    model_id: &str,
) -> Result<Plan> {
    let config = generation.extract_config();
    let ask = |targets: Vec<u32>, messages: Vec<ChatMessage>, schema: serde_json::Value| {
        let request =
            ChatRequest { avoid_repeats: labelling.avoid_repeats, ..ChatRequest::new(messages, config.max_tokens).with_schema(schema) };
        let draws = labelling
            .samples
            .draws(&request)
            .into_iter()
            .map(|draw| {
                let key = request_key(model_id, &draw, generation);
                (draw, key)
            })
            .collect();
        Ask { targets, key: request_key(model_id, &request, generation), request, draws }
    };
    match mode {
        Mode::Window => {
            let messages = prompts.render_extract(window, &config.prompt_options())?.to_messages();
            let targets = window.suffix().iter().map(|m| m.number).collect();
            Ok(Plan { mode, skipped: Vec::new(), asks: vec![ask(targets, messages, config.json_schema())] })
        }
        Mode::Decomposed => {
            let speakers: Vec<String> = window.messages.iter().flat_map(|m| tokens(&m.turn.speaker)).collect();
            let (kept, skipped): (Vec<&WindowMessage>, Vec<&WindowMessage>) = window
                .suffix()
                .iter()
                .filter(|m| m.turn.role != Role::Assistant)
                .partition(|m| !labelling.prefilter || !prefilter(m, &speakers));
            let mut asks = Vec::new();
            for group in kept.chunks(labelling.group.max(1)) {
                let targets: Vec<u32> = group.iter().map(|m| m.number).collect();
                let mut options = config.prompt_options();
                options.max_memories = options.max_memories.min(MAX_RECORDS_PER_MESSAGE * group.len());
                let messages = prompts.render_teach(window, &targets, labelling.context, &options)?.to_messages();
                asks.push(ask(targets, messages, group_schema(&config, group)));
            }
            Ok(Plan { mode, skipped: skipped.iter().map(|m| m.number).collect(), asks })
        }
    }
}

/// Records per message a decomposed request may return. The gold set has 1–3 records for 91% of
/// the messages that have any; with a higher cap the 1.5B teacher fills it with restatements.
pub const MAX_RECORDS_PER_MESSAGE: usize = 3;

/// Characters of a decomposed request's record content: one short sentence, never the message
/// copied whole.
pub const MAX_TEACHER_CONTENT_CHARS: usize = 200;

/// The extractor schema narrowed to one group: `source_id` one of the group's numbers and no
/// `source_speaker` (it follows from the source), at most [`MAX_RECORDS_PER_MESSAGE`] records per
/// message, contents of at most [`MAX_TEACHER_CONTENT_CHARS`].
fn group_schema(config: &ExtractConfig, group: &[&WindowMessage]) -> serde_json::Value {
    let mut schema = config.json_schema();
    let memories = &mut schema["properties"]["memories"];
    let cap = config.schema.max_memories.min(MAX_RECORDS_PER_MESSAGE * group.len());
    memories["maxItems"] = cap.into();
    let item = &mut memories["items"];
    item["properties"]["source_id"] = serde_json::json!({ "enum": group.iter().map(|m| m.number).collect::<Vec<_>>() });
    item["properties"]["content"]["maxLength"] = config.schema.max_content_chars.min(MAX_TEACHER_CONTENT_CHARS).into();
    if let Some(properties) = item["properties"].as_object_mut() {
        properties.shift_remove("source_speaker");
    }
    if let Some(required) = item["required"].as_array_mut() {
        required.retain(|k| k != "source_speaker");
    }
    schema
}

/// Phatic words besides [`FILLER`](memkit_text::words::FILLER) (greetings, farewells, wishes,
/// laughter): a message made of these (and stop words) tells nothing to remember.
const PHATIC: &[&str] = &[
    "aw",
    "bye",
    "care",
    "cheers",
    "congrats",
    "congratulations",
    "day",
    "evening",
    "fantastic",
    "fun",
    "goodbye",
    "haha",
    "hahaha",
    "happy",
    "hear",
    "hello",
    "hope",
    "lovely",
    "luck",
    "morning",
    "night",
    "no",
    "ok",
    "okay",
    "oh",
    "omg",
    "see",
    "soon",
    "sounds",
    "take",
    "talk",
    "thx",
    "ttyl",
    "wonderful",
    "yay",
    "yep",
    "yup",
];

/// Whether a message has nothing to remember: its words (photo caption aside: a caption alone
/// describes a picture, not a person) are at most 12, and all stop words, phatic words ("hi",
/// "thanks", "awesome", "good luck") or the names of the conversation's `speakers` (lowercase
/// tokens). A question or any other word keeps the message.
pub fn prefilter(message: &WindowMessage, speakers: &[String]) -> bool {
    if message.turn.text.contains('?') {
        return false;
    }
    // "that's" → "that", "s": contractions are stop words and a stray letter.
    let words = tokens(&message.turn.text.replace(['\'', '\u{2019}'], " "));
    words.len() <= 12
        && words.iter().all(|w| {
            w.len() == 1 || memkit_text::words::is_stop_word(w) || is_filler(w) || PHATIC.contains(&w.as_str()) || speakers.contains(w)
        })
}

/// Assembles the replies of a window's asks (in plan order) into one extraction: records in
/// message order, each group's speaker set from its message (decomposed mode), every error, the
/// usage summed, and the raw replies joined by a newline.
pub fn assemble(window: &Window, plan: &Plan, replies: &[(String, Usage)]) -> Extraction {
    let mut usage = Usage::default();
    let mut raw = Vec::with_capacity(replies.len());
    let mut records = Vec::new();
    let mut errors = Vec::new();
    for ((text, u), ask) in replies.iter().zip(&plan.asks) {
        usage.prompt_tokens += u.prompt_tokens;
        usage.completion_tokens += u.completion_tokens;
        usage.millis += u.millis;
        usage.hit_max_tokens |= u.hit_max_tokens;
        raw.push(text.as_str());
        let part = Extraction::from_output(window, text.clone(), *u);
        for mut record in part.records {
            if plan.mode == Mode::Decomposed
                && ask.targets.contains(&record.source_id)
                && let Some(message) = window.message(record.source_id)
            {
                record.source_speaker.clone_from(&message.turn.speaker);
            }
            records.push(record);
        }
        errors.extend(part.errors);
    }
    records.sort_by_key(|r| r.source_id);
    Extraction { window_id: window.id.clone(), records, errors, raw: raw.join("\n"), usage, grounding: Vec::new() }
}

/// One re-ask of a reply, with the problems it names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    /// The message numbers of the request that was repaired.
    pub targets: Vec<u32>,
    /// What was wrong, one line per record.
    pub problems: Vec<String>,
    /// Whether the second reply came back whole and without the problems (and replaced the first).
    pub fixed: bool,
    /// Whether cleaning had dropped every record of the first reply (the recipe's
    /// `repair_dropped`); a fixed reply then keeps at least one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_dropped: bool,
}

/// What a re-ask is for: the lines it names, and whether the reply kept nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    /// One line per record: what is wrong and what to write instead.
    pub lines: Vec<String>,
    /// Whether cleaning keeps none of the reply's records (checked only with a cleaner, on a
    /// whole reply; also true of a reply with no records).
    pub kept_nothing: bool,
}

/// The problems of a reply that a re-ask can fix: records in the first person, and records
/// about another speaker than the message's ([`memkit_clean::other_person`]). With `cleaner`
/// (the recipe's `repair_dropped`), also a whole reply with records of which cleaning keeps
/// none ([`crate::samples::verified`]): each record dropped for a fault of its wording (not
/// supported by the message, naming no one) gets a line. (Grounding sets `time` from the
/// message, so no time faults are left to name; duplicates and restated context are not faults.)
pub fn problems(window: &Window, reply: &str, cleaner: Option<&Cleaner>) -> Result<Problems> {
    let parsed = Extraction::from_output(window, reply.to_owned(), Usage::default());
    let name = |r: &ExtractedMemory| window.message(r.source_id).map_or(r.source_speaker.clone(), |m| m.turn.speaker.clone());
    let mut lines: Vec<String> = parsed
        .records
        .iter()
        .filter_map(|r| {
            let name = name(r);
            if first_person(&r.content) {
                Some(format!("\"{}\" speaks as the speaker: write it in the third person and name {name}.", r.content))
            } else {
                memkit_clean::other_person(window, r)
                    .map(|other| format!("\"{}\" is about {other}, but the message is {name}'s and does not mention {other}: write what it tells about {name}.", r.content))
            }
        })
        .collect();
    let Some(cleaner) = cleaner else { return Ok(Problems { lines, kept_nothing: false }) };
    let Some(cleaned) = verified(window, reply, cleaner)? else { return Ok(Problems { lines, kept_nothing: false }) };
    let kept_nothing = cleaned.records.is_empty();
    if kept_nothing {
        for dropped in &cleaned.dropped {
            let Ok(r) = serde_json::from_str::<ExtractedMemory>(&dropped.raw) else { continue };
            let (content, name) = (&r.content, name(&r));
            lines.push(match dropped.reason {
                DropReason::Unsupported => {
                    format!(
                        "\"{content}\" is not what {name}'s message says: write only what the message tells about {name}, in its words."
                    )
                }
                DropReason::Impersonal => format!("\"{content}\" names no one: write what it tells about {name}, naming {name}."),
                _ => continue,
            });
        }
    }
    Ok(Problems { lines, kept_nothing })
}

/// The follow-up request after `reply` to `ask`: the same chat, the reply, and `repair.j2`
/// listing `problems`.
pub fn repair_request(ask: &Ask, reply: &str, problems: &[String], prompts: &Prompts) -> Result<ChatRequest> {
    let mut request = ask.request.clone();
    request.messages.push(ChatMessage::assistant(reply.to_owned()));
    request.messages.push(ChatMessage::user(prompts.render_repair(problems)?));
    Ok(request)
}

#[cfg(test)]
mod tests {
    use memkit_data::WindowMessage;

    use super::*;

    fn window() -> Window {
        Window::of(
            "conv-30/w0",
            1,
            vec![
                WindowMessage::user(1, "Gina", "Hey Jon! Good to see you. What's up? Anything new?"),
                WindowMessage::user(
                    2,
                    "Jon",
                    "Hey Gina! Lost my job as a banker yesterday, so I'm gonna take a shot at starting my own business.",
                ),
                WindowMessage::user(3, "Gina", "Sorry about your job Jon, but starting your own business sounds awesome!"),
                WindowMessage::user(4, "Jon", "Thanks, Gina!"),
                WindowMessage::user(5, "Gina", "Wow, that's awesome! Good luck!"),
            ],
        )
    }

    #[test]
    fn first_person_records_and_records_about_the_other_speaker_are_listed_for_repair() {
        let record = |id: u32, speaker: &str, content: &str| {
            serde_json::json!({"source_id": id, "source_speaker": speaker, "content": content,
                "dimension": {"memory_type": "episodic", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
        };
        let reply = serde_json::json!({"memories": [
            // Jon's message names Gina: a record about her is his to give.
            record(2, "Jon", "Gina lost her job as a banker."),
            record(2, "Jon", "I am taking a shot at a business of my own."),
            // Gina's message names no one: a record about Jon is not hers.
            record(5, "Gina", "Jon started his own business."),
        ]})
        .to_string();
        let problems = problems(&window(), &reply, None).unwrap().lines;
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("speaks as the speaker") && problems[0].contains("name Jon"), "{problems:?}");
        assert!(problems[1].contains("is about Jon, but the message is Gina's"), "{problems:?}");
    }

    #[test]
    fn the_prefilter_skips_only_messages_with_nothing_to_remember() {
        // Real LoCoMo conv-30 turns (D1:1..3) and short reactions.
        let w = window();
        let speakers = ["gina".to_owned(), "jon".to_owned()];
        let skipped: Vec<bool> = w.messages.iter().map(|m| prefilter(m, &speakers)).collect();
        assert_eq!(skipped, [false, false, false, true, true]);
        // A bare photo turn: no words at all.
        let mut photo = WindowMessage::user(6, "Jon", "");
        photo.turn.caption = Some("a photo of a dance studio".into());
        assert!(prefilter(&photo, &speakers));
        assert!(!prefilter(&WindowMessage::user(7, "Jon", "Thanks! I got the keys to the studio today."), &speakers));
        assert!(!prefilter(&WindowMessage::user(8, "Jon", "Thanks, Mia!"), &speakers), "Mia is not a speaker: maybe someone to remember");
    }

    #[test]
    fn decomposed_requests_fix_the_source_by_schema() {
        let spec = LabellingSpec { mode: Some(Mode::Decomposed), group: 2, ..LabellingSpec::default() };
        let p = plan(&window(), Mode::Decomposed, &spec, &GenerationSpec::default(), &Prompts::embedded().unwrap(), "m").unwrap();
        // Suffix 2..=5; 4 and 5 skipped; groups of two: [2, 3].
        assert_eq!(p.skipped, [4, 5]);
        assert_eq!(p.asks.iter().map(|a| a.targets.clone()).collect::<Vec<_>>(), [vec![2, 3]]);
        let schema = p.asks[0].request.schema.as_ref().unwrap();
        let item = &schema["properties"]["memories"]["items"]["properties"];
        assert_eq!(item["source_id"], serde_json::json!({"enum": [2, 3]}));
        assert!(item.get("source_speaker").is_none(), "the speaker follows from the source");
        assert_eq!(schema["properties"]["memories"]["maxItems"], 6);
        assert_eq!(item["content"]["maxLength"], MAX_TEACHER_CONTENT_CHARS);
        let user = &p.asks[0].request.messages[1].content;
        assert!(user.starts_with("Earlier messages:\n1.Gina: Hey Jon!"), "{user}");
        assert!(user.contains("The messages:\n") && user.contains("2.Jon: Hey Gina!") && user.contains("3.Gina: Sorry"), "{user}");
    }

    #[test]
    fn group_replies_become_one_window_target_in_message_order() {
        let spec = LabellingSpec { mode: Some(Mode::Decomposed), group: 1, prefilter: false, ..LabellingSpec::default() };
        let w = window();
        let p = plan(&w, Mode::Decomposed, &spec, &GenerationSpec::default(), &Prompts::embedded().unwrap(), "m").unwrap();
        assert_eq!(p.asks.len(), 4);
        let rec = |id: u32, speaker: &str, content: &str| {
            serde_json::json!({"source_id": id, "source_speaker": speaker, "content": content,
                "dimension": {"memory_type": "episodic", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
        };
        let usage = Usage { prompt_tokens: 10, completion_tokens: 5, millis: 7, hit_max_tokens: false };
        let replies = [
            // Message 2's group: the speaker is set from the message (the reply said "Gina").
            (serde_json::json!({"memories": [rec(2, "Gina", "Jon lost his job as a banker."), rec(2, "Jon", "Jon plans to start a business.")]}).to_string(), usage),
            (serde_json::json!({"memories": [rec(3, "Gina", "Gina thinks Jon's business idea is awesome.")]}).to_string(), usage),
            (r#"{"memories":[]}"#.to_owned(), usage),
            (r#"{"memories":[]}"#.to_owned(), usage),
        ];
        let e = assemble(&w, &p, &replies);
        let got: Vec<(u32, &str)> = e.records.iter().map(|r| (r.source_id, r.source_speaker.as_str())).collect();
        assert_eq!(got, [(2, "Jon"), (2, "Jon"), (3, "Gina")]);
        assert_eq!((e.usage.prompt_tokens, e.usage.completion_tokens, e.usage.millis), (40, 20, 28));
        assert!(e.errors.is_empty());
        assert_eq!(e.raw.lines().count(), 4);
    }

    #[test]
    fn a_truncated_group_reply_makes_the_window_incomplete() {
        let spec = LabellingSpec { mode: Some(Mode::Decomposed), group: 3, prefilter: false, ..LabellingSpec::default() };
        let w = window();
        let p = plan(&w, Mode::Decomposed, &spec, &GenerationSpec::default(), &Prompts::embedded().unwrap(), "m").unwrap();
        let cut = Usage { hit_max_tokens: true, ..Usage::default() };
        let replies = [
            (r#"{"memories":[{"source_id":2,"source_speaker":"Jon","content":"Jon lost"#.to_owned(), cut),
            (r#"{"memories":[]}"#.to_owned(), Usage::default()),
        ];
        let e = assemble(&w, &p, &replies);
        assert!(e.errors.iter().any(|x| x.kind.is_whole_reply()), "{:?}", e.errors);
        assert!(e.usage.hit_max_tokens);
    }

    #[test]
    fn first_person_records_get_one_named_re_ask() {
        let w = window();
        let reply = r#"{"memories":[{"source_id":2,"source_speaker":"Jon","content":"I lost my job as a banker.","dimension":{"memory_type":"episodic","time":"","location":"","reason":"","purpose":"","keywords":[]}}]}"#;
        let found = problems(&w, reply, None).unwrap().lines;
        assert_eq!(found, ["\"I lost my job as a banker.\" speaks as the speaker: write it in the third person and name Jon."]);
        let spec = LabellingSpec::default();
        let prompts = Prompts::embedded().unwrap();
        let p = plan(&w, Mode::Decomposed, &spec, &GenerationSpec::default(), &prompts, "m").unwrap();
        let again = repair_request(&p.asks[0], reply, &found, &prompts).unwrap();
        assert_eq!(again.messages.len(), 4);
        assert_eq!(again.messages[2].content, reply);
        assert!(again.messages[3].content.contains("name Jon"));
    }

    #[test]
    fn a_reply_cleaning_keeps_nothing_of_is_re_asked_naming_each_fault_only_when_asked() {
        let w = window();
        // A decomposed reply: no speaker (assembly and the verifier take Jon's from message 2).
        let record = |content: &str| {
            serde_json::json!({"source_id": 2, "content": content,
                "dimension": {"memory_type": "episodic", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
        };
        // Nothing of message 2 speaks of a puppy (unsupported); the second record takes its
        // words from message 2 but names no one (impersonal).
        let failing = [record("Jon adopted a puppy named Rex."), record("A banker can take a shot at starting a business.")];
        let reply = serde_json::json!({ "memories": failing }).to_string();
        let cleaner = Cleaner::default();
        let found = problems(&w, &reply, Some(&cleaner)).unwrap();
        assert!(found.kept_nothing);
        assert_eq!(found.lines.len(), 2, "{found:?}");
        assert!(found.lines[0].starts_with("\"Jon adopted a puppy named Rex.\" is not what Jon's message says"), "{found:?}");
        assert!(found.lines[1].starts_with("\"A banker can take a shot at starting a business.\" names no one"), "{found:?}");
        // Without the setting, the reply has nothing a re-ask is for.
        assert_eq!(problems(&w, &reply, None).unwrap(), Problems::default());
        // One record that passes: the reply keeps something, no re-ask.
        let mut passing = failing.to_vec();
        passing.push(record("Jon lost his job as a banker."));
        let found = problems(&w, &serde_json::json!({ "memories": passing }).to_string(), Some(&cleaner)).unwrap();
        assert_eq!(found, Problems::default());
        // A reply with no records keeps nothing, but there is nothing to name.
        let found = problems(&w, r#"{"memories":[]}"#, Some(&cleaner)).unwrap();
        assert_eq!(found, Problems { lines: Vec::new(), kept_nothing: true });
    }
}
