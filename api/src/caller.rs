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

#[cfg(test)]
mod tests {
    use super::*;

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
}
