//! Who is calling. A bearer token resolves to a [`Caller`]: a role and the
//! namespaces it may act in. The tokens of `API_TOKENS` are the bootstrap
//! admins (every namespace); the others are stored in `api_tokens` as a
//! SHA-256 of the token, made and revoked through `/v1/tokens`. With
//! `API_TOKENS` empty, auth is off and every caller is an admin of every
//! namespace.
//!
//! A job of a namespace the caller may not act in does not exist for it
//! (404, never 403): a token cannot learn which ids are taken elsewhere. A
//! role too low for the operation is a 403.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::AppState;
use crate::error::{ApiError, ApiResult};

/// What a token may do; each role includes the ones before it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read jobs, executions, explanations and the cluster.
    Read,
    /// Also create, change, delete, pause, resume, trigger and replay.
    Write,
    /// Also make and revoke tokens for its namespaces.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Read, Role::Write, Role::Admin];

    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// How a token names every namespace, present and future.
pub const EVERY_NAMESPACE: &str = "*";

/// The namespaces a caller may act in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Every,
    Only(Vec<String>),
}

impl Scope {
    pub fn from_list(namespaces: Vec<String>) -> Scope {
        if namespaces.iter().any(|n| n == EVERY_NAMESPACE) { Scope::Every } else { Scope::Only(namespaces) }
    }

    pub fn to_list(&self) -> Vec<String> {
        match self {
            Scope::Every => vec![EVERY_NAMESPACE.to_owned()],
            Scope::Only(names) => names.clone(),
        }
    }

    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Scope::Every => true,
            Scope::Only(names) => names.iter().any(|n| n == namespace),
        }
    }

    /// Whether every namespace of `other` is in this scope.
    pub fn covers(&self, other: &Scope) -> bool {
        match (self, other) {
            (Scope::Every, _) => true,
            (Scope::Only(_), Scope::Every) => false,
            (Scope::Only(_), Scope::Only(names)) => names.iter().all(|n| self.contains(n)),
        }
    }

    /// The `$n::text[]` of a statement confined to the scope: NULL = every namespace.
    pub fn sql(&self) -> Option<Vec<String>> {
        match self {
            Scope::Every => None,
            Scope::Only(names) => Some(names.clone()),
        }
    }
}

/// The caller of a request, as the token layer resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub role: Role,
    pub scope: Scope,
    /// Who acts, as recorded beside what a caller changes (who paused a job).
    pub actor: Actor,
}

/// The token behind a request, as recorded: its id and name for a stored
/// token, never the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The stored token's id; `None` for a bootstrap token or with auth off.
    pub token_id: Option<Uuid>,
    pub name: String,
}

impl Actor {
    /// A token of `API_TOKENS` (they have no names; the position tells them apart).
    pub fn bootstrap(index: usize) -> Actor {
        Actor { token_id: None, name: format!("bootstrap token #{}", index + 1) }
    }

    /// As the jobs store records who changed a job.
    pub fn author(&self) -> store::jobs::Author<'_> {
        store::jobs::Author { name: &self.name, token_id: self.token_id }
    }

    /// Every caller while auth is off.
    pub fn anonymous() -> Actor {
        Actor { token_id: None, name: "anonymous (auth off)".to_owned() }
    }
}

impl Caller {
    /// A bootstrap token, or anyone while auth is off.
    pub fn bootstrap(actor: Actor) -> Caller {
        Caller { role: Role::Admin, scope: Scope::Every, actor }
    }

    /// 403 unless the caller's role includes `role`.
    pub fn require(&self, role: Role) -> ApiResult<()> {
        if self.role >= role {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "this token's role is {}; the operation needs {}",
                self.role.as_str(),
                role.as_str()
            )))
        }
    }

    /// 403 unless the caller is an admin of every namespace (namespace
    /// management: only such an admin may create one or set its quotas).
    pub fn require_cluster_admin(&self) -> ApiResult<()> {
        self.require(Role::Admin)?;
        if self.scope == Scope::Every {
            Ok(())
        } else {
            Err(ApiError::Forbidden("only an admin token of every namespace (\"*\") manages namespaces".into()))
        }
    }

    /// The namespace a new job goes to: the one named, or the caller's
    /// only one (`default` for a caller of every namespace).
    pub fn namespace_for_new_job(&self, named: Option<&str>) -> ApiResult<String> {
        crate::params::namespace_param(named)?;
        match (named, &self.scope) {
            (Some(name), scope) if scope.contains(name) => Ok(name.to_owned()),
            (Some(name), _) => {
                Err(crate::error::field("namespace", format!("no namespace {name:?} that this token may use")))
            }
            (None, Scope::Every) => Ok("default".to_owned()),
            (None, Scope::Only(names)) if names.len() == 1 => Ok(names[0].clone()),
            (None, Scope::Only(names)) => Err(crate::error::field(
                "namespace",
                format!("is required: this token acts in several namespaces ({})", names.join(", ")),
            )),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Set by `authenticate` on every /v1 route; absent only on a route
        // outside it, which must not ask who is calling.
        parts.extensions.get::<Caller>().cloned().ok_or(ApiError::Unauthorized)
    }
}

