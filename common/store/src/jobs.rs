//! The `jobs` table's writes and the API's reads of it: its only home for
//! them. One column list, one typed row, and the named transitions a job
//! goes through: create (one, one in a single statement, many), lock for a
//! change, replace, pause or resume, delete. The change protocol around a
//! transition (version bump, `job_changes`, `NOTIFY`) is kept by the
//! table's triggers (migrations V1, V6, V13); the ledger's side of a change
//! (cancelling claimed slots, recording a paused period) is
//! `ledger::changes`, which the caller runs in the same transaction.
//!
//! Scoped statements take the caller's namespaces as `Option<&[String]>`:
//! `None` is every namespace.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

pub mod feed;

/// The columns of a [`StoredJob`], without the run count.
macro_rules! job_columns {
    () => {
        "id, namespace, key, version, spec, paused, created_at, updated_at, peak_fires_per_second, paused_at, \
         paused_by, paused_by_token, pause_note"
    };
}

/// A job's columns and, for a job with `max_runs`, the runs it has used
/// (NULL otherwise): once they are used up it has no next fire.
const COLUMNS: &str = concat!(job_columns!(), ", ", crate::ledger_runs_used_by_jobs_row!(), " AS runs");

/// The same for a job just created, which has run nothing. The runs
/// subquery spans every ledger partition: planned on each create, it cost
/// about 40% of the API's create throughput.
const NEW_COLUMNS: &str = concat!(job_columns!(), ", NULL::bigint AS runs");

/// SQL predicate on `jobs`: in the caller's namespaces (`$2`, NULL = every one).
const IN_SCOPE: &str = "($2::text[] IS NULL OR namespace = ANY($2))";

/// A job as stored: its definition (`spec`, as JSON) and its state.
#[derive(Debug, Clone)]
pub struct StoredJob {
    pub id: Uuid,
    pub namespace: String,
    /// The name its team chose, unique among the namespace's live jobs.
    pub key: Option<String>,
    pub version: i64,
    pub spec: Value,
    pub paused: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// What the job counts against its namespace's rate quota while live.
    pub peak_fires_per_second: f64,
    /// Who paused it, when and why (while paused).
    pub pause: PauseRecord,
    /// Runs used, for a job with `max_runs`.
    pub runs: Option<i64>,
}

/// Who paused a job, when and why, as stored (all NULL while it is live,
/// `at` and `by` NULL for a job paused before they were recorded).
#[derive(Debug, Clone, Default)]
pub struct PauseRecord {
    pub at: Option<DateTime<Utc>>,
    pub by: Option<String>,
    pub by_token: Option<Uuid>,
    pub note: Option<String>,
}

impl StoredJob {
    fn from_row(row: &Row) -> StoredJob {
        StoredJob {
            id: row.get("id"),
            namespace: row.get("namespace"),
            key: row.get("key"),
            version: row.get("version"),
            spec: row.get("spec"),
            paused: row.get("paused"),
            created_at: row.get("created_at"),
            updated_at: row.get("updated_at"),
            peak_fires_per_second: row.get("peak_fires_per_second"),
            pause: PauseRecord {
                at: row.get("paused_at"),
                by: row.get("paused_by"),
                by_token: row.get("paused_by_token"),
                note: row.get("pause_note"),
            },
            runs: row.get("runs"),
        }
    }
}

/// Who makes a change, as recorded with a pause: a token's name and, for a
/// stored token, its id.
#[derive(Debug, Clone, Copy)]
pub struct Author<'a> {
    pub name: &'a str,
    pub token_id: Option<Uuid>,
}

/// A job to create.
#[derive(Debug, Clone)]
pub struct NewJob<'a> {
    pub id: Uuid,
    pub key: Option<&'a str>,
    pub name: &'a str,
    pub spec: &'a Value,
    /// Created paused: recorded as paused by the creator.
    pub paused: bool,
    pub namespace: &'a str,
    pub peak_fires_per_second: f64,
}

