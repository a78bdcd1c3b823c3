//! `cronshard apply` and `cronshard diff`: jobs and calendars as files,
//! made the cluster's by one `POST /v1/apply` (one transaction, all or
//! nothing). `diff` is the same request as a dry run, its exit code saying
//! whether anything would change.
//!
//! Everything about the files is settled before the request: the paths
//! (directories read recursively, in sorted order), the documents (JSON,
//! or YAML streams), their kinds, and the `${VAR}` of secret header values;
//! a file that fails any of it sends nothing. The API's field errors name
//! `jobs[3]...`: each is shown with the file the item came from.

use std::path::{Path, PathBuf};

use reqwest::Method;
use serde_json::{Map, Value, json};

use super::{Ctx, Done};
use crate::args::Documents;
use crate::client::Body;
use crate::failure::{Exit, Failure, Result};
use crate::input;
use crate::output::{self, text};

/// The extensions a directory is searched for.
const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

pub async fn apply(ctx: &Ctx, documents: Documents, dry_run: bool) -> Result<Done> {
    let (raw, reply) = send(ctx, &documents, dry_run).await?;
    let out = output::render(ctx.format, &raw, &reply, |r| result_view(r, false))?;
    Ok(out.into())
}

/// Exit code 7 when something would change, 0 when nothing would.
pub async fn diff(ctx: &Ctx, documents: Documents) -> Result<Done> {
    let (raw, reply) = send(ctx, &documents, true).await?;
    let summary = &reply["summary"];
    let differs = ["created", "changed", "deleted"].iter().any(|k| summary[k].as_u64().unwrap_or(0) > 0);
    let out = output::render(ctx.format, &raw, &reply, |r| result_view(r, true))?;
    Ok(Done { out, exit: if differs { Exit::Differs } else { Exit::Ok } })
}

/// The API's answer, as text and as JSON.
async fn send(ctx: &Ctx, documents: &Documents, dry_run: bool) -> Result<(String, Value)> {
    let request = Request::read(&documents.files, &|name| std::env::var(name).ok())?;
    let mut body = json!({ "jobs": request.jobs, "calendars": request.calendars, "dry_run": dry_run });
    if let Some(namespace) = &ctx.namespace {
        body["namespace"] = json!(namespace);
    }
    if let Some(selector) = documents.selector.as_ref().filter(|_| documents.prune) {
        body["prune"] = json!({ "selector": selector });
    }
    let reply = ctx
        .api
        .send(Method::POST, &["apply"], &[], Some(Body::Json(body)), None)
        .await
        .map_err(|failure| request.locate(failure))?;
    let value = reply.json()?;
    Ok((reply.text, value))
}

/// The items of every document, each with where it came from.
#[derive(Debug, Default)]
pub struct Request {
    jobs: Vec<Value>,
    calendars: Vec<Value>,
    job_sources: Vec<String>,
    calendar_sources: Vec<String>,
}

