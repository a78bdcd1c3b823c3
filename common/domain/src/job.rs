//! The job model and its validation.
//!
//! `JobSpec` is what a user submits and what the `jobs.spec` column stores.
//! Input is validated from raw JSON (`JobSpec::from_json`) rather than through
//! serde's derive so that every problem is reported with the path of the field
//! that caused it (`schedule.expr`, `target.url`, ...) and all problems are
//! reported at once, up to `limits::FIELD_ERRORS_MAX` of them.
//!
//! What the operator decides (the minimum interval, the internal address
//! ranges callback URLs may name) is a `Limits`, given to
//! `JobSpec::from_json_with`; `JobSpec::from_json` applies the defaults.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::contract::{StatusPattern, SuccessRule};
use crate::schedule::{CompiledSchedule, CronSchedule, DstRule, Missing, Recurrence, Repeated, ScheduleError};
use crate::text::{excerpt, first_hidden, hidden_problem, quoted};

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
    /// SQS allows 10 message attributes and the worker adds 6 (the three
    /// `X-Cronshard-*` and the three `webhook-*` of a signed delivery).
    pub const SQS_ATTRIBUTES_MAX: usize = 4;
    /// SQS's limit on an attribute name.
    pub const SQS_ATTRIBUTE_NAME_MAX_CHARS: usize = 256;
    /// Field errors one validation reports; the last one says how many more there were.
    pub const FIELD_ERRORS_MAX: usize = 50;
    /// The default smallest interval between two fires (`MIN_INTERVAL_MS`).
    pub const MIN_INTERVAL_MS_DEFAULT: u64 = 1_000;
    /// The largest minimum interval an operator may set (an hour).
    pub const MIN_INTERVAL_MS_MAX: u64 = 3_600_000;
    /// Labels on one job.
    pub const LABELS_MAX: usize = 64;
    /// The widest jitter (an hour): a worker holds a pre-armed slot until
    /// its jittered instant, so the spread is bounded.
    pub const JITTER_MAX_MS: u64 = 3_600_000;
    /// A job's own misfire threshold: at least a second (a slot is never
    /// less late than the claim's round trip), at most a week.
    pub const STARTING_DEADLINE_MIN_MS: u64 = 1_000;
    pub const STARTING_DEADLINE_MAX_MS: u64 = 7 * 86_400_000;
    /// Calendars one job may reference.
    pub const CALENDARS_MAX: usize = 16;
    /// Bounds of `completion.timeout_ms`.
    pub const COMPLETION_TIMEOUT_MIN_MS: u64 = 1_000;
    pub const COMPLETION_TIMEOUT_MAX_MS: u64 = 7 * 24 * 3_600_000;
    /// Bytes of a cron expression (a job's or a calendar rule), checked
    /// before it is parsed.
    pub const CRON_EXPR_MAX_BYTES: usize = 1024;
    /// Expressions of one cron schedule (`schedule.exprs`).
    pub const CRON_EXPRS_MAX: usize = 20;
    /// Characters of a user's key (a label key, a header name, an unknown
    /// field) that an error's field path quotes: every valid key whole.
    pub const KEY_IN_PATH_MAX_CHARS: usize = 320;
}

/// What the operator decides about job definitions; the API's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Smallest `every_ms` of an interval schedule, and smallest gap between
    /// two fires of a cron expression (`MIN_INTERVAL_MS`).
    pub min_interval_ms: u64,
    /// Internal ranges a callback or queue URL may name as an IP literal
    /// anyway (`CALLBACK_ALLOW_CIDRS`, as the workers are given it).
    pub allow_cidrs: Vec<ipnet::IpNet>,
}

/// What is wrong with `raw` as an http(s) URL the cluster will call (a
/// callback, an alert channel): too long, hidden characters, not http(s),
/// no host, credentials in it, or an IP literal in a refused range unless
/// `limits` allows it. `what` names such URLs in the refusal, and
/// `credentials_hint` follows the refusal of credentials (where they go
/// instead). Empty when it is fine.
///
/// What is stored is the text given, not the parsed URL, and the URL
/// parser drops tabs and line breaks and percent-encodes other controls
/// without a word: a control, bidi or zero-width character anywhere is
/// refused first, so none is stored, returned or printed.
pub fn http_url_problems(raw: &str, limits: &Limits, what: &str, credentials_hint: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if raw.len() > limits::URL_MAX_BYTES {
        problems.push(format!("must be at most {} bytes", limits::URL_MAX_BYTES));
        return problems;
    }
    if let Some(c) = first_hidden(raw) {
        problems.push(format!("{} (percent-encode it if the URL needs it)", hidden_problem(c)));
        return problems;
    }
    match url::Url::parse(raw) {
        Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {
            if u.host_str().is_none_or(str::is_empty) {
                problems.push("must name a host".to_owned());
            }
            if !u.username().is_empty() || u.password().is_some() {
                problems.push(format!("must not carry credentials{credentials_hint}"));
            }
            if let Some(refusal) =
                crate::netguard::literal_host(&u).and_then(|ip| crate::netguard::refusal(ip, &limits.allow_cidrs))
            {
                problems.push(format!(
                    "refers to {refusal}; {what} are refused unless the operator allows them with CALLBACK_ALLOW_CIDRS"
                ));
            }
        }
        Ok(u) => problems.push(format!("scheme {} is not allowed; use http or https", quoted(u.scheme()))),
        Err(e) => problems.push(format!("is not a valid URL ({e})")),
    }
    problems
}

impl Default for Limits {
    /// The API's defaults: a 1 s minimum interval, no internal address allowed.
    fn default() -> Self {
        Self { min_interval_ms: limits::MIN_INTERVAL_MS_DEFAULT, allow_cidrs: Vec::new() }
    }
}

impl Limits {
    /// No operator policy: any interval, any address. For tools that check
    /// the shape of a definition the API has already accepted.
    pub fn unrestricted() -> Self {
        Self {
            min_interval_ms: 1,
            allow_cidrs: vec![ipnet::IpNet::V4(Default::default()), ipnet::IpNet::V6(Default::default())],
        }
    }
}

/// A job definition (the request body of `POST /v1/jobs` and `PUT /v1/jobs/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobSpec {
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200, example = "daily-sales-report"))]
    pub name: String,
    pub schedule: ScheduleSpec,
    pub target: Target,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// What happens to slots more than the misfire threshold late: missed
    /// while no scheduler owned the job, or reaching a worker that late.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub misfire: MisfirePolicy,
    /// How late a slot may still fire before the misfire policy decides it
    /// (the job's own misfire threshold, like Kubernetes' `startingDeadlineSeconds`);
    /// absent: the cluster's `MISFIRE_THRESHOLD_MS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(required = false, minimum = 1_000, maximum = 604_800_000, example = 300_000)
    )]
    pub starting_deadline_ms: Option<u64>,
    /// Most missed slots `fire_all` replays after an outage; the rest are `missed`.
    #[serde(default = "default_misfire_cap")]
    #[cfg_attr(feature = "openapi", schema(required = false, minimum = 1, maximum = 10_000, default = 100))]
    pub misfire_cap: u32,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = false, default = false))]
    pub paused: bool,
    /// `key=value` labels in Kubernetes label syntax, for selectors and bulk actions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "openapi", schema(required = false, example = json!({"team": "payments", "tier": "batch"})))]
    pub labels: BTreeMap<String, String>,
    /// What a slot does when the job's previous execution is still running or retrying.
    #[serde(default, skip_serializing_if = "Overlap::is_allow")]
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub overlap: Overlap,
    /// Delivery of each slot is delayed by a fixed pseudo-random offset in
    /// `[0, jitter_ms)`, derived from the job id and the slot, so a herd of
    /// jobs sharing a schedule spreads out; the slot's scheduled time and
    /// execution id do not change. 0 = none.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[cfg_attr(feature = "openapi", schema(required = false, minimum = 0, maximum = 3_600_000, default = 0))]
    pub jitter_ms: u64,
    /// Names of calendars (in the job's namespace) whose excluded times the
    /// job does not fire at: such a slot is recorded `skipped`, reason `calendar:NAME`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(required = false, max_items = 16))]
    pub calendars: Vec<String>,
    /// How a delivery completes: `sync` (the default: the HTTP answer is
    /// the outcome) or `async` (a 202 answer starts work the receiver
    /// reports done later, within `timeout_ms`). HTTP targets only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub completion: Option<Completion>,
    /// What becomes of a one-time job once its slot's delivery reached a
    /// final outcome: `keep` (the default) or `delete` (the job is deleted;
    /// its ledger rows stay).
    #[serde(default, skip_serializing_if = "AfterCompletion::is_keep")]
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub after_completion: AfterCompletion,
}

/// How a delivery's outcome is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Completion {
    pub mode: CompletionMode,
    /// `async`: how long after its 202 an attempt waits for the receiver's
    /// report before it counts as failed (and is retried by the retry
    /// policy). 1 s to 7 days; default 1 hour.
    #[serde(default = "default_completion_timeout_ms")]
    #[cfg_attr(
        feature = "openapi",
        schema(required = false, minimum = 1000, maximum = 604_800_000, default = 3_600_000)
    )]
    pub timeout_ms: u64,
}

impl Completion {
    pub fn is_async(completion: Option<&Completion>) -> bool {
        completion.is_some_and(|c| c.mode == CompletionMode::Async)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CompletionMode {
    /// The HTTP answer is the outcome.
    Sync,
    /// A 202 answer leaves the attempt running until the receiver reports
    /// `succeeded` or `failed` (`POST /v1/executions/{execution_id}/complete`
    /// with the attempt's completion token), or its timeout passes.
    Async,
}

fn default_completion_timeout_ms() -> u64 {
    3_600_000
}

/// What becomes of a one-time job after its final outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AfterCompletion {
    #[default]
    Keep,
    /// Deleted once its slot's delivery succeeded or failed for good (a
    /// slot skipped or missed leaves it in place, to be looked at).
    Delete,
}

impl AfterCompletion {
    pub fn is_keep(&self) -> bool {
        *self == AfterCompletion::Keep
    }

