//! Alerts (migration V22): a namespace's notification channels and rules,
//! the rules' evaluation, the incidents it opens and resolves, and the
//! outbox of notifications. The only home of those tables' SQL.
//!
//! **Exactly one notice per incident, through node loss.** A rule is
//! evaluated in one transaction that holds its row lock (`FOR UPDATE SKIP
//! LOCKED`: every scheduler runs the loop, one evaluates a rule at a time),
//! reads the slots since its cursor, and writes the cursor, the incident
//! and its notifications together; a node that dies mid-evaluation leaves
//! nothing, and the next evaluation starts from the same cursor. At most
//! one incident is open per rule and job (a unique index), and at most one
//! notification of each kind per incident and channel (a unique key). A
//! worker sends a notification while it holds the row's lock and marks it
//! in the same transaction; a worker that dies mid-send leaves the row
//! pending for another, which sends it with the same `webhook-id` (the
//! notification's id), so a receiver that saw the first can tell.

use chrono::{DateTime, TimeDelta, Utc};
use deadpool_postgres::GenericClient;
use serde_json::{Value, json};
use uuid::Uuid;

use domain::alert::{Condition, JobWatch, JudgedSlot, Verdict};

/// The associated data a channel's address is sealed under: it opens only
/// as that channel's.
pub fn channel_url_aad(namespace: &str, id: Uuid) -> Vec<u8> {
    format!("cronshard-alert-channel:v1:{namespace}:{id}").into_bytes()
}

/// Where a channel's notices go, and in which form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// JSON, signed with the namespace's signing keys like a delivery.
    Webhook,
    /// A Slack-compatible incoming webhook: `{"text": …}`.
    Slack,
}

impl ChannelKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Webhook => "webhook",
            ChannelKind::Slack => "slack",
        }
    }

    pub fn parse(s: &str) -> Option<ChannelKind> {
        [ChannelKind::Webhook, ChannelKind::Slack].into_iter().find(|k| k.as_str() == s)
    }
}

/// A notice: the incident opened, or it resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    Firing,
    Resolved,
}

impl NoticeKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Firing => "firing",
            NoticeKind::Resolved => "resolved",
        }
    }

    pub fn parse(s: &str) -> Option<NoticeKind> {
        [NoticeKind::Firing, NoticeKind::Resolved].into_iter().find(|k| k.as_str() == s)
    }
}

/// A channel as stored (its address sealed; `url_shown` is for people).
#[derive(Debug, Clone)]
pub struct Channel {
    pub id: Uuid,
    pub namespace: String,
    pub name: String,
    pub kind: ChannelKind,
    pub url_shown: String,
    pub max_per_minute: i32,
    pub created_at: DateTime<Utc>,
}

fn channel_of(r: &tokio_postgres::Row) -> Channel {
    Channel {
        id: r.get("id"),
        namespace: r.get("namespace"),
        name: r.get("name"),
        kind: ChannelKind::parse(r.get("kind")).unwrap_or(ChannelKind::Webhook),
        url_shown: r.get("url_shown"),
        max_per_minute: r.get("max_per_minute"),
        created_at: r.get("created_at"),
    }
}

const CHANNEL_COLUMNS: &str = "id, namespace, name, kind, url_shown, max_per_minute, created_at";

/// A channel to create (`url_sealed`: its address sealed by the caller).
pub struct NewChannel<'a> {
    pub id: Uuid,
    pub namespace: &'a str,
    pub name: &'a str,
    pub kind: ChannelKind,
    pub url_sealed: &'a str,
    pub url_shown: &'a str,
    pub max_per_minute: i32,
}

/// Creates a channel; `None` when the namespace already has one so named.
pub async fn create_channel(
    client: &impl GenericClient,
    c: &NewChannel<'_>,
) -> Result<Option<Channel>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "INSERT INTO alert_channels (id, namespace, name, kind, url_sealed, url_shown, max_per_minute)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (namespace, name) DO NOTHING RETURNING {CHANNEL_COLUMNS}"
            ),
            &[&c.id, &c.namespace, &c.name, &c.kind.as_str(), &c.url_sealed, &c.url_shown, &c.max_per_minute],
        )
        .await?;
    Ok(row.as_ref().map(channel_of))
}