impl Request {
    /// Reads `paths` (files, directories, `-`); `env` gives the variables
    /// of `${VAR}` in secret header values.
    pub fn read(paths: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Request> {
        let mut request = Request::default();
        for path in paths {
            for file in files(path)? {
                let shown = file.to_string_lossy().into_owned();
                let (text, source) = input::read_text(&shown)?;
                let documents = input::parse_documents(&text, &source)?;
                let several = documents.len() > 1;
                for (d, document) in documents.into_iter().enumerate() {
                    let document_source =
                        if several { format!("{source} (document {})", d + 1) } else { source.clone() };
                    match document {
                        Value::Null => {}
                        Value::Object(object) => request.add(object, document_source, env)?,
                        Value::Array(items) => {
                            for (i, item) in items.into_iter().enumerate() {
                                let item_source = format!("{document_source} (item {})", i + 1);
                                match item {
                                    Value::Object(object) => request.add(object, item_source, env)?,
                                    _ => return Err(Failure::invalid(format!("{item_source}: must be an object"))),
                                }
                            }
                        }
                        _ => {
                            return Err(Failure::invalid(format!(
                                "{document_source}: must be an object (a job or a calendar) or a list of them"
                            )));
                        }
                    }
                }
            }
        }
        if request.jobs.is_empty() && request.calendars.is_empty() {
            return Err(Failure::invalid(format!("no job or calendar in {}", paths.join(", "))));
        }
        Ok(request)
    }

    fn add(
        &mut self,
        mut object: Map<String, Value>,
        source: String,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<()> {
        let kind = object.remove("kind");
        match kind.as_ref().map(|k| k.as_str()) {
            None | Some(Some("Job")) => {
                substitute_secrets(&mut object, &source, env)?;
                self.jobs.push(Value::Object(object));
                self.job_sources.push(source);
            }
            Some(Some("Calendar")) => {
                self.calendars.push(Value::Object(object));
                self.calendar_sources.push(source);
            }
            Some(_) => {
                let kind = kind.as_ref().map(output::text).unwrap_or_default();
                return Err(Failure::invalid(format!("{source}: kind must be Job or Calendar, not {kind}")));
            }
        }
        Ok(())
    }

    /// The API's field errors (`jobs[3].schedule.expr: ...`) each preceded
    /// by the file the item came from.
    fn locate(&self, mut failure: Failure) -> Failure {
        for detail in &mut failure.details {
            let source = [("jobs[", &self.job_sources), ("calendars[", &self.calendar_sources)].into_iter().find_map(
                |(prefix, sources)| {
                    let index = detail.strip_prefix(prefix)?.split(']').next()?.parse::<usize>().ok()?;
                    sources.get(index)
                },
            );
            if let Some(source) = source {
                *detail = format!("{source}: {detail}");
            }
        }
        failure
    }
}

/// The files `path` names: itself, or a directory's `*.yaml`, `*.yml` and
/// `*.json`, recursively, in sorted order, without the names that start
/// with a dot (`.git`, an editor's swap files).
fn files(path: &str) -> Result<Vec<PathBuf>> {
    if path == "-" {
        return Ok(vec![PathBuf::from("-")]);
    }
    let root = Path::new(path);
    let meta = std::fs::metadata(root).map_err(|e| Failure::invalid(format!("cannot read {path}: {e}")))?;
    if !meta.is_dir() {
        return Ok(vec![root.to_owned()]);
    }
    let mut found = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| Failure::invalid(format!("cannot read {}: {e}", dir.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| Failure::invalid(format!("cannot read {}: {e}", dir.display())))?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            // Followed like `cat` would: a link to a directory is read as one.
            if path.is_dir() {
                pending.push(path);
            } else if path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Replaces `${VAR}` in each `target.secret_headers` value by the variable's
/// value (`$${` stands for a literal `${`), so a file in Git holds no
/// secret. An unset variable is an error naming the file and the variable
/// (never a value).
fn substitute_secrets(job: &mut Map<String, Value>, source: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<()> {
    let Some(headers) = job.get_mut("target").and_then(|t| t.get_mut("secret_headers")).and_then(Value::as_object_mut)
    else {
        return Ok(());
    };
    for (name, value) in headers.iter_mut() {
        if let Value::String(raw) = value {
            *raw = substitute(raw, env).map_err(|variable| {
                Failure::invalid(format!(
                    "{source}: target.secret_headers.{name} names ${{{variable}}}, but the environment variable \
                     {variable} is not set"
                ))
            })?;
        }
    }
    Ok(())
}

/// `raw` with each `${NAME}` (NAME: a letter or `_`, then letters, digits,
/// `_`) replaced; `Err(NAME)` for the first one unset. Anything else, a
/// lone `$` included, stays as it is.
fn substitute(raw: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(escaped) = after.strip_prefix("${") {
            out.push_str("${");
            rest = escaped;
            continue;
        }
        let name = after.strip_prefix('{').and_then(|inner| inner.split_once('}')).map(|(name, _)| name).filter(|n| {
            let mut chars = n.chars();
            chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        match name {
            Some(name) => {
                out.push_str(&env(name).ok_or_else(|| name.to_owned())?);
                rest = &after[name.len() + 2..];
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// One line per item (`KIND  NAMESPACE  KEY/NAME  RESULT`), each changed
/// field under its item, then the counts. `diff` leaves out the items that
/// stay as they are.
fn result_view(reply: &Value, diff: bool) -> String {
    let items: Vec<&Value> = reply["items"]
        .as_array()
        .map(|items| items.iter().filter(|i| !diff || i["result"] != "unchanged").collect())
        .unwrap_or_default();
    let summary = &reply["summary"];
    let count = |k: &str| summary[k].as_u64().unwrap_or(0);
    let dry_run = reply["dry_run"] == true;
    let mut out = String::new();
    if !items.is_empty() {
        let rows: Vec<Vec<String>> = items
            .iter()
            .map(|i| {
                let id = if i["kind"] == "calendar" { &i["name"] } else { &i["key"] };
                vec![text(&i["kind"]), text(&i["namespace"]), text(id), text(&i["result"])]
            })
            .collect();
        let table = output::table(&["KIND", "NAMESPACE", "KEY/NAME", "RESULT"], &rows);
        let mut lines = table.lines();
        out.push_str(lines.next().unwrap_or_default());
        out.push('\n');
        for (line, item) in lines.zip(&items) {
            out.push_str(line);
            out.push('\n');
            for change in item["changes"].as_array().map(Vec::as_slice).unwrap_or_default() {
                out.push_str(&format!(
                    "  {}: {} -> {}\n",
                    text(&change["path"]),
                    shown_value(change.get("before")),
                    shown_value(change.get("after"))
                ));
            }
        }
    }
    if diff && items.is_empty() {
        out.push_str(&format!("no differences ({} unchanged)", count("unchanged")));
        return out;
    }
    out.push_str(&format!(
        "{} created, {} changed, {} unchanged, {} deleted",
        count("created"),
        count("changed"),
        count("unchanged"),
        count("deleted")
    ));
    if dry_run {
        out.push_str(" (dry run: nothing was changed)");
    }
    out
}

/// A value of a change as compact JSON (strings quoted, so `"5"` and `5`
/// differ), `(none)` for a field added or removed, cut to one line.
fn shown_value(value: Option<&Value>) -> String {
    match value {
        None => "(none)".to_owned(),
        Some(v) => output::cut(&v.to_string(), 200),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Format;

    fn env(name: &str) -> Option<String> {
        match name {
            "REPORTS_TOKEN" => Some("s3cr3t".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn variables_are_replaced_in_secret_header_values_only() {
        assert_eq!(substitute("Bearer ${REPORTS_TOKEN}", &env).unwrap(), "Bearer s3cr3t");
        assert_eq!(substitute("${REPORTS_TOKEN}${EMPTY}-x", &env).unwrap(), "s3cr3t-x");
        assert_eq!(
            substitute("$${REPORTS_TOKEN} costs $5 ${1X} ${", &env).unwrap(),
            "${REPORTS_TOKEN} costs $5 ${1X} ${"
        );
        assert_eq!(substitute("${MISSING}", &env).unwrap_err(), "MISSING");

        let mut job = json!({"name": "${REPORTS_TOKEN}", "target": {"kind": "http", "url": "https://x/${REPORTS_TOKEN}",
                            "headers": {"x-a": "${REPORTS_TOKEN}"}, "secret_headers": {"authorization": "Bearer ${REPORTS_TOKEN}"}}});
        substitute_secrets(job.as_object_mut().unwrap(), "jobs/a.yaml", &env).unwrap();
        assert_eq!(job["target"]["secret_headers"]["authorization"], "Bearer s3cr3t");
        assert_eq!(job["target"]["headers"]["x-a"], "${REPORTS_TOKEN}", "only secret header values");
        assert_eq!(job["name"], "${REPORTS_TOKEN}");

        let mut job = json!({"target": {"secret_headers": {"x-api-key": "${NOT_SET}"}}});
        let err = substitute_secrets(job.as_object_mut().unwrap(), "jobs/b.yaml (document 2)", &env).unwrap_err();
        assert_eq!(err.exit, Exit::Invalid);
        assert_eq!(
            err.message,
            "jobs/b.yaml (document 2): target.secret_headers.x-api-key names ${NOT_SET}, but the environment \
             variable NOT_SET is not set"
        );
    }

    #[test]
    fn documents_are_read_from_files_and_directories_with_their_kinds() {
        let dir = std::env::temp_dir().join(format!("cronshard-apply-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("b/.hidden")).unwrap();
        std::fs::write(dir.join("b/2-jobs.yaml"), "key: two\n---\n- key: three\n- kind: Job\n  key: four\n").unwrap();
        std::fs::write(dir.join("1-calendar.yml"), "kind: Calendar\nname: holidays\ntimezone: UTC\n").unwrap();
        std::fs::write(dir.join("0.json"), r#"[{"key": "one"}]"#).unwrap();
        std::fs::write(dir.join("b/.hidden/x.yaml"), "key: hidden\n").unwrap();
        std::fs::write(dir.join("b/notes.txt"), "not a document").unwrap();
        let request = Request::read(&[dir.to_string_lossy().into_owned()], &env).unwrap();
        let keys: Vec<&str> = request.jobs.iter().map(|j| j["key"].as_str().unwrap()).collect();
        assert_eq!(keys, ["one", "two", "three", "four"], "sorted paths, then document order");
        assert!(request.jobs.iter().all(|j| j.get("kind").is_none()), "kind is the CLI's, not the API's");
        assert_eq!(request.calendars, [json!({"name": "holidays", "timezone": "UTC"})]);
        let d = dir.display();
        assert_eq!(
            request.job_sources,
            [
                format!("{d}/0.json (item 1)"),
                format!("{d}/b/2-jobs.yaml (document 1)"),
                format!("{d}/b/2-jobs.yaml (document 2) (item 1)"),
                format!("{d}/b/2-jobs.yaml (document 2) (item 2)"),
            ]
        );

        // The API's field errors name the file of their item.
        let mut failure = Failure::invalid("Invalid request (HTTP 422)");
        failure.details = vec![
            "jobs[2].key: is used twice".into(),
            "calendars[0].timezone: unknown".into(),
            "prune.selector: x".into(),
        ];
        let located = request.locate(failure);
        assert_eq!(
            located.details,
            [
                format!("{d}/b/2-jobs.yaml (document 2) (item 1): jobs[2].key: is used twice"),
                format!("{d}/1-calendar.yml: calendars[0].timezone: unknown"),
                "prune.selector: x".to_owned(),
            ]
        );

        std::fs::write(dir.join("1-calendar.yml"), "kind: CronJob\nname: x\n").unwrap();
        let err = Request::read(&[dir.to_string_lossy().into_owned()], &env).unwrap_err();
        assert_eq!(err.message, format!("{d}/1-calendar.yml: kind must be Job or Calendar, not CronJob"));
        std::fs::write(dir.join("1-calendar.yml"), "just text\n").unwrap();
        let err = Request::read(&[dir.to_string_lossy().into_owned()], &env).unwrap_err();
        assert!(err.message.ends_with("must be an object (a job or a calendar) or a list of them"), "{}", err.message);
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::write(empty.join("only-comments.yaml"), "# nothing yet\n---\n").unwrap();
        let err = Request::read(&[empty.to_string_lossy().into_owned()], &env).unwrap_err();
        assert!(err.message.starts_with("no job or calendar in "), "{}", err.message);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_result_shows_each_item_its_changes_and_the_counts() {
        let reply = json!({
            "dry_run": true,
            "items": [
                {"kind": "calendar", "namespace": "default", "name": "holidays", "result": "unchanged"},
                {"kind": "job", "namespace": "default", "key": "nightly-report", "id": "0193", "version": 4,
                 "result": "changed", "changes": [
                     {"path": "schedule.expr", "before": "0 2 * * *", "after": "0 3 * * *"},
                     {"path": "labels.tier", "after": "batch"},
                     {"path": "target.secret_headers.authorization", "before": "***", "after": "*** (changed)"}]},
                {"kind": "job", "namespace": "default", "key": "queue-feed", "id": null, "version": null, "result": "created"},
                {"kind": "job", "namespace": "default", "key": "old", "id": "0194", "version": 2, "result": "deleted"},
            ],
            "summary": {"created": 1, "changed": 1, "unchanged": 1, "deleted": 1},
        });
        assert_eq!(
            result_view(&reply, false),
            "KIND      NAMESPACE  KEY/NAME        RESULT
calendar  default    holidays        unchanged
job       default    nightly-report  changed
  schedule.expr: \"0 2 * * *\" -> \"0 3 * * *\"
  labels.tier: (none) -> \"batch\"
  target.secret_headers.authorization: \"***\" -> \"*** (changed)\"
job       default    queue-feed      created
job       default    old             deleted
1 created, 1 changed, 1 unchanged, 1 deleted (dry run: nothing was changed)"
        );
        let shown = result_view(&reply, true);
        assert!(!shown.contains("holidays") && shown.contains("nightly-report"), "{shown}");
        let same = json!({"dry_run": true, "items": [{"kind": "job", "key": "a", "result": "unchanged"}],
                          "summary": {"created": 0, "changed": 0, "unchanged": 1, "deleted": 0}});
        assert_eq!(result_view(&same, true), "no differences (1 unchanged)");
    }

    #[test]
    fn a_format_other_than_table_is_the_apis_answer() {
        let raw = r#"{"dry_run":false,"items":[],"summary":{"created":0,"changed":0,"unchanged":0,"deleted":0}}"#;
        let value: Value = serde_json::from_str(raw).unwrap();
        assert_eq!(output::render(Format::Json, raw, &value, |r| result_view(r, false)).unwrap(), format!("{raw}\n"));
    }
}
