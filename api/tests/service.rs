//! The REST API as a service: the probes, GET /v1/cluster, bearer-token auth,
//! routing errors (404, 405, bad query strings), the OpenAPI document and
//! Swagger UI, and NUL characters in input. Against the real server in-process,
//! on the real Postgres and Redis. Each test gets its own database (`TestDb`),
//! its own cluster name (Redis key prefix) and its own server on an ephemeral
//! port.

#[path = "support/lib.rs"]
mod support;

use serde_json::json;

use testing::unique_cluster;

use support::*;

// ---------------------------------------------------------------------------
// Probes, cluster, auth, routing
// ---------------------------------------------------------------------------

#[tokio::test]
async fn probes_answer_200_with_a_live_database() {
    let app = TestApp::start("probes").await;
    let r = app.get("/healthz").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["status"], "ok");
    let r = app.get("/readyz").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["status"], "ready");
}

#[tokio::test]
async fn readyz_is_503_when_postgres_is_unreachable_but_healthz_is_200() {
    // Port 1 on loopback refuses connections at once.
    let app = TestApp::start_with(
        "notready",
        Options { pg_url: Some("postgres://postgres@127.0.0.1:1/postgres".into()), ..Options::default() },
    )
    .await;
    assert_eq!(app.get("/healthz").await.status, 200);
    assert_problem(&app.get("/readyz").await, 503);
    // No database connection is the service's state: a 503 problem document
    // that clients retry, without internals.
    let r = app.get("/v1/jobs").await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    let p = assert_problem(&r, r.status);
    assert!(!p["detail"].as_str().unwrap().contains("127.0.0.1:1"), "leaks internals: {p}");
}

#[tokio::test]
async fn cluster_lists_live_nodes_from_their_heartbeats() {
    let app = TestApp::start("cluster").await;
    let r = app.get("/v1/cluster").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["live_nodes"], json!(0), "{body}");
    assert_eq!(body["nodes"], json!([]), "{body}");
    assert_eq!(body["cluster"], json!(app.cluster));

    let key = format!("{}:node:n1", app.cluster);
    let other_cluster = unique_cluster("cluster-other");
    let other_key = format!("{other_cluster}:node:n9");
    // A heartbeat as a node writes it: the key with its TTL, and the id in
    // the cluster's registry.
    for (k, cluster, id) in [(&key, &app.cluster, "n1"), (&other_key, &other_cluster, "n9")] {
        app.redis_cmd(redis::cmd("SET").arg(k).arg(r#"{"node_id":"n1","owned_jobs":5}"#).arg("EX").arg(30)).await;
        app.redis_cmd(redis::cmd("SADD").arg(format!("{cluster}:nodes")).arg(id)).await;
    }
    let r = app.get("/v1/cluster").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["live_nodes"], json!(1), "{body}");
    let nodes = body["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "another cluster's node leaked in: {body}");
    assert_eq!(nodes[0]["node_id"], "n1");
    assert_eq!(nodes[0]["owned_jobs"], json!(5));
    assert_eq!(body["redis_shards_up"], json!(1));

    // Its heartbeat gone, the node is gone.
    app.redis_cmd(redis::cmd("DEL").arg(&key).arg(&other_key)).await;
    assert_eq!(app.get("/v1/cluster").await.json()["live_nodes"], json!(0));
}

#[tokio::test]
async fn cluster_is_503_when_no_redis_shard_answers() {
    let app =
        TestApp::start_with("noredis", Options { redis_url: Some("redis://127.0.0.1:1".into()), ..Options::default() })
            .await;
    assert_problem(&app.get("/v1/cluster").await, 503);
}

#[tokio::test]
async fn bearer_tokens_guard_v1_but_not_the_probes() {
    let app = TestApp::start_with("auth", Options { tokens: vec!["s3cret".into()], ..Options::default() }).await;
    let get = |auth: Option<&'static str>, path: &'static str| {
        let mut rb = app.http.get(app.url(path));
        if let Some(a) = auth {
            rb = rb.header("authorization", a);
        }
        app.send(rb)
    };

    let r = get(None, "/v1/jobs").await;
    assert_problem(&r, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    for wrong in ["Bearer nope", "Bearer s3cre", "Bearer s3cret-longer", "Bearer ", "Basic czNjcmV0", "s3cret"] {
        let r = get(Some(wrong), "/v1/jobs").await;
        assert_problem(&r, 401);
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{wrong}");
    }
    let r = get(Some("Bearer s3cret"), "/v1/jobs").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(get(Some("Bearer s3cret"), "/v1/cluster").await.status, 200);

    // Writes are guarded too, and a refused write stores nothing.
    let r = app.send(app.http.post(app.url("/v1/jobs")).json(&example_job())).await;
    assert_problem(&r, 401);
    let r = app
        .send(app.http.post(app.url("/v1/jobs")).header("authorization", "Bearer s3cret").json(&example_job()))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.job_rows().await, 1);
    assert_problem(&app.send(app.http.delete(app.url(&format!("/v1/jobs/{id}")))).await, 401);
    assert_problem(&app.send(app.http.post(app.url(&format!("/v1/jobs/{id}/pause")))).await, 401);
    assert_eq!(get(None, "/v1/jobs").await.status, 401);

    assert_eq!(get(None, "/healthz").await.status, 200);
    assert_eq!(get(None, "/readyz").await.status, 200);
}

/// RFC 9110 §11.1: the authentication scheme name is case-insensitive.
#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let app = TestApp::start_with("authcase", Options { tokens: vec!["s3cret".into()], ..Options::default() }).await;
    for auth in ["bearer s3cret", "BEARER s3cret"] {
        let r = app.send(app.http.get(app.url("/v1/jobs")).header("authorization", auth)).await;
        assert_eq!(r.status, 200, "{auth}: {}", r.text);
    }
}

