//! The scheduler → worker wire format (JSON body of a RabbitMQ message).
//!
//! The message carries a snapshot of the target so the worker needs no job
//! lookup; cancellation stays exact because the worker only delivers a ledger
//! row it can still move from `pending` to `running` for this `fire_id`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::job::{AfterCompletion, Completion, JobSpec, MisfirePolicy, Overlap, RetryPolicy, Target};
use crate::schedule::jitter_offset;
use crate::slot::Trigger;

pub const FIRE_MESSAGE_VERSION: u8 = 1;

/// A bundle: several fire messages of the same attempt, due within
/// `BUNDLE_WINDOW` of each other, as one JSON array in one AMQP message
/// (`broker::properties::BUNDLE_CONTENT_TYPE`). The broker's work (publish,
/// confirm, deliver, hold unacked, ack) is per AMQP message, and at 2,000
/// fires/s it was the schedulers' publish rate that fell behind; a bundle
/// pays it once for many slots. The worker still delivers each slot at its
/// own due instant.
///
/// Most slots in one bundle: a bundle is acked only when its last slot is
/// done, a redelivered bundle brings every slot of it back, and a burst must
/// still make enough messages to spread over every worker's consumers.
pub const BUNDLE_MAX: usize = 25;
/// Widest spread of due instants in one bundle: its ack waits for the last.
pub const BUNDLE_WINDOW: chrono::TimeDelta = chrono::TimeDelta::seconds(1);

/// Groups messages (each with its attempt) into the AMQP messages that carry
/// them: in due order, the same attempt, at most `max` per group and due
/// within `BUNDLE_WINDOW` of the group's first. A job's misfire catch-up
/// slots (all past due) go together in one group, oldest first, whatever
/// their number: the worker delivers them one after the other, so the
/// receiver sees them in scheduled order (`fire_all`), which separate
/// messages on concurrent consumers could not promise.
pub fn bundle<'a>(messages: &[(&'a FireMessage, u32)], max: usize) -> Vec<(Vec<&'a FireMessage>, u32)> {
    let mut sorted = messages.to_vec();
    let catch_up_of = |m: &FireMessage| (m.trigger == Trigger::Misfire).then_some(m.job_id);
    sorted.sort_by_key(|(m, attempt)| (*attempt, catch_up_of(m), m.due_at));
    let mut groups: Vec<(Vec<&FireMessage>, u32)> = Vec::new();
    for (m, attempt) in sorted {
        match groups.last_mut() {
            Some((group, a))
                if *a == attempt
                    && match catch_up_of(m) {
                        Some(job) => catch_up_of(group[0]) == Some(job),
                        None => {
                            catch_up_of(group[0]).is_none()
                                && group.len() < max
                                && m.due_at - group[0].due_at < BUNDLE_WINDOW
                        }
                    } =>
            {
                group.push(m)
            }
            _ => groups.push((vec![m], attempt)),
        }
    }
    groups
}

