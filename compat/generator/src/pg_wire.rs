//! The SQL a client sends Postgres, read from the bytes: the text of each
//! statement it prepares (`Parse`, the extended protocol every
//! tokio-postgres `query`/`execute` uses). Simple-protocol text (`Query`:
//! `batch_execute`, transaction control) is left out: it may hold several
//! statements, which cannot be prepared one by one.

/// The statements in one connection's client-to-server bytes, in order.
pub fn prepared(stream: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = stream;
    // Untyped messages come first: an SSLRequest (answered by one byte,
    // which is the server's side) and the StartupMessage.
    loop {
        if rest.len() < 8 {
            return out;
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let code = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len < 8 || rest.len() < len {
            return out;
        }
        rest = &rest[len..];
        // 80877103: SSLRequest, 80877104: GSSENCRequest; anything else is the startup.
        if code != 80_877_103 && code != 80_877_104 {
            break;
        }
    }
    while rest.len() >= 5 {
        let kind = rest[0];
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if len < 4 || rest.len() < 1 + len {
            break;
        }
        let body = &rest[5..1 + len];
        rest = &rest[1 + len..];
        if kind == b'P' {
            // Parse: statement name, then the query text, both NUL-terminated.
            let mut parts = body.splitn(3, |&b| b == 0);
            let (_, query) = (parts.next(), parts.next());
            if let Some(query) = query {
                out.push(String::from_utf8_lossy(query).into_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_messages_after_the_startup_are_read() {
        let mut s = Vec::new();
        s.extend_from_slice(&12u32.to_be_bytes());
        s.extend_from_slice(&196_608u32.to_be_bytes());
        s.extend_from_slice(b"u\0\0\0");
        let body = b"s1\0SELECT 1\0\0\0";
        s.push(b'P');
        s.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        s.extend_from_slice(body);
        s.push(b'S');
        s.extend_from_slice(&4u32.to_be_bytes());
        assert_eq!(prepared(&s), vec!["SELECT 1".to_owned()]);
    }
}
