//! Each system's units over one dialogue, and their ranking for a question.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use memkit_data::LocomoSample;
use memkit_engine::bm25::Bm25Index;
use memkit_engine::dense::{DenseIndex, Embedder};
use memkit_engine::fusion::TriPath;
use memkit_engine::hinge::{HingeIndex, Part, RuleSegmenter, Segmenter};
use memkit_engine::llm::{LlmConsolidator, LlmSegmenter};
use memkit_engine::reading::{Sentences, dated};
use memkit_engine::recall::{RecallStats, replies_for, reply_text};
use memkit_engine::rule_extractor::{RuleExtractor, RuleExtractorConfig, raw_turn_records};
use memkit_engine::stopping::{StopConfig, adaptive_stop, classify_query};
use memkit_engine::store::{AssistantReply, MemoryStore, SqliteStore};
use memkit_engine::update::{Consolidator, RuleConsolidator, UpdateConfig, UpdateStats, update};
use memkit_engine::{Hit, Retriever};
use memkit_prompt::AnswerMemory;
use memkit_schema::{Dialogue, MemoryRecord, ParsedQuery};

use crate::pointers::{PointerTally, check_pointers};
use crate::recipe::{BoundaryKind, Reading, RecordSource, SystemSpec, UpdateKind};
use crate::{Error, Result, TokenCounter};

/// A retrieved unit: the text the answer model would read and the turns it points to.
pub(super) struct Unit {
    pub(super) text: String,
    pub(super) turn_ids: Vec<String>,
    pub(super) tokens: OnceCell<usize>,
    /// What the answer prompt shows for it.
    pub(super) memory: AnswerMemory,
}

impl Unit {
    pub(super) fn new(text: String, turn_ids: Vec<String>) -> Self {
        let memory = AnswerMemory { content: text.clone(), ..AnswerMemory::default() };
        Unit { text, turn_ids, tokens: OnceCell::new(), memory }
    }

    pub(super) fn from_record(r: &MemoryRecord) -> Self {
        Unit { memory: AnswerMemory::from_record(r), ..Unit::new(dated(r), r.pointer.turn_ids.clone()) }
    }

    /// The turns `r` points at, as raw turns read them (`[day] Speaker: text`, joined by new
    /// lines), with the record's resolved time for the answer prompt. A turn id the dialogue
    /// lacks is left out (pointer checks count it).
    pub(super) fn from_source(r: &MemoryRecord, turns: &HashMap<String, MemoryRecord>) -> Self {
        let sources: Vec<&MemoryRecord> = r.pointer.turn_ids.iter().filter_map(|t| turns.get(t)).collect();
        let Some(first) = sources.first() else { return Unit::from_record(r) };
        let text = sources.iter().map(|t| Unit::from_record(t).text).collect::<Vec<_>>().join("\n");
        let mut memory = AnswerMemory::from_record(first);
        memory.content = sources.iter().map(|t| t.content.as_str()).collect::<Vec<_>>().join("\n");
        memory.time = r.dims.time.clone();
        Unit { memory, ..Unit::new(text, r.pointer.turn_ids.clone()) }
    }

    /// `r` read as the rule sentence it points at ([`Sentences::sentence_for`]), with the
    /// record's resolved time for the answer prompt; `r` itself when it points at none.
    pub(super) fn from_sentence(r: &MemoryRecord, sentences: &Sentences) -> Self {
        match sentences.sentence_for(r) {
            Some(sentence) => {
                let mut unit = Unit::from_record(sentence);
                unit.memory.time = r.dims.time.clone();
                unit
            }
            None => Unit::from_record(r),
        }
    }

    pub(super) fn tokens(&self, counter: &TokenCounter) -> usize {
        *self.tokens.get_or_init(|| counter.count(&self.text))
    }
}

pub(super) enum Ranker {
    Chronological,
    Bm25(Bm25Index),
    Engine {
        tri: Box<TriPath>,
        adaptive: bool,
        /// Units read what other units read too (turns, sentences): each is read once.
        once: Option<ReadOnce>,
    },
    /// Units are the hyperedges' descriptions (one per hyperedge, in order), then their member
    /// records.
    Hinge(Box<HingeIndex>),
}

