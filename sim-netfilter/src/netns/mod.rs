//! The hook pipeline of one network namespace: routing decision + netfilter hooks +
//! conntrack + NAT, in the kernel's order (docs/kernel-model.md §1).
//!
//! A [`Netns`] owns interfaces and routes ([`RoutingTable`]), the iptables [`Ruleset`] with its
//! [`RulesetState`], and the [`Conntrack`] table. [`Netns::process`] takes one packet and where
//! it came from ([`Ingress`]) and returns what leaves the namespace ([`Egress`]): transmitted
//! on an interface towards a next hop, or delivered to a local socket. Packets the kernel
//! itself generates (REJECT's ICMP error or TCP RST) are pushed through the OUTPUT path and
//! come out as egress too.
//!
//! The order of work per packet, after the kernel (`net/ipv4/ip_input.c`, `ip_forward.c`,
//! `ip_output.c`; priorities of `enum nf_ip_hook_priorities`):
//!
//! | received (`Ingress::Interface`) | locally generated (`Ingress::Local`) |
//! |---|---|
//! | PREROUTING: raw, conntrack in, mangle, nat (DNAT) | route lookup for the source/oif, OUTPUT: raw, conntrack in, mangle, nat (DNAT), filter |
//! | routing decision (`ip_route_input`): local → INPUT, else (`ip_forward`: TTL 1 → ICMP time exceeded, else TTL − 1) FORWARD, no route → drop | re-route if the destination changed (`ip_route_me_harder`) |
//! | INPUT: mangle, filter, nat (SNAT), confirm → local delivery | POSTROUTING: mangle, nat (SNAT/MASQUERADE), confirm |
//! | FORWARD: mangle, filter, then POSTROUTING: mangle, nat, confirm → transmit | a local destination loops back through PREROUTING on `lo` |
//!
//! nftables base chains ([`Netns::nft_apply`]) run among these by priority (`nft_hooks.rs`):
//! `filter` chains between the built-in entries whose priorities bracket theirs, `nat` chains
//! with the iptables nat table in the NAT core's lookup.
//!
//! The nat table is consulted only while NAT for that hook's manip type is not yet set up for
//! the connection (`nf_nat_inet_fn`: ctinfo NEW or RELATED and `!nf_nat_initialized`); when no
//! nat rule maps it a null binding is recorded. Every packet, replies included, is then
//! rewritten from the conntrack entry alone (`nf_nat_packet`), so changing rules never changes
//! an existing flow.
//!
//! The namespace holds two rulesets, as the kernel does: the `iptables` tables see IPv4
//! packets and the `ip6tables` tables ([`Netns::restore_family`] with [`Family::Ipv6`]) IPv6
//! packets, at the same hooks and priorities; each has its own counters, nth counters and
//! `recent` lists (xt_recent keeps one set of lists per family).
//!
//! Simplifications, each deliberate: one routing table (no policy routing, no `fwmark`
//! routes); no fragmentation; the `security` table is not modelled.
//! The ICMP and ICMPv6 errors the namespace sends (REJECT's, time exceeded) pass its
//! per-destination rate limits ([`IcmpRateLimit`]: `icmp_ratelimit`, `icmp_ratemask`,
//! `net.ipv6.icmp.ratelimit`, `net.ipv6.icmp.ratemask`); the global `icmp_msgs_per_sec`
//! limit is not modelled.
//!
//! This file holds the namespace, its settings and what it returns, and the setting up
//! (interfaces, routes, rules, sysctls). The rooms: `pipeline` is the packet's path through
//! the hooks (receive, forward, input, output, postrouting, kernel-generated errors);
//! `tables` runs the iptables tables at a hook and applies their verdicts; `ct` is the
//! conntrack side (conntrack in, confirm, and the entry as the rules see it); `nat` is the
//! NAT core (the nat table lookup, the binding, the rewrite).

mod bridge;
#[cfg(test)]
mod bridge_tests;
mod ct;
mod icmp;
mod ipvs_hook;
#[cfg(test)]
mod ipvs_tests;
mod nat;
mod nft_hooks;
mod pipeline;
mod proxy_arp;
mod route;
mod tables;
mod vxlan;
#[cfg(test)]
mod vxlan_tests;

use ct::{ct_info_kind, ct_state_of, tuple_text};

pub use bridge::{Bridge, BridgePort, Frame, L2Seen, Mac, BRIDGE_NF_CALL_IPTABLES};
pub use icmp::IcmpRateLimit;
pub use ipvs_hook::KUBE_IPVS0;
pub use proxy_arp::{ArpAnswer, LINK_LOCAL_GATEWAY};
pub use vxlan::{
    vxlan_src_port, VxlanConfig, VxlanWire, ICMP_FRAG_NEEDED, VXLAN_DEFAULT_DST_PORT,
    VXLAN_HEADROOM, VXLAN_OUTER_TTL, VXLAN_SRC_PORT_RANGE,
};

