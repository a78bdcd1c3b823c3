//! Who is calling. A bearer token resolves to a [`Caller`]
//! (`crate::caller`): a role and the namespaces it may act in. The tokens of `API_TOKENS` are the bootstrap
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

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::AppState;
use crate::caller::{Actor, Caller};
use crate::error::{ApiError, ApiResult};

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
        Some(mut caller) => {
            caller.request = match crate::caller::RequestInfo::from_request(&request) {
                Ok(info) => info,
                Err(e) => return e.into_response(),
            };
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
    fn new_tokens_are_long_random_and_hashed_to_32_bytes() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 4 + 64);
        assert_eq!(token_hash(&a).len(), 32);
    }
}
