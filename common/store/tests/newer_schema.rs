//! A rollback runs the previous release's `migrate` against a database a
//! newer release already migrated: a migration it does not know is in the
//! history. That is accepted (the newer schema stays compatible across one
//! release); a known migration whose text differs is still refused.

use testing::TestDb;

#[tokio::test]
async fn migrating_a_database_a_newer_release_migrated_is_accepted() {
    let db = TestDb::new().await.unwrap();
    let client = store::db::connect(&db.url).await.unwrap();
    client
        .batch_execute(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum)
             SELECT 99999, 'from_a_newer_release', applied_on, '1' FROM refinery_schema_history WHERE version = 1",
        )
        .await
        .unwrap();
    store::db::migrate(&db.url).await.expect("a newer release's migration in the history refused");

    // A migration this release has, changed: refused as before.
    client.batch_execute("UPDATE refinery_schema_history SET checksum = '42' WHERE version = 1").await.unwrap();
    let e = store::db::migrate(&db.url).await.expect_err("a divergent migration was accepted");
    assert!(format!("{e:#}").contains("is different than filesystem one"), "{e:#}");
}
