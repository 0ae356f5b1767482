//! A real node's interfaces and routes: `ip -j addr` and `ip -j route` output
//! (`--interfaces FILE`, `--routes FILE`), or the roles of the default node's two interfaces
//! renamed (`--interface NAME=uplink|pods`).
//!
//! `ip -j addr` is a JSON array of links, each with `ifname` and `addr_info` (objects with
//! `family` `inet`/`inet6`, `local` and `prefixlen`), as iproute2's `print_addrinfo` writes
//! it. `ip -j route` is a JSON array of routes with `dst` (`default`, an address, or
//! `ADDR/LEN`), `gateway` (absent on a directly connected route) and `dev`. The kernel's own
//! connected routes (`protocol` `kernel`, made when an address is added) are made again from
//! the addresses, as [`sim_netfilter::netns::Netns::add_interface`] makes them; every other
//! route is added as listed. `lo` is every namespace's already and is skipped. Only the
//! main table is read (`ip -j route` lists it); routes of type other than `unicast`
//! (`local`, `broadcast`, `blackhole`, …) are refused with their place, as nfsim's routing
//! has none of them.

use super::ExplainError;
use sim_netfilter::netns::Prefix;
use std::net::IpAddr;

/// One interface of a real node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInterface {
    /// Its name (`ens5`, `cni0`, `cali1234…`).
    pub name: String,
    /// Its addresses with their prefix lengths.
    pub addrs: Vec<(IpAddr, u8)>,
}

/// One route of a real node's main table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRoute {
    /// The destinations it covers.
    pub dst: Prefix,
    /// The next hop, if not directly connected.
    pub gateway: Option<IpAddr>,
    /// The interface it leaves by.
    pub dev: String,
}

/// A real node's interfaces (and routes), with the files they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RealInterfaces {
    /// The `ip -j addr` file.
    pub file: String,
    /// Its interfaces, in its order, without `lo`.
    pub interfaces: Vec<NodeInterface>,
    /// The `ip -j route` file, if given.
    pub routes_file: Option<String>,
    /// Its routes, without the connected ones the addresses make.
    pub routes: Vec<NodeRoute>,
}

fn bad(file: &str, message: String) -> ExplainError {
    ExplainError::Interfaces {
        file: file.to_string(),
        message,
    }
}

fn array<'a>(
    file: &str,
    v: &'a serde_json::Value,
    what: &str,
) -> Result<&'a Vec<serde_json::Value>, ExplainError> {
    v.as_array()
        .ok_or_else(|| bad(file, format!("expected a JSON array of {what}")))
}

fn parse_json(file: &str, text: &str, what: &str) -> Result<serde_json::Value, ExplainError> {
    serde_json::from_str(text).map_err(|e| {
        bad(
            file,
            format!(
                "line {}, column {}: {e}: expected `{what}` output (a JSON array)",
                e.line(),
                e.column()
            ),
        )
    })
}

/// Reads `ip -j addr` output (`file` names it in errors).
pub fn parse_ip_addr(file: &str, text: &str) -> Result<Vec<NodeInterface>, ExplainError> {
    let v = parse_json(file, text, "ip -j addr")?;
    let mut out: Vec<NodeInterface> = Vec::new();
    for (i, link) in array(file, &v, "links (ip -j addr)")?.iter().enumerate() {
        let at = |m: &str| bad(file, format!("link #{} of the array: {m}", i + 1));
        let name = link["ifname"]
            .as_str()
            .ok_or_else(|| at("no \"ifname\" string"))?;
        sim_core::IfName::new(name).map_err(|e| at(&format!("interface name {name:?}: {e}")))?;
        if name == "lo" {
            continue;
        }
        if out.iter().any(|o| o.name == name) {
            return Err(at(&format!("interface {name} listed twice")));
        }
        let mut addrs = Vec::new();
        let infos = match &link["addr_info"] {
            serde_json::Value::Null => &Vec::new(),
            other => array(file, other, "addresses (addr_info)")?,
        };
        for (j, a) in infos.iter().enumerate() {
            let at = |m: &str| {
                bad(
                    file,
                    format!("{name}: address #{} of addr_info: {m}", j + 1),
                )
            };
            match a["family"].as_str() {
                Some("inet") | Some("inet6") => {}
                Some(_) => continue,
                None => return Err(at("no \"family\" string")),
            }
            let local: IpAddr = a["local"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| at("no \"local\" address"))?;
            let len = a["prefixlen"]
                .as_u64()
                .and_then(|l| u8::try_from(l).ok())
                .ok_or_else(|| at("no \"prefixlen\" number"))?;
            Prefix::new(local, len).map_err(|e| at(&e.to_string()))?;
            addrs.push((local, len));
        }
        out.push(NodeInterface {
            name: name.to_string(),
            addrs,
        });
    }
    Ok(out)
}

