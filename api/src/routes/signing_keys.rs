//! `/v1/signing-keys`: the secrets that sign a namespace's deliveries
//! (Standard Webhooks; docs/security.md, "Signed deliveries"). Made,
//! rotated and revoked by an admin of the namespace; listed by anyone who
//! may read it, never with a secret: the secret is in the answer that made
//! the key, and nowhere after.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use store::audit;
use uuid::Uuid;

use store::signing_keys::{self, NewSigningKey, SigningKey, SigningKeyError};

use crate::AppState;
use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{PathParams, QueryParams};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct NamespaceQuery {
    /// The keys' namespace (default: the token's only one, or `default`).
    namespace: Option<String>,
}

/// A rotation: a new key, and the keys signing now stop after the overlap.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rotation {
    /// How long the keys signing now go on signing beside the new one, in
    /// seconds: the time receivers have to take the new secret. 0 to
    /// 2,592,000 (30 days); default 86,400 (a day).
    #[schema(minimum = 0, maximum = 2_592_000, default = 86_400)]
    pub overlap_seconds: Option<u64>,
}

/// The keys of a namespace.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SigningKeyList {
    pub namespace: String,
    /// Newest first, revoked and expired ones included.
    pub keys: Vec<SigningKey>,
}

const OVERLAP_DEFAULT_SECONDS: u64 = 86_400;

fn problem(e: SigningKeyError) -> ApiError {
    match e {
        SigningKeyError::TooMany => ApiError::Conflict(e.to_string()),
        SigningKeyError::NotFound(_) => ApiError::NotFound(e.to_string()),
        SigningKeyError::Secret(store::secrets::SecretError::NoKek) => {
            ApiError::Unavailable(format!("signing keys cannot be stored: {}", store::secrets::SecretError::NoKek))
        }
        SigningKeyError::Secret(e) => ApiError::Unavailable(format!("signing keys cannot be stored: {e}")),
        SigningKeyError::Store(e) => ApiError::from(e),
    }
}

async fn make(
    state: &AppState,
    caller: &Caller,
    namespace: Option<&str>,
    overlap: Option<std::time::Duration>,
) -> ApiResult<(StatusCode, Json<NewSigningKey>)> {
    caller.require(Role::Admin)?;
    let namespace = caller.namespace_for_new_job(namespace)?;
    let mut client = state.pg.get().await?;
    let made = signing_keys::create(&mut client, &state.vault, &namespace, &caller.audit(None), overlap)
        .await
        .map_err(problem)?;
    tracing::info!(namespace = %namespace, key.id = %made.key.id, rotation = overlap.is_some(), by = %caller.actor.name, "signing key made");
    Ok((StatusCode::CREATED, Json(made)))
}

#[utoipa::path(
    post,
    path = "/v1/signing-keys",
    tag = "signing keys",
    params(NamespaceQuery),
    responses(
        (status = 201, description = "The key was made and signs from now on, beside the namespace's other keys. The secret is in this answer only", body = NewSigningKey),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        crate::model::SigningKeysFull,
        crate::model::SecretsUnconfigured,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(query): QueryParams<NamespaceQuery>,
) -> ApiResult<(StatusCode, Json<NewSigningKey>)> {
    make(&state, &caller, query.namespace.as_deref(), None).await
}

#[utoipa::path(
    post,
    path = "/v1/signing-keys/rotate",
    tag = "signing keys",
    params(NamespaceQuery),
    request_body(content = Rotation, content_type = "application/json"),
    responses(
        (status = 201, description = "A new key signs from now on; the keys that signed before go on signing until the overlap ends. The secret is in this answer only", body = NewSigningKey),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        crate::model::SigningKeysFull,
        crate::model::ValidationFailed,
        crate::model::SecretsUnconfigured,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(query): QueryParams<NamespaceQuery>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<NewSigningKey>)> {
    // The body is optional: no body is a rotation with the default overlap.
    let rotation: Rotation = if body.iter().all(u8::is_ascii_whitespace) {
        Rotation { overlap_seconds: None }
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("the body is not a rotation: {e}")))?
    };
    let overlap = rotation.overlap_seconds.unwrap_or(OVERLAP_DEFAULT_SECONDS);
    if overlap > signing_keys::OVERLAP_MAX_SECONDS {
        return Err(field(
            "overlap_seconds",
            format!("must be at most {} (30 days)", signing_keys::OVERLAP_MAX_SECONDS),
        ));
    }
    make(&state, &caller, query.namespace.as_deref(), Some(std::time::Duration::from_secs(overlap))).await
}

#[utoipa::path(
    get,
    path = "/v1/signing-keys",
    tag = "signing keys",
    params(NamespaceQuery),
    responses(
        (status = 200, description = "The namespace's keys, without their secrets", body = SigningKeyList),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(query): QueryParams<NamespaceQuery>,
) -> ApiResult<Json<SigningKeyList>> {
    let namespace = caller.namespace_for_new_job(query.namespace.as_deref())?;
    let client = state.pg.get().await?;
    let keys = signing_keys::list(&client, &namespace).await?;
    Ok(Json(SigningKeyList { namespace, keys }))
}

#[utoipa::path(
    delete,
    path = "/v1/signing-keys/{id}",
    tag = "signing keys",
    params(("id" = Uuid, Path, description = "The key's id"), NamespaceQuery),
    responses(
        (status = 200, description = "The key is revoked: workers stop signing with it within 10 seconds", body = SigningKey),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        crate::model::SigningKeyNotFound,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<Uuid>,
    QueryParams(query): QueryParams<NamespaceQuery>,
) -> ApiResult<Json<SigningKey>> {
    caller.require(Role::Admin)?;
    let namespace = caller.namespace_for_new_job(query.namespace.as_deref())?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let key = signing_keys::revoke(&tx, &namespace, id, &caller.actor.name).await.map_err(problem)?;
    let entry = audit::Entry::other(audit::Action::SigningKeyRevoke, Some(&namespace), id.to_string());
    audit::record(&tx, &caller.audit(None), &[entry]).await?;
    tx.commit().await?;
    tracing::info!(namespace = %namespace, key.id = %id, by = %caller.actor.name, "signing key revoked");
    Ok(Json(key))
}
