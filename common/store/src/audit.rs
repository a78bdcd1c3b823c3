//! The audit log (`audit_log`, migration V22): every change made through
//! the API, written in the change's own transaction, append-only (a trigger
//! refuses updates and deletes, except the retention sweep's). This module
//! is the table's only writer and reader; the jobs store's one-statement
//! creates embed [`INSERT_FOR_CREATED_JOBS`].
//!
//! A job's entry names the version the change made (`job_version`): the
//! definitions are in `job_changes`, so what changed is read from there, the
//! version before against the version made. Other resources carry their
//! change in `details`, secret values left out.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use crate::jobs::Author;

/// What was done: one variant per change the API makes, spelled
/// `resource.verb` in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    JobCreate,
    JobReplace,
    JobPatch,
    JobPause,
    JobResume,
    JobDelete,
    JobTrigger,
    JobRollback,
    /// A definition replaced by an apply of job files.
    JobApply,
    /// A backfill of the job's past slots made, or cancelled.
    JobBackfill,
    JobBackfillCancel,
    ExecutionReplay,
    CalendarPut,
    CalendarDelete,
    NamespaceCreate,
    NamespaceUpdate,
    NamespaceDelete,
    TokenCreate,
    TokenRevoke,
    SigningKeyCreate,
    SigningKeyRotate,
    SigningKeyRevoke,
    AlertChannelCreate,
    AlertChannelDelete,
    AlertRuleCreate,
    AlertRuleUpdate,
    AlertRuleDelete,
}

impl Action {
    pub const ALL: [Action; 27] = [
        Action::JobCreate,
        Action::JobReplace,
        Action::JobPatch,
        Action::JobPause,
        Action::JobResume,
        Action::JobDelete,
        Action::JobTrigger,
        Action::JobRollback,
        Action::JobApply,
        Action::JobBackfill,
        Action::JobBackfillCancel,
        Action::ExecutionReplay,
        Action::CalendarPut,
        Action::CalendarDelete,
        Action::NamespaceCreate,
        Action::NamespaceUpdate,
        Action::NamespaceDelete,
        Action::TokenCreate,
        Action::TokenRevoke,
        Action::SigningKeyCreate,
        Action::SigningKeyRotate,
        Action::SigningKeyRevoke,
        Action::AlertChannelCreate,
        Action::AlertChannelDelete,
        Action::AlertRuleCreate,
        Action::AlertRuleUpdate,
        Action::AlertRuleDelete,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Action::JobCreate => "job.create",
            Action::JobReplace => "job.replace",
            Action::JobPatch => "job.patch",
            Action::JobPause => "job.pause",
            Action::JobResume => "job.resume",
            Action::JobDelete => "job.delete",
            Action::JobTrigger => "job.trigger",
            Action::JobRollback => "job.rollback",
            Action::JobApply => "job.apply",
            Action::JobBackfill => "job.backfill",
            Action::JobBackfillCancel => "job.backfill_cancel",
            Action::ExecutionReplay => "execution.replay",
            Action::CalendarPut => "calendar.put",
            Action::CalendarDelete => "calendar.delete",
            Action::NamespaceCreate => "namespace.create",
            Action::NamespaceUpdate => "namespace.update",
            Action::NamespaceDelete => "namespace.delete",
            Action::TokenCreate => "token.create",
            Action::TokenRevoke => "token.revoke",
            Action::SigningKeyCreate => "signing_key.create",
            Action::SigningKeyRotate => "signing_key.rotate",
            Action::SigningKeyRevoke => "signing_key.revoke",
            Action::AlertChannelCreate => "alert_channel.create",
            Action::AlertChannelDelete => "alert_channel.delete",
            Action::AlertRuleCreate => "alert_rule.create",
            Action::AlertRuleUpdate => "alert_rule.update",
            Action::AlertRuleDelete => "alert_rule.delete",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// The kind of thing changed: the part before the dot.
    pub fn resource(self) -> &'static str {
        let s = self.as_str();
        &s[..s.find('.').unwrap_or(s.len())]
    }
}

/// Who acts and why, for every entry of one request.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub author: Author<'a>,
    pub request_id: &'a str,
    /// Why (a note, or the request's `X-Audit-Reason`), at most 500 characters.
    pub reason: Option<&'a str>,
}

/// One change.
#[derive(Debug, Clone)]
pub struct Entry {
    pub action: Action,
    /// The namespace changed in; `None` for the cluster itself.
    pub namespace: Option<String>,
    pub resource_id: String,
    /// A job's change: the job and the version the change made (`None`
    /// when it made none, as a manual fire).
    pub job: Option<(Uuid, Option<i64>)>,
    pub details: Option<Value>,
}

impl Entry {
    /// A change of a job that made `version`.
    pub fn job(action: Action, namespace: &str, id: Uuid, version: Option<i64>) -> Entry {
        Entry {
            action,
            namespace: Some(namespace.to_owned()),
            resource_id: id.to_string(),
            job: Some((id, version)),
            details: None,
        }
    }

