//! The callback receiver as a standalone process (used by `deploy/up.sh`):
//! logs each delivery as a JSON line (execution id, scheduled time, attempt,
//! lateness, path) and serves what it got at `GET /deliveries`.

use std::net::SocketAddr;

use crate::receiver::Receiver;

#[derive(clap::Args)]
pub struct SinkArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8099")]
    listen: SocketAddr,
    /// Print each delivery as a JSON line on stdout.
    #[arg(long, default_value_t = true)]
    log: bool,
}

pub async fn run(args: SinkArgs) -> anyhow::Result<()> {
    let (receiver, server) = Receiver::start(args.listen, args.log, runtime::shutdown::signal()).await?;
    eprintln!("sink listening on {}", receiver.hook_url());
    server.await??;
    Ok(())
}
