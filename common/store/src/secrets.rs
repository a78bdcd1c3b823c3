//! Envelope encryption of secret header values at rest.
//!
//! Each namespace has a data key (32 random bytes; a new one is made when
//! none exists). A data key is stored only sealed by a key-encryption key
//! (KEK) that the operator supplies through `SECRETS_KEK` (a Kubernetes
//! Secret in the chart): `secret_data_keys` holds the sealed bytes and the
//! id of the KEK that sealed them. A secret header value is stored sealed by
//! its namespace's data key, as `cs1:{data key id}:{base64url(nonce ‖
//! ciphertext ‖ tag)}`, bound (as associated data) to its job and header
//! name, so a sealed value copied to another job or header does not open.
//! `jobs.spec`, every `job_changes` version and the broker's messages carry
//! only that form; the worker opens it right before the request.
//!
//! The cipher is AES-256-GCM (ring) with a random 96-bit nonce per seal.
//! Rotating the KEK re-seals the data keys only (`cronshard-api secrets
//! rotate`): values stay as they are.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use deadpool_postgres::GenericClient;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use uuid::Uuid;

/// The prefix of a sealed value (version 1 of the format).
pub const SEALED_PREFIX: &str = "cs1:";

/// Why a secret could not be sealed or opened. The texts name keys by id,
/// never a key's or a value's bytes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error(
        "no key-encryption key is configured (SECRETS_KEK), so secret header values can be neither stored nor \
         read; set it as docs/security.md describes"
    )]
    NoKek,
    #[error(
        "the data key {dek} is sealed by key-encryption key {kek:?}, which this process does not have (SECRETS_KEK \
         holds {have}); give it every key still in use, as docs/security.md describes"
    )]
    UnknownKek { dek: Uuid, kek: String, have: String },
    #[error(
        "the data key {dek} did not open with key-encryption key {kek:?}: the key under that id is not the one that \
         sealed it"
    )]
    WrongKek { dek: Uuid, kek: String },
    #[error("the data key {0} of this secret value is not in the database")]
    MissingDek(Uuid),
    #[error("a sealed secret value is malformed or was altered (it did not open with its data key {0})")]
    Corrupt(Uuid),
    #[error("a sealed secret value is malformed")]
    Malformed,
    #[error("reading or storing a data key failed: {0}")]
    Store(String),
}

impl From<tokio_postgres::Error> for SecretError {
    fn from(e: tokio_postgres::Error) -> Self {
        SecretError::Store(domain::redact::text(&e.to_string()))
    }
}

/// A 256-bit AES key. Debug never shows the bytes.
#[derive(Clone)]
struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(***)")
    }
}

impl Key {
    fn cipher(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &self.0).expect("a 32-byte key"))
    }

    fn seal(&self, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).expect("the system's random source");
        let mut out = plaintext.to_vec();
        self.cipher()
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut out)
            .expect("sealing fits in memory");
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&out);
        sealed
    }

    fn open(&self, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = ciphertext.to_vec();
        let plain = self.cipher().open_in_place(nonce, Aad::from(aad), &mut buf).ok()?;
        Some(plain.to_vec())
    }

    fn random() -> Key {
        let mut bytes = [0u8; 32];
        SystemRandom::new().fill(&mut bytes).expect("the system's random source");
        Key(bytes)
    }
}

/// The key-encryption keys of `SECRETS_KEK`: `ID:BASE64KEY[,ID:BASE64KEY...]`,
/// each key 32 bytes in standard base64. The first seals new data keys; the
/// others only open data keys sealed before a rotation.
#[derive(Clone, Default)]
pub struct Keyring {
    keks: Vec<(String, Key)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keyring({})", self.ids())
    }
}

