//! Which network addresses a job may make cronshard talk to: the one
//! classification behind the worker's SSRF guard (every address a callback's
//! host resolves to, at connect time) and the API's validation (an IP literal
//! in a callback or queue URL, at create time).
//!
//! Refused unless the operator allows the range (`CALLBACK_ALLOW_CIDRS`):
//! loopback, private, carrier-grade NAT, link-local, cloud metadata,
//! "this network", unspecified, broadcast, multicast, documentation,
//! benchmarking and reserved IPv4 ranges; their IPv6 counterparts
//! (unique-local, site-local, link-local, multicast, documentation,
//! discard-only, the rest of `::/8`); and every IPv6 form that carries an
//! IPv4 address — IPv4-mapped, IPv4-compatible, IPv4-translated, NAT64
//! (`64:ff9b::/96`) and 6to4 — whose embedded IPv4 address is refused (and
//! not itself allowed). Forms whose IPv4 address cannot be checked (Teredo,
//! whose server and client are both in the address, and the local-use NAT64
//! prefix `64:ff9b:1::/48`, whose IPv4 position depends on the operator's
//! prefix length) are refused outright.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Why an address is refused: the special-purpose range it is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    Unspecified,
    ThisNetwork,
    Loopback,
    Private,
    SharedAddressSpace,
    CloudMetadata,
    LinkLocal,
    Documentation,
    Benchmarking,
    Multicast,
    Broadcast,
    Reserved,
    UniqueLocal,
    SiteLocal,
    DiscardOnly,
    Teredo,
    Nat64LocalUse,
}

impl Rule {
    /// The rule's short name, as errors and logs name it: `loopback`, `private`, ...
    pub fn name(self) -> &'static str {
        match self {
            Rule::Unspecified => "unspecified",
            Rule::ThisNetwork => "this-network",
            Rule::Loopback => "loopback",
            Rule::Private => "private",
            Rule::SharedAddressSpace => "carrier-grade NAT",
            Rule::CloudMetadata => "cloud metadata",
            Rule::LinkLocal => "link-local",
            Rule::Documentation => "documentation",
            Rule::Benchmarking => "benchmarking",
            Rule::Multicast => "multicast",
            Rule::Broadcast => "broadcast",
            Rule::Reserved => "reserved",
            Rule::UniqueLocal => "unique-local",
            Rule::SiteLocal => "site-local",
            Rule::DiscardOnly => "discard-only",
            Rule::Teredo => "Teredo",
            Rule::Nat64LocalUse => "local-use NAT64",
        }
    }

    /// "a loopback address", "an unspecified address", ...
    pub fn phrase(self) -> String {
        let article = if self == Rule::Unspecified { "an" } else { "a" };
        format!("{article} {} address", self.name())
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Embedding {
    /// `::ffff:a.b.c.d` (RFC 4291).
    Mapped,
    /// `::a.b.c.d` (RFC 4291, deprecated).
    Compatible,
    /// `::ffff:0:a.b.c.d` (RFC 2765, SIIT).
    Translated,
    /// `64:ff9b::a.b.c.d` (RFC 6052).
    Nat64,
    /// `2002:AABB:CCDD::/48` for a.b.c.d (RFC 3056).
    SixToFour,
}

impl Embedding {
    pub fn name(self) -> &'static str {
        match self {
            Embedding::Mapped => "IPv4-mapped",
            Embedding::Compatible => "IPv4-compatible",
            Embedding::Translated => "IPv4-translated",
            Embedding::Nat64 => "NAT64",
            Embedding::SixToFour => "6to4",
        }
    }
}

/// An address refused, with the rule that refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The address as given.
    pub ip: IpAddr,
    pub rule: Rule,
    /// The IPv4 address `ip` carries, when the rule is that address's.
    pub embedded: Option<(Embedding, Ipv4Addr)>,
}