    /// A change of something else, named `resource_id`.
    pub fn other(action: Action, namespace: Option<&str>, resource_id: impl Into<String>) -> Entry {
        Entry {
            action,
            namespace: namespace.map(str::to_owned),
            resource_id: resource_id.into(),
            job: None,
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Entry {
        self.details = Some(details);
        self
    }
}

/// The columns an insert writes, in the order of [`record`]'s `unnest` and
/// of [`INSERT_FOR_CREATED_JOBS`].
macro_rules! insert_columns {
    () => {
        "INSERT INTO audit_log (namespace, actor_name, actor_token, request_id, action, resource, resource_id, \
         job_id, job_version, details, reason)"
    };
}

/// SQL, the body of a data-modifying CTE: an entry per job a statement
/// just created in its CTE `created` (columns `id`, `namespace`,
/// `version`), by `$actor_name`, `$actor_token`, `$request_id`, `$reason`
/// (the placeholders are replaced with the statement's own numbers).
pub const INSERT_FOR_CREATED_JOBS: &str = concat!(
    insert_columns!(),
    " SELECT c.namespace, $actor_name, $actor_token::uuid, $request_id, 'job.create', 'job', c.id::text, c.id, \
     c.version, NULL, $reason FROM created c"
);

/// The create CTE's SQL with its placeholders numbered from `$first`
/// (actor name, token, request id, reason).
pub fn insert_for_created_jobs(first: usize) -> String {
    INSERT_FOR_CREATED_JOBS
        .replace("$actor_name", &format!("${first}"))
        .replace("$actor_token", &format!("${}", first + 1))
        .replace("$request_id", &format!("${}", first + 2))
        .replace("$reason", &format!("${}", first + 3))
}

/// Records `entries` of one request, in the caller's transaction.
pub async fn record(
    client: &impl GenericClient,
    context: &Context<'_>,
    entries: &[Entry],
) -> Result<(), tokio_postgres::Error> {
    if entries.is_empty() {
        return Ok(());
    }
    let namespaces: Vec<Option<&str>> = entries.iter().map(|e| e.namespace.as_deref()).collect();
    let actions: Vec<&str> = entries.iter().map(|e| e.action.as_str()).collect();
    let resources: Vec<&str> = entries.iter().map(|e| e.action.resource()).collect();
    let ids: Vec<&str> = entries.iter().map(|e| e.resource_id.as_str()).collect();
    let jobs: Vec<Option<Uuid>> = entries.iter().map(|e| e.job.map(|(id, _)| id)).collect();
    let versions: Vec<Option<i64>> = entries.iter().map(|e| e.job.and_then(|(_, v)| v)).collect();
    let details: Vec<Option<&Value>> = entries.iter().map(|e| e.details.as_ref()).collect();
    client
        .execute(
            concat!(
                insert_columns!(),
                " SELECT e.namespace, $6, $7, $8, e.action, e.resource, e.resource_id, e.job_id, e.job_version, \
                 e.details, $9
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::uuid[], $10::bigint[], $11::jsonb[])
                     AS e(namespace, action, resource, resource_id, job_id, job_version, details)"
            ),
            &[
                &namespaces,
                &actions,
                &resources,
                &ids,
                &jobs,
                &context.author.name,
                &context.author.token_id,
                &context.request_id,
                &context.reason,
                &versions,
                &details,
            ],
        )
        .await?;
    Ok(())
}

/// An entry as read, with a job change's definitions before and after.
#[derive(Debug, Clone)]
pub struct Record {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub namespace: Option<String>,
    pub actor_name: String,
    pub actor_token: Option<Uuid>,
    pub request_id: String,
    pub action: String,
    pub resource: String,
    pub resource_id: String,
    pub job_id: Option<Uuid>,
    pub job_version: Option<i64>,
    pub details: Option<Value>,
    pub reason: Option<String>,
    /// A job change's definition before it (the version before) and the one
    /// it made.
    pub spec_before: Option<Value>,
    pub spec_after: Option<Value>,
}

/// What a read of the log selects (newest first).
#[derive(Debug, Default)]
pub struct Filter<'a> {
    /// The caller's namespaces (`None`: every one, cluster entries included).
    pub scope: Option<&'a [String]>,
    pub namespace: Option<&'a str>,
    pub job_id: Option<Uuid>,
    /// A token's name or id.
    pub actor: Option<&'a str>,
    /// An action (`job.pause`), or a resource (`job`: every action on jobs).
    pub action: Option<&'a str>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// Entries older than this id (keyset paging).
    pub before_id: Option<i64>,
    pub limit: i64,
}

