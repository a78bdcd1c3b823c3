//! What a request may hold, checked before the work it bounds, and what an
//! answer or a log line may show of it: selectors refused at their limits
//! by both routes that take one, control, bidi and zero-width characters
//! refused in URLs and names, target header names compared as CGI
//! receivers read them, small error answers whatever was refused, and the
//! debug request log of the real binary without query secrets.

#[path = "support/process.rs"]
mod process;
#[path = "support/lib.rs"]
mod support;

use std::time::{Duration, Instant};

use process::ApiProcess;
use serde_json::{Value, json};
use support::*;

fn job(name: &str) -> Value {
    json!({
        "name": name,
        "schedule": { "kind": "interval", "every_ms": 3_600_000 },
        "target": http_target(),
        "labels": { "team": "payments" },
    })
}

/// A 30,000-value set (and the other limits) is refused at once by
/// `GET /v1/jobs?selector=` and by `POST /v1/jobs/bulk`, with an error that
/// says which limit, in a small answer.
#[tokio::test]
async fn a_selector_past_its_limits_is_refused_by_both_routes() {
    let app = TestApp::start("limits-selector").await;
    app.create_job(&job("one")).await;
    let huge = format!("team in ({})", vec!["a"; 30_000].join(","));
    let set_101 = format!("team in ({})", (0..101).map(|i| format!("v{i}")).collect::<Vec<_>>().join(","));
    let terms_65 = (0..65).map(|i| format!("k{i}")).collect::<Vec<_>>().join(",");
    let cases = [
        (huge.as_str(), "a selector may be at most 16384 bytes long"),
        (set_101.as_str(), "a set may hold at most 100 values"),
        (terms_65.as_str(), "a selector may hold at most 64 terms"),
    ];
    for (selector, why) in cases {
        let started = Instant::now();
        // Commas and parentheses as they are: the 30,000 values fit hyper's
        // 64 KiB limit on a request target only so.
        let query = selector.replace(' ', "%20").replace('=', "%3D");
        let listed = app.get(&format!("/v1/jobs?selector={query}")).await;
        let bulk = app.post_json("/v1/jobs/bulk", &json!({ "action": "pause", "selector": selector })).await;
        let took = started.elapsed();
        for (route, r) in [("GET /v1/jobs", &listed), ("POST /v1/jobs/bulk", &bulk)] {
            assert_eq!(r.status, 422, "{route} {why}: {:.300}", r.text);
            let body = r.json();
            assert_eq!(body["errors"][0]["field"], "selector", "{route}: {body}");
            assert!(body["errors"][0]["message"].as_str().unwrap().contains(why), "{route}: {body}");
            assert!(r.text.len() < 2_000, "{route}: a {}-byte answer", r.text.len());
        }
        // Generous for a debug build on a busy machine; the quadratic
        // parse took 1.2 s of CPU for the 30,000 values alone.
        assert!(took < Duration::from_secs(2), "{why}: {took:?}");
    }
    // Nothing was paused.
    assert_eq!(app.get("/v1/jobs?paused=true").await.json()["items"], json!([]));
}