/// A create in one statement (its own transaction, one round trip instead
/// of seven) for the usual case: no idempotency key, no calendars, no
/// secrets, and a namespace without quotas, so there is nothing to check or
/// lock first. `None` when the namespace has a quota or does not exist: the
/// transactional path then checks and says which. The schedulers are told
/// after the commit (`job_changes::Announcer`).
pub async fn create_unlimited(
    client: &impl GenericClient,
    job: &NewJob<'_>,
    audit: &crate::audit::Context<'_>,
) -> Result<Option<StoredJob>, tokio_postgres::Error> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "WITH defer AS MATERIALIZED ({}),
             created AS (
             INSERT INTO jobs (id, name, spec, paused, namespace, peak_fires_per_second, paused_at, paused_by, paused_by_token, key)
             SELECT $1, $2, $3, $4, n.name, $6, CASE WHEN $4 THEN now() END, CASE WHEN $4 THEN $7 END,
                    CASE WHEN $4 THEN $8::uuid END, $11
             FROM namespaces n, defer
              WHERE n.name = $5 AND n.max_jobs IS NULL AND n.max_fires_per_second IS NULL
             RETURNING {NEW_COLUMNS}),
             audit AS ({})
             SELECT * FROM created",
            crate::notify::DEFER_TO_AFTER_COMMIT_IN_STATEMENT,
            crate::audit::insert_for_created_jobs(7),
        )
    });
    let statement = client.prepare_cached(&SQL).await?;
    let row = client
        .query_opt(
            &statement,
            &[
                &job.id,
                &job.name,
                job.spec,
                &job.paused,
                &job.namespace,
                &job.peak_fires_per_second,
                &audit.author.name,
                &audit.author.token_id,
                &audit.request_id,
                &audit.reason,
                &job.key,
            ],
        )
        .await?;
    Ok(row.as_ref().map(StoredJob::from_row))
}

/// Creates jobs in the caller's transaction (which has deferred the
/// schedulers' notification to after its commit: `DEFER_TO_AFTER_COMMIT`),
/// in one statement; returns them in no particular order.
pub async fn create(
    client: &impl GenericClient,
    jobs: &[NewJob<'_>],
    audit: &crate::audit::Context<'_>,
) -> Result<Vec<StoredJob>, tokio_postgres::Error> {
    let ids: Vec<Uuid> = jobs.iter().map(|j| j.id).collect();
    let names: Vec<&str> = jobs.iter().map(|j| j.name).collect();
    let specs: Vec<&Value> = jobs.iter().map(|j| j.spec).collect();
    let paused: Vec<bool> = jobs.iter().map(|j| j.paused).collect();
    let namespaces: Vec<&str> = jobs.iter().map(|j| j.namespace).collect();
    let peaks: Vec<f64> = jobs.iter().map(|j| j.peak_fires_per_second).collect();
    let keys: Vec<Option<&str>> = jobs.iter().map(|j| j.key).collect();
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "WITH created AS (
             INSERT INTO jobs (id, name, spec, paused, namespace, peak_fires_per_second, key, paused_at, paused_by, paused_by_token)
             SELECT j.*, CASE WHEN j.paused THEN now() END, CASE WHEN j.paused THEN $7 END,
                    CASE WHEN j.paused THEN $8::uuid END
             FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::bool[], $5::text[], $6::float8[], $11::text[])
                 AS j(id, name, spec, paused, namespace, peak_fires_per_second, key)
             RETURNING {NEW_COLUMNS}),
             audit AS ({})
             SELECT * FROM created",
            crate::audit::insert_for_created_jobs(7),
        )
    });
    let rows = client
        .query(
            SQL.as_str(),
            &[
                &ids,
                &names,
                &specs,
                &paused,
                &namespaces,
                &peaks,
                &audit.author.name,
                &audit.author.token_id,
                &audit.request_id,
                &audit.reason,
                &keys,
            ],
        )
        .await?;
    Ok(rows.iter().map(StoredJob::from_row).collect())
}

/// The namespaces of `ids` (deleted jobs included).
pub async fn namespaces_of(
    client: &impl GenericClient,
    ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, String>, tokio_postgres::Error> {
    let rows = client.query("SELECT id, namespace FROM jobs WHERE id = ANY($1)", &[&ids]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// A live job of the given namespaces.
pub async fn get(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<StoredJob>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!("SELECT {COLUMNS} FROM jobs WHERE id = $1 AND deleted_at IS NULL AND {IN_SCOPE}"),
            &[&id, &scope],
        )
        .await?;
    Ok(row.as_ref().map(StoredJob::from_row))
}

/// What a listing selects.
pub struct ListFilter<'a> {
    /// Jobs with a greater id (keyset paging).
    pub after: Uuid,
    /// A `LIKE` pattern of the name (already escaped), if any.
    pub name_like: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub paused: Option<bool>,
    pub scope: Option<&'a [String]>,
    pub namespace: Option<&'a str>,
    /// A condition on `spec->'labels'` with its parameters numbered from
    /// `$8` (`labels_sql` "TRUE" for none).
    pub labels_sql: &'a str,
    pub labels_params: Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)>,
    pub limit: i64,
}

