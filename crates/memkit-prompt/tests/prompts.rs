//! The prompts of `prompts/`: snapshots of each one on a small window, and the contracts the
//! engine relies on (example replies parse into the output types, the system message does not
//! depend on the request, the overlap rule names the right messages, overrides).

use chrono::{NaiveDate, NaiveDateTime};
use memkit_data::{Dialogue, Role, Session, Turn, Window, WindowConfig, windows};
use memkit_prompt::{
    AnswerMemory, ChatMessages, ExtractOptions, JudgeVerdict, PromptName, Prompts, Segmentation, UpdateAction, UpdateVerdict,
};
use memkit_schema::{Dimensions, ExtractorOutput, MemoryRecord, MemoryType, ParsedQuery, Pointer};
use serde::Serialize;
use serde::de::DeserializeOwned;

fn at(day: u32, h: u32, m: u32) -> NaiveDateTime {
    NaiveDate::from_ymd_opt(2023, 5, day).unwrap().and_hms_opt(h, m, 0).unwrap()
}

/// Two short LoCoMo-style sessions, cut 5 per window with overlap 2.
fn fixture_windows() -> Vec<Window> {
    let turn =
        |id: &str, speaker: &str, text: &str, ts: NaiveDateTime| Turn { timestamp: Some(ts), ..Turn::new(id, speaker, Role::User, text) };
    let mut photo = turn("D1:4", "Ann", "Look at him!", at(8, 13, 57));
    photo.caption = Some("a photo of a small brown dog on a beach".into());
    let dialogue = Dialogue {
        id: "fixture".into(),
        sessions: vec![
            Session {
                id: "session_1".into(),
                date: Some(at(8, 13, 56)),
                turns: vec![
                    turn("D1:1", "Ann", "Hey Bo! Guess what, I adopted a dog yesterday.", at(8, 13, 56)),
                    turn("D1:2", "Bo", "No way! What's his name?", at(8, 13, 56)),
                    turn(
                        "D1:3",
                        "Ann",
                        "Rex. I got him from the shelter on Elm Street because\nI wanted company while working from home.",
                        at(8, 13, 57),
                    ),
                    photo,
                ],
            },
            Session {
                id: "session_2".into(),
                date: Some(at(20, 18, 30)),
                turns: vec![
                    turn("D2:1", "Bo", "How is Rex doing?", at(20, 18, 30)),
                    turn("D2:2", "Ann", "Great. We start puppy school next Saturday so he learns to walk on a leash.", at(20, 18, 30)),
                    turn("D2:3", "Bo", "I've always preferred cats, honestly.", at(20, 18, 31)),
                ],
            },
        ],
    };
    windows(&dialogue, &WindowConfig { size: 5, overlap: 2, ..WindowConfig::locomo() })
}

fn prompts() -> Prompts {
    Prompts::embedded().unwrap()
}

fn show(p: &ChatMessages) -> String {
    format!("=== system ===\n{}\n=== user ===\n{}\n", p.system, p.user)
}

fn record(content: &str, memory_type: MemoryType, time: &str, ts: &str, keywords: &[&str]) -> MemoryRecord {
    MemoryRecord {
        id: "r1".into(),
        content: content.into(),
        memory_type,
        dims: Dimensions { time: time.into(), keywords: keywords.iter().map(|k| k.to_string()).collect(), ..Default::default() },
        pointer: Pointer { window_id: "fixture/w0".into(), turn_ids: vec!["D1:1".into()], speaker: "Ann".into(), timestamp: ts.into() },
    }
}

#[test]
fn the_fixture_has_a_window_with_context() {
    let ws = fixture_windows();
    assert_eq!((ws.len(), ws[0].context, ws[1].context, ws[1].messages.len()), (2, 0, 2, 4));
}

#[test]
fn snapshot_extract_first_window() {
    let p = prompts().render_extract(&fixture_windows()[0], &ExtractOptions::default()).unwrap();
    insta::assert_snapshot!(show(&p));
}

