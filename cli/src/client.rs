//! The HTTP side: one request to the API, its answer, and the API's errors
//! (`application/problem+json`) turned into a [`Failure`] with the exit
//! code of their status. The token goes into the `Authorization` header and
//! nowhere else: no message names it, and the URL is shown as
//! `domain::redact` shows URLs (password and query values masked).
//!
//! A reason given with `--reason` goes with every write (any method but
//! GET) as `X-Audit-Reason`, percent-encoded UTF-8, for the audit log.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, IF_MATCH};
use reqwest::{Method, Url};
use serde_json::Value;

use crate::failure::{Exit, Failure, Result};

/// Longer than the API's own 30 s request timeout, so that its 503 is what
/// a slow request ends with.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Api {
    base: Url,
    token: Option<String>,
    /// `X-Audit-Reason` of every write, percent-encoded.
    reason: Option<HeaderValue>,
    http: reqwest::Client,
}

/// The header a write states its reason with.
const AUDIT_REASON: &str = "x-audit-reason";
/// Longest reason the audit log keeps, in characters.
const REASON_MAX: usize = 500;

/// A request body.
pub enum Body {
    Json(Value),
    /// A JSON Merge Patch (RFC 7396).
    MergePatch(Value),
}

/// A successful answer, fully read.
pub struct Reply {
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.text).map_err(|e| Failure::other(format!("the API's answer is not JSON ({e})")))
    }
}

impl Api {
    pub fn new(base: &str, token: Option<String>) -> Result<Api> {
        let base = base_url(base)?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("cronshard-cli/", env!("CARGO_PKG_VERSION")))
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| Failure::other(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Api { base, token: token.filter(|t| !t.is_empty()), reason: None, http })
    }

    /// Sends `reason` (`--reason`) with every write as `X-Audit-Reason`.
    pub fn with_reason(mut self, reason: Option<&str>) -> Result<Api> {
        let Some(reason) = reason.filter(|r| !r.trim().is_empty()) else { return Ok(self) };
        if reason.chars().count() > REASON_MAX {
            return Err(Failure::invalid(format!("--reason must be at most {REASON_MAX} characters")));
        }
        let value = HeaderValue::from_str(&percent_encode(reason)).expect("percent-encoded text is a header value");
        self.reason = Some(value);
        Ok(self)
    }

    /// The API's base URL as it may be shown: password and query values masked.
    pub fn shown_base(&self) -> String {
        shown(&self.base)
    }

    /// `base/v1/{segments...}?{query}`, each segment percent-encoded.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("v1").extend(segments);
        }
        url.set_query(None);
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
        }
        url
    }

    pub async fn get(&self, segments: &[&str], query: &[(&str, String)]) -> Result<Reply> {
        self.send(Method::GET, segments, query, None, None).await
    }

    pub async fn send(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<Body>,
        if_match: Option<i64>,
    ) -> Result<Reply> {
        let if_match = if_match.map(|version| {
            (IF_MATCH, HeaderValue::from_str(&format!("\"{version}\"")).expect("a quoted number is a header value"))
        });
        self.send_with_headers(method, segments, query, body, if_match.into_iter().collect()).await
    }

    /// [`Client::send`] with more headers (a completion token, an
    /// `If-Match`), marked sensitive by the caller where they are secret.
    pub async fn send_with_headers(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<Body>,
        headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<Reply> {
        let url = self.url(segments, query);
        let mut request = self.http.request(method.clone(), url);
        if let Some(token) = &self.token {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                Failure::invalid("the token (--token, CRONSHARD_TOKEN) holds characters a header cannot")
            })?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        if method != Method::GET
            && let Some(reason) = &self.reason
        {
            request = request.header(HeaderName::from_static(AUDIT_REASON), reason.clone());
        }
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request = match body {
            None => request,
            Some(Body::Json(v)) => request.header(CONTENT_TYPE, "application/json").body(v.to_string()),
            Some(Body::MergePatch(v)) => {
                request.header(CONTENT_TYPE, "application/merge-patch+json").body(v.to_string())
            }
        };
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| self.unreachable(&e))?;
        if (200..300).contains(&status) { Ok(Reply { text }) } else { Err(problem(status, &text)) }
    }

    /// A request that got no answer: which URL, and the innermost cause
    /// ("Connection refused", "dns error", "operation timed out").
    fn unreachable(&self, e: &reqwest::Error) -> Failure {
        let mut cause: &dyn std::error::Error = e;
        while let Some(next) = cause.source() {
            cause = next;
        }
        let what = if e.is_timeout() { "timed out" } else { "failed" };
        let cause = crate::redact::text(&cause.to_string());
        Failure::new(
            Exit::Unavailable,
            format!("cannot reach the API at {}: request {what}: {cause}", self.shown_base()),
        )
    }
}