pub use route::{Interface, Prefix, Route, RouteDecision, RouteError, RoutingTable, SharedRoutes};

use crate::eval::{
    AddrTypeLookup, CtInfo, CtInfoKind, CtState, CtTuple, EvalCtx, NatRequest, PhysDevs,
};
use crate::rule::{AddrType, CtDirection, PortNat};
use crate::ruleset::{RestoreMemo, RestoreOptions, RestoreReport, Ruleset, SaveOptions};
use crate::state::RulesetState;
use crate::trace::{Trace, TraceEvent};
use crate::types::{Family, Hook, Table};
use crate::{Action, RestoreError};
use sim_conntrack::{
    ConfirmError, Conntrack, CtEntry, CtEvent, CtHandle, CtVerdict, Dir, EntryId, Expiry, Manip,
    NatRange, Status, SysctlError, Sysctls, Tuple, TupleV4,
};
use sim_core::{IfName, Packet, SimRng, SimTime};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// The loopback interface every namespace has.
pub fn lo() -> IfName {
    IfName::new("lo").unwrap_or_else(|_| unreachable!("\"lo\" is a valid interface name"))
}

/// How deep kernel-generated packets (a REJECT answering a REJECT…) may nest.
const MAX_GENERATED_DEPTH: u8 = 4;

/// The sysctls besides conntrack's that [`Netns::set_sysctl`] takes, by their full names: the
/// kernel's ICMP error rate limit (`net/ipv4/icmp.c`: `sysctl_icmp_ratelimit` in
/// milliseconds, `sysctl_icmp_ratemask`) and ICMPv6's (`net/ipv6/icmp.c`: `icmpv6_time` in
/// milliseconds, `icmpv6_ratemask` as a list of types).
pub const ICMP_SYSCTLS: [&str; 4] = [
    "net.ipv4.icmp_ratelimit",
    "net.ipv4.icmp_ratemask",
    "net.ipv6.icmp.ratelimit",
    "net.ipv6.icmp.ratemask",
];

/// Settings of a new namespace.
#[derive(Clone, Debug)]
pub struct NetnsConfig {
    /// Its name, used in labels of its random streams and in traces.
    pub name: String,
    /// The run's seed.
    pub seed: u64,
    /// Conntrack settings.
    pub sysctls: Sysctls,
}

impl NetnsConfig {
    /// A namespace called `name` with the kernel's default sysctls.
    pub fn new(name: &str, seed: u64) -> NetnsConfig {
        NetnsConfig {
            name: name.to_string(),
            seed,
            sysctls: Sysctls::default(),
        }
    }
}

/// Where a packet enters the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ingress {
    /// Received on this interface: it takes PREROUTING.
    Interface(IfName),
    /// Sent by a process of this namespace: it takes OUTPUT.
    Local,
}

/// What leaves the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Egress {
    /// Transmitted on `dev` towards `next_hop`.
    Transmit {
        /// The outgoing interface.
        dev: IfName,
        /// The gateway, or the destination itself when directly connected.
        next_hop: IpAddr,
        /// The packet as it leaves (after NAT).
        packet: Packet,
    },
    /// Accepted at INPUT: for a socket of this namespace.
    LocalDeliver {
        /// The packet as the socket sees it (after NAT).
        packet: Packet,
    },
}

/// How the packet's journey ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Transmitted on an interface.
    Transmitted,
    /// Delivered to a local socket.
    Delivered,
    /// Dropped: by a rule (`table`/`hook`), by conntrack, or for want of a route.
    Dropped(DropCause),
    /// Rejected by a rule, with an ICMP error or TCP RST sent back (if any could be).
    Rejected {
        /// The table that rejected it.
        table: Table,
        /// At which hook.
        hook: Hook,
    },
    /// Rejected by an nftables rule.
    RejectedNft {
        /// The base chain, `ip kube-proxy filter-forward`.
        chain: String,
        /// At which hook.
        hook: Hook,
    },
}

