//! The HTTP server under the router. `axum::serve` runs hyper without a
//! timer, so a connection may take forever to send a request's head: a client
//! trickling one header every few seconds holds a connection (and its memory)
//! for as long as it likes. This server is the same HTTP/1.1 connection with
//! a timer and a header-read timeout, and the same graceful shutdown (no new
//! connections, idle ones closed, requests in flight finished).

use std::future::Future;
use std::io;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Bounds on what a client may take of a connection, below the router's own
/// (body size, request time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Time a client has to send a request's head (request line and every
    /// header), counted from when the server starts waiting for it: when the
    /// connection opens, and on a keep-alive connection when the previous
    /// response has been written. It is therefore also how long a keep-alive
    /// connection may sit idle. Past it the connection is closed.
    pub header_read_timeout: Duration,
}

impl Limits {
    pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
}

impl Default for Limits {
    fn default() -> Self {
        Limits { header_read_timeout: Self::DEFAULT_HEADER_READ_TIMEOUT }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting,
/// closes idle connections and waits for the requests in flight.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that went away, or one closed for its slow head: the
            // client's business, not the server's.
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection closed with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// As axum::serve does: a connection reset before it was accepted is the
/// client's; anything else (out of file descriptors) is waited out.
async fn accept_failed(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