/// The channels of the namespaces in `scope` (`None`: every one).
pub async fn channels(
    client: &impl GenericClient,
    scope: Option<&[String]>,
) -> Result<Vec<Channel>, tokio_postgres::Error> {
    let rows = client
        .query(
            &format!(
                "SELECT {CHANNEL_COLUMNS} FROM alert_channels WHERE $1::text[] IS NULL OR namespace = ANY($1)
                 ORDER BY namespace, name"
            ),
            &[&scope],
        )
        .await?;
    Ok(rows.iter().map(channel_of).collect())
}

/// The channels of `namespace` named in `ids` that exist.
pub async fn existing_channels(
    client: &impl GenericClient,
    namespace: &str,
    ids: &[Uuid],
) -> Result<Vec<Uuid>, tokio_postgres::Error> {
    let rows = client
        .query("SELECT id FROM alert_channels WHERE namespace = $1 AND id = ANY($2)", &[&namespace, &ids])
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Why a channel could not be deleted.
#[derive(Debug)]
pub enum DeleteChannel {
    Deleted(Channel),
    NotFound,
    /// Rules still send to it (their names).
    InUse(Vec<String>),
}

/// Deletes a channel of `scope` no rule sends to.
pub async fn delete_channel(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<DeleteChannel, tokio_postgres::Error> {
    let users = client.query("SELECT name FROM alert_rules WHERE $1 = ANY(channels) ORDER BY name", &[&id]).await?;
    let row = client
        .query_opt(
            &format!("SELECT {CHANNEL_COLUMNS} FROM alert_channels WHERE id = $1 AND ($2::text[] IS NULL OR namespace = ANY($2))"),
            &[&id, &scope],
        )
        .await?;
    let Some(row) = row else { return Ok(DeleteChannel::NotFound) };
    if !users.is_empty() {
        return Ok(DeleteChannel::InUse(users.iter().map(|r| r.get(0)).collect()));
    }
    client.execute("DELETE FROM alert_channels WHERE id = $1", &[&id]).await?;
    Ok(DeleteChannel::Deleted(channel_of(&row)))
}

/// A rule, as stored and as the API shows it.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = AlertRule))]
pub struct Rule {
    pub id: Uuid,
    pub namespace: String,
    pub name: String,
    /// The jobs watched, by id (or `selector`).
    #[serde(rename = "jobs")]
    pub job_ids: Option<Vec<Uuid>>,
    /// The jobs watched, by label selector (or `jobs`).
    pub selector: Option<String>,
    pub condition: Condition,
    /// `consecutive_failures`: failures in a row; `late`: milliseconds
    /// late; `silent`: milliseconds without a success. None otherwise.
    pub threshold: Option<i64>,
    pub channels: Vec<Uuid>,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
}

const RULE_COLUMNS: &str =
    "id, namespace, name, job_ids, selector, condition, threshold, channels, enabled, created_at";

fn rule_of(r: &tokio_postgres::Row) -> Rule {
    Rule {
        id: r.get("id"),
        namespace: r.get("namespace"),
        name: r.get("name"),
        job_ids: r.get("job_ids"),
        selector: r.get("selector"),
        condition: Condition::parse(r.get("condition")).unwrap_or(Condition::Failed),
        threshold: r.get("threshold"),
        channels: r.get("channels"),
        enabled: r.get("enabled"),
        created_at: r.get("created_at"),
    }
}

/// Creates `rule`; `None` when its namespace has one so named.
pub async fn create_rule(client: &impl GenericClient, rule: &Rule) -> Result<Option<Rule>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "INSERT INTO alert_rules (id, namespace, name, job_ids, selector, condition, threshold, channels, enabled)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (namespace, name) DO NOTHING
                 RETURNING {RULE_COLUMNS}"
            ),
            &[
                &rule.id,
                &rule.namespace,
                &rule.name,
                &rule.job_ids,
                &rule.selector,
                &rule.condition.as_str(),
                &rule.threshold,
                &rule.channels,
                &rule.enabled,
            ],
        )
        .await?;
    Ok(row.as_ref().map(rule_of))
}

/// The rules of `scope`.
pub async fn rules(client: &impl GenericClient, scope: Option<&[String]>) -> Result<Vec<Rule>, tokio_postgres::Error> {
    let rows = client
        .query(
            &format!(
                "SELECT {RULE_COLUMNS} FROM alert_rules WHERE $1::text[] IS NULL OR namespace = ANY($1) ORDER BY namespace, name"
            ),
            &[&scope],
        )
        .await?;
    Ok(rows.iter().map(rule_of).collect())
}

