//! The API's `/metrics` answers only callers with a valid token when auth
//! is on (anonymous callers get the probes and the OpenAPI document), and
//! everyone when auth is off. Through the real binary, where `/metrics` is
//! mounted.

#[path = "support/process.rs"]
mod process;
#[path = "support/lib.rs"]
mod support;

use process::ApiProcess;

const TOKEN: &str = "metrics-auth-bootstrap-token";

#[tokio::test]
async fn metrics_need_a_valid_token_when_auth_is_on() {
    let api = ApiProcess::start("metrics-auth", &[("API_TOKENS", TOKEN), ("RUST_LOG", "info")]).await;
    let http = reqwest::Client::new();
    let url = format!("http://{}/metrics", api.addr);
    let anonymous = http.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = http.get(&url).bearer_auth("not-a-token").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let authed = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(authed.status(), 200);
    // The probes stay open.
    assert_eq!(http.get(format!("http://{}/healthz", api.addr)).send().await.unwrap().status(), 200);
}
