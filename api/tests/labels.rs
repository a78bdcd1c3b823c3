//! Labels, selectors and bulk actions: `GET /v1/jobs?selector=` against a
//! model of random labels, namespace isolation of the list and of
//! `POST /v1/jobs/bulk`, and what each bulk action does to every job it
//! matches (as the single-job route would). Against the real server
//! in-process on the real Postgres and Redis (own database, cluster name and
//! server per test).

#[path = "support/lib.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration as TimeDelta;
use reqwest::Method;
use serde_json::{Value, json};
use support::*;
use uuid::Uuid;

const BOOTSTRAP: &str = "bootstrap-admin-token-for-label-tests";

fn job(name: &str, labels: &BTreeMap<String, String>) -> Value {
    json!({
        "name": name,
        "schedule": { "kind": "interval", "every_ms": 3_600_000 },
        "target": http_target(),
        "labels": labels,
    })
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Every page of `GET /v1/jobs?{query}` (as `token`, or none): the ids.
async fn list_all(app: &TestApp, token: Option<&str>, query: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!("/v1/jobs?{query}&cursor={cursor}");
        let mut rb = app.http.get(app.url(&path));
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        let r = app.send(rb).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        let page = r.json();
        ids.extend(ids_of(&page));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => return ids,
        }
    }
}

async fn bulk(app: &TestApp, token: Option<&str>, body: Value) -> Resp {
    let mut rb = app.http.post(app.url("/v1/jobs/bulk")).json(&body);
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    app.send(rb).await
}

/// A small deterministic generator (xorshift64*): the seed is printed, so a
/// failing run can be repeated with `LABEL_TEST_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const KEYS: [&str; 4] = ["team", "tier", "env", "app.kubernetes.io/name"];
const VALUES: [&str; 4] = ["a", "b", "payments", ""];

/// One term of a random selector, as the model evaluates it (written here,
/// independently of the server's parser), and as text.
enum Term {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Term {
    fn random(rng: &mut Rng) -> Term {
        let key = rng.pick(&KEYS).to_owned();
        let value = |rng: &mut Rng| rng.pick(&VALUES).to_owned();
        let set = |rng: &mut Rng| {
            let mut s: Vec<String> =
                (0..1 + rng.below(3)).map(|_| rng.pick(&["a", "b", "payments"]).to_owned()).collect();
            s.dedup();
            s
        };
        match rng.below(6) {
            0 => Term::Eq(key, value(rng)),
            1 => Term::NotEq(key, value(rng)),
            2 => Term::In(key, set(rng)),
            3 => Term::NotIn(key, set(rng)),
            4 => Term::Exists(key),
            _ => Term::NotExists(key),
        }
    }

    fn holds(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Term::Eq(k, v) => labels.get(k) == Some(v),
            Term::NotEq(k, v) => labels.get(k) != Some(v),
            Term::In(k, set) => labels.get(k).is_some_and(|x| set.contains(x)),
            Term::NotIn(k, set) => labels.get(k).is_none_or(|x| !set.contains(x)),
            Term::Exists(k) => labels.contains_key(k),
            Term::NotExists(k) => !labels.contains_key(k),
        }
    }

    /// The term as text, in one of the spellings the syntax allows.
    fn text(&self, rng: &mut Rng) -> String {
        let sp = |rng: &mut Rng| if rng.below(3) == 0 { " " } else { "" };
        match self {
            Term::Eq(k, v) => format!("{k}{}{}{}{v}", sp(rng), if rng.below(2) == 0 { "=" } else { "==" }, sp(rng)),
            Term::NotEq(k, v) => format!("{k}{}!={}{v}", sp(rng), sp(rng)),
            Term::In(k, set) => format!("{k} in ({})", set.join(&format!(",{}", sp(rng)))),
            Term::NotIn(k, set) => format!("{k} notin ({})", set.join(",")),
            Term::Exists(k) => k.clone(),
            Term::NotExists(k) => format!("!{k}"),
        }
    }
}