/// One rule of `scope`, locked for a change.
pub async fn lock_rule(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<Rule>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {RULE_COLUMNS} FROM alert_rules WHERE id = $1 AND ($2::text[] IS NULL OR namespace = ANY($2)) FOR UPDATE"
            ),
            &[&id, &scope],
        )
        .await?;
    Ok(row.as_ref().map(rule_of))
}

/// Switches a locked rule on or off, or changes its channels. A rule
/// switched off resolves nothing: its open incidents stay open until it
/// is on again and judges them.
pub async fn update_rule(
    client: &impl GenericClient,
    id: Uuid,
    enabled: bool,
    channels: &[Uuid],
) -> Result<Rule, tokio_postgres::Error> {
    let row = client
        .query_one(
            &format!("UPDATE alert_rules SET enabled = $2, channels = $3 WHERE id = $1 RETURNING {RULE_COLUMNS}"),
            &[&id, &enabled, &channels],
        )
        .await?;
    Ok(rule_of(&row))
}

/// Deletes a rule of `scope` (its state and incidents with it).
pub async fn delete_rule(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<Rule>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "DELETE FROM alert_rules WHERE id = $1 AND ($2::text[] IS NULL OR namespace = ANY($2)) RETURNING {RULE_COLUMNS}"
            ),
            &[&id, &scope],
        )
        .await?;
    Ok(row.as_ref().map(rule_of))
}

/// A notification of an incident, as recorded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Notification {
    pub id: Uuid,
    pub channel_id: Uuid,
    pub kind: NoticeKind,
    /// `pending`, `delivered` or `failed` (gave up).
    pub state: String,
    pub attempts: i32,
    pub created_at: DateTime<Utc>,
    pub next_attempt_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
}

/// An incident, with its notifications.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Incident {
    pub id: Uuid,
    pub rule_id: Uuid,
    pub rule_name: String,
    pub condition: Condition,
    pub job_id: Uuid,
    pub job_name: Option<String>,
    pub namespace: String,
    pub opened_at: DateTime<Utc>,
    pub opened_by: String,
    pub summary: String,
    pub slots: Value,
    pub resolved_at: Option<DateTime<Utc>>,
    pub resolution: Option<String>,
    pub notifications: Vec<Notification>,
}

/// What an incident listing selects (newest first).
#[derive(Debug, Default)]
pub struct IncidentFilter<'a> {
    pub scope: Option<&'a [String]>,
    pub job_id: Option<Uuid>,
    pub rule_id: Option<Uuid>,
    /// Only open (true) or resolved (false) ones.
    pub open: Option<bool>,
    pub limit: i64,
}

/// Incidents matching `filter`, newest first, with their notifications.
pub async fn incidents(
    client: &impl GenericClient,
    f: &IncidentFilter<'_>,
) -> Result<Vec<Incident>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT i.*, r.name AS rule_name, r.condition, j.name AS job_name,
                    coalesce((SELECT json_agg(json_build_object('id', n.id, 'channel_id', n.channel_id, 'kind', n.kind,
                        'state', n.state, 'attempts', n.attempts, 'created_at', n.created_at,
                        'next_attempt_at', n.next_attempt_at, 'delivered_at', n.delivered_at,
                        'last_status', n.last_status, 'last_error', n.last_error) ORDER BY n.created_at, n.kind)
                      FROM alert_notifications n WHERE n.incident_id = i.id), '[]')::jsonb AS notifications
             FROM alert_incidents i JOIN alert_rules r ON r.id = i.rule_id LEFT JOIN jobs j ON j.id = i.job_id
             WHERE ($1::text[] IS NULL OR i.namespace = ANY($1)) AND ($2::uuid IS NULL OR i.job_id = $2)
               AND ($3::uuid IS NULL OR i.rule_id = $3) AND ($4::bool IS NULL OR (i.resolved_at IS NULL) = $4)
             ORDER BY i.opened_at DESC, i.id LIMIT $5",
            &[&f.scope, &f.job_id, &f.rule_id, &f.open, &f.limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let notifications: Value = r.get("notifications");
            Incident {
                id: r.get("id"),
                rule_id: r.get("rule_id"),
                rule_name: r.get("rule_name"),
                condition: Condition::parse(r.get("condition")).unwrap_or(Condition::Failed),
                job_id: r.get("job_id"),
                job_name: r.get("job_name"),
                namespace: r.get("namespace"),
                opened_at: r.get("opened_at"),
                opened_by: r.get("opened_by"),
                summary: r.get("summary"),
                slots: r.get("slots"),
                resolved_at: r.get("resolved_at"),
                resolution: r.get("resolution"),
                notifications: notifications
                    .as_array()
                    .map(|a| a.iter().filter_map(notification_of_json).collect())
                    .unwrap_or_default(),
            }
        })
        .collect())
}

