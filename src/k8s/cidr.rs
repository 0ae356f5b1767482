//! An IP prefix (`10.244.0.0/16`), as used for `loadBalancerSourceRanges` and the pod CIDR.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address prefix. It is stored masked to its network address, so `203.0.113.5/25` reads as
/// `203.0.113.0/25`, the way Go's `net.ParseCIDR` (and so kube-proxy) prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix_len: u8,
}

/// Why a CIDR did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR {input:?}: {reason}; expected ADDRESS/PREFIX such as 10.244.0.0/16")]
pub struct CidrParseError {
    /// The text.
    pub input: String,
    /// What was wrong.
    pub reason: String,
}

impl Cidr {
    /// The prefix `addr/prefix_len`, masked. `None` if the length exceeds the family's width.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Option<Cidr> {
        let width = if addr.is_ipv4() { 32 } else { 128 };
        if prefix_len > width {
            return None;
        }
        let addr = match addr {
            IpAddr::V4(a) => {
                let bits = u32::from(a);
                let mask = if prefix_len == 0 {
                    0
                } else {
                    u32::MAX << (32 - prefix_len)
                };
                IpAddr::V4((bits & mask).into())
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                let mask = if prefix_len == 0 {
                    0
                } else {
                    u128::MAX << (128 - prefix_len)
                };
                IpAddr::V6((bits & mask).into())
            }
        };
        Some(Cidr { addr, prefix_len })
    }
    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }
    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }
    /// Whether `ip` lies inside the prefix (always false across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match Cidr::new(ip, self.prefix_len) {
            Some(c) => c.addr == self.addr,
            None => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl FromStr for Cidr {
    type Err = CidrParseError;
    fn from_str(s: &str) -> Result<Cidr, CidrParseError> {
        let err = |reason: &str| CidrParseError {
            input: s.to_string(),
            reason: reason.to_string(),
        };
        let (a, p) = s.split_once('/').ok_or_else(|| err("no '/'"))?;
        let addr: IpAddr = a.parse().map_err(|_| err("not an IP address before '/'"))?;
        let len: u8 = p
            .parse()
            .map_err(|_| err("the prefix length is not a number"))?;
        Cidr::new(addr, len).ok_or_else(|| err("the prefix length is longer than the address"))
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.trim().parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_to_the_network_and_prints_like_go() {
        let c: Cidr = "203.0.113.5/25".parse().unwrap();
        assert_eq!(c.to_string(), "203.0.113.0/25");
        assert!(c.contains("203.0.113.127".parse().unwrap()));
        assert!(!c.contains("203.0.113.128".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn rejects_bad_text() {
        for bad in ["10.0.0.0", "10.0.0.0/33", "x/8", "10.0.0.0/x", "::/129"] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }
}