#[test]
fn snapshot_extract_window_with_context() {
    let p = prompts().render_extract(&fixture_windows()[1], &ExtractOptions::default()).unwrap();
    insta::assert_snapshot!(p.user);
}

#[test]
fn snapshot_student_system() {
    let p = prompts().render_window(PromptName::Student, &fixture_windows()[1], &ExtractOptions::default()).unwrap();
    insta::assert_snapshot!(p.system);
}

#[test]
fn snapshot_teach_one_and_two_messages() {
    let w = &fixture_windows()[1];
    let one = prompts().render_teach(w, &[3], 3, &ExtractOptions::default()).unwrap();
    let two = prompts().render_teach(w, &[3, 4], 1, &ExtractOptions::default()).unwrap();
    insta::assert_snapshot!(format!("{}\n\n=== two messages, one of context ===\n\n{}", show(&one), two.user));
}

#[test]
fn teach_shows_the_targets_and_only_the_messages_just_before() {
    let prompts = prompts();
    let w = &fixture_windows()[1];
    let options = ExtractOptions::default();
    let a = prompts.render_teach(w, &[3], 1, &options).unwrap();
    assert_eq!(a.system, prompts.render_teach(&fixture_windows()[0], &[1], 3, &options).unwrap().system);
    assert_eq!(
        a.user,
        format!(
            "Earlier messages:\n{}\nThe message, from Ann:\n{}\nRecords (at most 12):",
            w.messages[1].render_line(8000),
            w.messages[2].render_line(8000)
        )
    );
    // The first message of a window has no earlier messages.
    let first = prompts.render_teach(&fixture_windows()[0], &[1], 3, &options).unwrap();
    assert!(first.user.starts_with("The message, from "), "{}", first.user);
}

#[test]
fn the_repair_lists_each_problem() {
    let problems = ["\"I love tea.\" speaks as the speaker: name the person.".to_owned(), "second".to_owned()];
    let repair = prompts().render_repair(&problems).unwrap();
    assert_eq!(
        repair,
        "Some records were rejected:\n- \"I love tea.\" speaks as the speaker: name the person.\n- second\nWrite all the records again, fixed."
    );
}

#[test]
fn snapshot_query() {
    let p = prompts().render_query("What did you recommend for my dog's leash training last week?", Some(at(27, 9, 15))).unwrap();
    insta::assert_snapshot!(show(&p));
}

#[test]
fn snapshot_boundary() {
    let p = prompts().render_boundary(&fixture_windows()[1]).unwrap();
    insta::assert_snapshot!(show(&p));
}

#[test]
fn snapshot_update() {
    let old = record("Ann works at a bakery.", MemoryType::Fact, "2022", "2023-05-08T13:56:00", &["bakery", "job"]);
    let mut new = record("Ann works at a bank.", MemoryType::Fact, "2023-05", "2023-05-20T18:30:00", &["bank", "job"]);
    new.dims.reason = "better pay".into();
    let p = prompts().render_update(&old, &new).unwrap();
    insta::assert_snapshot!(show(&p));
}

#[test]
fn snapshot_answer() {
    let adopted = record("Ann adopted a dog named Rex on 2023-05-07.", MemoryType::Episodic, "2023-05-07", "2023-05-08T13:56:00", &["Rex"]);
    let memories = [
        AnswerMemory::from_record(&adopted).with_assistant_reply("Congratulations! Start with short walks."),
        AnswerMemory { content: "Bo: I've always preferred cats, honestly.".into(), said_on: "2023-05-20".into(), ..Default::default() },
    ];
    let p = prompts().render_answer("When did Ann adopt Rex?", Some(at(27, 9, 15)), &memories).unwrap();
    insta::assert_snapshot!(show(&p));
}

#[test]
fn snapshot_judge() {
    let p = prompts().render_judge("When did Ann adopt Rex?", "7 May 2023", "On May 7, 2023.").unwrap();
    insta::assert_snapshot!(show(&p));
}

