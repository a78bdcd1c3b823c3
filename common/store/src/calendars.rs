//! The `calendars` table's SQL, for the API (writes) and the schedulers
//! (reads): its only home.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use domain::calendar::{Calendar, CalendarSpec};

/// A calendar as stored.
#[derive(Debug, Clone)]
pub struct Stored {
    pub namespace: String,
    pub name: String,
    pub spec: CalendarSpec,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str = "namespace, name, spec, version, created_at, updated_at";

fn stored(row: &tokio_postgres::Row) -> anyhow::Result<Stored> {
    Ok(Stored {
        namespace: row.get("namespace"),
        name: row.get("name"),
        spec: serde_json::from_value(row.get("spec"))?,
        version: row.get("version"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    })
}

/// What a write did.
#[derive(Debug)]
pub enum Put {
    Created(Stored),
    Replaced(Stored),
}

/// Creates or replaces a calendar (a replace bumps its version).
pub async fn put(client: &impl GenericClient, namespace: &str, name: &str, spec: &CalendarSpec) -> anyhow::Result<Put> {
    let spec_json = serde_json::to_value(spec)?;
    let row = client
        .query_one(
            &format!(
                "INSERT INTO calendars AS c (namespace, name, spec) VALUES ($1, $2, $3)
                 ON CONFLICT (namespace, name) DO UPDATE
                     SET spec = EXCLUDED.spec, version = c.version + 1, updated_at = now()
                 RETURNING {COLUMNS}, (xmax = 0) AS inserted"
            ),
            &[&namespace, &name, &spec_json],
        )
        .await?;
    let s = stored(&row)?;
    Ok(if row.get("inserted") { Put::Created(s) } else { Put::Replaced(s) })
}

pub async fn get(client: &impl GenericClient, namespace: &str, name: &str) -> anyhow::Result<Option<Stored>> {
    let row = client
        .query_opt(&format!("SELECT {COLUMNS} FROM calendars WHERE namespace = $1 AND name = $2"), &[&namespace, &name])
        .await?;
    row.as_ref().map(stored).transpose()
}

/// Calendars of the given namespaces (`None`: every one), by (namespace,
/// name) after `after`, at most `limit`.
pub async fn list(
    client: &impl GenericClient,
    namespaces: Option<&[String]>,
    after: Option<(&str, &str)>,
    limit: i64,
) -> anyhow::Result<Vec<Stored>> {
    let (after_ns, after_name) = after.unwrap_or(("", ""));
    let rows = client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM calendars
                 WHERE ($1::text[] IS NULL OR namespace = ANY($1)) AND (namespace, name) > ($2, $3)
                 ORDER BY namespace, name LIMIT $4"
            ),
            &[&namespaces, &after_ns, &after_name, &limit],
        )
        .await?;
    rows.iter().map(stored).collect()
}

/// What a delete found.
#[derive(Debug, PartialEq, Eq)]
pub enum Delete {
    Deleted,
    NotFound,
    /// Live jobs (up to 10 of them) still reference it.
    InUse(Vec<uuid::Uuid>),
}

/// Deletes a calendar no live job references. Call in a transaction: the
/// row lock taken here makes a concurrent job write that references the
/// calendar ([`lock_referenced`]) wait, so neither can miss the other.
pub async fn delete(client: &impl GenericClient, namespace: &str, name: &str) -> anyhow::Result<Delete> {
    let locked = client
        .query_opt("SELECT 1 FROM calendars WHERE namespace = $1 AND name = $2 FOR UPDATE", &[&namespace, &name])
        .await?;
    if locked.is_none() {
        return Ok(Delete::NotFound);
    }
    let users: Vec<uuid::Uuid> = client
        .query(
            "SELECT id FROM jobs WHERE namespace = $1 AND deleted_at IS NULL AND spec->'calendars' ? $2 ORDER BY id LIMIT 10",
            &[&namespace, &name],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !users.is_empty() {
        return Ok(Delete::InUse(users));
    }
    client.execute("DELETE FROM calendars WHERE namespace = $1 AND name = $2", &[&namespace, &name]).await?;
    Ok(Delete::Deleted)
}

/// Locks (`FOR SHARE`) the calendars a job write references and returns the
/// names that do not exist in its namespace. Call in the job write's
/// transaction, so a delete of one of them waits for it and then sees the job.
pub async fn lock_referenced(
    client: &impl GenericClient,
    namespace: &str,
    names: &[String],
) -> anyhow::Result<Vec<String>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let found: Vec<String> = client
        .query("SELECT name FROM calendars WHERE namespace = $1 AND name = ANY($2) FOR SHARE", &[&namespace, &names])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(names.iter().filter(|n| !found.contains(n)).cloned().collect())
}

/// Every calendar, compiled, keyed by `namespace/name` ([`key`](domain::calendar::key)), with a
/// fingerprint of what was read: the schedulers reload when it changes.
pub async fn load_all(client: &impl GenericClient) -> anyhow::Result<(String, HashMap<String, Arc<Calendar>>)> {
    // The fingerprint first: a change between the two reads is then loaded
    // now and reloaded on the next poll, never missed.
    let fingerprint = fingerprint(client).await?;
    let rows = client.query(&format!("SELECT {COLUMNS} FROM calendars"), &[]).await?;
    let mut calendars = HashMap::with_capacity(rows.len());
    for row in &rows {
        let s = stored(row)?;
        match Calendar::compile(&s.name, &s.spec) {
            Ok(c) => {
                calendars.insert(domain::calendar::key(&s.namespace, &s.name), Arc::new(c));
            }
            Err(e) => {
                tracing::error!(calendar = %domain::calendar::key(&s.namespace, &s.name), error = %e, "stored calendar does not compile; ignoring it")
            }
        }
    }
    Ok((fingerprint, calendars))
}

/// Changes whenever a calendar is created, changed or deleted (a re-created
/// one has a new `updated_at`). Cheap: the table is small.
pub async fn fingerprint(client: &impl GenericClient) -> anyhow::Result<String> {
    Ok(client
        .query_one(
            "SELECT coalesce(md5(string_agg(namespace || '/' || name || ':' || version || ':' || updated_at::text, ','
                                            ORDER BY namespace, name)), '')
             FROM calendars",
            &[],
        )
        .await?
        .get(0))
}

/// The channel a trigger on `calendars` notifies after each change
/// (migrations/V19): schedulers reload at once instead of at their next poll.
pub const CHANGES_CHANNEL: &str = "cronshard_calendars";
