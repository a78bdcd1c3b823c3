//! A corpus on disk: one JSON file per part, written by a release's
//! generator and read by any release's checks. The file format is the one
//! thing every release's generator must keep (`FORMAT`).

use std::path::Path;

use anyhow::Context;
use serde_json::{Map, Value};

/// The layout of the files below; a generator refuses another.
pub const FORMAT: u64 = 1;

/// The parts of a corpus, each one file `<part>.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Corpus {
    /// `format`, and the commit the corpus was generated from.
    pub release: Value,
    /// AMQP messages: `[{name, input: {messages, headers}, amqp: {properties, body}}]`,
    /// or `unsupported` instead of `amqp` when the release could not read the input.
    pub messages: Value,
    /// The key layout (`keys`) and a scheduler's heartbeat (`heartbeat`).
    pub redis: Value,
    /// The queue declarations of each queue type (`topologies`), and the
    /// publishes of the scheduler's publisher (`publishes`).
    pub amqp: Value,
    /// Every row the database scenario left, by table.
    pub db_rows: Value,
    /// The SQL statements the scenario's code prepared.
    pub db_statements: Value,
}

const PARTS: [&str; 6] = ["release", "messages", "redis", "amqp", "db-rows", "db-statements"];

impl Corpus {
    fn parts(&self) -> [&Value; 6] {
        [&self.release, &self.messages, &self.redis, &self.amqp, &self.db_rows, &self.db_statements]
    }

    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        for (name, value) in PARTS.iter().zip(self.parts()) {
            let mut text = serde_json::to_string_pretty(value)?;
            text.push('\n');
            std::fs::write(dir.join(format!("{name}.json")), text)?;
        }
        Ok(())
    }

    pub fn load(dir: &Path) -> anyhow::Result<Corpus> {
        let read = |name: &str| -> anyhow::Result<Value> {
            let path = dir.join(format!("{name}.json"));
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
        };
        let corpus = Corpus {
            release: read("release")?,
            messages: read("messages")?,
            redis: read("redis")?,
            amqp: read("amqp")?,
            db_rows: read("db-rows")?,
            db_statements: read("db-statements")?,
        };
        let format = corpus.release["format"].as_u64();
        anyhow::ensure!(
            format == Some(FORMAT),
            "{}: corpus format {format:?}, this generator reads {FORMAT}",
            dir.display()
        );
        Ok(corpus)
    }
}

/// `value` with every string occurrence of `from` replaced by `to` (a
/// cluster's unique name by `{cluster}`).
pub fn replace_text(value: &Value, from: &str, to: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace(from, to)),
        Value::Array(a) => Value::Array(a.iter().map(|v| replace_text(v, from, to)).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.replace(from, to), replace_text(v, from, to))).collect())
        }
        other => other.clone(),
    }
}

/// What of a database's rows another release could trip over, without the
/// values that differ from run to run (instants, fresh ids): per table, its
/// columns; per column holding short lowercase words (states, triggers,
/// reasons, modes), the words; per JSON column, the paths of the keys in it
/// (with the `event` of a history entry, the entry's keys under that
/// event's name). A new column, a new enum value or a new key in a JSON
/// document changes it; a new row of an old shape does not.
pub fn shape(rows: &Value) -> Value {
    let mut out = Map::new();
    for (table, table_rows) in rows.as_object().into_iter().flatten() {
        let mut columns: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
        for row in table_rows.as_array().into_iter().flatten() {
            for (column, value) in row.as_object().into_iter().flatten() {
                let seen = columns.entry(column.clone()).or_default();
                match value {
                    Value::String(s) if is_word(s) => {
                        seen.insert(format!("= {s}"));
                    }
                    Value::Object(_) | Value::Array(_) => key_paths(value, "", seen),
                    _ => {}
                }
            }
        }
        let table_shape: Map<String, Value> = columns
            .into_iter()
            .map(|(c, seen)| (c, Value::Array(seen.into_iter().map(Value::String).collect())))
            .collect();
        out.insert(table.clone(), Value::Object(table_shape));
    }
    Value::Object(out)
}

fn is_word(s: &str) -> bool {
    !s.is_empty() && s.len() <= 40 && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

fn key_paths(value: &Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
    match value {
        Value::Object(o) => {
            let at = match o.get("event").and_then(Value::as_str) {
                Some(event) => format!("{prefix}[{event}]"),
                None => prefix.to_owned(),
            };
            for (k, v) in o {
                let path = format!("{at}.{k}");
                out.insert(path.clone());
                key_paths(v, &path, out);
            }
        }
        Value::Array(a) => {
            for v in a {
                key_paths(v, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

/// A heartbeat document with its instant masked (its form is checked
/// apart): `heartbeat_at` as `<instant>` when it reads as one.
pub fn masked_heartbeat(document: &str) -> Value {
    let mut doc: Value = serde_json::from_str(document).unwrap_or(Value::String(document.to_owned()));
    if let Some(at) = doc.get_mut("heartbeat_at")
        && at.as_str().is_some_and(|s| chrono::DateTime::parse_from_rfc3339(s).is_ok())
    {
        *at = Value::String("<instant>".into());
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_shape_keeps_words_and_keys_but_not_values() {
        let rows = json!({"t": [
            {"status": "pending", "at": "2031-01-01T00:00:00Z", "history": [{"event": "attempt", "worker_id": "w"}]},
            {"status": "failed", "at": "2032-01-01T00:00:00Z", "history": []}
        ]});
        assert_eq!(
            shape(&rows),
            json!({"t": {"at": [], "history": ["[][attempt].event", "[][attempt].worker_id"], "status": ["= failed", "= pending"]}})
        );
    }
}
