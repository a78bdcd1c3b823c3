//! Ledger writes shared by the scheduler and the API.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::message::FireMessage;

/// Stamps `published_at` on the rows of confirmed messages, in one
/// statement. A row re-claimed under another fire id since is left alone.
pub async fn mark_published(
    client: &impl deadpool_postgres::GenericClient,
    messages: &[&FireMessage],
) -> Result<u64, tokio_postgres::Error> {
    let job_ids: Vec<Uuid> = messages.iter().map(|m| m.job_id).collect();
    let times: Vec<DateTime<Utc>> = messages.iter().map(|m| m.scheduled_at).collect();
    let fire_ids: Vec<Uuid> = messages.iter().map(|m| m.fire_id).collect();
    client
        .execute(
            "UPDATE scheduled_jobs s SET published_at = now()
             FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[]) AS p(job_id, scheduled_at, fire_id)
             WHERE s.job_id = p.job_id AND s.scheduled_at = p.scheduled_at AND s.fire_id = p.fire_id
               AND s.published_at IS NULL",
            &[&job_ids, &times, &fire_ids],
        )
        .await
}
