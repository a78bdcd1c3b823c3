//! Properties of `domain::redact`: a password or a query value, placed in
//! any URL of the shapes the services and callbacks use, never survives
//! `url` or `text` (alone or inside prose); and any input at all is
//! redacted without a panic, the same way a second time.

use proptest::prelude::*;

use domain::redact;

/// A secret unlike anything else generated (which is lower case).
fn secret() -> impl Strategy<Value = String> {
    "[A-Z][A-Za-z0-9_~%.-]{7,24}".prop_map(|s| format!("Zq{s}"))
}

fn scheme() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["http", "https", "redis", "rediss", "amqp", "amqps", "postgres", "postgresql", ""])
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z][a-z0-9.-]{0,20}", "127\\.0\\.0\\.[0-9]{1,3}", Just("[::1]".to_owned()), Just(String::new())]
}

prop_compose! {
    fn url_with(secret: String)(
        scheme in scheme(),
        user in "[a-z]{0,8}",
        host in host(),
        port in prop::option::of(0u32..70000),
        path in "(/[a-z0-9%._-]{0,10}){0,3}",
        before in prop::collection::vec("[a-z_]{1,8}=[a-z0-9]{0,6}", 0..3),
        key in "[a-z_]{1,8}",
        after in prop::collection::vec("[a-z_]{1,8}=[a-z0-9]{0,6}", 0..3),
        in_userinfo in any::<bool>(),
        in_query in any::<bool>(),
        fragment in prop::option::of("[a-z=&]{0,10}"),
    ) -> String {
        let userinfo = if in_userinfo || !in_query { format!("{user}:{secret}@") } else { String::new() };
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        let mut query: Vec<String> = before;
        if in_query {
            query.push(format!("{key}={secret}"));
        }
        query.extend(after);
        let query = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
        let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
        format!("{scheme}://{userinfo}{host}{port}{path}{query}{fragment}")
    }
}

fn url_and_secret() -> impl Strategy<Value = (String, String)> {
    secret().prop_flat_map(|s| (url_with(s.clone()), Just(s)))
}

proptest! {
    #[test]
    fn a_secret_in_a_url_never_survives((url, secret) in url_and_secret(), prose in "[a-z :,()]{0,20}") {
        let redacted = redact::url(&url);
        prop_assert!(!redacted.contains(&secret), "url({url:?}) = {redacted:?}");
        for framed in [
            format!("error for url ({url}): {prose}"),
            format!("{prose} \"{url}\""),
            format!("{url}, {prose}"),
            format!("{{\"error\":\"{url}\"}}"),
            format!("{url},{url}"),
        ] {
            let redacted = redact::text(&framed);
            prop_assert!(!redacted.contains(&secret), "text({framed:?}) = {redacted:?}");
        }
    }

    #[test]
    fn anything_is_redacted_without_a_panic_and_stably(s in any::<String>()) {
        for f in [redact::url, redact::text] {
            let once = f(&s);
            prop_assert_eq!(f(&once), once);
        }
    }

    #[test]
    fn url_like_noise_is_redacted_stably(s in "[a-z:/@?#=&%\\[\\]() ',.;\"\\\\]{0,40}") {
        for f in [redact::url, redact::text] {
            let once = f(&s);
            prop_assert_eq!(f(&once), once);
        }
    }
}
