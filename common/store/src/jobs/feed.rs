//! The reads of the schedulers' change feed (`scheduler/src/feed.rs` runs
//! it): jobs by id, every live job page by page in one snapshot, the jobs
//! changed since a snapshot's xmin, and the versions of jobs that were live
//! within a lookback. Rows come back as stored (the definition unparsed);
//! the feed decides what a node does with them.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

/// A job as the feed reads it.
#[derive(Debug, Clone)]
pub struct FeedJob {
    pub id: Uuid,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    /// `None` for a row written before the column was.
    pub updated_at: Option<DateTime<Utc>>,
    pub namespace: String,
    /// The definition (`jobs.spec`), not parsed.
    pub spec: Value,
    pub paused: bool,
    pub deleted: bool,
}

const SELECT: &str =
    "SELECT id, version, created_at, spec, paused, deleted_at IS NOT NULL, updated_at, namespace FROM jobs j";

fn feed_job(row: &Row) -> FeedJob {
    FeedJob {
        id: row.get(0),
        version: row.get(1),
        created_at: row.get(2),
        spec: row.get(3),
        paused: row.get(4),
        deleted: row.get(5),
        updated_at: row.get(6),
        namespace: row.get(7),
    }
}

/// The given jobs as they are now, deleted ones included.
pub async fn by_ids(client: &impl GenericClient, ids: &[Uuid]) -> Result<Vec<FeedJob>, tokio_postgres::Error> {
    Ok(client.query(&format!("{SELECT} WHERE id = ANY($1)"), &[&ids]).await?.iter().map(feed_job).collect())
}

/// The xmin of the snapshot `client` reads in: every transaction below it
/// had finished, so a later [`changed_since`] of it misses no change.
pub async fn snapshot_xmin(client: &impl GenericClient) -> Result<i64, tokio_postgres::Error> {
    Ok(client.query_one("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint", &[]).await?.get(0))
}

/// Up to `limit` jobs not deleted (paused ones too) with ids after `after`,
/// by id: a page of the initial load.
pub async fn live_page(
    client: &impl GenericClient,
    after: Uuid,
    limit: i64,
) -> Result<Vec<FeedJob>, tokio_postgres::Error> {
    let query = format!("{SELECT} WHERE deleted_at IS NULL AND id > $1 ORDER BY id LIMIT $2");
    Ok(client.query(&query, &[&after, &limit]).await?.iter().map(feed_job).collect())
}

/// The jobs written by transactions at or after xmin `since`, and the xmin
/// of this read's snapshot (the next read's `since`). A job may come twice
/// over two reads; the feed's consumers compare versions.
pub async fn changed_since(
    client: &impl GenericClient,
    since: i64,
) -> Result<(Vec<FeedJob>, i64), tokio_postgres::Error> {
    let rows = client
        .query(
            "WITH snap AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin)
             SELECT j.id, j.version, j.created_at, j.spec, j.paused, j.deleted_at IS NOT NULL, j.updated_at,
                    j.namespace, snap.xmin
             FROM snap LEFT JOIN jobs j ON j.change_xid >= $1",
            &[&since],
        )
        .await?;
    let xmin = rows.first().map(|r| r.get::<_, i64>(8)).unwrap_or(since);
    Ok((rows.iter().filter(|r| r.get::<_, Option<Uuid>>(0).is_some()).map(feed_job).collect(), xmin))
}

/// A live version of a job that a later version replaced at `until`.
#[derive(Debug, Clone)]
pub struct EndedVersion {
    pub job_id: Uuid,
    pub version: i64,
    pub valid_from: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Its definition (`job_changes.spec`), not parsed.
    pub spec: Value,
}

/// The live versions of the given jobs that a later version replaced after
/// `since`, by job and version.
pub async fn live_versions_ended_since(
    client: &impl GenericClient,
    ids: &[Uuid],
    since: DateTime<Utc>,
) -> Result<Vec<EndedVersion>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT job_id, version, valid_from, until, spec FROM (
                 SELECT c.job_id, c.version, c.valid_from, c.state, c.spec,
                        lead(c.valid_from) OVER (PARTITION BY c.job_id ORDER BY c.version) AS until
                 FROM job_changes c WHERE c.job_id = ANY($1)) v
             WHERE v.state = 'live' AND v.until IS NOT NULL AND v.until > $2
             ORDER BY job_id, version",
            &[&ids, &since],
        )
        .await?
        .iter()
        .map(|r| EndedVersion {
            job_id: r.get(0),
            version: r.get(1),
            valid_from: r.get(2),
            until: r.get(3),
            spec: r.get(4),
        })
        .collect())
}
