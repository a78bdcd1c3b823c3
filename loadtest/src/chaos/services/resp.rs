//! A minimal RESP2 client: the few commands the services ask redis-server
//! and Sentinel (`ROLE`, `INFO`, `SENTINEL ...`, and the tests' `SET`,
//! `WAIT`, `GET`), without a Redis dependency in the load generator.

use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    Simple(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Option<Vec<Resp>>),
}

impl Resp {
    pub fn text(&self) -> Option<&str> {
        match self {
            Resp::Simple(s) | Resp::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    pub fn items(&self) -> &[Resp] {
        match self {
            Resp::Array(Some(items)) => items,
            _ => &[],
        }
    }

    /// `field value field value ...` (`SENTINEL MASTER`'s answer): the value of `field`.
    pub fn field(&self, field: &str) -> Option<&str> {
        self.items().chunks(2).find(|kv| kv[0].text() == Some(field)).and_then(|kv| kv.get(1)?.text())
    }
}

/// Sends one command to `127.0.0.1:port` on a connection of its own; an
/// error reply is an error.
pub async fn command(port: u16, args: &[&str]) -> anyhow::Result<Resp> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let mut request = format!("*{}\r\n", args.len());
        for a in args {
            request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(request.as_bytes()).await?;
        let mut buf = Vec::new();
        loop {
            if let Some((reply, _)) = parse(&buf)? {
                return reply;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            anyhow::ensure!(n > 0, "connection closed before the reply");
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(3), exchange)
        .await
        .map_err(|_| anyhow::anyhow!("no reply within 3 s"))
        .and_then(|r| r)
        .with_context(|| format!("redis 127.0.0.1:{port}: {}", args.join(" ")))
}

type Parsed = Option<(anyhow::Result<Resp>, usize)>;

/// One reply from the start of `buf`, and its length; `None` while incomplete.
fn parse(buf: &[u8]) -> anyhow::Result<Parsed> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
    let line = String::from_utf8_lossy(&buf[1..end]).into_owned();
    let rest = end + 2;
    Ok(Some(match buf[0] {
        b'+' => (Ok(Resp::Simple(line)), rest),
        b'-' => (Err(anyhow::anyhow!("error reply: {line}")), rest),
        b':' => (Ok(Resp::Int(line.parse()?)), rest),
        b'$' => {
            let Ok(n) = usize::try_from(line.parse::<i64>()?) else { return Ok(Some((Ok(Resp::Bulk(None)), rest))) };
            if buf.len() < rest + n + 2 {
                return Ok(None);
            }
            (Ok(Resp::Bulk(Some(String::from_utf8_lossy(&buf[rest..rest + n]).into_owned()))), rest + n + 2)
        }
        b'*' => {
            let Ok(n) = usize::try_from(line.parse::<i64>()?) else { return Ok(Some((Ok(Resp::Array(None)), rest))) };
            let mut items = Vec::with_capacity(n);
            let mut at = rest;
            for _ in 0..n {
                let Some((item, used)) = parse(&buf[at..])? else { return Ok(None) };
                items.push(item?);
                at += used;
            }
            (Ok(Resp::Array(Some(items))), at)
        }
        other => anyhow::bail!("not a RESP reply (starts with {:?})", other as char),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_replies_and_waits_for_the_rest() {
        let buf = b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n";
        let (r, used) = parse(buf).unwrap().unwrap();
        assert_eq!(used, buf.len());
        assert_eq!(r.unwrap().items().iter().map(|i| i.text().unwrap()).collect::<Vec<_>>(), ["127.0.0.1", "6380"]);
        assert!(parse(&buf[..buf.len() - 3]).unwrap().is_none());
        assert_eq!(parse(b"*-1\r\n").unwrap().unwrap().0.unwrap(), Resp::Array(None));
        assert_eq!(parse(b"$-1\r\n").unwrap().unwrap().0.unwrap(), Resp::Bulk(None));
        assert!(parse(b"-ERR no\r\n").unwrap().unwrap().0.is_err());
        let master =
            Resp::Array(Some(["name", "shard-0", "num-slaves", "1"].map(|s| Resp::Bulk(Some(s.into()))).to_vec()));
        assert_eq!(master.field("num-slaves"), Some("1"));
    }
}
