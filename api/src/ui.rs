//! The operator console: static files (`api/ui/`) compiled into the binary
//! and served under `/ui`, outside the `/v1` token layer. The page itself
//! holds no data; every call it makes to `/v1` carries the operator's token.
//!
//! Only the files listed in `ASSETS` exist (nothing is read from disk, so
//! no path can escape); an unknown name is the API's 404. Every response
//! carries a strict Content-Security-Policy (scripts and styles only from
//! this origin, no inline code, no framing) and `Cache-Control: no-cache`
//! with an `ETag`: the names are not content-hashed, so a browser
//! revalidates (a 304 on loopback) rather than run stale code after an upgrade.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// Where the console is served.
pub const UI_PATH: &str = "/ui";

/// No script, style, image or connection from anywhere but this origin,
/// no inline script or style attribute, no plugin, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// A file of the console.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset { name: $name, content_type: $content_type, body: include_str!(concat!("../ui/", $name)) }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of `api/ui/`; a new file must be added here.
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("status.js", JS),
    asset!("jobs.js", JS),
    asset!("job-form.js", JS),
    asset!("job.js", JS),
    asset!("executions.js", JS),
    asset!("failures.js", JS),
    asset!("cluster.js", JS),
    asset!("chart.js", JS),
    asset!("preview.js", JS),
    asset!("signing-keys.js", JS),
    asset!("history.js", JS),
    asset!("audit.js", JS),
    asset!("alerts.js", JS),
    asset!("backfills.js", JS),
];

/// Each asset's strong `ETag` (a hash of its bytes), computed once.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| {
            let digest = Sha256::digest(a.body.as_bytes());
            let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("\"{hex}\"")
        })
        .collect()
});

fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some(index) = ASSETS.iter().position(|a| a.name == name) else {
        return ApiError::NotFound(format!("no console file {name:?}")).into_response();
    };
    let asset = &ASSETS[index];
    let etag = &ETAGS[index];
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { asset.body.into_response() };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, v);
    }
    secure(headers);
    response
}

/// The headers every console response carries.
fn secure(headers: &mut HeaderMap) {
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// `GET /ui`: the console lives at `/ui/` (relative asset URLs resolve there).
#[utoipa::path(
    get,
    path = "/ui",
    tag = "console",
    responses((status = 308, description = "Redirect to `/ui/`")),
)]
pub async fn redirect() -> Response {
    let mut response = Redirect::permanent("/ui/").into_response();
    secure(response.headers_mut());
    response
}

/// `GET /ui/`: the console's page (hash routes: `#/jobs`, `#/jobs/{id}`, ...).
#[utoipa::path(
    get,
    path = "/ui/",
    tag = "console",
    responses(
        (status = 200, description = "The console's HTML page; no token needed (its data calls send one)", body = String, content_type = "text/html"),
        (status = 304, description = "Not modified (`If-None-Match` names the current `ETag`)"),
    ),
)]
pub async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

/// `GET /ui/{asset}`: a script, style sheet or icon of the console.
#[utoipa::path(
    get,
    path = "/ui/{asset}",
    tag = "console",
    params(("asset" = String, Path, description = "A file name, e.g. `app.js`")),
    responses(
        (status = 200, description = "The file, with its content type", body = String, content_type = "text/javascript"),
        (status = 304, description = "Not modified (`If-None-Match` names the current `ETag`)"),
        (status = 404, description = "No such console file", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    serve(&name, &headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every module a script imports is served (a missing entry in
    /// `ASSETS` would break the page only in a browser).
    #[test]
    fn every_imported_module_is_an_asset() {
        for asset in ASSETS.iter().filter(|a| a.name.ends_with(".js") || a.name.ends_with(".html")) {
            for part in asset.body.split("./").skip(1) {
                let Some(end) = part.find(['\'', '"']) else { continue };
                let name = &part[..end];
                if name.ends_with(".js") || name.ends_with(".css") || name.ends_with(".svg") {
                    assert!(ASSETS.iter().any(|a| a.name == name), "{} refers to {name}, not in ASSETS", asset.name);
                }
            }
        }
    }
}
