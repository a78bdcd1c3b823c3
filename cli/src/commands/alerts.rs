//! `cronshard alerts ...`: the rules that watch jobs (`/v1/alert-rules`)
//! and the incidents they opened, with their notices (`/v1/alerts`).

use reqwest::Method;
use serde_json::{Value, json};

use super::Ctx;
use crate::args::{AlertList, AlertRules, Alerts, RuleCreate};
use crate::client::Body;
use crate::failure::Result;
use crate::output::{self, fields, text, utc};

pub async fn run(ctx: &Ctx, command: Alerts) -> Result<String> {
    match command {
        Alerts::Rules(command) => rules(ctx, command).await,
        Alerts::List(list) => incidents(ctx, list).await,
    }
}

async fn rules(ctx: &Ctx, command: AlertRules) -> Result<String> {
    match command {
        AlertRules::Create(rule) => create(ctx, rule).await,
        AlertRules::List => {
            let reply = ctx.api.get(&["alert-rules"], &[]).await?;
            ctx.show_items(&reply, rules_table)
        }
        AlertRules::Enable { id } => switch(ctx, &id, true).await,
        AlertRules::Disable { id } => switch(ctx, &id, false).await,
        AlertRules::Delete { id } => {
            ctx.api.send(Method::DELETE, &["alert-rules", &id], &[], None, None).await?;
            Ok(ctx.done(format!("alert rule {id} deleted")))
        }
    }
}

async fn create(ctx: &Ctx, rule: RuleCreate) -> Result<String> {
    let mut body = json!({
        "name": rule.name,
        "condition": rule.condition,
        "channels": rule.channels,
        "enabled": !rule.disabled,
    });
    match rule.selector {
        Some(selector) => body["selector"] = json!(selector),
        None => {
            let mut ids = Vec::with_capacity(rule.jobs.len());
            for job in &rule.jobs {
                ids.push(ctx.job_id(job).await?);
            }
            body["jobs"] = json!(ids);
        }
    }
    if let Some(threshold) = rule.threshold {
        body["threshold"] = json!(threshold);
    }
    if let Some(namespace) = &ctx.namespace {
        body["namespace"] = json!(namespace);
    }
    let reply = ctx.api.send(Method::POST, &["alert-rules"], &[], Some(Body::Json(body)), None).await?;
    ctx.show(&reply, rule_view)
}

async fn switch(ctx: &Ctx, id: &str, enabled: bool) -> Result<String> {
    let body = Some(Body::Json(json!({ "enabled": enabled })));
    let reply = ctx.api.send(Method::PATCH, &["alert-rules", id], &[], body, None).await?;
    ctx.show(&reply, rule_view)
}

async fn incidents(ctx: &Ctx, list: AlertList) -> Result<String> {
    let mut query: Vec<(&'static str, String)> =
        [("job", list.job), ("rule", list.rule)].into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
    if list.open || list.resolved {
        query.push(("open", list.open.to_string()));
    }
    if let Some(limit) = list.limit {
        query.push(("limit", limit.to_string()));
    }
    let reply = ctx.api.get(&["alerts"], &query).await?;
    ctx.show(&reply, |page| incidents_table(page["items"].as_array().map_or(&[], Vec::as_slice)))
}

/// The condition with its threshold: `late (> 30000 ms)`.
fn condition(rule: &Value) -> String {
    let condition = text(&rule["condition"]);
    match (condition.as_str(), rule["threshold"].as_i64()) {
        ("consecutive_failures", Some(n)) => format!("{condition} ({n} in a row)"),
        ("late", Some(ms)) => format!("{condition} (> {ms} ms)"),
        ("silent", Some(ms)) => format!("{condition} (no success for {ms} ms)"),
        (_, Some(n)) => format!("{condition} ({n})"),
        (_, None) => condition,
    }
}

/// The jobs a rule watches: `selector S`, or `jobs ID, ID`.
fn watches(rule: &Value) -> String {
    match rule["jobs"].as_array() {
        Some(jobs) if rule["selector"].is_null() => {
            format!("jobs {}", jobs.iter().map(text).collect::<Vec<_>>().join(", "))
        }
        _ => format!("selector {}", text(&rule["selector"])),
    }
}

fn ids(v: &Value) -> String {
    match v.as_array() {
        Some(items) if !items.is_empty() => items.iter().map(text).collect::<Vec<_>>().join(", "),
        _ => "-".to_owned(),
    }
}

fn rule_view(r: &Value) -> String {
    fields(&[
        ("ID", text(&r["id"])),
        ("NAME", text(&r["name"])),
        ("NAMESPACE", text(&r["namespace"])),
        ("WATCHES", watches(r)),
        ("CONDITION", condition(r)),
        ("CHANNELS", ids(&r["channels"])),
        ("ENABLED", text(&r["enabled"])),
        ("CREATED (UTC)", utc(&r["created_at"])),
    ])
}

fn rules_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|r| {
            vec![
                text(&r["id"]),
                text(&r["namespace"]),
                text(&r["name"]),
                output::cut(&watches(r), 50),
                condition(r),
                r["channels"].as_array().map_or(0, Vec::len).to_string(),
                text(&r["enabled"]),
            ]
        })
        .collect();
    output::table(&["ID", "NAMESPACE", "NAME", "WATCHES", "CONDITION", "CHANNELS", "ENABLED"], &rows)
}