/// The fire messages in an AMQP message body: one object, or a bundle's array.
/// The body is checked as UTF-8 once and then read as text: read as bytes,
/// serde_json checks every string on its own, a sixth of a message's read.
/// A body that is not UTF-8 is read as bytes, for serde_json's own error.
pub fn parse_body(body: &[u8]) -> serde_json::Result<Vec<FireMessage>> {
    let bundle = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    match (std::str::from_utf8(body), bundle) {
        (Ok(text), true) => serde_json::from_str(text),
        (Ok(text), false) => serde_json::from_str(text).map(|m| vec![m]),
        (Err(_), true) => serde_json::from_slice(body),
        (Err(_), false) => serde_json::from_slice(body).map(|m| vec![m]),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FireMessage {
    pub v: u8,
    pub fire_id: Uuid,
    pub job_id: Uuid,
    /// The job's namespace: whose signing keys sign the delivery. Empty in
    /// a message of a version before signing (the worker looks it up).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(deserialize_with = "crate::execution::deserialize_instant")]
    pub scheduled_at: DateTime<Utc>,
    /// When the worker may deliver: the scheduled time for a pre-armed slot,
    /// or earlier than now for a late or manual fire.
    #[serde(deserialize_with = "crate::execution::deserialize_instant")]
    pub due_at: DateTime<Utc>,
    pub execution_id: String,
    pub trigger: Trigger,
    pub target: Target,
    /// `None` = the worker's cluster defaults.
    pub retry: Option<RetryPolicy>,
    /// What the worker does when the job's previous execution is still
    /// running or retrying as this one starts.
    #[serde(default, skip_serializing_if = "Overlap::is_allow")]
    pub overlap: Overlap,
    /// Attempts before this budget began: a replay gives the execution
    /// `retry`'s retries again, counted from attempt `retry_from + 1`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_from: u32,
    /// The job's misfire policy, on a scheduled slot only: what the worker
    /// does when the slot's first attempt reaches it later than the misfire
    /// threshold. Absent (manual and misfire-catch-up fires, messages of
    /// older schedulers): delivered however late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<MisfirePolicy>,
    /// The job's own misfire threshold (`starting_deadline_ms`), on a
    /// scheduled slot that has one. Absent: the worker's cluster setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_deadline_ms: Option<u64>,
    /// The job's completion (async: a 202 leaves the attempt running until
    /// the receiver reports). Absent: the HTTP answer is the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<Completion>,
    /// Whether the job is deleted once this delivery reaches a final outcome.
    #[serde(default, skip_serializing_if = "AfterCompletion::is_keep")]
    pub after_completion: AfterCompletion,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl FireMessage {
    /// The message a ledger row expects next, with its attempt. A `pending`
    /// or `retrying` row that has counted `attempts` is started only by
    /// attempt `attempts + 1` of its fire id (the worker's start rule), so
    /// every path that publishes a row (claim, re-take, outbox, stranded and
    /// stuck-`running` sweeps, trigger, replay) takes both from the row here:
    /// none can publish an attempt its row would refuse. A re-take once
    /// published attempt 1 to a row that had counted one, and the worker
    /// dropped it as a duplicate for ever.
    ///
    /// A scheduled slot of a job with jitter is not due before its
    /// jittered instant, whoever publishes it (claim or sweep).
    pub fn next_for_row(row: RowToPublish, spec: JobSpec, due_at: DateTime<Utc>) -> (Self, u32) {
        let RowToPublish {
            job_id,
            namespace,
            scheduled_at,
            fire_id,
            execution_id,
            trigger,
            attempts,
            retry_from,
            retry_policy,
        } = row;
        let due_at = match trigger {
            Trigger::Schedule => due_at.max(scheduled_at + jitter_offset(job_id, scheduled_at, spec.jitter_ms)),
            Trigger::Manual | Trigger::Misfire | Trigger::Backfill => due_at,
        };
        let message = FireMessage {
            v: FIRE_MESSAGE_VERSION,
            fire_id,
            job_id,
            namespace,
            scheduled_at,
            due_at,
            execution_id,
            trigger,
            target: spec.target,
            // A replay's own policy, if it gave one.
            retry: retry_policy.or(spec.retry),
            overlap: spec.overlap,
            retry_from,
            misfire: (trigger == Trigger::Schedule).then_some(spec.misfire),
            starting_deadline_ms: spec.starting_deadline_ms.filter(|_| trigger == Trigger::Schedule),
            completion: spec.completion,
            after_completion: spec.after_completion,
        };
        (message, attempts + 1)
    }
}

/// What a ledger row says of the slot whose message is to be published:
/// the fields a message takes from its row (the store reads them).
#[derive(Debug, Clone, PartialEq)]
pub struct RowToPublish {
    pub job_id: Uuid,
    /// The job's (read beside its spec).
    pub namespace: String,
    pub scheduled_at: DateTime<Utc>,
    pub fire_id: Uuid,
    pub execution_id: String,
    pub trigger: Trigger,
    /// Attempts the row has counted.
    pub attempts: u32,
    /// Attempts before the current retry budget began (a replay's).
    pub retry_from: u32,
    /// A replay's own retry policy, if it gave one.
    pub retry_policy: Option<RetryPolicy>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::HttpTarget;

    fn message(due_ms: i64) -> FireMessage {
        let due_at = DateTime::<Utc>::from_timestamp_millis(1_800_000_000_000 + due_ms).unwrap();
        let job_id = Uuid::now_v7();
        FireMessage {
            v: FIRE_MESSAGE_VERSION,
            fire_id: Uuid::now_v7(),
            job_id,
            namespace: "default".to_owned(),
            scheduled_at: due_at,
            due_at,
            execution_id: crate::execution::execution_id(job_id, due_at),
            trigger: Trigger::Schedule,
            target: Target::Http(HttpTarget {
                url: "http://127.0.0.1:9/hook".into(),
                method: "POST".into(),
                headers: Default::default(),
                secret_headers: Default::default(),
                body: None,
                timeout_ms: 1_000,
                follow_redirects: false,
                forward_headers_on_redirect: false,
                success: None,
                retry_statuses: None,
            }),
            retry: None,
            overlap: Default::default(),
            retry_from: 0,
            misfire: None,
            starting_deadline_ms: None,
            completion: None,
            after_completion: Default::default(),
        }
    }

    #[test]
    fn bundles_hold_one_attempt_in_due_order_within_the_window_and_the_size_limit() {
        let messages: Vec<FireMessage> = [1_500, 0, 999, 1_000, 5_000].into_iter().map(message).collect();
        let mut input: Vec<(&FireMessage, u32)> = messages.iter().map(|m| (m, 1)).collect();
        input.push((&messages[1], 2));
        let groups = bundle(&input, BUNDLE_MAX);
        let dues = |g: &Vec<&FireMessage>| {
            g.iter().map(|m| m.due_at.timestamp_millis() - 1_800_000_000_000).collect::<Vec<_>>()
        };
        let shape: Vec<(Vec<i64>, u32)> = groups.iter().map(|(g, a)| (dues(g), *a)).collect();
        assert_eq!(shape, vec![(vec![0, 999], 1), (vec![1_000, 1_500], 1), (vec![5_000], 1), (vec![0], 2)]);

        let many: Vec<FireMessage> = (0..BUNDLE_MAX as i64 + 1).map(|_| message(0)).collect();
        let sizes: Vec<usize> =
            bundle(&many.iter().map(|m| (m, 1)).collect::<Vec<_>>(), BUNDLE_MAX).iter().map(|(g, _)| g.len()).collect();
        assert_eq!(sizes, vec![BUNDLE_MAX, 1]);
    }

    #[test]
    fn a_jobs_catch_up_slots_travel_together_oldest_first_whatever_their_number() {
        let job = Uuid::now_v7();
        let catch_up: Vec<FireMessage> = (0..BUNDLE_MAX as i64 * 2)
            .rev()
            .map(|k| {
                let mut m = message(k * 60_000);
                m.job_id = job;
                m.trigger = Trigger::Misfire;
                m
            })
            .collect();
        let other = message(0);
        let mut input: Vec<(&FireMessage, u32)> = catch_up.iter().map(|m| (m, 1)).collect();
        input.push((&other, 1));
        let groups = bundle(&input, BUNDLE_MAX);
        assert_eq!(groups.len(), 2, "one group for the catch-up, one for the scheduled slot");
        let run = groups.iter().find(|(g, _)| g[0].job_id == job).unwrap();
        assert_eq!(run.0.len(), BUNDLE_MAX * 2);
        assert!(run.0.windows(2).all(|w| w[0].due_at < w[1].due_at), "oldest first");
    }

    #[test]
    fn a_body_is_read_as_one_message_or_a_bundle() {
        let (a, b) = (message(0), message(10));
        assert_eq!(parse_body(&serde_json::to_vec(&a).unwrap()).unwrap(), vec![a.clone()]);
        assert_eq!(parse_body(&serde_json::to_vec(&[&a, &b]).unwrap()).unwrap(), vec![a, b]);
        assert!(parse_body(b"{\"v\":1}").is_err(), "a message missing its fields is refused, not half-read");
        // Text beyond ASCII, raw and escaped, reads back as it was written.
        let mut c = message(20);
        c.execution_id = "jöb-\u{1F600}-\"quoted\"".into();
        let body = serde_json::to_vec(&[&c]).unwrap();
        assert_eq!(parse_body(&body).unwrap(), vec![c.clone()]);
        let escaped = serde_json::to_string(&c).unwrap().replace('ö', "\\u00f6");
        assert_eq!(parse_body(escaped.as_bytes()).unwrap(), vec![c]);
        // A body that is not UTF-8 is refused with serde_json's error, not a panic.
        let mut broken = body.clone();
        let at = broken.iter().position(|&b| b == 0xc3).unwrap();
        broken[at] = 0xff;
        let error = parse_body(&broken).unwrap_err().to_string();
        assert!(error.contains("UTF-8") || error.contains("unicode"), "{error}");
    }
}
