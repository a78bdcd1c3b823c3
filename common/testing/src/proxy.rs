//! A loopback TCP proxy a test or a scenario can cut, restore or slow down:
//! the way to take one process off a service (or make the service slow for
//! it alone) without touching the service or the other processes.
//!
//! - [`Mode::Pass`]: bytes are copied both ways as they come.
//! - [`Mode::Cut`]: every open connection is dropped (both ends) and new
//!   ones are accepted and closed at once, as a dead link answers.
//! - [`Mode::Delay`]: every chunk read from either side is written to the
//!   other side `delay` after it was read, in order, so each direction has
//!   that much added latency and the throughput is not limited. The mode is
//!   read per chunk: open connections slow down and recover with it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Cut,
    Delay(Duration),
    /// A network partition rather than a closed port: connections stay
    /// open and new ones are accepted, but nothing crosses either way, so
    /// the client meets timeouts, not errors. Healing lets traffic through
    /// again on the same connections (what was sent meanwhile is lost).
    Partition,
}

/// A running proxy; it stops (and drops its connections) when dropped.
pub struct TcpProxy {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    stop: CancellationToken,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, rx) = watch::channel(Mode::Pass);
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = token.cancelled() => return,
                };
                let Ok((inbound, _)) = accepted else { continue };
                if *rx.borrow() == Mode::Cut {
                    continue; // dropping the socket closes the client's connection
                }
                tokio::spawn(serve(inbound, upstream, rx.clone(), token.child_token()));
            }
        });
        Ok(Self { addr, mode, stop })
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn cut(&self) {
        self.set(Mode::Cut);
    }

    pub fn restore(&self) {
        self.set(Mode::Pass);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(inbound: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>, stop: CancellationToken) {
    // A connection made during a partition reaches nothing until it heals.
    tokio::select! {
        r = mode.wait_for(|m| *m != Mode::Partition) => if r.is_err() { return },
        _ = stop.cancelled() => return,
    }
    let Ok(outbound) = TcpStream::connect(upstream).await else { return };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_r, in_w) = inbound.into_split();
    let (out_r, out_w) = outbound.into_split();
    let up = pipe(in_r, out_w, mode.clone());
    let down = pipe(out_r, in_w, mode.clone());
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = mode.wait_for(|m| *m == Mode::Cut) => {} // cut: drop both ends
        _ = stop.cancelled() => {}
    }
}

/// One direction: a reader stamps each chunk with the instant it may be
/// written (now + the delay in force), a writer waits for that instant.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: watch::Receiver<Mode>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let delay = match *mode.borrow() {
                Mode::Delay(d) => d,
                Mode::Partition => continue,
                _ => Duration::ZERO,
            };
            if tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    // The writer drains what the reader queued before the reader's end
    // closed the channel; a failed write drops the receiver, which ends the
    // reader at its next chunk.
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip(c: &mut TcpStream) -> Option<Duration> {
        let started = Instant::now();
        c.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).await.ok()?;
        assert_eq!(&buf, b"ping");
        Some(started.elapsed())
    }

    /// An echo server behind the proxy: pass, delay (both directions add
    /// up) and cut (the open connection is closed, a new one refused).
    #[tokio::test]
    async fn passes_delays_and_cuts() {
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = echo.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let proxy = TcpProxy::start(echo_addr).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        assert!(round_trip(&mut c).await.unwrap() < Duration::from_millis(100));
        proxy.set(Mode::Delay(Duration::from_millis(150)));
        let slow = round_trip(&mut c).await.unwrap();
        assert!(slow >= Duration::from_millis(300), "{slow:?}");
        proxy.restore();
        assert!(round_trip(&mut c).await.unwrap() < Duration::from_millis(100));
        // A partition: the open connection and a new one stay open, silent.
        proxy.set(Mode::Partition);
        let silent = tokio::time::timeout(Duration::from_millis(300), round_trip(&mut c)).await;
        assert!(silent.is_err(), "an answer crossed the partition: {silent:?}");
        let mut during = TcpStream::connect(proxy.addr).await.unwrap();
        let silent = tokio::time::timeout(Duration::from_millis(300), round_trip(&mut during)).await;
        assert!(silent.is_err(), "a connection made during the partition was answered: {silent:?}");
        proxy.restore();
        // Healed: the connection made during it gets through, nothing was closed.
        assert!(round_trip(&mut during).await.is_some(), "the connection made during the partition is dead");
        proxy.cut();
        assert!(round_trip(&mut c).await.is_none(), "the open connection is closed");
        let mut fresh = TcpStream::connect(proxy.addr).await.unwrap();
        assert!(round_trip(&mut fresh).await.is_none(), "a new connection is closed at once");
        proxy.restore();
        let mut again = TcpStream::connect(proxy.addr).await.unwrap();
        assert!(round_trip(&mut again).await.is_some());
    }
}