fn notification_of_json(v: &Value) -> Option<Notification> {
    let time = |k: &str| v.get(k).and_then(Value::as_str).and_then(|s| s.parse::<DateTime<Utc>>().ok());
    Some(Notification {
        id: v.get("id")?.as_str()?.parse().ok()?,
        channel_id: v.get("channel_id")?.as_str()?.parse().ok()?,
        kind: NoticeKind::parse(v.get("kind")?.as_str()?)?,
        state: v.get("state")?.as_str()?.to_owned(),
        attempts: v.get("attempts")?.as_i64()? as i32,
        created_at: time("created_at")?,
        next_attempt_at: time("next_attempt_at")?,
        delivered_at: time("delivered_at"),
        last_status: v.get("last_status").and_then(Value::as_i64).map(|s| s as i32),
        last_error: v.get("last_error").and_then(Value::as_str).map(str::to_owned),
    })
}

// ---------------------------------------------------------------------------
// Evaluation

/// Most jobs one rule watches (a selector matching more watches the first
/// ones by id, and says so in the log).
pub const JOBS_PER_RULE_MAX: i64 = 10_000;
/// Most slots of one job judged per evaluation (the rest at the next).
const SLOTS_PER_JOB_PER_EVALUATION: i64 = 500;

/// Evaluates the rules that are due, one transaction each, until none is
/// left that another node is not evaluating. Returns how many were.
pub async fn evaluate_due(
    pool: &deadpool_postgres::Pool,
    node_id: &str,
    every: std::time::Duration,
) -> anyhow::Result<usize> {
    let mut evaluated = 0;
    loop {
        let mut client = pool.get().await?;
        let tx = client.transaction().await?;
        let row = tx
            .query_opt(
                &format!(
                    "SELECT {RULE_COLUMNS} FROM alert_rules WHERE enabled AND next_evaluation_at <= now()
                     ORDER BY next_evaluation_at LIMIT 1 FOR UPDATE SKIP LOCKED"
                ),
                &[],
            )
            .await?;
        let Some(row) = row else { return Ok(evaluated) };
        let rule = rule_of(&row);
        evaluate(&tx, &rule, node_id).await?;
        let next = TimeDelta::from_std(every).unwrap_or(TimeDelta::seconds(5));
        tx.execute(
            "UPDATE alert_rules SET next_evaluation_at = now() + make_interval(secs => $2) WHERE id = $1",
            &[&rule.id, &pg_interval(next)],
        )
        .await?;
        tx.commit().await?;
        evaluated += 1;
    }
}

fn pg_interval(d: TimeDelta) -> f64 {
    d.num_milliseconds() as f64 / 1000.0
}

/// A job a rule watches, as the evaluation reads it.
struct Watched {
    id: Uuid,
    name: String,
    jitter_ms: i64,
    created_at: DateTime<Utc>,
}