    pub fn is_delete(&self) -> bool {
        *self == AfterCompletion::Delete
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a slot does when the job's previous execution is still running or
/// retrying (Kubernetes `concurrencyPolicy`, Temporal's overlap policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Both run (the default).
    #[default]
    Allow,
    /// The newer slot is recorded `skipped`, reason `overlap`.
    Forbid,
    /// The newer slot runs; the older execution's remaining retries are
    /// cancelled and it is recorded `skipped`, reason `replaced`.
    Replace,
}

impl Overlap {
    pub fn is_allow(&self) -> bool {
        *self == Overlap::Allow
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Forbid => "forbid",
            Overlap::Replace => "replace",
        }
    }
}

fn default_misfire_cap() -> u32 {
    100
}

/// When a job fires: `kind` (once, interval or cron) and its fields, plus
/// the optional `start_at`, `end_at` and `max_runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleSpec {
    #[serde(flatten)]
    pub kind: ScheduleKind,
    /// First instant the job may fire; also the anchor of an interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000_000))]
    pub max_runs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScheduleKind {
    /// Fires once at `at` (RFC 3339, in the future).
    Once { at: DateTime<Utc> },
    /// Fires every `every_ms` milliseconds, anchored at `start_at` (default:
    /// creation). The least `every_ms` is the operator's `MIN_INTERVAL_MS`
    /// (default 1000).
    Interval {
        #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_622_400_000_u64))]
        every_ms: u64,
    },
    /// Fires on a cron expression (5 or 6 fields), or on several (`exprs`,
    /// their union), in an IANA time zone; exactly one of `expr` and
    /// `exprs`. `dst` says what a repeated or skipped wall time does.
    Cron {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(example = "0 8 * * *"))]
        expr: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 20, example = json!(["0 9 * * MON-FRI", "0 11 * * SAT,SUN"])))]
        exprs: Option<Vec<String>>,
        #[cfg_attr(feature = "openapi", schema(required = false, default = "UTC", example = "Europe/Berlin"))]
        timezone: String,
        /// Omitted (and not stored) when it is the default rule.
        #[serde(default, skip_serializing_if = "DstRule::is_default")]
        #[cfg_attr(feature = "openapi", schema(required = false))]
        dst: DstRule,
    },
}

impl ScheduleKind {
    /// A cron schedule's expressions, whether given as `expr` or `exprs`
    /// (empty for the other kinds).
    pub fn cron_exprs(&self) -> Vec<&str> {
        match self {
            ScheduleKind::Cron { expr, exprs, .. } => {
                expr.iter().chain(exprs.iter().flatten()).map(String::as_str).collect()
            }
            _ => Vec::new(),
        }
    }
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
            ScheduleKind::Cron { timezone, dst, .. } => {
                Recurrence::Cron(CronSchedule::parse_all(&self.kind.cron_exprs(), timezone, *dst)?)
            }
        };
        Ok(CompiledSchedule { recurrence, start_at: self.start_at, end_at: self.end_at })
    }
}

/// Where a fire is delivered: an HTTP callback or an SQS queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    Http(HttpTarget),
    Sqs(SqsTarget),
}

/// An HTTP callback. Header names are RFC 9110 tokens (case-insensitive, so
/// a name may appear once across `headers` and `secret_headers`); values are
/// RFC 9110 field values: no control characters but tab, no leading or
/// trailing space or tab. Reserved names are refused: `X-Cronshard-*`
/// (cronshard's own), `Host`, `Content-Length`, `Transfer-Encoding` (set from
/// the URL and body) and the hop-by-hop `Connection`, `Keep-Alive`,
/// `Proxy-Connection`, `TE`, `Trailer` and `Upgrade`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HttpTarget {
    /// An http or https URL. An IP literal in an internal range (loopback,
    /// private, link-local, cloud metadata, ...) is refused unless the
    /// operator allows it with `CALLBACK_ALLOW_CIDRS`.
    #[cfg_attr(feature = "openapi", schema(max_length = 2048, example = "https://reports.internal/run"))]
    pub url: String,
    #[cfg_attr(feature = "openapi", schema(required = false, default = "POST", example = "POST"))]
    pub method: String,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub headers: BTreeMap<String, String>,
    /// Write-only: headers sent with every delivery like `headers`, for
    /// credentials (`Authorization`, API keys). Stored and delivered, never
    /// returned by the API.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "openapi", schema(required = false, write_only))]
    pub secret_headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[cfg_attr(feature = "openapi", schema(required = false, minimum = 1, maximum = 300_000, default = 10_000))]
    pub timeout_ms: u64,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = false, default = false))]
    pub follow_redirects: bool,
    /// With `follow_redirects`: also send `headers` and `secret_headers` after
    /// a redirect to another origin (scheme, host or port). By default they
    /// are dropped there, so a redirect cannot carry credentials elsewhere.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = false, default = false))]
    pub forward_headers_on_redirect: bool,
    /// What counts as a successful delivery; absent: any 2xx.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub success: Option<SuccessRule>,
    /// The statuses a failed delivery is retried on (within the retry
    /// policy); any other status that is not a success fails at once, its
    /// reason recorded. Absent: 408, 425, 429 and 5xx. Network errors and
    /// timeouts are always retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(required = false, max_items = 32, example = json!([429, "5xx"])))]
    pub retry_statuses: Option<Vec<StatusPattern>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SqsTarget {
    #[cfg_attr(feature = "openapi", schema(max_length = 2048))]
    pub queue_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub message_group_id: Option<String>,
    /// FIFO deduplication id; defaults to the execution id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub message_deduplication_id: Option<String>,
    /// String attributes of the message: at most 4 (SQS allows 10 and
    /// cronshard adds `X-Cronshard-Execution-Id`, `-Scheduled-At`,
    /// `-Attempt`, `webhook-id`, `webhook-timestamp` and `webhook-signature`);
    /// names 1–256 of `A-Za-z0-9_.-` without a leading, trailing or doubled
    /// period, an `AWS.`/`Amazon.` prefix, an `X-Cronshard-` prefix or a
    /// `webhook-` prefix; values non-empty, of the characters SQS accepts.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub message_attributes: BTreeMap<String, String>,
}

/// Retries of a failed delivery, with exponential backoff and jitter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RetryPolicy {
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 50))]
    pub max_retries: u32,
    #[cfg_attr(feature = "openapi", schema(required = false, minimum = 1, maximum = 604_800_000, default = 30_000))]
    pub base_delay_ms: u64,
    #[cfg_attr(feature = "openapi", schema(required = false, minimum = 1.0, maximum = 10.0, default = 2.0))]
    pub multiplier: f64,
    #[cfg_attr(feature = "openapi", schema(required = false, minimum = 1, maximum = 604_800_000, default = 3_600_000))]
    pub max_delay_ms: u64,
    /// How each delay is spread: `equal` (the default) waits half the
    /// backoff plus a random share of the other half, `full` a random share
    /// of all of it, `none` exactly the backoff.
    #[serde(default, skip_serializing_if = "Jitter::is_default")]
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub jitter: Jitter,
}

/// How a retry's delay is spread, so that deliveries that failed together
/// (a receiver's outage) do not all come back at the same instant. The
/// share is drawn from the execution id and the attempt, not a random
/// generator: the same attempt always waits the same, whichever worker
/// decides it or however often it is decided again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// backoff / 2 + a share of backoff / 2: never less than half.
    #[default]
    Equal,
    /// A share of the whole backoff, from 0.
    Full,
    /// Exactly the backoff.
    None,
}

impl Jitter {
    fn is_default(&self) -> bool {
        *self == Jitter::Equal
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Jitter::Equal => "equal",
            Jitter::Full => "full",
            Jitter::None => "none",
        }
    }
}

impl RetryPolicy {
    /// Validates a retry policy given on its own (as in a replay request),
    /// naming fields under `retry.`.
    pub fn from_json(value: &Value) -> Result<RetryPolicy, Vec<FieldError>> {
        let limits = Limits::default();
        let mut v = Validator { limits: &limits, errors: Vec::new(), dropped: 0 };
        match v.retry(value) {
            Some(policy) if v.errors.is_empty() => Ok(policy),
            _ => Err(v.finish()),
        }
    }

    /// The backoff before retry `n` (1-based): base × multiplier^(n−1),
    /// capped at `max_delay_ms`, before jitter.
    pub fn delay_ms(&self, retry: u32) -> u64 {
        let exp = retry.saturating_sub(1) as i32;
        let raw = self.base_delay_ms as f64 * self.multiplier.powi(exp);
        if raw.is_finite() { (raw as u64).min(self.max_delay_ms) } else { self.max_delay_ms }
    }

    /// The delay before retry `n` of execution `execution_id`: the backoff
    /// spread by the policy's jitter, with a share drawn from the two.
    pub fn jittered_delay_ms(&self, retry: u32, execution_id: &str) -> u64 {
        let backoff = self.delay_ms(retry);
        let draw = {
            use std::hash::Hasher;
            let mut h = siphasher::sip::SipHasher13::new_with_keys(0x6a69_7474_6572, 0x6372_6f6e_7368_6172);
            h.write(execution_id.as_bytes());
            h.write_u32(retry);
            h.finish()
        };
        match self.jitter {
            Jitter::None => backoff,
            Jitter::Full => draw % (backoff + 1),
            Jitter::Equal => backoff / 2 + draw % (backoff - backoff / 2 + 1),
        }
    }
}

/// What to do with slots not started on time: missed while the job had no
/// live owner (decided by the scheduler), or reaching a worker later than
/// the misfire threshold (decided by the worker, under overload or after a
/// backlog).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum MisfirePolicy {
    #[default]
    FireOnce,
    Skip,
    FireAll,
}

impl MisfirePolicy {
    pub fn as_str(&self) -> &'static str {
        match self {
            MisfirePolicy::FireOnce => "fire_once",
            MisfirePolicy::Skip => "skip",
            MisfirePolicy::FireAll => "fire_all",
        }
    }
}

