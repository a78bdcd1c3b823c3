//! The callback receiver. Every request to `/hook/...` is recorded with its
//! `X-Cronshard-*` headers and the lateness against its scheduled time;
//! `GET /deliveries` returns the records as JSON.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{any, get};
use chrono::{DateTime, Utc};
use serde::Serialize;

#[derive(clap::Args)]
pub struct SinkArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8099")]
    listen: SocketAddr,
    /// Print each delivery as a JSON line on stdout.
    #[arg(long, default_value_t = true)]
    log: bool,
}

#[derive(Clone, Serialize)]
pub struct Delivery {
    pub execution_id: String,
    pub scheduled_at: String,
    pub attempt: u32,
    pub received_at: DateTime<Utc>,
    pub lateness_ms: i64,
    pub path: String,
}

#[derive(Clone, Default)]
struct Sink {
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    log: bool,
}

fn header(headers: &HeaderMap, name: &str) -> String {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

async fn hook(State(sink): State<Sink>, uri: axum::http::Uri, headers: HeaderMap) -> StatusCode {
    let received_at = Utc::now();
    let scheduled_at = header(&headers, "x-cronshard-scheduled-at");
    let lateness_ms = DateTime::parse_from_rfc3339(&scheduled_at)
        .map(|t| (received_at - t.with_timezone(&Utc)).num_milliseconds())
        .unwrap_or_default();
    let d = Delivery {
        execution_id: header(&headers, "x-cronshard-execution-id"),
        scheduled_at,
        attempt: header(&headers, "x-cronshard-attempt").parse().unwrap_or(0),
        received_at,
        lateness_ms,
        path: uri.path().to_owned(),
    };
    if sink.log {
        println!("{}", serde_json::to_string(&d).unwrap_or_default());
    }
    sink.deliveries.lock().expect("sink lock").push(d);
    StatusCode::OK
}

async fn deliveries(State(sink): State<Sink>) -> Json<Vec<Delivery>> {
    Json(sink.deliveries.lock().expect("sink lock").clone())
}

pub async fn run(args: SinkArgs) -> anyhow::Result<()> {
    let sink = Sink { log: args.log, ..Default::default() };
    let app = Router::new()
        .route("/hook", any(hook))
        .route("/hook/{*rest}", any(hook))
        .route("/deliveries", get(deliveries))
        .with_state(sink);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    eprintln!("sink listening on http://{}/hook", listener.local_addr()?);
    axum::serve(listener, app).with_graceful_shutdown(common::shutdown::signal()).await?;
    Ok(())
}