impl Keyring {
    /// Parses `SECRETS_KEK` (empty: no key). The error names the entry by
    /// position and id, never its key.
    pub fn parse(text: &str) -> Result<Keyring, String> {
        let mut keks: Vec<(String, Key)> = Vec::new();
        for (i, entry) in text.split(',').map(str::trim).filter(|e| !e.is_empty()).enumerate() {
            let Some((id, key)) = entry.split_once(':') else {
                return Err(format!("SECRETS_KEK entry {} is not ID:BASE64KEY", i + 1));
            };
            let id = id.trim();
            if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return Err(format!(
                    "SECRETS_KEK entry {}: the key id must be 1 to 64 letters, digits, '-', '_' or '.'",
                    i + 1
                ));
            }
            let bytes =
                STANDARD.decode(key.trim()).map_err(|_| format!("SECRETS_KEK key {id:?} is not standard base64"))?;
            let bytes: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
                format!("SECRETS_KEK key {id:?} is {} bytes; it must be 32 (openssl rand -base64 32)", b.len())
            })?;
            if keks.iter().any(|(k, _)| k == id) {
                return Err(format!("SECRETS_KEK names key {id:?} twice"));
            }
            keks.push((id.to_owned(), Key(bytes)));
        }
        Ok(Keyring { keks })
    }

    pub fn is_empty(&self) -> bool {
        self.keks.is_empty()
    }

    /// The ids, comma-separated ("none" when empty), for errors and logs.
    pub fn ids(&self) -> String {
        if self.keks.is_empty() {
            return "none".to_owned();
        }
        self.keks.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>().join(", ")
    }

    fn active(&self) -> Result<&(String, Key), SecretError> {
        self.keks.first().ok_or(SecretError::NoKek)
    }

    fn get(&self, id: &str) -> Option<&Key> {
        self.keks.iter().find(|(k, _)| k == id).map(|(_, key)| key)
    }

    /// An HMAC key for `purpose`, derived from the active key-encryption
    /// key (HMAC-SHA256 of the purpose under it), with that key's id: tokens
    /// the API and the workers both check without storing anything.
    pub fn derived_mac_key(&self, purpose: &str) -> Result<(&str, ring::hmac::Key), SecretError> {
        let (id, kek) = self.active()?;
        Ok((id, derive(kek, purpose)))
    }

    /// The key [`Keyring::derived_mac_key`] gave under key-encryption key
    /// `id`, if this process has it (an older key after a rotation).
    pub fn derived_mac_key_of(&self, id: &str, purpose: &str) -> Option<ring::hmac::Key> {
        self.get(id).map(|kek| derive(kek, purpose))
    }
}

fn derive(kek: &Key, purpose: &str) -> ring::hmac::Key {
    let derived = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &kek.0), purpose.as_bytes());
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, derived.as_ref())
}

/// `SECRETS_KEK`, for the processes that seal or open secret values (the
/// API and the workers; `cronshard-api secrets rotate`).
#[derive(clap::Args, Clone, Default)]
pub struct SecretsArgs {
    /// Key-encryption keys of secret header values: `ID:BASE64KEY[,ID:BASE64KEY...]`, each key
    /// 32 random bytes in base64 (`openssl rand -base64 32`). The first seals new data keys;
    /// the others still open data keys sealed before a rotation. The API refuses to store a
    /// secret header without one; give the API and the workers the same keys.
    #[arg(long, env = "SECRETS_KEK", default_value = "", hide_env_values = true, hide_default_value = true)]
    pub secrets_kek: String,
}

impl SecretsArgs {
    pub fn keyring(&self) -> anyhow::Result<Keyring> {
        Keyring::parse(&self.secrets_kek).map_err(anyhow::Error::msg)
    }
}

/// Associated data of a sealed data key: its namespace and id.
fn dek_aad(namespace: &str, id: Uuid) -> Vec<u8> {
    format!("cronshard-dek:v1:{namespace}:{id}").into_bytes()
}

/// Associated data of a sealed value: its job and header name.
fn value_aad(job_id: Uuid, header: &str) -> Vec<u8> {
    format!("cronshard-secret-header:v1:{job_id}:{}", header.to_ascii_lowercase()).into_bytes()
}

