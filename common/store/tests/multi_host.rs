//! `DATABASE_URL` naming a primary and its standbys
//! (`postgres://h1:p1,h2:p2/db?target_session_attrs=read-write`): a host
//! that refuses is passed over, and a server that only reads (a standby:
//! `transaction_read_only` is on there) is refused, so after a failover
//! every new connection goes to the promoted server. The read-only server
//! here is a database whose sessions default to read-only, which Postgres
//! reports through the same setting a standby does.

use testing::TestDb;

fn multi_host(db: &TestDb, attrs: &str) -> String {
    // The first host refuses connections; the second is the test's server.
    let url = db.url.replacen("@127.0.0.1:5432/", "@127.0.0.1:1,127.0.0.1:5432/", 1);
    assert_ne!(url, db.url, "the test database URL is on 127.0.0.1:5432 ({})", db.url);
    format!("{url}?target_session_attrs={attrs}")
}

#[tokio::test]
async fn the_pool_passes_over_a_dead_host_and_refuses_a_server_that_only_reads() {
    let db = TestDb::new().await.unwrap();
    let url = multi_host(&db, "read-write");
    store::db::migrate(&url).await.expect("migrations through a multi-host URL");
    let pool = store::db::pool(&url, 2).unwrap();
    let client = pool.get().await.expect("a connection to the live host");
    client.batch_execute("CREATE TABLE written (x int); INSERT INTO written VALUES (1)").await.unwrap();
    drop(client);

    let admin = store::db::connect(&testing::admin_database_url()).await.unwrap();
    admin
        .batch_execute(&format!("ALTER DATABASE \"{}\" SET default_transaction_read_only = on", db.name))
        .await
        .unwrap();
    let read_only = store::db::pool(&url, 2).unwrap();
    let e = read_only.get().await.map(|_| ()).expect_err("a read-only server was accepted for writing");
    assert!(format!("{e:?}").contains("does not allow writes"), "{e:?}");
    // The same server is accepted when any session will do: it was the
    // read-write requirement that refused it.
    let any = store::db::pool(&multi_host(&db, "any"), 2).unwrap();
    let _accepted = any.get().await.expect("accepted without the read-write requirement");
}
