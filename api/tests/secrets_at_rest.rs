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

/// The text column of each row `sql` returns for job `id` (`$1`).
async fn texts(pg: &tokio_postgres::Client, sql: &str, id: &str) -> Vec<String> {
    pg.query(sql, &[&id]).await.unwrap().iter().map(|r| r.get(0)).collect()
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
    let stored = texts(
        &pg,
        "SELECT spec->'target'->'secret_headers'->>'Authorization' FROM jobs WHERE id = $1::text::uuid
         UNION ALL SELECT spec->'target'->'secret_headers'->>'Authorization' FROM job_changes WHERE job_id = $1::text::uuid",
        &id,
    )
    .await;
    assert_eq!(stored.len(), 4, "the job and its three versions: {stored:?}");
    assert!(stored.iter().all(|v| v.starts_with(store::secrets::SEALED_PREFIX)), "{stored:?}");
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
    let v = texts(
        &pg,
        "SELECT spec->'target'->'secret_headers'->>'Authorization' FROM job_changes WHERE job_id = $1::text::uuid ORDER BY version",
        &id,
    )
    .await;
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
        Options { keyring: Some(store::secrets::Keyring::default()), ..Default::default() },
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

/// A value stored in clear by a version before encryption is sealed by
/// `cronshard-api migrate` when a KEK is set, in `jobs` and in every
/// version, without a new version and without moving `updated_at` (the
/// instant the version came into force); without a KEK it is left, with a
/// warning.
#[tokio::test]
async fn migrate_seals_values_an_older_version_stored_in_clear_without_making_a_version() {
    let app = TestApp::start("secrets-legacy").await;
    let mut plain = job_with_secret(FIRST);
    plain["target"].as_object_mut().unwrap().remove("secret_headers");
    let id = app.create_id(&plain).await;
    let pg = app.sql().await;
    // As an older version stored it: the value in clear, in the job and its version.
    let legacy = json!({"Authorization": FIRST});
    for table in ["jobs", "job_changes"] {
        let key = if table == "jobs" { "id" } else { "job_id" };
        pg.execute(
            &format!(
                "UPDATE {table} SET spec = jsonb_set(spec, '{{target,secret_headers}}', $2) WHERE {key} = $1::text::uuid"
            ),
            &[&id, &legacy],
        )
        .await
        .unwrap();
    }
    let before: (i64, chrono::DateTime<chrono::Utc>) = {
        let r = pg.query_one("SELECT version, updated_at FROM jobs WHERE id = $1::text::uuid", &[&id]).await.unwrap();
        (r.get(0), r.get(1))
    };
    let migrate = |kek: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cronshard-api"))
            .arg("migrate")
            .env("DATABASE_URL", app.db_url())
            .env("SECRETS_KEK", kek)
            .env("RUST_LOG", "info")
            .output()
            .unwrap()
    };
    let out = migrate("");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("SECRETS_KEK is empty"));
    let clear: i64 = pg
        .query_one("SELECT count(*) FROM job_changes WHERE spec::text LIKE '%first-SECRET%'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(clear, 1, "without a key nothing changes");

    let out = migrate(testing::TEST_SECRETS_KEK);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dump: String = pg
        .query_one(
            "SELECT (SELECT string_agg(spec::text, ' ') FROM jobs) || (SELECT string_agg(spec::text, ' ') FROM job_changes)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!dump.contains(FIRST), "still in clear: {dump}");
    assert_eq!(dump.matches(store::secrets::SEALED_PREFIX).count(), 2, "{dump}");
    let after = pg.query_one("SELECT version, updated_at FROM jobs WHERE id = $1::text::uuid", &[&id]).await.unwrap();
    assert_eq!((after.get::<_, i64>(0), after.get::<_, chrono::DateTime<chrono::Utc>>(1)), before);
    let versions: i64 =
        pg.query_one("SELECT count(*) FROM job_changes WHERE job_id = $1::text::uuid", &[&id]).await.unwrap().get(0);
    assert_eq!(versions, 1, "sealing is not a new version");
    // The API still shows it masked, and a value sealed this way opens.
    assert_eq!(app.job(&id).await["target"]["secret_headers"]["Authorization"], "***");
    let stored: String = pg
        .query_one(
            "SELECT spec->'target'->'secret_headers'->>'Authorization' FROM jobs WHERE id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    let vault = store::secrets::Vault::new(testing::test_keyring());
    let mut headers = std::collections::BTreeMap::from([("Authorization".to_owned(), stored)]);
    let pool = store::db::pool(app.db_url(), 1).unwrap();
    vault.open_headers(&pool, id.parse().unwrap(), &mut headers).await.unwrap();
    assert_eq!(headers["Authorization"], FIRST);
}
