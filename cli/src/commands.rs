//! What each subcommand asks the API and how it shows the answer. Each
//! returns the text for stdout; a failure carries its exit code.

mod alerts;
mod apply;
mod audit;
mod backfills;
mod calendars;
mod channels;
pub mod config;
mod executions;
mod jobs;
mod signing_keys;

use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::args::{Command, Paging, Preview};
use crate::client::{Api, Body, Reply};
use crate::failure::{Exit, Failure, Result};
use crate::input;
use crate::output::{self, Format};

/// A command's text for stdout and its exit code: 0, but for a `diff`
/// that found differences.
pub struct Done {
    pub out: String,
    pub exit: Exit,
}

impl From<String> for Done {
    fn from(out: String) -> Done {
        Done { out, exit: Exit::Ok }
    }
}

/// What every command needs: the API, the output format, the namespace.
pub struct Ctx {
    pub api: Api,
    pub format: Format,
    pub namespace: Option<String>,
}

impl Ctx {
    /// An answer in the chosen format, `table` making the human view.
    fn show(&self, reply: &Reply, table: impl FnOnce(&Value) -> String) -> Result<String> {
        let value = reply.json()?;
        output::render(self.format, &reply.text, &value, table)
    }

    /// A whole listing (`{items}`, no paging): with a namespace given, its
    /// items only (the listing is of every namespace the token may see);
    /// `-o json` is then the same document holding those items.
    fn show_items(&self, reply: &Reply, table: impl FnOnce(&[Value]) -> String) -> Result<String> {
        let page = reply.json()?;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        let Some(namespace) = &self.namespace else {
            return output::render(self.format, &reply.text, &page, |_| table(&items));
        };
        let items: Vec<Value> = items.into_iter().filter(|item| item["namespace"] == namespace.as_str()).collect();
        let shown = json!({ "items": items });
        output::render(self.format, &shown.to_string(), &shown, |_| table(&items))
    }

    /// An answer without a body (204): a line for people, nothing for scripts.
    fn done(&self, message: String) -> String {
        match self.format {
            Format::Table => format!("{message}\n"),
            Format::Json | Format::Yaml => String::new(),
        }
    }