#[tokio::test]
async fn selector_lists_agree_with_a_model_of_random_labels() {
    let app = TestApp::start("labels-model").await;
    let seed: u64 = std::env::var("LABEL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| Uuid::new_v4().as_u64_pair().0 | 1);
    println!("LABEL_TEST_SEED={seed}");
    let mut rng = Rng(seed);

    // Jobs with 0 to 4 random labels; the model is id -> labels.
    let mut model: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for i in 0..40 {
        let mut l = BTreeMap::new();
        for _ in 0..rng.below(5) {
            l.insert(rng.pick(&KEYS).to_owned(), rng.pick(&VALUES).to_owned());
        }
        let id = app.create_id(&job(&format!("job-{i}"), &l)).await;
        assert_eq!(app.job(&id).await["labels"], if l.is_empty() { Value::Null } else { json!(l) });
        model.insert(id, l);
    }
    // Deleted jobs never match.
    for id in model.keys().take(3).cloned().collect::<Vec<_>>() {
        assert_eq!(app.delete(&format!("/v1/jobs/{id}")).await.status, 204);
        model.remove(&id);
    }

    for round in 0..60 {
        let terms: Vec<Term> = (0..1 + rng.below(3)).map(|_| Term::random(&mut rng)).collect();
        let text = terms.iter().map(|t| t.text(&mut rng)).collect::<Vec<_>>().join(",");
        let expected: BTreeSet<String> =
            model.iter().filter(|(_, l)| terms.iter().all(|t| t.holds(l))).map(|(id, _)| id.clone()).collect();
        // Small pages on some rounds: the selector holds across the cursor.
        let limit = if round % 3 == 0 { 4 } else { 500 };
        let got = list_all(&app, None, &format!("limit={limit}&selector={}", enc(&text))).await;
        let got_set: BTreeSet<String> = got.iter().cloned().collect();
        assert_eq!(got.len(), got_set.len(), "an id repeats across pages for {text:?}: {got:?}");
        assert_eq!(got_set, expected, "selector {text:?} (seed {seed})");
    }
}

#[tokio::test]
async fn a_bad_selector_is_a_422_naming_the_parameter_and_the_term() {
    let app = TestApp::start("labels-bad").await;
    for (selector, term) in [
        ("team=payments,tier=b@d", "tier=b@d"),
        ("env in (a,b", "env in (a,b"),
        ("replicas>3", "replicas>3"),
        ("team=payments,,x", ""),
    ] {
        let r = app.get(&format!("/v1/jobs?selector={}", enc(selector))).await;
        assert_invalid(&r, &["selector"]);
        let message = r.json()["errors"][0]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(&format!("{term:?}")), "{selector:?}: {message}");
    }
    // `label` is not a parameter: unknown parameters stay a 400 naming them.
    let r = app.get("/v1/jobs?label=team%3Dpayments").await;
    let problem = assert_problem(&r, 400);
    assert!(problem["detail"].as_str().unwrap().contains("label"), "{problem}");
    // The selector combines with the other filters.
    let a = app.create_id(&job("alpha", &labels(&[("team", "payments")]))).await;
    app.create_id(&job("beta", &labels(&[("team", "payments")]))).await;
    assert_eq!(list_all(&app, None, "name_prefix=al&selector=team%3Dpayments").await, [a]);
}

#[tokio::test]
async fn namespaces_bound_what_a_selector_lists_and_a_bulk_action_changes() {
    let app =
        TestApp::start_with("labels-tenancy", Options { tokens: vec![BOOTSTRAP.to_owned()], ..Default::default() })
            .await;
    let call = |token: &str, method: Method, path: &str, body: Option<Value>| {
        let mut rb = app.http.request(method, app.url(path)).bearer_auth(token);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        app.send(rb)
    };
    for ns in ["team-a", "team-b"] {
        assert_eq!(call(BOOTSTRAP, Method::POST, "/v1/namespaces", Some(json!({ "name": ns }))).await.status, 201);
    }
    let mut tokens = BTreeMap::new();
    for (ns, role) in [("team-a", "write"), ("team-b", "write"), ("team-a", "read")] {
        let body = json!({ "name": format!("{role} {ns}"), "role": role, "namespaces": [ns] });
        let r = call(BOOTSTRAP, Method::POST, "/v1/tokens", Some(body)).await;
        assert_eq!(r.status, 201, "{}", r.text);
        tokens.insert((ns, role), r.json()["token"].as_str().unwrap().to_owned());
    }
    let (ta, tb, ta_read) =
        (&tokens[&("team-a", "write")], &tokens[&("team-b", "write")], &tokens[&("team-a", "read")]);
    let same = labels(&[("team", "payments")]);
    let mut ids: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (ns, token) in [("team-a", ta), ("team-b", tb)] {
        for i in 0..3 {
            let r = call(token, Method::POST, "/v1/jobs", Some(job(&format!("{ns}-{i}"), &same))).await;
            assert_eq!(r.status, 201, "{}", r.text);
            ids.entry(ns).or_default().push(r.json()["id"].as_str().unwrap().to_owned());
        }
    }
    let sorted = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();

    // The list: each token sees its own namespace's jobs only; the
    // bootstrap admin sees both, and may narrow to one.
    assert_eq!(sorted(&list_all(&app, Some(ta), "selector=team%3Dpayments").await), sorted(&ids["team-a"]));
    assert_eq!(sorted(&list_all(&app, Some(tb), "selector=team%3Dpayments").await), sorted(&ids["team-b"]));
    assert_eq!(list_all(&app, Some(BOOTSTRAP), "selector=team%3Dpayments").await.len(), 6);
    assert_eq!(
        sorted(&list_all(&app, Some(BOOTSTRAP), "selector=team%3Dpayments&namespace=team-b").await),
        sorted(&ids["team-b"])
    );

    // A bulk pause by A's token matches and changes A's jobs only.
    let r = bulk(&app, Some(ta), json!({ "action": "pause", "selector": "team=payments" })).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({ "action": "pause", "selector": "team=payments", "matched": 3, "changed": 3 }));
    // Naming B's namespace does not reach it either.
    let r = bulk(&app, Some(ta), json!({ "action": "delete", "selector": "team", "namespace": "team-b" })).await;
    assert_eq!((r.status, r.json()["matched"].clone()), (200, json!(0)), "{}", r.text);
    for id in &ids["team-b"] {
        let job = call(tb, Method::GET, &format!("/v1/jobs/{id}"), None).await.json();
        assert_eq!((job["paused"].clone(), job["version"].clone()), (json!(false), json!(1)), "{job}");
    }
    for id in &ids["team-a"] {
        let job = call(ta, Method::GET, &format!("/v1/jobs/{id}"), None).await.json();
        assert_eq!((job["paused"].clone(), job["version"].clone()), (json!(true), json!(2)), "{job}");
    }
    // A read token lists but may not act.
    assert_eq!(list_all(&app, Some(ta_read), "selector=team%3Dpayments").await.len(), 3);
    let r = bulk(&app, Some(ta_read), json!({ "action": "resume", "selector": "team=payments" })).await;
    assert_problem(&r, 403);
}

