//! What the user hands in: a document (`-f FILE`, `-f -` for stdin) in
//! JSON or YAML, and `--set path=value` edits, both turned into the JSON the
//! API takes. Nothing is validated here beyond the syntax: the API's 422
//! names each bad field.

use std::io::Read;

use serde_json::{Map, Value};

use crate::failure::{Failure, Result};

/// Reads `path` (`-` = stdin) as JSON or YAML.
pub fn read_document(path: &str) -> Result<Value> {
    let (text, source) = read_text(path)?;
    parse_document(&text, &source)
}

/// The text of `path` (`-` = stdin), and how to name it in messages.
pub fn read_text(path: &str) -> Result<(String, String)> {
    if path == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| Failure::invalid(format!("cannot read stdin: {e}")))?;
        Ok((text, "stdin".to_owned()))
    } else {
        let text = std::fs::read_to_string(path).map_err(|e| Failure::invalid(format!("cannot read {path}: {e}")))?;
        Ok((text, path.to_owned()))
    }
}

/// JSON for a `.json` file, YAML for a `.yaml` or `.yml` one; otherwise
/// (stdin) JSON when the text looks like JSON (so its errors are JSON's),
/// YAML when not. A JSON document is valid YAML too, but JSON's reading of
/// it is exactly the API's.
fn is_json(text: &str, source: &str) -> bool {
    let lower = source.to_ascii_lowercase();
    if lower.ends_with(".json") {
        return true;
    }
    if lower.ends_with(".yaml") || lower.ends_with(".yml") {
        return false;
    }
    let trimmed = text.trim_start();
    trimmed.starts_with('{') || trimmed.starts_with('[')
}

pub fn parse_document(text: &str, source: &str) -> Result<Value> {
    if text.trim_start().is_empty() {
        return Err(Failure::invalid(format!("{source} is empty")));
    }
    if is_json(text, source) {
        return serde_json::from_str(text).map_err(|e| Failure::invalid(format!("{source} is not valid JSON: {e}")));
    }
    yaml_serde::from_str::<Value>(text).map_err(|e| Failure::invalid(format!("{source} is not valid YAML: {e}")))
}

/// Every document of a file: a JSON file's one, or each of a YAML stream's,
/// numbered from 1 in the messages; one holding only comments is left out.
pub fn parse_documents(text: &str, source: &str) -> Result<Vec<Value>> {
    if is_json(text, source) {
        return serde_json::from_str(text)
            .map(|v| vec![v])
            .map_err(|e| Failure::invalid(format!("{source} is not valid JSON: {e}")));
    }
    let mut documents = Vec::new();
    for (i, document) in yaml_documents(text).iter().filter(|d| !is_blank(d)).enumerate() {
        let value = yaml_serde::from_str::<Value>(document)
            .map_err(|e| Failure::invalid(format!("{source} is not valid YAML (document {}): {e}", i + 1)))?;
        documents.push(value);
    }
    Ok(documents)
}

