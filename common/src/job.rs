//! The job model and its validation.
//!
//! `JobSpec` is what a user submits and what the `jobs.spec` column stores.
//! Input is validated from raw JSON (`JobSpec::from_json`) rather than through
//! serde's derive so that every problem is reported with the path of the field
//! that caused it (`schedule.expr`, `target.url`, ...) and all problems are
//! reported at once.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::schedule::{CompiledSchedule, CronSchedule, Recurrence, ScheduleError};

/// Limits on user input; each is named in the error that enforces it.
pub mod limits {
    pub const NAME_MAX_CHARS: usize = 200;
    pub const HEADERS_MAX: usize = 50;
    pub const HEADER_NAME_MAX_BYTES: usize = 256;
    pub const HEADER_VALUE_MAX_BYTES: usize = 8 * 1024;
    pub const BODY_MAX_BYTES: usize = 64 * 1024;
    pub const URL_MAX_BYTES: usize = 2048;
    pub const TIMEOUT_MAX_MS: u64 = 300_000;
    pub const EVERY_MAX_MS: u64 = 366 * 24 * 3_600_000;
    pub const MAX_RUNS_MAX: u64 = 1_000_000_000;
    pub const MAX_RETRIES_MAX: u32 = 50;
    pub const RETRY_DELAY_MAX_MS: u64 = 7 * 24 * 3_600_000;
    pub const MISFIRE_CAP_MAX: u32 = 10_000;
    /// SQS's own limit on `MessageGroupId` and `MessageDeduplicationId`.
    pub const SQS_ID_MAX_CHARS: usize = 128;
}

/// A job definition (the request body of `POST /v1/jobs` and `PUT /v1/jobs/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobSpec {
    #[schema(min_length = 1, max_length = 200, example = "daily-sales-report")]
    pub name: String,
    pub schedule: ScheduleSpec,
    pub target: Target,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    #[serde(default)]
    #[schema(required = false)]
    pub misfire: MisfirePolicy,
    /// Most missed slots `fire_all` replays after an outage; the rest are `missed`.
    #[serde(default = "default_misfire_cap")]
    #[schema(required = false, minimum = 1, maximum = 10_000, default = 100)]
    pub misfire_cap: u32,
    #[serde(default)]
    #[schema(required = false, default = false)]
    pub paused: bool,
}

fn default_misfire_cap() -> u32 {
    100
}

/// When a job fires: `kind` (once, interval or cron) and its fields, plus
/// the optional `start_at`, `end_at` and `max_runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScheduleSpec {
    #[serde(flatten)]
    pub kind: ScheduleKind,
    /// First instant the job may fire; also the anchor of an interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub max_runs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScheduleKind {
    /// Fires once at `at` (RFC 3339, in the future).
    Once { at: DateTime<Utc> },
    /// Fires every `every_ms` milliseconds, anchored at `start_at` (default: creation).
    Interval {
        #[schema(minimum = 1, maximum = 31_622_400_000_u64)]
        every_ms: u64,
    },
    /// Fires on a cron expression (5 or 6 fields) in an IANA time zone.
    Cron {
        #[schema(example = "0 8 * * *")]
        expr: String,
        #[schema(required = false, default = "UTC", example = "Europe/Berlin")]
        timezone: String,
    },
}

impl ScheduleSpec {
    /// The schedule as fire-time math. `created_at` anchors an interval that
    /// names no `start_at`, so its slots stay put when the job is reloaded.
    pub fn compile(&self, created_at: DateTime<Utc>) -> Result<CompiledSchedule, ScheduleError> {
        let recurrence = match &self.kind {
            ScheduleKind::Once { at } => Recurrence::Once { at: *at },
            ScheduleKind::Interval { every_ms } => {
                Recurrence::Interval { every_ms: *every_ms, anchor: self.start_at.unwrap_or(created_at) }
            }
            ScheduleKind::Cron { expr, timezone } => Recurrence::Cron(CronSchedule::parse(expr, timezone)?),
        };
        Ok(CompiledSchedule { recurrence, start_at: self.start_at, end_at: self.end_at })
    }
}