/// What makes two units read the same thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReadOnce {
    /// Their turns: a unit whose turns were all read already is skipped.
    Turns,
    /// Their text: a unit whose text was read already is skipped.
    Text,
}

/// One system prepared over one dialogue.
pub(super) struct Prepared {
    pub(super) units: Vec<Unit>,
    pub(super) ranker: Ranker,
    /// Pointer checks of the records (systems over records other than raw turns).
    pub(super) pointers: Option<PointerTally>,
    /// Assistant recall, for systems that have it on.
    pub(super) recall: Option<Recall>,
    /// What the update did to the records, for systems that consolidate them.
    pub(super) update: Option<UpdateStats>,
}

/// A ranking for one question: unit indices best first, and where an adaptive stop cuts it.
pub(super) struct Ranking {
    pub(super) order: Vec<usize>,
    pub(super) stop: Option<usize>,
    /// What assistant recall did for this question (systems with `assistant_recall`).
    pub(super) recall: Option<RecallStats>,
}

impl Ranking {
    pub(super) fn new(order: Vec<usize>, stop: Option<usize>) -> Self {
        Ranking { order, stop, recall: None }
    }

    /// What the system returns: the whole ranking, or the list its adaptive stop keeps. The one
    /// rule of scoring: what a system returns is what is scored, counted and answered from.
    pub(super) fn returned(&self) -> &[usize] {
        &self.order[..self.stop.unwrap_or(self.order.len()).min(self.order.len())]
    }
}

/// Assistant recall over one dialogue: reply units, appended after the system's own units.
pub(super) struct Recall {
    /// User turn id → the reply that followed it.
    by_turn: HashMap<String, AssistantReply>,
    /// Reply turn id → its unit.
    unit_of: HashMap<String, usize>,
    /// Units from this index on are replies.
    pub(super) first_unit: usize,
}

impl Recall {
    /// Adds one unit per assistant reply of the dialogue to `units`.
    pub(super) fn new(dialogue: &Dialogue, units: &mut Vec<Unit>) -> Self {
        let (mut by_turn, mut unit_of, first_unit) = (HashMap::new(), HashMap::new(), units.len());
        for reply in AssistantReply::of_dialogue(dialogue) {
            unit_of.insert(reply.reply_turn_id.clone(), units.len());
            units.push(Unit::new(reply_text(&reply), vec![reply.reply_turn_id.clone()]));
            by_turn.insert(reply.turn_id.clone(), reply);
        }
        Recall { by_turn, unit_of, first_unit }
    }

    /// When the question asks what the assistant said (the query parser's cue rule), puts the
    /// reply that followed each ranked unit's source turns right after that unit (each reply
    /// once), so its tokens count against the budget; an adaptive stop moves with its units.
    pub(super) fn attach(&self, units: &[Unit], ranking: Ranking, parsed: &ParsedQuery) -> Result<Ranking> {
        let mut stats = RecallStats::default();
        // One dialogue per prepared system: its replies are looked up by turn id alone.
        let sources = ranking.order.iter().map(|&i| ("", units[i].turn_ids.as_slice()));
        let replies = replies_for(|_, turn| Ok(self.by_turn.get(turn).cloned()), parsed, sources, &mut stats)?;
        let mut order = Vec::with_capacity(ranking.order.len());
        let mut stop = ranking.stop;
        for (pos, (&i, attached)) in ranking.order.iter().zip(&replies).enumerate() {
            order.push(i);
            order.extend(attached.iter().map(|r| self.unit_of[&r.reply_turn_id]));
            if ranking.stop == Some(pos + 1) {
                stop = Some(order.len());
            }
        }
        Ok(Ranking { order, stop, recall: Some(stats) })
    }
}

impl Prepared {
    /// Ranks the units for `question`, which the system's query parser made into `parsed`.
    pub(super) fn rank(&self, question: &str, parsed: &ParsedQuery) -> Result<Ranking> {
        let ranking = self.rank_units(question, parsed)?;
        match &self.recall {
            Some(recall) => recall.attach(&self.units, ranking, parsed),
            None => Ok(ranking),
        }
    }

