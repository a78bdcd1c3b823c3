//! What changed between two versions of a definition, as people read it in
//! the audit log and a job's history: one [`Change`] per leaf that differs,
//! named by its path (`target.url`, `labels.team`, `schedule.expr`).
//! Secret header values are never shown: both sides read
//! [`SECRET_SHOWN_AS`], and a value that changed says so.

use serde::Serialize;
use serde_json::Value;

/// What the API shows instead of a secret header's value.
pub const SECRET_SHOWN_AS: &str = "***";
/// What a history shows for a secret header's value that changed.
pub const SECRET_CHANGED_SHOWN_AS: &str = "*** (changed)";

/// One difference: `before` absent for an added field, `after` for a removed one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Change {
    /// Dotted path of the field (`""` for the whole definition).
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// A stored definition as people may see it: secret header values masked.
pub fn masked(spec: &Value) -> Value {
    let mut out = spec.clone();
    if let Some(headers) = out.pointer_mut("/target/secret_headers").and_then(Value::as_object_mut) {
        for v in headers.values_mut() {
            *v = Value::String(SECRET_SHOWN_AS.to_owned());
        }
    }
    out
}

/// The changes from `before` to `after` (stored definitions; `None`: the
/// definition did not exist), secret values masked.
pub fn changes(before: Option<&Value>, after: Option<&Value>) -> Vec<Change> {
    let mut out = Vec::new();
    match (before, after) {
        (None, None) => {}
        (None, Some(a)) => out.push(Change { path: String::new(), before: None, after: Some(masked(a)) }),
        (Some(b), None) => out.push(Change { path: String::new(), before: Some(masked(b)), after: None }),
        (Some(b), Some(a)) => {
            let mut a_masked = masked(a);
            // A secret value that differs is marked so on the after side.
            if let (Some(old), Some(new)) = (
                b.pointer("/target/secret_headers").and_then(Value::as_object),
                a.pointer("/target/secret_headers").and_then(Value::as_object),
            ) && let Some(shown) = a_masked.pointer_mut("/target/secret_headers").and_then(Value::as_object_mut)
            {
                for (name, value) in new {
                    if old.get(name).is_some_and(|o| o != value) {
                        shown.insert(name.clone(), Value::String(SECRET_CHANGED_SHOWN_AS.to_owned()));
                    }
                }
            }
            walk("", &masked(b), &a_masked, &mut out);
        }
    }
    out
}

fn walk(path: &str, before: &Value, after: &Value, out: &mut Vec<Change>) {
    if before == after {
        return;
    }
    let join = |k: &str| if path.is_empty() { k.to_owned() } else { format!("{path}.{k}") };
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, bv) in b {
                match a.get(k) {
                    Some(av) => walk(&join(k), bv, av, out),
                    None => out.push(Change { path: join(k), before: Some(bv.clone()), after: None }),
                }
            }
            for (k, av) in a {
                if !b.contains_key(k) {
                    out.push(Change { path: join(k), before: None, after: Some(av.clone()) });
                }
            }
        }
        _ => out.push(Change { path: path.to_owned(), before: Some(before.clone()), after: Some(after.clone()) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leaves_that_differ_are_named_by_path_and_secrets_never_shown() {
        let before = json!({"name": "a", "schedule": {"kind": "cron", "expr": "0 * * * *"},
                            "target": {"url": "http://x", "secret_headers": {"Authorization": "cs1:k:old", "X-Key": "cs1:k:same"}}});
        let after = json!({"name": "a", "schedule": {"kind": "cron", "expr": "5 * * * *"}, "labels": {"team": "pay"},
                           "target": {"url": "http://x", "secret_headers": {"Authorization": "cs1:k:new", "X-Key": "cs1:k:same"}}});
        let c = changes(Some(&before), Some(&after));
        let paths: Vec<&str> = c.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["schedule.expr", "target.secret_headers.Authorization", "labels"]);
        assert_eq!(c[1].before, Some(json!(SECRET_SHOWN_AS)));
        assert_eq!(c[1].after, Some(json!(SECRET_CHANGED_SHOWN_AS)));
        let text = serde_json::to_string(&c).unwrap();
        assert!(!text.contains("cs1:"), "no sealed or clear secret value in a diff: {text}");
        let created = changes(None, Some(&after));
        assert_eq!(created.len(), 1);
        assert!(!serde_json::to_string(&created).unwrap().contains("cs1:"));
    }
}
