//! The SSRF guard: callbacks may not reach loopback, private, link-local,
//! cloud-metadata or other special addresses (IPv6 forms that carry such an
//! IPv4 address included) unless the operator allows the range in
//! `CALLBACK_ALLOW_CIDRS`. The rules are `domain::netguard`'s, which the API
//! also applies to IP literals when a job is created. Enforced here on the
//! resolved addresses (a DNS resolver wrapper), so a public name pointing at
//! 10.0.0.5 is refused too, and on IP literals and redirect targets, which
//! bypass the resolver.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use domain::netguard::{self, Refusal};
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
        netguard::parse_allow_list(raw).map_err(anyhow::Error::msg)
    }

    /// Why `ip` may not be called, or None when it may.
    pub fn refusal(&self, ip: IpAddr) -> Option<Refusal> {
        netguard::refusal(ip, &self.allow)
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
                    Some(refusal) => {
                        refused = Some((a.ip(), refusal.rule.name()));
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
            "::127.0.0.1",
            "::ffff:0:127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::",
            "fec0::1",
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
        assert_eq!(allow.refusal("::ffff:127.0.0.1".parse().unwrap()), None);
        assert!(allow.refusal("10.0.0.1".parse().unwrap()).is_some());
        assert!(SsrfGuard::parse_allow_list("not-a-cidr").is_err());
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_of_internal_addresses_by_type() {
        let resolver = GuardedResolver { guard: Arc::new(SsrfGuard::default()) };
        let error = match resolver.resolve("localhost".parse().unwrap()).await {
            Ok(_) => panic!("localhost was not refused"),
            Err(e) => e,
        };
        let refused = error.downcast_ref::<CallbackRefused>().expect("a CallbackRefused");
        assert_eq!(refused.reason, "loopback");
        assert!(error.to_string().starts_with("callback refused: localhost resolves to "), "{error}");

        let allowed = GuardedResolver {
            guard: Arc::new(SsrfGuard::new(SsrfGuard::parse_allow_list("127.0.0.0/8,::1").unwrap())),
        };
        let addrs: Vec<SocketAddr> = match allowed.resolve("localhost".parse().unwrap()).await {
            Ok(a) => a.collect(),
            Err(e) => panic!("{e}"),
        };
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