/// Live jobs by id, at most `filter.limit`.
pub async fn list(
    client: &impl GenericClient,
    filter: &ListFilter<'_>,
) -> Result<Vec<StoredJob>, tokio_postgres::Error> {
    let own: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
        &filter.after,
        &filter.name_like,
        &filter.kind,
        &filter.paused,
        &filter.limit,
        &filter.scope,
        &filter.namespace,
    ];
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        own.into_iter().chain(filter.labels_params.iter().copied()).collect();
    let rows = client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM jobs
                 WHERE deleted_at IS NULL AND id > $1
                   AND ($2::text IS NULL OR name LIKE $2)
                   AND ($3::text IS NULL OR spec->'schedule'->>'kind' = $3)
                   AND ($4::bool IS NULL OR paused = $4)
                   AND ($6::text[] IS NULL OR namespace = ANY($6))
                   AND ($7::text IS NULL OR namespace = $7)
                   AND {}
                 ORDER BY id LIMIT $5",
                filter.labels_sql
            ),
            &params,
        )
        .await?;
    Ok(rows.iter().map(StoredJob::from_row).collect())
}

/// The namespace of a live job of the given namespaces.
pub async fn namespace_of(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<String>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!("SELECT namespace FROM jobs WHERE id = $1 AND deleted_at IS NULL AND {IN_SCOPE}"),
            &[&id, &scope],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// The version and namespace of a live job of the given namespaces,
/// share-locked until the transaction ends (a manual fire: the job must not
/// change under it).
pub async fn version_for_fire(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<(i64, String)>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "SELECT version, namespace FROM jobs WHERE id = $1 AND deleted_at IS NULL AND {IN_SCOPE} FOR SHARE"
            ),
            &[&id, &scope],
        )
        .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// A job as it was before a change, locked for the change's transaction.
#[derive(Debug, Clone)]
pub struct Locked {
    pub key: Option<String>,
    pub version: i64,
    pub paused: bool,
    pub spec: Value,
    pub created_at: DateTime<Utc>,
    pub namespace: String,
    /// What the job counts against its namespace's rate quota when live.
    pub peak_fires_per_second: f64,
}

/// Locks a live job of the given namespaces for a change.
pub async fn lock_for_change(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<Locked>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {LOCKED_COLUMNS} FROM jobs WHERE id = $1 AND deleted_at IS NULL AND {IN_SCOPE} FOR UPDATE"
            ),
            &[&id, &scope],
        )
        .await?;
    Ok(row.as_ref().map(Locked::from_row))
}

const LOCKED_COLUMNS: &str = "id, key, version, paused, spec, created_at, namespace, peak_fires_per_second";

impl Locked {
    fn from_row(r: &Row) -> Locked {
        Locked {
            key: r.get("key"),
            version: r.get("version"),
            paused: r.get("paused"),
            spec: r.get("spec"),
            created_at: r.get("created_at"),
            namespace: r.get("namespace"),
            peak_fires_per_second: r.get("peak_fires_per_second"),
        }
    }
}

/// Locks, in id order, the live jobs named by (namespace, key) pairs, of
/// the given namespaces: an apply's existing jobs.
pub async fn lock_by_keys(
    client: &impl GenericClient,
    names: &[(&str, &str)],
    scope: Option<&[String]>,
) -> Result<Vec<(Uuid, Locked)>, tokio_postgres::Error> {
    let namespaces: Vec<&str> = names.iter().map(|n| n.0).collect();
    let keys: Vec<&str> = names.iter().map(|n| n.1).collect();
    let rows = client
        .query(
            &format!(
                "SELECT {LOCKED_COLUMNS} FROM jobs
                 WHERE (namespace, key) IN (SELECT * FROM unnest($1::text[], $3::text[]))
                   AND deleted_at IS NULL AND {IN_SCOPE}
                 ORDER BY id FOR UPDATE"
            ),
            &[&namespaces, &scope, &keys],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get("id"), Locked::from_row(r))).collect())
}

/// A job a key names in the given namespaces (and `namespace`, if given).
#[derive(Debug, Clone)]
pub struct KeyMatch {
    pub id: Uuid,
    pub namespace: String,
    pub live: bool,
}