/// Why a packet was dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DropCause {
    /// A DROP verdict (or a chain policy).
    Rule {
        /// Table.
        table: Table,
        /// Hook.
        hook: Hook,
    },
    /// A `drop` verdict (or policy) of an nftables base chain.
    NftRule {
        /// The base chain, `ip kube-proxy filter-forward`.
        chain: String,
        /// Hook.
        hook: Hook,
    },
    /// No route to the destination.
    NoRoute,
    /// Conntrack dropped it (`nf_conntrack: table full, dropping packet`).
    TableFull,
    /// The confirm hook found a clashing entry (`insert_failed`).
    InsertFailed,
    /// MASQUERADE found no address on the outgoing interface.
    NoMasqueradeAddress,
    /// The NAT range could not be mapped.
    Nat(String),
    /// A packet generated by the kernel nested too deeply.
    Loop,
    /// Its TTL (hop limit) ran out on the way through (answered with ICMP time exceeded).
    TtlExceeded,
    /// Received on an interface other than `lo` with a source address this namespace holds
    /// (or a 127.0.0.0/8 one): the routing decision refuses it as a martian source
    /// (`fib_validate_source` / `ip_route_input_slow`, counted in `in_martian_src`).
    MartianSource,
    /// A frame for a station on the port it came in by, which is not in hairpin mode
    /// (`should_deliver`, net/bridge/br_forward.c).
    BridgeHairpinOff(IfName),
    /// A flooded frame with no port to go to.
    BridgeFlooded,
    /// Received on an interface that is no bridge's port.
    NotABridgePort(IfName),
    /// The next hop on a bridge has no neighbour entry (ARP unanswered).
    NeighbourUnresolved(IpAddr),
    /// IPVS dropped it (`ip_vs_in`: its real server is gone, no real server available, a
    /// reused tuple).
    Ipvs(String),
    /// Over the outgoing VXLAN device's MTU with DF set (`ip_forward`: ICMP fragmentation
    /// needed sent back), or a local send over it (`EMSGSIZE`).
    FragNeeded {
        /// The device's MTU.
        mtu: u16,
    },
    /// `vxlan_xmit` found no forwarding database entry for the inner frame's MAC.
    VxlanFdbMiss(Mac),
    /// The encapsulated packet's outer packet did not leave the namespace.
    VxlanOuterLost,
    /// A UDP packet to a VXLAN port that no device takes (no VXLAN header, unknown VNI).
    VxlanNoDevice,
    /// The inner frame is for another MAC than the receiving VXLAN device's
    /// (`PACKET_OTHERHOST`, dropped by `ip_rcv`).
    VxlanOtherHost(Mac),
}

impl fmt::Display for DropCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropCause::Rule { table, hook } => write!(f, "dropped by {table} {hook}"),
            DropCause::NftRule { chain, hook } => {
                write!(f, "dropped by nft chain {chain} ({hook})")
            }
            DropCause::NoRoute => f.write_str("no route to host"),
            DropCause::TableFull => f.write_str("nf_conntrack: table full, dropping packet"),
            DropCause::InsertFailed => f.write_str("conntrack insert failed"),
            DropCause::NoMasqueradeAddress => {
                f.write_str("MASQUERADE: no address on the outgoing interface")
            }
            DropCause::Nat(e) => write!(f, "NAT failed: {e}"),
            DropCause::Loop => f.write_str("generated packets nested too deeply"),
            DropCause::TtlExceeded => f.write_str("TTL exceeded in transit"),
            DropCause::MartianSource => f.write_str("martian source"),
            DropCause::BridgeHairpinOff(p) => {
                write!(f, "bridge: back out of input port {p}, hairpin mode off")
            }
            DropCause::BridgeFlooded => f.write_str("bridge: flooded, no port to go to"),
            DropCause::NotABridgePort(p) => write!(f, "{p} is not a bridge port"),
            DropCause::NeighbourUnresolved(a) => write!(f, "neighbour {a} unresolved"),
            DropCause::Ipvs(s) => write!(f, "IPVS: {s}"),
            DropCause::FragNeeded { mtu } => {
                write!(f, "over the MTU {mtu} with DF set: fragmentation needed")
            }
            DropCause::VxlanFdbMiss(m) => write!(f, "vxlan: {m} not in the forwarding database"),
            DropCause::VxlanOuterLost => f.write_str("vxlan: the outer packet was lost"),
            DropCause::VxlanNoDevice => f.write_str("vxlan: no device for the packet"),
            DropCause::VxlanOtherHost(m) => {
                write!(f, "vxlan: inner frame for {m}, another host")
            }
        }
    }
}

