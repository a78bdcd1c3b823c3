//! Label syntax (Kubernetes': an optional DNS-subdomain prefix and `/`, a
//! name of at most 63 characters; values of at most 63), label selectors
//! (Kubernetes' equality- and set-based syntax, [`Selector`]) and the names
//! of per-namespace objects such as calendars (DNS labels).

use std::collections::BTreeMap;
use std::fmt;

use crate::text::quoted;

const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= NAME_MAX
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= NAME_MAX
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A label key: `name` or `prefix/name`, the prefix a DNS subdomain.
pub fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && (prefix.len() > PREFIX_MAX || !prefix.split('.').all(is_dns_label))
    {
        return Err(format!(
            "label key prefix {} must be a DNS subdomain (lowercase letters, digits, '-' and '.', at most {PREFIX_MAX} characters)",
            quoted(prefix)
        ));
    }
    if !is_label_name(name) {
        return Err(format!(
            "label key {} is not valid: the name must be 1 to {NAME_MAX} characters of letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",
            quoted(key)
        ));
    }
    Ok(())
}

/// A label value: empty, or like a key's name.
pub fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "label value {} is not valid: at most {NAME_MAX} characters of letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",
            quoted(value)
        ))
    }
}

/// The name of a calendar or another per-namespace object.
pub fn check_name(name: &str) -> Result<(), String> {
    if is_dns_label(name) {
        Ok(())
    } else {
        Err(format!(
            "{} is not a valid name: 1 to {NAME_MAX} lowercase letters, digits or '-', beginning and ending with a letter or digit",
            quoted(name)
        ))
    }
}

/// Path words under `/v1/jobs/` that are routes of their own, so never a
/// job's key (`/v1/jobs/batch` must stay the batch route).
pub const RESERVED_JOB_KEYS: [&str; 3] = ["batch", "bulk", "outcomes"];

/// A job's key: a name (as [`check_name`]) that a path can tell from a job
/// id, so never shaped like a UUID, and never a fixed path word.
pub fn check_job_key(key: &str) -> Result<(), String> {
    check_name(key)?;
    if uuid::Uuid::try_parse(key).is_ok() {
        return Err(format!("{} is shaped like a job id (a UUID); a key must not be", quoted(key)));
    }
    if RESERVED_JOB_KEYS.contains(&key) {
        return Err(format!("{} is reserved (a route of its own under /v1/jobs)", quoted(key)));
    }
    Ok(())
}

/// Requirements one selector may hold.
pub const SELECTOR_TERMS_MAX: usize = 64;
/// Values one `in` / `notin` set may hold.
pub const SELECTOR_SET_MAX: usize = 100;
/// Bytes of a selector's text. Room for the largest useful selector (a set
/// of 100 values of 63 characters is 6,500 bytes); refused before anything
/// is parsed, so a selector costs at most this much reading.
pub const SELECTOR_MAX_BYTES: usize = 16 * 1024;

/// A label selector in Kubernetes syntax: requirements joined by `,`, all of
/// which a job's labels must meet.
///
/// | term | a job matches when |
/// |---|---|
/// | `k=v`, `k==v` | it has label `k` with value `v` |
/// | `k!=v` | it has no label `k`, or one with another value |
/// | `k in (a,b)` | it has label `k` with value `a` or `b` |
/// | `k notin (a,b)` | it has no label `k`, or one with neither value |
/// | `k` | it has label `k` |
/// | `!k` | it has no label `k` |
///
/// Spaces around keys, operators and values are ignored. The empty selector
/// matches every job ([`Selector::is_empty`] tells it apart).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    pub requirements: Vec<Requirement>,
}

/// One term of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Op,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// A selector that does not parse: the term at fault and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("term \"{term}\": {message}")]
pub struct SelectorError {
    pub term: String,
    pub message: String,
}

impl SelectorError {
    fn new(term: &str, message: impl Into<String>) -> Self {
        // A term is echoed back in errors: a short prefix, escaped.
        Self { term: crate::text::excerpt(term, 120), message: message.into() }
    }
}

