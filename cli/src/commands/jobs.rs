//! `cronshard jobs ...`: `/v1/jobs` and its sub-routes.

use reqwest::Method;
use serde_json::{Map, Value, json};

use super::Ctx;
use crate::args::{BulkAction, JobEdit, JobList, Jobs};
use crate::client::Body;
use crate::failure::{Failure, Result};
use crate::input;
use crate::output::{self, fields, text, utc};

pub async fn run(ctx: &Ctx, command: Jobs) -> Result<String> {
    match command {
        Jobs::Create { file } => create(ctx, &file).await,
        Jobs::List(list) => self::list(ctx, list).await,
        Jobs::Get { id } => {
            let reply = ctx.api.get(&["jobs", &id], &[]).await?;
            ctx.show(&reply, job_view)
        }
        Jobs::Describe { id, next, executions } => describe(ctx, &id, next, executions).await,
        Jobs::Edit(edit) => self::edit(ctx, edit).await,
        Jobs::Delete { id, note } => {
            ctx.api.send(Method::DELETE, &["jobs", &id], &[], noted(note), None).await?;
            Ok(ctx.done(format!("job {id} deleted")))
        }
        Jobs::Pause { id, note } => {
            let reply = ctx.api.send(Method::POST, &["jobs", &id, "pause"], &[], noted(note), None).await?;
            ctx.show(&reply, job_view)
        }
        Jobs::Resume { id, note } => {
            let reply = ctx.api.send(Method::POST, &["jobs", &id, "resume"], &[], noted(note), None).await?;
            ctx.show(&reply, job_view)
        }
        Jobs::Trigger { id, note } => {
            let reply = ctx.api.send(Method::POST, &["jobs", &id, "trigger"], &[], noted(note), None).await?;
            ctx.show(&reply, super::executions::execution_view)
        }
        Jobs::History { id } => {
            let reply = ctx.api.get(&["jobs", &id, "versions"], &[]).await?;
            ctx.show(&reply, history_view)
        }
        Jobs::Rollback { id, to_version, note, if_version } => {
            let mut body = json!({ "version": to_version });
            if let Some(note) = note {
                body["note"] = json!(note);
            }
            let reply =
                ctx.api.send(Method::POST, &["jobs", &id, "rollback"], &[], Some(Body::Json(body)), if_version).await?;
            ctx.show(&reply, job_view)
        }
        Jobs::Next { id, count, from } => {
            let mut query = Vec::new();
            if let Some(count) = count {
                query.push(("count", count.to_string()));
            }
            if let Some(from) = from {
                query.push(("from", from));
            }
            let reply = ctx.api.get(&["jobs", &id, "next"], &query).await?;
            ctx.show(&reply, |v| output::fire_times(&v["fire_times"]))
        }
        Jobs::Backfill(b) => super::backfills::create(ctx, b).await,
        Jobs::Bulk { action, selector, yes } => bulk(ctx, action, selector, yes).await,
    }
}

/// The body of an operation that takes a note (`{"note": ...}`), or none.
fn noted(note: Option<String>) -> Option<Body> {
    note.map(|note| Body::Json(json!({ "note": note })))
}

async fn create(ctx: &Ctx, file: &str) -> Result<String> {
    let mut job = input::read_object(file, "a job")?;
    if let Some(namespace) = &ctx.namespace {
        match job.get("namespace") {
            None | Some(Value::Null) => {
                job.insert("namespace".into(), json!(namespace));
            }
            Some(Value::String(named)) if named == namespace => {}
            Some(named) => {
                return Err(Failure::invalid(format!(
                    "the job names namespace {named} but --namespace (CRONSHARD_NAMESPACE) says {namespace:?}"
                )));
            }
        }
    }
    let reply = ctx.api.send(Method::POST, &["jobs"], &[], Some(Body::Json(Value::Object(job))), None).await?;
    ctx.show(&reply, job_view)
}

