//! What several routes read from a request or answer the same way: page
//! sizes, cursors, instants, statuses, slot paths, and "no such job".

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use domain::job::FieldError;
use domain::slot::Status;

use crate::error::{ApiError, ApiResult, field};

/// A request body that must be a JSON object of the `allowed` fields: each
/// unknown field is a problem naming it, as in a job definition. `None`
/// (with the problem recorded) when the body is not an object.
pub fn body_object<'a>(
    body: &'a Value,
    allowed: &[&str],
    problems: &mut Vec<FieldError>,
) -> Option<&'a serde_json::Map<String, Value>> {
    let Some(map) = body.as_object() else {
        problems.push(FieldError::new("", "the request body must be a JSON object"));
        return None;
    };
    for key in map.keys().filter(|k| !allowed.contains(&k.as_str())) {
        problems.push(FieldError::new(key.as_str(), format!("unknown field; expected one of: {}", allowed.join(", "))));
    }
    Some(map)
}

/// The answer for a job id that names no job.
pub fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound(format!("no job with id {id}"))
}

/// Largest page a listing returns; the default is 50.
pub const PAGE_MAX: i64 = 500;

pub fn parse_limit(raw: Option<&str>) -> ApiResult<i64> {
    match raw {
        None => Ok(50),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if (1..=PAGE_MAX).contains(&n) => Ok(n),
            _ => Err(field("limit", format!("must be an integer from 1 to {PAGE_MAX}"))),
        },
    }
}

/// A `cursor` that is the `scheduled_at` of the last item of a page.
pub fn parse_cursor(raw: Option<&str>) -> ApiResult<Option<DateTime<Utc>>> {
    match raw {
        None | Some("") => Ok(None),
        Some(c) => DateTime::parse_from_rfc3339(c)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|_| field("cursor", "is not a cursor returned by this endpoint")),
    }
}

/// A `status` filter, one of `allowed`.
pub fn parse_status(raw: Option<&str>, allowed: &[Status]) -> ApiResult<Option<Status>> {
    match raw.map(str::parse::<Status>) {
        None => Ok(None),
        Some(Ok(s)) if allowed.contains(&s) => Ok(Some(s)),
        Some(_) => Err(field("status", format!("must be one of {}", Status::list(allowed)))),
    }
}

/// An RFC 3339 instant in the query parameter `name`.
pub fn parse_time(raw: Option<&str>, name: &str) -> ApiResult<Option<DateTime<Utc>>> {
    raw.map(|s| {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| field(name, "must be an RFC 3339 timestamp such as 2026-12-15T15:00:00Z"))
    })
    .transpose()
}

/// A filter on one job, in parameter `name`: its id, key or
/// `namespace:key` (absent or empty: no filter).
pub async fn parse_job_filter(
    state: &crate::AppState,
    caller: &crate::caller::Caller,
    name: &str,
    raw: Option<&str>,
) -> ApiResult<Option<Uuid>> {
    let Some(raw) = raw.filter(|r| !r.is_empty()) else { return Ok(None) };
    match crate::job_ref::resolve(state, caller, raw).await {
        Ok(id) => Ok(Some(id)),
        Err(ApiError::NotFound(_)) => Err(field(name, "names no job: give a job's id, key or namespace:key")),
        Err(e) => Err(e),
    }
}

/// A slot named by a path: its job (an id, a key or `namespace:key`) and
/// an RFC 3339 instant.
pub async fn parse_slot(
    state: &crate::AppState,
    caller: &crate::caller::Caller,
    job: &str,
    at: &str,
) -> ApiResult<(Uuid, DateTime<Utc>)> {
    let at = DateTime::parse_from_rfc3339(at)
        .map_err(|_| field("scheduled_at", "must be an RFC 3339 timestamp such as 2026-12-15T15:00:00.000Z"))?
        .with_timezone(&Utc);
    let job_id = crate::job_ref::resolve(state, caller, job).await?;
    Ok((job_id, at))
}

/// A request's `namespace` parameter, when given, checked as a name (one
/// that is not could never name a namespace, and may hold what Postgres
/// text cannot).
pub fn namespace_param(name: Option<&str>) -> ApiResult<()> {
    match name {
        Some(name) => namespace_name(name).map_err(|why| field("namespace", why)),
        None => Ok(()),
    }
}

/// A namespace name is what Kubernetes accepts as a DNS label: 1-63
/// characters of a-z, 0-9 and '-', starting and ending with a letter or
/// digit (the table's CHECK holds the same rule). The error says why not.
pub fn namespace_name(name: &str) -> Result<(), &'static str> {
    let ok = (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err("must be 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit")
    }
}

/// An integer query parameter in `range`, or `default` when absent; a 422 naming it otherwise.
pub fn int_param(raw: Option<&str>, name: &str, range: std::ops::RangeInclusive<i64>, default: i64) -> ApiResult<i64> {
    match raw {
        None => Ok(default),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if range.contains(&n) => Ok(n),
            _ => Err(field(name, format!("must be an integer from {} to {}", range.start(), range.end()))),
        },
    }
}
