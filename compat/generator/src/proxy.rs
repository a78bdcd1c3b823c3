//! A loopback TCP proxy that keeps what each connection's client sent: the
//! corpus records the bytes a release's code puts on the wire (AMQP
//! declarations and publishes, Postgres statements) without asking that
//! code how it builds them.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What one connection's client sent.
type Sent = Arc<Mutex<Vec<u8>>>;

/// A running recording proxy; it stops accepting when dropped.
pub struct Recorder {
    pub addr: SocketAddr,
    streams: Arc<Mutex<Vec<Sent>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let streams: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let all = streams.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let sent: Sent = Arc::default();
                all.lock().expect("not poisoned").push(sent.clone());
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(upstream).await else { return };
                    let (mut client_read, mut client_write) = inbound.into_split();
                    let (mut server_read, mut server_write) = outbound.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = match client_read.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            // Kept before it is forwarded: once the server
                            // has answered, what it answered is recorded.
                            sent.lock().expect("not poisoned").extend_from_slice(&buf[..n]);
                            if server_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = server_write.shutdown().await;
                    };
                    let down = async {
                        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                        let _ = client_write.shutdown().await;
                    };
                    tokio::join!(up, down);
                });
            }
        });
        Ok(Self { addr, streams, accept })
    }

    /// What each connection's client has sent so far, in the order they connected.
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.streams.lock().expect("not poisoned").iter().map(|s| s.lock().expect("not poisoned").clone()).collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The host and port of a `scheme://user@host:port/...` URL, resolved.
pub fn upstream_of(url: &str) -> anyhow::Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    host_port.to_socket_addrs()?.next().ok_or_else(|| anyhow::anyhow!("no address for {host_port}"))
}

/// `url` with its host and port replaced by `addr`.
pub fn via(url: &str, addr: SocketAddr) -> String {
    let (scheme, after_scheme) = url.split_once("://").unwrap_or(("", url));
    let end = after_scheme.find(['/', '?']).unwrap_or(after_scheme.len());
    let (authority, path) = after_scheme.split_at(end);
    let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@")).unwrap_or_default();
    format!("{scheme}://{user}{addr}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_pointed_at_the_proxy() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(via("amqp://guest:guest@127.0.0.1:5672/%2f", addr), "amqp://guest:guest@127.0.0.1:4000/%2f");
        assert_eq!(via("postgres://postgres@127.0.0.1:5432/db?x=1", addr), "postgres://postgres@127.0.0.1:4000/db?x=1");
        assert_eq!(upstream_of("postgres://postgres@127.0.0.1:5432/db").unwrap().port(), 5432);
    }
}
