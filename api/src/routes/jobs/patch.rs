//! `PATCH /v1/jobs/{id}`: a JSON Merge Patch (RFC 7396) of the job's stored
//! definition. The patch applies to what is stored, so secret header values
//! the client never saw are kept; the result is validated as a create's
//! body is and then written by the replace's step (`update_job`: namespace,
//! quota, new version, cancelled rows), so a patch is a replace with the
//! definition the server computed.

use axum::extract::State;
use axum::http::HeaderMap;
use chrono::Utc;
use serde_json::{Map, Value};

use super::{VersionedJob, check_version, if_match, job_of, lock_for_change, parsed, update_job};
use crate::AppState;
use crate::caller::{Caller, Role};
use crate::error::ApiResult;
use crate::extract::{JobIdPath, MergePatchBody};

/// RFC 7396 §2: an object patch merges into the target member by member, a
/// `null` member removes that member, and anything else replaces the target
/// whole (arrays included).
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(object) = target {
        for (key, value) in members {
            if value.is_null() {
                object.remove(key);
            } else {
                merge(object.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

#[utoipa::path(
    patch,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    description = "A JSON Merge Patch of the job's stored definition. Like a replace it keeps the job's state: a \
                   patch that would pause or resume it is refused (use the pause and resume routes).",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
        ("If-Match" = Option<String>, Header, description = "The version the change is based on, e.g. \"3\"; `*` or absent: any"),
    ),
    request_body(
        description = "A JSON Merge Patch (RFC 7396) of the job's definition: the fields to change, nested objects \
                       merged member by member, `null` to remove a field (`{\"retry\": null}`, \
                       `{\"target\": {\"headers\": {\"X-Team\": null}}}`); arrays are replaced whole. Secret header \
                       values not named stay as stored. Sent as application/merge-patch+json or application/json.",
        content(
            (crate::model::Object = "application/merge-patch+json"),
            (crate::model::Object = "application/json"),
        )
    ),
    responses(
        (status = 200, description = "The patched job; `ETag` is its new version", body = crate::model::Job),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        crate::model::JobNotFound,
        (status = 409, description = "The change would take the namespace over its quota", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 412, description = "`If-Match` names a version other than the current one", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::PayloadTooLarge,
        (status = 415, description = "The body is neither application/merge-patch+json nor application/json \
                                      (`Accept-Patch` names the patch format)", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The patched definition is not valid (as a create's body would not be); \
                                      `errors` names each bad field", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn patch(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    headers: HeaderMap,
    MergePatchBody(patch): MergePatchBody,
) -> ApiResult<VersionedJob> {
    caller.require(Role::Write)?;
    let expected = if_match(&headers)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let before = lock_for_change(&tx, &caller, id).await?;
    check_version(id, &before, expected)?;
    let mut definition = serde_json::to_value(&before.spec)?;
    // The column is the truth about pausing (the spec's copy follows it).
    definition["paused"] = Value::Bool(before.paused);
    merge(&mut definition, &patch);
    let parsed = parsed(&definition, &state.limits)?;
    let stored =
        update_job(&state, &tx, super::Change::of(&caller, store::audit::Action::JobPatch), id, &before, parsed)
            .await?;
    tx.commit().await?;
    Ok(VersionedJob(job_of(&stored, Utc::now())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The examples of RFC 7396, Appendix A.
    #[test]
    fn merge_follows_rfc_7396() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (json!({"a":"b","b":"c"}), json!({"a":null}), json!({"b":"c"})),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (json!({"a":{"b":"c"}}), json!({"a":{"b":"d","c":null}}), json!({"a":{"b":"d"}})),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (json!({}), json!({"a":{"bb":{"ccc":null}}}), json!({"a":{"bb":{}}})),
        ];
        for (target, patch, expected) in cases {
            let mut merged = target.clone();
            merge(&mut merged, &patch);
            assert_eq!(merged, expected, "{target} + {patch}");
        }
    }
}
