//! The caller of a request, as the token layer (the `auth` module) resolved
//! it: its role, the namespaces it may act in, and who it is as recorded
//! beside what it changes. Handlers take a [`Caller`] and ask it whether an
//! operation is allowed; nothing here reads a token or the database.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use uuid::Uuid;

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
    /// This request's id and stated reason, for the audit log.
    pub request: RequestInfo,
}

/// What the audit log records of a request beside its caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// The client's `X-Request-Id` (when it is one), or one made here;
    /// echoed in the response.
    pub id: String,
    /// The request's `X-Audit-Reason`.
    pub reason: Option<String>,
}

/// The header a client states why it makes a change with (percent-encoded
/// UTF-8, at most 500 characters once decoded).
pub const AUDIT_REASON_HEADER: &str = "x-audit-reason";
/// The request id header, read and echoed.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// Longest reason the audit log keeps (the column checks it too).
pub const REASON_MAX: usize = 500;

/// A request's id: the client's `X-Request-Id` when it is 1 to 128 visible
/// ASCII characters, else one made here. Set on every request by
/// [`request_id`] and echoed in every response.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The outermost layer: gives every request its id and every response the
/// `X-Request-Id` header, whatever answers it (a 401, a 400, a handler).
pub async fn request_id(mut request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| Uuid::now_v7().to_string());
    request.extensions_mut().insert(RequestId(id.clone()));
    let mut response = next.run(request).await;
    if let Ok(v) = axum::http::HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    response
}

impl RequestInfo {
    /// Reads a request's id (set by [`request_id`]) and reason; a bad
    /// reason is a 400 naming the header.
    pub fn from_request(request: &axum::extract::Request) -> ApiResult<RequestInfo> {
        let headers = request.headers();
        let id =
            request.extensions().get::<RequestId>().map(|r| r.0.clone()).unwrap_or_else(|| Uuid::now_v7().to_string());
        let reason = match headers.get(AUDIT_REASON_HEADER) {
            None => None,
            Some(raw) => {
                let text = raw.to_str().map_err(|_| {
                    ApiError::BadRequest(
                        "X-Audit-Reason must be percent-encoded UTF-8 (visible ASCII on the wire)".into(),
                    )
                })?;
                let decoded = percent_decode(text)
                    .ok_or_else(|| ApiError::BadRequest("X-Audit-Reason is not valid percent-encoded UTF-8".into()))?;
                check_reason("X-Audit-Reason", &decoded).map_err(ApiError::BadRequest)?;
                Some(decoded).filter(|r| !r.trim().is_empty())
            }
        };
        Ok(RequestInfo { id, reason })
    }
}

/// Checks a reason or note people will read: short and printable.
pub fn check_reason(what: &str, text: &str) -> Result<(), String> {
    if text.chars().count() > REASON_MAX {
        return Err(format!("{what} must be at most {REASON_MAX} characters"));
    }
    if let Some(c) = domain::text::first_hidden(text) {
        return Err(format!("{what}: {}", domain::text::hidden_problem(c)));
    }
    Ok(())
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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
        Caller { role: Role::Admin, scope: Scope::Every, actor, request: RequestInfo::default() }
    }

    /// What the audit log records of this request: who, its id, and why
    /// (`note` when the operation takes one, else the request's reason).
    pub fn audit<'a>(&'a self, note: Option<&'a str>) -> store::audit::Context<'a> {
        store::audit::Context {
            author: self.actor.author(),
            request_id: &self.request.id,
            reason: note.or(self.request.reason.as_deref()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_include_the_ones_below_and_scopes_cover_their_parts() {
        let writer = Caller {
            role: Role::Write,
            scope: Scope::Only(vec!["a".into(), "b".into()]),
            actor: Actor::anonymous(),
            request: RequestInfo::default(),
        };
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
        let single = Caller {
            role: Role::Write,
            scope: Scope::Only(vec!["a".into()]),
            actor: Actor::anonymous(),
            request: RequestInfo::default(),
        };
        assert_eq!(single.namespace_for_new_job(None).unwrap(), "a");
        assert_eq!(Caller::bootstrap(Actor::anonymous()).namespace_for_new_job(None).unwrap(), "default");
    }
}