impl Selector {
    /// Parses `text`; the error names the first term at fault. The limits
    /// (`SELECTOR_MAX_BYTES`, `SELECTOR_TERMS_MAX`, `SELECTOR_SET_MAX`) are
    /// checked before or while reading what they bound: the length first,
    /// the terms as they are split, a set's values as they are read, so
    /// the work done on any text is linear in at most the limits.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        if text.len() > SELECTOR_MAX_BYTES {
            return Err(SelectorError::new(
                text,
                format!("a selector may be at most {SELECTOR_MAX_BYTES} bytes long; this one is {}", text.len()),
            ));
        }
        if text.trim().is_empty() {
            return Ok(Selector::default());
        }
        let terms = split_terms(text)?;
        let requirements = terms.into_iter().map(parse_term).collect::<Result<_, _>>()?;
        Ok(Selector { requirements })
    }

    /// No requirement: matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` meet every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl Requirement {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match &self.op {
            Op::Eq(v) => value == Some(v),
            Op::NotEq(v) => value != Some(v),
            Op::In(set) => value.is_some_and(|x| set.contains(x)),
            Op::NotIn(set) => !value.is_some_and(|x| set.contains(x)),
            Op::Exists => value.is_some(),
            Op::NotExists => value.is_none(),
        }
    }
}

/// The canonical text: parses back to the same selector.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let k = &r.key;
            match &r.op {
                Op::Eq(v) => write!(f, "{k}={v}")?,
                Op::NotEq(v) => write!(f, "{k}!={v}")?,
                Op::In(set) => write!(f, "{k} in ({})", set.join(","))?,
                Op::NotIn(set) => write!(f, "{k} notin ({})", set.join(","))?,
                Op::Exists => write!(f, "{k}")?,
                Op::NotExists => write!(f, "!{k}")?,
            }
        }
        Ok(())
    }
}

/// Splits at the commas outside parentheses (those inside separate the
/// values of a set); stops at the first term past `SELECTOR_TERMS_MAX`.
fn split_terms(text: &str) -> Result<Vec<&str>, SelectorError> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0u32, 0usize);
    let too_many =
        |term: &str| SelectorError::new(term, format!("a selector may hold at most {SELECTOR_TERMS_MAX} terms"));
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            // `(` and `)` are one byte: `..=i` ends the term there.
            '(' => return Err(SelectorError::new(&text[start..=i], "parentheses do not nest")),
            ')' if depth == 0 => {
                return Err(SelectorError::new(&text[start..=i], "')' without an opening '('"));
            }
            ')' => depth = 0,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
                if terms.len() == SELECTOR_TERMS_MAX {
                    return Err(too_many(&text[start..]));
                }
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err(SelectorError::new(&text[start..], "'(' is never closed"));
    }
    terms.push(&text[start..]);
    Ok(terms)
}

