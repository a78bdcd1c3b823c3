//! The delivery contract of an HTTP callback: what the receiver's answer
//! means. Which statuses count as success (default 2xx) and, optionally,
//! what the body must contain or match; which failures are worth another
//! attempt (network errors and timeouts always; by default the statuses 408,
//! 425, 429 and 5xx, any other status fails at once); how long a
//! `Retry-After` asks to wait; which response headers are kept. Every answer
//! is judged here, once, into a [`Judgement`] that says which rule decided,
//! in words the ledger records and explain shows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest `success.body_contains` or `success.body_matches`, in bytes.
pub const BODY_CONDITION_MAX_BYTES: usize = 1024;
/// How much of a response body a body condition is checked against: the
/// worker reads no more than this of an answer.
pub const BODY_CHECKED_BYTES: usize = 64 * 1024;
/// Most compiled size of a `body_matches` expression (the `regex` crate's
/// limit): matching is linear in the body, and this bounds the automaton.
pub const BODY_REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Most entries in `success.status` or `retry_statuses`.
pub const STATUS_PATTERNS_MAX: usize = 32;

/// One HTTP status (`404`) or a class of them (`"4xx"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusPattern {
    Code(u16),
    /// The first digit: 1 to 5.
    Class(u8),
}

impl StatusPattern {
    pub fn matches(self, status: u16) -> bool {
        match self {
            StatusPattern::Code(code) => code == status,
            StatusPattern::Class(class) => status / 100 == u16::from(class),
        }
    }

    /// From JSON: a number 100–599, or text of one (`"404"`) or of a class
    /// (`"5xx"`, any case).
    pub fn parse(value: &serde_json::Value) -> Result<StatusPattern, String> {
        const EXPECTED: &str = "must be a status from 100 to 599 or a class such as \"5xx\"";
        let code = |n: u64| (100..=599).contains(&n).then_some(StatusPattern::Code(n as u16));
        match value {
            serde_json::Value::Number(n) => n.as_u64().and_then(code).ok_or_else(|| EXPECTED.to_owned()),
            serde_json::Value::String(s) => {
                let lower = s.to_ascii_lowercase();
                match lower.as_bytes() {
                    [d @ b'1'..=b'5', b'x', b'x'] => Ok(StatusPattern::Class(d - b'0')),
                    _ => lower.parse::<u64>().ok().and_then(code).ok_or_else(|| EXPECTED.to_owned()),
                }
            }
            _ => Err(EXPECTED.to_owned()),
        }
    }
}

impl std::fmt::Display for StatusPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatusPattern::Code(code) => write!(f, "{code}"),
            StatusPattern::Class(class) => write!(f, "{class}xx"),
        }
    }
}

impl Serialize for StatusPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StatusPattern::Code(code) => s.serialize_u16(*code),
            StatusPattern::Class(_) => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for StatusPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        StatusPattern::parse(&value).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for StatusPattern {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(100)).maximum(Some(599)))
            .item(ObjectBuilder::new().schema_type(Type::String).pattern(Some("^([1-5][0-9][0-9]|[1-5][xX][xX])$")))
            .description(Some("An HTTP status (404) or a class of them (\"5xx\")."))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for StatusPattern {}

/// The statuses a failure is retried on when the job names none: the
/// answers that say "later" (408 Request Timeout, 425 Too Early, 429 Too
/// Many Requests) and the server's own errors (5xx).
pub const DEFAULT_RETRY_STATUSES: [StatusPattern; 4] =
    [StatusPattern::Code(408), StatusPattern::Code(425), StatusPattern::Code(429), StatusPattern::Class(5)];

/// The success statuses when the job names none.
pub const DEFAULT_SUCCESS_STATUSES: [StatusPattern; 1] = [StatusPattern::Class(2)];

/// What counts as a successful delivery, beyond the default (any 2xx).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SuccessRule {
    /// Statuses that count as success; empty = 2xx.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(required = false, max_items = 32, example = json!([200, 204])))]
    pub status: Vec<StatusPattern>,
    /// The body (its first 64 KiB) must contain this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(required = false, max_length = 1024, example = "\"ok\":true"))]
    pub body_contains: Option<String>,
    /// The body (its first 64 KiB) must match this regular expression
    /// (Rust `regex` syntax: no backreferences or lookaround, linear time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(required = false, max_length = 1024, example = "\"state\":\\s*\"(done|queued)\"")
    )]
    pub body_matches: Option<String>,
}

impl SuccessRule {
    fn statuses(&self) -> &[StatusPattern] {
        if self.status.is_empty() { &DEFAULT_SUCCESS_STATUSES } else { &self.status }
    }
}