/// The jobs with `key` in the given namespaces (and `namespace`, if
/// given): the live ones, or when none is, the most recently deleted one.
pub async fn by_key(
    client: &impl GenericClient,
    key: &str,
    namespace: Option<&str>,
    scope: Option<&[String]>,
) -> Result<Vec<KeyMatch>, tokio_postgres::Error> {
    let rows = client
        .query(
            &format!(
                "SELECT id, namespace, deleted_at IS NULL AS live FROM jobs
                 WHERE key = $1 AND {IN_SCOPE} AND ($3::text IS NULL OR namespace = $3)
                 ORDER BY deleted_at DESC NULLS FIRST LIMIT 20"
            ),
            &[&key, &scope, &namespace],
        )
        .await?;
    let found: Vec<KeyMatch> =
        rows.iter().map(|r| KeyMatch { id: r.get(0), namespace: r.get(1), live: r.get(2) }).collect();
    let live: Vec<KeyMatch> = found.iter().filter(|m| m.live).cloned().collect();
    Ok(if live.is_empty() { found.into_iter().take(1).collect() } else { live })
}

/// The keys and names of jobs, for listings that show which job a row is
/// about.
#[derive(Debug, Default)]
pub struct Names(std::collections::HashMap<Uuid, (Option<String>, String)>);

impl Names {
    /// Job `id`'s key and name (both `None` for a job not read).
    pub fn of(&self, id: Uuid) -> (Option<String>, Option<String>) {
        match self.0.get(&id) {
            Some((key, name)) => (key.clone(), Some(name.clone())),
            None => (None, None),
        }
    }
}

/// The keys and names of the given jobs (deleted ones included).
pub async fn names_of(client: &impl GenericClient, ids: &[Uuid]) -> Result<Names, tokio_postgres::Error> {
    let rows = client.query("SELECT id, key, name FROM jobs WHERE id = ANY($1)", &[&ids]).await?;
    Ok(Names(rows.iter().map(|r| (r.get(0), (r.get(1), r.get(2)))).collect()))
}

/// Replaces a locked job's definition (a new version) and sets its `key`
/// (the caller keeps a set key as it is); its state is the caller's to keep
/// (`spec.paused` must equal the stored `paused`).
pub async fn replace(
    client: &impl GenericClient,
    id: Uuid,
    key: Option<&str>,
    name: &str,
    spec: &Value,
    peak_fires_per_second: f64,
) -> Result<StoredJob, tokio_postgres::Error> {
    let row = client
        .query_one(
            &format!(
                "UPDATE jobs SET name = $2, spec = $3, peak_fires_per_second = $4, key = $5, version = version + 1
                 WHERE id = $1 RETURNING {COLUMNS}"
            ),
            &[&id, &name, spec, &peak_fires_per_second, &key],
        )
        .await?;
    Ok(StoredJob::from_row(&row))
}

/// Pauses (recording who, when and why) or resumes (clearing that) a
/// locked job: a new version.
pub async fn set_paused(
    client: &impl GenericClient,
    id: Uuid,
    paused: bool,
    author: Author<'_>,
    note: Option<&str>,
) -> Result<StoredJob, tokio_postgres::Error> {
    let row = client
        .query_one(
            &format!(
                "UPDATE jobs SET paused = $2, spec = jsonb_set(spec, '{{paused}}', to_jsonb($2::boolean)),
                        version = version + 1,
                        paused_at = CASE WHEN $2 THEN now() END, paused_by = CASE WHEN $2 THEN $3 END,
                        paused_by_token = CASE WHEN $2 THEN $4::uuid END, pause_note = CASE WHEN $2 THEN $5 END
                 WHERE id = $1 RETURNING {COLUMNS}"
            ),
            &[&id, &paused, &author.name, &author.token_id, &note],
        )
        .await?;
    Ok(StoredJob::from_row(&row))
}

/// The body of a data-modifying CTE that deletes the one-time jobs of the
/// outcomes a statement just recorded in its CTE `finished` (columns
/// `job_id`, `status`, `delete_job`): those whose message asked for it
/// (`after_completion: delete`), whose outcome is final, and whose current
/// definition still asks for it. Only the flagged rows look the job up.
pub const DELETE_AFTER_COMPLETION: &str = "UPDATE jobs SET deleted_at = now(), version = version + 1
    WHERE id IN (SELECT job_id FROM finished WHERE delete_job AND status IN ('succeeded', 'failed'))
      AND deleted_at IS NULL AND spec->>'after_completion' = 'delete'";