/// Whether `value` is in the sealed form (anything else is a value stored
/// in clear by a version before encryption).
pub fn is_sealed(value: &str) -> bool {
    value.starts_with(SEALED_PREFIX)
}

/// `cs1:{data key id}:{base64url(nonce ‖ ciphertext ‖ tag)}`.
fn sealed_form(dek_id: Uuid, key: &Key, aad: &[u8], plain: &[u8]) -> String {
    format!("{SEALED_PREFIX}{dek_id}:{}", URL_SAFE_NO_PAD.encode(key.seal(aad, plain)))
}

/// The data key id of a sealed value.
fn sealed_parts(value: &str) -> Result<(Uuid, Vec<u8>), SecretError> {
    let rest = value.strip_prefix(SEALED_PREFIX).ok_or(SecretError::Malformed)?;
    let (id, body) = rest.split_once(':').ok_or(SecretError::Malformed)?;
    let id = Uuid::parse_str(id).map_err(|_| SecretError::Malformed)?;
    let body = URL_SAFE_NO_PAD.decode(body).map_err(|_| SecretError::Malformed)?;
    Ok((id, body))
}

/// Seals and opens secret values against the data keys in Postgres, with
/// the keyring of this process. Opened data keys are cached (they never
/// change; a rotation re-seals them, their bytes stay).
#[derive(Clone, Debug)]
pub struct Vault {
    keyring: Arc<Keyring>,
    opened: Arc<Mutex<HashMap<Uuid, Key>>>,
    /// The data key each namespace seals with, once known.
    current: Arc<Mutex<HashMap<String, Uuid>>>,
}

impl Vault {
    pub fn new(keyring: Keyring) -> Vault {
        Vault { keyring: Arc::new(keyring), opened: Default::default(), current: Default::default() }
    }

    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// The namespace's data key (made, sealed and stored when it has none).
    async fn data_key(&self, client: &impl GenericClient, namespace: &str) -> Result<(Uuid, Key), SecretError> {
        let known = self.current.lock().expect("vault lock").get(namespace).copied();
        if let Some(id) = known
            && let Some(key) = self.opened.lock().expect("vault lock").get(&id).cloned()
        {
            return Ok((id, key));
        }
        let row = client
            .query_opt(
                "SELECT id, kek_id, sealed FROM secret_data_keys WHERE namespace = $1 ORDER BY created_at DESC, id LIMIT 1",
                &[&namespace],
            )
            .await?;
        let (id, key) = match row {
            Some(row) => {
                let id: Uuid = row.get(0);
                (id, self.unseal_dek(namespace, id, row.get(1), row.get(2))?)
            }
            None => {
                let (kek_id, kek) = self.keyring.active()?;
                let id = Uuid::now_v7();
                let key = Key::random();
                let sealed = kek.seal(&dek_aad(namespace, id), &key.0);
                client
                    .execute(
                        "INSERT INTO secret_data_keys (id, namespace, kek_id, sealed) VALUES ($1, $2, $3, $4)",
                        &[&id, &namespace, kek_id, &sealed],
                    )
                    .await?;
                (id, key)
            }
        };
        self.opened.lock().expect("vault lock").insert(id, key.clone());
        self.current.lock().expect("vault lock").insert(namespace.to_owned(), id);
        Ok((id, key))
    }