/// A slot started later than this after its due time is a misfire: the
/// scheduler's default, and the worker's, which must agree (one setting,
/// `MISFIRE_THRESHOLD_MS`, read by both).
pub const MISFIRE_THRESHOLD_DEFAULT_MS: u64 = 30_000;

/// One problem with user input, named by its JSON path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Validates a job definition given as JSON under the default `Limits`.
    /// Returns every problem found (up to `limits::FIELD_ERRORS_MAX`).
    pub fn from_json(value: &Value) -> Result<JobSpec, Vec<FieldError>> {
        Self::from_json_with(value, &Limits::default())
    }

    /// Validates a job definition given as JSON under the operator's `Limits`.
    pub fn from_json_with(value: &Value, limits: &Limits) -> Result<JobSpec, Vec<FieldError>> {
        let mut v = Validator { limits, errors: Vec::new(), dropped: 0 };
        let spec = v.job(value);
        match spec {
            Some(spec) if v.errors.is_empty() => Ok(spec),
            _ => {
                if v.errors.is_empty() {
                    v.err("", "invalid job definition");
                }
                Err(v.finish())
            }
        }
    }

    pub fn compile(&self, created_at: DateTime<Utc>) -> Result<CompiledSchedule, ScheduleError> {
        self.schedule.compile(created_at)
    }

    /// How late a slot of this job may still fire: its own
    /// `starting_deadline_ms`, else the cluster's threshold.
    pub fn misfire_threshold(&self, cluster: chrono::TimeDelta) -> chrono::TimeDelta {
        self.starting_deadline_ms.map_or(cluster, misfire_threshold_of)
    }
}

/// A `starting_deadline_ms` as a duration (bounded by validation; a stored
/// value beyond chrono's range reads as the largest).
pub fn misfire_threshold_of(ms: u64) -> chrono::TimeDelta {
    chrono::TimeDelta::try_milliseconds(ms.min(i64::MAX as u64) as i64).unwrap_or(chrono::TimeDelta::MAX)
}

/// At most `limits::FIELD_ERRORS_MAX` errors: when there are more, the last
/// one kept says how many were left out, so a large body of bad fields
/// cannot produce a larger answer.
pub fn cap_field_errors(mut errors: Vec<FieldError>) -> Vec<FieldError> {
    if errors.len() > limits::FIELD_ERRORS_MAX {
        let more = errors.len() - (limits::FIELD_ERRORS_MAX - 1);
        errors.truncate(limits::FIELD_ERRORS_MAX - 1);
        errors.push(more_problems(more));
    }
    errors
}

fn more_problems(n: usize) -> FieldError {
    FieldError::new("", format!("{n} more problems are not listed; fix the ones above and try again"))
}

/// Walks raw JSON, collecting errors with their paths.
struct Validator<'l> {
    limits: &'l Limits,
    /// At most `limits::FIELD_ERRORS_MAX`; the rest are counted in `dropped`.
    errors: Vec<FieldError>,
    dropped: usize,
}

/// The path of `key` under `path`. The key is the user's: a path quotes at
/// most `KEY_IN_PATH_MAX_CHARS` of it, hidden characters escaped.
fn join(path: &str, key: &str) -> String {
    let key = excerpt(key, limits::KEY_IN_PATH_MAX_CHARS);
    if path.is_empty() { key } else { format!("{path}.{key}") }
}