#[test]
fn the_answer_prompt_says_when_nothing_was_retrieved() {
    let p = prompts().render_answer("Where does Bo live?", None, &[]).unwrap();
    assert!(p.user.contains("Memories:\n(none)\n"), "{}", p.user);
    assert!(p.user.contains("Question date: unknown"));
}

#[test]
fn the_overlap_rule_names_the_suffix() {
    let ws = fixture_windows();
    let p = prompts().render_extract(&ws[1], &ExtractOptions::default()).unwrap();
    assert!(p.user.starts_with("Messages 1-2 are context only: they were already processed. Write records only for messages 3-4."));
    let p0 = prompts().render_extract(&ws[0], &ExtractOptions::default()).unwrap();
    assert!(p0.user.starts_with("Write records for messages 1-5.\n\n"));
    // The window lines are exactly Window::render().
    assert!(p.user.ends_with(&format!("\n\n{}", ws[1].render())));
}

#[test]
fn system_messages_do_not_depend_on_the_request() {
    let ws = fixture_windows();
    let prompts = prompts();
    let options = ExtractOptions::default();
    assert_eq!(prompts.render_extract(&ws[0], &options).unwrap().system, prompts.render_extract(&ws[1], &options).unwrap().system);
    assert_eq!(prompts.render_boundary(&ws[0]).unwrap().system, prompts.render_boundary(&ws[1]).unwrap().system);
    assert_eq!(prompts.render_query("a?", None).unwrap().system, prompts.render_query("b?", Some(at(1, 0, 0))).unwrap().system);
    // The caps are part of the instructions.
    let small = ExtractOptions { max_memories: 3, max_keywords: 2 };
    let s = prompts.render_extract(&ws[0], &small).unwrap().system;
    assert!(s.contains("at most 3 records") && s.contains("at most 2 short noun phrases"), "{s}");
}

/// The last line of a system message that starts with `{`: the example reply.
fn example_reply(system: &str) -> &str {
    system.lines().rev().find(|l| l.starts_with('{')).expect("no example JSON line")
}

/// The example parses into `T` and serde writes it back byte for byte, so the prompt shows
/// exactly the shape the parser expects (every field, in order, nothing extra).
fn assert_example_is_exact<T: DeserializeOwned + Serialize>(prompt: &ChatMessages) -> T {
    let line = example_reply(&prompt.system);
    let parsed: T = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(serde_json::to_string(&parsed).unwrap(), line);
    parsed
}

#[test]
fn example_replies_are_exactly_the_output_types() {
    let p = prompts();
    let ws = fixture_windows();
    let extract: ExtractorOutput = assert_example_is_exact(&p.render_extract(&ws[0], &ExtractOptions::default()).unwrap());
    let types: Vec<MemoryType> = extract.memories.iter().map(|m| m.dimension.memory_type).collect();
    assert_eq!(types, [MemoryType::Episodic, MemoryType::Fact]);
    // The example's dimension values are valid (times parse as spans).
    for m in &extract.memories {
        assert!(m.dimension.time.is_empty() || m.dimension.time.parse::<memkit_schema::TimeSpan>().is_ok());
    }
    let query: ParsedQuery = assert_example_is_exact(&p.render_query("q", None).unwrap());
    assert!(query.time.is_some());
    let seg: Segmentation = assert_example_is_exact(&p.render_boundary(&ws[0]).unwrap());
    assert_eq!(seg.segments.len(), 2);
    let r = record("x", MemoryType::Fact, "", "", &[]);
    let update: UpdateVerdict = assert_example_is_exact(&p.render_update(&r, &r).unwrap());
    assert_eq!(update.decision, UpdateAction::Supersede);
    let _: JudgeVerdict = assert_example_is_exact(&p.render_judge("q", "g", "a").unwrap());
    // Every example reply of the teacher's prompt, the empty one too.
    let teach = p.render_teach(&ws[0], &[1], 3, &ExtractOptions::default()).unwrap();
    let examples: Vec<&str> = teach.system.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(examples.len(), 2, "{}", teach.system);
    for line in examples {
        let parsed: ExtractorOutput = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(serde_json::to_string(&parsed).unwrap(), line);
        for m in &parsed.memories {
            assert!(m.dimension.time.is_empty() || m.dimension.time.parse::<memkit_schema::TimeSpan>().is_ok());
        }
    }
}

