//! Signed deliveries, as the Standard Webhooks specification defines them:
//! every delivery carries `webhook-id` (the execution id, the same on every
//! attempt), `webhook-timestamp` (this attempt's Unix seconds) and, when
//! its namespace has signing keys, `webhook-signature`: `v1,` + base64 of
//! HMAC-SHA256 over `{id}.{timestamp}.{body}` under each key that signs,
//! space-separated. A receiver checks one of them with its secret and
//! refuses a timestamp too far from its clock (a replay).
//!
//! A worker keeps a namespace's opened keys for `ACTIVE_KEYS_FRESH_FOR`, so
//! a herd costs one read per namespace, and a key made, rotated out or
//! revoked takes effect within that time. When the keys cannot be read, the
//! last ones read are used; with none read yet, the attempt fails
//! (retryably) rather than go out unsigned.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::hmac;

use domain::message::FireMessage;
use store::secrets::{SecretError, Vault};

pub const WEBHOOK_ID: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// How long a worker signs with the keys it read before reading them again.
pub const ACTIVE_KEYS_FRESH_FOR: Duration = Duration::from_secs(10);

/// The keys that sign one namespace's deliveries now (none: unsigned).
pub type SigningKeys = Arc<[hmac::Key]>;

/// What one attempt's request states about itself: the keys that sign it
/// and the instant it states, and for an async completion the token its
/// receiver reports the outcome with (`X-Cronshard-Completion-Token`).
pub struct Signing {
    pub keys: SigningKeys,
    pub timestamp: i64,
    pub completion_token: Option<String>,
}

impl Signing {
    /// The `webhook-signature` value for `body` of the message `id`, or
    /// `None` without keys.
    pub fn signature(&self, id: &str, body: &[u8]) -> Option<String> {
        signature(&self.keys, id, self.timestamp, body)
    }
}

/// `v1,{base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")}` for each key,
/// space-separated; `None` without keys.
pub fn signature(keys: &[hmac::Key], id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    if keys.is_empty() {
        return None;
    }
    let prefix = format!("{id}.{timestamp}.");
    let mut out = String::with_capacity(keys.len() * 48);
    for key in keys {
        let mut context = hmac::Context::with_key(key);
        context.update(prefix.as_bytes());
        context.update(body);
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str("v1,");
        STANDARD.encode_string(context.sign().as_ref(), &mut out);
    }
    Some(out)
}

struct Entry {
    keys: Option<(Instant, SigningKeys)>,
    /// One read of the namespace's keys at a time: a herd waits for it.
    refresh: Arc<tokio::sync::Mutex<()>>,
}

/// The namespaces' signing keys, read from Postgres and opened with the
/// vault, kept fresh for `ACTIVE_KEYS_FRESH_FOR`.
pub struct Signer {
    pg: deadpool_postgres::Pool,
    vault: Vault,
    fresh_for: Duration,
    namespaces: Mutex<HashMap<String, Entry>>,
}

/// Namespaces whose keys a worker keeps; past it, the map starts over.
const NAMESPACES_KEPT: usize = 10_000;

impl Signer {
    pub fn new(pg: deadpool_postgres::Pool, vault: Vault, fresh_for: Duration) -> Self {
        Self { pg, vault, fresh_for, namespaces: Mutex::new(HashMap::new()) }
    }

    /// What signs this attempt of `m`, stating `now` as its instant.
    pub async fn signing(&self, m: &FireMessage) -> Result<Signing, SecretError> {
        let timestamp = runtime::clock::now().timestamp();
        let namespace = if m.namespace.is_empty() {
            // A message of a version before signing named no namespace.
            let client = self.pg.get().await.map_err(|e| SecretError::Store(domain::redact::text(&e.to_string())))?;
            store::jobs::namespace_of(&client, m.job_id, None).await?.unwrap_or_default()
        } else {
            m.namespace.clone()
        };
        Ok(Signing { keys: self.keys(&namespace).await?, timestamp, completion_token: None })
    }

    fn fresh(&self, namespace: &str) -> Result<SigningKeys, Arc<tokio::sync::Mutex<()>>> {
        let mut map = self.namespaces.lock().expect("signer lock");
        if let Some(Entry { keys: Some((read_at, keys)), .. }) = map.get(namespace)
            && read_at.elapsed() < self.fresh_for
        {
            return Ok(keys.clone());
        }
        if map.len() >= NAMESPACES_KEPT && !map.contains_key(namespace) {
            map.clear();
        }
        let entry = map
            .entry(namespace.to_owned())
            .or_insert_with(|| Entry { keys: None, refresh: Arc::new(tokio::sync::Mutex::new(())) });
        Err(entry.refresh.clone())
    }

    pub async fn keys(&self, namespace: &str) -> Result<SigningKeys, SecretError> {
        let refresh = match self.fresh(namespace) {
            Ok(keys) => return Ok(keys),
            Err(refresh) => refresh,
        };
        let _reading = refresh.lock().await;
        // Another delivery may have read them while this one waited.
        if let Ok(keys) = self.fresh(namespace) {
            return Ok(keys);
        }
        match store::signing_keys::signing_secrets(&self.pg, &self.vault, namespace).await {
            Ok(secrets) => {
                let keys: SigningKeys =
                    secrets.iter().map(|(_, secret)| hmac::Key::new(hmac::HMAC_SHA256, secret)).collect();
                if let Some(entry) = self.namespaces.lock().expect("signer lock").get_mut(namespace) {
                    entry.keys = Some((Instant::now(), keys.clone()));
                }
                Ok(keys)
            }
            Err(e) => {
                let stale = self
                    .namespaces
                    .lock()
                    .expect("signer lock")
                    .get(namespace)
                    .and_then(|entry| entry.keys.as_ref().map(|(_, keys)| keys.clone()));
                match stale {
                    Some(keys) => {
                        tracing::warn!(namespace, error = %e, "signing keys could not be read again; signing with those read before");
                        Ok(keys)
                    }
                    None => Err(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference
    /// libraries (their test vectors): secret, id, timestamp and payload
    /// give this signature.
    #[test]
    fn signs_as_the_specification_s_test_vector() {
        let secret = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let key = hmac::Key::new(hmac::HMAC_SHA256, &secret);
        let body = br#"{"test": 2432232314}"#;
        let signed = signature(&[key], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body).unwrap();
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn every_key_signs_and_none_signs_nothing() {
        let keys = [hmac::Key::new(hmac::HMAC_SHA256, b"one"), hmac::Key::new(hmac::HMAC_SHA256, b"two")];
        let signed = signature(&keys, "id", 1, b"body").unwrap();
        let parts: Vec<&str> = signed.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| p.starts_with("v1,")) && parts[0] != parts[1]);
        assert_eq!(signature(&[], "id", 1, b"body"), None);
    }
}