    fn rank_units(&self, question: &str, parsed: &ParsedQuery) -> Result<Ranking> {
        let hits_to = |hits: &[Hit]| hits.iter().map(|h| h.doc).collect::<Vec<_>>();
        Ok(match &self.ranker {
            Ranker::Chronological => Ranking::new((0..self.units.len()).collect(), None),
            Ranker::Bm25(index) => Ranking::new(hits_to(&index.search_text(question, self.units.len())), None),
            Ranker::Engine { tri, adaptive, once } => {
                let hits = tri.search(parsed, tri.fusion().cap())?;
                let ranking = if *adaptive {
                    // The adaptive stop keeps the best-scored hits of the fused list, in score
                    // order (the fused list itself is in concatenation order).
                    let kept = adaptive_stop(&hits, classify_query(question), &StopConfig::default());
                    Ranking::new(hits_to(&kept), Some(kept.len()))
                } else {
                    Ranking::new(hits_to(&hits), None)
                };
                match once {
                    Some(once) => read_once(&self.units, ranking, *once),
                    None => ranking,
                }
            }
            Ranker::Hinge(index) => {
                let reading = index.read(parsed, classify_query(question));
                let edges = index.hyperedges().len();
                let order = reading
                    .parts
                    .iter()
                    .map(|&part| match part {
                        Part::Description(e) => e,
                        Part::Member(r) => edges + r,
                    })
                    .collect();
                Ranking::new(order, Some(reading.opened_parts))
            }
        })
    }
}

/// A ranking without the units that read only what a better-ranked unit read already (`once`
/// says what: their turns or their text; the adaptive stop, if any, moves with the units it kept).
fn read_once(units: &[Unit], ranking: Ranking, once: ReadOnce) -> Ranking {
    let mut read = HashSet::new();
    let mut order = Vec::with_capacity(ranking.order.len());
    let mut stop = ranking.stop.map(|_| 0);
    for (pos, &i) in ranking.order.iter().enumerate() {
        // Every turn is marked read (no short circuit): a unit is fresh when any of them was new.
        let fresh = match once {
            ReadOnce::Turns => units[i].turn_ids.iter().filter(|t| read.insert(t.as_str())).count() > 0,
            ReadOnce::Text => read.insert(units[i].text.as_str()),
        };
        if fresh {
            order.push(i);
            if ranking.stop.is_some_and(|s| pos < s) {
                stop = Some(order.len());
            }
        }
    }
    Ranking { order, stop, recall: ranking.recall }
}

/// The records of every source, in the order the sources are named.
pub(super) fn records_of(
    sources: &[RecordSource],
    rule: RuleExtractorConfig,
    dialogue: &Dialogue,
    sample: Option<&LocomoSample>,
) -> Result<Vec<MemoryRecord>> {
    let mut records = Vec::new();
    for source in sources {
        records.extend(records_for(source, rule, dialogue, sample)?);
    }
    Ok(records)
}

fn records_for(
    source: &RecordSource,
    rule: RuleExtractorConfig,
    dialogue: &Dialogue,
    sample: Option<&LocomoSample>,
) -> Result<Vec<MemoryRecord>> {
    Ok(match source {
        RecordSource::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.clone(), source })?;
            let mut records = Vec::new();
            for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let record: MemoryRecord = serde_json::from_str(line)
                    .map_err(|e| Error::Dataset(format!("{}:{}: not a memory record: {e}", path.display(), i + 1)))?;
                if record.pointer.belongs_to(&dialogue.id) {
                    records.push(record);
                }
            }
            records
        }
        RecordSource::RawTurns => raw_turn_records(dialogue),
        RecordSource::Rule => RuleExtractor::new(rule).extract(dialogue),
        RecordSource::Observations => {
            LocomoSample::observation_records(sample.ok_or_else(|| Error::Dataset("observations exist only for LoCoMo".into()))?)
        }
    })
}

/// What preparing a system needs besides the system and the dialogue.
#[derive(Clone, Copy)]
pub(super) struct Tools<'a> {
    pub(super) embedder: Option<&'a Arc<dyn Embedder>>,
    pub(super) counter: &'a TokenCounter,
    /// The consolidator of systems with `update = "llm"`.
    pub(super) llm_update: Option<&'a LlmConsolidator>,
    /// The segmenter of HingeMem systems with `boundaries = "llm"`.
    pub(super) llm_boundaries: Option<&'a LlmSegmenter>,
}

