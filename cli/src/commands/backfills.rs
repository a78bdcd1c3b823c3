//! `cronshard jobs backfill` and `cronshard backfills ...`: a job's past
//! slots run on request (`POST /v1/jobs/{id}/backfill`), and
//! `/v1/backfills` to follow and cancel them.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use super::Ctx;
use crate::args::{BackfillCreate, BackfillOrder, BackfillOverlap, BackfillSlots, Backfills};
use crate::client::{Body, Reply};
use crate::failure::{Exit, Failure, Result};
use crate::output::{self, fields, text, utc};

/// How often `--wait` reads the progress: often enough for a person to
/// follow, light on the API (each read counts the backfill's ledger rows).
const WAIT_POLL: Duration = Duration::from_secs(2);

/// Slots a dry run's table lists (`-o json` has the API's first 1,000).
const DRY_RUN_SHOWN: usize = 20;

pub async fn run(ctx: &Ctx, command: Backfills) -> Result<String> {
    match command {
        Backfills::List { job, limit } => {
            let mut query = Vec::new();
            if let Some(job) = job {
                query.push(("job", job));
            }
            if let Some(limit) = limit {
                query.push(("limit", limit.to_string()));
            }
            let reply = ctx.api.get(&["backfills"], &query).await?;
            ctx.show(&reply, |page| backfills_table(page["items"].as_array().map(Vec::as_slice).unwrap_or_default()))
        }
        Backfills::Get { id } => {
            let reply = ctx.api.get(&["backfills", &id], &[]).await?;
            ctx.show(&reply, backfill_view)
        }
        Backfills::Cancel { id } => {
            let reply = ctx.api.send(Method::POST, &["backfills", &id, "cancel"], &[], None, None).await?;
            ctx.show(&reply, backfill_view)
        }
    }
}

pub async fn create(ctx: &Ctx, b: BackfillCreate) -> Result<String> {
    let mut body = json!({ "from": b.from, "to": b.to });
    if let Some(slots) = b.slots {
        body["slots"] = json!(match slots {
            BackfillSlots::Missing => "missing",
            BackfillSlots::Failed => "failed",
            BackfillSlots::All => "all",
        });
    }
    if let Some(order) = b.order {
        body["order"] = json!(match order {
            BackfillOrder::OldestFirst => "oldest_first",
            BackfillOrder::NewestFirst => "newest_first",
        });
    }
    if let Some(rate) = b.rate {
        body["rate_per_second"] = json!(rate);
    }
    if let Some(concurrency) = b.concurrency {
        body["max_concurrency"] = json!(concurrency);
    }
    if let Some(overlap) = b.overlap {
        body["overlap"] = json!(match overlap {
            BackfillOverlap::Allow => "allow",
            BackfillOverlap::Forbid => "forbid",
            BackfillOverlap::Replace => "replace",
        });
    }
    if b.dry_run {
        body["dry_run"] = json!(true);
    }
    let reply = ctx.api.send(Method::POST, &["jobs", &b.id, "backfill"], &[], Some(Body::Json(body)), None).await?;
    if b.dry_run {
        return ctx.show(&reply, plan_view);
    }
    if !b.wait {
        return ctx.show(&reply, backfill_view);
    }
    let made = reply.json()?;
    let id = made["id"].as_str().ok_or_else(|| Failure::other("the backfill as made has no id"))?.to_owned();
    let last = wait(ctx, &id, made, b.timeout).await?;
    ctx.show(&last, backfill_view)
}

/// Reads the backfill every [`WAIT_POLL`] until it is no longer running,
/// printing its progress on stderr whenever it changes (stdout stays the
/// one document shown at the end); a failure past `timeout`.
async fn wait(ctx: &Ctx, id: &str, made: Value, timeout: Duration) -> Result<Reply> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut shown = progress_line(&made);
    eprintln!("{shown}");
    loop {
        tokio::time::sleep_until((tokio::time::Instant::now() + WAIT_POLL).min(deadline)).await;
        let reply = match ctx.api.get(&["backfills", id], &[]).await {
            Ok(reply) => Some(reply),
            // A wait outlives a restart of the API or a network blip: said
            // on stderr, tried again at the next poll.
            Err(failure) if failure.exit == Exit::Unavailable => {
                eprintln!("{failure} (trying again)");
                None
            }
            Err(failure) => return Err(failure),
        };
        if let Some(reply) = reply {
            let b = reply.json()?;
            let line = progress_line(&b);
            if line != shown {
                eprintln!("{line}");
                shown = line;
            }
            if b["state"] != "running" {
                return Ok(reply);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Failure::new(
                Exit::Other,
                format!(
                    "backfill {id} is still running after {}s; it goes on (`cronshard backfills get {id}` shows it, \
                     `cronshard backfills cancel {id}` stops it)",
                    timeout.as_secs()
                ),
            ));
        }
    }
}

