//! Secret header values at rest: sealed in `jobs.spec` and in every
//! `job_changes` version (a value rotated out included), shown as `***`,
//! kept by a job read and written back, and refused with a clear error
//! when the server has no key-encryption key. Against the real server
//! in-process on the real Postgres and Redis. The worker's side (opening
//! them for the request, a KEK rotation, a wrong key) is in
//! `scheduler/tests/secrets_at_rest.rs`.

#[path = "support/lib.rs"]
mod support;

use serde_json::json;
use support::*;

const FIRST: &str = "Bearer first-SECRET-4c1d";
const SECOND: &str = "Bearer second-SECRET-8e2f";

fn job_with_secret(value: &str) -> serde_json::Value {
    json!({
        "name": "with-secret",
        "schedule": { "kind": "interval", "every_ms": 60000 },
        "target": { "kind": "http", "url": "https://example.com/hook", "secret_headers": { "Authorization": value } },
    })
}

#[tokio::test]
async fn secret_values_are_stored_sealed_in_every_version_and_never_in_clear() {
    let app = TestApp::start("secrets-at-rest").await;
    let id = app.create_id(&job_with_secret(FIRST)).await;
    // A read written back keeps the stored value; a new value replaces it.
    let mut read = app.job(&id).await;
    assert_eq!(read["target"]["secret_headers"]["Authorization"], "***");
    read["name"] = json!("renamed");
    for server_field in ["id", "version", "created_at", "updated_at", "next_fire_at", "namespace"] {
        read.as_object_mut().unwrap().remove(server_field);
    }
    let r = app.put_json(&format!("/v1/jobs/{id}"), &read, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = app.put_json(&format!("/v1/jobs/{id}"), &job_with_secret(SECOND), None).await;
    assert_eq!(r.status, 200, "{}", r.text);

    let pg = app.sql().await;
    let stored: Vec<String> = pg
        .query(
            "SELECT spec->'target'->'secret_headers'->>'Authorization' FROM jobs WHERE id = $1::text::uuid
             UNION ALL SELECT spec->'target'->'secret_headers'->>'Authorization' FROM job_changes WHERE job_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(stored.len(), 4, "the job and its three versions: {stored:?}");
    assert!(stored.iter().all(|v| v.starts_with(common::secrets::SEALED_PREFIX)), "{stored:?}");
    // The whole database as text: neither value, old or new, in clear.
    let everything: String = pg
        .query_one(
            "SELECT (SELECT string_agg(spec::text, ' ') FROM jobs) || (SELECT string_agg(spec::text, ' ') FROM job_changes)
                    || coalesce((SELECT string_agg(encode(sealed, 'escape'), ' ') FROM secret_data_keys), '')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for secret in [FIRST, SECOND] {
        assert!(!everything.contains(secret), "{secret:?} is stored in clear");
    }
    // Version 2 (the read written back) kept the first value as it was sealed.
    let v: Vec<String> = pg
        .query(
            "SELECT spec->'target'->'secret_headers'->>'Authorization' FROM job_changes WHERE job_id = $1::text::uuid ORDER BY version",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(v[0], v[1], "a value written back as *** is kept as stored");
    assert_ne!(v[1], v[2]);
    // The data key is stored sealed, under the test key's id.
    let kek: String = pg.query_one("SELECT kek_id FROM secret_data_keys", &[]).await.unwrap().get(0);
    assert_eq!(kek, "test-1");
}

#[tokio::test]
async fn without_a_key_encryption_key_a_secret_header_is_refused_and_nothing_is_stored() {
    let app = TestApp::start_with(
        "secrets-no-kek",
        Options { keyring: Some(common::secrets::Keyring::default()), ..Default::default() },
    )
    .await;
    let r = app.post_json("/v1/jobs", &job_with_secret(FIRST)).await;
    assert_invalid(&r, &["target.secret_headers"]);
    assert!(r.text.contains("SECRETS_KEK"), "{}", r.text);
    assert!(!r.text.contains(FIRST));
    assert_eq!(app.job_rows().await, 0);
    // A job without secrets is fine.
    let mut plain = job_with_secret(FIRST);
    plain["target"].as_object_mut().unwrap().remove("secret_headers");
    let r = app.post_json("/v1/jobs", &plain).await;
    assert_eq!(r.status, 201, "{}", r.text);
}