    fn unseal_dek(&self, namespace: &str, id: Uuid, kek_id: String, sealed: Vec<u8>) -> Result<Key, SecretError> {
        let kek = self.keyring.get(&kek_id).ok_or_else(|| {
            if self.keyring.is_empty() {
                SecretError::NoKek
            } else {
                SecretError::UnknownKek { dek: id, kek: kek_id.clone(), have: self.keyring.ids() }
            }
        })?;
        let bytes = kek.open(&dek_aad(namespace, id), &sealed).ok_or(SecretError::WrongKek { dek: id, kek: kek_id })?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| SecretError::Corrupt(id))?;
        Ok(Key(bytes))
    }

    /// A data key by id, opened (from the cache when it was opened before).
    /// On a cache miss only, a connection is taken from `pool`: opening a
    /// value on the delivery path costs no database round trip once its
    /// data key was opened.
    async fn data_key_by_id(&self, pool: &deadpool_postgres::Pool, id: Uuid) -> Result<Key, SecretError> {
        if let Some(key) = self.opened.lock().expect("vault lock").get(&id).cloned() {
            return Ok(key);
        }
        let client = pool.get().await.map_err(|e| SecretError::Store(domain::redact::text(&e.to_string())))?;
        let row = client
            .query_opt("SELECT namespace, kek_id, sealed FROM secret_data_keys WHERE id = $1", &[&id])
            .await?
            .ok_or(SecretError::MissingDek(id))?;
        let key = self.unseal_dek(&row.get::<_, String>(0), id, row.get(1), row.get(2))?;
        self.opened.lock().expect("vault lock").insert(id, key.clone());
        Ok(key)
    }

    /// Seals every value of `headers` that is not sealed yet, for job
    /// `job_id` of `namespace`. A value already sealed (kept from the
    /// stored definition) stays as it is.
    pub async fn seal_headers(
        &self,
        client: &impl GenericClient,
        namespace: &str,
        job_id: Uuid,
        headers: &mut std::collections::BTreeMap<String, String>,
        stored: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), SecretError> {
        let needs_sealing = headers.iter().any(|(name, v)| stored.get(name) != Some(v) || !is_sealed(v));
        if !needs_sealing {
            return Ok(());
        }
        let (dek_id, key) = self.data_key(client, namespace).await?;
        for (name, value) in headers.iter_mut() {
            if stored.get(name) == Some(value) && is_sealed(value) {
                continue;
            }
            *value = sealed_form(dek_id, &key, &value_aad(job_id, name), value.as_bytes());
        }
        Ok(())
    }

    /// Seals `plain` with `namespace`'s data key, bound to `aad` (what the
    /// value is and whose: it opens only with the same `aad`).
    pub async fn seal(
        &self,
        client: &impl GenericClient,
        namespace: &str,
        aad: &[u8],
        plain: &[u8],
    ) -> Result<String, SecretError> {
        let (dek_id, key) = self.data_key(client, namespace).await?;
        Ok(sealed_form(dek_id, &key, aad, plain))
    }

    /// Opens a value [`Vault::seal`] sealed with the same `aad`.
    pub async fn open(&self, pool: &deadpool_postgres::Pool, aad: &[u8], sealed: &str) -> Result<Vec<u8>, SecretError> {
        let (dek_id, body) = sealed_parts(sealed)?;
        let key = self.data_key_by_id(pool, dek_id).await?;
        key.open(aad, &body).ok_or(SecretError::Corrupt(dek_id))
    }

    /// Opens every sealed value of `headers` (of job `job_id`) in place; a
    /// value stored in clear by an older version is left as it is.
    pub async fn open_headers(
        &self,
        pool: &deadpool_postgres::Pool,
        job_id: Uuid,
        headers: &mut std::collections::BTreeMap<String, String>,
    ) -> Result<(), SecretError> {
        for (name, value) in headers.iter_mut() {
            if !is_sealed(value) {
                continue;
            }
            let plain = self.open(pool, &value_aad(job_id, name), value).await?;
            *value = String::from_utf8(plain).map_err(|_| SecretError::Malformed)?;
        }
        Ok(())
    }

    /// Re-seals every data key under the active KEK (after a new key was
    /// put first in `SECRETS_KEK`); returns how many were re-sealed. Each
    /// must open with a key of the keyring: nothing is changed otherwise.
    pub async fn rotate(&self, client: &mut deadpool_postgres::Object) -> Result<u64, SecretError> {
        let (active_id, active) = self.keyring.active()?;
        let tx = client.transaction().await?;
        let rows = tx.query("SELECT id, namespace, kek_id, sealed FROM secret_data_keys FOR UPDATE", &[]).await?;
        let mut resealed = 0;
        for row in &rows {
            let (id, namespace, kek_id): (Uuid, String, String) = (row.get(0), row.get(1), row.get(2));
            if &kek_id == active_id {
                continue;
            }
            let key = self.unseal_dek(&namespace, id, kek_id, row.get(3))?;
            let sealed = active.seal(&dek_aad(&namespace, id), &key.0);
            tx.execute(
                "UPDATE secret_data_keys SET kek_id = $2, sealed = $3 WHERE id = $1",
                &[&id, active_id, &sealed],
            )
            .await?;
            resealed += 1;
        }
        tx.commit().await?;
        Ok(resealed)
    }
}

