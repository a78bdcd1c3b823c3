//! The ledger's writes for a slot waiting for its destination, on a real
//! Postgres: the `waiting` entry once per (worker, outage), the hand-back
//! (`running` → `retrying`, the attempt not counted), the return sent back
//! again (`retrying` stays, only for the row as its hand-back left it), the give-up
//! (`running` → `failed`, not attempted), each only on the row this worker
//! holds for the attempt.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use uuid::Uuid;

use store::ledger::delivery::{
    DestinationWait, GiveUp, HandBack, WAITING_CIRCUIT_OPEN, give_up_waiting_batch, note_waiting_batch,
    wait_again_batch, wait_for_destination_batch,
};
use testing::TestDb;

struct Row {
    status: String,
    attempts: i32,
    worker_id: Option<String>,
    next_attempt_at: Option<DateTime<Utc>>,
    error: Option<String>,
    history: Vec<Value>,
}

async fn row(pool: &deadpool_postgres::Pool, job: Uuid, at: DateTime<Utc>) -> Row {
    let r = pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT status, attempts, worker_id, next_attempt_at, error, history FROM scheduled_jobs
             WHERE job_id = $1 AND scheduled_at = $2",
            &[&job, &at],
        )
        .await
        .unwrap();
    let history: Value = r.get(5);
    Row {
        status: r.get(0),
        attempts: r.get(1),
        worker_id: r.get(2),
        next_attempt_at: r.get(3),
        error: r.get(4),
        history: history.as_array().unwrap().clone(),
    }
}

/// Attempt `attempt` of the slot taken by `worker` (as the start transition leaves it).
async fn hold(pool: &deadpool_postgres::Pool, job: Uuid, at: DateTime<Utc>, fire: Uuid, attempt: i32, worker: &str) {
    pool.get()
        .await
        .unwrap()
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, worker_id, started_at)
             VALUES ($1, $2, $3, 'x', 'running', $4, $5, now())
             ON CONFLICT (job_id, scheduled_at) DO UPDATE
             SET status = 'running', attempts = $4, worker_id = $5, started_at = now()",
            &[&job, &at, &fire, &attempt, &worker],
        )
        .await
        .unwrap();
}

fn waiting_entries(r: &Row) -> Vec<&Value> {
    r.history.iter().filter(|e| e["event"] == "waiting").collect()
}