/// Each notice of an incident: `firing delivered`, `resolved pending (2
/// attempts, HTTP 503: ...)`.
fn notices(incident: &Value) -> String {
    let notices = incident["notifications"].as_array().map(Vec::as_slice).unwrap_or_default();
    if notices.is_empty() {
        return "-".to_owned();
    }
    notices
        .iter()
        .map(|n| {
            let mut shown = format!("{} {}", text(&n["kind"]), text(&n["state"]));
            let attempts = n["attempts"].as_i64().unwrap_or(0);
            if n["state"] != "delivered" && attempts > 0 {
                let mut why = Vec::new();
                if let Some(status) = n["last_status"].as_i64() {
                    why.push(format!("HTTP {status}"));
                }
                if let Some(error) = n["last_error"].as_str() {
                    why.push(output::cut(error, 40));
                }
                let why = if why.is_empty() { String::new() } else { format!(", {}", why.join(": ")) };
                shown.push_str(&format!(" ({attempts} attempts{why})"));
            }
            shown
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn incidents_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|i| {
            let job = if i["job_name"].is_null() { text(&i["job_id"]) } else { text(&i["job_name"]) };
            vec![
                utc(&i["opened_at"]),
                utc(&i["resolved_at"]),
                text(&i["rule_name"]),
                text(&i["condition"]),
                job,
                output::cut(&text(&i["summary"]), 60),
                notices(i),
            ]
        })
        .collect();
    output::table(&["OPENED (UTC)", "RESOLVED (UTC)", "RULE", "CONDITION", "JOB", "SUMMARY", "NOTICES"], &rows)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn an_incident_shows_each_notice_and_why_one_is_not_delivered() {
        let incident = json!({
            "opened_at": "2026-12-07T09:00:00Z", "resolved_at": null, "rule_name": "sales-failing",
            "condition": "failed", "job_id": "j", "job_name": "daily-sales-report",
            "summary": "Execution 2026-12-07T08:00:00.000Z failed: HTTP 503",
            "notifications": [
                {"kind": "firing", "state": "delivered", "attempts": 1, "last_status": 200, "last_error": null},
                {"kind": "resolved", "state": "pending", "attempts": 2, "last_status": 503, "last_error": "HTTP 503"},
            ],
        });
        let shown = super::incidents_table(&[incident]);
        let line = shown.lines().nth(1).unwrap();
        assert!(line.starts_with("2026-12-07T09:00:00.000Z  -  "), "{shown}");
        assert!(line.contains("daily-sales-report"), "{shown}");
        assert!(line.ends_with("firing delivered; resolved pending (2 attempts, HTTP 503: HTTP 503)"), "{shown}");
        assert_eq!(super::condition(&json!({"condition": "late", "threshold": 30000})), "late (> 30000 ms)");
        assert_eq!(super::condition(&json!({"condition": "failed", "threshold": null})), "failed");
        assert_eq!(super::watches(&json!({"jobs": ["a", "b"], "selector": null})), "jobs a, b");
        assert_eq!(super::watches(&json!({"jobs": null, "selector": "team=pay"})), "selector team=pay");
    }
}