/// Evaluates one rule (locked by the caller's transaction) at the
/// transaction's instant.
async fn evaluate(tx: &impl GenericClient, rule: &Rule, node_id: &str) -> anyhow::Result<()> {
    let now: DateTime<Utc> = tx.query_one("SELECT now()", &[]).await?.get(0);
    let watched = watched_jobs(tx, rule).await?;
    let states = tx
        .query(
            "SELECT job_id, watching_since, judged_through, consecutive_failures, last_success_at
             FROM alert_job_state WHERE rule_id = $1",
            &[&rule.id],
        )
        .await?;
    let mut watches: std::collections::HashMap<Uuid, JobWatch> = states
        .iter()
        .map(|r| {
            (
                r.get("job_id"),
                JobWatch {
                    watching_since: r.get("watching_since"),
                    judged_through: r.get("judged_through"),
                    consecutive_failures: r.get("consecutive_failures"),
                    last_success_at: r.get("last_success_at"),
                },
            )
        })
        .collect();
    let open: std::collections::HashMap<Uuid, Uuid> = tx
        .query("SELECT job_id, id FROM alert_incidents WHERE rule_id = $1 AND resolved_at IS NULL", &[&rule.id])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    // Jobs the rule no longer watches (deleted, relabelled, or taken off
    // its list): their incidents resolve and their state goes.
    let watched_ids: std::collections::HashSet<Uuid> = watched.iter().map(|w| w.id).collect();
    let gone: Vec<Uuid> = watches
        .keys()
        .chain(open.keys())
        .filter(|id| !watched_ids.contains(id))
        .copied()
        .collect::<std::collections::BTreeSet<Uuid>>()
        .into_iter()
        .collect();
    for job in &gone {
        if let Some(incident) = open.get(job) {
            resolve(tx, rule, *incident, "the rule no longer watches the job (deleted, or no longer selected)").await?;
        }
        watches.remove(job);
    }
    if !gone.is_empty() {
        tx.execute("DELETE FROM alert_job_state WHERE rule_id = $1 AND job_id = ANY($2)", &[&rule.id, &gone]).await?;
    }
    // A job the rule has not judged yet is watched from when the rule was
    // made (or the job, if later): not from the first evaluation, which
    // may come after the job's first slots (an evaluation interval, or an
    // outage of every scheduler).
    let watch_from = |w: &Watched| rule.created_at.max(w.created_at).min(now);
    let cursors: Vec<(Uuid, DateTime<Utc>, i64)> = watched
        .iter()
        .map(|w| (w.id, watches.get(&w.id).map_or_else(|| watch_from(w), |s| s.judged_through), w.jitter_ms))
        .collect();
    let slots = crate::ledger::stats::slots_to_judge(tx, &cursors, now, SLOTS_PER_JOB_PER_EVALUATION).await?;
    let mut by_job: std::collections::HashMap<Uuid, Vec<JudgedSlot>> = std::collections::HashMap::new();
    for (job, slot) in slots {
        by_job.entry(job).or_default().push(slot);
    }
    let mut carried: Vec<(Uuid, JobWatch)> = Vec::with_capacity(watched.len());
    for job in &watched {
        let watch = watches.remove(&job.id).unwrap_or_else(|| JobWatch {
            watching_since: watch_from(job),
            judged_through: watch_from(job),
            consecutive_failures: 0,
            last_success_at: None,
        });
        let slots = by_job.remove(&job.id).unwrap_or_default();
        let incident = open.get(&job.id).copied();
        let (watch, verdict) =
            domain::alert::judge(rule.condition, rule.threshold, watch, &slots, incident.is_some(), now);
        match (verdict, incident) {
            (Verdict::Open { summary, slots }, None) => {
                open_incident(tx, rule, job, node_id, &summary, &slots).await?;
            }
            (Verdict::Continue { slots }, Some(incident)) => {
                tx.execute(
                    "UPDATE alert_incidents SET slots = (slots || $2::jsonb)
                     WHERE id = $1 AND jsonb_array_length(slots) < $3",
                    &[&incident, &slots_json(&slots), &(domain::alert::INCIDENT_SLOTS_MAX as i32)],
                )
                .await?;
            }
            (Verdict::Resolve { resolution }, Some(incident)) => resolve(tx, rule, incident, &resolution).await?,
            _ => {}
        }
        carried.push((job.id, watch));
    }
    save_watches(tx, rule.id, &carried).await?;
    Ok(())
}

/// The jobs `rule` watches now: its listed ones that are live, or the live
/// ones its selector matches (at most `JOBS_PER_RULE_MAX`).
async fn watched_jobs(tx: &impl GenericClient, rule: &Rule) -> anyhow::Result<Vec<Watched>> {
    let columns = "id, name, coalesce((spec->>'jitter_ms')::bigint, 0) AS jitter_ms, created_at";
    let rows = match (&rule.job_ids, &rule.selector) {
        (Some(ids), _) => {
            tx.query(
                &format!("SELECT {columns} FROM jobs WHERE id = ANY($1) AND namespace = $2 AND deleted_at IS NULL"),
                &[ids, &rule.namespace],
            )
            .await?
        }
        (None, Some(text)) => {
            let selector = domain::labels::Selector::parse(text).map_err(|e| anyhow::anyhow!("{e}"))?;
            let predicate = crate::selector::Predicate::new(&selector, 3);
            let sql = format!(
                "SELECT {columns} FROM jobs WHERE namespace = $1 AND deleted_at IS NULL AND {} ORDER BY id LIMIT $2",
                predicate.sql
            );
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&rule.namespace, &JOBS_PER_RULE_MAX];
            params.extend(predicate.params());
            let rows = tx.query(&sql, &params).await?;
            if rows.len() as i64 == JOBS_PER_RULE_MAX {
                tracing::warn!(rule.id = %rule.id, "the rule's selector matches more jobs than a rule watches; the first {JOBS_PER_RULE_MAX} by id are watched");
            }
            rows
        }
        (None, None) => Vec::new(),
    };
    Ok(rows
        .iter()
        .map(|r| Watched {
            id: r.get("id"),
            name: r.get("name"),
            jitter_ms: r.get("jitter_ms"),
            created_at: r.get("created_at"),
        })
        .collect())
}