/// The sentence embedder, or an error naming the system that needs it for `what`.
fn require_embedder<'a>(tools: &Tools<'a>, system: &SystemSpec, what: &str) -> Result<&'a Arc<dyn Embedder>> {
    tools
        .embedder
        .ok_or_else(|| Error::Dataset(format!("system {:?} {what}, but no embedder is installed (run `just models`)", system.name())))
}

/// The dialogue's records consolidated by DimMem's dimension-aware update (in record order, in
/// a store of their own), and what the update did.
fn consolidate(
    system: &SystemSpec,
    records: Vec<MemoryRecord>,
    kind: UpdateKind,
    tools: &Tools,
) -> Result<(Vec<MemoryRecord>, Option<UpdateStats>)> {
    let rules = RuleConsolidator::default();
    let consolidator: &dyn Consolidator = match kind {
        UpdateKind::None => return Ok((records, None)),
        UpdateKind::Rule => &rules,
        UpdateKind::Llm => tools.llm_update.ok_or_else(|| Error::Qa("update = \"llm\" needs the recipe's [update_model]".into()))?,
    };
    let embedder = require_embedder(tools, system, "consolidates its records (the update's cosine filter)")?;
    let mut store = SqliteStore::open_in_memory()?;
    let config = UpdateConfig { cache_embeddings: false, ..UpdateConfig::default() };
    let stats = update(&mut store, records, &**embedder, consolidator, &config)?;
    Ok((store.list_records()?, Some(stats)))
}