async fn list(ctx: &Ctx, list: JobList) -> Result<String> {
    let mut query = ctx.namespace_query();
    let filters = [("selector", list.selector), ("name_prefix", list.name_prefix), ("kind", list.kind)];
    query.extend(filters.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
    if let Some(paused) = list.paused {
        query.push(("paused", paused.to_string()));
    }
    ctx.list(&["jobs"], query, &list.paging, jobs_table).await
}

/// The job, its next fire times and its last executions, as one document:
/// `{job, next, executions}`, each the API's answer. The job is read first
/// and then asked about by its id, so all three are of the same job.
async fn describe(ctx: &Ctx, job: &str, next: u32, executions: u32) -> Result<String> {
    let job = ctx.api.get(&["jobs", job], &[]).await?.json()?;
    let id = job["id"].as_str().ok_or_else(|| Failure::other("the job as read has no id"))?.to_owned();
    let fires = ctx.api.get(&["jobs", &id, "next"], &[("count", next.to_string())]).await?.json()?;
    let runs = ctx.api.get(&["jobs", &id, "executions"], &[("limit", executions.to_string())]).await?.json()?;
    let whole = json!({ "job": job, "next": fires, "executions": runs });
    output::render(ctx.format, &whole.to_string(), &whole, describe_view)
}

/// Reads the job's version (unless `--force` or `--if-version`), then sends
/// the merge patch with `If-Match` of it: a change made in between is a 412.
async fn edit(ctx: &Ctx, edit: JobEdit) -> Result<String> {
    let mut patch = match &edit.file {
        Some(file) => input::read_object(file, "a merge patch")?,
        None => Map::new(),
    };
    for assignment in &edit.set {
        input::apply_set(&mut patch, assignment)?;
    }
    let if_match = if edit.force {
        None
    } else if let Some(version) = edit.if_version {
        Some(version)
    } else {
        let current = ctx.api.get(&["jobs", &edit.id], &[]).await?.json()?;
        Some(current["version"].as_i64().ok_or_else(|| Failure::other("the job as read has no version"))?)
    };
    let reply = ctx
        .api
        .send(Method::PATCH, &["jobs", &edit.id], &[], Some(Body::MergePatch(Value::Object(patch))), if_match)
        .await?;
    ctx.show(&reply, job_view)
}

async fn bulk(ctx: &Ctx, action: BulkAction, selector: String, yes: bool) -> Result<String> {
    if action == BulkAction::Delete && !yes {
        return Err(Failure::invalid(format!(
            "jobs bulk delete deletes every job the selector {selector:?} matches; add --yes to confirm \
             (`cronshard jobs list --selector '{selector}'` shows them)"
        )));
    }
    let mut body = json!({ "action": action.as_str(), "selector": selector });
    if let Some(namespace) = &ctx.namespace {
        body["namespace"] = json!(namespace);
    }
    let reply = ctx.api.send(Method::POST, &["jobs", "bulk"], &[], Some(Body::Json(body)), None).await?;
    ctx.show(&reply, |r| {
        format!(
            "{}: {} matched, {} changed (selector {})",
            text(&r["action"]),
            text(&r["matched"]),
            text(&r["changed"]),
            text(&r["selector"])
        )
    })
}

/// One job, field by field.
pub fn job_view(job: &Value) -> String {
    let mut rows = vec![
        ("ID", text(&job["id"])),
        ("KEY", text(&job["key"])),
        ("NAME", text(&job["name"])),
        ("NAMESPACE", text(&job["namespace"])),
        ("VERSION", text(&job["version"])),
        ("SCHEDULE", output::schedule(&job["schedule"])),
        ("PAUSED", paused(&job["paused"], &job["pause"])),
        ("NEXT FIRE (UTC)", utc(&job["next_fire_at"])),
        ("TARGET", target(&job["target"])),
        ("LABELS", output::labels(&job["labels"])),
    ];
    if let Some(retry) = job["retry"].as_object() {
        rows.push(("RETRY", format!("max {} retries", text(&retry["max_retries"]))));
    }
    if let Some(calendars) = job["calendars"].as_array().filter(|c| !c.is_empty()) {
        rows.push(("CALENDARS", calendars.iter().map(text).collect::<Vec<_>>().join(",")));
    }
    rows.push(("CREATED (UTC)", utc(&job["created_at"])));
    rows.push(("UPDATED (UTC)", utc(&job["updated_at"])));
    fields(&rows)
}

/// `jobs describe`: the definition whole, the state, the next fire times,
/// the last executions.
fn describe_view(whole: &Value) -> String {
    let job = &whole["job"];
    let mut rows = vec![
        ("ID", text(&job["id"])),
        ("KEY", text(&job["key"])),
        ("NAME", text(&job["name"])),
        ("NAMESPACE", text(&job["namespace"])),
        ("VERSION", text(&job["version"])),
        ("SCHEDULE", output::schedule(&job["schedule"])),
        ("TARGET", target(&job["target"])),
        ("LABELS", output::labels(&job["labels"])),
        ("RETRY", retry(&job["retry"])),
        ("MISFIRE", format!("{} (at most {} replayed)", text(&job["misfire"]), text(&job["misfire_cap"]))),
        ("OVERLAP", job["overlap"].as_str().unwrap_or("allow").to_owned()),
        ("JITTER", job["jitter_ms"].as_u64().map_or("-".to_owned(), |ms| format!("up to {ms} ms"))),
        (
            "CALENDARS",
            job["calendars"].as_array().map_or("-".to_owned(), |c| c.iter().map(text).collect::<Vec<_>>().join(",")),
        ),
    ];
    if let Some(completion) = job["completion"].as_object() {
        let mode = text(&completion["mode"]);
        let shown = if mode == "async" {
            format!("async (reported within {} ms)", text(&completion["timeout_ms"]))
        } else {
            mode
        };
        rows.push(("COMPLETION", shown));
    }
    if let Some(after) = job["after_completion"].as_str() {
        rows.push(("AFTER COMPLETION", after.to_owned()));
    }
    rows.push(("CREATED (UTC)", utc(&job["created_at"])));
    rows.push(("UPDATED (UTC)", utc(&job["updated_at"])));
    let mut state = vec![("PAUSED", text(&job["paused"]))];
    let pause = &job["pause"];
    if job["paused"] == true {
        state.push(("PAUSED BY", text(&pause["by"])));
        state.push(("PAUSED AT (UTC)", utc(&pause["at"])));
        state.push(("NOTE", text(&pause["note"])));
    }
    state.push(("NEXT FIRE (UTC)", utc(&job["next_fire_at"])));
    let executions = whole["executions"]["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    let fires = &whole["next"]["fire_times"];
    // The schedule's times; a paused job's are shown too (what a resume
    // would fire), marked so.
    let heading = if job["paused"] == true { "Next fire times (none fires while paused):" } else { "Next fire times:" };
    let mut out = format!("{}\n\nState:\n{}\n\n{heading}\n", fields(&rows), indent(&fields(&state)));
    if fires.as_array().is_some_and(|f| !f.is_empty()) {
        out += &indent(&output::fire_times(fires));
    } else {
        out += "  (none)";
    }
    out += "\n\nLast executions (newest first):\n";
    if executions.is_empty() {
        out += "  (none)";
    } else {
        out += &indent(&super::executions::job_executions_table(executions));
    }
    out
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
}

/// A target in one phrase: `http POST URL` or `sqs QUEUE_URL`.
fn target(target: &Value) -> String {
    match target["kind"].as_str() {
        Some("http") => format!("http {} {}", target["method"].as_str().unwrap_or("POST"), text(&target["url"])),
        Some("sqs") => format!("sqs {}", text(&target["queue_url"])),
        _ => text(target),
    }
}

/// A retry policy in one phrase; `none` without one.
fn retry(retry: &Value) -> String {
    if !retry.is_object() {
        return "none".to_owned();
    }
    format!(
        "max {} retries, {} ms first, x{}, at most {} ms apart, {} jitter",
        text(&retry["max_retries"]),
        text(&retry["base_delay_ms"]),
        text(&retry["multiplier"]),
        text(&retry["max_delay_ms"]),
        retry["jitter"].as_str().unwrap_or("equal")
    )
}

/// "false", or "true" with who paused the job, when and why.
fn paused(paused: &Value, pause: &Value) -> String {
    if paused != &Value::Bool(true) {
        return text(paused);
    }
    let mut out = "true".to_owned();
    if let Some(by) = pause["by"].as_str() {
        out += &format!(", by {by}");
    }
    if pause["at"].is_string() {
        out += &format!(" at {}", utc(&pause["at"]));
    }
    if let Some(note) = pause["note"].as_str() {
        out += &format!(": {note}");
    }
    out
}

/// A job's versions, oldest first, one line each.
fn history_view(history: &Value) -> String {
    let versions = history["versions"].as_array().map(Vec::as_slice).unwrap_or_default();
    let rows: Vec<Vec<String>> = versions
        .iter()
        .map(|v| {
            vec![
                text(&v["version"]),
                utc(&v["valid_from"]),
                text(&v["state"]),
                super::audit::actor(&v["author"]),
                text(&v["action"]),
                output::cut(&text(&v["reason"]), 40),
                output::cut(&super::audit::changed(&v["changes"]), 60),
            ]
        })
        .collect();
    let table =
        output::table(&["VERSION", "VALID FROM (UTC)", "STATE", "AUTHOR", "ACTION", "REASON", "CHANGED"], &rows);
    format!("job {}\n\n{table}", text(&history["job_id"]))
}

fn jobs_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|j| {
            vec![
                text(&j["id"]),
                text(&j["key"]),
                output::cut(&text(&j["name"]), 40),
                text(&j["namespace"]),
                output::schedule(&j["schedule"]),
                text(&j["paused"]),
                utc(&j["next_fire_at"]),
                output::labels(&j["labels"]),
            ]
        })
        .collect();
    output::table(&["ID", "KEY", "NAME", "NAMESPACE", "SCHEDULE", "PAUSED", "NEXT FIRE (UTC)", "LABELS"], &rows)
}