/// Deletes a live job of the given namespaces (a tombstone, a new
/// version); returns its namespace and that version, `None` when there is
/// no such job.
pub async fn delete(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<(String, i64)>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "UPDATE jobs SET deleted_at = now(), version = version + 1
                 WHERE id = $1 AND deleted_at IS NULL AND {IN_SCOPE} RETURNING namespace, version"
            ),
            &[&id, &scope],
        )
        .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Where a stored definition lives: a job's current one, or one version of
/// it in `job_changes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefinitionOf {
    Job,
    Version(i64),
}

/// Every stored definition (current and versions) holding a secret header
/// value not in `sealed_prefix` form: (job, which, namespace, spec).
pub async fn definitions_with_secrets_in_clear(
    client: &impl GenericClient,
    sealed_prefix: &str,
) -> Result<Vec<(Uuid, DefinitionOf, String, Value)>, tokio_postgres::Error> {
    let in_clear = "jsonb_typeof(spec->'target'->'secret_headers') = 'object'
        AND EXISTS (SELECT 1 FROM jsonb_each_text(spec->'target'->'secret_headers') h WHERE left(h.value, length($1)) <> $1)";
    let rows = client
        .query(
            &format!(
                "SELECT id, NULL::bigint, namespace, spec FROM jobs WHERE {in_clear}
                 UNION ALL
                 SELECT c.job_id, c.version, coalesce(j.namespace, 'default'), c.spec
                 FROM job_changes c LEFT JOIN jobs j ON j.id = c.job_id
                 WHERE {}",
                in_clear.replace("spec->", "c.spec->")
            ),
            &[&sealed_prefix],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let which = r.get::<_, Option<i64>>(1).map_or(DefinitionOf::Job, DefinitionOf::Version);
            (r.get(0), which, r.get(2), r.get(3))
        })
        .collect())
}

/// Rewrites one stored definition in place: no new version, and for the
/// job's current one without the table's triggers (so no version's
/// `updated_at`, the instant it came into force, moves, and no scheduler is
/// woken). Only for a change of form that changes nothing a job does
/// (sealing secret values an older version stored in clear). Call in a
/// transaction: the triggers are off until the statement after the write.
pub async fn rewrite_definition_in_place(
    client: &impl GenericClient,
    id: Uuid,
    which: DefinitionOf,
    spec: &Value,
) -> Result<(), tokio_postgres::Error> {
    match which {
        DefinitionOf::Job => {
            client.batch_execute("ALTER TABLE jobs DISABLE TRIGGER USER").await?;
            client.execute("UPDATE jobs SET spec = $2 WHERE id = $1", &[&id, spec]).await?;
            client.batch_execute("ALTER TABLE jobs ENABLE TRIGGER USER").await?;
        }
        DefinitionOf::Version(version) => {
            client
                .execute("UPDATE job_changes SET spec = $3 WHERE job_id = $1 AND version = $2", &[&id, &version, spec])
                .await?;
        }
    }
    Ok(())
}

/// SQL columns on a `namespaces` row aliased `n`: its live jobs (`jobs`)
/// and the sum of their peak fire rates while not paused
/// (`peak_fires_per_second`), what its quotas are checked against.
pub const NAMESPACE_USAGE_COLUMNS: &str =
    "(SELECT count(*) FROM jobs j WHERE j.namespace = n.name AND j.deleted_at IS NULL) AS jobs,
    (SELECT coalesce(sum(j.peak_fires_per_second), 0) FROM jobs j
     WHERE j.namespace = n.name AND j.deleted_at IS NULL AND NOT j.paused) AS peak_fires_per_second";

/// How many of `ids` (repeats counted) belong to each namespace.
pub async fn count_by_namespace(
    client: &impl GenericClient,
    ids: &[Uuid],
) -> Result<std::collections::BTreeMap<String, u64>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT j.namespace, count(*) FROM unnest($1::uuid[]) AS r(id) JOIN jobs j ON j.id = r.id GROUP BY 1",
            &[&ids],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
        .collect())
}

/// The paused period of job `id` that ends with version `paused_version`:
/// from the instant its first paused version came into force, until the
/// job's last change (the resume being made). `None` when that version was
/// not paused. The version the current change makes is already in
/// `job_changes` (its trigger wrote it), so only the versions up to
/// `paused_version` are looked at.
pub async fn paused_period(
    client: &impl GenericClient,
    id: Uuid,
    paused_version: i64,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, tokio_postgres::Error> {
    let period = client
        .query_one(
            "SELECT (SELECT c.valid_from FROM job_changes c
                     WHERE c.job_id = $1 AND c.version <= $2 AND c.version > coalesce(
                         (SELECT max(p.version) FROM job_changes p
                          WHERE p.job_id = $1 AND p.version <= $2 AND p.state <> 'paused'), 0)
                     ORDER BY c.version LIMIT 1),
                    (SELECT updated_at FROM jobs WHERE id = $1)",
            &[&id, &paused_version],
        )
        .await?;
    Ok(period.get::<_, Option<DateTime<Utc>>>(0).map(|from| (from, period.get(1))))
}

