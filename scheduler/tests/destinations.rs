//! Per-destination limits and circuit breakers on the real stack: a
//! scheduler and a worker process on the real services, two receivers on
//! loopback (two hosts: their ports differ). One receiver is dead (a slow
//! 503), the other healthy; then the dead one comes back.

#[path = "support/lib.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use domain::execution::{format_instant, truncate_ms};
use support::{
    Sink, Stack, all_succeeded, assert_exactly_once, free_addr, herd_on, http_target, metric_value, metrics_text,
};
use testing::wait_for;

/// Jobs per group (baseline healthy, healthy beside the dead host, dead).
const JOBS: usize = 200;
/// Each group's slots are spread over 10 instants 200 ms apart.
const INSTANTS: usize = 10;
const STEP_MS: i64 = 200;

/// The worker's destination settings: small enough that the test sees a
/// whole outage (open, failed probe, longer cool-down, hand-back) in
/// seconds. A cool-down past `WORKER_CIRCUIT_HOLD_MS` hands slots back.
const WORKER_ENV: [(&str, &str); 9] = [
    ("WORKER_MAX_IN_FLIGHT", "16"),
    ("WORKER_MAX_PER_HOST", "4"),
    ("WORKER_CIRCUIT_WINDOW_MS", "10000"),
    ("WORKER_CIRCUIT_MIN_CALLS", "8"),
    ("WORKER_CIRCUIT_FAILURE_PERCENT", "50"),
    ("WORKER_CIRCUIT_OPEN_MS", "2000"),
    ("WORKER_CIRCUIT_OPEN_MAX_MS", "8000"),
    ("WORKER_CIRCUIT_PROBES", "1"),
    ("WORKER_CIRCUIT_HOLD_MS", "3000"),
];
const MIN_CALLS: usize = 8;
const MAX_PER_HOST: usize = 4;
const OPEN_MS: u64 = 2000;

async fn live_nodes(stack: &Stack) -> Option<usize> {
    let c: Value = stack.http.get(format!("{}/v1/cluster", stack.api)).send().await.ok()?.json().await.ok()?;
    c["live_nodes"].as_u64().map(|n| n as usize)
}

/// A stack with one scheduler process and one worker process (the
/// binary's defaults plus `worker_env`, callbacks allowed to loopback),
/// once the node is live: the stack, the worker's metrics address, and
/// the processes (killed when dropped).
async fn one_node_one_worker(label: &str, worker_env: &[(&str, &str)]) -> (Stack, String, [tokio::process::Child; 2]) {
    let stack = Stack::start(label).await;
    let env = stack.proc_env();
    let metrics_addr = free_addr();
    let node = env.scheduler("node-0");
    let worker = env
        .command("cronshard-worker")
        .env("WORKER_ID", "worker-0")
        .env("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8")
        .env("METRICS_ADDR", &metrics_addr)
        .env_remove("WORKER_MAX_PER_HOST")
        .envs(worker_env.iter().copied())
        .spawn()
        .unwrap();
    wait_for("1 live node", Duration::from_secs(60), || async { (live_nodes(&stack).await? == 1).then_some(()) }).await;
    (stack, metrics_addr, [node, worker])
}

/// `JOBS` one-time jobs on `sink`'s `path`, due from `first` over `INSTANTS`
/// instants; their ids.
async fn once_jobs(stack: &Stack, sink: &Sink, path: &str, first: DateTime<Utc>, retry: Option<Value>) -> Vec<String> {
    let mut ids = Vec::with_capacity(JOBS);
    for i in 0..JOBS {
        let at = first + TimeDelta::milliseconds(STEP_MS * (i % INSTANTS) as i64);
        let mut spec = json!({
            "name": format!("{path}-{i}"),
            "schedule": { "kind": "once", "at": format_instant(at) },
            "target": http_target(&sink.url(path)),
        });
        if let Some(retry) = &retry {
            spec["retry"] = retry.clone();
        }
        ids.push(stack.create_job(spec).await["id"].as_str().unwrap().to_owned());
    }
    ids
}

