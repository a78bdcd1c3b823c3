//! `cronshard executions ...`: ledger rows, explain, replay.

use std::collections::HashMap;
use std::io::Write;

use reqwest::Method;
use serde_json::{Value, json};

use super::Ctx;
use crate::args::{Completion, ExecutionList, Executions, Replay};
use crate::client::Body;
use crate::failure::{Exit, Failure, Result};
use crate::output::{self, Format, fields, text, utc};

pub async fn run(ctx: &Ctx, command: Executions) -> Result<String> {
    match command {
        Executions::List(list) => self::list(ctx, list).await,
        Executions::Explain { job_id, scheduled_at } => {
            let reply = ctx.api.get(&["jobs", &job_id, "executions", &scheduled_at], &[]).await?;
            ctx.show(&reply, explanation_view)
        }
        Executions::Replay(replay) => self::replay(ctx, replay).await,
        Executions::Complete(report) => complete(ctx, report).await,
    }
}

async fn complete(ctx: &Ctx, report: Completion) -> Result<String> {
    let mut token = reqwest::header::HeaderValue::from_str(&report.completion_token).map_err(|_| {
        crate::failure::Failure::invalid(
            "the completion token (--completion-token, CRONSHARD_COMPLETION_TOKEN) holds characters a header cannot",
        )
    })?;
    token.set_sensitive(true);
    let name = reqwest::header::HeaderName::from_static("x-cronshard-completion-token");
    let mut body = json!({ "status": report.status });
    if let Some(result) = report.result {
        body["result"] = json!(result);
    }
    let segments = ["executions", report.execution_id.as_str(), "complete"];
    let reply =
        ctx.api.send_with_headers(Method::POST, &segments, &[], Some(Body::Json(body)), vec![(name, token)]).await?;
    ctx.show(&reply, |v| {
        let now = if v["recorded_now"].as_bool() == Some(false) { " (reported before)" } else { "" };
        fields(&[
            ("EXECUTION ID", text(&v["execution_id"])),
            ("ATTEMPT", text(&v["attempt"])),
            ("STATUS", format!("{}{now}", text(&v["status"]))),
        ])
    })
}

async fn list(ctx: &Ctx, list: ExecutionList) -> Result<String> {
    let query: Vec<(&'static str, String)> =
        [("status", list.status.clone()), ("from", list.from.clone()), ("to", list.to.clone())]
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
    if list.watch {
        return watch(ctx, &list, query).await;
    }
    match &list.job {
        // A job's own route answers 404 for a job that does not exist.
        Some(job) => ctx.list(&["jobs", job, "executions"], query, &list.paging, executions_table).await,
        None => ctx.list(&["executions"], query, &list.paging, executions_table).await,
    }
}

async fn replay(ctx: &Ctx, r: Replay) -> Result<String> {
    let retry = r.retry();
    if let (Some(job), Some(at)) = (&r.job_id, &r.scheduled_at) {
        let body = retry.map(|retry| Body::Json(json!({ "retry": retry })));
        let reply = ctx.api.send(Method::POST, &["executions", job, at, "replay"], &[], body, None).await?;
        return ctx.show(&reply, execution_view);
    }
    let mut body = serde_json::Map::new();
    let filters = [
        ("status", r.status),
        ("job_id", r.job),
        ("trigger", r.trigger),
        ("error_contains", r.error_contains),
        ("from", r.from),
        ("to", r.to),
    ];
    for (key, value) in filters {
        if let Some(value) = value {
            body.insert(key.into(), json!(value));
        }
    }
    if let Some(limit) = r.limit {
        body.insert("limit".into(), json!(limit));
    }
    if let Some(retry) = retry {
        body.insert("retry".into(), retry);
    }
    let reply =
        ctx.api.send(Method::POST, &["executions", "replay"], &[], Some(Body::Json(Value::Object(body))), None).await?;
    ctx.show(&reply, |v| {
        let items = v["items"].as_array().map(Vec::as_slice).unwrap_or_default();
        format!("replayed {}\n\n{}", text(&v["replayed"]), executions_table(items))
    })
}

/// `executions list --watch`: the newest page, then every `--interval` the
/// rows of the newest page not printed yet, or printed with another status
/// or attempt count, oldest first, until Ctrl-C, `--for` or `--count`.
///
/// A row is known by its execution id. Only the rows of the last page are
/// remembered (a row that has left the newest page never comes back to
/// it), so the memory stays one page, however long the watch.
async fn watch(ctx: &Ctx, list: &ExecutionList, mut query: Vec<(&'static str, String)>) -> Result<String> {
    query.push(("limit", list.paging.limit.unwrap_or(50).to_string()));
    let segments: Vec<&str> = match &list.job {
        Some(job) => vec!["jobs", job, "executions"],
        None => vec!["executions"],
    };
    let deadline = list.for_.map(|d| tokio::time::Instant::now() + d);
    let mut seen: HashMap<String, (Value, Value)> = HashMap::new();
    let mut printed = 0u64;
    let mut stream = Stream::new(ctx.format);
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        match ctx.api.get(&segments, &query).await {
            Ok(reply) => {
                let page = reply.json()?;
                let items = page["items"].as_array().map(Vec::as_slice).unwrap_or_default();
                let mut now = HashMap::with_capacity(items.len());
                // The API lists newest first; a stream reads forward in time.
                for e in items.iter().rev() {
                    let id = e["execution_id"].as_str().map(str::to_owned).unwrap_or_else(|| text(&e["scheduled_at"]));
                    let state = (e["status"].clone(), e["attempts"].clone());
                    if seen.get(&id) != Some(&state) {
                        if !stream.row(e)? {
                            return Ok(String::new()); // stdout closed (`| head`)
                        }
                        printed += 1;
                        if list.count.is_some_and(|n| printed >= n) {
                            return Ok(String::new());
                        }
                    }
                    now.insert(id, state);
                }
                seen = now;
            }
            // A watch outlives a restart of the API or a network blip: said
            // on stderr, tried again at the next poll.
            Err(failure) if failure.exit == Exit::Unavailable => eprintln!("{failure} (trying again)"),
            Err(failure) => return Err(failure),
        }
        let mut wake = tokio::time::Instant::now() + list.interval;
        if let Some(deadline) = deadline {
            if tokio::time::Instant::now() >= deadline {
                return Ok(String::new());
            }
            wake = wake.min(deadline);
        }
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = &mut interrupted => return Ok(String::new()),
        }
    }
}