impl Validator<'_> {
    fn err(&mut self, field: impl Into<String>, message: impl Into<String>) {
        if self.errors.len() < limits::FIELD_ERRORS_MAX {
            self.errors.push(FieldError::new(field, message));
        } else {
            self.dropped += 1;
        }
    }

    /// The errors, the last replaced by a count when some were dropped.
    fn finish(mut self) -> Vec<FieldError> {
        if self.dropped > 0 {
            self.errors.truncate(limits::FIELD_ERRORS_MAX - 1);
            self.errors.push(more_problems(self.dropped + 1));
        }
        self.errors
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
        let allowed = [
            "name",
            "schedule",
            "target",
            "retry",
            "misfire",
            "misfire_cap",
            "starting_deadline_ms",
            "paused",
            "labels",
            "overlap",
            "jitter_ms",
            "calendars",
            "completion",
            "after_completion",
        ];
        let map = self.object(value, "", &allowed)?;

        let name = self.required(map, "", "name").and_then(|v| self.string(v, "name"));
        if let Some(name) = &name {
            if name.trim().is_empty() {
                self.err("name", "must not be empty");
            } else if name.chars().count() > limits::NAME_MAX_CHARS {
                self.err("name", format!("must be at most {} characters", limits::NAME_MAX_CHARS));
            } else if let Some(c) = first_hidden(name) {
                self.err("name", hidden_problem(c));
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
        let starting_deadline_ms = Self::field(map, "starting_deadline_ms").and_then(|v| {
            self.uint(v, "starting_deadline_ms", limits::STARTING_DEADLINE_MIN_MS, limits::STARTING_DEADLINE_MAX_MS)
        });
        let paused = match Self::field(map, "paused") {
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                self.err("paused", "must be true or false");
                false
            }
            None => false,
        };
        let labels = match Self::field(map, "labels") {
            Some(v) => self.labels(v),
            None => BTreeMap::new(),
        };
        let overlap = match Self::field(map, "overlap") {
            Some(v) => match v.as_str() {
                Some("allow") => Overlap::Allow,
                Some("forbid") => Overlap::Forbid,
                Some("replace") => Overlap::Replace,
                _ => {
                    self.err("overlap", "must be one of: allow, forbid, replace");
                    Overlap::default()
                }
            },
            None => Overlap::default(),
        };
        let jitter_ms = match Self::field(map, "jitter_ms") {
            Some(v) => self.uint(v, "jitter_ms", 0, limits::JITTER_MAX_MS).unwrap_or(0),
            None => 0,
        };
        if let Some(ScheduleSpec { kind: ScheduleKind::Interval { every_ms }, .. }) = &schedule
            && jitter_ms >= *every_ms
        {
            self.err(
                "jitter_ms",
                format!("must be less than schedule.every_ms ({every_ms}), or slots would overtake each other"),
            );
        }
        let calendars = match Self::field(map, "calendars") {
            Some(v) => self.calendar_names(v),
            None => Vec::new(),
        };
        let completion = Self::field(map, "completion").and_then(|v| self.completion(v));
        if Completion::is_async(completion.as_ref()) && matches!(target, Some(Target::Sqs(_))) {
            self.err("completion.mode", "async completion needs an HTTP target (an SQS queue does not answer 202)");
        }
        let after_completion = match Self::field(map, "after_completion") {
            Some(v) => match v.as_str() {
                Some("keep") => AfterCompletion::Keep,
                Some("delete") => AfterCompletion::Delete,
                _ => {
                    self.err("after_completion", "must be one of: keep, delete");
                    AfterCompletion::Keep
                }
            },
            None => AfterCompletion::Keep,
        };
        if after_completion.is_delete()
            && !matches!(&schedule, Some(ScheduleSpec { kind: ScheduleKind::Once { .. }, .. }))
        {
            self.err("after_completion", "delete is for one-time jobs (schedule.kind once)");
        }
        Some(JobSpec {
            name: name?,
            schedule: schedule?,
            target: target?,
            retry,
            misfire,
            misfire_cap,
            starting_deadline_ms,
            paused,
            labels,
            overlap,
            jitter_ms,
            calendars,
            completion,
            after_completion,
        })
    }

    /// `completion`: `{mode, timeout_ms}`.
    fn completion(&mut self, value: &Value) -> Option<Completion> {
        let p = "completion";
        let map = self.object(value, p, &["mode", "timeout_ms"])?;
        let mode = match self.required(map, p, "mode")?.as_str() {
            Some("sync") => CompletionMode::Sync,
            Some("async") => CompletionMode::Async,
            _ => {
                self.err("completion.mode", "must be one of: sync, async");
                return None;
            }
        };
        let timeout_ms = match Self::field(map, "timeout_ms") {
            Some(v) => self.uint(
                v,
                "completion.timeout_ms",
                limits::COMPLETION_TIMEOUT_MIN_MS,
                limits::COMPLETION_TIMEOUT_MAX_MS,
            )?,
            None => default_completion_timeout_ms(),
        };
        Some(Completion { mode, timeout_ms })
    }

    fn labels(&mut self, value: &Value) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        let Some(map) = value.as_object() else {
            self.err("labels", "must be an object of string keys to string values");
            return labels;
        };
        if map.len() > limits::LABELS_MAX {
            self.err("labels", format!("must have at most {} labels", limits::LABELS_MAX));
            return labels;
        }
        for (key, v) in map {
            let field = join("labels", key);
            if let Err(e) = crate::labels::check_key(key) {
                self.err(&field, e);
                continue;
            }
            match v.as_str() {
                Some(s) => match crate::labels::check_value(s) {
                    Ok(()) => {
                        labels.insert(key.clone(), s.to_owned());
                    }
                    Err(e) => self.err(&field, e),
                },
                None => self.err(&field, "must be a string"),
            }
        }
        labels
    }

    fn calendar_names(&mut self, value: &Value) -> Vec<String> {
        let Some(items) = value.as_array() else {
            self.err("calendars", "must be an array of calendar names");
            return Vec::new();
        };
        if items.len() > limits::CALENDARS_MAX {
            self.err("calendars", format!("must name at most {} calendars", limits::CALENDARS_MAX));
            return Vec::new();
        }
        let mut names: Vec<String> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let field = format!("calendars[{i}]");
            match item.as_str() {
                Some(name) => match crate::labels::check_name(name) {
                    Ok(()) if names.iter().any(|n| n == name) => {
                        self.err(&field, format!("\"{name}\" is listed twice"))
                    }
                    Ok(()) => names.push(name.to_owned()),
                    Err(e) => self.err(&field, e),
                },
                None => self.err(&field, "must be a string"),
            }
        }
        names
    }

    fn schedule(&mut self, value: &Value) -> Option<ScheduleSpec> {
        let p = "schedule";
        let kind_name = value.get("kind").and_then(Value::as_str);
        let specific: &[&str] = match kind_name {
            // `dst` is refused below with the reason, not as an unknown field.
            Some("once") => &["at", "dst"],
            Some("interval") => &["every_ms", "dst"],
            Some("cron") => &["expr", "exprs", "timezone", "dst"],
            _ => &["at", "every_ms", "expr", "exprs", "timezone", "dst"],
        };
        let mut allowed = vec!["kind", "start_at", "end_at", "max_runs"];
        allowed.extend_from_slice(specific);
        let map = self.object(value, p, &allowed)?;
        if matches!(kind_name, Some("once" | "interval")) && map.contains_key("dst") {
            self.err(
                "schedule.dst",
                "is for cron schedules only: a once or interval schedule names instants, which daylight saving \
                 time does not move",
            );
        }

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
                let min = self.limits.min_interval_ms;
                if every_ms < min {
                    self.err("schedule.every_ms", format!("must be at least {min}: the minimum interval is {min} ms"));
                }
                ScheduleKind::Interval { every_ms }
            }
            Some("cron") => self.cron(map)?,
            Some(other) => {
                self.err(
                    "schedule.kind",
                    format!("unknown kind {}; expected one of: once, interval, cron", quoted(other)),
                );
                return None;
            }
            None => {
                self.err("schedule.kind", "is required: one of once, interval, cron");
                return None;
            }
        };
        Some(ScheduleSpec { kind, start_at, end_at, max_runs })
    }

    /// The fields of a cron schedule: `expr` or `exprs` (exactly one),
    /// `timezone`, `dst`. Each expression's errors name it
    /// (`schedule.exprs[2]`).
    fn cron(&mut self, map: &Map<String, Value>) -> Option<ScheduleKind> {
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
        let exprs: Option<Vec<String>> = match (Self::field(map, "expr"), Self::field(map, "exprs")) {
            (Some(_), Some(_)) => {
                self.err("schedule.exprs", "give either expr (one expression) or exprs (a list), not both");
                None
            }
            (None, None) => {
                self.err("schedule.expr", "is required (or exprs, a list of 1 to 20 expressions)");
                None
            }
            (Some(v), None) => self.cron_expr(v, "schedule.expr").map(|e| vec![e]),
            (None, Some(v)) => self.cron_expr_list(v),
        };
        let listed = Self::field(map, "exprs").is_some();
        let dst = match Self::field(map, "dst") {
            Some(v) => self.dst_rule(v),
            None => Some(DstRule::default()),
        };
        let exprs = exprs?;
        let zone_for_exprs = if zone_ok { timezone.as_deref().unwrap_or("UTC") } else { "UTC" };
        let schedule = CronSchedule::parse_all(&exprs, zone_for_exprs, dst.unwrap_or_default()).ok()?;
        let min = self.limits.min_interval_ms;
        // No expression fires more than once a second: the default minimum
        // costs no look at the gaps.
        if min > 1000 {
            let gap = schedule.min_gap_secs();
            if gap.saturating_mul(1000) < min {
                let field = if listed { "schedule.exprs" } else { "schedule.expr" };
                let together = if exprs.len() > 1 { " (the expressions together)" } else { "" };
                self.err(field, format!("fires as often as every {gap} s{together}; the minimum interval is {min} ms"));
            }
        }
        let timezone = timezone.filter(|_| zone_ok)?;
        let dst = dst?;
        let (expr, exprs) = match listed {
            true => (None, Some(exprs)),
            false => (exprs.into_iter().next(), None),
        };
        Some(ScheduleKind::Cron { expr, exprs, timezone, dst })
    }

    /// `schedule.exprs`: 1 to `CRON_EXPRS_MAX` expressions, each checked
    /// (every bad one reported).
    fn cron_expr_list(&mut self, value: &Value) -> Option<Vec<String>> {
        let field = "schedule.exprs";
        let max = limits::CRON_EXPRS_MAX;
        let Some(items) = value.as_array() else {
            self.err(field, format!("must be a list of 1 to {max} cron expressions"));
            return None;
        };
        if items.is_empty() || items.len() > max {
            self.err(field, format!("must hold 1 to {max} cron expressions; it holds {}", items.len()));
            return None;
        }
        let exprs: Vec<Option<String>> =
            items.iter().enumerate().map(|(i, v)| self.cron_expr(v, &format!("{field}[{i}]"))).collect();
        exprs.into_iter().collect()
    }

    /// One cron expression: a string of at most `CRON_EXPR_MAX_BYTES`
    /// that parses (the zone is checked on its own).
    fn cron_expr(&mut self, value: &Value, field: &str) -> Option<String> {
        let expr = self.string(value, field)?;
        if expr.len() > limits::CRON_EXPR_MAX_BYTES {
            self.err(field, format!("must be at most {} bytes", limits::CRON_EXPR_MAX_BYTES));
            return None;
        }
        if let Err(e) = CronSchedule::parse(&expr, "UTC") {
            self.err(field, e.message);
            return None;
        }
        Some(expr)
    }

    /// `schedule.dst`: `{repeated, missing}`, both optional.
    fn dst_rule(&mut self, value: &Value) -> Option<DstRule> {
        let p = "schedule.dst";
        let map = self.object(value, p, &["repeated", "missing"])?;
        let mut rule = DstRule::default();
        let mut ok = true;
        if let Some(v) = Self::field(map, "repeated") {
            match v.as_str().and_then(Repeated::parse) {
                Some(r) => rule.repeated = r,
                None => {
                    self.err(
                        "schedule.dst.repeated",
                        format!(
                            "must be one of: {} (which occurrence of a wall time the clocks repeat fires)",
                            Repeated::NAMES
                        ),
                    );
                    ok = false;
                }
            }
        }
        if let Some(v) = Self::field(map, "missing") {
            match v.as_str().and_then(Missing::parse) {
                Some(m) => rule.missing = m,
                None => {
                    self.err(
                        "schedule.dst.missing",
                        format!(
                            "must be one of: {} (whether a wall time the clocks skip fires at the end of the gap)",
                            Missing::NAMES
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(rule)
    }

    /// `headers` or `secret_headers` of an HTTP target: RFC 9110 names and
    /// values, no reserved name, no name twice (names are case-insensitive).
    /// Messages never quote a value: it may be a secret.
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
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for (k, v) in map {
            let field = join(path, k);
            let Some(s) = v.as_str() else {
                self.err(field, "must be a string");
                continue;
            };
            if k.is_empty() || !k.bytes().all(is_token_byte) {
                self.err(&field, "is not a valid name (letters, digits and !#$%&'*+-.^_`|~ only)");
            } else if k.len() > limits::HEADER_NAME_MAX_BYTES {
                self.err(&field, format!("the name must be at most {} bytes", limits::HEADER_NAME_MAX_BYTES));
            } else if let Some(why) = reserved_header(k) {
                self.err(&field, format!("{k} is reserved: {why}"));
            } else if let Some(first) = seen.insert(folded_header(k), k) {
                self.err(
                    &field,
                    format!(
                        "repeats {first}: header names are case-insensitive, and receivers that read headers as \
                         CGI variables fold '_' into '-'"
                    ),
                );
            }
            if let Some(problem) = header_value_problem(s) {
                self.err(&field, problem);
            }
            out.insert(k.clone(), s.to_owned());
        }
        out
    }

    /// An SQS target's `message_attributes`, checked as SQS checks them.
    fn sqs_attributes(&mut self, value: Option<&Value>, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(value) = value else { return out };
        let Some(map) = value.as_object() else {
            self.err(path, "must be an object of string values");
            return out;
        };
        if map.len() > limits::SQS_ATTRIBUTES_MAX {
            self.err(
                path,
                format!(
                    "at most {} entries are allowed: SQS takes 10 attributes and cronshard adds 6 (X-Cronshard-* and \
                     webhook-*)",
                    limits::SQS_ATTRIBUTES_MAX
                ),
            );
        }
        for (k, v) in map {
            let field = join(path, k);
            let Some(s) = v.as_str() else {
                self.err(field, "must be a string");
                continue;
            };
            if let Err(why) = check_sqs_attribute_name(k) {
                self.err(&field, format!("is not a valid SQS attribute name: {why}"));
            } else if folded_header(k).starts_with("x-cronshard-") {
                self.err(&field, format!("{k} is reserved: cronshard sets the X-Cronshard-* attributes"));
            } else if folded_header(k).starts_with("webhook-") {
                self.err(&field, format!("{k} is reserved: cronshard sets the webhook-* attributes (signatures)"));
            }
            if s.is_empty() {
                self.err(&field, "must not be empty: SQS needs a value");
            } else if s.len() > limits::HEADER_VALUE_MAX_BYTES {
                self.err(&field, format!("must be at most {} bytes", limits::HEADER_VALUE_MAX_BYTES));
            } else if let Some(c) = s.chars().find(|c| !is_sqs_char(*c)) {
                self.err(&field, format!("contains {}, which SQS does not allow", char_name(c)));
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
                let allowed = [
                    "kind",
                    "url",
                    "method",
                    "headers",
                    "secret_headers",
                    "body",
                    "timeout_ms",
                    "follow_redirects",
                    "forward_headers_on_redirect",
                    "success",
                    "retry_statuses",
                ];
                let map = self.object(value, p, &allowed)?;
                let url = self.required(map, p, "url").and_then(|v| self.string(v, "target.url"));
                if let Some(u) = &url {
                    self.http_url(u, "target.url", "callbacks to internal addresses");
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
                let secret_headers = self.headers(Self::field(map, "secret_headers"), "target.secret_headers");
                for name in secret_headers.keys() {
                    if let Some(plain) = headers.keys().find(|h| folded_header(h) == folded_header(name)) {
                        self.err(
                            format!("target.secret_headers.{name}"),
                            format!("is also in target.headers (as {plain}); name a header in one of the two"),
                        );
                    }
                }
                let body = self.body(Self::field(map, "body"), "target.body");
                let timeout_ms = match Self::field(map, "timeout_ms") {
                    Some(v) => self.uint(v, "target.timeout_ms", 1, limits::TIMEOUT_MAX_MS),
                    None => Some(10_000),
                };
                let follow_redirects = self.flag(map, "target", "follow_redirects");
                let forward_headers_on_redirect = self.flag(map, "target", "forward_headers_on_redirect");
                let success = Self::field(map, "success").and_then(|v| self.success_rule(v));
                let retry_statuses =
                    Self::field(map, "retry_statuses").and_then(|v| self.status_patterns(v, "target.retry_statuses"));
                Some(Target::Http(HttpTarget {
                    url: url?,
                    method: method?,
                    headers,
                    secret_headers,
                    body,
                    timeout_ms: timeout_ms?,
                    follow_redirects,
                    forward_headers_on_redirect,
                    success,
                    retry_statuses,
                }))
            }
            Some("sqs") => {
                let allowed =
                    ["kind", "queue_url", "body", "message_group_id", "message_deduplication_id", "message_attributes"];
                let map = self.object(value, p, &allowed)?;
                let queue_url = self.required(map, p, "queue_url").and_then(|v| self.string(v, "target.queue_url"));
                if let Some(u) = &queue_url {
                    self.http_url(u, "target.queue_url", "queue URLs on internal addresses");
                }
                let body = self.body(Self::field(map, "body"), "target.body");
                if let Some(c) = body.as_deref().and_then(|b| b.chars().find(|c| !is_sqs_char(*c))) {
                    self.err("target.body", format!("contains {}, which SQS does not allow", char_name(c)));
                }
                let message_group_id =
                    Self::field(map, "message_group_id").and_then(|v| self.sqs_id(v, "target.message_group_id"));
                let message_deduplication_id = Self::field(map, "message_deduplication_id")
                    .and_then(|v| self.sqs_id(v, "target.message_deduplication_id"));
                let is_fifo = queue_url.as_deref().is_some_and(|u| u.ends_with(".fifo"));
                if is_fifo && message_group_id.is_none() {
                    self.err("target.message_group_id", "is required for a FIFO queue (.fifo)");
                }
                let message_attributes =
                    self.sqs_attributes(Self::field(map, "message_attributes"), "target.message_attributes");
                Some(Target::Sqs(SqsTarget {
                    queue_url: queue_url?,
                    body,
                    message_group_id,
                    message_deduplication_id,
                    message_attributes,
                }))
            }
            Some(other) => {
                self.err("target.kind", format!("unknown kind {}; expected one of: http, sqs", quoted(other)));
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
        } else if let Some(c) = first_hidden(&id) {
            self.err(field, hidden_problem(c));
        }
        Some(id)
    }

    /// An optional boolean `key` of the object at `path`.
    fn flag(&mut self, map: &Map<String, Value>, path: &str, key: &str) -> bool {
        match Self::field(map, key) {
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                self.err(join(path, key), "must be true or false");
                false
            }
            None => false,
        }
    }

    /// An http(s) URL: [`http_url_problems`] (the worker checks the
    /// addresses a name resolves to when it connects).
    fn http_url(&mut self, raw: &str, field: &str, what: &str) {
        for problem in http_url_problems(raw, self.limits, what, "; use target.secret_headers") {
            self.err(field, problem);
        }
    }

    /// `target.success`: statuses and at most one body condition.
    fn success_rule(&mut self, value: &Value) -> Option<SuccessRule> {
        let p = "target.success";
        let map = self.object(value, p, &["status", "body_contains", "body_matches"])?;
        let status = match Self::field(map, "status") {
            Some(v) => self.status_patterns(v, "target.success.status").unwrap_or_default(),
            None => Vec::new(),
        };
        let mut condition = |key: &str| -> Option<String> {
            let field = format!("{p}.{key}");
            let text = self.string(Self::field(map, key)?, &field)?;
            if text.is_empty() || text.len() > crate::contract::BODY_CONDITION_MAX_BYTES {
                self.err(field, format!("must be 1 to {} bytes", crate::contract::BODY_CONDITION_MAX_BYTES));
                return None;
            }
            Some(text)
        };
        let body_contains = condition("body_contains");
        let body_matches = condition("body_matches");
        if let Some(pattern) = &body_matches
            && let Err(e) = crate::contract::compile_body_regex(pattern)
        {
            self.err(format!("{p}.body_matches"), e);
        }
        if body_contains.is_some() && body_matches.is_some() {
            self.err(p, "name at most one of body_contains and body_matches");
        }
        Some(SuccessRule { status, body_contains, body_matches })
    }

    /// A list of statuses (`404`, `"404"`) and classes (`"5xx"`).
    fn status_patterns(&mut self, value: &Value, field: &str) -> Option<Vec<StatusPattern>> {
        let Some(items) = value.as_array() else {
            self.err(field, "must be an array of statuses (404) and classes (\"5xx\")");
            return None;
        };
        if items.len() > crate::contract::STATUS_PATTERNS_MAX {
            self.err(field, format!("must have at most {} entries", crate::contract::STATUS_PATTERNS_MAX));
            return None;
        }
        let mut patterns = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match StatusPattern::parse(item) {
                Ok(pattern) if !patterns.contains(&pattern) => patterns.push(pattern),
                Ok(pattern) => self.err(format!("{field}[{i}]"), format!("repeats {pattern}")),
                Err(e) => self.err(format!("{field}[{i}]"), e),
            }
        }
        Some(patterns)
    }

    fn retry(&mut self, value: &Value) -> Option<RetryPolicy> {
        let p = "retry";
        let map = self.object(value, p, &["max_retries", "base_delay_ms", "multiplier", "max_delay_ms", "jitter"])?;
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
        let jitter = match Self::field(map, "jitter") {
            Some(v) => match v.as_str() {
                Some("equal") => Some(Jitter::Equal),
                Some("full") => Some(Jitter::Full),
                Some("none") => Some(Jitter::None),
                _ => {
                    self.err("retry.jitter", "must be one of equal, full, none");
                    None
                }
            },
            None => Some(Jitter::Equal),
        };
        Some(RetryPolicy {
            max_retries: max_retries? as u32,
            base_delay_ms: base_delay_ms?,
            multiplier: multiplier?,
            max_delay_ms: max_delay_ms?,
            jitter: jitter?,
        })
    }
}

/// RFC 9110 token characters, the only ones allowed in a header name.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Why a job may not set header `name` (any case), or `None`. Refused:
/// cronshard's own `X-Cronshard-*`; what the HTTP client derives from the URL
/// and the body (`Host`, `Content-Length`, `Transfer-Encoding`), which a job
/// could otherwise use to smuggle a second request or reach another virtual
/// host; and the hop-by-hop fields of RFC 9110 §7.6.1 (`Connection` and the
/// fields it governs: `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
/// `Upgrade`), which are about one connection and not the job's to set.
/// `Proxy-Authorization` is allowed: the worker connects directly, so it is
/// an ordinary end-to-end field to the receiver.
///
/// Names are compared folded ([`folded_header`]): CGI, WSGI and the servers
/// built on them read `X-Cronshard_Execution-Id` as the same variable as
/// `X-Cronshard-Execution-Id` (`HTTP_X_CRONSHARD_EXECUTION_ID`), so a job's
/// header spelled with `_` could stand in for cronshard's own.
pub fn reserved_header(name: &str) -> Option<&'static str> {
    let lower = folded_header(name);
    if lower.starts_with("x-cronshard-") {
        return Some("cronshard sets the X-Cronshard-* headers");
    }
    if lower.starts_with("webhook-") {
        return Some("cronshard sets the webhook-* headers (Standard Webhooks signatures)");
    }
    match lower.as_str() {
        "host" => Some("the HTTP client sets it from the URL"),
        "content-length" | "transfer-encoding" => Some("the HTTP client sets it from the body"),
        "connection" | "keep-alive" | "proxy-connection" | "te" | "trailer" | "upgrade" => {
            Some("a hop-by-hop header (RFC 9110 §7.6.1) is the HTTP client's to set")
        }
        _ => None,
    }
}

/// A header name as receivers may read it: lower case, `_` as `-` (CGI
/// and WSGI fold both into the same variable).
pub fn folded_header(name: &str) -> String {
    name.bytes().map(|b| if b == b'_' { '-' } else { char::from(b.to_ascii_lowercase()) }).collect()
}

/// What is wrong with a header value, or `None`. RFC 9110 field values: no
/// control characters but horizontal tab (CR, LF, NUL, VT, DEL, ... are
/// refused: CR and LF would split the header), and no leading or trailing
/// space or tab — refused rather than trimmed so that what is stored is what
/// was given (receivers strip them anyway). Non-ASCII is sent as its UTF-8
/// bytes (obs-text). Never quotes the value: it may be a secret.
fn header_value_problem(value: &str) -> Option<String> {
    if value.len() > limits::HEADER_VALUE_MAX_BYTES {
        return Some(format!("must be at most {} bytes", limits::HEADER_VALUE_MAX_BYTES));
    }
    if value.chars().any(|c| c != '\t' && c.is_ascii_control()) {
        return Some("must not contain control characters (CR, LF, NUL, DEL, ...); tab is the only one allowed".into());
    }
    if value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']) {
        return Some("must not begin or end with a space or tab".into());
    }
    None
}

/// SQS message attribute names: 1–256 of `A-Za-z0-9-_.`, no leading or
/// trailing period, no `..`, and no `AWS.` / `Amazon.` prefix (any case).
pub fn check_sqs_attribute_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > limits::SQS_ATTRIBUTE_NAME_MAX_CHARS {
        return Err("must be 1 to 256 characters");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
        return Err("only letters, digits, '-', '_' and '.' are allowed");
    }
    if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
        return Err("must not start or end with '.' or contain '..'");
    }
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("aws.") || lower.starts_with("amazon.") {
        return Err("the AWS. and Amazon. prefixes are reserved");
    }
    Ok(())
}

