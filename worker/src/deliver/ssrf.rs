//! The SSRF guard: callbacks may not reach loopback, private, link-local,
//! cloud-metadata or other special addresses unless the operator allows the
//! range in `CALLBACK_ALLOW_CIDRS`. Enforced on the resolved addresses (a DNS
//! resolver wrapper), so a public name pointing at 10.0.0.5 is refused too,
//! and on IP literals and redirect targets, which bypass the resolver.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

#[derive(Debug, Clone, Default)]
pub struct SsrfGuard {
    allow: Vec<IpNet>,
}

impl SsrfGuard {
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self { allow }
    }

    /// Parses `CALLBACK_ALLOW_CIDRS` (comma-separated CIDRs or addresses).
    pub fn parse_allow_list(raw: &str) -> anyhow::Result<Vec<IpNet>> {
        raw.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| anyhow::anyhow!("CALLBACK_ALLOW_CIDRS: {s:?} is not a CIDR such as 127.0.0.0/8"))
            })
            .collect()
    }

    /// Why `ip` may not be called, or None when it may.
    pub fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        let reason = special_range(ip)?;
        if self.allow.iter().any(|net| net.contains(&ip)) { None } else { Some(reason) }
    }
}

fn special_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_loopback() {
                Some("loopback")
            } else if o == [169, 254, 169, 254] || o == [100, 100, 100, 200] {
                Some("cloud metadata")
            } else if v4.is_link_local() {
                Some("link-local")
            } else if v4.is_private() || (o[0] == 100 && (64..128).contains(&o[1])) {
                Some("private")
            } else if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() || o[0] == 0 || o[0] >= 240 {
                Some("reserved")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() || v6.is_multicast() {
                Some("reserved")
            } else if s[0] & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("private")
            } else if s[0] == 0xfd00 && s[1..7] == [0, 0, 0, 0, 0, 0] && s[7] == 0x254 {
                Some("cloud metadata")
            } else {
                None
            }
        }
    }
}

/// A DNS resolver that drops refused addresses and fails when none is left.
pub struct GuardedResolver {
    pub guard: Arc<SsrfGuard>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.guard.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let lookup = host.clone();
            let addrs: Vec<SocketAddr> =
                tokio::task::spawn_blocking(move || (lookup.as_str(), 0).to_socket_addrs().map(Iterator::collect))
                    .await
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)??;
            let mut refused = None;
            let allowed: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|a| match guard.refusal(a.ip()) {
                    Some(reason) => {
                        refused = Some((a.ip(), reason));
                        false
                    }
                    None => true,
                })
                .collect();
            if allowed.is_empty() {
                let error: Box<dyn std::error::Error + Send + Sync> = match refused {
                    Some((ip, reason)) => Box::new(CallbackRefused { host, ip, reason }),
                    None => format!("{host} did not resolve").into(),
                };
                return Err(error);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// The resolver refused every address of a callback's host: trying again
/// cannot help. Typed, so the delivery tells it from a network error by
/// its type rather than by its text.
#[derive(Debug, thiserror::Error)]
#[error("callback refused: {host} resolves to {ip} ({reason}); allow it with CALLBACK_ALLOW_CIDRS")]
pub struct CallbackRefused {
    pub host: String,
    pub ip: std::net::IpAddr,
    pub reason: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_special_ranges_unless_allowed() {
        let deny = SsrfGuard::default();
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "100.64.0.1",
        ] {
            assert!(deny.refusal(ip.parse().unwrap()).is_some(), "{ip} should be refused");
        }
        for ip in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"] {
            assert_eq!(deny.refusal(ip.parse().unwrap()), None, "{ip} should pass");
        }
        let allow = SsrfGuard::new(SsrfGuard::parse_allow_list("127.0.0.0/8, ::1").unwrap());
        assert_eq!(allow.refusal("127.0.0.1".parse().unwrap()), None);
        assert_eq!(allow.refusal("::1".parse().unwrap()), None);
        assert!(allow.refusal("10.0.0.1".parse().unwrap()).is_some());
        assert!(SsrfGuard::parse_allow_list("not-a-cidr").is_err());
    }
}