/// `target.url` holding CR/LF, ESC, BEL or a bidi control is refused (the
/// URL parser would have dropped or encoded them silently, and the text
/// given is what is stored and shown); so are names holding bidi or
/// zero-width characters, and target headers that a CGI receiver folds
/// into cronshard's own.
#[tokio::test]
async fn control_and_invisible_characters_and_folded_reserved_headers_are_refused() {
    let app = TestApp::start("limits-characters").await;
    for bad in ["\r\nX-Forged: 1", "\u{1b}[2J", "\u{7}", "\u{202e}", "\u{200b}"] {
        let mut body = job("url");
        body["target"]["url"] = json!(format!("https://hooks.example.com/run{bad}"));
        let r = app.post_json("/v1/jobs", &body).await;
        assert_eq!(r.status, 422, "{bad:?}: {}", r.text);
        assert_eq!(r.json()["errors"][0]["field"], "target.url", "{}", r.text);
        assert!(!r.text.contains(bad), "the answer holds the character raw: {}", r.text);
    }
    for bad in ["\u{202e}", "\u{2066}", "\u{200b}", "\u{200f}", "\u{feff}"] {
        let r = app.post_json("/v1/jobs", &job(&format!("invoice{bad}gpj.exe"))).await;
        assert_eq!(r.status, 422, "{bad:?}: {}", r.text);
        assert_eq!(r.json()["errors"][0]["field"], "name", "{}", r.text);
        let mut body = job("header");
        body["target"]["headers"] = json!({ "X-Note": format!("a{bad}") });
        assert_eq!(app.post_json("/v1/jobs", &body).await.status, 201, "a header value may hold {bad:?} (UTF-8)");
    }
    for name in ["X-Cronshard_Execution-Id", "x_cronshard_attempt", "Content_Length", "Transfer_Encoding"] {
        for map in ["headers", "secret_headers"] {
            let mut body = job("reserved");
            body["target"][map] = json!({ name: "1" });
            let r = app.post_json("/v1/jobs", &body).await;
            assert_eq!(r.status, 422, "{map}.{name}: {}", r.text);
            assert_eq!(r.json()["errors"][0]["field"], format!("target.{map}.{name}"), "{}", r.text);
        }
    }
    let mut body = job("folded-twice");
    body["target"]["headers"] = json!({ "X-Api-Key": "1", "X_API_KEY": "2" });
    assert_eq!(app.post_json("/v1/jobs", &body).await.status, 422);
}

/// A refused value is quoted by a short escaped prefix: a 200 KB label key
/// (or header name, or unknown field) makes an answer of a few KB.
#[tokio::test]
async fn an_oversized_invalid_value_is_not_echoed_whole() {
    let app = TestApp::start("limits-echo").await;
    let huge = format!("\u{1b}]0;x\u{7}{}", "k".repeat(200_000));
    let mut body = job("echo");
    body["labels"] = json!({ huge.clone(): "v" });
    let r = app.post_json("/v1/jobs", &body).await;
    assert_eq!(r.status, 422, "{:.300}", r.text);
    assert!(r.text.len() < 4_000, "a {}-byte answer for a 200 KB key", r.text.len());
    assert!(!r.text.contains('\u{1b}') && !r.text.contains('\u{7}'), "{:.300}", r.text);
    assert!(r.text.contains("\\\\u{1b}]0;x\\\\u{7}kkk"), "the key's start is quoted, escaped: {:.300}", r.text);
    for body in [
        {
            let mut b = job("echo");
            b["target"]["headers"] = json!({ huge.clone(): "v" });
            b
        },
        {
            let mut b = job("echo");
            b[huge.clone()] = json!(1);
            b
        },
    ] {
        let r = app.post_json("/v1/jobs", &body).await;
        assert_eq!(r.status, 422);
        assert!(r.text.len() < 4_000, "a {}-byte answer", r.text.len());
    }
    let r = app.put_json("/v1/calendars/c", &json!({ "timezone": "UTC", huge: 1 }), None).await;
    assert!(r.text.len() < 4_000, "{} {:.300}", r.status, r.text);
}

/// `RUST_LOG=debug` logs each request's span; a query value (a token a
/// client put into the URL) is masked in it, as everywhere else.
#[tokio::test]
async fn the_debug_request_log_masks_query_values() {
    const SECRET: &str = "cst_QueryTokenThatMustNotBeLogged";
    let mut api = ApiProcess::start("limits-log", &[("API_TOKENS", ""), ("RUST_LOG", "debug")]).await;
    // Answered 400 (no such parameter): logged all the same.
    reqwest::get(format!("http://{}/v1/jobs?access_token={SECRET}&limit=5", api.addr)).await.unwrap();
    let seen = loop {
        let line = api.next_line();
        if line.contains("access_token") {
            break line;
        }
    };
    api.stop();
    let log = &api.log;
    assert!(seen.contains("uri=/v1/jobs?access_token=***&limit=***"), "{seen}");
    assert!(log.iter().all(|l| !l.contains(SECRET)), "the secret is in the log:\n{}", log.join("\n"));
}
