//! Namespaces and stored tokens: the only code that reads or writes the
//! `namespaces` and `api_tokens` tables.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use crate::caller::{Caller, Role, Scope};
use crate::model::{Namespace, TokenInfo};

/// The caller of a stored token, unless it is unknown or revoked.
pub async fn token_caller(client: &impl GenericClient, hash: &[u8]) -> Result<Option<Caller>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT role, namespaces, id, name FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL",
            &[&hash],
        )
        .await?;
    Ok(row.and_then(|r| {
        let role = Role::parse(r.get(0))?;
        let actor = crate::caller::Actor { token_id: Some(r.get(2)), name: r.get(3) };
        Some(Caller { role, scope: Scope::from_list(r.get(1)), actor, request: Default::default() })
    }))
}

/// Stores a token's hash; returns its id and creation time.
pub async fn insert_token(
    client: &impl GenericClient,
    name: &str,
    hash: &[u8],
    role: Role,
    scope: &Scope,
) -> Result<(Uuid, DateTime<Utc>), tokio_postgres::Error> {
    let id = Uuid::now_v7();
    let row = client
        .query_one(
            "INSERT INTO api_tokens (id, name, token_hash, role, namespaces) VALUES ($1, $2, $3, $4, $5)
             RETURNING created_at",
            &[&id, &name, &hash, &role.as_str(), &scope.to_list()],
        )
        .await?;
    Ok((id, row.get(0)))
}

fn token_of_row(r: &tokio_postgres::Row) -> TokenInfo {
    TokenInfo {
        id: r.get("id"),
        name: r.get("name"),
        role: Role::parse(r.get("role")).unwrap_or(Role::Read),
        namespaces: r.get("namespaces"),
        created_at: r.get("created_at"),
        revoked_at: r.get("revoked_at"),
    }
}

/// The tokens whose namespaces all lie in `scope`, newest first.
pub async fn tokens(client: &impl GenericClient, scope: &Scope) -> Result<Vec<TokenInfo>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT id, name, role, namespaces, created_at, revoked_at FROM api_tokens
             WHERE $1::text[] IS NULL OR (namespaces <@ $1 AND NOT '*' = ANY(namespaces))
             ORDER BY id DESC",
            &[&scope.sql()],
        )
        .await?;
    Ok(rows.iter().map(token_of_row).collect())
}

/// One token, if it lies in `scope`.
pub async fn token(
    client: &impl GenericClient,
    id: Uuid,
    scope: &Scope,
) -> Result<Option<TokenInfo>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT id, name, role, namespaces, created_at, revoked_at FROM api_tokens
             WHERE id = $1 AND ($2::text[] IS NULL OR (namespaces <@ $2 AND NOT '*' = ANY(namespaces)))",
            &[&id, &scope.sql()],
        )
        .await?;
    Ok(row.as_ref().map(token_of_row))
}

/// Revokes a token (idempotent); returns it as it now is.
pub async fn revoke_token(client: &impl GenericClient, id: Uuid) -> Result<(), tokio_postgres::Error> {
    client.execute("UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1", &[&id]).await?;
    Ok(())
}

/// A namespace's own columns, then what the jobs store counts of it.
fn namespace_columns() -> String {
    format!("n.name, n.max_jobs, n.max_fires_per_second, n.created_at, {}", store::jobs::NAMESPACE_USAGE_COLUMNS)
}

fn namespace_of_row(r: &tokio_postgres::Row) -> Namespace {
    Namespace {
        name: r.get("name"),
        max_jobs: r.get("max_jobs"),
        max_fires_per_second: r.get("max_fires_per_second"),
        created_at: r.get("created_at"),
        jobs: r.get("jobs"),
        peak_fires_per_second: r.get("peak_fires_per_second"),
    }
}