#[tokio::test]
async fn unknown_routes_are_404_problems() {
    let app = TestApp::start("routes").await;
    for path in ["/nope", "/v1/nope", "/v2/jobs", "/v1/jobs/x/y/z"] {
        assert_problem(&app.get(path).await, 404);
    }
}

/// Errors are problem+json (RFC 9457) — also a method a route does not have.
#[tokio::test]
async fn a_wrong_method_is_a_405_problem() {
    let app = TestApp::start("405").await;
    let id = app.create_id(&example_job()).await;
    let r = app.send(app.http.post(app.url(&format!("/v1/jobs/{id}"))).json(&example_job())).await;
    assert_problem(&r, 405);
    assert!(r.header("allow").is_some(), "405 without Allow");
}

/// Errors are problem+json (RFC 9457) — also a query string that cannot be parsed.
#[tokio::test]
async fn a_malformed_query_string_is_a_problem() {
    let app = TestApp::start("query").await;
    let r = app.get("/v1/jobs?limit=1&limit=2").await;
    assert!(r.status == 400 || r.status == 422, "{} {}", r.status, r.text);
    assert_problem(&r, r.status);
}

/// The OpenAPI document is generated from the code, open (no token needed,
/// even with auth on), and covers every route of the router; Swagger UI
/// serves beside it.
#[tokio::test]
async fn the_openapi_document_and_swagger_ui_are_open_and_cover_every_route() {
    let app = TestApp::start_with("openapi", Options { tokens: vec!["s3cret".into()], ..Default::default() }).await;
    let r = app.get("/openapi.json").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.header("content-type").is_some_and(|ct| ct.starts_with("application/json")), "{:?}", r.headers);
    let doc = r.json();
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "{}", doc["openapi"]);
    let routes = [
        ("post", "/v1/jobs"),
        ("get", "/v1/jobs"),
        ("get", "/v1/jobs/{id}"),
        ("put", "/v1/jobs/{id}"),
        ("patch", "/v1/jobs/{id}"),
        ("delete", "/v1/jobs/{id}"),
        ("post", "/v1/jobs/bulk"),
        ("post", "/v1/jobs/batch"),
        ("post", "/v1/apply"),
        ("post", "/v1/jobs/{id}/backfill"),
        ("get", "/v1/backfills"),
        ("get", "/v1/backfills/{id}"),
        ("post", "/v1/backfills/{id}/cancel"),
        ("post", "/v1/schedules/preview"),
        ("post", "/v1/jobs/{id}/pause"),
        ("post", "/v1/jobs/{id}/resume"),
        ("get", "/v1/jobs/{id}/next"),
        ("post", "/v1/jobs/{id}/trigger"),
        ("get", "/v1/jobs/{id}/executions"),
        ("get", "/v1/jobs/{id}/executions/{scheduled_at}"),
        ("get", "/v1/executions"),
        ("post", "/v1/executions/replay"),
        ("post", "/v1/executions/{job_id}/{scheduled_at}/replay"),
        ("post", "/v1/executions/{execution_id}/complete"),
        ("get", "/v1/cluster"),
        ("get", "/v1/jobs/{id}/owners"),
        ("get", "/v1/workers"),
        ("get", "/v1/stats/lateness"),
        ("get", "/v1/executions/failures"),
        ("get", "/v1/jobs/outcomes"),
        ("get", "/v1/calendars"),
        ("get", "/v1/calendars/{name}"),
        ("put", "/v1/calendars/{name}"),
        ("delete", "/v1/calendars/{name}"),
        ("post", "/v1/signing-keys"),
        ("get", "/v1/signing-keys"),
        ("post", "/v1/signing-keys/rotate"),
        ("delete", "/v1/signing-keys/{id}"),
        ("post", "/v1/namespaces"),
        ("get", "/v1/namespaces"),
        ("get", "/v1/namespaces/{name}"),
        ("put", "/v1/namespaces/{name}"),
        ("delete", "/v1/namespaces/{name}"),
        ("post", "/v1/tokens"),
        ("get", "/v1/tokens"),
        ("delete", "/v1/tokens/{id}"),
        ("get", "/v1/jobs/{id}/versions"),
        ("post", "/v1/jobs/{id}/rollback"),
        ("get", "/v1/audit"),
        ("post", "/v1/alert-channels"),
        ("get", "/v1/alert-channels"),
        ("delete", "/v1/alert-channels/{id}"),
        ("post", "/v1/alert-rules"),
        ("get", "/v1/alert-rules"),
        ("patch", "/v1/alert-rules/{id}"),
        ("delete", "/v1/alert-rules/{id}"),
        ("get", "/v1/alerts"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/metrics"),
        ("get", "/openapi.json"),
        ("get", "/ui"),
        ("get", "/ui/"),
        ("get", "/ui/{asset}"),
    ];
    for (method, path) in routes {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is missing from the document");
        let secured = op["security"].as_array().is_some_and(|s| s.iter().any(|r| r.get("bearer").is_some()));
        // /metrics too: it needs a token while auth is on. A completion
        // report carries its attempt's completion token instead.
        let completion_report = path.ends_with("/complete");
        let wants_token = (path.starts_with("/v1/") && !completion_report) || path == "/metrics";
        assert_eq!(secured, wants_token, "{method} {path}: bearer security");
        // Every /v1 operation documents its problem+json errors.
        if path.starts_with("/v1/") {
            let problem = &op["responses"]["401"]["content"]["application/problem+json"];
            assert!(problem.is_object(), "{method} {path}: no problem+json 401");
        }
    }
    let documented: usize = doc["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(documented, routes.len(), "the document has operations the test does not list");
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    let problem = &doc["components"]["schemas"]["Problem"]["properties"];
    for f in ["status", "title", "detail", "errors"] {
        assert!(problem[f].is_object(), "Problem lacks {f}");
    }
    for union in ["ScheduleKind", "Target"] {
        let schema = &doc["components"]["schemas"][union];
        assert_eq!(schema["discriminator"]["propertyName"], "kind", "{union}: {schema}");
        assert!(schema["oneOf"].is_array(), "{union}: {schema}");
    }
    let job = &doc["components"]["schemas"]["JobSpec"]["properties"];
    for f in ["name", "schedule", "target", "retry", "misfire", "misfire_cap", "paused"] {
        assert!(job[f].is_object(), "JobSpec lacks {f}");
    }

    let ui = app.get("/docs/").await;
    assert_eq!(ui.status, 200, "{}", ui.text);
    assert!(ui.header("content-type").is_some_and(|ct| ct.starts_with("text/html")), "{:?}", ui.headers);
    assert!(ui.text.to_lowercase().contains("swagger"), "{}", ui.text);
    let ui = app.get("/docs").await; // redirected to /docs/
    assert_eq!(ui.status, 200, "{}", ui.text);
    // The API itself still wants the token.
    assert_problem(&app.get("/v1/jobs").await, 401);
}

/// A receiver reports an async completion with its attempt's completion
/// token, not an API token: with auth on, the route answers for the
/// completion token (a forged one is refused before any lookup), and an API
/// token is no substitute for it.
#[tokio::test]
async fn a_completion_report_is_authorised_by_its_completion_token_only() {
    let app = TestApp::start_with("complete", Options { tokens: vec!["s3cret".into()], ..Default::default() }).await;
    let path = "/v1/executions/00000000-0000-0000-0000-000000000001@2026-12-07T08:00:00.000Z/complete";
    let report = json!({ "status": "succeeded" });
    let send = |token: Option<(&'static str, &'static str)>| {
        let mut request = app.http.post(app.url(path)).json(&report);
        if let Some((name, value)) = token {
            request = request.header(name, value);
        }
        app.send(request)
    };
    for (token, says) in [
        (None, "needs the attempt's completion token"),
        (Some(("authorization", "Bearer s3cret")), "not one of this execution's"),
        (Some(("x-cronshard-completion-token", "cct1.test-1.1.AAAA")), "not one of this execution's"),
    ] {
        let r = send(token).await;
        assert_problem(&r, 401);
        assert!(r.json()["detail"].as_str().unwrap().contains(says), "{token:?}: {}", r.text);
    }
    let too_long = json!({ "status": "failed", "result": "x".repeat(1025) });
    let r = app.send(app.http.post(app.url(path)).json(&too_long)).await;
    assert_problem(&r, 422);
    assert_eq!(r.json()["errors"][0]["field"], "result", "{}", r.text);
}

/// Postgres cannot store a NUL character (jsonb or text), which made such
/// input a 500 (found while writing the OpenAPI schema); it is a 422 naming the field.
#[tokio::test]
async fn nul_characters_are_422_not_500() {
    let app = TestApp::start("nul").await;
    let mut job = example_job();
    job["target"]["body"] = json!("a\u{0}b");
    let r = app.post_json("/v1/jobs", &job).await;
    assert_problem(&r, 422);
    assert_eq!(r.json()["errors"][0]["field"], "target.body", "{}", r.text);
    assert_problem(&app.get("/v1/jobs?name_prefix=a%00").await, 422);
}

// ---------------------------------------------------------------------------
// HTTP-level bounds: slow clients, idle connections, shutdown, media types,
// duplicate keys
// ---------------------------------------------------------------------------

/// Reads `stream` until the server closes it or `limit` passes; returns what
/// was read and whether the server closed the connection in time.
async fn read_until_closed(stream: &mut tokio::net::tcp::OwnedReadHalf, limit: std::time::Duration) -> (String, bool) {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn quick_timeouts() -> Options {
    Options { header_read_timeout: Some(std::time::Duration::from_secs(1)), ..Options::default() }
}

/// A client that sends its request head a header at a time, each in time
/// but never finishing, is cut off once the header-read timeout has passed
/// since the head began (not since the last header): it cannot hold a
/// connection open for as long as it keeps trickling.
#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off_at_the_header_read_timeout() {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::start_with("trickle", quick_timeouts()).await;
    let started = std::time::Instant::now();
    let (mut read, mut write) = tokio::net::TcpStream::connect(app.addr()).await.unwrap().into_split();
    write.write_all(b"GET /healthz HTTP/1.1\r\nHost: cronshard\r\n").await.unwrap();
    let trickle = tokio::spawn(async move {
        for i in 0.. {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            if write.write_all(format!("X-Slow-{i}: still here\r\n").as_bytes()).await.is_err() {
                return i;
            }
        }
        unreachable!()
    });
    let (answer, closed) = read_until_closed(&mut read, std::time::Duration::from_secs(5)).await;
    let elapsed = started.elapsed();
    trickle.abort();
    assert!(closed, "the trickling connection was still open after {elapsed:?}");
    assert!(elapsed >= std::time::Duration::from_millis(900), "closed before the timeout: {elapsed:?}");
    assert!(elapsed < std::time::Duration::from_secs(3), "closed late: {elapsed:?}");
    assert!(!answer.contains(" 200 "), "the trickled request was served: {answer:?}");
    // The server is none the worse.
    assert_eq!(app.get("/healthz").await.status, 200);
}

/// A request whose head is sent in one go is served, and its keep-alive
/// connection, left idle, is closed after the same timeout rather than held.
#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_and_a_prompt_request_is_served() {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::start_with("idle", quick_timeouts()).await;
    let (mut read, mut write) = tokio::net::TcpStream::connect(app.addr()).await.unwrap().into_split();
    write.write_all(b"GET /healthz HTTP/1.1\r\nHost: cronshard\r\n\r\n").await.unwrap();
    let sent = std::time::Instant::now();
    let (answer, closed) = read_until_closed(&mut read, std::time::Duration::from_secs(5)).await;
    let elapsed = sent.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer:?}");
    assert!(!answer.to_ascii_lowercase().contains("connection: close"), "not kept alive: {answer:?}");
    assert!(closed, "the idle connection was still open after {elapsed:?}");
    assert!(elapsed >= std::time::Duration::from_millis(900), "closed before the timeout: {elapsed:?}");
    assert!(elapsed < std::time::Duration::from_secs(3), "closed late: {elapsed:?}");
}