async fn save_watches(tx: &impl GenericClient, rule: Uuid, watches: &[(Uuid, JobWatch)]) -> anyhow::Result<()> {
    if watches.is_empty() {
        return Ok(());
    }
    let jobs: Vec<Uuid> = watches.iter().map(|w| w.0).collect();
    let since: Vec<DateTime<Utc>> = watches.iter().map(|w| w.1.watching_since).collect();
    let through: Vec<DateTime<Utc>> = watches.iter().map(|w| w.1.judged_through).collect();
    let failures: Vec<i32> = watches.iter().map(|w| w.1.consecutive_failures).collect();
    let success: Vec<Option<DateTime<Utc>>> = watches.iter().map(|w| w.1.last_success_at).collect();
    tx.execute(
        "INSERT INTO alert_job_state (rule_id, job_id, watching_since, judged_through, consecutive_failures, last_success_at)
         SELECT $1, * FROM unnest($2::uuid[], $3::timestamptz[], $4::timestamptz[], $5::int[], $6::timestamptz[])
         ON CONFLICT (rule_id, job_id) DO UPDATE SET judged_through = excluded.judged_through,
             consecutive_failures = excluded.consecutive_failures, last_success_at = excluded.last_success_at",
        &[&rule, &jobs, &since, &through, &failures, &success],
    )
    .await?;
    Ok(())
}

fn slots_json(slots: &[JudgedSlot]) -> Value {
    Value::Array(
        slots
            .iter()
            .map(|s| {
                json!({
                    "scheduled_at": s.scheduled_at,
                    "execution_id": s.execution_id,
                    "status": s.status.as_str(),
                    "reason": s.reason,
                    "error": s.error,
                    "http_status": s.http_status,
                    "lateness_ms": s.lateness_ms,
                })
            })
            .collect(),
    )
}

async fn open_incident(
    tx: &impl GenericClient,
    rule: &Rule,
    job: &Watched,
    node_id: &str,
    summary: &str,
    slots: &[JudgedSlot],
) -> anyhow::Result<()> {
    let id = Uuid::now_v7();
    let summary = format!("{} ({}): {summary}", job.name, rule.name);
    tx.execute(
        "INSERT INTO alert_incidents (id, rule_id, job_id, namespace, opened_by, summary, slots)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[&id, &rule.id, &job.id, &rule.namespace, &node_id, &summary, &slots_json(slots)],
    )
    .await?;
    notify(tx, rule, id, NoticeKind::Firing).await
}

async fn resolve(tx: &impl GenericClient, rule: &Rule, incident: Uuid, resolution: &str) -> anyhow::Result<()> {
    tx.execute(
        "UPDATE alert_incidents SET resolved_at = now(), resolution = $2 WHERE id = $1 AND resolved_at IS NULL",
        &[&incident, &resolution],
    )
    .await?;
    notify(tx, rule, incident, NoticeKind::Resolved).await
}

/// Queues a notice of `incident` to each of the rule's channels (once:
/// the unique key drops a second).
async fn notify(tx: &impl GenericClient, rule: &Rule, incident: Uuid, kind: NoticeKind) -> anyhow::Result<()> {
    let ids: Vec<Uuid> = rule.channels.iter().map(|_| Uuid::now_v7()).collect();
    tx.execute(
        "INSERT INTO alert_notifications (id, incident_id, channel_id, kind)
         SELECT n.id, $2, n.channel, $3 FROM unnest($1::uuid[], $4::uuid[]) AS n(id, channel)
         ON CONFLICT (incident_id, channel_id, kind) DO NOTHING",
        &[&ids, &incident, &kind.as_str(), &rule.channels],
    )
    .await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The outbox

/// A notification to send, with what its payload says.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub id: Uuid,
    pub kind: NoticeKind,
    pub attempts: i32,
    pub channel_id: Uuid,
    pub channel_kind: ChannelKind,
    pub url_sealed: String,
    pub max_per_minute: i32,
    pub sent_last_minute: i64,
    pub namespace: String,
    pub incident: Value,
}

