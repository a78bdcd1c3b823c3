//! Errors about the service URLs never print their passwords: every way
//! `DATABASE_URL`, `REDIS_URLS` and `AMQP_URL` can be wrong (unparsable, a
//! bad port, an unknown scheme, an unreachable host) gives an error whose
//! whole text, causes included, holds no secret.

use std::time::Duration;

const SECRET: &str = "Pw-7f3c9e1d";

fn assert_clean(what: &str, error: &anyhow::Error) {
    let text = format!("{error:#} / {error:?}");
    assert!(!text.contains(SECRET), "{what}: the error shows the password: {text}");
}

fn malformed(scheme: &str) -> Vec<String> {
    vec![
        format!("{scheme}://user:{SECRET}@[bad"),
        format!("{scheme}://user:{SECRET}@host:notaport/x"),
        format!("{scheme}://:{SECRET}@host:99999"),
        format!("{scheme}://user:{SECRET}@"),
        format!("nope{scheme}://user:{SECRET}@host/"),
        format!("user:{SECRET}@host"),
        format!("{scheme}://user:{SECRET}@host/db?password={SECRET}&sslmode=bogus"),
        format!("{scheme}://user:{SECRET} with spaces@host"),
    ]
}

#[test]
fn malformed_redis_urls_are_refused_without_their_password() {
    for url in malformed("redis") {
        // Accepted as a URL or not: an error shows no password (connecting
        // is tested below).
        if let Err(e) = runtime::redis::pools(std::slice::from_ref(&url)) {
            assert_clean(&url, &e);
        }
    }
    // Three shards is one too many: the error counts them and shows none.
    let three = vec![format!("redis://:{SECRET}@a"), format!("redis://:{SECRET}@b"), format!("redis://:{SECRET}@c")];
    assert_clean("three shards", &runtime::redis::pools(&three).unwrap_err());
}

#[tokio::test]
async fn unreachable_redis_says_so_without_the_password() {
    let url = format!("redis://:{SECRET}@127.0.0.1:1/0");
    let pools = runtime::redis::pools(std::slice::from_ref(&url)).unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), pools[0].get()).await.unwrap().map(|_| ()).unwrap_err();
    assert_clean(&url, &e);
}

#[test]
fn malformed_database_urls_are_refused_without_their_password() {
    for url in malformed("postgres").into_iter().chain([format!("host=db user=u password={SECRET} port=x")]) {
        if let Err(e) = store::db::pool(&url, 1) {
            assert_clean(&url, &e);
        }
    }
}

#[tokio::test]
async fn unreachable_postgres_says_so_without_the_password() {
    for url in [format!("postgres://u:{SECRET}@127.0.0.1:1/db"), format!("postgres://u:{SECRET}@[bad")] {
        let e = store::db::connect(&url).await.unwrap_err();
        assert_clean(&url, &e);
        let e = store::db::migrate(&url).await.unwrap_err();
        assert_clean(&url, &e);
    }
}

#[tokio::test]
async fn malformed_or_unreachable_amqp_urls_fail_without_their_password() {
    let urls = malformed("amqp").into_iter().chain([format!("amqp://u:{SECRET}@127.0.0.1:1/%2f")]);
    for url in urls {
        let connected = tokio::time::timeout(Duration::from_secs(10), broker::amqp::connect(&url, "redaction test"))
            .await
            .unwrap_or_else(|_| panic!("{url}: neither connected nor failed"));
        let e = connected.map(|_| ()).expect_err(&url);
        assert_clean(&url, &anyhow::Error::new(e));
        // The publisher (the API's and the schedulers') on the same URL.
        let mut publisher = broker::publisher::Publisher::new(
            url.clone(),
            "redaction test".into(),
            broker::amqp::Topology::new("redaction-test"),
        );
        if let Err(e) = publisher.publish(&[]).await {
            assert_clean(&url, &e);
        }
    }
}