/// Where a fire is delivered: an HTTP callback or an SQS queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    Http(HttpTarget),
    Sqs(SqsTarget),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HttpTarget {
    /// An http or https URL.
    #[schema(max_length = 2048, example = "https://reports.internal/run")]
    pub url: String,
    #[schema(required = false, default = "POST", example = "POST")]
    pub method: String,
    #[serde(default)]
    #[schema(required = false)]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[schema(required = false, minimum = 1, maximum = 300_000, default = 10_000)]
    pub timeout_ms: u64,
    #[serde(default)]
    #[schema(required = false, default = false)]
    pub follow_redirects: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SqsTarget {
    #[schema(max_length = 2048)]
    pub queue_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 128)]
    pub message_group_id: Option<String>,
    /// FIFO deduplication id; defaults to the execution id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 128)]
    pub message_deduplication_id: Option<String>,
    #[serde(default)]
    #[schema(required = false)]
    pub message_attributes: BTreeMap<String, String>,
}

/// Retries of a failed delivery, with exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetryPolicy {
    #[schema(minimum = 0, maximum = 50)]
    pub max_retries: u32,
    #[schema(required = false, minimum = 1, maximum = 604_800_000, default = 30_000)]
    pub base_delay_ms: u64,
    #[schema(required = false, minimum = 1.0, maximum = 10.0, default = 2.0)]
    pub multiplier: f64,
    #[schema(required = false, minimum = 1, maximum = 604_800_000, default = 3_600_000)]
    pub max_delay_ms: u64,
}

impl RetryPolicy {
    /// Delay before retry `n` (1-based): base × multiplier^(n−1), capped.
    pub fn delay_ms(&self, retry: u32) -> u64 {
        let exp = retry.saturating_sub(1) as i32;
        let raw = self.base_delay_ms as f64 * self.multiplier.powi(exp);
        if raw.is_finite() { (raw as u64).min(self.max_delay_ms) } else { self.max_delay_ms }
    }
}

/// What to do with slots missed during an outage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MisfirePolicy {
    #[default]
    FireOnce,
    Skip,
    FireAll,
}

/// One problem with user input, named by its JSON path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

impl JobSpec {
    /// Validates a job definition given as JSON. Returns every problem found.
    pub fn from_json(value: &Value) -> Result<JobSpec, Vec<FieldError>> {
        let mut v = Validator::default();
        let spec = v.job(value);
        match spec {
            Some(spec) if v.errors.is_empty() => Ok(spec),
            _ => {
                if v.errors.is_empty() {
                    v.err("", "invalid job definition");
                }
                Err(v.errors)
            }
        }
    }

    pub fn compile(&self, created_at: DateTime<Utc>) -> Result<CompiledSchedule, ScheduleError> {
        self.schedule.compile(created_at)
    }
}

/// Walks raw JSON, collecting errors with their paths.
#[derive(Default)]
struct Validator {
    errors: Vec<FieldError>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

impl Validator {
    fn err(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError::new(field, message));
    }