/// An API base URL: http or https, with a host.
pub fn base_url(raw: &str) -> Result<Url> {
    Url::parse(raw).ok().filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some()).ok_or_else(|| {
        Failure::invalid("the API's URL (--url, CRONSHARD_URL or the context's) must be an http or https URL")
    })
}

/// `text` as UTF-8 with every byte but the unreserved characters of RFC 3986
/// (letters, digits, `-._~`) written `%XX`: visible ASCII only, as a header
/// value must be, and decoded back to the same text by the API.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A URL as it may be shown: its password and query values masked
/// (`domain::redact`).
fn shown(url: &Url) -> String {
    crate::redact::url(url.as_str().trim_end_matches('/'))
}

/// An error answer: the problem's title and detail, each field error as
/// `field: message`, and the exit code of its status.
pub fn problem(status: u16, text: &str) -> Failure {
    let exit = Exit::of_status(status);
    let Ok(body) = serde_json::from_str::<Value>(text) else {
        let text = text.trim();
        let shown: String = text.chars().take(300).collect();
        let message = if shown.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {shown}") };
        return Failure::new(exit, message);
    };
    let title = body["title"].as_str().unwrap_or("error");
    let details: Vec<String> = body["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|e| {
                    let field = e["field"].as_str().filter(|f| !f.is_empty()).unwrap_or("(body)");
                    format!("{field}: {}", e["message"].as_str().unwrap_or("invalid"))
                })
                .collect()
        })
        .unwrap_or_default();
    // A 422's detail repeats its field errors, listed one per line below.
    let message = match body["detail"].as_str() {
        Some(detail) if !detail.is_empty() && details.is_empty() => format!("{title} (HTTP {status}): {detail}"),
        _ => format!("{title} (HTTP {status})"),
    };
    let mut failure = Failure::new(exit, message);
    failure.details = details;
    if exit == Exit::Denied && status == 401 {
        failure.details.push(
            "set the token with CRONSHARD_TOKEN, a context (cronshard config set-context), or --token".to_owned(),
        );
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_a_base_path_and_encode_each_segment() {
        let api = Api::new("http://u:pw@h:8080/cronshard/", None).unwrap();
        let url =
            api.url(&["jobs", "a b/c", "executions", "2026-03-29T01:00:00+02:00"], &[("selector", "a=b,c!=d".into())]);
        assert_eq!(
            url.as_str(),
            "http://u:pw@h:8080/cronshard/v1/jobs/a%20b%2Fc/executions/2026-03-29T01:00:00+02:00?selector=a%3Db%2Cc%21%3Dd"
        );
        assert_eq!(api.shown_base(), "http://u:***@h:8080/cronshard");
        let api = Api::new("http://h:8080/?api_key=s3cr3t&x=1", None).unwrap();
        assert_eq!(api.shown_base(), "http://h:8080/?api_key=***&x=***");
        assert!(Api::new("ftp://h", None).is_err());
        assert!(Api::new("127.0.0.1:8080", None).is_err());
    }

    #[test]
    fn a_reason_is_percent_encoded_utf8_and_bounded() {
        assert_eq!(percent_encode("rollback: über 50% ✓"), "rollback%3A%20%C3%BCber%2050%25%20%E2%9C%93");
        assert_eq!(percent_encode("a-b.c_d~e"), "a-b.c_d~e");
        let api = Api::new("http://h", None).unwrap();
        assert!(api.with_reason(Some("  ")).unwrap().reason.is_none(), "a blank reason is none");
        let api = Api::new("http://h", None).unwrap();
        assert!(api.with_reason(Some(&"é".repeat(500))).is_ok());
        let api = Api::new("http://h", None).unwrap();
        let err = api.with_reason(Some(&"x".repeat(501))).err().unwrap();
        assert_eq!((err.exit, err.message.as_str()), (Exit::Invalid, "--reason must be at most 500 characters"));
    }

    #[test]
    fn a_422_lists_each_field_error() {
        let f = problem(
            422,
            r#"{"type":"about:blank","title":"Invalid request","status":422,"detail":"2 fields are invalid",
                "errors":[{"field":"schedule.timezone","message":"unknown time zone"},{"field":"name","message":"is required"}]}"#,
        );
        assert_eq!(f.exit, Exit::Invalid);
        assert_eq!(f.details, ["schedule.timezone: unknown time zone", "name: is required"]);
        assert_eq!(f.message, "Invalid request (HTTP 422)");
        let f = problem(404, r#"{"title":"Not found","status":404,"detail":"no job with id 1"}"#);
        assert_eq!((f.exit, f.message.as_str()), (Exit::NotFound, "Not found (HTTP 404): no job with id 1"));
        let f = problem(502, "<html>bad gateway</html>");
        assert_eq!((f.exit, f.message.as_str()), (Exit::Unavailable, "HTTP 502: <html>bad gateway</html>"));
    }
}