/// One step of a packet's way through the namespace, for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A hook starts.
    Hook(Hook),
    /// What conntrack made of the packet.
    Conntrack {
        /// The ctstate rules will see (`NEW`, `ESTABLISHED reply`, `INVALID`, …).
        state: String,
        /// The entry, as `conntrack -L` prints it (unconfirmed entries with their timeout).
        entry: Option<String>,
    },
    /// The rule-level trace of one table at one hook.
    Rules(TraceEvent),
    /// A NAT binding was set up for the connection.
    NatSetup {
        /// At which hook.
        hook: Hook,
        /// `Src` or `Dst`.
        manip: Manip,
        /// What the rules asked for, or `null binding`.
        what: String,
        /// The entry's reply tuple after the binding (`src=… dst=… sport=… dport=…`).
        reply: String,
    },
    /// The packet was rewritten from its entry.
    Rewrite {
        /// At which hook.
        hook: Hook,
        /// Before.
        before: String,
        /// After.
        after: String,
    },
    /// The routing decision.
    Route(String),
    /// The entry was confirmed (entered the table).
    Confirm(String),
    /// The rule-level trace of an nftables base chain.
    Nft(crate::nft::NftStep),
    /// A decision of a bridge or of `br_netfilter`, in the kernel's words.
    Bridge(String),
    /// What IPVS did: the connection found or the real server scheduled, the reply
    /// un-NAT'd (`ip_vs_in`, `ip_vs_out`).
    Ipvs(String),
    /// An encapsulation or decapsulation step of a VXLAN device, in the kernel's words.
    Vxlan(String),
    /// How it ended.
    Fate(String),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Hook(h) => write!(f, "{h}"),
            Step::Conntrack { state, entry } => match entry {
                Some(e) => write!(f, "  conntrack: {state}: {e}"),
                None => write!(f, "  conntrack: {state}"),
            },
            Step::Rules(e) => write!(f, "  {e}"),
            Step::Nft(e) => write!(f, "  {e}"),
            Step::NatSetup {
                hook,
                manip,
                what,
                reply,
            } => {
                let m = match manip {
                    Manip::Src => "SNAT",
                    Manip::Dst => "DNAT",
                };
                write!(
                    f,
                    "  nat {hook}: {m} binding: {what}; reply tuple now {reply}"
                )
            }
            Step::Rewrite {
                hook,
                before,
                after,
            } => write!(f, "  rewrite at {hook}: {before}  =>  {after}"),
            Step::Route(r) => write!(f, "  route: {r}"),
            Step::Confirm(e) => write!(f, "  confirm: {e}"),
            Step::Bridge(s) => write!(f, "  bridge: {s}"),
            Step::Ipvs(s) => write!(f, "  ipvs: {s}"),
            Step::Vxlan(s) => write!(f, "  vxlan: {s}"),
            Step::Fate(s) => write!(f, "=> {s}"),
        }
    }
}

/// The steps of one packet (and of packets the kernel generated for it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PacketTrace {
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl fmt::Display for PacketTrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.steps {
            writeln!(f, "{s}")?;
        }
        Ok(())
    }
}

/// What [`Netns::process`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessResult {
    /// What left the namespace, in order: the packet itself (if it survived), then any packet
    /// the kernel generated (REJECT's answer).
    pub out: Vec<Egress>,
    /// How the packet's journey ended.
    pub fate: Fate,
    /// The conntrack entry the packet belongs to after processing (if tracked and still
    /// present), as a snapshot.
    pub entry: Option<CtEntry>,
    /// The trace, when asked for.
    pub trace: Option<PacketTrace>,
}

/// Why a namespace could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// An interface or route problem.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// An iptables-restore problem.
    #[error(transparent)]
    Restore(Box<RestoreError>),
    /// A sysctl problem.
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
}

impl From<RestoreError> for NetnsError {
    fn from(e: RestoreError) -> Self {
        NetnsError::Restore(Box::new(e))
    }
}

/// One network namespace: addresses, routes, rules, conntrack.
#[derive(Clone, Debug)]
pub struct Netns {
    name: String,
    routes: RoutingTable,
    ruleset: Ruleset,
    rules_state: RulesetState,
    /// The `ip6tables` tables, which see IPv6 packets.
    ruleset6: Ruleset,
    rules_state6: RulesetState,
    conntrack: Conntrack,
    stat_rng: SimRng,
    icmp_limit: IcmpRateLimit,
    /// The run's seed (a reboot builds a new conntrack table from it).
    seed: u64,
    nft: crate::nft::NftRuleset,
    nft_hooks: nft_hooks::NftHooks,
    /// The compiled nftables ruleset.
    nft_fast: nft_hooks::NftFast,
    /// Whether the nftables ruleset is compiled ([`Netns::set_nft_compiled`]).
    nft_compile: bool,
    /// Set only during [`Netns::process_branching`].
    branching: Option<Box<crate::branch::Branching>>,
    /// Its bridges and `br_netfilter`'s setting.
    bridges: bridge::Bridges,
    /// Its IPVS state (`ipvs_hook.rs`).
    ipvs: crate::ipvs::Ipvs,
    /// Its VXLAN devices.
    vxlans: vxlan::Vxlans,
    /// Interfaces with `net.ipv4.conf.<dev>.proxy_arp` on (`proxy_arp.rs`).
    proxy_arp: std::collections::BTreeSet<IfName>,
}

/// `addrtype` classification from the routing table (`inet_dev_addr_type`).
struct AddrTypes<'a>(&'a RoutingTable);