/// Reads `ip -j route` output (`file` names it in errors), leaving out the connected routes
/// the kernel made for an address (`protocol` `kernel`, `scope` `link`, no gateway), which
/// the addresses make again.
pub fn parse_ip_route(
    file: &str,
    text: &str,
    interfaces: &[NodeInterface],
) -> Result<Vec<NodeRoute>, ExplainError> {
    let v = parse_json(file, text, "ip -j route")?;
    let mut out = Vec::new();
    for (i, r) in array(file, &v, "routes (ip -j route)")?.iter().enumerate() {
        let at = |m: &str| bad(file, format!("route #{} of the array: {m}", i + 1));
        if let Some(t) = r["type"].as_str() {
            if t != "unicast" {
                return Err(at(&format!(
                    "a route of type {t}: nfsim's routing has unicast routes only"
                )));
            }
        }
        let dev = r["dev"].as_str().ok_or_else(|| at("no \"dev\" string"))?;
        if dev != "lo" && !interfaces.iter().any(|x| x.name == dev) {
            return Err(at(&format!(
                "dev {dev} is not an interface of the --interfaces file (it has {})",
                names(interfaces)
            )));
        }
        let dst_text = r["dst"].as_str().ok_or_else(|| at("no \"dst\" string"))?;
        let gateway: Option<IpAddr> = match r["gateway"].as_str() {
            None => None,
            Some(g) => Some(
                g.parse()
                    .map_err(|_| at(&format!("gateway {g:?} is not an address")))?,
            ),
        };
        let dst = if dst_text == "default" {
            Prefix::default_for(gateway.is_none_or(|g| g.is_ipv4()))
        } else if dst_text.contains('/') {
            dst_text
                .parse()
                .map_err(|_| at(&format!("dst {dst_text:?} is not ADDR/LEN")))?
        } else {
            let a: IpAddr = dst_text
                .parse()
                .map_err(|_| at(&format!("dst {dst_text:?} is not an address")))?;
            Prefix::host(a)
        };
        let connected = gateway.is_none()
            && r["protocol"].as_str() == Some("kernel")
            && interfaces.iter().any(|x| {
                x.name == dev
                    && x.addrs.iter().any(|&(a, l)| {
                        Prefix::new(a, l)
                            .is_ok_and(|p| p.addr() == dst.addr() && l == dst.prefix_len())
                    })
            });
        if connected || dev == "lo" {
            continue;
        }
        out.push(NodeRoute {
            dst,
            gateway,
            dev: dev.to_string(),
        });
    }
    Ok(out)
}

/// What nfsim cannot say about a packet a real node (`--interfaces`) forwards back out of the
/// interface it came in by: on a routed link (not a bridge) the kernel runs its ICMP redirect
/// bookkeeping (`ip_forward` → `ip_rt_send_redirect`, with `send_redirects` on), which may
/// send a redirect and holds back the next ICMP error to the source for `icmp_ratelimit`
/// (the two share the source's `inet_peer`: docs/kernel-model.md §4). nfsim models a bridge
/// there and does neither. Completes "if that interface is a routed link rather than a
/// bridge, …".
pub const SAME_LINK_UNMODELLED: &str = "the kernel also sends an ICMP redirect (ip_rt_send_redirect) and holds back ICMP errors to the source for net.ipv4.icmp_ratelimit; nfsim models a bridge and does neither";

/// The warning for a packet forwarded back out of `dev`, the interface it came in by.
pub fn same_link_warning(dev: &str) -> String {
    format!("forwarded back out of {dev}, the interface it came in by: if {dev} is a routed link rather than a bridge, {SAME_LINK_UNMODELLED}")
}