    fn object<'a>(&mut self, value: &'a Value, path: &str, allowed: &[&str]) -> Option<&'a Map<String, Value>> {
        let Some(map) = value.as_object() else {
            let what = if path.is_empty() { "the request body" } else { path };
            self.err(path, format!("{what} must be a JSON object"));
            return None;
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                self.err(join(path, key), format!("unknown field; expected one of: {}", allowed.join(", ")));
            }
        }
        Some(map)
    }

    /// A present, non-null field.
    fn field<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
        map.get(key).filter(|v| !v.is_null())
    }

    fn required<'a>(&mut self, map: &'a Map<String, Value>, path: &str, key: &str) -> Option<&'a Value> {
        let value = Self::field(map, key);
        if value.is_none() {
            self.err(join(path, key), "is required");
        }
        value
    }

    fn string(&mut self, value: &Value, field: &str) -> Option<String> {
        match value.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                self.err(field, "must be a string");
                None
            }
        }
    }

    fn uint(&mut self, value: &Value, field: &str, min: u64, max: u64) -> Option<u64> {
        match value.as_u64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                self.err(field, format!("must be an integer from {min} to {max}"));
                None
            }
        }
    }

    fn instant(&mut self, value: &Value, field: &str) -> Option<DateTime<Utc>> {
        let s = self.string(value, field)?;
        match DateTime::parse_from_rfc3339(&s) {
            Ok(t) => Some(crate::execution::truncate_ms(t.with_timezone(&Utc))),
            Err(e) => {
                self.err(field, format!("must be an RFC 3339 timestamp such as 2026-12-15T15:00:00Z ({e})"));
                None
            }
        }
    }

    fn job(&mut self, value: &Value) -> Option<JobSpec> {
        let allowed = ["name", "schedule", "target", "retry", "misfire", "misfire_cap", "paused"];
        let map = self.object(value, "", &allowed)?;

        let name = self.required(map, "", "name").and_then(|v| self.string(v, "name"));
        if let Some(name) = &name {
            if name.trim().is_empty() {
                self.err("name", "must not be empty");
            } else if name.chars().count() > limits::NAME_MAX_CHARS {
                self.err("name", format!("must be at most {} characters", limits::NAME_MAX_CHARS));
            } else if name.chars().any(char::is_control) {
                self.err("name", "must not contain control characters");
            }
        }
        let schedule = self.required(map, "", "schedule").and_then(|v| self.schedule(v));
        let target = self.required(map, "", "target").and_then(|v| self.target(v));
        let retry = match Self::field(map, "retry") {
            Some(v) => Some(self.retry(v)?),
            None => None,
        };
        let misfire = match Self::field(map, "misfire") {
            Some(v) => match v.as_str() {
                Some("fire_once") => MisfirePolicy::FireOnce,
                Some("skip") => MisfirePolicy::Skip,
                Some("fire_all") => MisfirePolicy::FireAll,
                _ => {
                    self.err("misfire", "must be one of: fire_once, skip, fire_all");
                    MisfirePolicy::default()
                }
            },
            None => MisfirePolicy::default(),
        };
        let misfire_cap = match Self::field(map, "misfire_cap") {
            Some(v) => self.uint(v, "misfire_cap", 1, limits::MISFIRE_CAP_MAX.into()).unwrap_or(1) as u32,
            None => default_misfire_cap(),
        };
        let paused = match Self::field(map, "paused") {
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                self.err("paused", "must be true or false");
                false
            }
            None => false,
        };
        Some(JobSpec { name: name?, schedule: schedule?, target: target?, retry, misfire, misfire_cap, paused })
    }

    fn schedule(&mut self, value: &Value) -> Option<ScheduleSpec> {
        let p = "schedule";
        let kind_name = value.get("kind").and_then(Value::as_str);
        let specific: &[&str] = match kind_name {
            Some("once") => &["at"],
            Some("interval") => &["every_ms"],
            Some("cron") => &["expr", "timezone"],
            _ => &["at", "every_ms", "expr", "timezone"],
        };
        let mut allowed = vec!["kind", "start_at", "end_at", "max_runs"];
        allowed.extend_from_slice(specific);
        let map = self.object(value, p, &allowed)?;

        let start_at = Self::field(map, "start_at").and_then(|v| self.instant(v, "schedule.start_at"));
        let end_at = Self::field(map, "end_at").and_then(|v| self.instant(v, "schedule.end_at"));
        if let (Some(s), Some(e)) = (start_at, end_at)
            && e < s
        {
            self.err("schedule.end_at", "must not be before schedule.start_at");
        }
        let max_runs =
            Self::field(map, "max_runs").and_then(|v| self.uint(v, "schedule.max_runs", 1, limits::MAX_RUNS_MAX));

        let kind = match kind_name {
            Some("once") => {
                let at = self.required(map, p, "at").and_then(|v| self.instant(v, "schedule.at"))?;
                ScheduleKind::Once { at }
            }
            Some("interval") => {
                let every_ms = self
                    .required(map, p, "every_ms")
                    .and_then(|v| self.uint(v, "schedule.every_ms", 1, limits::EVERY_MAX_MS))?;
                ScheduleKind::Interval { every_ms }
            }
            Some("cron") => {
                let expr = self.required(map, p, "expr").and_then(|v| self.string(v, "schedule.expr"));
                let timezone = match Self::field(map, "timezone") {
                    Some(v) => self.string(v, "schedule.timezone"),
                    None => Some("UTC".to_owned()),
                };
                // Check the zone on its own so a bad zone and a bad expression
                // are both reported.
                let zone_ok = match timezone.as_deref().map(crate::schedule::parse_timezone) {
                    Some(Err(e)) => {
                        self.err("schedule.timezone", e.message);
                        false
                    }
                    _ => true,
                };
                let expr = expr?;
                let zone_for_expr = if zone_ok { timezone.as_deref().unwrap_or("UTC") } else { "UTC" };
                if let Err(e) = CronSchedule::parse(&expr, zone_for_expr) {
                    self.err(format!("schedule.{}", e.field), e.message);
                    return None;
                }
                let timezone = timezone.filter(|_| zone_ok)?;
                ScheduleKind::Cron { expr, timezone }
            }
            Some(other) => {
                self.err("schedule.kind", format!("unknown kind \"{other}\"; expected one of: once, interval, cron"));
                return None;
            }
            None => {
                self.err("schedule.kind", "is required: one of once, interval, cron");
                return None;
            }
        };
        Some(ScheduleSpec { kind, start_at, end_at, max_runs })
    }

    fn headers(&mut self, value: Option<&Value>, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(value) = value else { return out };
        let Some(map) = value.as_object() else {
            self.err(path, "must be an object of string values");
            return out;
        };
        if map.len() > limits::HEADERS_MAX {
            self.err(path, format!("at most {} entries are allowed", limits::HEADERS_MAX));
        }
        for (k, v) in map {
            let field = format!("{path}.{k}");
            let Some(s) = v.as_str() else {
                self.err(field, "must be a string");
                continue;
            };
            if k.is_empty() || !k.bytes().all(is_token_byte) {
                self.err(&field, "is not a valid name (letters, digits and !#$%&'*+-.^_`|~ only)");
            } else if k.len() > limits::HEADER_NAME_MAX_BYTES {
                self.err(&field, format!("the name must be at most {} bytes", limits::HEADER_NAME_MAX_BYTES));
            }
            if s.len() > limits::HEADER_VALUE_MAX_BYTES {
                self.err(&field, format!("must be at most {} bytes", limits::HEADER_VALUE_MAX_BYTES));
            }
            if s.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                self.err(&field, "must not contain CR, LF or NUL");
            }
            out.insert(k.clone(), s.to_owned());
        }
        out
    }

    fn body(&mut self, value: Option<&Value>, field: &str) -> Option<String> {
        let body = value.and_then(|v| self.string(v, field))?;
        if body.len() > limits::BODY_MAX_BYTES {
            self.err(field, format!("must be at most {} bytes", limits::BODY_MAX_BYTES));
        }
        Some(body)
    }

    fn target(&mut self, value: &Value) -> Option<Target> {
        let p = "target";
        match value.get("kind").and_then(Value::as_str) {
            Some("http") => {
                let allowed = ["kind", "url", "method", "headers", "body", "timeout_ms", "follow_redirects"];
                let map = self.object(value, p, &allowed)?;
                let url = self.required(map, p, "url").and_then(|v| self.string(v, "target.url"));
                if let Some(u) = &url {
                    self.http_url(u, "target.url");
                }
                let method = match Self::field(map, "method") {
                    Some(v) => self.string(v, "target.method").map(|m| m.to_ascii_uppercase()),
                    None => Some("POST".to_owned()),
                };
                if let Some(m) = &method
                    && !["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"].contains(&m.as_str())
                {
                    self.err("target.method", "must be one of GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS");
                }
                let headers = self.headers(Self::field(map, "headers"), "target.headers");
                let body = self.body(Self::field(map, "body"), "target.body");
                let timeout_ms = match Self::field(map, "timeout_ms") {
                    Some(v) => self.uint(v, "target.timeout_ms", 1, limits::TIMEOUT_MAX_MS),
                    None => Some(10_000),
                };
                let follow_redirects = match Self::field(map, "follow_redirects") {
                    Some(Value::Bool(b)) => *b,
                    Some(_) => {
                        self.err("target.follow_redirects", "must be true or false");
                        false
                    }
                    None => false,
                };
                Some(Target::Http(HttpTarget {
                    url: url?,
                    method: method?,
                    headers,
                    body,
                    timeout_ms: timeout_ms?,
                    follow_redirects,
                }))
            }
            Some("sqs") => {
                let allowed =
                    ["kind", "queue_url", "body", "message_group_id", "message_deduplication_id", "message_attributes"];
                let map = self.object(value, p, &allowed)?;
                let queue_url = self.required(map, p, "queue_url").and_then(|v| self.string(v, "target.queue_url"));
                if let Some(u) = &queue_url {
                    self.http_url(u, "target.queue_url");
                }
                let body = self.body(Self::field(map, "body"), "target.body");
                let message_group_id =
                    Self::field(map, "message_group_id").and_then(|v| self.sqs_id(v, "target.message_group_id"));
                let message_deduplication_id = Self::field(map, "message_deduplication_id")
                    .and_then(|v| self.sqs_id(v, "target.message_deduplication_id"));
                let is_fifo = queue_url.as_deref().is_some_and(|u| u.ends_with(".fifo"));
                if is_fifo && message_group_id.is_none() {
                    self.err("target.message_group_id", "is required for a FIFO queue (.fifo)");
                }
                let message_attributes =
                    self.headers(Self::field(map, "message_attributes"), "target.message_attributes");
                Some(Target::Sqs(SqsTarget {
                    queue_url: queue_url?,
                    body,
                    message_group_id,
                    message_deduplication_id,
                    message_attributes,
                }))
            }
            Some(other) => {
                self.err("target.kind", format!("unknown kind \"{other}\"; expected one of: http, sqs"));
                None
            }
            None => {
                if value.is_object() {
                    self.err("target.kind", "is required: one of http, sqs");
                } else {
                    self.err("target", "must be a JSON object");
                }
                None
            }
        }
    }

    /// A FIFO group or deduplication id: 1 to 128 characters, as SQS requires.
    fn sqs_id(&mut self, value: &Value, field: &str) -> Option<String> {
        let id = self.string(value, field)?;
        if id.is_empty() || id.chars().count() > limits::SQS_ID_MAX_CHARS {
            self.err(field, format!("must be 1 to {} characters", limits::SQS_ID_MAX_CHARS));
        }
        Some(id)
    }

    fn http_url(&mut self, raw: &str, field: &str) {
        if raw.len() > limits::URL_MAX_BYTES {
            self.err(field, format!("must be at most {} bytes", limits::URL_MAX_BYTES));
            return;
        }
        match url::Url::parse(raw) {
            Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {
                if u.host_str().is_none_or(str::is_empty) {
                    self.err(field, "must name a host");
                }
                if !u.username().is_empty() || u.password().is_some() {
                    self.err(field, "must not carry credentials; use target.headers");
                }
            }
            Ok(u) => self.err(field, format!("scheme \"{}\" is not allowed; use http or https", u.scheme())),
            Err(e) => self.err(field, format!("is not a valid URL ({e})")),
        }
    }

    fn retry(&mut self, value: &Value) -> Option<RetryPolicy> {
        let p = "retry";
        let map = self.object(value, p, &["max_retries", "base_delay_ms", "multiplier", "max_delay_ms"])?;
        let max_retries = self
            .required(map, p, "max_retries")
            .and_then(|v| self.uint(v, "retry.max_retries", 0, limits::MAX_RETRIES_MAX.into()));
        let base_delay_ms = match Self::field(map, "base_delay_ms") {
            Some(v) => self.uint(v, "retry.base_delay_ms", 1, limits::RETRY_DELAY_MAX_MS),
            None => Some(30_000),
        };
        let multiplier = match Self::field(map, "multiplier") {
            Some(v) => match v.as_f64() {
                Some(m) if (1.0..=10.0).contains(&m) => Some(m),
                _ => {
                    self.err("retry.multiplier", "must be a number from 1.0 to 10.0");
                    None
                }
            },
            None => Some(2.0),
        };
        let max_delay_ms = match Self::field(map, "max_delay_ms") {
            Some(v) => self.uint(v, "retry.max_delay_ms", 1, limits::RETRY_DELAY_MAX_MS),
            None => Some(3_600_000),
        };
        if let (Some(b), Some(m)) = (base_delay_ms, max_delay_ms)
            && m < b
        {
            self.err("retry.max_delay_ms", "must not be less than retry.base_delay_ms");
        }
        Some(RetryPolicy {
            max_retries: max_retries? as u32,
            base_delay_ms: base_delay_ms?,
            multiplier: multiplier?,
            max_delay_ms: max_delay_ms?,
        })
    }
}