/// A YAML stream cut at its document markers: `---` (a new document,
/// which may start on the marker's line) and `...` (the end of one), each
/// at the start of a line and followed by a space, a tab or the line's
/// end. YAML forbids such a line inside a document, quoted or not, so the
/// cut is the parser's.
fn yaml_documents(text: &str) -> Vec<String> {
    let mut documents = vec![String::new()];
    for line in text.lines() {
        let marker = |m: &str| line.strip_prefix(m).filter(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
        if let Some(rest) = marker("---") {
            documents.push(format!("{rest}\n"));
        } else if marker("...").is_some() {
            documents.push(String::new());
        } else {
            let current = documents.last_mut().expect("starts with one");
            current.push_str(line);
            current.push('\n');
        }
    }
    documents
}

/// Whitespace and comments only.
fn is_blank(document: &str) -> bool {
    document.lines().map(str::trim).all(|l| l.is_empty() || l.starts_with('#'))
}

/// A document that must be an object (a job, a patch, a calendar).
pub fn read_object(path: &str, what: &str) -> Result<Map<String, Value>> {
    match read_document(path)? {
        Value::Object(map) => Ok(map),
        _ => Err(Failure::invalid(format!("{} must hold {what} as a mapping (an object)", shown_path(path)))),
    }
}

fn shown_path(path: &str) -> &str {
    if path == "-" { "stdin" } else { path }
}

/// Applies `--set path=value` to `patch`: the path is dotted object keys
/// (`schedule.expr`, `labels.tier`); the value is read as JSON when it is
/// JSON (`5`, `true`, `null`, `["a"]`, `"5"`) and taken as a string otherwise.
/// In a merge patch `null` removes the field.
pub fn apply_set(patch: &mut Map<String, Value>, assignment: &str) -> Result<()> {
    let (path, raw) = assignment.split_once('=').ok_or_else(|| {
        Failure::invalid(format!("--set {assignment:?}: expected path=value, e.g. retry.max_retries=5"))
    })?;
    let keys: Vec<&str> = path.split('.').collect();
    if keys.iter().any(|k| k.trim().is_empty()) {
        return Err(Failure::invalid(format!("--set {assignment:?}: the path has an empty key")));
    }
    let value = serde_json::from_str::<Value>(raw).unwrap_or_else(|_| Value::String(raw.to_owned()));
    let (last, parents) = keys.split_last().expect("split yields at least one key");
    let mut object = patch;
    for key in parents {
        let slot = object.entry(key.to_string()).or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        object = slot.as_object_mut().expect("made an object above");
    }
    object.insert(last.to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_are_json_or_yaml() {
        let yaml = "name: report\nschedule:\n  kind: cron\n  expr: '*/5 * * * *'\nlabels: {team: payments}\nretry:\n  max_retries: 3\n";
        assert_eq!(
            parse_document(yaml, "job.yaml").unwrap(),
            json!({"name": "report", "schedule": {"kind": "cron", "expr": "*/5 * * * *"},
                   "labels": {"team": "payments"}, "retry": {"max_retries": 3}})
        );
        assert_eq!(parse_document(r#"{"a": [1, null]}"#, "stdin").unwrap(), json!({"a": [1, null]}));
        let err = parse_document("{\"a\": }", "job.json").unwrap_err();
        assert!(err.message.starts_with("job.json is not valid JSON"), "{}", err.message);
        let err = parse_document("a: [1\n", "job.yaml").unwrap_err();
        assert!(err.message.starts_with("job.yaml is not valid YAML"), "{}", err.message);
        assert!(parse_document("  \n", "x.yaml").is_err());
        // The extension decides; without one (stdin), the text does.
        assert_eq!(parse_document("{a: 1}", "job.yaml").unwrap(), json!({"a": 1}));
        assert!(parse_document("{a: 1}", "stdin").is_err());
    }

    #[test]
    fn a_yaml_stream_is_one_value_per_document() {
        let text = "---\n# jobs\nkey: a\nbody: |\n  ---- not a marker\n  --- indented, not one\n---\n- key: b\n- key: c\n...\n--- {key: d}\n---\n# nothing\n";
        assert_eq!(
            parse_documents(text, "jobs.yaml").unwrap(),
            [
                json!({"key": "a", "body": "---- not a marker\n--- indented, not one\n"}),
                json!([{"key": "b"}, {"key": "c"}]),
                json!({"key": "d"})
            ]
        );
        assert_eq!(parse_documents("[{\"key\": \"a\"}]", "jobs.json").unwrap(), [json!([{"key": "a"}])]);
        let err = parse_documents("key: a\n---\nkey: [b\n", "jobs.yaml").unwrap_err();
        assert!(err.message.starts_with("jobs.yaml is not valid YAML (document 2)"), "{}", err.message);
    }

    #[test]
    fn set_builds_a_merge_patch() {
        let mut patch = Map::new();
        for s in [
            "schedule.expr=15 3 * * *",
            "retry.max_retries=5",
            "labels.tier=null",
            "paused=true",
            "name=\"42\"",
            "calendars=[\"holidays\"]",
            "target.url=https://x.example/a?b=c",
        ] {
            apply_set(&mut patch, s).unwrap();
        }
        assert_eq!(
            Value::Object(patch),
            json!({"schedule": {"expr": "15 3 * * *"}, "retry": {"max_retries": 5}, "labels": {"tier": null},
                   "paused": true, "name": "42", "calendars": ["holidays"], "target": {"url": "https://x.example/a?b=c"}})
        );
        let mut patch = Map::new();
        assert!(apply_set(&mut patch, "noequals").is_err());
        assert!(apply_set(&mut patch, "a..b=1").is_err());
        assert!(apply_set(&mut patch, "=1").is_err());
    }
}