#[tokio::test]
async fn a_waiting_slot_is_noted_once_per_outage_handed_back_without_its_attempt_and_given_up_without_it() {
    let db = TestDb::new().await.unwrap();
    let pool = store::db::pool(&db.url, 2).unwrap();
    let (job, fire) = (Uuid::new_v4(), Uuid::new_v4());
    let at = domain::execution::truncate_ms(Utc::now());
    hold(&pool, job, at, fire, 1, "w-1").await;
    let outage = domain::execution::truncate_ms(Utc::now() - TimeDelta::seconds(5));
    let wait = |attempt: i32, since: DateTime<Utc>| DestinationWait {
        slot: (job, at, attempt),
        fire_id: fire,
        reason: WAITING_CIRCUIT_OPEN,
        destination: "hooks.example:443".into(),
        since,
    };
    let note = |worker: &'static str, w: DestinationWait| {
        let pool = pool.clone();
        async move { note_waiting_batch(&pool, worker, vec![w]).await.unwrap() == [true] }
    };
    let hand_back = |worker: &'static str, w: DestinationWait, back_at: DateTime<Utc>| {
        let pool = pool.clone();
        async move {
            wait_for_destination_batch(&pool, worker, vec![HandBack { wait: w, back_at }]).await.unwrap() == [true]
        }
    };

    // Held on the worker: one entry per outage, the row stays running.
    assert!(note("w-1", wait(1, outage)).await);
    assert!(!note("w-1", wait(1, outage)).await, "the same outage again");
    assert!(!note("w-2", wait(1, outage)).await, "not w-2's row");
    assert!(!note("w-1", wait(2, outage)).await, "not the attempt w-1 holds");
    let r = row(&pool, job, at).await;
    assert_eq!((r.status.as_str(), r.attempts), ("running", 1));
    let entries = waiting_entries(&r);
    assert_eq!(entries.len(), 1);
    let e = entries[0];
    assert_eq!(e["reason"], "destination circuit open");
    assert_eq!(e["destination"], "hooks.example:443");
    assert_eq!(e["worker_id"], "w-1");
    assert_eq!(e["attempt"], 1);
    assert_eq!(e["since"], domain::execution::format_instant(outage));

    // Handed back: retrying, attempt not counted, no second entry for the outage.
    let back_at = domain::execution::truncate_ms(Utc::now() + TimeDelta::seconds(8));
    assert!(!hand_back("w-2", wait(1, outage), back_at).await, "not w-2's row");
    assert!(hand_back("w-1", wait(1, outage), back_at).await);
    let r = row(&pool, job, at).await;
    assert_eq!((r.status.as_str(), r.attempts, r.worker_id.as_deref()), ("retrying", 0, None));
    assert_eq!(r.next_attempt_at, Some(back_at));
    assert_eq!(waiting_entries(&r).len(), 1);
    assert!(!hand_back("w-1", wait(1, outage), back_at).await, "no longer held");

    // The message returns to w-2, in a new outage of w-2's breaker: a second entry.
    hold(&pool, job, at, fire, 1, "w-2").await;
    let later = outage + TimeDelta::seconds(60);
    assert!(hand_back("w-2", wait(1, later), back_at).await);
    assert_eq!(waiting_entries(&row(&pool, job, at).await).len(), 2);

    // Back while w-2's circuit is still open: only the next return moves,
    // and only on the row as w-2's hand-back of this outage left it.
    let again_at = back_at + TimeDelta::seconds(30);
    let again = |worker: &'static str, w: DestinationWait| {
        let pool = pool.clone();
        async move {
            wait_again_batch(&pool, worker, vec![HandBack { wait: w, back_at: again_at }]).await.unwrap() == [true]
        }
    };
    assert!(!again("w-1", wait(1, later)).await, "w-1 has no entry for w-2's outage");
    assert!(!again("w-2", wait(1, outage)).await, "not the outage w-2 handed it back for");
    assert!(!again("w-2", wait(2, later)).await, "not the attempt the row expects");
    assert!(again("w-2", wait(1, later)).await);
    let r = row(&pool, job, at).await;
    assert_eq!(
        (r.status.as_str(), r.attempts, r.worker_id.as_deref(), r.next_attempt_at),
        ("retrying", 0, None, Some(again_at))
    );
    assert_eq!(waiting_entries(&r).len(), 2, "no entry added");

    // Past its horizon: failed without the attempt, with the reason.
    hold(&pool, job, at, fire, 1, "w-2").await;
    let error = "not delivered: destination circuit open (hooks.example:443) since then";
    let give_up = |worker: &'static str, w: DestinationWait| {
        let pool = pool.clone();
        async move {
            give_up_waiting_batch(&pool, worker, vec![GiveUp { wait: w, error: error.into() }]).await.unwrap() == [true]
        }
    };
    assert!(!again("w-2", wait(1, later)).await, "held again: not a row to send back");
    assert!(!give_up("w-1", wait(1, later)).await, "not w-1's row");
    assert!(give_up("w-2", wait(1, later)).await);
    let r = row(&pool, job, at).await;
    assert_eq!((r.status.as_str(), r.attempts, r.next_attempt_at), ("failed", 0, None));
    assert_eq!(r.error.as_deref(), Some(error));
    let last = r.history.last().unwrap();
    assert_eq!(last["event"], "gave_up");
    assert_eq!(last["reason"], "destination circuit open");
    assert_eq!(last["attempt"], 1);
    assert!(!r.history.iter().any(|e| e["event"] == "attempt"), "no attempt was made");
}

/// A batch answers per row, in input order, whatever the lock order.
#[tokio::test]
async fn a_batch_of_waits_answers_each_row_in_order() {
    let db = TestDb::new().await.unwrap();
    let pool = store::db::pool(&db.url, 2).unwrap();
    let at = domain::execution::truncate_ms(Utc::now());
    let since = at - TimeDelta::seconds(1);
    let mut waits = Vec::new();
    for i in 0..50 {
        let (job, fire) = (Uuid::new_v4(), Uuid::new_v4());
        // Every third row is another worker's.
        hold(&pool, job, at, fire, 1, if i % 3 == 0 { "other" } else { "w-1" }).await;
        waits.push(DestinationWait {
            slot: (job, at, 1),
            fire_id: fire,
            reason: WAITING_CIRCUIT_OPEN,
            destination: "hooks.example:443".into(),
            since,
        });
    }
    let expected: Vec<bool> = (0..50).map(|i| i % 3 != 0).collect();
    assert_eq!(note_waiting_batch(&pool, "w-1", waits.clone()).await.unwrap(), expected);
    let back_at = at + TimeDelta::seconds(4);
    let hand_backs = waits.iter().map(|w| HandBack { wait: w.clone(), back_at }).collect();
    assert_eq!(wait_for_destination_batch(&pool, "w-1", hand_backs).await.unwrap(), expected);
    for (w, ours) in waits.iter().zip(&expected) {
        let r = row(&pool, w.slot.0, at).await;
        assert_eq!(r.status, if *ours { "retrying" } else { "running" });
        assert_eq!(waiting_entries(&r).len(), usize::from(*ours));
    }
}