/// A `pending` row of `job` for a slot an hour ahead, as a scheduler's claim
/// leaves it; returns the slot.
async fn claimed_row(app: &TestApp, job: &str) -> String {
    let at = now_ms() + TimeDelta::hours(1);
    let id = Uuid::parse_str(job).unwrap();
    app.sql()
        .await
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, job_version)
             VALUES ($1, $2, $3, $4, 'pending', 1)",
            &[&id, &at, &Uuid::now_v7(), &format!("{job}@{}", ts(at))],
        )
        .await
        .unwrap();
    ts(at)
}

async fn executions(app: &TestApp, job: &str) -> Vec<Value> {
    let r = app.get(&format!("/v1/jobs/{job}/executions")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["items"].as_array().unwrap().clone()
}

#[tokio::test]
async fn bulk_pause_resume_and_delete_change_each_matched_job_as_the_single_job_routes_do() {
    let app = TestApp::start("labels-bulk").await;
    let payments = labels(&[("team", "payments"), ("tier", "web")]);
    let mut matched = Vec::new();
    for i in 0..4 {
        matched.push(app.create_id(&job(&format!("p{i}"), &payments)).await);
    }
    // One matched job is paused already; the batch tier and another team are not matched.
    let mut paused = job("p-paused", &payments);
    paused["paused"] = json!(true);
    let already_paused = app.create_id(&paused).await;
    let batch = app.create_id(&job("batch", &labels(&[("team", "payments"), ("tier", "batch")]))).await;
    let other = app.create_id(&job("other", &labels(&[("team", "search")]))).await;
    let slot = claimed_row(&app, &matched[0]).await;

    let empty = bulk(&app, None, json!({ "action": "delete", "selector": "" })).await;
    assert_invalid(&empty, &["selector"]);
    let unknown = bulk(&app, None, json!({ "action": "delete", "selector": "team", "label": "x" })).await;
    assert_invalid(&unknown, &["label"]);

    let r = bulk(&app, None, json!({ "action": "pause", "selector": "team = payments, tier!=batch" })).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({ "action": "pause", "selector": "team=payments,tier!=batch", "matched": 5, "changed": 4 })
    );
    for id in &matched {
        let job = app.job(id).await;
        assert_eq!(
            (job["paused"].clone(), job["version"].clone(), job["next_fire_at"].clone()),
            (json!(true), json!(2), Value::Null),
            "{job}"
        );
    }
    // The job already paused is not paused again (no new version).
    assert_eq!(app.job(&already_paused).await["version"], json!(1));
    for id in [&batch, &other] {
        let job = app.job(id).await;
        assert_eq!((job["paused"].clone(), job["version"].clone()), (json!(false), json!(1)), "{job}");
    }
    // The claimed row of a paused job is cancelled, as a single pause does.
    let rows = executions(&app, &matched[0]).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0]["scheduled_at"].as_str(), rows[0]["status"].as_str()), (Some(slot.as_str()), Some("skipped")));
    assert_eq!(rows[0]["reason"], "paused", "{}", rows[0]);

    let r = bulk(&app, None, json!({ "action": "resume", "selector": "team=payments,tier in (web)" })).await;
    assert_eq!((r.json()["matched"].clone(), r.json()["changed"].clone()), (json!(5), json!(5)), "{}", r.text);
    for id in &matched {
        let job = app.job(id).await;
        assert_eq!((job["paused"].clone(), job["version"].clone()), (json!(false), json!(3)), "{job}");
        assert!(job["next_fire_at"].is_string(), "{job}");
    }
    assert_eq!(app.job(&already_paused).await["version"], json!(2));

    let r = bulk(&app, None, json!({ "action": "delete", "selector": "tier=web" })).await;
    assert_eq!((r.json()["matched"].clone(), r.json()["changed"].clone()), (json!(5), json!(5)), "{}", r.text);
    for id in matched.iter().chain([&already_paused]) {
        assert_problem(&app.get(&format!("/v1/jobs/{id}")).await, 404);
    }
    assert_eq!(list_all(&app, None, "selector=team%3Dpayments").await, [batch]);
    // Nothing left to match: a bulk call that matches nothing is not an error.
    let r = bulk(&app, None, json!({ "action": "delete", "selector": "tier=web" })).await;
    assert_eq!(r.json(), json!({ "action": "delete", "selector": "tier=web", "matched": 0, "changed": 0 }));
}