impl AddrTypeLookup for AddrTypes<'_> {
    /// An address of one of the namespace's interfaces (`lo`'s `::1` included); with `dev`,
    /// only of that interface (`match_lookup_rt6` with `XT_ADDRTYPE_LIMIT_IFACE_*`).
    fn is_local6(&self, addr: std::net::Ipv6Addr, dev: Option<&str>) -> bool {
        let a = IpAddr::V6(addr);
        if addr.is_loopback() {
            return dev.is_none_or(|d| d == lo().as_str());
        }
        self.0.is_local(a)
            && dev.is_none_or(|d| self.0.interface_of(a).is_some_and(|o| o.as_str() == d))
    }

    fn addr_type(&self, addr: Ipv4Addr, dev: Option<&str>) -> AddrType {
        let a = IpAddr::V4(addr);
        let on_dev = |owner: Option<IfName>| match dev {
            None => true,
            Some(d) => owner.map(|o| o.as_str() == d).unwrap_or(false),
        };
        if u32::from(addr) >> 24 == 0 || addr.is_broadcast() {
            return AddrType::Broadcast;
        }
        if addr.is_multicast() {
            return AddrType::Multicast;
        }
        if addr.is_loopback() {
            return if on_dev(Some(lo())) {
                AddrType::Local
            } else {
                AddrType::Unicast
            };
        }
        if self.0.is_local(a) {
            return if on_dev(self.0.interface_of(a)) {
                AddrType::Local
            } else {
                AddrType::Unicast
            };
        }
        if self.0.is_broadcast(a) {
            return AddrType::Broadcast;
        }
        AddrType::Unicast
    }
}

/// The per-packet working state of [`Netns::process`].
struct Flight {
    pkt: Packet,
    handle: Option<CtHandle>,
    untracked: bool,
    local_origin: bool,
    trace: Option<PacketTrace>,
    out: Vec<Egress>,
    generated: Vec<Packet>,
    /// The conntrack view the rules see, read once and kept until something changes the
    /// handle, `untracked` or the entry (a NAT binding, a new ctmark): a packet's tables
    /// then share one view instead of reading the entry each.
    view: Option<CtState>,
    /// The bridge ports of a bridged packet in `br_netfilter`'s passes (`nf_bridge_info`);
    /// `None` for a routed or local packet.
    phys: Option<PhysDevs>,
    /// `skb->ipvs_property`: IPVS has translated it, its hooks leave it alone.
    ipvs_property: bool,
}

impl Flight {
    fn new(pkt: Packet, traced: bool, out: Vec<Egress>) -> Flight {
        Flight {
            pkt,
            handle: None,
            untracked: false,
            local_origin: false,
            trace: traced.then(PacketTrace::default),
            out,
            generated: Vec::new(),
            view: None,
            phys: None,
            ipvs_property: false,
        }
    }

    /// The rules' view of this packet: its conntrack state (read once and kept in `view`,
    /// see there) and how it came, for one table or base chain walk.
    #[inline]
    fn eval_ctx<'a>(
        &mut self,
        conntrack: &Conntrack,
        addr_types: &'a dyn AddrTypeLookup,
        now: SimTime,
        rng: &'a mut SimRng,
    ) -> EvalCtx<'a> {
        let ct = match self.view {
            Some(ct) => ct,
            None => {
                let v = ct_state_of(conntrack, self.handle, self.untracked, now);
                self.view = Some(v);
                v
            }
        };
        EvalCtx {
            packet: self.pkt,
            ct,
            addr_types,
            now,
            rng,
            local_origin: self.local_origin,
            force_random: None,
            force_numgen: None,
            phys: self.phys,
        }
    }
}

/// What [`Netns::process_into`] returns (what left the namespace went into the caller's
/// buffer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Processed {
    /// How the packet's journey ended.
    pub fate: Fate,
    /// The conntrack entry the packet belongs to after processing, if tracked and still
    /// present ([`Conntrack::get`] gives its snapshot).
    pub entry: Option<EntryId>,
}

/// The result of running one table at one hook.
enum TableOutcome {
    Continue,
    Stop(Fate),
}