    /// The id of the job `job` names (its id, key or `namespace:key`), for
    /// a request that takes ids only (an alert rule's `jobs`; paths and
    /// filters take keys themselves): an id as it is; a key as the API
    /// resolves it in paths, the live job with it, else the deleted job that
    /// last had it (its history answers for both).
    async fn job_id(&self, job: &str) -> Result<String> {
        if looks_like_id(job) {
            return Ok(job.to_owned());
        }
        let history = self.api.get(&["jobs", job, "versions"], &[]).await?.json()?;
        history["job_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| Failure::other(format!("the API named no job id for {job:?}")))
    }

    /// `?namespace=` when one was given.
    fn namespace_query(&self) -> Vec<(&'static str, String)> {
        self.namespace.iter().map(|n| ("namespace", n.clone())).collect()
    }

    /// A listing: one page, or with `--all` every page (next_cursor
    /// followed), shown as one page holding every item.
    async fn list(
        &self,
        segments: &[&str],
        mut query: Vec<(&'static str, String)>,
        paging: &Paging,
        table: impl FnOnce(&[Value]) -> String,
    ) -> Result<String> {
        if let Some(limit) = paging.limit {
            query.push(("limit", limit.to_string()));
        }
        if let Some(cursor) = &paging.cursor {
            query.push(("cursor", cursor.clone()));
        }
        let first = self.api.get(segments, &query).await?;
        let mut page = first.json()?;
        if !paging.all {
            if self.format == Format::Table
                && let Some(cursor) = page["next_cursor"].as_str()
            {
                eprintln!("(more: --cursor '{}' for the next page, or --all)", crate::text::escape(cursor));
            }
            let items = page["items"].as_array().cloned().unwrap_or_default();
            return output::render(self.format, &first.text, &page, |_| table(&items));
        }
        let mut items = page["items"].as_array().cloned().unwrap_or_default();
        while let Some(cursor) = page["next_cursor"].as_str().map(str::to_owned) {
            let mut q = query.clone();
            q.retain(|(k, _)| *k != "cursor");
            q.push(("cursor", cursor));
            page = self.api.get(segments, &q).await?.json()?;
            items.extend(page["items"].as_array().cloned().unwrap_or_default());
        }
        let all = json!({ "items": items, "next_cursor": null });
        output::render(self.format, &all.to_string(), &all, |_| table(&items))
    }
}

pub async fn run(ctx: &Ctx, command: Command) -> Result<Done> {
    let out = match command {
        Command::Jobs(c) => jobs::run(ctx, c).await,
        Command::Apply(a) => return apply::apply(ctx, a.documents, a.dry_run).await,
        Command::Diff(documents) => return apply::diff(ctx, documents).await,
        Command::Executions(c) => executions::run(ctx, c).await,
        Command::Calendars(c) => calendars::run(ctx, c).await,
        Command::Backfills(c) => backfills::run(ctx, c).await,
        Command::SigningKeys(c) => signing_keys::run(ctx, c).await,
        Command::Audit(list) => audit::run(ctx, list).await,
        Command::Channels(c) => channels::run(ctx, c).await,
        Command::Alerts(c) => alerts::run(ctx, c).await,
        Command::Cluster => cluster(ctx).await,
        Command::Preview(p) => preview(ctx, p).await,
        Command::Completions { .. } | Command::Config(_) => {
            unreachable!("completions and the config file need no API and are run by main")
        }
    };
    out.map(Done::from)
}

/// The shape of a UUID (8-4-4-4-12 hex digits): a key never has it (the
/// API refuses such keys), so it is an id and needs no lookup.
fn looks_like_id(job: &str) -> bool {
    let groups: Vec<&str> = job.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

async fn cluster(ctx: &Ctx) -> Result<String> {
    let reply = ctx.api.get(&["cluster"], &[]).await?;
    ctx.show(&reply, |c| {
        let head = output::fields(&[
            ("CLUSTER", output::text(&c["cluster"])),
            (
                "REDIS SHARDS UP",
                format!("{}/{}", output::text(&c["redis_shards_up"]), output::text(&c["redis_shards"])),
            ),
            ("LIVE NODES", output::text(&c["live_nodes"])),
        ]);
        let nodes = c["nodes"].as_array().map(Vec::as_slice).unwrap_or_default();
        let rows: Vec<Vec<String>> = nodes
            .iter()
            .map(|n| vec![output::text(&n["node_id"]), output::text(&n["owned_jobs"]), output::utc(&n["heartbeat_at"])])
            .collect();
        format!("{head}\n\n{}", output::table(&["NODE", "OWNED JOBS", "HEARTBEAT (UTC)"], &rows))
    })
}

async fn preview(ctx: &Ctx, p: Preview) -> Result<String> {
    let mut request = Map::new();
    if let Some(expr) = p.cron {
        request.insert("schedule".into(), json!({ "kind": "cron", "expr": expr, "timezone": p.tz }));
    } else if let Some(every_ms) = p.every_ms {
        request.insert("schedule".into(), json!({ "kind": "interval", "every_ms": every_ms }));
    } else if let Some(file) = p.file {
        let doc = input::read_object(&file, "a schedule or a preview request")?;
        // A whole request has a `schedule`; anything else is the schedule.
        if doc.contains_key("schedule") {
            request = doc;
        } else {
            request.insert("schedule".into(), Value::Object(doc));
        }
    }
    if let Some(count) = p.count {
        request.insert("count".into(), json!(count));
    }
    if let Some(from) = p.from {
        request.insert("from".into(), json!(from));
    }
    let reply = ctx
        .api
        .send(Method::POST, &["schedules", "preview"], &[], Some(Body::Json(Value::Object(request))), None)
        .await?;
    ctx.show(&reply, |v| {
        let mut out = format!("from {}\n", output::utc(&v["from"]));
        if !v["note"].is_null() {
            out.push_str(&format!("note: {}\n", output::text(&v["note"])));
        }
        out.push('\n');
        out.push_str(&output::fire_times(&v["fire_times"]));
        out
    })
}
