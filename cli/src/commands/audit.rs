//! `cronshard audit`: `/v1/audit`, who changed what, when and why.

use serde_json::Value;

use super::Ctx;
use crate::args::AuditList;
use crate::failure::Result;
use crate::output::{self, text, utc};

pub async fn run(ctx: &Ctx, list: AuditList) -> Result<String> {
    let mut query = ctx.namespace_query();
    let filters = [
        ("job", list.job),
        ("actor", list.actor),
        ("action", list.action),
        ("since", list.since),
        ("until", list.until),
    ];
    query.extend(filters.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
    ctx.list(&["audit"], query, &list.paging, audit_table).await
}

fn audit_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|e| {
            let mut resource = text(&e["resource_id"]);
            if let Some(version) = e["job_version"].as_i64() {
                resource.push_str(&format!(" v{version}"));
            }
            let changed = match e["changes"].as_array() {
                Some(changes) if !changes.is_empty() => self::changed(&e["changes"]),
                _ => details(&e["details"]),
            };
            vec![
                utc(&e["at"]),
                text(&e["namespace"]),
                actor(&e["actor"]),
                text(&e["action"]),
                resource,
                output::cut(&text(&e["reason"]), 40),
                output::cut(&changed, 60),
            ]
        })
        .collect();
    output::table(&["AT (UTC)", "NAMESPACE", "ACTOR", "ACTION", "RESOURCE", "REASON", "CHANGED"], &rows)
}

/// Who made a change (`{name, token_id}`): the token's name; `-` for the
/// cluster itself.
pub fn actor(actor: &Value) -> String {
    text(&actor["name"])
}

/// The paths of a list of changes (`[{path, before?, after?}]`), the whole
/// definition (path `""`) shown as `(created)` or `(removed)`; `-` for none.
pub fn changed(changes: &Value) -> String {
    let changes = changes.as_array().map(Vec::as_slice).unwrap_or_default();
    if changes.is_empty() {
        return "-".to_owned();
    }
    changes
        .iter()
        .map(|c| match c["path"].as_str() {
            Some("") | None if c.get("before").is_none() => "(created)".to_owned(),
            Some("") | None if c.get("after").is_none() => "(removed)".to_owned(),
            Some("") | None => "(whole definition)".to_owned(),
            Some(path) => crate::text::escape(path).into_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A change of something other than a job's definition (`details`):
/// `key: before → after` for each `{before, after}` that differs, `key=value`
/// for the rest, `name` first; `-` for none.
fn details(details: &Value) -> String {
    let Some(map) = details.as_object().filter(|m| !m.is_empty()) else { return "-".to_owned() };
    // The name first: what a create or delete was of.
    let (named, rest): (Vec<_>, Vec<_>) = map.iter().partition(|(key, _)| *key == "name");
    let shown: Vec<String> = named
        .into_iter()
        .chain(rest)
        .filter_map(|(key, v)| {
            let key = crate::text::escape(key);
            match (v.get("before"), v.get("after")) {
                (Some(before), Some(after)) if before == after => None,
                (Some(before), Some(after)) => Some(format!("{key}: {} → {}", text(before), text(after))),
                _ => Some(format!("{key}={}", text(v))),
            }
        })
        .collect();
    if shown.is_empty() { "-".to_owned() } else { shown.join(", ") }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn changes_are_summed_up_by_their_paths_and_details_by_what_differs() {
        assert_eq!(super::changed(&json!([{"path": "", "after": {"name": "x"}}])), "(created)");
        assert_eq!(super::changed(&json!([{"path": "", "before": {"name": "x"}}])), "(removed)");
        assert_eq!(
            super::changed(&json!([{"path": "schedule.expr", "before": "0 8 * * *", "after": "15 3 * * *"},
                                   {"path": "labels.tier", "after": "batch"}])),
            "schedule.expr, labels.tier"
        );
        assert_eq!(super::changed(&json!([])), "-");
        assert_eq!(
            super::details(&json!({"enabled": {"before": true, "after": false},
                                   "channels": {"before": ["c"], "after": ["c"]}})),
            "enabled: true → false"
        );
        assert_eq!(super::details(&json!({"name": "ops", "kind": "slack"})), "name=ops, kind=slack");
        assert_eq!(super::details(&json!(null)), "-");
    }
}