/// The oldest due notification no other worker is sending, locked by the
/// caller's transaction until it marks it.
pub async fn next_due(tx: &impl GenericClient) -> Result<Option<Outgoing>, tokio_postgres::Error> {
    let row = tx
        .query_opt(
            "SELECT n.id, n.kind, n.attempts, n.channel_id, c.kind AS channel_kind, c.url_sealed, c.max_per_minute,
                    i.namespace,
                    (SELECT count(*) FROM alert_notifications s WHERE s.channel_id = n.channel_id
                       AND s.state = 'delivered' AND s.delivered_at > now() - interval '1 minute') AS sent_last_minute,
                    json_build_object('id', i.id, 'opened_at', i.opened_at, 'resolved_at', i.resolved_at,
                        'summary', i.summary, 'resolution', i.resolution, 'slots', i.slots,
                        'rule', json_build_object('id', r.id, 'name', r.name, 'condition', r.condition, 'threshold', r.threshold),
                        'job', json_build_object('id', i.job_id, 'name', j.name, 'namespace', i.namespace))::jsonb AS incident
             FROM alert_notifications n
             JOIN alert_channels c ON c.id = n.channel_id
             JOIN alert_incidents i ON i.id = n.incident_id
             JOIN alert_rules r ON r.id = i.rule_id
             LEFT JOIN jobs j ON j.id = i.job_id
             WHERE n.state = 'pending' AND n.next_attempt_at <= now()
             ORDER BY n.next_attempt_at
             LIMIT 1 FOR UPDATE OF n SKIP LOCKED",
            &[],
        )
        .await?;
    Ok(row.map(|r| Outgoing {
        id: r.get("id"),
        kind: NoticeKind::parse(r.get("kind")).unwrap_or(NoticeKind::Firing),
        attempts: r.get("attempts"),
        channel_id: r.get("channel_id"),
        channel_kind: ChannelKind::parse(r.get("channel_kind")).unwrap_or(ChannelKind::Webhook),
        url_sealed: r.get("url_sealed"),
        max_per_minute: r.get("max_per_minute"),
        sent_last_minute: r.get("sent_last_minute"),
        namespace: r.get("namespace"),
        incident: r.get("incident"),
    }))
}

/// A notification's attempt, as recorded.
pub enum Sent {
    Delivered {
        status: i32,
    },
    /// Tried again after `after`.
    Retry {
        after: std::time::Duration,
        status: Option<i32>,
        error: String,
    },
    /// Given up (a refusal, or too many attempts).
    GaveUp {
        status: Option<i32>,
        error: String,
    },
    /// Held back by the channel's rate limit, not attempted.
    Deferred {
        after: std::time::Duration,
    },
}

/// Records a locked notification's attempt.
pub async fn mark(tx: &impl GenericClient, id: Uuid, sent: &Sent) -> Result<(), tokio_postgres::Error> {
    let secs = |d: &std::time::Duration| d.as_secs_f64();
    match sent {
        Sent::Delivered { status } => {
            tx.execute(
                "UPDATE alert_notifications SET state = 'delivered', attempts = attempts + 1, delivered_at = now(),
                        last_status = $2, last_error = NULL WHERE id = $1",
                &[&id, status],
            )
            .await?
        }
        Sent::Retry { after, status, error } => {
            tx.execute(
                "UPDATE alert_notifications SET attempts = attempts + 1, last_status = $2, last_error = $3,
                        next_attempt_at = now() + make_interval(secs => $4) WHERE id = $1",
                &[&id, status, error, &secs(after)],
            )
            .await?
        }
        Sent::GaveUp { status, error } => {
            tx.execute(
                "UPDATE alert_notifications SET state = 'failed', attempts = attempts + 1, last_status = $2,
                        last_error = $3 WHERE id = $1",
                &[&id, status, error],
            )
            .await?
        }
        Sent::Deferred { after } => {
            tx.execute(
                "UPDATE alert_notifications SET next_attempt_at = now() + make_interval(secs => $2) WHERE id = $1",
                &[&id, &secs(after)],
            )
            .await?
        }
    };
    Ok(())
}