/// "127.0.0.1, a loopback address" or "::ffff:127.0.0.1, which carries
/// 127.0.0.1 (IPv4-mapped), a loopback address".
impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            Some((how, v4)) => write!(f, "{}, which carries {v4} ({}), {}", self.ip, how.name(), self.rule.phrase()),
            None => write!(f, "{}, {}", self.ip, self.rule.phrase()),
        }
    }
}

/// Why `ip` may not be reached, or `None` when it may: it is a public
/// address, or it (or the IPv4 address it carries) is in `allow`.
pub fn refusal(ip: IpAddr, allow: &[IpNet]) -> Option<Refusal> {
    let allowed = |ip: IpAddr| allow.iter().any(|net| net.contains(&ip));
    if allowed(ip) {
        return None;
    }
    match ip {
        IpAddr::V4(v4) => v4_rule(v4).map(|rule| Refusal { ip, rule, embedded: None }),
        IpAddr::V6(v6) => match v6_class(v6) {
            V6Class::Public => None,
            V6Class::Refused(rule) => Some(Refusal { ip, rule, embedded: None }),
            V6Class::Carries(how, v4) => {
                if allowed(IpAddr::V4(v4)) {
                    return None;
                }
                v4_rule(v4).map(|rule| Refusal { ip, rule, embedded: Some((how, v4)) })
            }
        },
    }
}

/// The IP address a URL names literally (`http://10.0.0.1/`, `http://[::1]/`,
/// and the WHATWG forms the URL parser normalises, such as
/// `http://2130706433/`), or `None` for a host name.
pub fn literal_host(url: &url::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

/// Parses an allow list such as `CALLBACK_ALLOW_CIDRS`: comma-separated
/// CIDRs or single addresses; blanks are ignored, so "" allows nothing.
pub fn parse_allow_list(raw: &str) -> Result<Vec<IpNet>, String> {
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("CALLBACK_ALLOW_CIDRS: {s:?} is not a CIDR such as 127.0.0.0/8"))
        })
        .collect()
}

fn v4_rule(v4: Ipv4Addr) -> Option<Rule> {
    let o = v4.octets();
    let rule = match o {
        [0, 0, 0, 0] => Rule::Unspecified,
        [0, ..] => Rule::ThisNetwork,
        [127, ..] => Rule::Loopback,
        [10, ..] | [192, 168, ..] => Rule::Private,
        [172, b, ..] if (16..32).contains(&b) => Rule::Private,
        // AWS, GCP, Azure, OpenStack (169.254.169.254), Alibaba (inside
        // 100.64/10) and Azure's WireServer (a public address every Azure VM reaches).
        [169, 254, 169, 254] | [100, 100, 100, 200] | [168, 63, 129, 16] => Rule::CloudMetadata,
        [100, b, ..] if (64..128).contains(&b) => Rule::SharedAddressSpace,
        [169, 254, ..] => Rule::LinkLocal,
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => Rule::Documentation,
        [198, b, ..] if b == 18 || b == 19 => Rule::Benchmarking,
        // IETF protocol assignments (192.0.0.0/24) and the retired 6to4
        // relay anycast prefix (192.88.99.0/24).
        [192, 0, 0, _] | [192, 88, 99, _] => Rule::Reserved,
        [a, ..] if (224..240).contains(&a) => Rule::Multicast,
        [255, 255, 255, 255] => Rule::Broadcast,
        [a, ..] if a >= 240 => Rule::Reserved,
        _ => return None,
    };
    Some(rule)
}

enum V6Class {
    Public,
    Refused(Rule),
    Carries(Embedding, Ipv4Addr),
}

