//! `cronshard executions ...`: ledger rows, explain, replay.

use reqwest::Method;
use serde_json::{Value, json};

use super::Ctx;
use crate::args::{Completion, ExecutionList, Executions, Replay};
use crate::client::Body;
use crate::failure::Result;
use crate::output::{self, fields, text, utc};

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
    let query: Vec<(&'static str, String)> = [("status", list.status), ("from", list.from), ("to", list.to)]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
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

/// One execution, field by field.
pub fn execution_view(e: &Value) -> String {
    let mut rows = vec![
        ("EXECUTION ID", text(&e["execution_id"])),
        ("JOB", text(&e["job_id"])),
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
        ("JOB", text(&v["job_id"])),
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

fn executions_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|e| {
            let detail = [&e["error"], &e["reason"]].into_iter().find(|v| !v.is_null()).map(text).unwrap_or_default();
            vec![
                utc(&e["scheduled_at"]),
                text(&e["job_id"]),
                text(&e["status"]),
                text(&e["trigger"]),
                text(&e["attempts"]),
                text(&e["http_status"]),
                output::cut(&detail, 60),
            ]
        })
        .collect();
    output::table(&["SCHEDULED AT (UTC)", "JOB", "STATUS", "TRIGGER", "ATTEMPTS", "HTTP", "ERROR / REASON"], &rows)
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