/// Compiles a `body_matches` expression within the bounds.
pub fn compile_body_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern).size_limit(BODY_REGEX_SIZE_LIMIT).build().map_err(|e| match e {
        regex::Error::CompiledTooBig(_) => "is too complex (its compiled form exceeds 256 KiB)".to_owned(),
        other => format!("is not a valid regular expression: {}", other.to_string().lines().last().unwrap_or("")),
    })
}

/// Compiled `body_matches` expressions by their text, so a job's expression
/// is compiled once per process and not per delivery. Bounded: emptied
/// when full (expressions are few; a compile is microseconds).
#[derive(Debug, Default, Clone)]
pub struct BodyMatcher {
    compiled: Arc<Mutex<HashMap<String, Option<regex::Regex>>>>,
}

const BODY_MATCHER_CAPACITY: usize = 4096;

impl BodyMatcher {
    /// Whether `body` matches `pattern`; `None` when the pattern does not
    /// compile (validated at creation, so only a definition stored by a
    /// version with other rules).
    pub fn matches(&self, pattern: &str, body: &str) -> Option<bool> {
        let mut compiled = self.compiled.lock().expect("body matcher lock");
        if !compiled.contains_key(pattern) {
            if compiled.len() >= BODY_MATCHER_CAPACITY {
                compiled.clear();
            }
            compiled.insert(pattern.to_owned(), compile_body_regex(pattern).ok());
        }
        compiled[pattern].as_ref().map(|re| re.is_match(body))
    }
}

/// What an answer came to, and the rule that decided it, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Success {
        rule: String,
    },
    /// `unexpected_body`: the status was a success, the body condition
    /// did not hold.
    Failure {
        retryable: bool,
        unexpected_body: bool,
        rule: String,
    },
}

/// Judges an HTTP answer by the target's rules (`None`: the defaults).
/// `body` is the first [`BODY_CHECKED_BYTES`] of the answer.
pub fn judge(
    success: Option<&SuccessRule>,
    retry_statuses: Option<&[StatusPattern]>,
    status: u16,
    body: &str,
    matcher: &BodyMatcher,
) -> Judgement {
    let default_success = SuccessRule::default();
    let rule = success.unwrap_or(&default_success);
    // The lists are written only into the rule that names them: a rule is
    // made for every delivery.
    let success_list = || list(rule.statuses());
    if rule.statuses().iter().any(|p| p.matches(status)) {
        if let Some(needle) = &rule.body_contains
            && !body.contains(needle.as_str())
        {
            return Judgement::Failure {
                retryable: true,
                unexpected_body: true,
                rule: format!("HTTP {status} but the body does not contain the text of success.body_contains"),
            };
        }
        if let Some(pattern) = &rule.body_matches {
            match matcher.matches(pattern, body) {
                Some(true) => {}
                Some(false) => {
                    return Judgement::Failure {
                        retryable: true,
                        unexpected_body: true,
                        rule: format!("HTTP {status} but the body does not match success.body_matches"),
                    };
                }
                None => {
                    return Judgement::Failure {
                        retryable: false,
                        unexpected_body: true,
                        rule: "success.body_matches is not a valid regular expression".to_owned(),
                    };
                }
            }
        }
        let body_rule = if rule.body_contains.is_some() || rule.body_matches.is_some() {
            " and the body condition holds"
        } else {
            ""
        };
        return Judgement::Success {
            rule: format!("HTTP {status} is a success status ({}){body_rule}", success_list()),
        };
    }
    let retried_on = retry_statuses.unwrap_or(&DEFAULT_RETRY_STATUSES);
    let retried_list = list(retried_on);
    if retried_on.iter().any(|p| p.matches(status)) {
        Judgement::Failure {
            retryable: true,
            unexpected_body: false,
            rule: format!("HTTP {status} is in retry_statuses ({retried_list})"),
        }
    } else {
        Judgement::Failure {
            retryable: false,
            unexpected_body: false,
            rule: format!(
                "HTTP {status} is neither a success ({}) nor in retry_statuses ({retried_list}): failed at once",
                success_list()
            ),
        }
    }
}

fn list(patterns: &[StatusPattern]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(patterns.len() * 5);
    for (i, p) in patterns.iter().enumerate() {
        let _ = write!(out, "{}{p}", if i == 0 { "" } else { ", " });
    }
    out
}