/// Jobs of a namespace, deleted ones included (their history stays under it).
pub async fn count_in_namespace(client: &impl GenericClient, namespace: &str) -> Result<i64, tokio_postgres::Error> {
    Ok(client.query_one("SELECT count(*) FROM jobs WHERE namespace = $1", &[&namespace]).await?.get(0))
}

/// Whether job `id` exists in the given namespaces, deleted or not (a
/// deleted job's executions stay readable).
pub async fn exists(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<bool, tokio_postgres::Error> {
    Ok(client.query_opt(&format!("SELECT 1 FROM jobs WHERE id = $1 AND {IN_SCOPE}"), &[&id, &scope]).await?.is_some())
}

/// Which of `ids` exist in the given namespaces, deleted or not.
pub async fn existing(
    client: &impl GenericClient,
    ids: &[Uuid],
    scope: Option<&[String]>,
) -> Result<Vec<Uuid>, tokio_postgres::Error> {
    let rows = client.query(&format!("SELECT id FROM jobs WHERE id = ANY($1) AND {IN_SCOPE}"), &[&ids, &scope]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A job whatever its state, deleted included (its slots stay explainable).
pub async fn get_any(client: &impl GenericClient, id: Uuid) -> Result<Option<AnyJob>, tokio_postgres::Error> {
    let row = client
        .query_opt("SELECT spec, paused, created_at, updated_at, deleted_at FROM jobs WHERE id = $1", &[&id])
        .await?;
    Ok(row.map(|r| AnyJob {
        spec: r.get(0),
        paused: r.get(1),
        created_at: r.get(2),
        updated_at: r.get(3),
        deleted_at: r.get(4),
    }))
}

/// What [`get_any`] reads of a job.
#[derive(Debug, Clone)]
pub struct AnyJob {
    pub spec: Value,
    pub paused: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

/// How a bulk action locks the jobs it matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkLock {
    /// A manual fire: the jobs must not change under it.
    Share,
    /// A change of each job.
    Update,
}

/// A live job a bulk action matched.
#[derive(Debug, Clone)]
pub struct Matched {
    pub id: Uuid,
    pub key: Option<String>,
    pub paused: bool,
    pub namespace: String,
}

/// Which jobs a bulk action may match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matching {
    Any,
    /// Only jobs with a key (what an apply's prune may delete).
    Keyed,
}

/// Locks, in id order, the live jobs of the given namespaces (and
/// `namespace`, if given) whose labels meet `labels_sql` (parameters from
/// `$3`), at most `limit`: two bulk calls over overlapping jobs wait for
/// each other instead of deadlocking.
#[allow(clippy::too_many_arguments)]
pub async fn lock_matching(
    client: &impl GenericClient,
    scope: Option<&[String]>,
    namespace: Option<&str>,
    matching: Matching,
    labels_sql: &str,
    labels_params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    limit: usize,
    lock: BulkLock,
) -> Result<Vec<Matched>, tokio_postgres::Error> {
    let lock = match lock {
        BulkLock::Share => "FOR SHARE",
        BulkLock::Update => "FOR UPDATE",
    };
    let keyed = match matching {
        Matching::Any => "TRUE",
        Matching::Keyed => "key IS NOT NULL",
    };
    let own: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&scope, &namespace];
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        own.into_iter().chain(labels_params.iter().copied()).collect();
    let rows = client
        .query(
            &format!(
                "SELECT id, paused, namespace, key FROM jobs
                 WHERE deleted_at IS NULL
                   AND ($1::text[] IS NULL OR namespace = ANY($1))
                   AND ($2::text IS NULL OR namespace = $2)
                   AND {keyed}
                   AND {labels_sql}
                 ORDER BY id LIMIT {limit} {lock}"
            ),
            &params,
        )
        .await?;
    Ok(rows.iter().map(|r| Matched { id: r.get(0), paused: r.get(1), namespace: r.get(2), key: r.get(3) }).collect())
}
