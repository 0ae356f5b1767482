//! Chain names and the service port name (`proxy.ServicePortName`).
//!
//! kube-proxy names per-service chains by hashing: `hash(s) = base32(sha256(s))[:16]`, standard
//! alphabet, upper case (proxier.go `portProtoHash`, `servicePortEndpointChainName`).

use crate::k8s::Protocol;
use sha2::{Digest, Sha256};
use std::fmt;

/// `KUBE-SERVICES`: the entry chain (nat and filter).
pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
/// `KUBE-EXTERNAL-SERVICES`: filter rules for external traffic to Services without endpoints.
pub const KUBE_EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
/// `KUBE-NODEPORTS`: NodePort captures (nat) and health-check ports (filter).
pub const KUBE_NODEPORTS: &str = "KUBE-NODEPORTS";
/// `KUBE-POSTROUTING`: masquerades marked traffic.
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
/// `KUBE-MARK-MASQ`: marks traffic for masquerade.
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
/// `KUBE-FORWARD`: filter FORWARD rules.
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
/// `KUBE-PROXY-FIREWALL`: drops load-balancer traffic not allowed by source ranges.
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// `KUBE-FIREWALL`: kubelet's anti-martian chain, duplicated by kube-proxy.
pub const KUBE_FIREWALL: &str = "KUBE-FIREWALL";

/// Prefix of the per-service-port chain for Cluster traffic policy.
pub const SVC_PREFIX: &str = "KUBE-SVC-";
/// Prefix of the per-service-port chain for Local traffic policy.
pub const SVL_PREFIX: &str = "KUBE-SVL-";
/// Prefix of the per-service-port external-destination chain.
pub const EXT_PREFIX: &str = "KUBE-EXT-";
/// Prefix of the per-service-port load-balancer firewall chain.
pub const FW_PREFIX: &str = "KUBE-FW-";
/// Prefix of the per-endpoint chain.
pub const SEP_PREFIX: &str = "KUBE-SEP-";

/// `base32(sha256(s))[:16]`, the hash in every per-service chain name.
pub fn hash16(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    let mut enc = base32::encode(base32::Alphabet::Rfc4648 { padding: true }, &digest);
    enc.truncate(16);
    enc
}

/// Whether a chain name is one kube-proxy owns per service (`isServiceChainName`).
pub fn is_service_chain_name(chain: &str) -> bool {
    [SVC_PREFIX, SVL_PREFIX, SEP_PREFIX, FW_PREFIX, EXT_PREFIX]
        .iter()
        .any(|p| chain.starts_with(p))
}

/// `proxy.ServicePortName`: namespace, name, port name and protocol. Its `Display` is the
/// string kube-proxy hashes and prints in comments: `ns/name` plus `:port` when the port is
/// named (the protocol is not part of it). Ordered by (namespace, name, port, protocol), which
/// is the order nfsim writes services in (kube-proxy iterates a Go map).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
    /// Name of the port (empty for an unnamed port).
    pub port: String,
    /// Protocol of the port.
    pub protocol: Protocol,
}

impl ServicePortName {
    /// A service port name.
    pub fn new(namespace: &str, name: &str, port: &str, protocol: Protocol) -> ServicePortName {
        ServicePortName {
            namespace: namespace.to_string(),
            name: name.to_string(),
            port: port.to_string(),
            protocol,
        }
    }
    /// `(namespace, name)` of the Service.
    pub fn service(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }
    /// `portProtoHash`: the 16-character hash shared by the SVC/SVL/EXT/FW chains.
    pub fn port_proto_hash(&self) -> String {
        hash16(&format!("{}{}", self, self.protocol.lower()))
    }
    /// `KUBE-SVC-…` (`servicePortPolicyClusterChain`).
    pub fn svc_chain(&self) -> String {
        format!("{SVC_PREFIX}{}", self.port_proto_hash())
    }
    /// `KUBE-SVL-…` (`servicePortPolicyLocalChainName`).
    pub fn svl_chain(&self) -> String {
        format!("{SVL_PREFIX}{}", self.port_proto_hash())
    }
    /// `KUBE-EXT-…` (`serviceExternalChainName`).
    pub fn ext_chain(&self) -> String {
        format!("{EXT_PREFIX}{}", self.port_proto_hash())
    }
    /// `KUBE-FW-…` (`serviceFirewallChainName`).
    pub fn fw_chain(&self) -> String {
        format!("{FW_PREFIX}{}", self.port_proto_hash())
    }
    /// `KUBE-SEP-…` for the endpoint `ip:port` (`[ip]:port` for IPv6)
    /// (`servicePortEndpointChainName`).
    pub fn sep_chain(&self, endpoint: &str) -> String {
        format!(
            "{SEP_PREFIX}{}",
            hash16(&format!("{}{}{}", self, self.protocol.lower(), endpoint))
        )
    }
}

impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        if !self.port.is_empty() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_kube_proxy() {
        // docs/kube-proxy-model.md §1, from proxier_test.go and a real kind node.
        assert_eq!(hash16("ns1/svc1:p80tcp"), "XPGD46QRK7WJZT7O");
        assert_eq!(hash16("ns2/svc2:p8080tcp"), "2VJB64SDSIJUP5T6");
        assert_eq!(hash16("ns1/svc1tcp"), "AQI2S6QIMU7PVVRP");
        assert_eq!(hash16("ns1/svc1:p80tcp10.180.0.1:80"), "SXIVWICOYRO3J4NJ");
        assert_eq!(hash16("ns2/svc2:p8080tcp10.0.2.1:8080"), "UHEGFW77JX3KXTOV");
    }

    #[test]
    fn chain_names() {
        let dns = ServicePortName::new("kube-system", "kube-dns", "dns", Protocol::UDP);
        assert_eq!(dns.to_string(), "kube-system/kube-dns:dns");
        assert_eq!(dns.svc_chain(), "KUBE-SVC-TCOU7JCQXEZGVUNU");
        let p80 = ServicePortName::new("ns1", "svc1", "p80", Protocol::TCP);
        assert_eq!(p80.svc_chain(), "KUBE-SVC-XPGD46QRK7WJZT7O");
        assert_eq!(p80.sep_chain("10.180.0.1:80"), "KUBE-SEP-SXIVWICOYRO3J4NJ");
        assert_eq!(p80.svl_chain(), "KUBE-SVL-XPGD46QRK7WJZT7O");
        assert_eq!(p80.ext_chain(), "KUBE-EXT-XPGD46QRK7WJZT7O");
        assert_eq!(p80.fw_chain(), "KUBE-FW-XPGD46QRK7WJZT7O");
        let unnamed = ServicePortName::new("ns1", "svc1", "", Protocol::TCP);
        assert_eq!(unnamed.to_string(), "ns1/svc1");
        assert_eq!(unnamed.svc_chain(), "KUBE-SVC-AQI2S6QIMU7PVVRP");
        // Chain names must fit iptables' 28 characters.
        assert!(p80.fw_chain().len() <= 28 && p80.sep_chain("x").len() <= 28);
    }

    #[test]
    fn service_chain_prefixes() {
        assert!(is_service_chain_name("KUBE-SEP-ABC"));
        assert!(is_service_chain_name("KUBE-FW-ABC"));
        assert!(!is_service_chain_name("KUBE-SERVICES"));
        assert!(!is_service_chain_name("KUBE-MARK-MASQ"));
    }
}