#[tokio::test]
async fn bulk_trigger_fires_each_matched_job_once() {
    let app = TestApp::start("labels-trigger").await;
    let nightly = labels(&[("schedule", "nightly")]);
    let matched: Vec<String> = {
        let mut v = Vec::new();
        for i in 0..3 {
            v.push(app.create_id(&job(&format!("n{i}"), &nightly)).await);
        }
        v
    };
    let unmatched = app.create_id(&job("hourly", &labels(&[("schedule", "hourly")]))).await;
    let r = bulk(&app, None, json!({ "action": "trigger", "selector": "schedule in (nightly)" })).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!((r.json()["matched"].clone(), r.json()["changed"].clone()), (json!(3), json!(3)));
    for id in &matched {
        let rows = executions(&app, id).await;
        assert_eq!(rows.len(), 1, "{id}: {rows:?}");
        assert_eq!(rows[0]["trigger"], "manual", "{}", rows[0]);
        assert!(rows[0]["execution_id"].as_str().unwrap().ends_with("#manual"), "{}", rows[0]);
        // A trigger is not a change: the version stays.
        assert_eq!(app.job(id).await["version"], json!(1));
    }
    assert!(executions(&app, &unmatched).await.is_empty());
}

#[tokio::test]
async fn a_bulk_action_over_five_thousand_jobs_is_refused_and_changes_nothing() {
    let app = TestApp::start("labels-cap").await;
    let first = app.create_id(&job("seen", &labels(&[("fleet", "big")]))).await;
    // 5,000 more of the same definition, written directly: the API would
    // take minutes to create them on this machine.
    app.sql()
        .await
        .execute(
            "INSERT INTO jobs (id, name, spec) SELECT gen_random_uuid(), name, spec FROM jobs, generate_series(1, 5000)",
            &[],
        )
        .await
        .unwrap();
    let r = bulk(&app, None, json!({ "action": "pause", "selector": "fleet=big" })).await;
    assert_invalid(&r, &["selector"]);
    assert!(r.text.contains("5000"), "{}", r.text);
    assert_eq!(app.job(&first).await["paused"], json!(false));
}

#[tokio::test]
async fn a_bulk_resume_over_a_quota_changes_no_job() {
    let app = TestApp::start("labels-quota").await;
    let r = app.post_json("/v1/namespaces", &json!({ "name": "metered", "max_fires_per_second": 1.0 })).await;
    assert_eq!(r.status, 201, "{}", r.text);
    // Three paused jobs firing every 2 s: any two fit the quota, three do not.
    let mut ids = Vec::new();
    for i in 0..3 {
        let mut body = job(&format!("m{i}"), &labels(&[("meter", "yes")]));
        body["schedule"] = json!({ "kind": "interval", "every_ms": 2000 });
        body["paused"] = json!(true);
        body["namespace"] = json!("metered");
        ids.push(app.create_id(&body).await);
    }
    let r = bulk(&app, None, json!({ "action": "resume", "selector": "meter=yes" })).await;
    assert_problem(&r, 409);
    for id in &ids {
        let job = app.job(id).await;
        assert_eq!((job["paused"].clone(), job["version"].clone()), (json!(true), json!(1)), "{job}");
    }
    // Within the quota, the same call resumes them.
    assert_eq!(app.delete(&format!("/v1/jobs/{}", ids[2])).await.status, 204);
    let r = bulk(&app, None, json!({ "action": "resume", "selector": "meter=yes" })).await;
    assert_eq!((r.status, r.json()["changed"].clone()), (200, json!(2)), "{}", r.text);
}