/// The server under the router keeps the graceful shutdown of axum::serve:
/// once told to stop it accepts no new connection, closes idle ones at once
/// and finishes the request in flight.
#[tokio::test]
async fn shutdown_finishes_requests_in_flight_and_closes_idle_connections() {
    use tokio::io::AsyncWriteExt;
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::get(|| async {
            tokio::time::sleep(std::time::Duration::from_millis(700)).await;
            "done"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(api::server::serve(listener, app, api::server::Limits::default(), async move {
        let _ = stopped.await;
    }));
    // An idle connection, then a request in flight.
    let (mut idle, _idle_write) = tokio::net::TcpStream::connect(addr).await.unwrap().into_split();
    let (mut busy, mut busy_write) = tokio::net::TcpStream::connect(addr).await.unwrap().into_split();
    busy_write.write_all(b"GET /slow HTTP/1.1\r\nHost: cronshard\r\n\r\n").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let asked = std::time::Instant::now();
    stop.send(()).unwrap();
    let (_, idle_closed) = read_until_closed(&mut idle, std::time::Duration::from_secs(2)).await;
    assert!(idle_closed, "the idle connection stayed open through shutdown");
    assert!(
        asked.elapsed() < std::time::Duration::from_millis(400),
        "idle connection closed late: {:?}",
        asked.elapsed()
    );
    let (answer, busy_closed) = read_until_closed(&mut busy, std::time::Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("done"), "{answer:?}");
    assert!(busy_closed, "the finished connection stayed open");
    tokio::time::timeout(std::time::Duration::from_secs(5), server).await.expect("serve returned").unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "still accepting after shutdown");
}

/// A JSON body is `application/json`, exactly, parameters allowed;
/// look-alikes are refused as a wrong content type always was.
#[tokio::test]
async fn json_bodies_need_exactly_the_application_json_media_type() {
    let app = TestApp::start("mediatype").await;
    let post = |content_type: &'static str| {
        app.send(
            app.http.post(app.url("/v1/jobs")).header("content-type", content_type).body(example_job().to_string()),
        )
    };
    for accepted in [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON;charset=\"UTF-8\"",
        "application/json ; charset=utf-8",
    ] {
        let r = post(accepted).await;
        assert_eq!(r.status, 201, "{accepted:?}: {}", r.text);
    }
    for refused in [
        "application/jsonx",
        "application/json-seq",
        "application/merge-patch+json",
        "application/jsonp; charset=utf-8",
        "text/json",
        "application/json; charset=latin1",
        "application/json; nonsense",
        "text/plain; application/json",
    ] {
        let p = assert_problem(&post(refused).await, 400);
        assert!(p["detail"].as_str().unwrap().contains("Content-Type"), "{refused:?}: {p}");
    }
    assert_eq!(app.job_rows().await, 4, "a refused body created a job");
}

