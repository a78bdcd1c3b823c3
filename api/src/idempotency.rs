//! `Idempotency-Key` on `POST /v1/jobs` (docs/decisions.md, "Idempotency").
//!
//! A create that carries a key records the key with its first response in
//! the transaction that inserts the job. A retry with the same key and the
//! same job definition gets that first response again (201, same job, with
//! `Idempotent-Replayed: true`); the same key with another definition is a 422
//! naming the header. Keys are scoped per caller (a hash of the bearer token;
//! one shared scope when auth is off) and expire after [`TTL`].

use axum::http::HeaderMap;
use chrono::TimeDelta;
use deadpool_postgres::GenericClient;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::AppState;
use crate::error::{ApiError, ApiResult, field};

/// The request header.
pub const HEADER: &str = "Idempotency-Key";
/// The response header set on a replayed response.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// Says on `response` that it is the first answer to its key, replayed.
pub fn mark_replayed(response: &mut axum::response::Response, replayed: bool) {
    if replayed {
        response.headers_mut().insert(REPLAYED_HEADER, axum::http::HeaderValue::from_static("true"));
    }
}
/// Longest accepted key.
pub const KEY_MAX_BYTES: usize = 255;
/// How long a key is remembered.
pub const TTL: TimeDelta = TimeDelta::hours(24);
/// Expired keys deleted after each keyed create (lazy cleanup, bounded work).
const PURGE_BATCH: i64 = 100;

/// A validated key, scoped to its caller, with the hash of its request.
pub struct Key {
    scope: String,
    key: String,
    request_hash: String,
}

/// The first response to a key.
pub struct Stored {
    pub status: u16,
    pub body: Value,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

impl Key {
    /// The request's key, if it sent one. The request hash is taken over the
    /// validated definition, so a retry that differs only in key order,
    /// whitespace or spelled-out defaults counts as the same request.
    pub fn from_request(
        headers: &HeaderMap,
        state: &AppState,
        request: &impl serde::Serialize,
    ) -> ApiResult<Option<Key>> {
        let mut values = headers.get_all(HEADER).iter();
        let Some(raw) = values.next() else { return Ok(None) };
        if values.next().is_some() {
            return Err(field(HEADER, "must be sent at most once"));
        }
        let key = raw
            .to_str()
            .ok()
            .filter(|k| !k.is_empty() && k.len() <= KEY_MAX_BYTES && k.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| {
                field(HEADER, format!("must be 1 to {KEY_MAX_BYTES} visible ASCII characters (no spaces), e.g. a UUID"))
            })?;
        let scope = if state.tokens.is_empty() {
            String::new()
        } else {
            sha256_hex(crate::auth::bearer_token(headers).as_bytes())
        };
        let request_hash = sha256_hex(&serde_json::to_vec(request)?);
        Ok(Some(Key { scope, key: key.to_owned(), request_hash }))
    }

    /// The first response to this key, if it is still remembered; a 422 when
    /// it was given for a different request.
    pub async fn replay(&self, client: &impl GenericClient) -> ApiResult<Option<Stored>> {
        let row = client
            .query_opt(
                "SELECT request_hash, status, response FROM idempotency_keys
                 WHERE scope = $1 AND key = $2 AND expires_at > now()",
                &[&self.scope, &self.key],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        if row.get::<_, &str>("request_hash") != self.request_hash {
            return Err(field(
                HEADER,
                "was already used with a different request body; use a new key for a different job",
            ));
        }
        let body = serde_json::from_str(row.get("response"))?;
        Ok(Some(Stored { status: row.get::<_, i16>("status") as u16, body }))
    }

    /// Records the first response, inside the transaction that created
    /// `job_id`. `false` when another request holds the key: a concurrent
    /// duplicate waits here for that request's transaction, and the caller
    /// then rolls back and replays.
    pub async fn record(&self, tx: &impl GenericClient, job_id: Uuid, status: u16, body: &Value) -> ApiResult<bool> {
        let inserted = tx
            .execute(
                "INSERT INTO idempotency_keys (scope, key, request_hash, job_id, status, response, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
                 ON CONFLICT (scope, key) DO UPDATE SET
                     request_hash = EXCLUDED.request_hash, job_id = EXCLUDED.job_id, status = EXCLUDED.status,
                     response = EXCLUDED.response, created_at = now(), expires_at = EXCLUDED.expires_at
                 WHERE idempotency_keys.expires_at <= now()",
                &[
                    &self.scope,
                    &self.key,
                    &self.request_hash,
                    &job_id,
                    &(status as i16),
                    &body.to_string(),
                    &(TTL.num_seconds() as f64),
                ],
            )
            .await?;
        Ok(inserted == 1)
    }
}

/// Deletes a bounded batch of expired keys. Failures only cost disk space.
pub async fn purge_expired(client: &impl GenericClient) {
    let purged = client
        .execute(
            "DELETE FROM idempotency_keys WHERE (scope, key) IN (
                 SELECT scope, key FROM idempotency_keys WHERE expires_at <= now()
                 LIMIT $1 FOR UPDATE SKIP LOCKED)",
            &[&PURGE_BATCH],
        )
        .await;
    if let Err(e) = purged {
        tracing::warn!(error = %e, "purging expired idempotency keys failed");
    }
}

/// A key that vanished between a conflict and the re-read (it expired in
/// that instant): the client may simply retry.
pub fn vanished() -> ApiError {
    ApiError::Conflict(format!("the {HEADER} was released while this request waited for it; retry the request"))
}