/// One system over one dialogue: its units (records, HingeMem parts, reply units for assistant
/// recall) and how it ranks them.
pub(super) fn prepare(system: &SystemSpec, dialogue: &Dialogue, sample: Option<&LocomoSample>, tools: Tools) -> Result<Prepared> {
    let counter = tools.counter;
    let mut prepared = match system {
        SystemSpec::FullContext { .. } => Prepared {
            units: raw_turn_records(dialogue).iter().map(Unit::from_record).collect(),
            ranker: Ranker::Chronological,
            pointers: None,
            recall: None,
            update: None,
        },
        SystemSpec::Bm25Turns { .. } | SystemSpec::Bm25Observations { .. } => {
            let source = if matches!(system, SystemSpec::Bm25Turns { .. }) { RecordSource::RawTurns } else { RecordSource::Observations };
            let records = records_for(&source, RuleExtractorConfig::default(), dialogue, sample)?;
            let index = Bm25Index::from_records(&records);
            let pointers = (source == RecordSource::Observations).then(|| check_pointers(dialogue, &records));
            Prepared {
                units: records.iter().map(Unit::from_record).collect(),
                ranker: Ranker::Bm25(index),
                pointers,
                recall: None,
                update: None,
            }
        }
        SystemSpec::Engine { records: sources, read, retrieval, adaptive_stop, rule_extractor, update, .. } => {
            let records = records_of(sources, *rule_extractor, dialogue, sample)?;
            // Pointers are the extractor's: checked before any merge joins two records' turns.
            let pointers = (sources[..] != [RecordSource::RawTurns]).then(|| check_pointers(dialogue, &records));
            let (records, update) = consolidate(system, records, *update, &tools)?;
            let mut tri = TriPath::new(&records, retrieval.clone())?;
            if retrieval.uses_dense() {
                let embedder = require_embedder(&tools, system, "has the dense route")?;
                let boxed: Box<dyn Embedder> = Box::new(Arc::clone(embedder));
                tri = tri.with_dense(DenseIndex::build(boxed, &records, 64)?)?;
            }
            let units = match read {
                Reading::Record => records.iter().map(Unit::from_record).collect(),
                Reading::Source => {
                    let turns: HashMap<String, MemoryRecord> =
                        raw_turn_records(dialogue).into_iter().map(|r| (r.pointer.turn_ids[0].clone(), r)).collect();
                    records.iter().map(|r| Unit::from_source(r, &turns)).collect()
                }
                Reading::Sentence => {
                    let sentences = Sentences::of(dialogue, *rule_extractor);
                    records.iter().map(|r| Unit::from_sentence(r, &sentences)).collect()
                }
            };
            let once = match read {
                Reading::Record => None,
                Reading::Source => Some(ReadOnce::Turns),
                Reading::Sentence => Some(ReadOnce::Text),
            };
            Prepared {
                units,
                ranker: Ranker::Engine { tri: Box::new(tri), adaptive: *adaptive_stop, once },
                pointers,
                recall: None,
                update,
            }
        }
        SystemSpec::Hinge { hinge, segmenter, records: sources, rule_extractor, embedding_topics, boundaries, .. } => {
            let records = records_of(sources, *rule_extractor, dialogue, sample)?;
            let pointers = (sources[..] != [RecordSource::RawTurns]).then(|| check_pointers(dialogue, &records));
            let mut rules = RuleSegmenter::new(*segmenter);
            if *embedding_topics {
                rules = rules.with_embedder(require_embedder(&tools, system, "finds topic shifts by embeddings")?);
            }
            let segmenter: &dyn Segmenter = match boundaries {
                BoundaryKind::Rule => &rules,
                BoundaryKind::Llm => {
                    tools.llm_boundaries.ok_or_else(|| Error::Qa("boundaries = \"llm\" needs the recipe's [boundary_model]".into()))?
                }
            };
            let index = HingeIndex::build(dialogue, &records, segmenter, *hinge, &|text| counter.count(text))?;
            let mut units: Vec<Unit> = index
                .hyperedges()
                .iter()
                .enumerate()
                .map(|(e, edge)| Unit::new(edge.description.clone(), index.part_turn_ids(Part::Description(e))))
                .collect();
            units.extend(index.records().iter().map(Unit::from_record));
            Prepared { units, ranker: Ranker::Hinge(Box::new(index)), pointers, recall: None, update: None }
        }
    };
    if system.assistant_recall() {
        prepared.recall = Some(Recall::new(dialogue, &mut prepared.units));
    }
    Ok(prepared)
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDateTime;
    use memkit_engine::query::{QueryParser, RuleQueryParser};

    use super::*;

    /// No embedder, no model.
    fn plain_tools(counter: &TokenCounter) -> Tools<'_> {
        Tools { embedder: None, counter, llm_update: None, llm_boundaries: None }
    }

    fn rank(prepared: &Prepared, question: &str, date: Option<NaiveDateTime>) -> Ranking {
        prepared.rank(question, &RuleQueryParser.parse(question, date).unwrap()).unwrap()
    }

    /// One session dated `date` of Ann's turns `D1:1`, `D1:2`, …, the i-th said at `at(i)`.
    fn ann_says(texts: &[&str], date: Option<NaiveDateTime>, at: impl Fn(usize) -> Option<NaiveDateTime>) -> Dialogue {
        use memkit_schema::{Role, Session, Turn};
        let turns = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Turn { timestamp: at(i), ..Turn::new(format!("D1:{}", i + 1), "Ann", Role::User, *t) })
            .collect();
        Dialogue { id: "d".into(), sessions: vec![Session { id: "session_1".into(), date, turns }] }
    }

    /// See: issue 18. The adaptive stop cuts the fused list by score; the units kept must be the
    /// best-scored hits, best first, not the first hits of the concatenated route lists.
    #[test]
    fn the_adaptive_stop_keeps_the_best_scored_hits_in_score_order() {
        let at = |d: u32| chrono::NaiveDate::from_ymd_opt(2023, 5, d).unwrap().and_hms_opt(10, 0, 0);
        let texts = [
            "I moved to Paris last week, the flat is tiny but I love it.",
            "Paris is lovely in May, we walked along the river.",
            "My sister visited me on Sunday and we cooked pasta.",
            "I started a new job at a bakery in May.",
            "The bakery opens at six so I get up at five.",
            "We went to the Louvre and saw the Mona Lisa.",
        ];
        let dialogue = ann_says(&texts, at(10), |i| at(10 + i as u32));
        let system: SystemSpec = toml::from_str("kind = \"engine\"\nname = \"x\"\nrecords = \"rule\"\nadaptive_stop = true").unwrap();
        let prepared = prepare(&system, &dialogue, None, plain_tools(&TokenCounter::o200k().unwrap())).unwrap();
        let question = "When did Ann move to Paris and start at the bakery?";
        let ranking = rank(&prepared, question, at(20));
        let Ranker::Engine { tri, .. } = &prepared.ranker else { panic!("an engine system") };
        let mut hits = tri.search(&RuleQueryParser.parse(question, at(20)).unwrap(), tri.fusion().cap()).unwrap();
        memkit_engine::stopping::sort_hits(&mut hits);
        let stop = ranking.stop.unwrap();
        assert!(stop >= 1 && stop <= hits.len());
        let best: Vec<usize> = hits[..stop].iter().map(|h| h.doc).collect();
        assert_eq!(ranking.order[..stop], best[..], "hits {hits:?}");
    }

    /// A unit whose turns were all read is skipped; one that adds a turn stays; an adaptive
    /// stop keeps the units it kept: four units, the second repeating the first's turn, stop
    /// after three → two kept before the stop.
    #[test]
    fn read_once_skips_units_whose_turns_were_read_and_moves_the_stop() {
        let unit = |turns: &[&str]| Unit::new(String::new(), turns.iter().map(|t| t.to_string()).collect());
        let units = [unit(&["a"]), unit(&["a"]), unit(&["a", "b"]), unit(&["c"])];
        let read = read_once(&units, Ranking::new(vec![0, 1, 2, 3], Some(3)), ReadOnce::Turns);
        assert_eq!(read.order, [0, 2, 3]);
        assert_eq!(read.stop, Some(2));
        let read = read_once(&units, Ranking::new(vec![1, 0, 3], None), ReadOnce::Turns);
        assert_eq!((read.order, read.stop), (vec![1, 3], None));
    }

    /// Two units with the same text read it once; units with other texts stay, whatever turns
    /// they share.
    #[test]
    fn read_once_by_text_skips_a_text_read_already() {
        let unit = |text: &str| Unit::new(text.into(), vec!["a".into()]);
        let units = [unit("x"), unit("x"), unit("y")];
        let read = read_once(&units, Ranking::new(vec![1, 0, 2], Some(2)), ReadOnce::Text);
        assert_eq!((read.order, read.stop), (vec![1, 2], Some(1)));
    }

    /// Sentence reading: a key reads the sentence it points at (memkit-engine's `reading` tests
    /// which), keeping its own resolved time; a key pointing at none reads itself.
    #[test]
    fn a_key_reads_its_sentence_with_its_own_time() {
        let at = chrono::NaiveDate::from_ymd_opt(2023, 5, 1).unwrap().and_hms_opt(10, 0, 0);
        let dialogue = ann_says(&["I adopted a puppy. Her name is Miso and she loves the beach.", "Work was busy today."], at, |_| at);
        let sentences = Sentences::of(&dialogue, RuleExtractorConfig::default());
        let miso = sentences.of_turn("D1:1").nth(1).unwrap();
        let mut key = raw_turn_records(&dialogue)[0].clone();
        key.content = "Ann's puppy Miso loves the beach".into();
        key.dims.time = "2023-04-29".into();
        let unit = Unit::from_sentence(&key, &sentences);
        assert_eq!(unit.text, Unit::from_record(miso).text);
        assert_eq!(unit.memory.time, "2023-04-29");
        key.content = "zebra crossing".into();
        assert_eq!(Unit::from_sentence(&key, &sentences).text, Unit::from_record(&key).text);
    }

    /// Records as keys, source as text: with rule sentences and raw turns indexed together and
    /// read as their source, each turn is read once, as the raw turn reads it, wherever its
    /// best key ranks; with the records read, the same index returns both copies.
    #[test]
    fn source_reading_reads_each_turn_once_as_the_raw_turn() {
        let at = chrono::NaiveDate::from_ymd_opt(2023, 5, 1).unwrap().and_hms_opt(10, 0, 0);
        let texts = ["I adopted a puppy. Her name is Miso and she loves the beach.", "Work was busy today.", "Miso chewed my shoes again!"];
        let dialogue = ann_says(&texts, at, |_| at);
        let spec = |read: &str| -> SystemSpec {
            toml::from_str(&format!(
                "kind = \"engine\"\nname = \"x\"\nrecords = [\"rule\", \"raw_turns\"]\nrule_extractor.per_sentence = true\nread = \"{read}\""
            ))
            .unwrap()
        };
        let counter = TokenCounter::o200k().unwrap();
        let source = prepare(&spec("source"), &dialogue, None, plain_tools(&counter)).unwrap();
        let records = prepare(&spec("record"), &dialogue, None, plain_tools(&counter)).unwrap();
        // Rule sentences of the three turns (two in the first), then the three raw turns.
        let raw = prepare(
            &toml::from_str("kind = \"engine\"\nname = \"t\"\nrecords = \"raw_turns\"").unwrap(),
            &dialogue,
            None,
            plain_tools(&counter),
        )
        .unwrap();
        assert_eq!(source.units.len(), records.units.len());
        assert!(source.units.len() > raw.units.len());
        for unit in &source.units {
            let turn = raw.units.iter().find(|u| u.turn_ids == unit.turn_ids).unwrap();
            assert_eq!(unit.text, turn.text);
        }
        let question = "What is the name of Ann's puppy Miso?";
        let read = rank(&source, question, None);
        let turns: Vec<&str> = read.order.iter().map(|&i| source.units[i].turn_ids[0].as_str()).collect();
        let mut distinct = turns.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(turns.len(), distinct.len(), "{turns:?}");
        assert_eq!(turns[0], "D1:1");
        assert!(turns.contains(&"D1:3"), "{turns:?}");
        let all = rank(&records, question, None);
        let first = all.order.iter().filter(|&&i| records.units[i].turn_ids == ["D1:1"]).count();
        assert!(first >= 2, "the sentence and the raw turn of D1:1 both come back: {:?}", all.order);
    }

    /// Assistant recall in eval: the reply that followed a retrieved user turn is read right
    /// after it, only when the question asks what the assistant said.
    #[test]
    fn assistant_recall_reads_the_reply_after_its_turn() {
        use memkit_schema::{Role, Session, Turn};
        let turn = |id: &str, role: Role, text: &str| Turn::new(id, if role == Role::User { "user" } else { "assistant" }, role, text);
        let turns = vec![
            turn("s:0", Role::User, "I need a new sci-fi novel to read on my trip."),
            turn("s:1", Role::Assistant, "Try The Left Hand of Darkness by Ursula K. Le Guin."),
            turn("s:2", Role::User, "My cat Miso knocked over a plant."),
            turn("s:3", Role::Assistant, "Cats love knocking things over."),
        ];
        let dialogue = Dialogue { id: "d".into(), sessions: vec![Session { id: "s".into(), date: None, turns }] };
        let spec = |recall: bool| -> SystemSpec {
            toml::from_str(&format!("kind = \"engine\"\nname = \"x\"\nrecords = \"rule\"\nassistant_recall = {recall}")).unwrap()
        };
        let counter = TokenCounter::o200k().unwrap();
        let with = prepare(&spec(true), &dialogue, None, plain_tools(&counter)).unwrap();
        let without = prepare(&spec(false), &dialogue, None, plain_tools(&counter)).unwrap();
        // The rule extractor keeps user turns only; recall adds one unit per reply.
        assert_eq!(with.units.len(), without.units.len() + 2);

        let cue = "What sci-fi novel did you recommend to me last time?";
        let plain = rank(&without, cue, None);
        let ranked = rank(&with, cue, None);
        let first = plain.order[0];
        assert_eq!(with.units[first].turn_ids, ["s:0"]);
        // The novel turn first, then its reply; the cat turn's reply right after the cat turn.
        let turns: Vec<&str> = ranked.order.iter().map(|&i| with.units[i].turn_ids[0].as_str()).collect();
        assert_eq!(turns[..2], ["s:0", "s:1"]);
        assert_eq!(ranked.order.len(), plain.order.len() * 2);
        assert!(with.units[ranked.order[1]].text.starts_with("(assistant replied: Try The Left Hand"));
        let stats = ranked.recall.unwrap();
        assert_eq!((stats.queries, stats.triggered, stats.replies_attached), (1, 1, plain.order.len()));

        // No cue, no replies: the same order as without recall.
        let asked = "What novel does the user want for the trip?";
        let ranked = rank(&with, asked, None);
        assert_eq!(ranked.order, rank(&without, asked, None).order);
        assert_eq!(ranked.recall.unwrap().triggered, 0);
    }

    /// An engine system with `update = "rule"` indexes the consolidated records: a sentence said
    /// twice on one day becomes one record pointing at both turns (same type, same keywords,
    /// cosine 1, overlapping days: a merge under every rule), and the update is counted.
    #[test]
    fn an_updating_system_indexes_the_consolidated_records() {
        use memkit_engine::dense::HashingEmbedder;
        let at = chrono::NaiveDate::from_ymd_opt(2023, 5, 1).unwrap().and_hms_opt(10, 0, 0);
        let texts = ["I love hiking in the Alps.", "My sister is visiting next week.", "I love hiking in the Alps."];
        let dialogue = ann_says(&texts, at, |_| at);
        let spec = |update: &str| -> SystemSpec {
            toml::from_str(&format!("kind = \"engine\"\nname = \"x\"\nrecords = \"rule\"\nupdate = \"{update}\"")).unwrap()
        };
        let counter = TokenCounter::o200k().unwrap();
        let embedder: Arc<dyn Embedder> = Arc::new(HashingEmbedder::default());
        let tools = Tools { embedder: Some(&embedder), counter: &counter, llm_update: None, llm_boundaries: None };

        let plain = prepare(&spec("none"), &dialogue, None, tools).unwrap();
        assert_eq!(plain.units.len(), 3);
        assert!(plain.update.is_none());
        let updated = prepare(&spec("rule"), &dialogue, None, tools).unwrap();
        assert_eq!(updated.units.len(), 2);
        assert!(
            updated.units.iter().any(|u| u.turn_ids == ["D1:1", "D1:3"]),
            "{:?}",
            updated.units.iter().map(|u| &u.turn_ids).collect::<Vec<_>>()
        );
        let stats = updated.update.unwrap();
        assert_eq!((stats.new_records, stats.merges, stats.supersedes, stats.kept), (3, 1, 0, 2));

        // Without an embedder the update cannot filter by cosine: a clear error.
        let err = prepare(&spec("rule"), &dialogue, None, plain_tools(&counter)).err().unwrap().to_string();
        assert!(err.contains("no embedder"), "{err}");
    }

    /// A HingeMem system's units are its descriptions, then its member records, and its ranking
    /// is the index's reading, cut where the opened hyperedges end.
    #[test]
    fn hinge_units_follow_the_reading() {
        let d = memkit_data::load_locomo(&memkit_data::shared_data_dir().join("locomo/locomo10.json")).unwrap().swap_remove(0).dialogue;
        let spec: SystemSpec =
            toml::from_str("kind = \"hinge\"\nname = \"h\"\nrecords = \"rule\"\nrule_extractor.per_sentence = true").unwrap();
        let counter = TokenCounter::o200k().unwrap();
        let prepared = prepare(&spec, &d, None, plain_tools(&counter)).unwrap();
        let Ranker::Hinge(index) = &prepared.ranker else { panic!("a HingeMem system") };
        let edges = index.hyperedges().len();
        assert_eq!(prepared.units.len(), edges + index.records().len());
        let question = "What did Caroline research?";
        let ranking = rank(&prepared, question, None);
        let reading = index.read(&RuleQueryParser.parse(question, None).unwrap(), classify_query(question));
        assert!(reading.opened_parts >= 1, "{reading:?}");
        assert_eq!(ranking.order.len(), reading.parts.len());
        assert_eq!(ranking.stop, Some(reading.opened_parts));
        for (&u, &part) in ranking.order.iter().zip(&reading.parts) {
            assert_eq!(prepared.units[u].turn_ids, index.part_turn_ids(part));
            match part {
                Part::Description(e) => assert_eq!(prepared.units[u].text, index.hyperedges()[e].description),
                Part::Member(r) => assert!(prepared.units[u].text.ends_with(&index.records()[r].content)),
            }
        }
    }
}