/// serde_json keeps the last of two equal keys; the API refuses the document
/// instead, naming the key and where it is.
#[tokio::test]
async fn duplicate_json_keys_are_refused_naming_the_key() {
    let app = TestApp::start("dupkeys").await;
    let send = |body: String| {
        app.send(app.http.post(app.url("/v1/jobs")).header("content-type", "application/json").body(body))
    };
    let job = example_job();
    let schedule = job["schedule"].to_string();
    let target = job["target"].to_string();

    let body = format!(r#"{{"name": "a", "schedule": {schedule}, "name": "b", "target": {target}}}"#);
    let p = assert_problem(&send(body).await, 400);
    assert!(p["detail"].as_str().unwrap().contains(r#"duplicate key "name""#), "{p}");

    let inner = target.replacen('{', r#"{"url": "https://evil.example/", "#, 1);
    let body = format!(r#"{{"name": "a", "schedule": {schedule}, "target": {inner}}}"#);
    let p = assert_problem(&send(body).await, 400);
    assert!(p["detail"].as_str().unwrap().contains(r#"duplicate key "url" in target"#), "{p}");

    let headers = r#"{"X-Token": "1", "x-other": "2", "X-Token": "3"}"#;
    let mut with_headers = job.clone();
    with_headers["target"]["headers"] = json!({});
    let body = with_headers.to_string().replace(r#""headers":{}"#, &format!(r#""headers":{headers}"#));
    let p = assert_problem(&send(body).await, 400);
    assert!(p["detail"].as_str().unwrap().contains(r#"duplicate key "X-Token" in target.headers"#), "{p}");

    // Equal keys in different objects, or equal values, are fine.
    let same_key_elsewhere = json!({ "name": "name", "schedule": job["schedule"], "target": job["target"] });
    let r = app.post_json("/v1/jobs", &same_key_elsewhere).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(app.job_rows().await, 1);
}

/// An unknown query parameter (`?label=…`, a misspelt `?statuss=`) once
/// answered as if it were absent, e.g. every job; it is a 400 naming it.
#[tokio::test]
async fn unknown_query_parameters_are_refused_naming_them() {
    let app = TestApp::start("unknown-query").await;
    let job = app.create_id(&example_job()).await;
    for path in [
        "/v1/jobs?label=team%3Dpayments".to_owned(),
        format!("/v1/jobs/{job}/executions?statuss=failed"),
        "/v1/executions?job=1".to_owned(),
        format!("/v1/jobs/{job}/next?since=2026-01-01T00:00:00Z"),
    ] {
        let r = app.get(&path).await;
        assert_problem(&r, 400);
        let name = path.split('?').nth(1).unwrap().split('=').next().unwrap();
        assert!(r.json()["detail"].as_str().unwrap().contains(name), "{path}: {}", r.text);
    }
    assert_eq!(app.get("/v1/jobs?limit=5&paused=false").await.status, 200, "known parameters still work");
}
