//! The schedulers' and workers' session settings against a real Postgres:
//! with sequential scans disabled, any statement that still scans is costed
//! past the JIT threshold, and without `jit = off` Postgres compiled it with
//! LLVM on every run (50–800 ms of CPU for a 0.1 ms query, measured on the
//! calendar fingerprint every scheduler reads every few seconds).

use serde_json::Value;
use testing::TestDb;

/// Whether an `EXPLAIN (ANALYZE, FORMAT JSON)` answer says the statement was
/// JIT-compiled.
fn compiled(plan: &Value) -> bool {
    plan[0].get("JIT").is_some()
}

#[tokio::test]
async fn a_scanning_statement_on_the_hot_path_pool_is_never_jit_compiled() {
    let db = TestDb::new().await.unwrap();
    let pool = store::db::pool_with_settings(&db.url, 2, store::db::HOT_PATH_SETTINGS).unwrap();
    let client = pool.get().await.unwrap();
    // No index holds `version`: the statement can only scan the table.
    let explain = "EXPLAIN (ANALYZE, FORMAT JSON) SELECT sum(version) FROM calendars";

    let plan: Value = client.query_one(explain, &[]).await.unwrap().get(0);
    assert!(!compiled(&plan), "the hot-path session JIT-compiled a scan: {plan}");

    // The hazard is real on this server: with JIT allowed, the same session
    // settings make Postgres compile the same statement.
    let jit_available: bool = client.query_one("SELECT pg_jit_available()", &[]).await.unwrap().get(0);
    if jit_available {
        client.batch_execute("SET jit = on").await.unwrap();
        let plan: Value = client.query_one(explain, &[]).await.unwrap().get(0);
        assert!(compiled(&plan), "expected the disabled-scan penalty to cross jit_above_cost: {plan}");
        client.batch_execute("RESET jit").await.unwrap();
    } else {
        eprintln!("this Postgres has no JIT provider; only the setting itself was checked");
    }
}
