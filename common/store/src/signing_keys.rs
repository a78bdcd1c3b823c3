//! A namespace's signing keys (`signing_keys`): the secrets that sign its
//! HTTP deliveries as the Standard Webhooks specification defines. A secret
//! is 32 random bytes, shown once as `whsec_` + base64 when it is made, and
//! stored only sealed by the namespace's data key (`secrets::Vault`), bound
//! to its namespace and id.
//!
//! Every key that is neither revoked nor past its `expires_at` signs. A
//! rotation makes a new key and gives the namespace's other keys an
//! `expires_at` at the end of the overlap: receivers move to the new secret
//! while both sign. A revoked key signs no more, at once (workers re-read a
//! namespace's keys every `ACTIVE_KEYS_FRESH_FOR`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use ring::rand::{SecureRandom, SystemRandom};
use serde::Serialize;
use uuid::Uuid;

use crate::secrets::{SecretError, Vault};

/// The prefix of a secret as the Standard Webhooks libraries take it.
pub const SECRET_PREFIX: &str = "whsec_";
/// Most keys a namespace may have signing at once: each signs every
/// delivery, so each costs an HMAC per request and ~50 bytes of header.
pub const ACTIVE_KEYS_MAX: i64 = 5;
/// Longest overlap a rotation may ask for.
pub const OVERLAP_MAX_SECONDS: u64 = 30 * 24 * 3600;

/// A key as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SigningKey {
    pub id: Uuid,
    #[serde(serialize_with = "domain::execution::serialize_instant")]
    pub created_at: DateTime<Utc>,
    /// Who made it (the caller's token name, or `admin`).
    pub created_by: Option<String>,
    /// When it stops signing (set by a rotation); absent: until revoked.
    #[serde(serialize_with = "domain::execution::serialize_opt_instant")]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "domain::execution::serialize_opt_instant")]
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_by: Option<String>,
    /// `active` (signing), `expiring` (signing until `expires_at`),
    /// `expired` or `revoked`.
    pub state: KeyState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    Active,
    Expiring,
    Expired,
    Revoked,
}

impl KeyState {
    fn of(expires_at: Option<DateTime<Utc>>, revoked_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> KeyState {
        match (revoked_at, expires_at) {
            (Some(_), _) => KeyState::Revoked,
            (None, Some(at)) if at <= now => KeyState::Expired,
            (None, Some(_)) => KeyState::Expiring,
            (None, None) => KeyState::Active,
        }
    }

    pub fn signs(self) -> bool {
        matches!(self, KeyState::Active | KeyState::Expiring)
    }
}

/// A new key with its secret, the only time the secret is seen.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewSigningKey {
    #[serde(flatten)]
    pub key: SigningKey,
    /// `whsec_` + base64 of 32 random bytes: give it to the receiver's
    /// Standard Webhooks verifier. Not shown again.
    pub secret: String,
}

/// Why a key could not be made or changed.
#[derive(Debug, thiserror::Error)]
pub enum SigningKeyError {
    #[error("the namespace already has {ACTIVE_KEYS_MAX} signing keys in use; revoke one first")]
    TooMany,
    #[error("no signing key {0} in this namespace")]
    NotFound(Uuid),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(transparent)]
    Store(#[from] tokio_postgres::Error),
}

/// Associated data of a sealed secret: its namespace and id.
fn secret_aad(namespace: &str, id: Uuid) -> Vec<u8> {
    format!("cronshard-signing-key:v1:{namespace}:{id}").into_bytes()
}

const COLUMNS: &str = "id, created_at, created_by, expires_at, revoked_at, revoked_by, now() AS now";

fn from_row(row: &tokio_postgres::Row) -> SigningKey {
    let (expires_at, revoked_at) = (row.get("expires_at"), row.get("revoked_at"));
    SigningKey {
        id: row.get("id"),
        created_at: row.get("created_at"),
        created_by: row.get("created_by"),
        expires_at,
        revoked_at,
        revoked_by: row.get("revoked_by"),
        state: KeyState::of(expires_at, revoked_at, row.get("now")),
    }
}