/// Entries matching `filter`, newest first.
pub async fn list(client: &impl GenericClient, filter: &Filter<'_>) -> Result<Vec<Record>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT a.*, b.spec AS spec_before, c.spec AS spec_after
             FROM audit_log a
             LEFT JOIN job_changes c ON c.job_id = a.job_id AND c.version = a.job_version
             LEFT JOIN job_changes b ON b.job_id = a.job_id AND b.version = a.job_version - 1
             WHERE ($1::text[] IS NULL OR a.namespace = ANY($1))
               AND ($2::text IS NULL OR a.namespace = $2)
               AND ($3::uuid IS NULL OR a.job_id = $3)
               AND ($4::text IS NULL OR a.actor_name = $4 OR a.actor_token::text = $4)
               AND ($5::text IS NULL OR a.action = $5 OR a.resource = $5)
               AND ($6::timestamptz IS NULL OR a.at >= $6)
               AND ($7::timestamptz IS NULL OR a.at < $7)
               AND ($8::bigint IS NULL OR a.id < $8)
             ORDER BY a.id DESC LIMIT $9",
            &[
                &filter.scope,
                &filter.namespace,
                &filter.job_id,
                &filter.actor,
                &filter.action,
                &filter.since,
                &filter.until,
                &filter.before_id,
                &filter.limit,
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Record {
            id: r.get("id"),
            at: r.get("at"),
            namespace: r.get("namespace"),
            actor_name: r.get("actor_name"),
            actor_token: r.get("actor_token"),
            request_id: r.get("request_id"),
            action: r.get("action"),
            resource: r.get("resource"),
            resource_id: r.get("resource_id"),
            job_id: r.get("job_id"),
            job_version: r.get("job_version"),
            details: r.get("details"),
            reason: r.get("reason"),
            spec_before: r.get("spec_before"),
            spec_after: r.get("spec_after"),
        })
        .collect())
}

/// One version of a job, with the entry of the change that made it.
#[derive(Debug, Clone)]
pub struct Version {
    pub version: i64,
    pub valid_from: DateTime<Utc>,
    /// `live`, `paused` or `deleted`.
    pub state: String,
    pub spec: Value,
    /// The change that made it (`None` for one the cluster made itself, as
    /// a delete after completion, or one made before the log existed).
    pub change: Option<Record>,
}

/// Every version of job `id` (oldest first), with who made each. The job
/// must be in `scope`: a deleted job's versions are read too.
pub async fn versions(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<Vec<Version>>, tokio_postgres::Error> {
    let in_scope = client
        .query_opt("SELECT 1 FROM jobs WHERE id = $1 AND ($2::text[] IS NULL OR namespace = ANY($2))", &[&id, &scope])
        .await?;
    if in_scope.is_none() {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT c.version, c.valid_from, c.state, c.spec, a.id AS audit_id
             FROM job_changes c
             LEFT JOIN LATERAL (SELECT a.id FROM audit_log a WHERE a.job_id = c.job_id AND a.job_version = c.version
                                ORDER BY a.id LIMIT 1) a ON true
             WHERE c.job_id = $1 ORDER BY c.version",
            &[&id],
        )
        .await?;
    let audit_ids: Vec<i64> = rows.iter().filter_map(|r| r.get::<_, Option<i64>>("audit_id")).collect();
    let mut changes: std::collections::HashMap<i64, Record> = std::collections::HashMap::new();
    if !audit_ids.is_empty() {
        let filter = Filter { job_id: Some(id), limit: i64::MAX, ..Filter::default() };
        for record in list(client, &filter).await? {
            changes.insert(record.id, record);
        }
    }
    Ok(Some(
        rows.iter()
            .map(|r| Version {
                version: r.get("version"),
                valid_from: r.get("valid_from"),
                state: r.get("state"),
                spec: r.get("spec"),
                change: r.get::<_, Option<i64>>("audit_id").and_then(|a| changes.remove(&a)),
            })
            .collect(),
    ))
}

/// One version's definition of job `id` (in `scope`), and the job's namespace.
pub async fn version_spec(
    client: &impl GenericClient,
    id: Uuid,
    version: i64,
    scope: Option<&[String]>,
) -> Result<Option<(Value, String)>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT c.spec, c.state, j.namespace FROM job_changes c JOIN jobs j ON j.id = c.job_id
             WHERE c.job_id = $1 AND c.version = $2 AND ($3::text[] IS NULL OR j.namespace = ANY($3))",
            &[&id, &version, &scope],
        )
        .await?;
    Ok(row.map(|r| (r.get("spec"), r.get("namespace"))))
}

/// Deletes the entries older than `before` (the retention); returns how many.
pub async fn prune(
    client: &mut deadpool_postgres::Object,
    before: DateTime<Utc>,
) -> Result<u64, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.batch_execute("SET LOCAL cronshard.audit_retention = 'on'").await?;
    let n = tx.execute("DELETE FROM audit_log WHERE at < $1", &[&before]).await?;
    tx.commit().await?;
    Ok(n)
}
