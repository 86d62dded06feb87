//! Polars frames of a dataset and their parquet copies.
//!
//! - `train.parquet` / `valid.parquet`: the JSONL rows (`window_id`, `source`, and `messages` as
//!   `list<struct<role, content>>`, the layout Hugging Face `datasets` and TRL's SFT trainer read).
//! - `records.parquet`: one row per kept record with its window, split, source and teacher, for
//!   analysis in polars or pandas; [`stats`](crate::stats) counts its type mix and fill rates.

use std::collections::HashMap;
use std::path::Path;

use polars::chunked_array::builder::get_list_builder;
use polars::prelude::*;

use crate::dataset::{Dataset, Example};
use crate::ledger::Status;
use crate::{Error, Result, write_atomic};

/// The dimension columns of [`records`] whose fill rate the stats report.
pub const DIMENSIONS: [&str; 5] = ["time", "location", "reason", "purpose", "keywords"];

fn strings(name: &str, values: Vec<String>) -> Column {
    Column::new(name.into(), values)
}

/// `window_id`, `source`, `messages` (`list<struct<role: str, content: str>>`) of `rows`.
pub fn examples(rows: &[Example]) -> PolarsResult<DataFrame> {
    let message = DataType::Struct(vec![Field::new("role".into(), DataType::String), Field::new("content".into(), DataType::String)]);
    let n_messages = rows.iter().map(|r| r.messages.len()).sum();
    let mut messages = get_list_builder(&message, n_messages, rows.len(), "messages".into());
    for row in rows {
        let role = Series::new("role".into(), row.messages.iter().map(|m| m.role.as_str().to_owned()).collect::<Vec<_>>());
        let content = Series::new("content".into(), row.messages.iter().map(|m| m.content.clone()).collect::<Vec<_>>());
        let chat = StructChunked::from_series("".into(), row.messages.len(), [&role, &content].into_iter())?;
        messages.append_series(&chat.into_series())?;
    }
    DataFrame::new(
        rows.len(),
        vec![
            strings("window_id", rows.iter().map(|r| r.window_id.clone()).collect()),
            strings("source", rows.iter().map(|r| r.source.as_str().to_owned()).collect()),
            messages.finish().into_column(),
        ],
    )
}

/// One row per kept record of the parsed windows: `window_id`, `split`, `source`, `teacher`,
/// `source_id`, `source_speaker`, `content`, `type`, `time`, `location`, `reason`, `purpose`,
/// `keywords` (`list<str>`).
pub fn records(dataset: &Dataset) -> PolarsResult<DataFrame> {
    let split: HashMap<&str, &str> = [("train", &dataset.train), ("valid", &dataset.valid)]
        .into_iter()
        .flat_map(|(name, rows)| rows.iter().map(move |r| (r.window_id.as_str(), name)))
        .collect();
    let rows: Vec<_> =
        dataset.entries.iter().filter(|e| e.status == Status::Ok).flat_map(|e| e.records.iter().map(move |r| (e, r))).collect();
    let column = |name: &str, f: &dyn Fn(&(&crate::ledger::Entry, &memkit_schema::ExtractedMemory)) -> String| {
        strings(name, rows.iter().map(f).collect())
    };
    let mut keywords = ListStringChunkedBuilder::new("keywords".into(), rows.len(), rows.len() * 4);
    for (_, r) in &rows {
        keywords.append_values_iter(r.dimension.keywords.iter().map(String::as_str));
    }
    DataFrame::new(
        rows.len(),
        vec![
            column("window_id", &|(e, _)| e.window_id.clone()),
            column("split", &|(e, _)| split.get(e.window_id.as_str()).copied().unwrap_or_default().to_owned()),
            column("source", &|(e, _)| e.source.as_str().to_owned()),
            column("teacher", &|(e, _)| e.model.clone()),
            Column::new("source_id".into(), rows.iter().map(|(_, r)| r.source_id).collect::<Vec<u32>>()),
            column("source_speaker", &|(_, r)| r.source_speaker.clone()),
            column("content", &|(_, r)| r.content.clone()),
            column("type", &|(_, r)| r.dimension.memory_type.to_string()),
            column("time", &|(_, r)| r.dimension.time.clone()),
            column("location", &|(_, r)| r.dimension.location.clone()),
            column("reason", &|(_, r)| r.dimension.reason.clone()),
            column("purpose", &|(_, r)| r.dimension.purpose.clone()),
            keywords.finish().into_column(),
        ],
    )
}

/// Writes `frame` as zstd-compressed parquet to `path` (through a temp file and a rename).
pub fn write_parquet(frame: &mut DataFrame, path: &Path) -> Result<()> {
    let mut bytes = Vec::new();
    ParquetWriter::new(&mut bytes).finish(frame).map_err(|source| Error::Frame { what: path.display().to_string(), source })?;
    write_atomic(path, &bytes)
}