/// The namespaces in `scope`, by name.
pub async fn namespaces(client: &impl GenericClient, scope: &Scope) -> Result<Vec<Namespace>, tokio_postgres::Error> {
    let rows = client
        .query(
            &format!(
                "SELECT {} FROM namespaces n
                 WHERE $1::text[] IS NULL OR n.name = ANY($1) ORDER BY n.name",
                namespace_columns()
            ),
            &[&scope.sql()],
        )
        .await?;
    Ok(rows.iter().map(namespace_of_row).collect())
}

/// One namespace, with its use. `for_update` locks its row for the
/// caller's transaction, so that two creates cannot both take the last
/// place of a quota.
pub async fn namespace(
    client: &impl GenericClient,
    name: &str,
    for_update: bool,
) -> Result<Option<Namespace>, tokio_postgres::Error> {
    if for_update {
        client.execute("SELECT 1 FROM namespaces WHERE name = $1 FOR UPDATE", &[&name]).await?;
    }
    let row = client
        .query_opt(&format!("SELECT {} FROM namespaces n WHERE n.name = $1", namespace_columns()), &[&name])
        .await?;
    Ok(row.as_ref().map(namespace_of_row))
}

/// A namespace's quotas; None = no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quotas {
    pub max_jobs: Option<i64>,
    pub max_fires_per_second: Option<f64>,
}

/// A namespace's quotas, without counting its jobs; None = no such namespace.
pub async fn quotas(client: &impl GenericClient, name: &str) -> Result<Option<Quotas>, tokio_postgres::Error> {
    let row =
        client.query_opt("SELECT max_jobs, max_fires_per_second FROM namespaces WHERE name = $1", &[&name]).await?;
    Ok(row.map(|r| Quotas { max_jobs: r.get(0), max_fires_per_second: r.get(1) }))
}

/// How [`write_namespace`] treats an existing namespace of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Create only: `false` when the name is taken.
    Create,
    /// Set the quotas of an existing one: `false` when there is none.
    Update,
    /// Create, or set the quotas of an existing one (always `true`).
    Declare,
}

/// Creates a namespace or sets its quotas, as `how` says; answers whether
/// a row was written.
pub async fn write_namespace(
    client: &impl GenericClient,
    name: &str,
    quotas: Quotas,
    how: Write,
) -> Result<bool, tokio_postgres::Error> {
    let statement = match how {
        Write::Create => {
            "INSERT INTO namespaces (name, max_jobs, max_fires_per_second) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO NOTHING"
        }
        Write::Update => "UPDATE namespaces SET max_jobs = $2, max_fires_per_second = $3 WHERE name = $1",
        Write::Declare => {
            "INSERT INTO namespaces (name, max_jobs, max_fires_per_second) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET max_jobs = EXCLUDED.max_jobs,
                                              max_fires_per_second = EXCLUDED.max_fires_per_second"
        }
    };
    let n = client.execute(statement, &[&name, &quotas.max_jobs, &quotas.max_fires_per_second]).await?;
    Ok(n == 1)
}

/// Deletes a namespace that has no jobs left (deleted ones included: the
/// ledger keeps their history under the namespace). `Err(n)` = it still
/// has `n` jobs; `Ok(false)` = there is no such namespace.
pub async fn delete_namespace(
    client: &impl GenericClient,
    name: &str,
) -> Result<Result<bool, i64>, tokio_postgres::Error> {
    let jobs = store::jobs::count_in_namespace(client, name).await?;
    if jobs > 0 {
        return Ok(Err(jobs));
    }
    let n = client.execute("DELETE FROM namespaces WHERE name = $1", &[&name]).await?;
    Ok(Ok(n == 1))
}

/// Whether job `id` exists (deleted ones included: their history stays
/// readable) in one of the scope's namespaces. A job elsewhere does not
/// exist for the caller.
pub async fn job_visible(client: &impl GenericClient, id: Uuid, scope: &Scope) -> Result<bool, tokio_postgres::Error> {
    store::jobs::exists(client, id, scope.sql().as_deref()).await
}

