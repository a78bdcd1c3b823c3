//! `cronshard signing-keys ...`: `/v1/signing-keys`, the secrets that sign
//! a namespace's deliveries. A secret is printed once, by `create` or
//! `rotate`, and never again.

use reqwest::Method;
use serde_json::{Value, json};

use super::Ctx;
use crate::args::SigningKeys;
use crate::client::Body;
use crate::failure::Result;
use crate::output::{self, fields, text, utc};

pub async fn run(ctx: &Ctx, command: SigningKeys) -> Result<String> {
    let ns = ctx.namespace_query();
    match command {
        SigningKeys::Create => {
            let reply = ctx.api.send(Method::POST, &["signing-keys"], &ns, None, None).await?;
            ctx.show(&reply, new_key_view)
        }
        SigningKeys::Rotate { overlap_seconds } => {
            let body = Some(Body::Json(json!({ "overlap_seconds": overlap_seconds })));
            let reply = ctx.api.send(Method::POST, &["signing-keys", "rotate"], &ns, body, None).await?;
            ctx.show(&reply, new_key_view)
        }
        SigningKeys::List => {
            let reply = ctx.api.get(&["signing-keys"], &ns).await?;
            ctx.show(&reply, |list| keys_table(list["keys"].as_array().map_or(&[], Vec::as_slice)))
        }
        SigningKeys::Revoke { id } => {
            let reply = ctx.api.send(Method::DELETE, &["signing-keys", &id], &ns, None, None).await?;
            ctx.show(&reply, key_view)
        }
    }
}

fn key_view(k: &Value) -> String {
    fields(&[
        ("ID", text(&k["id"])),
        ("STATE", text(&k["state"])),
        ("CREATED (UTC)", utc(&k["created_at"])),
        ("CREATED BY", text(&k["created_by"])),
        ("EXPIRES (UTC)", utc(&k["expires_at"])),
        ("REVOKED (UTC)", utc(&k["revoked_at"])),
        ("REVOKED BY", text(&k["revoked_by"])),
    ])
}

/// A new key: the secret first, with the warning that it is shown once.
fn new_key_view(k: &Value) -> String {
    format!(
        "{}SECRET: {}\n\nGive the secret to the receiver's Standard Webhooks verifier now: it is not shown again.\n",
        key_view(k),
        text(&k["secret"])
    )
}

fn keys_table(keys: &[Value]) -> String {
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            vec![
                text(&k["id"]),
                text(&k["state"]),
                utc(&k["created_at"]),
                text(&k["created_by"]),
                utc(&k["expires_at"]),
                utc(&k["revoked_at"]),
            ]
        })
        .collect();
    output::table(&["ID", "STATE", "CREATED (UTC)", "CREATED BY", "EXPIRES (UTC)", "REVOKED (UTC)"], &rows)
}