/// The characters SQS accepts in a body or attribute value: #x9, #xA, #xD,
/// #x20–#xD7FF, #xE000–#xFFFD, #x10000–#x10FFFF.
pub fn is_sqs_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// `U+001B` for a message.
fn char_name(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_target_reads_the_same_wherever_its_kind_is_and_says_what_is_wrong() {
        let http = Target::Http(HttpTarget {
            url: "https://hooks.example/run".into(),
            method: "PUT".into(),
            headers: BTreeMap::from([("x-a".into(), "1".into())]),
            secret_headers: BTreeMap::new(),
            body: Some("{}".into()),
            timeout_ms: 2500,
            follow_redirects: true,
            forward_headers_on_redirect: false,
            success: None,
            retry_statuses: None,
        });
        let written = serde_json::to_string(&http).unwrap();
        assert!(written.starts_with(r#"{"kind":"http""#), "{written}");
        assert_eq!(serde_json::from_str::<Target>(&written).unwrap(), http);
        let fields = r#""url":"https://hooks.example/run","method":"PUT","headers":{"x-a":"1"},"body":"{}","timeout_ms":2500,"follow_redirects":true"#;
        for text in [
            format!(r#"{{{fields},"kind":"http"}}"#),
            format!(r#"{{"url":"https://hooks.example/run","kind":"http",{}}}"#, &fields[34..]),
        ] {
            assert_eq!(serde_json::from_str::<Target>(&text).unwrap(), http, "{text}");
            let value: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(serde_json::from_value::<Target>(value).unwrap(), http, "{text}");
        }
        let sqs =
            json!({ "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q", "kind": "sqs", "message_group_id": "g" });
        let Target::Sqs(sqs) = serde_json::from_value::<Target>(sqs).unwrap() else { panic!("not sqs") };
        assert_eq!(sqs.message_group_id.as_deref(), Some("g"));

        let error = |v: Value| serde_json::from_value::<Target>(v).unwrap_err().to_string();
        assert!(error(json!({ "url": "https://x" })).contains("missing field `kind`"));
        assert!(error(json!({ "kind": "ftp", "url": "https://x" })).contains("unknown variant `ftp`"));
        assert!(error(json!({ "kind": "http", "method": "POST", "timeout_ms": 1 })).contains("missing field `url`"));
        assert!(
            error(json!({ "timeout_ms": "soon", "kind": "http", "url": "https://x", "method": "POST" }))
                .contains("invalid type")
        );
        assert!(error(json!("http")).contains("invalid type"));
    }

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
    fn completion_and_after_completion_are_checked_against_the_job() {
        let once = json!({ "kind": "once", "at": "2030-01-01T00:00:00Z" });
        let mut v = valid();
        v["completion"] = json!({ "mode": "async" });
        let spec = JobSpec::from_json(&v).unwrap();
        assert_eq!(spec.completion, Some(Completion { mode: CompletionMode::Async, timeout_ms: 3_600_000 }));
        let stored = serde_json::to_value(&spec).unwrap();
        assert_eq!(JobSpec::from_json(&stored).unwrap(), spec, "round-trips through storage");

        for (completion, field) in [
            (json!({ "mode": "later" }), "completion.mode"),
            (json!({ "mode": "async", "timeout_ms": 999 }), "completion.timeout_ms"),
            (json!({ "mode": "async", "timeout_ms": 7 * 86_400_000u64 + 1 }), "completion.timeout_ms"),
            (json!({ "mode": "async", "deadline": 5 }), "completion.deadline"),
        ] {
            let mut v = valid();
            v["completion"] = completion.clone();
            assert_eq!(fields(v), [field], "{completion}");
        }
        let mut v = valid();
        v["completion"] = json!({ "mode": "async" });
        v["target"] = json!({ "kind": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q" });
        assert_eq!(fields(v), ["completion.mode"], "an SQS queue does not answer 202");

        let mut v = valid();
        v["after_completion"] = json!("delete");
        assert_eq!(fields(v.clone()), ["after_completion"], "only a one-time job deletes itself");
        v["schedule"] = once;
        assert_eq!(JobSpec::from_json(&v).unwrap().after_completion, AfterCompletion::Delete);
        v["after_completion"] = json!("archive");
        assert_eq!(fields(v), ["after_completion"]);
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
        // Two spellings of one CGI variable: ambiguous to the receiver.
        let mut v = valid();
        v["target"]["headers"] = json!({ "X-Api-Key": "1", "X_Api_Key": "2" });
        assert_eq!(fields(v), ["target.headers.X_Api_Key"]);
        let mut v = valid();
        v["target"]["headers"] = json!({ "X-Api-Key": "1" });
        v["target"]["secret_headers"] = json!({ "x_api_key": "2" });
        assert_eq!(fields(v), ["target.secret_headers.x_api_key"]);
    }

    /// The URL parser would drop `\r\n` and percent-encode other controls,
    /// but the text given is what is stored and shown: refused.
    #[test]
    fn control_bidi_and_zero_width_characters_are_refused_in_urls_and_names() {
        for bad in
            ["\r\n", "\u{1b}[2J", "\u{7}", "\t", "\u{7f}", "\u{85}", "\u{202e}", "\u{200b}", "\u{feff}", "\u{2066}"]
        {
            let mut v = valid();
            v["target"]["url"] = json!(format!("https://hooks.example.com/run{bad}x"));
            let e = errors_with(v, &Limits::default());
            assert_eq!(e.len(), 1, "{bad:?}: {e:?}");
            assert_eq!(e[0].field, "target.url");
            assert!(e[0].message.contains("U+"), "{e:?}");
            assert!(!e[0].message.contains(bad), "the message shows the character raw: {e:?}");
            let sqs = json!({"name": "q", "schedule": {"kind": "interval", "every_ms": 60000},
                             "target": {"kind": "sqs", "queue_url": format!("https://sqs.eu-west-1.amazonaws.com/1/q{bad}")}});
            assert_eq!(fields(sqs), ["target.queue_url"], "{bad:?}");
            let mut v = valid();
            v["name"] = json!(format!("pay{bad}ments"));
            assert_eq!(fields(v), ["name"], "{bad:?}");
        }
        // Letters of any script are names.
        let mut v = valid();
        v["name"] = json!("Zahlungen – täglich 日次 עברית");
        assert!(JobSpec::from_json(&v).is_ok());
    }

    /// An error quotes a refused key or value by a short, escaped prefix:
    /// a 200 KB label key does not make a 800 KB answer.
    #[test]
    fn errors_stay_small_whatever_the_size_of_what_they_refuse() {
        let huge = format!("\u{1b}{}", "k".repeat(200_000));
        let mut v = valid();
        v["labels"] = json!({ huge.clone(): "v" });
        v["target"]["headers"] = json!({ huge.clone(): "v" });
        v["schedule"] = json!({"kind": huge.clone()});
        v[huge.clone()] = json!(1);
        let e = errors_with(v, &Limits::default());
        assert!(e.len() >= 4, "{e:?}");
        for error in &e {
            assert!(
                error.field.len() + error.message.len() < 1_000,
                "{} bytes: {:.300}",
                error.field.len() + error.message.len(),
                error.field
            );
            assert!(!error.field.contains('\u{1b}') && !error.message.contains('\u{1b}'), "{error:?}");
        }
        let mut v = valid();
        v["schedule"] = json!({"kind": "cron", "expr": format!("0 0 * * {}", "1,".repeat(10_000)), "timezone": "UTC"});
        let e = errors_with(v, &Limits::default());
        assert_eq!((e[0].field.as_str(), e[0].message.as_str()), ("schedule.expr", "must be at most 1024 bytes"));
    }

    fn http_job(target: Value) -> Value {
        let mut v = valid();
        let mut t = v["target"].as_object().unwrap().clone();
        t.extend(target.as_object().unwrap().clone());
        v["target"] = Value::Object(t);
        v
    }

    fn errors_with(value: Value, limits: &Limits) -> Vec<FieldError> {
        JobSpec::from_json_with(&value, limits).err().unwrap_or_default()
    }

    fn fields_with(value: Value, limits: &Limits) -> Vec<String> {
        errors_with(value, limits).into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn callback_urls_naming_internal_addresses_are_refused_with_the_rule() {
        // (url, what the message says; None: accepted)
        let cases: &[(&str, Option<&str>)] = &[
            ("http://127.0.0.1:8080/hook", Some("127.0.0.1, a loopback address")),
            ("http://2130706433/hook", Some("127.0.0.1, a loopback address")),
            ("http://[::1]/", Some("a loopback address")),
            ("http://[::127.0.0.1]/", Some("carries 127.0.0.1 (IPv4-compatible), a loopback address")),
            ("http://[::ffff:127.0.0.1]/", Some("carries 127.0.0.1 (IPv4-mapped), a loopback address")),
            ("http://[::ffff:0:127.0.0.1]/", Some("carries 127.0.0.1 (IPv4-translated), a loopback address")),
            ("http://[64:ff9b::169.254.169.254]/", Some("(NAT64), a cloud metadata address")),
            ("http://[2002:a9fe:a9fe::]/", Some("carries 169.254.169.254 (6to4), a cloud metadata address")),
            ("http://[fec0::1]/", Some("a site-local address")),
            ("http://[2001::1]/", Some("a Teredo address")),
            ("http://169.254.169.254/latest/meta-data/", Some("a cloud metadata address")),
            ("http://10.0.0.5/", Some("a private address")),
            ("http://100.64.1.1/", Some("a carrier-grade NAT address")),
            ("http://192.0.2.1/", Some("a documentation address")),
            ("http://[2001:db8::1]/", Some("a documentation address")),
            ("http://224.0.0.1/", Some("a multicast address")),
            ("http://0.0.0.0/", Some("an unspecified address")),
            ("https://93.184.216.34/hook", None),
            ("https://[2606:4700::1111]/hook", None),
            ("http://[64:ff9b::8.8.8.8]/", None),
            // Names are checked by the worker when it connects, not here.
            ("http://localhost:8080/hook", None),
        ];
        for &(url, expected) in cases {
            let errors = errors_with(http_job(json!({ "url": url })), &Limits::default());
            match expected {
                None => assert!(errors.is_empty(), "{url}: {errors:?}"),
                Some(rule) => {
                    assert_eq!(errors.len(), 1, "{url}: {errors:?}");
                    assert_eq!(errors[0].field, "target.url", "{url}");
                    let m = &errors[0].message;
                    assert!(m.contains(rule) && m.contains("CALLBACK_ALLOW_CIDRS"), "{url}: {m}");
                }
            }
        }
        let e = errors_with(http_job(json!({ "url": "http://127.0.0.1:8080/hook" })), &Limits::default());
        assert_eq!(
            e[0].message,
            "refers to 127.0.0.1, a loopback address; callbacks to internal addresses are refused unless the \
             operator allows them with CALLBACK_ALLOW_CIDRS"
        );
    }

    #[test]
    fn the_allow_list_opens_a_range_for_callbacks_and_queue_urls() {
        let loopback =
            Limits { allow_cidrs: crate::netguard::parse_allow_list("127.0.0.0/8").unwrap(), ..Limits::default() };
        for url in ["http://127.0.0.1:8080/hook", "http://[::ffff:127.0.0.1]/", "http://[64:ff9b::127.0.0.1]/"] {
            assert_eq!(errors_with(http_job(json!({ "url": url })), &loopback), vec![], "{url}");
        }
        assert_eq!(fields_with(http_job(json!({ "url": "http://10.0.0.1/" })), &loopback), ["target.url"]);

        let sqs = |url: &str| {
            json!({ "name": "q", "schedule": { "kind": "cron", "expr": "0 8 * * *" },
                    "target": { "kind": "sqs", "queue_url": url } })
        };
        let e = errors_with(sqs("http://127.0.0.1:4566/000000000000/jobs"), &Limits::default());
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].field, "target.queue_url");
        assert!(e[0].message.contains("a loopback address; queue URLs on internal addresses"), "{e:?}");
        assert_eq!(errors_with(sqs("http://127.0.0.1:4566/000000000000/jobs"), &loopback), vec![]);
        assert_eq!(errors_with(sqs("https://sqs.us-east-1.amazonaws.com/1/q"), &Limits::default()), vec![]);
    }

    #[test]
    fn reserved_and_malformed_headers_are_refused() {
        // (name, value, refused)
        let cases: &[(&str, &str, bool)] = &[
            ("X-Api-Key", "k", false),
            ("Authorization", "Bearer t", false),
            ("Proxy-Authorization", "Basic x", false),
            ("accept", "application/json", false),
            ("X-Tab", "a\tb", false),
            ("X-Empty", "", false),
            ("X-Utf8", "café ✓", false),
            ("X-Cronshard-Attempt", "9", true),
            ("x-cronshard-anything", "1", true),
            ("X-CRONSHARD-EXECUTION-ID", "1", true),
            // CGI and WSGI receivers read `_` as `-`: these are the reserved ones there.
            ("X-Cronshard_Execution-Id", "1", true),
            ("x_cronshard_attempt", "1", true),
            ("Content_Length", "0", true),
            ("Transfer_Encoding", "chunked", true),
            ("Keep_Alive", "1", true),
            ("X_Api_Key", "k", false),
            ("Host", "evil.example", true),
            ("host", "evil.example", true),
            ("Content-Length", "0", true),
            ("Transfer-Encoding", "chunked", true),
            ("Connection", "close", true),
            ("Keep-Alive", "timeout=5", true),
            ("Proxy-Connection", "keep-alive", true),
            ("TE", "trailers", true),
            ("Trailer", "X-A", true),
            ("Upgrade", "websocket", true),
            ("X A", "1", true),
            ("X:A", "1", true),
            ("X-\u{e9}", "1", true),
            ("X-Ctl", "a\u{1}b", true),
            ("X-Del", "a\u{7f}b", true),
            ("X-Vt", "a\u{b}b", true),
            ("X-Cr", "a\rb", true),
            ("X-Lf", "a\nb", true),
            ("X-Nul", "a\u{0}b", true),
            ("X-Lead", " a", true),
            ("X-Trail", "a\t", true),
        ];
        for &(name, value, refused) in cases {
            for map in ["headers", "secret_headers"] {
                let errors = errors_with(http_job(json!({ map: { name: value } })), &Limits::default());
                if refused {
                    assert_eq!(errors.len(), 1, "{map} {name:?}: {value:?}: {errors:?}");
                    assert_eq!(errors[0].field, format!("target.{map}.{name}"));
                    assert!(value.len() < 3 || !errors[0].message.contains(value), "quotes the value: {errors:?}");
                } else {
                    assert!(errors.is_empty(), "{map} {name:?}: {value:?}: {errors:?}");
                }
            }
        }
        let e = errors_with(http_job(json!({ "headers": { "Host": "x" } })), &Limits::default());
        assert_eq!(e[0].message, "Host is reserved: the HTTP client sets it from the URL");
        for name in ["x-cronshard-attempt", "Host", "TE", "Upgrade", "Content-Length"] {
            assert!(reserved_header(name).is_some(), "{name}");
        }
        assert_eq!(reserved_header("X-Api-Key"), None);
    }

    #[test]
    fn a_header_name_appears_once_in_any_case_across_both_maps() {
        let f = |target: Value| fields_with(http_job(target), &Limits::default());
        assert_eq!(f(json!({ "headers": { "X-A": "1", "x-a": "2" } })), ["target.headers.x-a"]);
        assert_eq!(
            f(json!({ "headers": { "x-api-key": "1" }, "secret_headers": { "X-Api-Key": "2" } })),
            ["target.secret_headers.X-Api-Key"]
        );
        assert_eq!(f(json!({ "headers": { "x-a": "1" }, "secret_headers": { "x-b": "2" } })), Vec::<String>::new());
        assert_eq!(f(json!({ "secret_headers": "k" })), ["target.secret_headers"]);
    }

    #[test]
    fn secret_headers_and_the_redirect_opt_in_are_stored_and_secret_headers_left_out_when_empty() {
        let v = http_job(json!({
            "secret_headers": { "Authorization": "Bearer s3cret" },
            "follow_redirects": true, "forward_headers_on_redirect": true,
        }));
        let spec = JobSpec::from_json(&v).unwrap();
        let Target::Http(t) = &spec.target else { panic!("{spec:?}") };
        assert_eq!(t.secret_headers["Authorization"], "Bearer s3cret");
        assert!(t.follow_redirects && t.forward_headers_on_redirect);
        let stored = serde_json::to_value(&spec).unwrap();
        assert_eq!(stored["target"]["secret_headers"]["Authorization"], "Bearer s3cret");
        assert_eq!(JobSpec::from_json(&stored).unwrap(), spec);
        assert_eq!(serde_json::from_value::<JobSpec>(stored).unwrap(), spec);

        let plain = JobSpec::from_json(&valid()).unwrap();
        let stored = serde_json::to_value(&plain).unwrap();
        assert!(stored["target"].get("secret_headers").is_none(), "{stored}");
        assert_eq!(stored["target"]["forward_headers_on_redirect"], false);
        assert_eq!(
            fields(http_job(json!({ "forward_headers_on_redirect": "yes" }))),
            ["target.forward_headers_on_redirect"]
        );
        // A definition stored before these fields existed still reads.
        let mut old = serde_json::to_value(&plain).unwrap();
        old["target"].as_object_mut().unwrap().remove("forward_headers_on_redirect");
        assert_eq!(serde_json::from_value::<JobSpec>(old).unwrap(), plain);
    }

    #[test]
    fn intervals_below_the_minimum_are_refused_naming_it() {
        let interval = |ms: u64| json!({ "name": "x", "schedule": { "kind": "interval", "every_ms": ms }, "target": valid()["target"] });
        let e = errors_with(interval(999), &Limits::default());
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].field, "schedule.every_ms");
        assert!(e[0].message.contains("1000"), "{e:?}");
        assert_eq!(errors_with(interval(1000), &Limits::default()), vec![]);
        let strict = Limits { min_interval_ms: 60_000, ..Limits::default() };
        assert_eq!(fields_with(interval(59_999), &strict), ["schedule.every_ms"]);
        assert_eq!(fields_with(interval(60_000), &strict), Vec::<String>::new());
        let lax = Limits { min_interval_ms: 1, ..Limits::default() };
        assert_eq!(fields_with(interval(1), &lax), Vec::<String>::new());
        assert_eq!(fields_with(interval(1), &Limits::unrestricted()), Vec::<String>::new());
    }

    #[test]
    fn cron_expressions_firing_more_often_than_the_minimum_are_refused() {
        let cron = |expr: &str| json!({ "name": "x", "schedule": { "kind": "cron", "expr": expr }, "target": valid()["target"] });
        // (expression, shortest gap in s)
        let cases: &[(&str, u64)] = &[
            ("* * * * * *", 1),
            ("*/5 * * * * *", 5),
            ("0,10,15 * * * * *", 5),
            ("0,59 * * * * *", 1),
            ("30 * * * * *", 60),
            ("* * * * *", 60),
            ("*/15 * * * *", 900),
            ("0 8 * * *", 86_400),
            ("0 0,59 0,23 * * *", 60),
            ("0 30 8-9 * * *", 3600),
        ];
        for &(expr, gap) in cases {
            assert_eq!(CronSchedule::parse(expr, "UTC").unwrap().min_gap_secs(), gap, "{expr}");
            let at_gap = Limits { min_interval_ms: (gap * 1000).min(limits::MIN_INTERVAL_MS_MAX), ..Limits::default() };
            assert_eq!(fields_with(cron(expr), &at_gap), Vec::<String>::new(), "{expr} at its own gap");
            if gap < 3600 {
                let above = Limits { min_interval_ms: gap * 1000 + 1, ..Limits::default() };
                let e = errors_with(cron(expr), &above);
                assert_eq!(e.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), ["schedule.expr"], "{expr}");
                assert!(e[0].message.contains(&format!("every {gap} s")), "{e:?}");
            }
        }
        // The default minimum (1 s) admits every expression; shortcuts are at most hourly.
        assert_eq!(fields_with(cron("* * * * * *"), &Limits::default()), Vec::<String>::new());
        assert_eq!(CronSchedule::parse("@hourly", "UTC").unwrap().min_gap_secs(), 3600);
    }

    #[test]
    fn a_cron_schedule_takes_one_expression_or_several_and_a_dst_rule() {
        let job = |schedule: Value| json!({ "name": "x", "schedule": schedule, "target": valid()["target"] });
        let schedule_of = |v: Value| serde_json::to_value(JobSpec::from_json(&job(v)).unwrap().schedule).unwrap();
        // Stored as given: `expr` stays `expr`, and the default rule is not written.
        let one = json!({ "kind": "cron", "expr": "0 8 * * *", "timezone": "UTC" });
        assert_eq!(schedule_of(json!({ "kind": "cron", "expr": "0 8 * * *" })), one);
        let stored: ScheduleSpec = serde_json::from_value(one.clone()).unwrap();
        assert_eq!(serde_json::to_value(&stored).unwrap(), one, "a stored schedule reads back unchanged");
        let several =
            json!({ "kind": "cron", "exprs": ["0 9 * * MON-FRI", "0 11 * * SAT,SUN"], "timezone": "Europe/Berlin" });
        assert_eq!(schedule_of(several.clone()), several);
        let spec = JobSpec::from_json(&job(several)).unwrap();
        assert_eq!(spec.schedule.kind.cron_exprs(), ["0 9 * * MON-FRI", "0 11 * * SAT,SUN"]);
        let Recurrence::Cron(cron) = spec.compile(Utc::now()).unwrap().recurrence else { panic!("not cron") };
        assert_eq!(cron.exprs(), ["0 9 * * MON-FRI", "0 11 * * SAT,SUN"]);
        // A rule is stored whole; the default one, even spelled out, is not.
        let rule = schedule_of(json!({ "kind": "cron", "expr": "30 2 * * *", "dst": { "repeated": "both" } }));
        assert_eq!(rule["dst"], json!({ "repeated": "both", "missing": "shift" }));
        let stored: ScheduleSpec = serde_json::from_value(rule).unwrap();
        let ScheduleKind::Cron { dst, .. } = stored.kind else { panic!("not cron") };
        assert_eq!(dst, DstRule { repeated: Repeated::Both, missing: Missing::Shift });
        let spelled = schedule_of(
            json!({ "kind": "cron", "expr": "30 2 * * *", "dst": { "repeated": "first", "missing": "shift" } }),
        );
        assert!(spelled.get("dst").is_none(), "{spelled}");

        let cases: &[(Value, &[&str], &str)] = &[
            (json!({ "kind": "cron", "expr": "0 * * * *", "exprs": ["0 * * * *"] }), &["schedule.exprs"], "not both"),
            (json!({ "kind": "cron" }), &["schedule.expr"], "or exprs"),
            (json!({ "kind": "cron", "exprs": [] }), &["schedule.exprs"], "1 to 20"),
            (json!({ "kind": "cron", "exprs": vec!["0 * * * *"; 21] }), &["schedule.exprs"], "it holds 21"),
            (json!({ "kind": "cron", "exprs": "0 * * * *" }), &["schedule.exprs"], "a list"),
            (
                json!({ "kind": "cron", "exprs": ["0 * * * *", "61 * * * *", 5, "0 0 L-31 * *"] }),
                &["schedule.exprs[1]", "schedule.exprs[2]", "schedule.exprs[3]"],
                "minute field",
            ),
            (json!({ "kind": "cron", "expr": "0 * * * *", "dst": "first" }), &["schedule.dst"], "JSON object"),
            (
                json!({ "kind": "cron", "expr": "0 * * * *", "dst": { "repeated": "second" } }),
                &["schedule.dst.repeated"],
                "first, last, both",
            ),
            (
                json!({ "kind": "cron", "expr": "0 * * * *", "dst": { "missing": "later" } }),
                &["schedule.dst.missing"],
                "skip, shift",
            ),
            (
                json!({ "kind": "cron", "expr": "0 * * * *", "dst": { "when": 1 } }),
                &["schedule.dst.when"],
                "repeated, missing",
            ),
            (json!({ "kind": "interval", "every_ms": 60_000, "dst": {} }), &["schedule.dst"], "cron schedules only"),
            (
                json!({ "kind": "once", "at": "2030-01-01T00:00:00Z", "dst": { "repeated": "last" } }),
                &["schedule.dst"],
                "cron schedules only",
            ),
            (
                json!({ "kind": "interval", "every_ms": 60_000, "exprs": ["* * * * *"] }),
                &["schedule.exprs"],
                "unknown field",
            ),
        ];
        for (schedule, want, says) in cases {
            let errors = errors_with(job(schedule.clone()), &Limits::default());
            let got: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(got, *want, "{schedule}: {errors:?}");
            assert!(errors[0].message.contains(says), "{schedule}: {errors:?}");
        }
        // The minimum interval holds for the expressions together.
        let strict = Limits { min_interval_ms: 60_000, ..Limits::default() };
        let apart = job(json!({ "kind": "cron", "exprs": ["0 * * * * *", "30 * * * * *"] }));
        let e = errors_with(apart, &strict);
        assert_eq!((e.len(), e[0].field.as_str()), (1, "schedule.exprs"), "{e:?}");
        assert!(e[0].message.contains("every 30 s (the expressions together)"), "{e:?}");
        let apart = job(json!({ "kind": "cron", "exprs": ["0 * * * * *", "0 30 * * * *"] }));
        assert_eq!(errors_with(apart, &strict), vec![]);
    }

    #[test]
    fn sqs_attributes_are_checked_as_sqs_checks_them() {
        let sqs = |attrs: Value| {
            json!({ "name": "q", "schedule": { "kind": "cron", "expr": "0 8 * * *" },
                    "target": { "kind": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q",
                                "message_attributes": attrs } })
        };
        let long = "a".repeat(256);
        let too_long = "a".repeat(257);
        // (name, value, refused)
        let cases: Vec<(&str, &str, bool)> = vec![
            ("Trace-Id", "abc", false),
            ("x_y.z", "é ✓ 😀\t\n", false),
            (&long, "v", false),
            (&too_long, "v", true),
            ("", "v", true),
            ("has space", "v", true),
            ("a!b", "v", true),
            (".a", "v", true),
            ("a.", "v", true),
            ("a..b", "v", true),
            ("AWS.Trace", "v", true),
            ("aws.trace", "v", true),
            ("Amazon.x", "v", true),
            ("AMAZON.x", "v", true),
            ("X-Cronshard-Attempt", "1", true),
            ("x-cronshard-attempt", "1", true),
            ("Empty", "", true),
            ("Escape", "a\u{1b}b", true),
            ("Nul", "a\u{0}b", true),
            ("NonChar", "a\u{fffe}b", true),
        ];
        for (name, value, refused) in cases {
            let got = fields_with(sqs(json!({ name: value })), &Limits::default());
            if refused {
                assert_eq!(got, [format!("target.message_attributes.{name}")], "{name:?}: {value:?}");
            } else {
                assert!(got.is_empty(), "{name:?}: {value:?}: {got:?}");
            }
        }
        let four: Map<String, Value> = (0..4).map(|i| (format!("a{i}"), json!("v"))).collect();
        assert!(JobSpec::from_json(&sqs(Value::Object(four.clone()))).is_ok());
        let mut five = four;
        five.insert("a4".into(), json!("v"));
        assert_eq!(fields(sqs(Value::Object(five))), ["target.message_attributes"]);
        assert_eq!(fields(sqs(json!({ "Webhook_Id": "x" }))), ["target.message_attributes.Webhook_Id"]);

        let mut body = sqs(json!({}));
        body["target"]["body"] = json!("a\u{1}b");
        assert_eq!(fields(body), ["target.body"]);
        for c in ['\t', '\n', '\r', ' ', '\u{d7ff}', '\u{e000}', '\u{fffd}', '\u{10000}', '\u{10ffff}'] {
            assert!(is_sqs_char(c), "{c:?}");
        }
        for c in ['\u{0}', '\u{8}', '\u{b}', '\u{1f}', '\u{fffe}', '\u{ffff}'] {
            assert!(!is_sqs_char(c), "{c:?}");
        }
    }

    #[test]
    fn the_number_of_errors_is_capped_and_the_last_counts_the_rest() {
        let mut v = valid();
        for i in 0..10_000 {
            v[format!("unknown-{i}")] = json!(1);
        }
        let errors = JobSpec::from_json(&v).unwrap_err();
        assert_eq!(errors.len(), limits::FIELD_ERRORS_MAX);
        assert_eq!(errors[..49].iter().filter(|e| e.field.starts_with("unknown-")).count(), 49);
        let last = errors.last().unwrap();
        assert_eq!(last.field, "");
        assert!(last.message.starts_with("9951 more problems"), "{last:?}");
        assert!(serde_json::to_string(&errors).unwrap().len() < 16 * 1024);

        // Exactly the limit: every one listed.
        let mut v = valid();
        for i in 0..50 {
            v[format!("u{i:02}")] = json!(1);
        }
        let errors = JobSpec::from_json(&v).unwrap_err();
        assert_eq!(errors.len(), 50);
        assert!(errors.iter().all(|e| e.field.starts_with('u')), "{errors:?}");
        let capped = cap_field_errors((0..51).map(|i| FieldError::new(i.to_string(), "x")).collect());
        assert_eq!(capped.len(), 50);
        assert!(capped[49].message.starts_with("2 more problems"), "{capped:?}");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            max_retries: 5,
            base_delay_ms: 30_000,
            multiplier: 2.0,
            max_delay_ms: 100_000,
            jitter: Jitter::None,
        };
        assert_eq!([1, 2, 3, 4].map(|n| p.delay_ms(n)), [30_000, 60_000, 100_000, 100_000]);
    }
}
