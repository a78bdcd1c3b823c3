//! SIGINT/SIGTERM handling shared by every binary.

use tokio_util::sync::CancellationToken;

/// Resolves on Ctrl-C or SIGTERM (what Kubernetes sends before killing a pod).
pub async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// A token cancelled by the first signal.
pub fn token_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let child = token.clone();
    tokio::spawn(async move {
        signal().await;
        tracing::info!("shutdown signal received");
        child.cancel();
    });
    token
}