/// The names, comma-separated, for messages.
pub fn names(interfaces: &[NodeInterface]) -> String {
    let mut v = vec!["lo"];
    v.extend(interfaces.iter().map(|i| i.name.as_str()));
    v.join(", ")
}

impl RealInterfaces {
    /// Reads `--interfaces FILE` (`ip -j addr`) and `--routes FILE` (`ip -j route`).
    pub fn read(file: &str, routes_file: Option<&str>) -> Result<RealInterfaces, ExplainError> {
        let interfaces = parse_ip_addr(file, &super::read_text(file)?)?;
        // An IPv6-only node (EKS IPv6, a single-stack IPv6 kubeadm node) has no IPv4
        // address but lo's; a node with no address at all outside lo is not a node.
        if !interfaces.iter().any(|i| !i.addrs.is_empty()) {
            return Err(bad(
                file,
                "no interface but lo has an address: not a node's `ip -j addr`".into(),
            ));
        }
        let routes = match routes_file {
            Some(r) => parse_ip_route(r, &super::read_text(r)?, &interfaces)?,
            None => Vec::new(),
        };
        Ok(RealInterfaces {
            file: file.to_string(),
            interfaces,
            routes_file: routes_file.map(str::to_string),
            routes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDR: &str = r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
{"ifindex":2,"ifname":"ens5","addr_info":[{"family":"inet","local":"192.168.0.12","prefixlen":24},{"family":"inet6","local":"fe80::1","prefixlen":64}]},
{"ifindex":3,"ifname":"cbr0","addr_info":[{"family":"inet","local":"10.244.2.1","prefixlen":24}]},
{"ifindex":4,"ifname":"tunl0"}]"#;
    const ROUTE: &str = r#"[{"dst":"default","gateway":"192.168.0.1","dev":"ens5","flags":[]},
{"dst":"10.244.1.0/24","gateway":"192.168.0.11","dev":"ens5","flags":[]},
{"dst":"10.244.2.0/24","dev":"cbr0","protocol":"kernel","scope":"link","prefsrc":"10.244.2.1","flags":[]},
{"dst":"192.168.0.0/24","dev":"ens5","protocol":"kernel","scope":"link","prefsrc":"192.168.0.12","flags":[]}]"#;

    #[test]
    fn ip_j_addr_and_route_are_read_without_lo_and_connected_routes() {
        let ifs = parse_ip_addr("a.json", ADDR).unwrap();
        assert_eq!(
            ifs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
            ["ens5", "cbr0", "tunl0"]
        );
        assert_eq!(ifs[0].addrs.len(), 2);
        let routes = parse_ip_route("r.json", ROUTE, &ifs).unwrap();
        assert_eq!(routes.len(), 2, "{routes:?}");
        assert!(routes[0].dst.is_default());
        assert_eq!(routes[1].gateway, Some("192.168.0.11".parse().unwrap()));
    }

    #[test]
    fn bad_files_are_located_errors() {
        let e = parse_ip_addr("a.json", "[{\"ifname\":\"eth0\",").unwrap_err();
        assert!(e.to_string().starts_with("a.json: line 1, column"), "{e}");
        let e = parse_ip_addr(
            "a.json",
            r#"[{"ifname":"eth0","addr_info":[{"family":"inet","local":"x","prefixlen":24}]}]"#,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "a.json: eth0: address #1 of addr_info: no \"local\" address"
        );
        let ifs = parse_ip_addr("a.json", ADDR).unwrap();
        let e = parse_ip_route(
            "r.json",
            r#"[{"dst":"default","gateway":"10.0.0.1","dev":"eth9"}]"#,
            &ifs,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "r.json: route #1 of the array: dev eth9 is not an interface of the --interfaces file (it has lo, ens5, cbr0, tunl0)"
        );
        let e = parse_ip_route(
            "r.json",
            r#"[{"type":"blackhole","dst":"10.9.0.0/16","dev":"ens5"}]"#,
            &ifs,
        )
        .unwrap_err();
        assert!(e.to_string().contains("type blackhole"), "{e}");
    }
}