/// Lateness at the receiver (ms) of the first delivery of each slot on `path`.
fn lateness_ms(sink: &Sink, path: &str) -> Vec<i64> {
    let mut first: BTreeMap<String, i64> = BTreeMap::new();
    for r in sink.received_on(path) {
        let due = DateTime::parse_from_rfc3339(&r.scheduled_at).unwrap().to_utc();
        first.entry(r.execution_id).or_insert((r.received_at - due).num_milliseconds());
    }
    first.into_values().collect()
}

fn p99(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[((v.len() * 99).div_ceil(100)).saturating_sub(1)]
}

/// The value of `name{label="value"}` on the worker's `/metrics`.
async fn metric(http: &reqwest::Client, addr: &str, name: &str, label: &str) -> Option<f64> {
    metrics_text(http, addr)
        .await?
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The dead host's rows: (status, attempts, has a `waiting` entry for an open circuit).
async fn rows(stack: &Stack, ids: &[String]) -> Vec<(String, i32, bool)> {
    let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.parse().unwrap()).collect();
    let client = stack.pg.get().await.unwrap();
    client
        .query(
            "SELECT status, attempts,
                    history @> '[{\"event\": \"waiting\", \"reason\": \"destination circuit open\"}]'::jsonb
             FROM scheduled_jobs WHERE job_id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// (a) A dead receiver (answering 503 after a second) beside a healthy one
/// under load: the healthy one's lateness is what it is without the dead
/// one (its deliveries never queue behind the dead one's: at most
/// `WORKER_MAX_PER_HOST` of those run at once), the dead one's circuit
/// opens, its rows say they wait and its slots do not spend attempts
/// faster than the breaker lets probes through. (b) The receiver comes
/// back: the circuit half-opens, closes, and every slot is delivered
/// exactly once, each ledger row final.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_host_waits_on_its_circuit_without_delaying_a_healthy_one_and_every_slot_is_delivered_once_when_it_is_back()
 {
    let healthy = Sink::start().await;
    let dead = Sink::start().await;
    dead.fail_first(usize::MAX, 503);
    dead.set_delay(Duration::from_secs(1));
    let dead_host = format!("host=\"{}\"", dead.addr);
    let (stack, metrics_addr, _processes) = one_node_one_worker("destinations", &WORKER_ENV).await;

    // The baseline (healthy alone), then healthy and dead slots due together.
    let base_at = truncate_ms(Utc::now() + TimeDelta::seconds(12));
    let mixed_at = base_at + TimeDelta::seconds(5);
    let baseline = once_jobs(&stack, &healthy, "base", base_at, None).await;
    let beside = once_jobs(&stack, &healthy, "beside", mixed_at, None).await;
    // Retries enough that no slot is given up within the test's outage:
    // the horizon is the retries' span, 1 + 2 + 4 + 8 × 6 = 55 s.
    let retry = json!({ "max_retries": 9, "base_delay_ms": 1000, "multiplier": 2.0, "max_delay_ms": 8000 });
    let dead_jobs = once_jobs(&stack, &dead, "dead", mixed_at, Some(retry)).await;
    assert!(Utc::now() < base_at - TimeDelta::seconds(1), "creating the jobs took too long for the test's timing");

    // (a) The healthy receiver is on time beside the dead one.
    wait_for("the healthy deliveries", Duration::from_secs(60), || async {
        (healthy.received_on("beside").len() >= JOBS && healthy.received_on("base").len() >= JOBS).then_some(())
    })
    .await;
    let (alone, beside_dead) = (p99(lateness_ms(&healthy, "base")), p99(lateness_ms(&healthy, "beside")));
    // Generous: a loaded machine varies, but a healthy slot queued behind
    // the dead host's one-second answers would be a second late.
    let bound = (2 * alone).max(alone + 300);
    eprintln!("healthy lateness p99: {alone} ms alone, {beside_dead} ms beside the dead host");
    assert!(
        beside_dead <= bound,
        "healthy lateness p99 {beside_dead} ms beside the dead host, {alone} ms alone (bound {bound} ms)"
    );

    // Its circuit opened, and every dead slot says it waits.
    wait_for("the dead host's circuit to be open", Duration::from_secs(30), || async {
        let state = metric(&stack.http, &metrics_addr, "cronshard_worker_circuit_state", &dead_host).await?;
        (state == 2.0).then_some(())
    })
    .await;
    let opens = metric(&stack.http, &metrics_addr, "cronshard_worker_circuit_opens_total", "from=\"closed\"").await;
    assert_eq!(opens, Some(1.0), "one outage");
    wait_for("every dead slot's row to say it waits", Duration::from_secs(30), || async {
        let rows = rows(&stack, &dead_jobs).await;
        (rows.len() == JOBS && rows.iter().all(|(_, _, waiting)| *waiting)).then_some(())
    })
    .await;
    // Some wait in the broker (past the hold, or beyond the slots the
    // worker holds for a host): `retrying` with the attempt not counted;
    // explain says why.
    let client = stack.pg.get().await.unwrap();
    let dead_ids: Vec<uuid::Uuid> = dead_jobs.iter().map(|id| id.parse().unwrap()).collect();
    let (job_id, slot): (uuid::Uuid, DateTime<Utc>) =
        wait_for("a dead slot handed back to wait", Duration::from_secs(30), || async {
            client
                .query_opt(
                    "SELECT job_id, scheduled_at FROM scheduled_jobs
                     WHERE job_id = ANY($1) AND status = 'retrying' AND history->-1->>'event' = 'waiting' LIMIT 1",
                    &[&dead_ids],
                )
                .await
                .unwrap()
                .map(|r| (r.get(0), r.get(1)))
        })
        .await;
    let explained = stack.get(&format!("/v1/jobs/{job_id}/executions/{}", format_instant(slot))).await;
    let summary = explained["explanation"]["summary"].as_str().unwrap();
    assert!(summary.contains("destination circuit open"), "{summary}");
    assert_eq!(explained["explanation"]["verdict"], "retrying");
    // The cool-down ends, a probe fails, the circuit opens again.
    wait_for("a failed probe to re-open the circuit", Duration::from_secs(30), || async {
        let n =
            metric(&stack.http, &metrics_addr, "cronshard_worker_circuit_opens_total", "from=\"half_open\"").await?;
        (n >= 1.0).then_some(())
    })
    .await;
    // A slot back from a delay queue while the circuit stays open past the
    // hold (the 8 s cool-down) is sent back again without taking its row:
    // the deliveries below then prove that path loses and doubles nothing.
    wait_for("a slot sent back again without a round", Duration::from_secs(60), || async {
        (metric_value(&stack.http, &metrics_addr, "cronshard_worker_waited_again_total").await? >= 1.0).then_some(())
    })
    .await;
    // Attempts: the calls that opened it (and those in flight then), and
    // one probe per cool-down (2 s, 4 s, then 8 s) — not one per slot.
    let outage = (Utc::now() - mixed_at).to_std().unwrap();
    let failed_calls = dead.answers().len();
    let allowed = MIN_CALLS + MAX_PER_HOST + (outage.as_millis() as usize / OPEN_MS as usize) + 1;
    eprintln!("{failed_calls} calls to the dead host in {outage:?} for {JOBS} slots");
    assert!(
        failed_calls <= allowed,
        "{failed_calls} calls to the dead host in {outage:?} (the breaker allows {allowed}; {JOBS} slots)"
    );

    // (b) The receiver is back: a probe closes the circuit, and everything is delivered.
    dead.set_delay(Duration::ZERO);
    dead.fail_first(0, 200);
    wait_for("every dead slot delivered", Duration::from_secs(60), || async {
        let ok: std::collections::BTreeSet<String> =
            dead.answers().into_iter().filter(|(_, status)| *status == 200).map(|(id, _)| id).collect();
        (ok.len() >= JOBS).then_some(())
    })
    .await;
    wait_for("the dead host's circuit to close", Duration::from_secs(10), || async {
        let state = metric(&stack.http, &metrics_addr, "cronshard_worker_circuit_state", &dead_host).await?;
        (state == 0.0).then_some(())
    })
    .await;
    let mut all = baseline.clone();
    all.extend(beside.iter().cloned());
    all.extend(dead_jobs.iter().cloned());
    wait_for("every row final", Duration::from_secs(30), || async {
        let rows = rows(&stack, &all).await;
        (rows.len() == 3 * JOBS && rows.iter().all(|(status, _, _)| status == "succeeded")).then_some(())
    })
    .await;
    // Exactly once: one 200 per dead slot, one delivery per healthy slot;
    // the ledger's attempts are the receiver's calls.
    let mut ok_per_slot: BTreeMap<String, usize> = BTreeMap::new();
    for (id, status) in dead.answers() {
        if status == 200 {
            *ok_per_slot.entry(id).or_default() += 1;
        }
    }
    assert_eq!(ok_per_slot.len(), JOBS);
    assert!(ok_per_slot.values().all(|n| *n == 1), "a dead slot delivered twice: {ok_per_slot:?}");
    let attempts: i32 = rows(&stack, &dead_jobs).await.iter().map(|r| r.1).sum();
    assert_eq!(attempts as usize, dead.answers().len(), "every call to the dead host is an attempt in the ledger");
    let expected: std::collections::BTreeSet<String> = {
        let client = stack.pg.get().await.unwrap();
        let ids: Vec<uuid::Uuid> = baseline.iter().chain(&beside).map(|id| id.parse().unwrap()).collect();
        client
            .query("SELECT execution_id FROM scheduled_jobs WHERE job_id = ANY($1)", &[&ids])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    assert_eq!(expected.len(), 2 * JOBS);
    assert_exactly_once(&healthy.received(), &expected);
    let waiting =
        metric(&stack.http, &metrics_addr, "cronshard_worker_destination_waiting", &dead_host).await.unwrap_or(0.0);
    assert_eq!(waiting, 0.0, "nothing waits once the host is back");
    stack.stop().await;
}

/// A host that stays down past the slots' retry horizon: every slot ends
/// `failed`, either attempted (its one attempt failed, no retry left) or
/// parked without the attempt when its circuit was still open at its
/// horizon (`attempts` 0, a `gave_up` entry, the error naming the host);
/// every call the host got is an attempt in the ledger, and the failed
/// queue holds exactly one message per slot, whichever way it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_whose_host_stays_down_past_its_horizon_is_parked_failed_without_the_attempt() {
    let dead = Sink::start().await;
    dead.fail_first(usize::MAX, 503);
    let (stack, _metrics_addr, _processes) = one_node_one_worker("gave-up", &WORKER_ENV).await;
    // No retries: the horizon is the longest cool-down (8 s) past the due
    // instant, which a circuit re-opened by failed probes outlives.
    let retry = json!({ "max_retries": 0, "base_delay_ms": 1000, "multiplier": 2.0, "max_delay_ms": 1000 });
    let first = truncate_ms(Utc::now() + TimeDelta::seconds(10));
    let jobs = once_jobs(&stack, &dead, "parked", first, Some(retry)).await;
    let ids: Vec<uuid::Uuid> = jobs.iter().map(|id| id.parse().unwrap()).collect();
    let client = stack.pg.get().await.unwrap();
    // (status, attempts, parked without the attempt, error)
    let rows = wait_for("every slot final", Duration::from_secs(90), || async {
        let rows: Vec<(String, i32, bool, Option<String>)> = client
            .query(
                "SELECT status, attempts, history @> '[{\"event\": \"gave_up\"}]'::jsonb, error
                 FROM scheduled_jobs WHERE job_id = ANY($1)",
                &[&ids],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        (rows.len() == JOBS && rows.iter().all(|r| r.0 == "failed")).then_some(rows)
    })
    .await;
    let parked: Vec<_> = rows.iter().filter(|r| r.2).collect();
    eprintln!("{} of {JOBS} slots parked at their horizon, {} calls to the host", parked.len(), dead.answers().len());
    assert!(!parked.is_empty(), "no slot outlived the circuit's cool-downs: the horizon path did not run");
    for (_, attempts, _, error) in &parked {
        assert_eq!(*attempts, 0, "a parked slot's attempt was not made");
        let error = error.as_deref().unwrap_or_default();
        assert!(error.contains(&dead.addr.to_string()) && error.contains("retry horizon"), "{error}");
    }
    let attempts: i32 = rows.iter().map(|r| r.1).sum();
    assert_eq!(attempts as usize, dead.answers().len(), "every call to the host is an attempt in the ledger");

    // Published to the failed queue before each row was written: all there now.
    use lapin::options::BasicGetOptions;
    let connection = broker::amqp::connect(&testing::amqp_url(), "destinations test").await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let queue = broker::amqp::Topology::new(&stack.cluster).failed_queue;
    let mut in_failed_queue: BTreeMap<String, usize> = BTreeMap::new();
    while let Some(m) = channel.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap() {
        for fire in domain::message::parse_body(&m.delivery.data).unwrap() {
            *in_failed_queue.entry(fire.job_id.to_string()).or_default() += 1;
        }
    }
    let _ = connection.close(200, "done".into()).await;
    assert_eq!(in_failed_queue.keys().cloned().collect::<Vec<_>>(), {
        let mut sorted = jobs.clone();
        sorted.sort();
        sorted
    });
    assert!(in_failed_queue.values().all(|n| *n == 1), "a slot parked twice: {in_failed_queue:?}");
    stack.stop().await;
}

/// With no `WORKER_MAX_PER_HOST`, a worker learns each host's limit from
/// its throughput, on the real stack: a slow receiver that answers any
/// number at once (300 ms each) is given more than the starting 64 at
/// once (the drain time is printed, not asserted); a receiver
/// that serves 16 at once (20 ms each) and queues the rest gains nothing
/// from more and stays near the start. Every slot is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_learns_how_many_deliveries_each_host_takes_at_once() {
    const SLOW: usize = 2_000;
    const NARROW: usize = 1_000;
    let slow = Sink::start().await;
    slow.set_delay(Duration::from_millis(300));
    let narrow = Sink::start().await;
    narrow.serve_at_most(16);
    narrow.set_delay(Duration::from_millis(20));
    // The binary's defaults but for what the test needs to reach loopback.
    let (stack, metrics_addr, _processes) = one_node_one_worker("destinations-limit", &[]).await;

    let due = truncate_ms(Utc::now() + TimeDelta::seconds(10));
    let slow_jobs = herd_on(&stack, &slow, "slow", SLOW, due).await;
    let narrow_jobs = herd_on(&stack, &narrow, "narrow", NARROW, due).await;
    assert!(Utc::now() < due - TimeDelta::seconds(1), "creating the jobs took too long for the test's timing");

    wait_for("every slot delivered", Duration::from_secs(120), || async {
        (slow.received().len() >= SLOW && narrow.received().len() >= NARROW).then_some(())
    })
    .await;
    let slow_host = format!("host=\"{}\"", slow.addr);
    let narrow_host = format!("host=\"{}\"", narrow.addr);
    let learnt = |host: String| {
        let http = stack.http.clone();
        let addr = metrics_addr.clone();
        async move { metric(&http, &addr, "cronshard_worker_destination_limit", &host).await.unwrap() }
    };
    let (slow_limit, narrow_limit) = (learnt(slow_host).await, learnt(narrow_host).await);
    let slow_drain = {
        let times: Vec<_> = slow.received().iter().map(|r| r.received_at).collect();
        *times.iter().max().unwrap() - *times.iter().min().unwrap()
    };
    eprintln!(
        "slow host: {} at once at most, limit {slow_limit}, drained in {} ms; narrow host: {} at once at most, limit {narrow_limit}",
        slow.peak_in_progress(),
        slow_drain.num_milliseconds(),
        narrow.peak_in_progress()
    );
    // A fixed 64 would never have more than 64 at the slow host.
    assert!(slow.peak_in_progress() > 64, "the slow host never had more than 64 at once");
    assert!(slow_limit > 64.0, "the slow host's limit {slow_limit}");
    assert!(slow.peak_in_progress() <= 256, "never past the worker's in-flight limit");
    // How much sooner the burst drains is a benchmark's figure, not this
    // test's: on a loaded runner the drain's wall clock sat on the fixed-64
    // floor (9.4 s) while the peak and the learnt limit above still showed
    // the growth, so only those are asserted.
    // The narrow host's throughput does not grow past 16 at once: a step or
    // two up may be tried on noise, never a climb.
    assert!(narrow_limit <= 100.0, "the narrow host's limit {narrow_limit}");

    let expected = all_succeeded(&stack, slow_jobs.iter().chain(&narrow_jobs)).await;
    let mut received = slow.received();
    received.extend(narrow.received());
    assert_exactly_once(&received, &expected);
    stack.stop().await;
}

/// What a worker holds is capped in bytes: with `WORKER_MAX_HELD_MB=1` a
/// herd published 2 s ahead (about 8 MiB of slots on their way, 5 MiB
/// armed, by the estimate) stays in the broker past the caps: the slots on
/// their way never exceed the cap by more than one message, the armed ones
/// their budget (twice the cap) by no more than the slots that were on
/// their way as it filled, and every slot is still delivered once, each row
/// final.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_holds_no_more_than_its_byte_cap_and_the_rest_waits_in_the_broker() {
    const HERD: usize = 2_000;
    const CAP: f64 = (1 << 20) as f64;
    // A bundle carries at most a few dozen slots of 4 KiB each.
    const ONE_MESSAGE_AT_MOST: f64 = 256.0 * 1024.0;
    let sink = Sink::start().await;
    sink.set_delay(Duration::from_millis(20));
    let (stack, metrics_addr, _processes) =
        one_node_one_worker("destinations-held", &[("WORKER_MAX_HELD_MB", "1")]).await;
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(8));
    let jobs = herd_on(&stack, &sink, "herd", HERD, due).await;
    assert!(Utc::now() < due - TimeDelta::seconds(3), "creating the jobs took too long for the test's timing");

    let (mut peak, mut armed_peak) = (0f64, 0f64);
    while sink.received().len() < HERD {
        assert!(Utc::now() < due + TimeDelta::seconds(120), "not every slot delivered: {}", sink.received().len());
        if let Some(held) = metric_value(&stack.http, &metrics_addr, "cronshard_worker_held_bytes").await {
            peak = peak.max(held);
        }
        if let Some(armed) = metric_value(&stack.http, &metrics_addr, "cronshard_worker_armed_bytes").await {
            armed_peak = armed_peak.max(armed);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("held at most {peak} bytes on their way (cap {CAP}), {armed_peak} armed");
    assert!(peak <= CAP + ONE_MESSAGE_AT_MOST, "held {peak} bytes, cap {CAP}");
    assert!(peak >= CAP / 2.0, "the herd never came near the cap ({peak} bytes): the test shows nothing");
    // Slots taken under the cap arm once their rows start: the armed budget
    // is exceeded by at most what was under the cap then, at the armed
    // charge (2 KiB against 4 KiB, each with its share of the body: 0.6 of
    // a slot's on its way at most, for this test's bodies).
    let armed_at_most = 2.0 * CAP + 0.6 * CAP + ONE_MESSAGE_AT_MOST;
    assert!(armed_peak <= armed_at_most, "armed {armed_peak} bytes, at most {armed_at_most}");
    assert!(armed_peak >= CAP, "the herd never filled the armed budget ({armed_peak} bytes): the test shows nothing");

    let expected = all_succeeded(&stack, jobs.iter()).await;
    assert_exactly_once(&sink.received(), &expected);
    wait_for("nothing held once every message is settled", Duration::from_secs(10), || async {
        let held = metric_value(&stack.http, &metrics_addr, "cronshard_worker_held_bytes").await?;
        let armed = metric_value(&stack.http, &metrics_addr, "cronshard_worker_armed_bytes").await?;
        (held == 0.0 && armed == 0.0).then_some(())
    })
    .await;
    stack.stop().await;
}