/// Makes a key for `namespace`. With `overlap`, a rotation: every other key
/// still signing stops at the end of the overlap (sooner if it was to stop
/// sooner already). In one transaction, serialized per namespace.
pub async fn create(
    client: &mut deadpool_postgres::Object,
    vault: &Vault,
    namespace: &str,
    audit: &crate::audit::Context<'_>,
    overlap: Option<std::time::Duration>,
) -> Result<NewSigningKey, SigningKeyError> {
    let created_by = audit.author.name;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtext('cronshard-signing-keys:' || $1))", &[&namespace]).await?;
    let signing: i64 = tx
        .query_one(
            "SELECT count(*) FROM signing_keys WHERE namespace = $1 AND revoked_at IS NULL
               AND (expires_at IS NULL OR expires_at > now())",
            &[&namespace],
        )
        .await?
        .get(0);
    if signing >= ACTIVE_KEYS_MAX {
        return Err(SigningKeyError::TooMany);
    }
    let mut bytes = [0u8; 32];
    SystemRandom::new().fill(&mut bytes).expect("the system's random source");
    let id = Uuid::now_v7();
    let sealed = vault.seal(&tx, namespace, &secret_aad(namespace, id), &bytes).await?;
    if let Some(overlap) = overlap {
        tx.execute(
            "UPDATE signing_keys SET expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $2))
             WHERE namespace = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())",
            &[&namespace, &overlap.as_secs_f64()],
        )
        .await?;
    }
    let row = tx
        .query_one(
            &format!(
                "INSERT INTO signing_keys (id, namespace, sealed, created_by) VALUES ($1, $2, $3, $4)
                 RETURNING {COLUMNS}"
            ),
            &[&id, &namespace, &sealed, &created_by],
        )
        .await?;
    let action =
        if overlap.is_some() { crate::audit::Action::SigningKeyRotate } else { crate::audit::Action::SigningKeyCreate };
    let details = serde_json::json!({ "overlap_seconds": overlap.map(|o| o.as_secs()) });
    let entry = crate::audit::Entry::other(action, Some(namespace), id.to_string()).with_details(details);
    crate::audit::record(&tx, audit, &[entry]).await?;
    tx.commit().await?;
    Ok(NewSigningKey { key: from_row(&row), secret: format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes)) })
}

/// The namespace's keys, newest first, revoked and expired ones included.
pub async fn list(client: &impl GenericClient, namespace: &str) -> Result<Vec<SigningKey>, tokio_postgres::Error> {
    Ok(client
        .query(
            &format!("SELECT {COLUMNS} FROM signing_keys WHERE namespace = $1 ORDER BY created_at DESC, id DESC"),
            &[&namespace],
        )
        .await?
        .iter()
        .map(from_row)
        .collect())
}

/// Revokes a key: it signs no more. Revoking a revoked key changes nothing
/// and answers it as it is.
pub async fn revoke(
    client: &impl GenericClient,
    namespace: &str,
    id: Uuid,
    revoked_by: &str,
) -> Result<SigningKey, SigningKeyError> {
    let row = client
        .query_opt(
            &format!(
                "UPDATE signing_keys SET revoked_at = coalesce(revoked_at, now()),
                        revoked_by = CASE WHEN revoked_at IS NULL THEN $3 ELSE revoked_by END
                 WHERE namespace = $1 AND id = $2 RETURNING {COLUMNS}"
            ),
            &[&namespace, &id, &revoked_by],
        )
        .await?;
    row.map(|r| from_row(&r)).ok_or(SigningKeyError::NotFound(id))
}

/// The secrets of the namespace's keys that sign now, opened, oldest first
/// (the order of the signatures in the header).
pub async fn signing_secrets(
    pool: &deadpool_postgres::Pool,
    vault: &Vault,
    namespace: &str,
) -> Result<Vec<(Uuid, Vec<u8>)>, SecretError> {
    let rows = {
        let client = pool.get().await.map_err(|e| SecretError::Store(domain::redact::text(&e.to_string())))?;
        client
            .query(
                "SELECT id, sealed FROM signing_keys WHERE namespace = $1 AND revoked_at IS NULL
                   AND (expires_at IS NULL OR expires_at > now()) ORDER BY created_at, id",
                &[&namespace],
            )
            .await?
    };
    let mut secrets = Vec::with_capacity(rows.len());
    for row in rows {
        let id: Uuid = row.get(0);
        let sealed: String = row.get(1);
        secrets.push((id, vault.open(pool, &secret_aad(namespace, id), &sealed).await?));
    }
    Ok(secrets)
}