/// A namespace as the deployment declares it (`NAMESPACES` of `migrate`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    pub name: String,
    #[serde(default)]
    pub max_jobs: Option<i64>,
    #[serde(default)]
    pub max_fires_per_second: Option<f64>,
}

impl Declared {
    pub fn quotas(&self) -> Quotas {
        Quotas { max_jobs: self.max_jobs, max_fires_per_second: self.max_fires_per_second }
    }

    /// The JSON list of `NAMESPACES`; an error names what is wrong.
    pub fn parse_list(json: &str) -> anyhow::Result<Vec<Declared>> {
        let list: Vec<Declared> = serde_json::from_str(json).map_err(|e| {
            anyhow::anyhow!("NAMESPACES must be a JSON list such as [{{\"name\": \"team-a\", \"max_jobs\": 100}}]: {e}")
        })?;
        for ns in &list {
            crate::params::namespace_name(&ns.name)
                .map_err(|why| anyhow::anyhow!("NAMESPACES: {:?} {why}", ns.name))?;
            let q = ns.quotas();
            if q.max_jobs.is_some_and(|n| n < 0) || q.max_fires_per_second.is_some_and(|r| r.is_nan() || r < 0.0) {
                anyhow::bail!("NAMESPACES: {:?}: quotas must be at least 0", ns.name);
            }
        }
        Ok(list)
    }
}

/// In a job write's transaction: every calendar the job names exists in
/// its namespace (locked until the write commits, so a delete cannot slip
/// in between); otherwise a 422 naming each missing one.
pub async fn check_references(
    tx: &impl deadpool_postgres::GenericClient,
    namespace: &str,
    names: &[String],
) -> crate::error::ApiResult<()> {
    let missing = store::calendars::lock_referenced(tx, namespace, names).await?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(crate::error::ApiError::Validation(
        names
            .iter()
            .enumerate()
            .filter(|(_, n)| missing.contains(n))
            .map(|(i, n)| {
                domain::job::FieldError::new(
                    format!("calendars[{i}]"),
                    format!("no calendar {n:?} in namespace {namespace:?}; create it with PUT /v1/calendars/{n}"),
                )
            })
            .collect(),
    ))
}

/// The named calendars of a namespace, compiled, for showing fire times;
/// a name with no calendar is a 422 on `{field}[i]`.
pub async fn calendars_named(
    client: &impl deadpool_postgres::GenericClient,
    namespace: &str,
    names: &[String],
    field: &str,
) -> crate::error::ApiResult<Vec<domain::calendar::Calendar>> {
    let mut calendars = Vec::with_capacity(names.len());
    let mut missing = Vec::new();
    for (i, name) in names.iter().enumerate() {
        match store::calendars::get(client, namespace, name).await? {
            Some(stored) => {
                calendars.push(domain::calendar::Calendar::compile(name, &stored.spec).map_err(|e| anyhow::anyhow!(e))?)
            }
            None => missing.push(domain::job::FieldError::new(
                format!("{field}[{i}]"),
                format!("no calendar {name:?} in namespace {namespace:?}"),
            )),
        }
    }
    if missing.is_empty() { Ok(calendars) } else { Err(crate::error::ApiError::Validation(missing)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_namespaces_are_read_strictly() {
        let list = Declared::parse_list(r#"[{"name": "team-a", "max_jobs": 100}, {"name": "b"}]"#).unwrap();
        let quotas = Quotas { max_jobs: Some(100), max_fires_per_second: None };
        assert_eq!((list[0].name.as_str(), list[0].quotas()), ("team-a", quotas));
        assert_eq!(list[1].quotas(), Quotas::default());
        for bad in [
            r#"{"name": "a"}"#,
            r#"[{"name": "A"}]"#,
            r#"[{"name": "a", "max_job": 1}]"#,
            r#"[{"name": "a", "max_jobs": -1}]"#,
        ] {
            assert!(Declared::parse_list(bad).is_err(), "{bad}");
        }
    }
}
