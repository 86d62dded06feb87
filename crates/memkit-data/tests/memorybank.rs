//! MemoryBank loading against the counts in `shared/data/memorybank/SOURCE.md`.

mod common;

use memkit_data::{Role, WindowConfig, load_memorybank, windows};

#[test]
fn real_memorybank_matches_source_counts() {
    for file in ["memorybank/memory_bank_en.json", "memorybank/memory_bank_cn.json"] {
        let dialogues = load_memorybank(&common::shared(file)).unwrap();
        assert_eq!(dialogues.len(), 15, "{file}");
        let turns: usize = dialogues.iter().map(|d| d.len()).sum();
        assert_eq!(turns, 2 * 566, "{file}");
        for d in &dialogues {
            assert!(d.id.starts_with("memorybank/"));
            assert!(d.sessions.windows(2).all(|w| w[0].date < w[1].date), "{}", d.id);
            for s in &d.sessions {
                for (i, t) in s.turns.iter().enumerate() {
                    let want = if i % 2 == 0 { Role::User } else { Role::Assistant };
                    assert_eq!(t.role, want);
                    assert_eq!(t.id, format!("{}:{}", s.id, i + 1));
                }
            }
        }
    }
    let en = load_memorybank(&common::shared("memorybank/memory_bank_en.json")).unwrap();
    let emily = en.iter().find(|d| d.id == "memorybank/Emily").unwrap();
    let first = &emily.sessions[0];
    assert_eq!(first.id, "2023-04-27");
    assert_eq!(first.turns[0].speaker, "Emily");
    assert_eq!(first.turns[0].text, "Hello, my name is Emily. Nice to meet you.");
    assert_eq!(first.turns[1].speaker, "assistant");

    // In user-only windows every user message keeps its reply.
    let ws = windows(emily, &WindowConfig::longmemeval());
    assert!(ws.iter().flat_map(|w| w.suffix()).all(|m| m.assistant_reply.is_some()));
}
