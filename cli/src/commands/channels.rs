//! `cronshard channels ...`: `/v1/alert-channels`, where alert notices go.
//! A channel's address is a secret (a Slack incoming-webhook URL carries
//! its credential): it is read from a flag, the environment or stdin, sent
//! in the request's body and never printed; the API shows it as
//! `scheme://host/…` only.

use std::io::Read;

use reqwest::Method;
use serde_json::{Value, json};

use super::Ctx;
use crate::args::{ChannelCreate, Channels};
use crate::client::Body;
use crate::failure::{Failure, Result};
use crate::output::{self, fields, text, utc};

pub async fn run(ctx: &Ctx, command: Channels) -> Result<String> {
    match command {
        Channels::Create(new) => create(ctx, new).await,
        Channels::List => {
            let reply = ctx.api.get(&["alert-channels"], &[]).await?;
            ctx.show_items(&reply, channels_table)
        }
        Channels::Delete { id } => {
            ctx.api.send(Method::DELETE, &["alert-channels", &id], &[], None, None).await?;
            Ok(ctx.done(format!("channel {id} deleted")))
        }
    }
}

async fn create(ctx: &Ctx, new: ChannelCreate) -> Result<String> {
    let url = if new.webhook_url == "-" { read_stdin()? } else { new.webhook_url };
    if url.is_empty() {
        return Err(Failure::invalid("--webhook-url (CRONSHARD_CHANNEL_URL) is empty"));
    }
    let mut body = json!({ "name": new.name, "kind": new.kind, "url": url });
    if let Some(n) = new.max_per_minute {
        body["max_per_minute"] = json!(n);
    }
    if let Some(namespace) = &ctx.namespace {
        body["namespace"] = json!(namespace);
    }
    let reply = ctx.api.send(Method::POST, &["alert-channels"], &[], Some(Body::Json(body)), None).await?;
    ctx.show(&reply, channel_view)
}

/// The address from stdin (`--webhook-url -`), without the line break
/// `echo` or a file ends it with.
fn read_stdin() -> Result<String> {
    let mut url = String::new();
    std::io::stdin()
        .read_to_string(&mut url)
        .map_err(|e| Failure::invalid(format!("--webhook-url -: cannot read stdin: {e}")))?;
    Ok(url.trim().to_owned())
}

fn channel_view(c: &Value) -> String {
    fields(&[
        ("ID", text(&c["id"])),
        ("NAME", text(&c["name"])),
        ("NAMESPACE", text(&c["namespace"])),
        ("KIND", text(&c["kind"])),
        ("URL", text(&c["url"])),
        ("MAX PER MINUTE", text(&c["max_per_minute"])),
        ("CREATED (UTC)", utc(&c["created_at"])),
    ])
}

fn channels_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|c| {
            vec![
                text(&c["id"]),
                text(&c["namespace"]),
                text(&c["name"]),
                text(&c["kind"]),
                text(&c["url"]),
                text(&c["max_per_minute"]),
                utc(&c["created_at"]),
            ]
        })
        .collect();
    output::table(&["ID", "NAMESPACE", "NAME", "KIND", "URL", "PER MINUTE", "CREATED (UTC)"], &rows)
}
