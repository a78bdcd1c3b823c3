//! The console's static routes (`/ui`): served without a token with their
//! content types, a strict Content-Security-Policy and revalidation
//! headers; an unknown file is a 404; the data routes still want a token.

#[path = "support/lib.rs"]
mod support;

use support::*;

const TOKEN: &str = "console-route-test-token";

async fn app() -> TestApp {
    TestApp::start_with("ui", Options { tokens: vec![TOKEN.to_owned()], ..Default::default() }).await
}

#[tokio::test]
async fn the_page_and_its_files_are_served_without_a_token() {
    let app = app().await;
    let index = app.get("/ui/").await;
    assert_eq!(index.status, 200, "{}", index.text);
    assert_eq!(index.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(index.text.contains(r#"<script type="module" src="./app.js"></script>"#), "{}", index.text);
    // No inline script: every <script> names its file.
    assert_eq!(index.text.matches("<script").count(), index.text.matches("<script type=\"module\" src=").count());

    let csp = index.header("content-security-policy").expect("a CSP header");
    for directive in ["default-src 'self'", "script-src 'self'", "object-src 'none'", "frame-ancestors 'none'"] {
        assert!(csp.contains(directive), "{directive} missing from {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(index.header("cache-control"), Some("no-cache"));
    assert_eq!(index.header("x-content-type-options"), Some("nosniff"));

    for (file, content_type) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("jobs.js", "text/javascript; charset=utf-8"),
        ("signing-keys.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    ] {
        let r = app.get(&format!("/ui/{file}")).await;
        assert_eq!(r.status, 200, "{file}: {}", r.text);
        assert_eq!(r.header("content-type"), Some(content_type), "{file}");
        assert!(r.header("content-security-policy").is_some(), "{file}");
        assert!(r.header("etag").is_some(), "{file}");
        assert!(!r.text.is_empty(), "{file}");
    }
}

#[tokio::test]
async fn an_unchanged_file_is_a_304() {
    let app = app().await;
    let first = app.get("/ui/app.js").await;
    let etag = first.header("etag").expect("an ETag").to_owned();
    let again = app.send(app.http.get(app.url("/ui/app.js")).header("if-none-match", &etag)).await;
    assert_eq!(again.status, 304);
    assert!(again.text.is_empty());
    assert_eq!(again.header("etag"), Some(etag.as_str()));
    let other = app.send(app.http.get(app.url("/ui/app.js")).header("if-none-match", "\"something-else\"")).await;
    assert_eq!(other.status, 200);
}

#[tokio::test]
async fn ui_without_the_slash_redirects_and_unknown_files_are_404() {
    let app = app().await;
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = client.get(app.url("/ui")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 308);
    assert_eq!(r.headers().get("location").and_then(|v| v.to_str().ok()), Some("/ui/"));

    for path in ["/ui/nope.js", "/ui/..%2FCargo.toml", "/ui/index.htm", "/ui/app.js/x"] {
        let r = app.get(path).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        assert_eq!(r.header("content-type"), Some("application/problem+json"), "{path}");
    }
}

#[tokio::test]
async fn the_data_routes_still_want_the_token() {
    let app = app().await;
    for path in ["/v1/jobs", "/v1/cluster"] {
        let r = app.get(path).await;
        assert_eq!(r.status, 401, "{path}: {}", r.text);
        let ok = app.send(app.http.get(app.url(path)).bearer_auth(TOKEN)).await;
        assert_eq!(ok.status, 200, "{path}: {}", ok.text);
    }
    // A token sent to the page changes nothing (and is not needed).
    let page = app.send(app.http.get(app.url("/ui/")).bearer_auth("wrong")).await;
    assert_eq!(page.status, 200);
}

#[tokio::test]
async fn the_console_is_in_the_openapi_document() {
    let app = app().await;
    let doc = app.get("/openapi.json").await.json();
    for path in ["/ui", "/ui/", "/ui/{asset}"] {
        assert!(doc["paths"][path]["get"].is_object(), "{path} is not documented");
    }
}