/// The SHA-256 of a token: what `api_tokens` keeps.
pub fn token_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// A new token: 256 random bits, hex, with a prefix that tells it apart in
/// a secret scanner.
pub fn new_token() -> String {
    let bits: Vec<u8> = Uuid::new_v4().as_bytes().iter().chain(Uuid::new_v4().as_bytes()).copied().collect();
    format!("cst_{}", bits.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Resolved stored tokens, kept for [`TokenCache::TTL`]: a request need not
/// read `api_tokens`. A revocation takes effect at once on the replica that
/// made it and within the TTL on the others.
#[derive(Default)]
pub struct TokenCache(Mutex<HashMap<Vec<u8>, Resolved>>);

/// A token hash's caller (None = unknown or revoked), and when it was read.
type Resolved = (Option<Caller>, Instant);

impl TokenCache {
    pub const TTL: Duration = Duration::from_secs(5);
    /// Beyond this many entries the cache starts afresh (unknown tokens are
    /// cached too, so a flood of made-up ones must not grow it for ever).
    const MAX_ENTRIES: usize = 10_000;

    fn get(&self, hash: &[u8]) -> Option<Option<Caller>> {
        let cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(hash).filter(|(_, at)| at.elapsed() < Self::TTL).map(|(caller, _)| caller.clone())
    }

    fn put(&self, hash: Vec<u8>, caller: Option<Caller>) {
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= Self::MAX_ENTRIES {
            cache.clear();
        }
        cache.insert(hash, (caller, Instant::now()));
    }

    /// Forgets every resolved token (after a revocation).
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Constant-time comparison: the time taken must not reveal how much of a
/// guessed token was right.
fn token_matches(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = given.len() ^ expected.len();
    for (i, b) in expected.iter().enumerate() {
        diff |= (given.get(i).copied().unwrap_or(0) ^ b) as usize;
    }
    diff == 0
}

/// The bearer token of a request ("" when there is none).
pub fn bearer_token(headers: &axum::http::HeaderMap) -> &str {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        // The scheme is case-insensitive (RFC 9110 §11.1).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .unwrap_or_default()
}

/// The caller of a token: a bootstrap token, or a stored one not revoked.
async fn resolve(state: &AppState, given: &str) -> ApiResult<Option<Caller>> {
    if given.is_empty() {
        return Ok(None);
    }
    // Every token is compared (no early exit), so timing tells nothing.
    let bootstrap = state
        .tokens
        .iter()
        .enumerate()
        .fold(None, |found, (i, t)| if token_matches(given.as_bytes(), t.as_bytes()) { Some(i) } else { found });
    if let Some(index) = bootstrap {
        return Ok(Some(Caller::bootstrap(Actor::bootstrap(index))));
    }
    let hash = token_hash(given);
    if let Some(cached) = state.token_cache.get(&hash) {
        return Ok(cached);
    }
    let client = state.pg.get().await?;
    let caller = crate::tenancy::token_caller(&client, &hash).await?;
    state.token_cache.put(hash, caller.clone());
    Ok(caller)
}

/// Whether a request may read the API's `/metrics`: with auth on, only a
/// caller with a valid token (any role), as for `/v1`; anonymous callers get
/// the probes and the OpenAPI document only.
pub async fn may_read_metrics(state: &AppState, headers: &axum::http::HeaderMap) -> ApiResult<bool> {
    if state.tokens.is_empty() {
        return Ok(true);
    }
    Ok(resolve(state, bearer_token(headers)).await?.is_some())
}

/// The token layer of `/v1`: resolves the caller or answers 401.
pub async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let caller = if state.tokens.is_empty() {
        Some(Caller::bootstrap(Actor::anonymous()))
    } else {
        match resolve(&state, bearer_token(request.headers())).await {
            Ok(caller) => caller,
            Err(e) => return e.into_response(),
        }
    };
    match caller {
        Some(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        None => ApiError::Unauthorized.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(token_matches(b"secret", b"secret"));
        assert!(!token_matches(b"secreT", b"secret"));
        assert!(!token_matches(b"secret-longer", b"secret"));
        assert!(!token_matches(b"", b"secret"));
    }

    #[test]
    fn roles_include_the_ones_below_and_scopes_cover_their_parts() {
        let writer =
            Caller { role: Role::Write, scope: Scope::Only(vec!["a".into(), "b".into()]), actor: Actor::anonymous() };
        assert!(writer.require(Role::Read).is_ok() && writer.require(Role::Write).is_ok());
        assert!(matches!(writer.require(Role::Admin), Err(ApiError::Forbidden(_))));
        assert!(writer.scope.covers(&Scope::Only(vec!["a".into()])));
        assert!(!writer.scope.covers(&Scope::Only(vec!["a".into(), "c".into()])));
        assert!(!writer.scope.covers(&Scope::Every));
        assert!(Scope::Every.covers(&writer.scope));
        assert_eq!(Scope::from_list(vec!["*".into()]), Scope::Every);
        assert_eq!(writer.namespace_for_new_job(Some("b")).unwrap(), "b");
        assert!(writer.namespace_for_new_job(Some("c")).is_err());
        assert!(writer.namespace_for_new_job(None).is_err(), "two namespaces: the job must name one");
        let single = Caller { role: Role::Write, scope: Scope::Only(vec!["a".into()]), actor: Actor::anonymous() };
        assert_eq!(single.namespace_for_new_job(None).unwrap(), "a");
        assert_eq!(Caller::bootstrap(Actor::anonymous()).namespace_for_new_job(None).unwrap(), "default");
    }

    #[test]
    fn new_tokens_are_long_random_and_hashed_to_32_bytes() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 4 + 64);
        assert_eq!(token_hash(&a).len(), 32);
    }
}