#[test]
fn segments_become_hyperedges_with_turn_ids() {
    let ws = fixture_windows();
    let seg: Segmentation =
        serde_json::from_str(r#"{"segments":[{"start":3,"end":9,"boundary_reason":"time","persons":["Bo"],"description":"d"}]}"#).unwrap();
    let edge = seg.segments[0].clone().into_hyperedge("e1".into(), &ws[1]);
    assert_eq!(edge.turn_ids, ["D2:2", "D2:3"]);
    assert_eq!((edge.boundary_reason.as_str(), edge.persons.as_slice()), ("time", ["Bo".to_string()].as_slice()));
}

#[test]
fn a_folder_overrides_single_prompts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("judge.j2"), "{% block system %}Grade.{% endblock %}{% block user %}{{ answer }}{% endblock %}")
        .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
    let p = Prompts::from_dir(dir.path()).unwrap();
    let judged = p.render_judge("q", "g", " a ").unwrap();
    assert_eq!((judged.system.as_str(), judged.user.as_str()), ("Grade.", "a"));
    assert_eq!(p.source(PromptName::Extract), PromptName::Extract.embedded_source());

    std::fs::write(dir.path().join("extrakt.j2"), "").unwrap();
    let err = Prompts::from_dir(dir.path()).unwrap_err().to_string();
    assert!(err.contains("extrakt.j2") && err.contains("extract.j2"), "{err}");
}

#[test]
fn an_undefined_variable_in_a_prompt_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("query.j2"), "{% block system %}x{% endblock %}{% block user %}{{ questoin }}{% endblock %}").unwrap();
    let err = Prompts::from_dir(dir.path()).unwrap().render_query("q", None).unwrap_err().to_string();
    assert!(err.contains("query.j2"), "{err}");
}

#[test]
fn the_student_prompt_is_short_fixed_and_names_the_suffix() {
    let ws = fixture_windows();
    let p = prompts();
    let small = ExtractOptions { max_memories: 3, max_keywords: 2 };
    let student = p.render_window(PromptName::Student, &ws[1], &ExtractOptions::default()).unwrap();
    // One fixed system text: the caps are not in it, and no window is.
    assert_eq!(student.system, p.render_window(PromptName::Student, &ws[0], &small).unwrap().system);
    // The user message is extract.j2's: the same rule for context messages and the same lines.
    assert_eq!(student.user, p.render_extract(&ws[1], &ExtractOptions::default()).unwrap().user);
    // A fraction of the long instructions (counted in characters; tokens scale alike).
    let long = p.render_extract(&ws[1], &ExtractOptions::default()).unwrap().system;
    assert!(student.system.len() * 4 < long.len(), "{} vs {} characters", student.system.len(), long.len());
    // Only window prompts render windows.
    assert!(p.render_window(PromptName::Judge, &ws[0], &small).is_err());
}

#[test]
fn a_trained_prompt_replaces_the_extraction_prompt() {
    let ws = fixture_windows();
    let options = ExtractOptions::default();
    let trained = prompts().with_trained_prompt(PromptName::Student.embedded_source()).unwrap();
    assert_eq!(trained.render_extract(&ws[1], &options).unwrap(), prompts().render_window(PromptName::Student, &ws[1], &options).unwrap());
    assert_eq!(trained.source(PromptName::Extract), PromptName::Student.embedded_source());
    // The system message alone, as an Ollama Modelfile states it.
    assert_eq!(trained.extract_system(&options).unwrap(), trained.render_extract(&ws[0], &options).unwrap().system);
    // A broken template is an error when it is loaded, not when a window is asked.
    let err = prompts().with_trained_prompt("{% block system %}{% if %}{% endblock %}").unwrap_err().to_string();
    assert!(err.contains("extract.j2"), "{err}");
}
