//! `cronshard calendars ...`: `/v1/calendars`.

use reqwest::Method;
use serde_json::Value;

use super::Ctx;
use crate::args::Calendars;
use crate::client::Body;
use crate::failure::Result;
use crate::input;
use crate::output::{self, fields, text, utc};

pub async fn run(ctx: &Ctx, command: Calendars) -> Result<String> {
    let ns = ctx.namespace_query();
    match command {
        Calendars::Put { name, file } => {
            let calendar = input::read_object(&file, "a calendar")?;
            let body = Some(Body::Json(Value::Object(calendar)));
            let reply = ctx.api.send(Method::PUT, &["calendars", &name], &ns, body, None).await?;
            ctx.show(&reply, calendar_view)
        }
        Calendars::Get { name } => {
            let reply = ctx.api.get(&["calendars", &name], &ns).await?;
            ctx.show(&reply, calendar_view)
        }
        Calendars::List { paging } => ctx.list(&["calendars"], ns, &paging, calendars_table).await,
        Calendars::Delete { name } => {
            ctx.api.send(Method::DELETE, &["calendars", &name], &ns, None, None).await?;
            Ok(ctx.done(format!("calendar {name} deleted")))
        }
    }
}

fn joined(v: &Value) -> String {
    match v.as_array() {
        Some(items) if !items.is_empty() => items.iter().map(text).collect::<Vec<_>>().join(", "),
        _ => "-".to_owned(),
    }
}

fn ranges(v: &Value) -> String {
    match v.as_array() {
        Some(items) if !items.is_empty() => {
            items.iter().map(|r| format!("{}..{}", text(&r["from"]), text(&r["to"]))).collect::<Vec<_>>().join(", ")
        }
        _ => "-".to_owned(),
    }
}

fn calendar_view(c: &Value) -> String {
    fields(&[
        ("NAME", text(&c["name"])),
        ("NAMESPACE", text(&c["namespace"])),
        ("VERSION", text(&c["version"])),
        ("TIMEZONE", text(&c["timezone"])),
        ("DATES", joined(&c["dates"])),
        ("RANGES", ranges(&c["ranges"])),
        ("RULES", joined(&c["rules"])),
        ("DESCRIPTION", text(&c["description"])),
        ("UPDATED (UTC)", utc(&c["updated_at"])),
    ])
}

fn calendars_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|c| {
            let count = |k: &str| c[k].as_array().map_or(0, Vec::len);
            vec![
                text(&c["namespace"]),
                text(&c["name"]),
                text(&c["version"]),
                text(&c["timezone"]),
                format!("{} dates, {} ranges, {} rules", count("dates"), count("ranges"), count("rules")),
                utc(&c["updated_at"]),
            ]
        })
        .collect();
    output::table(&["NAMESPACE", "NAME", "VERSION", "TIMEZONE", "EXCLUDES", "UPDATED (UTC)"], &rows)
}