/// Seals the secret header values that versions before encryption stored
/// in clear, in `jobs` and in every `job_changes` version; returns how many
/// definitions changed. Run by `cronshard-api migrate` when a KEK is
/// configured. Sealing a value in place is not a new version
/// (`jobs::rewrite_definition_in_place`).
pub async fn seal_stored_in_clear(vault: &Vault, client: &mut deadpool_postgres::Object) -> anyhow::Result<u64> {
    use domain::job::{JobSpec, Target};
    let tx = client.transaction().await?;
    let found = crate::jobs::definitions_with_secrets_in_clear(&tx, SEALED_PREFIX).await?;
    for (id, which, namespace, spec) in &found {
        let mut parsed: JobSpec = serde_json::from_value(spec.clone())?;
        let Target::Http(http) = &mut parsed.target else { continue };
        // Only the values in clear: those already sealed stay as stored.
        let kept: std::collections::BTreeMap<String, String> =
            http.secret_headers.iter().filter(|(_, v)| is_sealed(v)).map(|(k, v)| (k.clone(), v.clone())).collect();
        vault.seal_headers(&tx, namespace, *id, &mut http.secret_headers, &kept).await?;
        crate::jobs::rewrite_definition_in_place(&tx, *id, *which, &serde_json::to_value(&parsed)?).await?;
    }
    tx.commit().await?;
    Ok(found.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: [u8; 32]) -> String {
        STANDARD.encode(bytes)
    }

    #[test]
    fn a_keyring_parses_ids_and_32_byte_keys_and_names_what_is_wrong_without_the_key() {
        let ring = Keyring::parse(&format!("k2:{}, k1:{}", b64([2; 32]), b64([1; 32]))).unwrap();
        assert_eq!(ring.ids(), "k2, k1");
        assert_eq!(ring.active().unwrap().0, "k2");
        assert!(Keyring::parse("").unwrap().is_empty());
        let short = STANDARD.encode([7u8; 16]);
        let e = Keyring::parse(&format!("k1:{short}")).unwrap_err();
        assert!(e.contains("16 bytes") && !e.contains(&short), "{e}");
        assert!(Keyring::parse("nocolon").unwrap_err().contains("ID:BASE64KEY"));
        assert!(Keyring::parse(&format!("k:{},k:{}", b64([1; 32]), b64([2; 32]))).unwrap_err().contains("twice"));
        assert!(!format!("{ring:?}").contains(&b64([2; 32])));
    }

    #[test]
    fn a_sealed_value_opens_only_with_its_key_job_and_header() {
        let key = Key([9; 32]);
        let job = Uuid::from_u128(1);
        let sealed = key.seal(&value_aad(job, "X-Token"), b"t0p");
        assert_eq!(key.open(&value_aad(job, "x-token"), &sealed).as_deref(), Some(&b"t0p"[..]));
        assert!(key.open(&value_aad(Uuid::from_u128(2), "x-token"), &sealed).is_none(), "another job");
        assert!(key.open(&value_aad(job, "x-other"), &sealed).is_none(), "another header");
        assert!(Key([8; 32]).open(&value_aad(job, "x-token"), &sealed).is_none(), "another key");
        let mut altered = sealed.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert!(key.open(&value_aad(job, "x-token"), &altered).is_none(), "altered");
        // Two seals of one value differ (a fresh nonce each).
        assert_ne!(sealed, key.seal(&value_aad(job, "X-Token"), b"t0p"));
    }
}