/// Writes `train.parquet`, `valid.parquet` and `records.parquet` into `out_dir`.
pub fn write(dataset: &Dataset, out_dir: &Path) -> Result<()> {
    for (name, built) in
        [("train.parquet", examples(&dataset.train)), ("valid.parquet", examples(&dataset.valid)), ("records.parquet", records(dataset))]
    {
        let path = out_dir.join(name);
        let mut frame = built.map_err(|source| Error::Frame { what: path.display().to_string(), source })?;
        write_parquet(&mut frame, &path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::ledger::Entry;

    fn dataset() -> Dataset {
        let entry = |id: &str, source: &str, records: serde_json::Value| -> Entry {
            serde_json::from_value(serde_json::json!({
                "window_id": id, "source": source, "model": "gguf:teacher", "key": "k", "status": "ok",
                "records": records, "usage": {"prompt_tokens": 10, "completion_tokens": 5, "millis": 7},
            }))
            .unwrap()
        };
        let example = |id: &str, source: &str, reply: &str| -> Example {
            serde_json::from_value(serde_json::json!({"window_id": id, "source": source, "messages": [
                {"role": "system", "content": "Extract memories."},
                {"role": "user", "content": format!("window {id}: \"quoted\", ünïcode")},
                {"role": "assistant", "content": reply},
            ]}))
            .unwrap()
        };
        let fact = serde_json::json!({"source_id": 4, "source_speaker": "user", "content": "The user owns a red bike.",
            "dimension": {"memory_type": "fact", "time": "", "location": "Lyon", "keywords": ["bike", "red"]}});
        let trip = serde_json::json!({"source_id": 7, "source_speaker": "user", "content": "The user flew to Oslo in May 2023.",
            "dimension": {"memory_type": "episodic", "time": "2023-05", "reason": "a conference", "keywords": []}});
        Dataset {
            train: vec![example("lme-s/a/w0", "longmemeval-s", "{\"memories\":[]}"), example("memorybank/Frank/w1", "memorybank", "{}")],
            valid: vec![example("lme-s/b/w2", "longmemeval-s", "{}")],
            entries: vec![
                entry("lme-s/a/w0", "longmemeval-s", serde_json::json!([fact])),
                entry("memorybank/Frank/w1", "memorybank", serde_json::json!([])),
                entry("lme-s/b/w2", "longmemeval-s", serde_json::json!([trip])),
            ],
            stale: 0,
            incomplete: 0,
            salvaged_messages: 0,
            failed_messages: 0,
            windows_with_failed_messages: 0,
            prompt: String::new(),
            train_messages: Vec::new(),
            valid_messages: Vec::new(),
            window: memkit_prompt::TrainedWindow { size: 5, overlap: 1 },
            message_window: memkit_prompt::TrainedWindow { size: 2, overlap: 1 },
        }
    }

    fn read(frame: &mut DataFrame) -> DataFrame {
        let mut bytes = Vec::new();
        ParquetWriter::new(&mut bytes).finish(frame).unwrap();
        ParquetReader::new(Cursor::new(bytes)).finish().unwrap()
    }

    fn str_column(frame: &DataFrame, name: &str) -> Vec<String> {
        frame.column(name).unwrap().str().unwrap().iter().map(|v| v.unwrap().to_owned()).collect()
    }

    #[test]
    fn example_rows_survive_a_parquet_round_trip() {
        let data = dataset();
        let back = read(&mut examples(&data.train).unwrap());
        assert_eq!(back.shape(), (2, 3));
        assert_eq!(str_column(&back, "window_id"), ["lme-s/a/w0", "memorybank/Frank/w1"]);
        assert_eq!(str_column(&back, "source"), ["longmemeval-s", "memorybank"]);
        let messages = back.column("messages").unwrap().list().unwrap();
        for (i, row) in data.train.iter().enumerate() {
            let chat = messages.get_as_series(i).unwrap();
            let chat = chat.struct_().unwrap();
            let field = |name: &str| -> Vec<String> {
                chat.field_by_name(name).unwrap().str().unwrap().iter().map(|v| v.unwrap().to_owned()).collect()
            };
            assert_eq!(field("role"), row.messages.iter().map(|m| m.role.as_str()).collect::<Vec<_>>());
            assert_eq!(field("content"), row.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>());
        }
    }

    #[test]
    fn an_empty_split_still_has_the_message_schema() {
        let back = read(&mut examples(&[]).unwrap());
        assert_eq!(back.height(), 0);
        assert!(matches!(back.column("messages").unwrap().dtype(), DataType::List(inner) if matches!(**inner, DataType::Struct(_))));
    }

    #[test]
    fn records_have_one_row_per_kept_record_with_their_split() {
        let back = read(&mut records(&dataset()).unwrap());
        assert_eq!(back.height(), 2);
        assert_eq!(str_column(&back, "window_id"), ["lme-s/a/w0", "lme-s/b/w2"]);
        assert_eq!(str_column(&back, "split"), ["train", "valid"]);
        assert_eq!(str_column(&back, "type"), ["fact", "episodic"]);
        assert_eq!(str_column(&back, "location"), ["Lyon", ""]);
        assert_eq!(str_column(&back, "teacher"), ["gguf:teacher", "gguf:teacher"]);
        let ids: Vec<u32> = back.column("source_id").unwrap().u32().unwrap().iter().map(Option::unwrap).collect();
        assert_eq!(ids, [4, 7]);
        let keywords = back.column("keywords").unwrap().list().unwrap();
        let lens: Vec<usize> = keywords.iter().map(|k| k.unwrap().len()).collect();
        assert_eq!(lens, [2, 0]);
    }
}