fn parse_term(raw: &str) -> Result<Requirement, SelectorError> {
    let term = raw.trim();
    let fail = |message: String| SelectorError::new(term, message);
    if term.is_empty() {
        return Err(SelectorError::new(
            raw,
            "is empty: terms are separated by single commas, with no comma at either end",
        ));
    }
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        if key.contains(|c: char| c.is_whitespace() || "=!()<>".contains(c)) {
            return Err(fail("'!' takes a key alone (`!key`: the job has no label key)".to_owned()));
        }
        check_key(key).map_err(fail)?;
        return Ok(Requirement { key: key.to_owned(), op: Op::NotExists });
    }
    let key_end = term.find(|c: char| c.is_whitespace() || "=!()<>".contains(c)).unwrap_or(term.len());
    let key = &term[..key_end];
    if key.is_empty() {
        return Err(fail(
            "has no key; expected key=value, key!=value, key in (...), key notin (...), key or !key".into(),
        ));
    }
    check_key(key).map_err(fail)?;
    let rest = term[key_end..].trim_start();
    let value = |text: &str| -> Result<String, SelectorError> {
        let v = text.trim();
        check_value(v).map_err(fail)?;
        Ok(v.to_owned())
    };
    let op = if rest.is_empty() {
        Op::Exists
    } else if let Some(v) = rest.strip_prefix("==") {
        Op::Eq(value(v)?)
    } else if let Some(v) = rest.strip_prefix("!=") {
        Op::NotEq(value(v)?)
    } else if let Some(v) = rest.strip_prefix('=') {
        Op::Eq(value(v)?)
    } else if let Some(set) = keyword(rest, "notin") {
        Op::NotIn(parse_set(term, set)?)
    } else if let Some(set) = keyword(rest, "in") {
        Op::In(parse_set(term, set)?)
    } else if rest.starts_with(['<', '>']) {
        return Err(fail("numeric comparisons (< and >) are not supported".into()));
    } else {
        return Err(fail(format!(
            "expected =, ==, !=, in (...) or notin (...) after the key {key:?}, got {:?}",
            rest.chars().take(20).collect::<String>()
        )));
    };
    Ok(Requirement { key: key.to_owned(), op })
}

/// `rest` without the operator word `word`, when `rest` starts with it as a word.
fn keyword<'a>(rest: &'a str, word: &str) -> Option<&'a str> {
    let after = rest.strip_prefix(word)?;
    (after.starts_with(char::is_whitespace) || after.starts_with('(')).then_some(after)
}