/// RFC 9110 token characters, the only ones allowed in a header name.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn valid() -> Value {
        json!({
            "name": "daily-sales-report",
            "schedule": { "kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin" },
            "target": { "kind": "http", "url": "https://reports.internal/run", "method": "POST",
                        "headers": { "content-type": "application/json" }, "body": "{}", "timeout_ms": 10000 },
            "retry": { "max_retries": 3, "base_delay_ms": 30000, "multiplier": 2.0 },
            "misfire": "fire_once",
            "paused": false
        })
    }

    fn fields(value: Value) -> Vec<String> {
        JobSpec::from_json(&value).unwrap_err().into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn accepts_the_documented_example_and_round_trips_through_storage() {
        let spec = JobSpec::from_json(&valid()).unwrap();
        assert_eq!(spec.retry.unwrap().max_delay_ms, 3_600_000);
        let stored = serde_json::to_value(&spec).unwrap();
        let back: JobSpec = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(back, spec);
        assert_eq!(JobSpec::from_json(&stored).unwrap(), spec);
    }

    #[test]
    fn names_each_bad_field() {
        let mut v = valid();
        v["schedule"]["expr"] = json!("61 * * * *");
        assert_eq!(fields(v), ["schedule.expr"]);

        let mut v = valid();
        v["schedule"]["timezone"] = json!("Mars/Olympus");
        assert_eq!(fields(v.clone()), ["schedule.timezone"]);
        v["schedule"]["expr"] = json!("not cron");
        assert_eq!(fields(v), ["schedule.timezone", "schedule.expr"]);

        let v = json!({ "name": "x", "schedule": { "kind": "interval", "every_ms": 0 }, "target": valid()["target"] });
        assert_eq!(fields(v), ["schedule.every_ms"]);
        let v = json!({ "name": "x", "schedule": { "kind": "interval", "every_ms": -5 }, "target": valid()["target"] });
        assert_eq!(fields(v), ["schedule.every_ms"]);

        let v = json!({ "name": "x", "schedule": { "kind": "once", "at": "tomorrow" }, "target": valid()["target"] });
        assert_eq!(fields(v), ["schedule.at"]);

        let mut v = valid();
        v["target"]["url"] = json!("ftp://example.com/x");
        assert_eq!(fields(v), ["target.url"]);

        let mut v = valid();
        v.as_object_mut().unwrap().remove("target");
        assert_eq!(fields(v), ["target"]);
    }

    #[test]
    fn reports_all_problems_at_once_and_rejects_unknown_fields() {
        let v = json!({ "name": "", "schedule": { "kind": "weekly" }, "target": { "kind": "http", "url": "nope" }, "colour": 1 });
        let f = fields(v);
        assert!(f.contains(&"colour".to_owned()), "{f:?}");
        assert!(f.contains(&"name".to_owned()), "{f:?}");
        assert!(f.contains(&"schedule.kind".to_owned()), "{f:?}");
        assert!(f.contains(&"target.url".to_owned()), "{f:?}");
    }

    #[test]
    fn header_injection_is_refused() {
        let mut v = valid();
        v["target"]["headers"] = json!({ "x-a": "1\r\nHost: evil" });
        assert_eq!(fields(v), ["target.headers.x-a"]);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy { max_retries: 5, base_delay_ms: 30_000, multiplier: 2.0, max_delay_ms: 100_000 };
        assert_eq!([1, 2, 3, 4].map(|n| p.delay_ms(n)), [30_000, 60_000, 100_000, 100_000]);
    }
}
