//! `apply`: what keeping N jobs in files costs, against what it costs
//! without `POST /v1/apply`, measured in the same run on the same release
//! API and database. Per round, on fresh keys:
//!
//! - creating the N jobs: one apply, against batch creates of 1,000 (the
//!   fastest create the API had before);
//! - applying the same N documents again (every job unchanged, nothing
//!   written), against what a sync script without apply would do: a PUT
//!   of every job (C clients);
//! - an apply in which one document changed, and a dry run of it.
//!
//! Rounds alternate nothing (one build); the medians over rounds are
//! printed as JSON.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// Jobs in the applied set.
    #[arg(long, default_value_t = 1_000)]
    jobs: usize,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Clients of the PUT-every-job baseline.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_database_url: String,
    /// The API binary (use a release build).
    #[arg(long, default_value = "target/release/cronshard-api")]
    api: PathBuf,
}

fn document(round: usize, i: usize, hour: usize) -> Value {
    json!({
        "key": format!("r{round}-job-{i:05}"),
        "name": format!("report {i}"),
        "schedule": { "kind": "cron", "expr": format!("0 {hour} * * *"), "timezone": "Europe/Berlin" },
        "target": { "kind": "http", "url": format!("https://example.invalid/hook/{i}"), "timeout_ms": 5000 },
        "labels": { "team": format!("t{}", i % 10), "round": format!("r{round}") },
    })
}

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<(Duration, Value)> {
    let t = Instant::now();
    let r = http.post(url).json(body).send().await?;
    let status = r.status();
    let answer: Value = r.json().await?;
    anyhow::ensure!(status.is_success(), "{url} answered {status}: {answer}");
    Ok((t.elapsed(), answer))
}

fn expect(answer: &Value, created: u64, changed: u64, unchanged: u64) -> anyhow::Result<()> {
    let s = &answer["summary"];
    let got = (s["created"].as_u64(), s["changed"].as_u64(), s["unchanged"].as_u64());
    anyhow::ensure!(got == (Some(created), Some(changed), Some(unchanged)), "unexpected apply summary {s}");
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub async fn run(args: ApplyArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.api.exists(),
        "{} not found: build with `cargo build --release --workspace --bins`",
        args.api.display()
    );
    let db = crate::benchdb::BenchDb::create(&args.admin_database_url).await?;
    let (mut api, base) = crate::api_bench::start_api(&args.api, &db.url).await?;
    let http = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency).build()?;
    let apply_url = format!("{base}/v1/apply");
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut figures: [Vec<f64>; 6] = Default::default();
    for round in 0..args.rounds {
        // Before: batch creates of the same definitions (without keys).
        let mut batch_took = Duration::ZERO;
        for chunk in (0..args.jobs).collect::<Vec<_>>().chunks(1_000) {
            let jobs: Vec<Value> = chunk
                .iter()
                .map(|i| {
                    let mut d = document(round, *i, 2);
                    d.as_object_mut().expect("a document is an object").remove("key");
                    d["labels"]["round"] = json!(format!("batch-r{round}"));
                    d
                })
                .collect();
            let (took, _) =
                post(&http, &format!("{base}/v1/jobs/batch"), &json!({ "jobs": jobs, "atomic": true })).await?;
            batch_took += took;
        }

        let documents: Vec<Value> = (0..args.jobs).map(|i| document(round, i, 2)).collect();
        let request = json!({ "jobs": documents });
        let (created_took, answer) = post(&http, &apply_url, &request).await?;
        expect(&answer, args.jobs as u64, 0, 0)?;
        let (unchanged_took, answer) = post(&http, &apply_url, &request).await?;
        expect(&answer, 0, 0, args.jobs as u64)?;

        // Without apply, a sync script re-sends every definition.
        let (h, b) = (http.clone(), base.clone());
        let started = Instant::now();
        let total = args.jobs;
        crate::api_bench::drive(total, args.concurrency, move |i| {
            let (http, base) = (h.clone(), b.clone());
            async move {
                let r = http
                    .put(format!("{base}/v1/jobs/default:r{round}-job-{i:05}"))
                    .json(&document(round, i, 2))
                    .send()
                    .await?;
                anyhow::ensure!(r.status() == 200, "PUT answered {}", r.status());
                Ok(())
            }
        })
        .await?;
        let put_took = started.elapsed();

        let mut one_changed = request.clone();
        one_changed["jobs"][args.jobs / 2] = document(round, args.jobs / 2, 5);
        let mut dry = one_changed.clone();
        dry["dry_run"] = json!(true);
        let (dry_took, answer) = post(&http, &apply_url, &dry).await?;
        expect(&answer, 0, 1, args.jobs as u64 - 1)?;
        let (changed_took, answer) = post(&http, &apply_url, &one_changed).await?;
        expect(&answer, 0, 1, args.jobs as u64 - 1)?;

        for (slot, took) in
            [batch_took, created_took, unchanged_took, put_took, changed_took, dry_took].into_iter().enumerate()
        {
            figures[slot].push(ms(took));
        }
        eprintln!(
            "round {round}: batch create {:.0} ms, apply create {:.0} ms, apply unchanged {:.0} ms, \
             PUT every job {:.0} ms, apply one change {:.0} ms, dry run {:.0} ms",
            ms(batch_took),
            ms(created_took),
            ms(unchanged_took),
            ms(put_took),
            ms(changed_took),
            ms(dry_took)
        );
    }
    let _ = api.kill().await;
    db.drop_database().await?;
    let [batch, created, unchanged, put, changed, dry] = figures.map(median);
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "jobs": args.jobs,
            "rounds": args.rounds,
            "median_ms": {
                "batch_create": batch,
                "apply_create": created,
                "apply_unchanged": unchanged,
                "put_every_job": put,
                "apply_one_changed": changed,
                "apply_dry_run_one_changed": dry,
            },
            "apply_create_over_batch_create": created / batch,
            "apply_unchanged_over_put_every_job": unchanged / put,
        }))?
    );
    Ok(())
}