/// `(a, b, c)`: one or more values, each at most once; reading stops at the
/// first item past `SELECTOR_SET_MAX`.
fn parse_set(term: &str, text: &str) -> Result<Vec<String>, SelectorError> {
    let fail = |message: String| SelectorError::new(term, message);
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| fail("in and notin take a set in parentheses, e.g. (a,b)".into()))?;
    if inner.trim().is_empty() {
        return Err(fail("the set is empty; name at least one value".into()));
    }
    let mut values: Vec<String> = Vec::new();
    for (i, item) in inner.split(',').enumerate() {
        if i == SELECTOR_SET_MAX {
            return Err(fail(format!("a set may hold at most {SELECTOR_SET_MAX} values")));
        }
        let v = item.trim();
        if v.is_empty() {
            return Err(fail("the set has an empty item; use key= to select an empty value".into()));
        }
        check_value(v).map_err(fail)?;
        // At most SELECTOR_SET_MAX values to compare with.
        if !values.iter().any(|x| x == v) {
            values.push(v.to_owned());
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_values_and_names_follow_kubernetes_syntax() {
        for ok in ["team", "app.kubernetes.io/name", "a", "A_b-c.d", "x/y"] {
            assert!(check_key(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "Bad.Prefix/x", "/x", "x/", &"a".repeat(64), "a b", "é"] {
            assert!(check_key(bad).is_err(), "{bad}");
        }
        for ok in ["", "payments", "v1.2_3"] {
            assert!(check_value(ok).is_ok(), "{ok}");
        }
        for bad in ["-x", "a,b", "a=b", &"v".repeat(64)] {
            assert!(check_value(bad).is_err(), "{bad}");
        }
        assert!(check_name("holidays-2026").is_ok());
        for bad in ["Holidays", "a_b", "", "-a"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn req(key: &str, op: Op) -> Requirement {
        Requirement { key: key.to_owned(), op }
    }

    #[test]
    fn every_kubernetes_form_parses() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases = [
            ("team=payments", vec![req("team", Op::Eq("payments".into()))]),
            ("team==payments", vec![req("team", Op::Eq("payments".into()))]),
            ("tier!=batch", vec![req("tier", Op::NotEq("batch".into()))]),
            ("env in (prod, staging)", vec![req("env", Op::In(s(&["prod", "staging"])))]),
            ("env in(prod)", vec![req("env", Op::In(s(&["prod"])))]),
            ("env notin (dev,dev,test)", vec![req("env", Op::NotIn(s(&["dev", "test"])))]),
            ("gpu", vec![req("gpu", Op::Exists)]),
            ("!gpu", vec![req("gpu", Op::NotExists)]),
            ("! gpu", vec![req("gpu", Op::NotExists)]),
            ("owner=", vec![req("owner", Op::Eq(String::new()))]),
            ("app.kubernetes.io/name = web", vec![req("app.kubernetes.io/name", Op::Eq("web".into()))]),
            // `in` as a key, not an operator.
            ("in=x", vec![req("in", Op::Eq("x".into()))]),
            (
                " team=payments , tier!=batch,env in (a,b),gpu,!spot ",
                vec![
                    req("team", Op::Eq("payments".into())),
                    req("tier", Op::NotEq("batch".into())),
                    req("env", Op::In(s(&["a", "b"]))),
                    req("gpu", Op::Exists),
                    req("spot", Op::NotExists),
                ],
            ),
        ];
        for (text, expected) in cases {
            let parsed = Selector::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(parsed.requirements, expected, "{text:?}");
            // The canonical text parses back to the same selector.
            assert_eq!(Selector::parse(&parsed.to_string()).unwrap(), parsed, "{text:?} -> {parsed}");
        }
        assert!(Selector::parse("").unwrap().is_empty());
        assert!(Selector::parse("  ").unwrap().is_empty());
    }

    #[test]
    fn a_bad_selector_names_the_bad_term() {
        let cases = [
            ("team=payments,tier=b@d", "tier=b@d"),
            ("team=payments,,tier=x", ""),
            ("team=payments,", ""),
            ("env in (a,b", "env in (a,b"),
            ("env in a,b", "env in a"),
            ("env in ()", "env in ()"),
            ("env in (a,,b)", "env in (a,,b)"),
            ("env notin (a,(b))", "env notin (a,("),
            ("x=1,env) ", "env)"),
            ("replicas>3", "replicas>3"),
            ("team payments", "team payments"),
            ("=x", "=x"),
            ("!a=b", "!a=b"),
            ("Bad.Prefix/x=1", "Bad.Prefix/x=1"),
            ("a=b=c", "a=b=c"),
        ];
        for (text, term) in cases {
            let e = Selector::parse(text).expect_err(text);
            assert_eq!(e.term.trim(), term, "{text:?}: {e}");
            assert!(!e.message.is_empty());
            assert!(e.to_string().contains(&format!("{:?}", e.term)), "{e}");
        }
        let many = (0..=SELECTOR_TERMS_MAX).map(|i| format!("k{i}")).collect::<Vec<_>>().join(",");
        assert!(Selector::parse(&many).unwrap_err().message.contains("at most"));
        let big_set =
            format!("k in ({})", (0..=SELECTOR_SET_MAX).map(|i| format!("v{i}")).collect::<Vec<_>>().join(","));
        assert!(Selector::parse(&big_set).unwrap_err().message.contains("at most"));
    }

    /// The limits bound the work, not only the answer: a selector past a
    /// limit is refused at the limit, before what follows it is read (what
    /// follows here would be an error of its own if it were read).
    #[test]
    fn parsing_stops_at_each_limit() {
        // 30,000 values: refused by its length before any term is split.
        let huge = format!("k in ({})", (0..30_000).map(|i| format!("v{i}")).collect::<Vec<_>>().join(","));
        let e = Selector::parse(&huge).unwrap_err();
        assert!(e.message.contains(&format!("at most {SELECTOR_MAX_BYTES} bytes")), "{e}");
        assert!(e.term.chars().count() <= 121, "the error quotes a short prefix: {e}");
        // A set's item past the limit is not read: the next one is invalid.
        let values = (0..SELECTOR_SET_MAX).map(|i| format!("v{i}")).collect::<Vec<_>>().join(",");
        let e = Selector::parse(&format!("k in ({values},v-extra,b@d)")).unwrap_err();
        assert_eq!(e.message, format!("a set may hold at most {SELECTOR_SET_MAX} values"), "{e}");
        let e = Selector::parse(&format!("k in ({values},b@d)")).unwrap_err();
        assert_eq!(e.message, format!("a set may hold at most {SELECTOR_SET_MAX} values"), "{e}");
        // Exactly at the limit parses.
        assert!(Selector::parse(&format!("k in ({values})")).is_ok());
        // A term past the limit is not split: the unclosed '(' after it is never seen.
        let terms = (0..SELECTOR_TERMS_MAX).map(|i| format!("k{i}")).collect::<Vec<_>>().join(",");
        let e = Selector::parse(&format!("{terms},extra,k in (a")).unwrap_err();
        assert_eq!(e.message, format!("a selector may hold at most {SELECTOR_TERMS_MAX} terms"), "{e}");
        assert_eq!(Selector::parse(&terms).unwrap().requirements.len(), SELECTOR_TERMS_MAX);
    }

    #[test]
    fn errors_quote_a_short_escaped_prefix_of_a_refused_value() {
        let key = format!("\u{1b}[31m{}", "k".repeat(200_000));
        let e = check_key(&key).unwrap_err();
        assert!(e.len() < 400, "{} bytes: {e:.200}", e.len());
        assert!(e.contains("\\u{1b}[31m") && !e.contains('\u{1b}'), "{e}");
        let e = check_value(&"v".repeat(100_000)).unwrap_err();
        assert!(e.len() < 400, "{} bytes", e.len());
        let e = Selector::parse("k=\u{202e}x").unwrap_err();
        assert!(!e.to_string().contains('\u{202e}'), "{e}");
    }

    #[test]
    fn matching_follows_kubernetes_semantics() {
        let job = labels(&[("team", "payments"), ("tier", "web"), ("owner", "")]);
        let none = labels(&[]);
        let check = |text: &str, on_job: bool, on_none: bool| {
            let s = Selector::parse(text).unwrap();
            assert_eq!(s.matches(&job), on_job, "{text:?} on {job:?}");
            assert_eq!(s.matches(&none), on_none, "{text:?} on no labels");
        };
        check("team=payments", true, false);
        check("team=other", false, false);
        // `!=` and `notin` also match a job without the key.
        check("team!=other", true, true);
        check("team!=payments", false, true);
        check("tier in (web,batch)", true, false);
        check("tier notin (web)", false, true);
        check("tier notin (batch)", true, true);
        check("owner", true, false);
        check("owner=", true, false);
        check("!owner", false, true);
        check("team=payments,tier!=batch", true, false);
        check("team=payments,!tier", false, false);
        check("", true, true);
    }

    fn requirement() -> impl proptest::strategy::Strategy<Value = Requirement> {
        use proptest::prelude::*;
        let key = prop::sample::select(vec!["team", "tier", "app.kubernetes.io/name", "in", "notin", "x"]);
        let value = || prop::sample::select(vec!["", "a", "b", "payments", "v1.2_3"]);
        let set = || prop::collection::btree_set(prop::sample::select(vec!["a", "b", "c", "v-1"]), 1..4);
        let op = prop_oneof![
            value().prop_map(|v| Op::Eq(v.to_owned())),
            value().prop_map(|v| Op::NotEq(v.to_owned())),
            set().prop_map(|s| Op::In(s.into_iter().map(str::to_owned).collect())),
            set().prop_map(|s| Op::NotIn(s.into_iter().map(str::to_owned).collect())),
            Just(Op::Exists),
            Just(Op::NotExists),
        ];
        (key, op).prop_map(|(key, op)| Requirement { key: key.to_owned(), op })
    }

    proptest::proptest! {
        /// Any selector's canonical text parses back to it.
        #[test]
        fn the_canonical_text_parses_back(requirements in proptest::collection::vec(requirement(), 1..6)) {
            let selector = Selector { requirements };
            proptest::prop_assert_eq!(Selector::parse(&selector.to_string()).unwrap(), selector);
        }
    }
}