/// The wait a `Retry-After` value asks for at `now`: delay-seconds or an
/// HTTP date (RFC 9110 §10.2.3); a date in the past asks for none. `None`
/// for a value that is neither.
pub fn retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    // IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) is RFC 2822's form.
    let at = DateTime::parse_from_rfc2822(value).ok()?.to_utc();
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// Response headers kept with an attempt's outcome (lower case): what a
/// receiver says about the answer itself, to tell it apart in its own logs
/// (request and trace ids), to see why it came (`retry-after`, `location`)
/// or how to read the body (`content-type`). Cookies and credentials are
/// never among them.
pub const KEPT_RESPONSE_HEADERS: [&str; 8] = [
    "content-type",
    "location",
    "retry-after",
    "x-request-id",
    "request-id",
    "x-correlation-id",
    "traceparent",
    "x-amzn-requestid",
];
/// Longest kept response header value, in bytes (longer ones are cut).
pub const KEPT_HEADER_VALUE_MAX_BYTES: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failure(retryable: bool) -> impl Fn(&Judgement) -> bool {
        move |j| matches!(j, Judgement::Failure { retryable: r, .. } if *r == retryable)
    }

    #[test]
    fn by_default_2xx_succeeds_and_only_transient_statuses_are_retried() {
        let m = BodyMatcher::default();
        for status in [200, 201, 204, 299] {
            assert!(matches!(judge(None, None, status, "", &m), Judgement::Success { .. }), "{status}");
        }
        for status in [408, 425, 429, 500, 502, 503, 599] {
            assert!(failure(true)(&judge(None, None, status, "", &m)), "{status}");
        }
        for status in [100, 301, 304, 400, 401, 403, 404, 409, 410, 422] {
            let j = judge(None, None, status, "", &m);
            assert!(failure(false)(&j), "{status}");
            let Judgement::Failure { rule, .. } = j else { unreachable!() };
            assert!(rule.contains("408, 425, 429, 5xx") && rule.contains("failed at once"), "{rule}");
        }
    }

    #[test]
    fn a_job_names_its_success_statuses_body_condition_and_retried_statuses() {
        let m = BodyMatcher::default();
        let rule = SuccessRule {
            status: vec![StatusPattern::Code(200), StatusPattern::Class(3)],
            body_contains: Some("\"ok\":true".into()),
            body_matches: None,
        };
        assert!(matches!(judge(Some(&rule), None, 302, "{\"ok\":true}", &m), Judgement::Success { .. }));
        assert!(failure(true)(&judge(Some(&rule), None, 200, "{\"ok\":false}", &m)));
        assert!(failure(false)(&judge(Some(&rule), None, 204, "{\"ok\":true}", &m)), "204 is not listed");
        let regex = SuccessRule { body_matches: Some(r#""state":\s*"(done|queued)""#.into()), ..Default::default() };
        assert!(matches!(judge(Some(&regex), None, 200, r#"{"state": "done"}"#, &m), Judgement::Success { .. }));
        assert!(failure(true)(&judge(Some(&regex), None, 200, r#"{"state": "failed"}"#, &m)));
        let only_503 = [StatusPattern::Code(503)];
        assert!(failure(true)(&judge(None, Some(&only_503), 503, "", &m)));
        assert!(failure(false)(&judge(None, Some(&only_503), 500, "", &m)));
        assert!(failure(false)(&judge(None, Some(&[]), 503, "", &m)), "an empty list retries no status");
    }

    #[test]
    fn status_patterns_read_numbers_codes_and_classes_and_write_them_back() {
        for (input, parsed) in [
            (json!(404), StatusPattern::Code(404)),
            (json!("404"), StatusPattern::Code(404)),
            (json!("5xx"), StatusPattern::Class(5)),
            (json!("2XX"), StatusPattern::Class(2)),
        ] {
            assert_eq!(StatusPattern::parse(&input), Ok(parsed), "{input}");
        }
        for bad in [json!(99), json!(600), json!("6xx"), json!("x"), json!(true), json!(404.5), json!("40x")] {
            assert!(StatusPattern::parse(&bad).is_err(), "{bad}");
        }
        let written = serde_json::to_value([StatusPattern::Code(404), StatusPattern::Class(5)]).unwrap();
        assert_eq!(written, json!([404, "5xx"]));
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = DateTime::parse_from_rfc3339("2026-12-07T08:00:00Z").unwrap().to_utc();
        assert_eq!(retry_after("20", now), Some(Duration::from_secs(20)));
        assert_eq!(retry_after(" 5 ", now), Some(Duration::from_secs(5)));
        assert_eq!(retry_after("Mon, 07 Dec 2026 08:00:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(retry_after("Mon, 07 Dec 2026 07:00:00 GMT", now), Some(Duration::ZERO));
        for bad in ["", "-5", "soon", "1.5"] {
            assert_eq!(retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn a_body_expression_is_bounded() {
        assert!(compile_body_regex("(a|b)*c").is_ok());
        assert!(compile_body_regex("(").unwrap_err().contains("not a valid regular expression"));
        assert!(compile_body_regex("\\w{1000}{1000}").unwrap_err().contains("too complex"));
    }
}