/// Rows written as they come: a table with fixed columns (the widths of
/// rows not seen yet are unknown), JSON Lines, or YAML documents.
struct Stream {
    format: Format,
    header: bool,
}

/// The columns of a streamed table and their widths (the last one is not padded).
const STREAM_COLUMNS: [(&str, usize); 7] = [
    ("SCHEDULED AT (UTC)", 24),
    ("JOB", 30),
    ("STATUS", 10),
    ("TRIGGER", 9),
    ("ATTEMPTS", 8),
    ("HTTP", 4),
    ("ERROR / REASON", 0),
];

impl Stream {
    fn new(format: Format) -> Stream {
        Stream { format, header: false }
    }

    /// Writes one row and flushes it; `false` once stdout is closed.
    fn row(&mut self, e: &Value) -> Result<bool> {
        let text = match self.format {
            Format::Table => {
                let mut out = String::new();
                if !self.header {
                    out += &fixed(&STREAM_COLUMNS.map(|(h, _)| h.to_owned()));
                    out.push('\n');
                    self.header = true;
                }
                let cells: Vec<String> = execution_row(e, true);
                out += &fixed(&cells.try_into().expect("a row has a cell per column"));
                out.push('\n');
                out
            }
            Format::Json => format!("{}\n", crate::output::json_line(e)),
            Format::Yaml => format!("---\n{}", crate::output::yaml(e)?),
        };
        let mut stdout = std::io::stdout().lock();
        match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(Failure::other(format!("cannot write the output: {e}"))),
        }
    }
}

/// Cells padded to the stream's column widths, each cut to fit, escaped.
fn fixed(cells: &[String; 7]) -> String {
    let mut out = String::new();
    for ((_, width), cell) in STREAM_COLUMNS.iter().zip(cells) {
        let cell = crate::text::escape(cell).into_owned();
        if *width == 0 {
            out += &cell;
        } else {
            let cell = output::cut(&cell, *width);
            out += &cell;
            out += &" ".repeat(width - cell.chars().count() + 2);
        }
    }
    out.trim_end().to_owned()
}

/// Which job an execution is of, for people: its key, else its name, else its id.
pub fn job_label(e: &Value) -> String {
    [&e["job_key"], &e["job_name"], &e["job_id"]]
        .into_iter()
        .find(|v| !v.is_null())
        .map(text)
        .unwrap_or_else(|| "-".to_owned())
}

/// One execution, field by field.
pub fn execution_view(e: &Value) -> String {
    let mut rows = vec![
        ("EXECUTION ID", text(&e["execution_id"])),
        ("JOB", job_label(e)),
        ("JOB ID", text(&e["job_id"])),
        ("SCHEDULED AT (UTC)", utc(&e["scheduled_at"])),
        ("STATUS", text(&e["status"])),
        ("TRIGGER", text(&e["trigger"])),
        ("ATTEMPTS", text(&e["attempts"])),
    ];
    for (label, key) in [("HTTP STATUS", "http_status"), ("ERROR", "error"), ("REASON", "reason")] {
        if !e[key].is_null() {
            rows.push((label, text(&e[key])));
        }
    }
    rows.extend(answer_rows(e));
    fields(&rows)
}