/// The slots handled of those planned, and how its runs stand.
fn progress(b: &Value) -> String {
    let p = &b["progress"];
    let handled = p["planned"].as_u64().unwrap_or(0).saturating_sub(p["remaining"].as_u64().unwrap_or(0));
    format!(
        "{handled}/{} slots handled: {} in flight, {} succeeded, {} failed, {} skipped, {} passed over",
        text(&p["planned"]),
        text(&p["in_flight"]),
        text(&p["succeeded"]),
        text(&p["failed"]),
        text(&p["skipped"]),
        text(&p["passed_over"]),
    )
}

fn progress_line(b: &Value) -> String {
    format!("backfill {} {}: {}", text(&b["id"]), text(&b["state"]), progress(b))
}

/// One backfill, field by field.
fn backfill_view(b: &Value) -> String {
    fields(&[
        ("ID", text(&b["id"])),
        ("JOB", text(&b["job_id"])),
        ("NAMESPACE", text(&b["namespace"])),
        ("FROM (UTC)", utc(&b["from"])),
        ("TO (UTC)", utc(&b["to"])),
        ("SLOTS", text(&b["slots"])),
        ("ORDER", text(&b["order"])),
        ("RATE", format!("{} per second", text(&b["rate_per_second"]))),
        ("CONCURRENCY", text(&b["max_concurrency"])),
        ("OVERLAP", b["overlap"].as_str().map_or("the job's".to_owned(), str::to_owned)),
        ("STATE", text(&b["state"])),
        ("PROGRESS", progress(b)),
        ("CREATED (UTC)", utc(&b["created_at"])),
        ("CREATED BY", text(&b["created_by"])),
        ("FINISHED (UTC)", utc(&b["finished_at"])),
    ])
}

/// A dry run: the counts, then the first slots it would run.
fn plan_view(plan: &Value) -> String {
    let slots = plan["slots"].as_array().map(Vec::as_slice).unwrap_or_default();
    let would = plan["would_run"].as_u64().unwrap_or(0);
    let mut out = format!(
        "dry run: {} slots of job {} in the range, {would} would run\n",
        text(&plan["planned"]),
        text(&plan["job_id"])
    );
    for at in slots.iter().take(DRY_RUN_SHOWN) {
        out += &format!("  {}\n", utc(at));
    }
    let rest = would.saturating_sub(DRY_RUN_SHOWN.min(slots.len()) as u64);
    if rest > 0 {
        out += &format!("  ({rest} more; -o json lists the first 1,000)\n");
    }
    out
}

fn backfills_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|b| {
            let p = &b["progress"];
            let handled = p["planned"].as_u64().unwrap_or(0).saturating_sub(p["remaining"].as_u64().unwrap_or(0));
            vec![
                text(&b["id"]),
                text(&b["job_id"]),
                utc(&b["from"]),
                utc(&b["to"]),
                text(&b["slots"]),
                text(&b["state"]),
                format!("{handled}/{}", text(&p["planned"])),
                text(&p["in_flight"]),
                text(&p["succeeded"]),
                text(&p["failed"]),
                text(&p["skipped"]),
                utc(&b["created_at"]),
            ]
        })
        .collect();
    output::table(
        &[
            "ID",
            "JOB",
            "FROM (UTC)",
            "TO (UTC)",
            "SLOTS",
            "STATE",
            "HANDLED",
            "IN FLIGHT",
            "SUCCEEDED",
            "FAILED",
            "SKIPPED",
            "CREATED (UTC)",
        ],
        &rows,
    )
}