impl Netns {
    /// A namespace with only `lo` (127.0.0.1/8, ::1/128) and no rules.
    pub fn new(cfg: NetnsConfig) -> Netns {
        let mut routes = RoutingTable::new();
        // `lo` cannot clash in a new table.
        let _ = routes.add_interface(
            lo(),
            &[
                (IpAddr::V4(Ipv4Addr::LOCALHOST), 8),
                (IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), 128),
            ],
        );
        Netns {
            conntrack: Conntrack::new(cfg.seed, &format!("{}/conntrack", cfg.name), cfg.sysctls),
            stat_rng: SimRng::derive(cfg.seed, &format!("{}/statistic", cfg.name)),
            ipvs: crate::ipvs::Ipvs::new(cfg.seed, &format!("{}/ipvs", cfg.name)),
            name: cfg.name,
            routes,
            ruleset: Ruleset::new(),
            rules_state: RulesetState::new(),
            ruleset6: Ruleset::new_family(Family::Ipv6),
            rules_state6: RulesetState::new(),
            icmp_limit: IcmpRateLimit::default(),
            seed: cfg.seed,
            nft: crate::nft::NftRuleset::new(),
            nft_hooks: Default::default(),
            nft_fast: Default::default(),
            nft_compile: true,
            branching: None,
            bridges: Default::default(),
            vxlans: Default::default(),
            proxy_arp: Default::default(),
        }
    }

    /// A reboot: the rules, the conntrack table (its statistics too) and the ICMP rate
    /// limit's state are gone, with no events; interfaces, routes and sysctls stay (the
    /// machine's configuration brings them back). A new table draws from a new stream, so a
    /// second life does not repeat the first one's random choices.
    pub fn reboot(&mut self, now: SimTime) {
        let sysctls = self.conntrack.sysctls().clone();
        let label = format!("{}/conntrack/boot-{}", self.name, now.as_nanos());
        self.conntrack = Conntrack::new(self.seed, &label, sysctls);
        self.ruleset = Ruleset::new();
        self.rules_state = RulesetState::new();
        self.ruleset6 = Ruleset::new_family(Family::Ipv6);
        self.rules_state6 = RulesetState::new();
        self.nft = crate::nft::NftRuleset::new();
        self.nft_hooks = Default::default();
        self.nft_fast = Default::default();
        self.icmp_limit = self.icmp_limit.reset();
        let label = format!("{}/ipvs/boot-{}", self.name, now.as_nanos());
        self.ipvs.reboot(self.seed, &label);
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds an interface with addresses (and their connected routes).
    pub fn add_interface(
        &mut self,
        name: IfName,
        addrs: &[(IpAddr, u8)],
    ) -> Result<(), NetnsError> {
        Ok(self.routes.add_interface(name, addrs)?)
    }

    /// Adds a route to `dst` via `gateway` (or directly connected) on `dev`.
    pub fn add_route(
        &mut self,
        dst: Prefix,
        gateway: Option<IpAddr>,
        dev: IfName,
    ) -> Result<(), NetnsError> {
        Ok(self.routes.add_route(dst, gateway, dev)?)
    }

    /// Adds routes (destination, gateway, device) as [`Netns::add_route`] one after the
    /// other would, in one go (see [`RoutingTable::add_routes`]). On error none is added.
    pub fn add_routes(
        &mut self,
        routes: &[(Prefix, Option<IpAddr>, IfName)],
    ) -> Result<(), NetnsError> {
        Ok(self.routes.add_routes(routes)?)
    }

    /// Adds every route of `shared` but its `skip`-th, without a copy
    /// ([`RoutingTable::add_shared_routes`]): a cluster's nodes share the routes to each
    /// other's pod CIDRs. On error none is added.
    pub fn add_shared_routes(
        &mut self,
        shared: &std::sync::Arc<SharedRoutes>,
        skip: Option<usize>,
    ) -> Result<(), NetnsError> {
        Ok(self.routes.add_shared_routes(shared, skip)?)
    }

    /// Makes room for `additional` more routes ([`RoutingTable::reserve`]).
    pub fn reserve_routes(&mut self, additional: usize) {
        self.routes.reserve(additional);
    }

    /// Removes the routes to exactly `dst`; returns how many there were.
    pub fn remove_route(&mut self, dst: Prefix) -> usize {
        self.routes.remove_route(dst)
    }

    /// The interfaces and routes.
    pub fn routing(&self) -> &RoutingTable {
        &self.routes
    }

    /// Applies `iptables-restore` input (`noflush` as `--noflush`). On error nothing changes.
    pub fn restore(&mut self, text: &str, noflush: bool) -> Result<RestoreReport, NetnsError> {
        Ok(self.ruleset.restore(
            text,
            &RestoreOptions {
                noflush,
                counters: false,
            },
        )?)
    }

    /// [`Netns::restore`] keeping the input's counters, as `iptables-restore -c`: the
    /// `[packets:bytes]` before each rule and on each built-in chain's policy line are where
    /// the counters start (a real node's `iptables-save -c` loaded as its state, so a later
    /// save with `-c` prints them plus what the simulation added). On error nothing changes.
    pub fn restore_with_counters(
        &mut self,
        text: &str,
        noflush: bool,
    ) -> Result<RestoreReport, NetnsError> {
        Ok(self.ruleset.restore(
            text,
            &RestoreOptions {
                noflush,
                counters: true,
            },
        )?)
    }

    /// [`Netns::restore`] through a [`RestoreMemo`] shared by many namespaces: when this
    /// namespace's ruleset has the lineage of one the memo already applied `text` to, it takes
    /// that outcome instead of parsing again (identical result; see [`RestoreMemo`]). Give
    /// every namespace the same `Arc`: the memo then knows the text without comparing it
    /// ([`RestoreMemo::restore_shared`]).
    pub fn restore_shared(
        &mut self,
        text: &std::sync::Arc<str>,
        noflush: bool,
        memo: &mut RestoreMemo,
    ) -> Result<RestoreReport, NetnsError> {
        Ok(memo.restore_shared(
            &mut self.ruleset,
            text,
            &RestoreOptions {
                noflush,
                counters: false,
            },
        )?)
    }

    /// `iptables-restore` ([`Family::Ipv4`]) or `ip6tables-restore` ([`Family::Ipv6`])
    /// input: `noflush` as `--noflush`, `counters` as `-c` (ip6tables 1.8.9 keeps only the
    /// policy counters it is given). On error nothing changes.
    pub fn restore_family(
        &mut self,
        family: Family,
        text: &str,
        noflush: bool,
        counters: bool,
    ) -> Result<RestoreReport, NetnsError> {
        Ok(self
            .ruleset_mut(family)
            .restore(text, &RestoreOptions { noflush, counters })?)
    }

    /// Runs one `ip6tables -t TABLE ARGS` command (`-I INPUT …`).
    pub fn ip6tables(&mut self, table: Table, args: &str) -> Result<(), NetnsError> {
        Ok(self.ruleset6.command(table, args)?)
    }

    /// `iptables-save` or `ip6tables-save` output, without the dated comment lines
    /// (`counters` as `-c`).
    pub fn save_family(&self, family: Family, counters: bool) -> String {
        self.ruleset_of(family).save(
            self.rules_state_of(family),
            &SaveOptions {
                counters,
                timestamp: None,
                table: None,
            },
        )
    }

    /// The `iptables` or `ip6tables` rules.
    pub fn ruleset_of(&self, family: Family) -> &Ruleset {
        match family {
            Family::Ipv4 => &self.ruleset,
            Family::Ipv6 => &self.ruleset6,
        }
    }

    fn ruleset_mut(&mut self, family: Family) -> &mut Ruleset {
        match family {
            Family::Ipv4 => &mut self.ruleset,
            Family::Ipv6 => &mut self.ruleset6,
        }
    }

    /// The counters and match state of the `iptables` or `ip6tables` rules.
    pub fn rules_state_of(&self, family: Family) -> &RulesetState {
        match family {
            Family::Ipv4 => &self.rules_state,
            Family::Ipv6 => &self.rules_state6,
        }
    }

    /// Replaces the addresses of `recent` list `name` of the `family` rules (an ip6tables
    /// list holds IPv6 addresses; see [`RulesetState::load_recent`]).
    pub fn load_recent_family(
        &mut self,
        family: Family,
        name: &str,
        entries: &[crate::RecentEntryView],
    ) -> Result<(), crate::RecentLoadError> {
        match family {
            Family::Ipv4 => self.rules_state.load_recent(&self.ruleset, name, entries),
            Family::Ipv6 => self.rules_state6.load_recent(&self.ruleset6, name, entries),
        }
    }

    /// Runs one `iptables -t TABLE ARGS` command (`-I INPUT …`).
    pub fn iptables(&mut self, table: Table, args: &str) -> Result<(), NetnsError> {
        Ok(self.ruleset.command(table, args)?)
    }

    /// `nfacct add NAME`: creates an accounting object that `-m nfacct --nfacct-name NAME`
    /// rules can then use (kube-proxy ≥ 1.29 creates its counters before it restores rules).
    pub fn nfacct_add(&mut self, name: &str) -> Result<(), crate::ruleset::NfacctError> {
        self.ruleset.nfacct_add(name)
    }

    /// `ipset restore`: `text` applied to the namespace's ipsets, which `-m set` matches of
    /// its iptables rules read (IPv4 sets only; see [`crate::ipset`]).
    pub fn ipset_restore(&mut self, text: &str) -> Result<(), crate::ipset::IpsetError> {
        self.ruleset.ipset_restore(text)
    }

    /// `ipset save` text of the namespace's sets.
    pub fn ipset_save(&self) -> String {
        self.ruleset.ipsets().save()
    }

    /// `ipset list` text of the namespace's sets (`terse`: `ipset list -t`).
    pub fn ipset_list(&self, terse: bool) -> String {
        self.ruleset.ipset_list(terse)
    }

    /// `iptables-save` output, without the dated comment lines (`counters` as `-c`).
    pub fn save(&self, counters: bool) -> String {
        self.ruleset.save(
            &self.rules_state,
            &SaveOptions {
                counters,
                timestamp: None,
                table: None,
            },
        )
    }

    /// The rules.
    pub fn ruleset(&self) -> &Ruleset {
        &self.ruleset
    }

    /// The rules' counters and match state.
    pub fn rules_state(&self) -> &RulesetState {
        &self.rules_state
    }

    /// Replaces the addresses of `recent` list `name` (see [`RulesetState::load_recent`]):
    /// a real node's `/proc/net/xt_recent/NAME` as the starting state.
    pub fn load_recent(
        &mut self,
        name: &str,
        entries: &[crate::RecentEntryView],
    ) -> Result<(), crate::RecentLoadError> {
        self.rules_state.load_recent(&self.ruleset, name, entries)
    }

    /// Sets whether long chains use the first-match index (on by default).
    pub fn set_rule_indexing(&mut self, on: bool) {
        self.ruleset.set_indexing(on);
        self.ruleset6.set_indexing(on);
    }

    /// The conntrack table.
    pub fn conntrack(&self) -> &Conntrack {
        &self.conntrack
    }

    /// The conntrack table, to list or delete entries (`conntrack -D`).
    pub fn conntrack_mut(&mut self) -> &mut Conntrack {
        &mut self.conntrack
    }

    /// Sets a sysctl by its name: conntrack's (`net.netfilter.nf_conntrack_udp_timeout`, …)
    /// and the ICMP error rate limit's (`net.ipv4.icmp_ratelimit` in milliseconds,
    /// `net.ipv4.icmp_ratemask`).
    pub fn set_sysctl(&mut self, name: &str, value: &str) -> Result<(), NetnsError> {
        let short = name.trim();
        if short == BRIDGE_NF_CALL_IPTABLES {
            // brnf_sysctl_call_tables: any integer, stored as 0 or 1.
            let n: i64 = value.trim().parse().map_err(|_| SysctlError::NotANumber {
                name: short.to_string(),
                value: value.to_string(),
                expected: "0 or 1",
            })?;
            self.bridges.call_iptables = n != 0;
            return Ok(());
        }
        if short.starts_with("net.ipv4.vs.") {
            return Ok(self.ipvs.set_sysctl(short, value)?);
        }
        if short == "net.ipv6.icmp.ratelimit" || short == "net.ipv6.icmp.ratemask" {
            return self.set_icmpv6_sysctl(short, value);
        }
        let short = short.strip_prefix("net.ipv4.").unwrap_or(short);
        if short == "icmp_ratelimit" || short == "icmp_ratemask" {
            let full = format!("net.ipv4.{short}");
            const E: &str = "an integer from 0 to 2147483647";
            let n: i64 = value.trim().parse().map_err(|_| SysctlError::NotANumber {
                name: full.clone(),
                value: value.to_string(),
                expected: E,
            })?;
            if !(0..=i64::from(i32::MAX)).contains(&n) {
                return Err(SysctlError::OutOfRange {
                    name: full,
                    value: n.to_string(),
                    expected: E,
                }
                .into());
            }
            if short == "icmp_ratelimit" {
                self.icmp_limit.ratelimit = sim_core::SimDuration::from_millis(n as u64);
            } else {
                self.icmp_limit.ratemask = n as u32;
            }
            return Ok(());
        }
        Ok(self.conntrack.sysctls_mut().set(name, value)?)
    }

    /// `net.ipv6.icmp.ratelimit` (milliseconds, 0 to 2147483647) or `net.ipv6.icmp.ratemask`
    /// (a list of ICMPv6 types and ranges, `0-1,3-127`).
    fn set_icmpv6_sysctl(&mut self, full: &str, value: &str) -> Result<(), NetnsError> {
        if full.ends_with("ratemask") {
            let m = icmp::parse_ratemask_v6(value).map_err(|_| SysctlError::OutOfRange {
                name: full.to_string(),
                value: format!("{value:?}"),
                expected: "a list of ICMPv6 types 0-255 and ranges, such as 0-1,3-127",
            })?;
            self.icmp_limit.ratemask_v6 = m;
            return Ok(());
        }
        const E: &str = "an integer from 0 to 2147483647";
        let n: i64 = value.trim().parse().map_err(|_| SysctlError::NotANumber {
            name: full.to_string(),
            value: value.to_string(),
            expected: E,
        })?;
        if !(0..=i64::from(i32::MAX)).contains(&n) {
            return Err(SysctlError::OutOfRange {
                name: full.to_string(),
                value: n.to_string(),
                expected: E,
            }
            .into());
        }
        self.icmp_limit.ratelimit_v6 = sim_core::SimDuration::from_millis(n as u64);
        Ok(())
    }

    /// The next instant something happens by itself (a conntrack entry or an IPVS
    /// connection expires).
    pub fn poll_timeout(&mut self) -> Option<SimTime> {
        let ct = self.conntrack.next_expiry();
        match (ct, self.ipvs.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expires what is due at `now`.
    pub fn handle_timeout(&mut self, now: SimTime) {
        self.conntrack.expire(now);
        self.ipvs_expire(now);
    }

    /// Conntrack events since the last call (`conntrack -E`).
    pub fn drain_conntrack_events(&mut self) -> Vec<CtEvent> {
        self.conntrack.drain_events()
    }
}

#[cfg(test)]
mod tests;