/// What the receiver said, as the ledger keeps it (masked, bounded), and
/// until when an accepted attempt awaits its report.
fn answer_rows(e: &Value) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    if let Some(headers) = e["response_headers"].as_object().filter(|h| !h.is_empty()) {
        let kept: Vec<String> = headers.iter().map(|(name, value)| format!("{name}: {}", text(value))).collect();
        rows.push(("RESPONSE HEADERS", kept.join("; ")));
    }
    if let Some(excerpt) = e["response_excerpt"].as_str().filter(|x| !x.is_empty()) {
        rows.push(("RESPONSE", output::cut(excerpt, 200)));
    }
    if !e["awaiting_until"].is_null() {
        rows.push(("AWAITING REPORT UNTIL (UTC)", utc(&e["awaiting_until"])));
    }
    rows
}

/// Did the slot fire, and why (not): the verdict, the summary, the timeline.
fn explanation_view(v: &Value) -> String {
    let x = &v["explanation"];
    let fired = if x["fired"].as_bool() == Some(true) { "fired" } else { "did not fire" };
    let mut rows = vec![
        ("JOB", job_label(v)),
        ("SLOT (UTC)", utc(&v["scheduled_at"])),
        ("VERDICT", format!("{} ({fired})", text(&x["verdict"]))),
        ("PREVIOUS FIRE (UTC)", utc(&x["previous_fire_at"])),
        ("NEXT FIRE (UTC)", utc(&x["next_fire_at"])),
    ];
    if !x["delivery_at"].is_null() {
        rows.push(("DELIVERED AT (UTC)", utc(&x["delivery_at"])));
    }
    let e = &v["execution"];
    if !e.is_null() {
        rows.push(("STATUS", text(&e["status"])));
        if !e["http_status"].is_null() {
            rows.push(("HTTP STATUS", text(&e["http_status"])));
        }
        rows.extend(answer_rows(e));
    }
    let mut out = fields(&rows);
    out.push_str(&format!("\n\n{}\n", text(&x["summary"])));
    let details = x["details"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !details.is_empty() {
        out.push_str("\nTimeline:\n");
        for line in details {
            out.push_str(&format!("  - {}\n", text(line)));
        }
    }
    out
}

/// An execution's cells: when, the job (with `job`), status, trigger,
/// attempts, HTTP status, and its error or reason.
fn execution_row(e: &Value, job: bool) -> Vec<String> {
    let detail = [&e["error"], &e["reason"]].into_iter().find(|v| !v.is_null()).map(text).unwrap_or_default();
    let mut row = vec![utc(&e["scheduled_at"])];
    if job {
        row.push(job_label(e));
    }
    row.extend([
        text(&e["status"]),
        text(&e["trigger"]),
        text(&e["attempts"]),
        text(&e["http_status"]),
        output::cut(&detail, 60),
    ]);
    row
}

fn executions_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items.iter().map(|e| execution_row(e, true)).collect();
    output::table(&["SCHEDULED AT (UTC)", "JOB", "STATUS", "TRIGGER", "ATTEMPTS", "HTTP", "ERROR / REASON"], &rows)
}

/// One job's executions (`jobs describe`): the job goes without saying.
pub fn job_executions_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items.iter().map(|e| execution_row(e, false)).collect();
    output::table(&["SCHEDULED AT (UTC)", "STATUS", "TRIGGER", "ATTEMPTS", "HTTP", "ERROR / REASON"], &rows)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn an_explanation_shows_what_the_receiver_said_and_an_awaited_report() {
        let explained = json!({
            "job_id": "j", "scheduled_at": "2026-12-07T08:00:00.000Z",
            "explanation": { "verdict": "fired", "fired": true, "summary": "Attempt 1 was accepted.", "details": [] },
            "execution": {
                "status": "running", "http_status": 202, "response_excerpt": "{\"queued\":true}",
                "response_headers": { "content-type": "application/json", "x-request-id": "r-1" },
                "awaiting_until": "2026-12-07T09:00:00.000Z",
            },
        });
        let shown = super::explanation_view(&explained);
        for expected in [
            "HTTP STATUS",
            "202",
            "content-type: application/json; x-request-id: r-1",
            "{\"queued\":true}",
            "AWAITING REPORT UNTIL (UTC)",
            "2026-12-07T09:00:00.000Z",
        ] {
            assert!(shown.contains(expected), "{expected:?} missing from:\n{shown}");
        }
        let plain = json!({ "explanation": { "summary": "s" }, "execution": { "status": "succeeded" } });
        assert!(!super::explanation_view(&plain).contains("RESPONSE"), "nothing said, nothing shown");
    }
}
