//! What a log line, an error or an API response may show of a URL: the
//! connection strings of the services (`DATABASE_URL`, `REDIS_URLS`,
//! `AMQP_URL`) carry passwords, and callback URLs carry API keys in their
//! query strings.
//!
//! - userinfo: the password becomes `***` (`amqp://guest:***@host/%2f`); the
//!   user name stays.
//! - query and fragment: every value becomes `***` (`?api_key=***&page=***`);
//!   the names stay.
//! - `password=...` in a key/value connection string (`host=db password=***`).
//! - a reference without a scheme (a request's target as a server logs it,
//!   `/v1/jobs?access_token=***`): its query and fragment values, as above.
//!
//! Both functions work on the text, without parsing it as a URL: a malformed
//! URL (the subject of most errors about one) is redacted as well as a valid
//! one, nothing fails, and what is not a secret stays as it was written. The
//! path is kept: a secret in a path (some webhook URLs carry one) cannot be
//! told from an ordinary segment.

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// One URL (or connection string) redacted: the whole input is taken as one
/// URL, spaces included.
pub fn url(s: &str) -> String {
    token(&password_values(s))
}

/// Free text (an error message, a log line) with every URL in it redacted as
/// [`url()`] does, and anything else shaped like `user:password@host` too.
pub fn text(s: &str) -> String {
    if !might_hold_secret(s) {
        return s.to_owned();
    }
    let s = password_values(s);
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(start) = rest.find(|c| !is_break(c)) {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(is_break).unwrap_or(rest.len());
        out.push_str(&token(&rest[..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// What a field name holds when its value is a secret.
const SECRET_NAME: &str =
    r"(?:token|secret|passw|api[_-]?key|authorization|credential|session|cookie|private[_-]?key|signature)";

/// The first bytes of a receiver's answer as the ledger keeps them: as
/// [`text()`], and the value of every JSON member (`"access_token": "..."`)
/// or form field (`api_key=...`) whose name says it holds a secret becomes
/// `***`. A receiver that echoes a credential back does not put it in the
/// ledger, the console or the CLI's output.
pub fn response_body(s: &str) -> String {
    use std::sync::LazyLock;
    static JSON_MEMBER: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(&format!(r#"(?i)("[^"]*{SECRET_NAME}[^"]*"\s*:\s*)"(?:[^"\\]|\\.)*"?"#))
            .expect("a valid expression")
    });
    static FORM_FIELD: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(&format!(r#"(?i)([A-Za-z0-9_.\-]*{SECRET_NAME}[A-Za-z0-9_.\-]*=)[^&\s"]+"#))
            .expect("a valid expression")
    });
    // Most answers are empty or short: nothing to mask, no work.
    if s.is_empty() {
        return String::new();
    }
    let s = text(s);
    static MASKED_MEMBER: LazyLock<String> = LazyLock::new(|| format!("${{1}}\"{MASK}\""));
    static MASKED_FIELD: LazyLock<String> = LazyLock::new(|| format!("${{1}}{MASK}"));
    let s = JSON_MEMBER.replace_all(&s, MASKED_MEMBER.as_str());
    FORM_FIELD.replace_all(&s, MASKED_FIELD.as_str()).into_owned()
}

/// Whether `text` could change `s`: a quick test that lets most log lines
/// through untouched.
pub fn might_hold_secret(s: &str) -> bool {
    s.contains("://") || s.contains('@') || s.contains('?') || contains_ignore_case(s, "password")
}

/// A process's exit for `main`: a failure is printed as `Error: ...` (with
/// its causes, as returning it from `main` would) but redacted, since a
/// connection string in it may carry a password.
pub fn exit_code(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", text(&format!("{e:?}")));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Characters that end a URL in free text: whitespace, quotes, and what a
/// URL cannot hold unescaped.
fn is_break(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | '\\' | '{' | '}' | '|' | '^')
}

fn is_scheme_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    haystack.as_bytes().windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// One word of text (no break characters in it, unless it came from [`url()`]).
fn token(t: &str) -> String {
    // Where each URL in the word starts: at the scheme before each `://`.
    let mut starts = Vec::new();
    let mut from = 0;
    while let Some(i) = t[from..].find("://") {
        let sep = from + i;
        let mut start = sep;
        while start > from && is_scheme_char(t.as_bytes()[start - 1]) {
            start -= 1;
        }
        starts.push(start);
        from = sep + 3;
    }
    if starts.is_empty() {
        return relative_reference(&bare_userinfo(t));
    }
    let mut out = String::with_capacity(t.len());
    out.push_str(&t[..starts[0]]);
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(t.len());
        one_url(&t[start..end], &mut out);
    }
    out
}

/// `scheme://authority/path?query#fragment`, the scheme possibly empty.
fn one_url(u: &str, out: &mut String) {
    let Some(sep) = u.find("://") else {
        out.push_str(u);
        return;
    };
    let (head, rest) = u.split_at(sep + 3);
    out.push_str(head);
    let (rest, tail) = peel_punctuation(rest);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let mut at = rest[..authority_end].rfind('@');
    if at.is_none() && !rest[..authority_end].contains('[') {
        // A password holding a raw `/`, `?` or `#` ends the authority early:
        // `redis://:pa/ss@host`. What follows a colon there is no port, so
        // the userinfo runs to the last `@`.
        if let Some(colon) = rest[..authority_end].find(':') {
            let port = &rest[colon + 1..authority_end];
            if !port.bytes().all(|b| b.is_ascii_digit()) {
                at = rest.rfind('@');
            }
        }
    }
    let after_userinfo = match at {
        Some(at) => {
            let userinfo = &rest[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..=colon]);
                    out.push_str(MASK);
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            &rest[at + 1..]
        }
        None => rest,
    };
    let path_end = after_userinfo.find(['?', '#']).unwrap_or(after_userinfo.len());
    out.push_str(&after_userinfo[..path_end]);
    let mut rest = &after_userinfo[path_end..];
    if let Some(query) = rest.strip_prefix('?') {
        let end = query.find('#').unwrap_or(query.len());
        out.push('?');
        mask_values(&query[..end], out);
        rest = &query[end..];
    }
    if let Some(fragment) = rest.strip_prefix('#') {
        out.push('#');
        mask_values(fragment, out);
    }
    out.push_str(tail);
}

/// `a=1&b&c=` → `a=***&***&c=`: names stay, values go.
fn mask_values(pairs: &str, out: &mut String) {
    for (i, pair) in pairs.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match pair.split_once('=') {
            Some((name, value)) => {
                out.push_str(name);
                out.push('=');
                if !value.is_empty() {
                    out.push_str(MASK);
                }
            }
            None if pair.is_empty() => {}
            None => out.push_str(MASK),
        }
    }
}

/// Punctuation after a URL in prose (`(see http://h/?k=v).`) is not part of
/// it; a closing bracket unbalanced within the URL's last part is not
/// either. Balance is judged within the last part (after the last `?`, `#`,
/// `&` or `=`) only: that part is what masking replaces, so the decision is
/// the same when the text is redacted again (a bracket in an earlier,
/// masked value must not change it).
fn peel_punctuation(s: &str) -> (&str, &str) {
    let mut end = s.len();
    loop {
        let body = &s[..end];
        let last = &body[body.rfind(['?', '#', '&', '=']).map_or(0, |i| i + 1)..];
        let keep = match body.as_bytes().last() {
            Some(b',' | b'.' | b':' | b';') => false,
            Some(b')') => last.matches('(').count() >= last.matches(')').count(),
            Some(b']') => last.matches('[').count() >= last.matches(']').count(),
            _ => true,
        };
        if keep {
            return (body, &s[end..]);
        }
        end -= 1;
    }
}

/// A word without a scheme that holds a path and a query
/// (`/v1/jobs?access_token=x`, `uri=/hook?k=v#f`): the query's and the
/// fragment's values masked as in a URL. A `?` with no `/` before it in the
/// word (`what?`) is prose, left alone.
fn relative_reference(t: &str) -> String {
    let Some(q) = t.find('?') else { return t.to_owned() };
    if !t[..q].contains('/') {
        return t.to_owned();
    }
    let (body, tail) = peel_punctuation(&t[q + 1..]);
    let mut out = String::with_capacity(t.len());
    out.push_str(&t[..=q]);
    let end = body.find('#').unwrap_or(body.len());
    mask_values(&body[..end], &mut out);
    if let Some(fragment) = body[end..].strip_prefix('#') {
        out.push('#');
        mask_values(fragment, &mut out);
    }
    out.push_str(tail);
    out
}

/// A word without a scheme shaped like `user:password@host`.
fn bare_userinfo(t: &str) -> String {
    if let Some(at) = t.rfind('@')
        && let Some(colon) = t[..at].find(':')
    {
        return format!("{}{MASK}{}", &t[..=colon], &t[at..]);
    }
    t.to_owned()
}

/// `password=secret` and `password = 'a secret'` (a Postgres key/value
/// connection string) with the value masked; the key is matched whatever its
/// case, as a whole word.
fn password_values(s: &str) -> String {
    const KEY: &str = "password";
    if !contains_ignore_case(s, KEY) {
        return s.to_owned();
    }
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut i = 0;
    while i + KEY.len() <= bytes.len() {
        let is_key = bytes[i..i + KEY.len()].eq_ignore_ascii_case(KEY.as_bytes())
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if !is_key {
            i += 1;
            continue;
        }
        let mut j = i + KEY.len();
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        if j >= bytes.len() || bytes[j] != b'=' {
            i += KEY.len();
            continue;
        }
        j += 1;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        let (value_start, value_end, resume) = if bytes.get(j) == Some(&b'\'') {
            // Quoted: up to the closing quote; `\'` and `\\` are escapes.
            let mut k = j + 1;
            while k < bytes.len() && bytes[k] != b'\'' {
                if bytes[k] == b'\\' {
                    k += 1;
                }
                k += s[k.min(bytes.len())..].chars().next().map_or(1, char::len_utf8);
            }
            let k = k.min(bytes.len());
            (j + 1, k, k)
        } else {
            let k = s[j..].find(char::is_whitespace).map_or(bytes.len(), |n| j + n);
            (j, k, k)
        };
        if value_end > value_start {
            out.push_str(&s[copied..value_start]);
            out.push_str(MASK);
            copied = value_end;
        }
        i = resume.max(i + 1);
    }
    out.push_str(&s[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_passwords_are_masked_and_users_kept() {
        assert_eq!(url("amqp://guest:guest@127.0.0.1:5672/%2f"), "amqp://guest:***@127.0.0.1:5672/%2f");
        assert_eq!(url("redis://:hunter2@cache:6379/0"), "redis://:***@cache:6379/0");
        assert_eq!(url("postgres://app:p%40ss@db/cronshard"), "postgres://app:***@db/cronshard");
        assert_eq!(url("postgres://postgres@127.0.0.1:5432/x"), "postgres://postgres@127.0.0.1:5432/x");
        assert_eq!(url("https://hooks.example.com/run"), "https://hooks.example.com/run");
        assert_eq!(url("http://[::1]:8080/p"), "http://[::1]:8080/p");
    }

    #[test]
    fn query_and_fragment_values_are_masked_and_names_kept() {
        assert_eq!(url("https://h/p?api_key=s3cr3t&page=2"), "https://h/p?api_key=***&page=***");
        assert_eq!(url("https://h/?token&empty=&=x"), "https://h/?***&empty=&=***");
        assert_eq!(url("https://h/cb#access_token=abc&x=1"), "https://h/cb#access_token=***&x=***");
        assert_eq!(url("https://u:pw@h/p?k=v#f"), "https://u:***@h/p?k=***#***");
    }

    #[test]
    fn malformed_urls_lose_their_secrets_too() {
        // Not a valid URL (no host, a port that is none, raw characters).
        assert_eq!(url("redis://:s3cret@[bad"), "redis://:***@[bad");
        assert_eq!(url("redis://:pa/ss@host:6379"), "redis://:***@host:6379");
        assert_eq!(url("redis://user:pa ss@host"), "redis://user:***@host");
        assert_eq!(url("redis://:p@ss@host"), "redis://:***@host");
        assert_eq!(url("amqp://u:pw@host:notaport"), "amqp://u:***@host:notaport");
        assert_eq!(url("user:pw@host:5432"), "user:***@host:5432");
        assert_eq!(url("://u:pw@x"), "://u:***@x");
        assert_eq!(url(""), "");
        assert_eq!(url("not a url"), "not a url");
        assert_eq!(url("ünïcödé://ü:ß@ä?ö=ü"), "ünïcödé://ü:***@ä?ö=***");
    }

    #[test]
    fn a_request_target_without_a_scheme_loses_its_query_values() {
        assert_eq!(url("/v1/jobs?access_token=cst_abc&limit=5"), "/v1/jobs?access_token=***&limit=***");
        assert_eq!(url("/hook?k=v#t=x"), "/hook?k=***#t=***");
        assert_eq!(
            text("request{method=GET uri=/v1/jobs?access_token=cst_abc version=HTTP/1.1}: started"),
            "request{method=GET uri=/v1/jobs?access_token=*** version=HTTP/1.1}: started"
        );
        assert_eq!(text(r#"{"uri":"/v1/x?api_key=s3"}"#), r#"{"uri":"/v1/x?api_key=***"}"#);
        assert_eq!(text("see /v1/x?k=v."), "see /v1/x?k=***.");
        // A question in prose is not a query.
        let prose = "did it fire? yes=2 (see the logs)";
        assert_eq!(text(prose), prose);
    }

    #[test]
    fn key_value_connection_strings_lose_their_password() {
        assert_eq!(url("host=db user=app password=s3cret dbname=x"), "host=db user=app password=*** dbname=x");
        assert_eq!(url("host=db PASSWORD = 'a \\' b' port=1"), "host=db PASSWORD = '***' port=1");
        assert_eq!(url("password="), "password=");
        assert_eq!(url("mypassword=x"), "mypassword=x");
    }

    #[test]
    fn urls_in_text_are_found_and_the_rest_kept() {
        assert_eq!(
            text("error sending request for url (http://127.0.0.1:9/hook?api_key=s3cr3t): connection refused"),
            "error sending request for url (http://127.0.0.1:9/hook?api_key=***): connection refused"
        );
        assert_eq!(text("Redis URL \"redis://:pw@h:1\": invalid"), "Redis URL \"redis://:***@h:1\": invalid");
        assert_eq!(text("see https://h/?k=v."), "see https://h/?k=***.");
        assert_eq!(
            text("two: redis://:a@x,redis://:b@y;"),
            "two: redis://:***@x,redis://:***@y;",
            "a comma-separated list is two URLs"
        );
        assert_eq!(text("url=http://h/?next=http://i/?k=v"), "url=http://h/?next=http://i/?k=***");
        assert_eq!(text("connecting to admin:hunter2@db:5432"), "connecting to admin:***@db:5432");
        assert_eq!(text("{\"error\":\"x http://u:p@h/?k=v\"}"), "{\"error\":\"x http://u:***@h/?k=***\"}");
        let plain = "delivered in 12 ms: HTTP 500 Internal Server Error (see the logs)";
        assert_eq!(text(plain), plain);
        assert_eq!(text("mail ops@example.com"), "mail ops@example.com");
    }

    #[test]
    fn redaction_is_idempotent_and_never_panics() {
        let samples = [
            "http://u:p@h/?a=1#b",
            "x://",
            "://",
            "@",
            ":@",
            "a:b@",
            "http://[",
            "http://]",
            "http://a:)@b)",
            "password='unterminated",
            "password='\\",
            "PassWord =  ",
            "((((http://h/?k=v))))",
            "é://é:é@é?é=é#é",
            "password='\\é' password=é",
            "/a?b=c#d=e",
            "/?",
            "x/?=&#",
            "/a?(b=c)",
        ];
        for s in samples {
            for f in [url, text] {
                let once = f(s);
                assert_eq!(f(&once), once, "{s:?}");
            }
        }
    }

    #[test]
    fn a_response_body_keeps_its_shape_and_loses_its_secrets() {
        assert_eq!(
            response_body(r#"{"ok":true,"access_token":"abc\"def","user":"ann","Client_Secret": "s3"}"#),
            r#"{"ok":true,"access_token":"***","user":"ann","Client_Secret": "***"}"#
        );
        assert_eq!(response_body("id=7&api_key=k1&sessionId=zz&n=1"), "id=7&api_key=***&sessionId=***&n=1");
        assert_eq!(response_body("see https://u:pw@h/x?sig=1"), "see https://u:***@h/x?sig=***");
        assert_eq!(response_body("plain words, no secret"), "plain words, no secret");
        // Cut off by the excerpt's size: the open value is masked too.
        assert_eq!(response_body(r#"{"token":"abcdef"#), r#"{"token":"***""#);
    }
}