fn v6_class(v6: Ipv6Addr) -> V6Class {
    let s = v6.segments();
    let low_v4 = || Ipv4Addr::from(u128::from(v6) as u32);
    let class = |rule| V6Class::Refused(rule);
    match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => class(Rule::Unspecified),
        [0, 0, 0, 0, 0, 0, 0, 1] => class(Rule::Loopback),
        [0, 0, 0, 0, 0, 0xffff, _, _] => V6Class::Carries(Embedding::Mapped, low_v4()),
        [0, 0, 0, 0, 0xffff, 0, _, _] => V6Class::Carries(Embedding::Translated, low_v4()),
        [0, 0, 0, 0, 0, 0, _, _] => V6Class::Carries(Embedding::Compatible, low_v4()),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => V6Class::Carries(Embedding::Nat64, low_v4()),
        [0x64, 0xff9b, 1, ..] => class(Rule::Nat64LocalUse),
        // The rest of ::/8 is reserved by the IETF.
        [a, ..] if a < 0x100 => class(Rule::Reserved),
        [0x100, 0, 0, 0, ..] => class(Rule::DiscardOnly),
        [0x2001, 0, ..] => class(Rule::Teredo),
        [0x2001, 2, 0, ..] => class(Rule::Benchmarking),
        [0x2001, 0xdb8, ..] => class(Rule::Documentation),
        [0x2002, hi, lo, ..] => {
            V6Class::Carries(Embedding::SixToFour, Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)))
        }
        [0x3fff, b, ..] if b < 0x1000 => class(Rule::Documentation),
        // AWS's IPv6 instance metadata endpoint (inside the unique-local range).
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] => class(Rule::CloudMetadata),
        [a, ..] if a & 0xfe00 == 0xfc00 => class(Rule::UniqueLocal),
        [a, ..] if a & 0xffc0 == 0xfe80 => class(Rule::LinkLocal),
        [a, ..] if a & 0xffc0 == 0xfec0 => class(Rule::SiteLocal),
        [a, ..] if a & 0xff00 == 0xff00 => class(Rule::Multicast),
        _ => V6Class::Public,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host of a URL such as `http://[::127.0.0.1]/`, as the API and the
    /// worker see it.
    fn host_ip(host: &str) -> IpAddr {
        let url = url::Url::parse(&format!("http://{host}/")).unwrap();
        literal_host(&url).unwrap_or_else(|| panic!("{host} is not an IP literal"))
    }

    /// Every form, with the rule that refuses it (`None`: allowed) under an
    /// empty allow list.
    const CASES: &[(&str, Option<Rule>)] = &[
        // IPv4
        ("0.0.0.0", Some(Rule::Unspecified)),
        ("0.1.2.3", Some(Rule::ThisNetwork)),
        ("127.0.0.1", Some(Rule::Loopback)),
        ("127.255.255.254", Some(Rule::Loopback)),
        ("10.1.2.3", Some(Rule::Private)),
        ("172.16.0.1", Some(Rule::Private)),
        ("172.31.255.255", Some(Rule::Private)),
        ("192.168.1.1", Some(Rule::Private)),
        ("100.64.0.1", Some(Rule::SharedAddressSpace)),
        ("100.127.255.255", Some(Rule::SharedAddressSpace)),
        ("169.254.169.254", Some(Rule::CloudMetadata)),
        ("100.100.100.200", Some(Rule::CloudMetadata)),
        ("168.63.129.16", Some(Rule::CloudMetadata)),
        ("169.254.1.1", Some(Rule::LinkLocal)),
        ("192.0.2.10", Some(Rule::Documentation)),
        ("198.51.100.7", Some(Rule::Documentation)),
        ("203.0.113.9", Some(Rule::Documentation)),
        ("198.18.0.1", Some(Rule::Benchmarking)),
        ("198.19.255.255", Some(Rule::Benchmarking)),
        ("192.0.0.8", Some(Rule::Reserved)),
        ("192.88.99.1", Some(Rule::Reserved)),
        ("224.0.0.1", Some(Rule::Multicast)),
        ("239.255.255.250", Some(Rule::Multicast)),
        ("240.0.0.1", Some(Rule::Reserved)),
        ("255.255.255.254", Some(Rule::Reserved)),
        ("255.255.255.255", Some(Rule::Broadcast)),
        // WHATWG forms the URL parser turns into 127.0.0.1.
        ("2130706433", Some(Rule::Loopback)),
        ("0x7f.1", Some(Rule::Loopback)),
        ("0177.0.0.1", Some(Rule::Loopback)),
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("100.63.255.255", None),
        ("100.128.0.0", None),
        ("172.15.255.255", None),
        ("172.32.0.0", None),
        ("198.17.255.255", None),
        ("198.20.0.0", None),
        ("223.255.255.255", None),
        // IPv6
        ("[::]", Some(Rule::Unspecified)),
        ("[::1]", Some(Rule::Loopback)),
        ("[::ffff:127.0.0.1]", Some(Rule::Loopback)),
        ("[::ffff:7f00:1]", Some(Rule::Loopback)),
        ("[::ffff:10.0.0.1]", Some(Rule::Private)),
        ("[::ffff:169.254.169.254]", Some(Rule::CloudMetadata)),
        ("[::ffff:8.8.8.8]", None),
        ("[::127.0.0.1]", Some(Rule::Loopback)),
        ("[::10.0.0.1]", Some(Rule::Private)),
        ("[::0.0.0.2]", Some(Rule::ThisNetwork)),
        ("[::8.8.8.8]", None),
        ("[::ffff:0:127.0.0.1]", Some(Rule::Loopback)),
        ("[::ffff:0:192.168.0.1]", Some(Rule::Private)),
        ("[::ffff:0:8.8.8.8]", None),
        ("[64:ff9b::169.254.169.254]", Some(Rule::CloudMetadata)),
        ("[64:ff9b::127.0.0.1]", Some(Rule::Loopback)),
        ("[64:ff9b::8.8.8.8]", None),
        ("[64:ff9b:1::8.8.8.8]", Some(Rule::Nat64LocalUse)),
        ("[64:ff9b:1:ffff::1]", Some(Rule::Nat64LocalUse)),
        ("[2002:a9fe:a9fe::]", Some(Rule::CloudMetadata)),
        ("[2002:7f00:1::1]", Some(Rule::Loopback)),
        ("[2002:c0a8:101::]", Some(Rule::Private)),
        ("[2002:808:808::1]", None),
        ("[2001::1]", Some(Rule::Teredo)),
        ("[2001:0:4136:e378:8000:63bf:3fff:fdd2]", Some(Rule::Teredo)),
        ("[2001:2::1]", Some(Rule::Benchmarking)),
        ("[2001:db8::1]", Some(Rule::Documentation)),
        ("[3fff::1]", Some(Rule::Documentation)),
        ("[3fff:fff::1]", Some(Rule::Documentation)),
        ("[3fff:1000::1]", None),
        ("[3ff0::1]", None),
        ("[100::1]", Some(Rule::DiscardOnly)),
        ("[::1:0:0:1]", Some(Rule::Reserved)),
        ("[fec0::1]", Some(Rule::SiteLocal)),
        ("[feff::1]", Some(Rule::SiteLocal)),
        ("[fc00::1]", Some(Rule::UniqueLocal)),
        ("[fd00::1]", Some(Rule::UniqueLocal)),
        ("[fd00:ec2::254]", Some(Rule::CloudMetadata)),
        ("[fe80::1]", Some(Rule::LinkLocal)),
        ("[febf::1]", Some(Rule::LinkLocal)),
        ("[ff02::1]", Some(Rule::Multicast)),
        ("[ff0e::1]", Some(Rule::Multicast)),
        ("[2606:4700::1111]", None),
        ("[2001:4860:4860::8888]", None),
        ("[2001:1::1]", None),
        ("[4000::1]", None),
        ("[fbff::1]", None),
    ];

    #[test]
    fn every_form_is_refused_or_allowed_by_its_rule() {
        let mut wrong = Vec::new();
        for &(host, expected) in CASES {
            let got = refusal(host_ip(host), &[]).map(|r| r.rule);
            if got != expected {
                wrong.push(format!("{host}: expected {expected:?}, got {got:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn an_allowed_range_opens_its_addresses_and_the_forms_that_carry_them() {
        let allow = parse_allow_list("127.0.0.0/8, ::1, 10.1.0.0/16, fd00::/8, 2001::/32").unwrap();
        for host in [
            "127.0.0.1",
            "[::1]",
            "[::ffff:127.0.0.1]",
            "[::127.0.0.1]",
            "[::ffff:0:127.0.0.1]",
            "[64:ff9b::127.0.0.1]",
            "[2002:7f00:1::]",
            "10.1.2.3",
            "[::ffff:10.1.2.3]",
            "[fd00::1]",
            "[fd00:ec2::254]",
            "[2001::1]",
        ] {
            assert_eq!(refusal(host_ip(host), &allow), None, "{host} should be allowed");
        }
        for (host, rule) in [
            ("10.2.0.1", Rule::Private),
            ("[::ffff:10.2.0.1]", Rule::Private),
            ("169.254.169.254", Rule::CloudMetadata),
            ("[64:ff9b::169.254.169.254]", Rule::CloudMetadata),
            ("[fc00::1]", Rule::UniqueLocal),
        ] {
            assert_eq!(refusal(host_ip(host), &allow).map(|r| r.rule), Some(rule), "{host}");
        }
        // A range of the IPv6 form opens it too.
        let mapped = parse_allow_list("::ffff:0:0/96").unwrap();
        assert_eq!(refusal(host_ip("[::ffff:127.0.0.1]"), &mapped), None);
        assert!(refusal(host_ip("127.0.0.1"), &mapped).is_some());
    }

    #[test]
    fn the_refusal_names_the_address_the_form_and_the_rule() {
        let text = |host: &str| refusal(host_ip(host), &[]).unwrap().to_string();
        assert_eq!(text("127.0.0.1"), "127.0.0.1, a loopback address");
        assert_eq!(text("[::]"), "::, an unspecified address");
        assert_eq!(
            text("[2002:a9fe:a9fe::]"),
            "2002:a9fe:a9fe::, which carries 169.254.169.254 (6to4), a cloud metadata address"
        );
        assert_eq!(
            text("[::ffff:10.0.0.1]"),
            "::ffff:10.0.0.1, which carries 10.0.0.1 (IPv4-mapped), a private address"
        );
        let r = refusal(host_ip("[64:ff9b::127.0.0.1]"), &[]).unwrap();
        assert_eq!(r.embedded, Some((Embedding::Nat64, Ipv4Addr::LOCALHOST)));
    }

    #[test]
    fn allow_lists_parse_cidrs_and_addresses() {
        assert_eq!(parse_allow_list("").unwrap(), vec![]);
        assert_eq!(parse_allow_list(" , ").unwrap(), vec![]);
        assert_eq!(
            parse_allow_list("127.0.0.0/8,::1, 10.0.0.5").unwrap(),
            vec![
                "127.0.0.0/8".parse::<IpNet>().unwrap(),
                "::1/128".parse::<IpNet>().unwrap(),
                "10.0.0.5/32".parse::<IpNet>().unwrap()
            ]
        );
        let e = parse_allow_list("127.0.0.0/8,not-a-cidr").unwrap_err();
        assert!(e.contains("\"not-a-cidr\"") && e.contains("CALLBACK_ALLOW_CIDRS"), "{e}");
    }

    #[test]
    fn host_names_are_not_literals() {
        for url in ["http://localhost/", "https://example.com/x", "http://127.0.0.1.nip.io/"] {
            assert_eq!(literal_host(&url::Url::parse(url).unwrap()), None, "{url}");
        }
    }
}
