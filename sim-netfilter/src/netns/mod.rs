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
//! Simplifications, each deliberate: one routing table (no policy routing, no `fwmark`
//! routes); IPv6 packets are tracked and routed but iptables rules (IPv4 only) do not see
//! them, as with an empty ip6tables; no fragmentation; the `security` table is not modelled.
//! The ICMPv4 errors the namespace sends (REJECT's, time exceeded) pass its per-destination
//! rate limit ([`IcmpRateLimit`]: `icmp_ratelimit`, `icmp_ratemask`); the global
//! `icmp_msgs_per_sec` limit and ICMPv6's limits are not modelled.

mod icmp;
mod nft_hooks;
mod route;

pub use icmp::IcmpRateLimit;

pub use route::{Interface, Prefix, Route, RouteDecision, RouteError, RoutingTable};

use crate::eval::{AddrTypeLookup, CtInfo, CtInfoKind, CtState, CtTuple, EvalCtx, NatRequest};
use crate::rule::{AddrType, CtDirection, PortNat};
use crate::ruleset::{RestoreMemo, RestoreOptions, RestoreReport, Ruleset, SaveOptions};
use crate::state::RulesetState;
use crate::trace::{Trace, TraceEvent};
use crate::types::{Hook, Table};
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
/// milliseconds, `sysctl_icmp_ratemask`).
pub const ICMP_SYSCTLS: [&str; 2] = ["net.ipv4.icmp_ratelimit", "net.ipv4.icmp_ratemask"];

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
    conntrack: Conntrack,
    stat_rng: SimRng,
    icmp_limit: IcmpRateLimit,
    /// The run's seed (a reboot builds a new conntrack table from it).
    seed: u64,
    nft: crate::nft::NftRuleset,
    nft_hooks: nft_hooks::NftHooks,
    /// Set only during [`Netns::process_branching`].
    branching: Option<Box<crate::branch::Branching>>,
}

/// `addrtype` classification from the routing table (`inet_dev_addr_type`).
struct AddrTypes<'a>(&'a RoutingTable);

impl AddrTypeLookup for AddrTypes<'_> {
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

fn ct_tuple(t: TupleV4) -> CtTuple {
    CtTuple {
        src: t.src,
        dst: t.dst,
        proto: t.proto,
        sport: t.sport,
        dport: t.dport,
    }
}

fn tuple_text(t: &Tuple) -> String {
    if sim_conntrack::tuple::has_ports(t.proto) {
        format!(
            "src={} dst={} sport={} dport={}",
            t.src, t.dst, t.sport, t.dport
        )
    } else {
        format!("src={} dst={}", t.src, t.dst)
    }
}

/// What `--ctstate` calls a packet's ctinfo.
fn ct_info_kind(ctinfo: sim_conntrack::CtInfo) -> CtInfoKind {
    use sim_conntrack::CtInfo as K;
    match ctinfo {
        K::New => CtInfoKind::New,
        K::Established | K::EstablishedReply => CtInfoKind::Established,
        K::Related | K::RelatedReply => CtInfoKind::Related,
    }
}

/// The conntrack view rules see for a packet holding `handle`.
fn ct_state_of(ct: &Conntrack, handle: Option<CtHandle>, untracked: bool, now: SimTime) -> CtState {
    if untracked {
        return CtState::Untracked;
    }
    let Some(h) = handle else {
        return CtState::Invalid;
    };
    let Some(e) = ct.rule_view(h.id) else {
        return CtState::Invalid;
    };
    let info = ct_info_kind(h.ctinfo);
    let dir = match h.dir() {
        Dir::Original => CtDirection::Original,
        Dir::Reply => CtDirection::Reply,
    };
    // `--ctexpire` compares nf_ct_expires(ct) / HZ: the whole seconds left. An unconfirmed
    // entry still holds its timeout relative (nf_ct_expires subtracts the jiffies stamp from
    // it), which on any host up longer than the timeout plus 5 minutes is negative: 0. Measured
    // on a 6.x kernel: a connection's first packet sees 0, the next one 29 (UDP, 30 s).
    let expires = match e.expiry {
        Expiry::At(t) => t.saturating_since(now).as_secs(),
        Expiry::AfterConfirm(_) => 0,
    };
    CtState::Tracked(CtInfo {
        info,
        dir,
        status: u32::from(e.status.0),
        orig: ct_tuple(e.orig),
        reply: ct_tuple(e.reply),
        mark: e.mark,
        expires_secs: u32::try_from(expires).unwrap_or(u32::MAX),
    })
}

fn ct_state_text(state: &CtState) -> String {
    match state {
        CtState::Invalid => "INVALID".into(),
        CtState::Untracked => "UNTRACKED".into(),
        CtState::Tracked(i) => {
            let mut s = match i.info {
                CtInfoKind::New => "NEW".to_string(),
                CtInfoKind::Established => "ESTABLISHED".to_string(),
                CtInfoKind::Related => "RELATED".to_string(),
            };
            if i.dir == CtDirection::Reply {
                s.push_str(" (reply direction)");
            }
            s
        }
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
            name: cfg.name,
            routes,
            ruleset: Ruleset::new(),
            rules_state: RulesetState::new(),
            icmp_limit: IcmpRateLimit::default(),
            seed: cfg.seed,
            nft: crate::nft::NftRuleset::new(),
            nft_hooks: Default::default(),
            branching: None,
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
        self.nft = crate::nft::NftRuleset::new();
        self.nft_hooks = Default::default();
        let mut limit = IcmpRateLimit::default();
        limit.ratelimit = self.icmp_limit.ratelimit;
        limit.ratemask = self.icmp_limit.ratemask;
        self.icmp_limit = limit;
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

    /// Runs one `iptables -t TABLE ARGS` command (`-I INPUT …`).
    pub fn iptables(&mut self, table: Table, args: &str) -> Result<(), NetnsError> {
        Ok(self.ruleset.command(table, args)?)
    }

    /// `nfacct add NAME`: creates an accounting object that `-m nfacct --nfacct-name NAME`
    /// rules can then use (kube-proxy ≥ 1.29 creates its counters before it restores rules).
    pub fn nfacct_add(&mut self, name: &str) -> Result<(), crate::ruleset::NfacctError> {
        self.ruleset.nfacct_add(name)
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

    /// The next instant something happens by itself (a conntrack entry expires).
    pub fn poll_timeout(&mut self) -> Option<SimTime> {
        self.conntrack.next_expiry()
    }

    /// Expires what is due at `now`.
    pub fn handle_timeout(&mut self, now: SimTime) {
        self.conntrack.expire(now);
    }

    /// Conntrack events since the last call (`conntrack -E`).
    pub fn drain_conntrack_events(&mut self) -> Vec<CtEvent> {
        self.conntrack.drain_events()
    }

    /// Pushes one packet through the namespace.
    pub fn process(&mut self, now: SimTime, pkt: Packet, from: Ingress) -> ProcessResult {
        self.process_result(now, pkt, from, false)
    }

    /// Like [`Netns::process`], with a step-by-step trace (rules evaluated in order, without the
    /// index).
    pub fn process_traced(&mut self, now: SimTime, pkt: Packet, from: Ingress) -> ProcessResult {
        self.process_result(now, pkt, from, true)
    }

    /// Like [`Netns::process_traced`], following given branches of the `statistic` matches
    /// ([`crate::branch`]): each iptables walk uses the leaf `branching` gives for it, or
    /// forks at every random statistic match and follows its first leaf. The returned
    /// [`Branching`](crate::branch::Branching) holds the path taken and the runs still to make
    /// for the other leaves. The trace holds every event but the rules that did not match.
    pub fn process_branching(
        &mut self,
        now: SimTime,
        pkt: Packet,
        from: Ingress,
        branching: crate::branch::Branching,
    ) -> (ProcessResult, crate::branch::Branching) {
        self.branching = Some(Box::new(branching));
        let r = self.process_result(now, pkt, from, true);
        let b = self.branching.take().map(|b| *b).unwrap_or_default();
        (r, b)
    }

    fn process_result(
        &mut self,
        now: SimTime,
        pkt: Packet,
        from: Ingress,
        traced: bool,
    ) -> ProcessResult {
        // Most packets leave once (or not at all): one allocation of the right size.
        let mut r = ProcessResult {
            out: Vec::with_capacity(1),
            fate: Fate::Transmitted,
            entry: None,
            trace: None,
        };
        let (fate, _, trace) = self.run(now, pkt, from, traced, &mut r.out, Some(&mut r.entry), 0);
        r.fate = fate;
        r.trace = trace;
        r
    }

    /// [`Netns::process`] for a caller that pushes many packets: what leaves the namespace is
    /// appended to `out` (whose allocation the caller can reuse from packet to packet), and the
    /// entry comes back as its id instead of a snapshot. Same effects, same egress in the same
    /// order.
    pub fn process_into(
        &mut self,
        now: SimTime,
        pkt: Packet,
        from: Ingress,
        out: &mut Vec<Egress>,
    ) -> Processed {
        let (fate, entry, _) = self.run(now, pkt, from, false, out, None, 0);
        Processed { fate, entry }
    }

    /// One packet and the packets the kernel generates for it (REJECT answers), appending
    /// egress to `out`. Returns the fate, the id of the packet's entry if it is still present
    /// (and its snapshot in `entry`, when asked), and the trace.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        now: SimTime,
        pkt: Packet,
        from: Ingress,
        traced: bool,
        out: &mut Vec<Egress>,
        entry: Option<&mut Option<CtEntry>>,
        depth: u8,
    ) -> (Fate, Option<EntryId>, Option<PacketTrace>) {
        let start = out.len();
        let mut f = Flight::new(pkt, traced, std::mem::take(out));
        let fate = match from {
            Ingress::Interface(dev) => {
                f.pkt.iif = Some(dev);
                f.pkt.oif = None;
                self.receive(now, &mut f)
            }
            Ingress::Local => {
                f.pkt.iif = None;
                f.local_origin = true;
                self.output(now, &mut f)
            }
        };
        let id = self.entry_after(&f, entry);
        *out = f.out;
        let mut trace = f.trace;
        if let Some(t) = trace.as_mut() {
            t.steps.push(Step::Fate(fate_text(&fate, &out[start..])));
        }
        // Packets the kernel generated (REJECT answers) take the OUTPUT path.
        for g in f.generated {
            let gt = if depth >= MAX_GENERATED_DEPTH {
                None
            } else {
                self.run(now, g, Ingress::Local, traced, out, None, depth + 1)
                    .2
            };
            if let (Some(t), Some(gt)) = (trace.as_mut(), gt) {
                t.steps
                    .push(Step::Fate(format!("kernel-generated answer: {g}")));
                t.steps.extend(gt.steps);
            }
        }
        (fate, id, trace)
    }

    /// The packet's entry once the pipeline is done: its id if it is still present, and its
    /// snapshot into `snapshot` when asked.
    fn entry_after(&self, f: &Flight, snapshot: Option<&mut Option<CtEntry>>) -> Option<EntryId> {
        let h = f.handle?;
        match snapshot {
            None => self.conntrack.mark(h.id).map(|_| h.id),
            Some(slot) => {
                *slot = self.conntrack.get(h.id);
                slot.map(|e| e.id)
            }
        }
    }

    #[inline(always)]
    fn step(f: &mut Flight, s: impl FnOnce(&Packet) -> Step) {
        if let Some(t) = f.trace.as_mut() {
            t.steps.push(s(&f.pkt));
        }
    }

    /// A received packet: PREROUTING, routing, then INPUT or FORWARD + POSTROUTING.
    fn receive(&mut self, now: SimTime, f: &mut Flight) -> Fate {
        use nft_hooks::prio as P;
        let h = Hook::PreRouting;
        Self::step(f, |_| Step::Hook(h));
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::FIRST, P::RAW) {
            return fate;
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Raw, h) {
            return fate;
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::RAW, P::CONNTRACK) {
            return fate;
        }
        if let Some(fate) = self.conntrack_in(now, f) {
            return fate;
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::CONNTRACK, P::MANGLE) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Mangle, h) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::MANGLE, P::NAT_DST) {
            return self.dropped(now, f, fate);
        }
        if let Err(fate) = self.nat_hook(now, f, h) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::NAT_DST, P::LAST) {
            return self.dropped(now, f, fate);
        }
        // Routing decision (ip_route_input_noref).
        if self.routes.is_local(f.pkt.dst) {
            if self.martian_source(f) {
                return self.dropped(now, f, Fate::Dropped(DropCause::MartianSource));
            }
            Self::step(f, |p| Step::Route(format!("{} is local: INPUT", p.dst)));
            return self.input(now, f);
        }
        let Some(route) = self.routes.route_for(f.pkt.dst) else {
            Self::step(f, |p| Step::Route(format!("no route to {}", p.dst)));
            return self.dropped(now, f, Fate::Dropped(DropCause::NoRoute));
        };
        if self.martian_source(f) {
            return self.dropped(now, f, Fate::Dropped(DropCause::MartianSource));
        }
        let (dev, next_hop) = (route.dev, route.gateway.unwrap_or(f.pkt.dst));
        if f.trace.is_some() {
            let route = *route;
            Self::step(f, |p| {
                Step::Route(format!("{} via route {route}: FORWARD", p.dst))
            });
        }
        // ip_forward / ip6_forward: a packet with no hop left dies before the FORWARD hook,
        // answered with an ICMP time exceeded (`too_many_hops`); the others lose one hop
        // (ip_decrease_ttl) before FORWARD sees them.
        if f.pkt.ttl <= 1 {
            return self.ttl_exceeded(now, f);
        }
        f.pkt.ttl -= 1;
        f.pkt.oif = Some(dev);
        Self::step(f, |_| Step::Hook(Hook::Forward));
        let (lo, hi) = (nft_hooks::prio::FIRST, nft_hooks::prio::LAST);
        let mut from = lo;
        for (table, at) in [
            (Table::Mangle, nft_hooks::prio::MANGLE),
            (Table::Filter, nft_hooks::prio::FILTER),
        ] {
            if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Forward, from, at) {
                return self.dropped(now, f, fate);
            }
            if let TableOutcome::Stop(fate) = self.run_table(now, f, table, Hook::Forward) {
                return self.dropped(now, f, fate);
            }
            from = at;
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Forward, from, hi) {
            return self.dropped(now, f, fate);
        }
        self.postrouting(now, f, dev, next_hop)
    }

    /// Whether the routing decision refuses a received IPv4 packet as a martian source:
    /// `ip_route_input_slow` drops a 127.0.0.0/8 source on any interface but `lo`
    /// (`route_localnet` is 0), and `fib_validate_source`, called for
    /// both local delivery and forwarding once a route exists, returns `-EINVAL` for a source
    /// that is one of the namespace's own addresses (`inet_lookup_ifaddr_rcu`; `rp_filter`
    /// and `accept_local` are 0, as on a kind node). A packet looped back on `lo` keeps its
    /// output route and is never checked. Checked on Linux 6.18 in a private namespace: a
    /// frame injected on a veth with the source of the veth's own address, or of `lo`'s
    /// 127.0.0.1, is dropped (`in_martian_src` + 1); an unassigned source is accepted.
    #[inline]
    fn martian_source(&self, f: &mut Flight) -> bool {
        let IpAddr::V4(src) = f.pkt.src else {
            return false;
        };
        if f.pkt.iif == Some(lo()) {
            return false;
        }
        if !src.is_loopback() && self.routes.interface_of(f.pkt.src).is_none() {
            return false;
        }
        Self::step(f, |p| {
            Step::Route(format!("martian source {} from {}: dropped", p.dst, p.src))
        });
        true
    }

    /// A packet to forward whose TTL (hop limit) has run out: dropped, and its sender told
    /// with an ICMP time exceeded (`icmp_send(skb, ICMP_TIME_EXCEEDED, ICMP_EXC_TTL, 0)`,
    /// ICMPv6 `ICMPV6_TIME_EXCEED`/`ICMPV6_EXC_HOPLIMIT`), from the address the route back
    /// to it would use. No error answers an ICMP error (`icmp_send` / `icmpv6_send` refuse).
    /// ICMP rate limiting (`icmp_ratelimit`, `icmp_msgs_per_sec`) is not modelled.
    #[cold]
    fn ttl_exceeded(&mut self, now: SimTime, f: &mut Flight) -> Fate {
        use sim_core::packet::icmp;
        Self::step(f, |p| {
            Step::Route(format!("TTL {} exceeded in transit: dropped", p.ttl))
        });
        if !crate::eval::is_icmp_error(&f.pkt) {
            if let Some(src) = self.routes.source_for(f.pkt.src) {
                let t = if f.pkt.is_ipv4() {
                    icmp::TIME_EXCEEDED
                } else {
                    icmp::V6_TIME_EXCEEDED
                };
                self.send_error(now, f, Packet::icmp_error(src, &f.pkt, t, 0));
            }
        }
        self.dropped(now, f, Fate::Dropped(DropCause::TtlExceeded))
    }

    /// Sends a packet the kernel answers with (REJECT's, time exceeded) through OUTPUT,
    /// unless it is an ICMPv4 error the destination's rate limit holds back.
    fn send_error(&mut self, now: SimTime, f: &mut Flight, answer: Packet) {
        if !self.icmp_error_allowed(now, &answer) {
            Self::step(f, |p| {
                Step::Route(format!(
                    "ICMP error to {} not sent: rate limited (net.ipv4.icmp_ratelimit)",
                    p.src
                ))
            });
            return;
        }
        f.generated.push(answer);
    }

    /// Whether this namespace's kernel may send `answer` now, an ICMP error it generated
    /// (`icmpv4_xrlim_allow`: the per-destination limit of [`IcmpRateLimit`]); takes the
    /// error's cost when it may. Anything but an ICMPv4 error is always allowed. For
    /// drivers whose sockets answer closed ports on the namespace's own addresses.
    pub fn icmp_error_allowed(&mut self, now: SimTime, answer: &Packet) -> bool {
        let (
            sim_core::L4::Icmp {
                icmp_type, code, ..
            },
            IpAddr::V4(dst),
        ) = (answer.l4, answer.dst)
        else {
            return true;
        };
        let via_lo = self.routes.lookup(answer.dst) == RouteDecision::Local;
        self.icmp_limit.allow(now, dst, icmp_type, code, via_lo)
    }

    /// INPUT: mangle, filter, nat (SNAT), confirm, deliver.
    fn input(&mut self, now: SimTime, f: &mut Flight) -> Fate {
        use nft_hooks::prio as P;
        Self::step(f, |_| Step::Hook(Hook::Input));
        let mut from = P::FIRST;
        for (table, at) in [(Table::Mangle, P::MANGLE), (Table::Filter, P::FILTER)] {
            if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Input, from, at) {
                return self.dropped(now, f, fate);
            }
            if let TableOutcome::Stop(fate) = self.run_table(now, f, table, Hook::Input) {
                return self.dropped(now, f, fate);
            }
            from = at;
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Input, from, P::NAT_SRC) {
            return self.dropped(now, f, fate);
        }
        if let Err(fate) = self.nat_hook(now, f, Hook::Input) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, Hook::Input, P::NAT_SRC, P::LAST)
        {
            return self.dropped(now, f, fate);
        }
        if let Some(fate) = self.confirm(now, f) {
            return fate;
        }
        f.out.push(Egress::LocalDeliver { packet: f.pkt });
        Fate::Delivered
    }

    /// A locally generated packet: route, OUTPUT, re-route, POSTROUTING.
    fn output(&mut self, now: SimTime, f: &mut Flight) -> Fate {
        // The socket's route lookup picks the interface (ip_route_output_key).
        let first = self.routes.lookup(f.pkt.dst);
        if first == RouteDecision::Unreachable {
            Self::step(f, |p| Step::Route(format!("no route to {}", p.dst)));
            return Fate::Dropped(DropCause::NoRoute);
        }
        f.pkt.oif = Some(match first {
            RouteDecision::Forward { dev, .. } => dev,
            _ => lo(),
        });
        use nft_hooks::prio as P;
        let h = Hook::Output;
        Self::step(f, |_| Step::Hook(h));
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::FIRST, P::RAW) {
            return fate;
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Raw, h) {
            return fate;
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::RAW, P::CONNTRACK) {
            return fate;
        }
        if let Some(fate) = self.conntrack_in(now, f) {
            return fate;
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::CONNTRACK, P::MANGLE) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Mangle, h) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::MANGLE, P::NAT_DST) {
            return self.dropped(now, f, fate);
        }
        let dst_before = f.pkt.dst;
        if let Err(fate) = self.nat_hook(now, f, h) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::NAT_DST, P::FILTER) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Filter, h) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::FILTER, P::LAST) {
            return self.dropped(now, f, fate);
        }
        // ip_route_me_harder: the destination changed (DNAT in OUTPUT), route again.
        let decision = if f.pkt.dst != dst_before {
            let d = self.routes.lookup(f.pkt.dst);
            Self::step(f, |p| {
                Step::Route(format!("destination changed to {}: re-routed", p.dst))
            });
            d
        } else {
            first
        };
        match decision {
            RouteDecision::Local => {
                f.pkt.oif = Some(lo());
                Self::step(f, |p| Step::Route(format!("{} is local: via lo", p.dst)));
                let fate = self.postrouting(now, f, lo(), f.pkt.dst);
                if fate != Fate::Transmitted {
                    return fate;
                }
                // Looped back: the packet is received on lo (PREROUTING, INPUT).
                let Some(Egress::Transmit { packet, .. }) = f.out.pop() else {
                    return fate;
                };
                // The looped-back packet keeps its conntrack reference (skb->_nfct), so
                // PREROUTING does not track it again (nf_conntrack_in: "Previously seen
                // (loopback or untracked)? Ignore.").
                let mut back = Flight {
                    pkt: packet,
                    handle: f.handle,
                    untracked: f.untracked,
                    local_origin: false,
                    trace: f.trace.take(),
                    out: std::mem::take(&mut f.out),
                    generated: std::mem::take(&mut f.generated),
                    view: None,
                };
                back.pkt.iif = Some(lo());
                back.pkt.oif = None;
                let fate = self.receive(now, &mut back);
                f.trace = back.trace;
                f.out = back.out;
                f.generated = back.generated;
                f.handle = back.handle;
                f.view = back.view;
                fate
            }
            RouteDecision::Forward { dev, next_hop, .. } => {
                f.pkt.oif = Some(dev);
                self.postrouting(now, f, dev, next_hop)
            }
            RouteDecision::Unreachable => {
                Self::step(f, |p| Step::Route(format!("no route to {}", p.dst)));
                self.dropped(now, f, Fate::Dropped(DropCause::NoRoute))
            }
        }
    }

    /// POSTROUTING: mangle, nat (SNAT/MASQUERADE), confirm, transmit.
    #[inline]
    fn postrouting(&mut self, now: SimTime, f: &mut Flight, dev: IfName, next_hop: IpAddr) -> Fate {
        use nft_hooks::prio as P;
        let h = Hook::PostRouting;
        Self::step(f, |_| Step::Hook(h));
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::FIRST, P::MANGLE) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.run_table(now, f, Table::Mangle, h) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::MANGLE, P::NAT_SRC) {
            return self.dropped(now, f, fate);
        }
        if let Err(fate) = self.nat_postrouting(now, f, dev, next_hop) {
            return self.dropped(now, f, fate);
        }
        if let TableOutcome::Stop(fate) = self.nft_filter(now, f, h, P::NAT_SRC, P::LAST) {
            return self.dropped(now, f, fate);
        }
        if let Some(fate) = self.confirm(now, f) {
            return fate;
        }
        f.out.push(Egress::Transmit {
            dev,
            next_hop,
            packet: f.pkt,
        });
        Fate::Transmitted
    }

    /// "Conntrack in" at PREROUTING/OUTPUT. Returns a fate when conntrack drops the packet.
    #[inline]
    fn conntrack_in(&mut self, now: SimTime, f: &mut Flight) -> Option<Fate> {
        if f.handle.is_some() {
            // Already tracked: a packet looped back through lo.
            return None;
        }
        if f.untracked {
            Self::step(f, |_| Step::Conntrack {
                state: "UNTRACKED".into(),
                entry: None,
            });
            return None;
        }
        // A packet of no known flow walks the nat table next: ask for its rules now, so
        // that they load while conntrack makes the entry (`hint.rs`).
        let (ruleset, state) = (&self.ruleset, &self.rules_state);
        let pkt = &f.pkt;
        let v = self
            .conntrack
            .conntrack_in_then(now, pkt, || ruleset.prefetch_new_flow(state, pkt));
        match v {
            CtVerdict::Tracked(h) if f.trace.is_none() => {
                f.handle = Some(h);
                f.view = None;
                None
            }
            v => self.conntrack_in_rare(now, f, v),
        }
    }

    /// [`Netns::conntrack_in`]'s outcomes other than an untraced tracked packet.
    #[inline(never)]
    fn conntrack_in_rare(&mut self, now: SimTime, f: &mut Flight, v: CtVerdict) -> Option<Fate> {
        match v {
            CtVerdict::Tracked(h) => {
                f.handle = Some(h);
                f.view = None;
                if f.trace.is_some() {
                    let st = ct_state_text(&ct_state_of(&self.conntrack, f.handle, false, now));
                    let entry = self
                        .conntrack
                        .get(h.id)
                        .map(|e| e.list_line(now).to_string());
                    Self::step(f, |_| Step::Conntrack { state: st, entry });
                }
                None
            }
            CtVerdict::Invalid(reason) => {
                Self::step(f, |_| Step::Conntrack {
                    state: format!("INVALID ({reason:?})"),
                    entry: None,
                });
                None
            }
            CtVerdict::Drop(_) => {
                Self::step(f, |_| Step::Conntrack {
                    state: "dropped: nf_conntrack: table full, dropping packet".into(),
                    entry: None,
                });
                Some(Fate::Dropped(DropCause::TableFull))
            }
        }
    }

    /// Evaluates one table at one hook and applies what it says to the flight.
    #[inline]
    fn run_table(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        table: Table,
        hook: Hook,
    ) -> TableOutcome {
        // A table without a chain at this hook (or an IPv6 packet, which iptables does not
        // see) accepts at once; only a trace wants to say so.
        if f.trace.is_none() && (!f.pkt.is_ipv4() || !self.ruleset.has_hook(table, hook)) {
            return TableOutcome::Continue;
        }
        match self.replay(f, table, hook) {
            // A remembered walk never untracks (CT is impure): an ACCEPT just goes on.
            Some(v) if v.action == Action::Accept => TableOutcome::Continue,
            Some(v) => self.outcome(now, f, table, hook, v),
            None => self.run_table_rules(now, f, table, hook),
        }
    }

    /// The remembered outcome of a pure walk of `table` at `hook` for the packet in flight,
    /// replayed from its `--ctstate` bits and the packet alone, without building the whole
    /// conntrack view (see [`Ruleset::replay_hook`]); `None` when the rules must be walked
    /// (always with a trace, which records every rule).
    #[inline]
    fn replay(&mut self, f: &mut Flight, table: Table, hook: Hook) -> Option<crate::Verdict> {
        if f.trace.is_some() {
            return None;
        }
        let bits = self.ct_bits(f);
        self.ruleset
            .replay_hook(table, hook, &mut f.pkt, bits, &mut self.rules_state)
    }

    /// [`Netns::run_table`] once there is something to evaluate.
    #[inline(never)]
    fn run_table_rules(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        table: Table,
        hook: Hook,
    ) -> TableOutcome {
        let verdict = self.eval(now, f, table, hook);
        self.outcome(now, f, table, hook, verdict)
    }

    /// What a table's verdict does to the flight.
    fn outcome(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        table: Table,
        hook: Hook,
        verdict: crate::Verdict,
    ) -> TableOutcome {
        if verdict.notrack && table == Table::Raw {
            f.untracked = true;
            f.view = None;
        }
        match verdict.action {
            Action::Accept => TableOutcome::Continue,
            Action::Drop => TableOutcome::Stop(Fate::Dropped(DropCause::Rule { table, hook })),
            Action::Reject(with) => {
                // icmp_send answers from the packet's destination when it is ours, else from
                // the address the route back to the sender would use.
                let src = if self.routes.is_local(f.pkt.dst) {
                    f.pkt.dst
                } else {
                    self.routes.source_for(f.pkt.src).unwrap_or(f.pkt.dst)
                };
                if let Some(answer) = with.response(&f.pkt, src) {
                    self.send_error(now, f, answer);
                }
                TableOutcome::Stop(Fate::Rejected { table, hook })
            }
        }
    }

    /// Evaluates `table` at `hook` for the packet in flight: builds the rules' view of it
    /// (conntrack state, address types), keeps MARK's change to the packet and CONNMARK's to
    /// the entry, and appends the rule trace.
    fn eval(&mut self, now: SimTime, f: &mut Flight, table: Table, hook: Hook) -> crate::Verdict {
        let ct = match f.view {
            Some(ct) => ct,
            None => {
                let v = ct_state_of(&self.conntrack, f.handle, f.untracked, now);
                f.view = Some(v);
                v
            }
        };
        let addr_types = AddrTypes(&self.routes);
        let mut rule_trace = f.trace.as_ref().map(|_| Trace::new());
        let mut ctx = EvalCtx {
            packet: f.pkt,
            ct,
            addr_types: &addr_types,
            now,
            rng: &mut self.stat_rng,
            local_origin: f.local_origin,
            force_random: None,
            force_numgen: None,
        };
        let verdict = match (self.branching.as_mut(), rule_trace.as_mut()) {
            (Some(br), Some(rt)) => {
                let j = br.walks;
                br.walks += 1;
                let (leaf, others) = match br.injected(j) {
                    Some(crate::branch::Taken::Leaf(l)) => (l, Vec::new()),
                    _ => {
                        let path = br.path().cloned();
                        let (first, rest) = self.ruleset.walk_all(
                            table,
                            hook,
                            &mut ctx,
                            &mut self.rules_state,
                            path,
                            &mut br.budget,
                        );
                        (
                            std::sync::Arc::new(first),
                            rest.into_iter()
                                .map(|l| crate::branch::Taken::Leaf(std::sync::Arc::new(l)))
                                .collect(),
                        )
                    }
                };
                ctx.packet.mark = leaf.mark;
                *ctx.rng = leaf.rng.clone();
                leaf.state.apply(&mut self.rules_state);
                rt.events.extend(leaf.events.iter().cloned());
                let v = leaf.verdict.clone();
                br.took(j, crate::branch::Taken::Leaf(leaf), others);
                v
            }
            _ => self.ruleset.run_hook(
                table,
                hook,
                &mut ctx,
                &mut self.rules_state,
                rule_trace.as_mut(),
            ),
        };
        // Rules change nothing of the packet but its mark (MARK, CONNMARK --restore-mark).
        f.pkt.mark = ctx.packet.mark;
        if let (Some(t), Some(rt)) = (f.trace.as_mut(), rule_trace) {
            t.steps.extend(rt.events.into_iter().map(Step::Rules));
        }
        if let (Some(m), Some(h)) = (verdict.ct_mark, f.handle) {
            self.conntrack.set_mark(h.id, m);
            f.view = None;
        }
        verdict
    }

    /// The `--ctstate` bits of the packet in flight: those of its view when it has one, else
    /// from its handle and the entry's status alone.
    #[inline]
    fn ct_bits(&self, f: &Flight) -> u16 {
        if let Some(v) = &f.view {
            return v.state_bits();
        }
        if f.untracked {
            return crate::rule::ctstate::UNTRACKED;
        }
        let Some(h) = f.handle else {
            return crate::rule::ctstate::INVALID;
        };
        let Some(status) = self.conntrack.status(h.id) else {
            return crate::rule::ctstate::INVALID;
        };
        crate::eval::tracked_state_bits(ct_info_kind(h.ctinfo), u32::from(status.0))
    }

    /// The nat table at a DNAT-type hook (PREROUTING, OUTPUT) or INPUT, then the rewrite.
    #[inline]
    fn nat_hook(&mut self, now: SimTime, f: &mut Flight, hook: Hook) -> Result<(), Fate> {
        let manip = match hook {
            Hook::PreRouting | Hook::Output => Manip::Dst,
            _ => Manip::Src,
        };
        let Some(h) = f.handle else {
            return Ok(());
        };
        if self.needs_nat_lookup(h, manip) {
            self.nat_lookup(now, f, h, manip, hook)?;
        }
        self.rewrite(f, h, manip, hook);
        Ok(())
    }

    /// A connection's first packet at a DNAT-type hook or INPUT: the nat table, and the
    /// binding it asks for.
    #[inline(never)]
    fn nat_lookup(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        h: CtHandle,
        manip: Manip,
        hook: Hook,
    ) -> Result<(), Fate> {
        let req = self.run_nat_table(now, f, hook)?;
        let range = match req {
            Some(NatRequest::Dnat(ref r)) | Some(NatRequest::Snat(ref r)) => Some(range_of(r)),
            Some(NatRequest::Redirect(ref p)) => {
                // nf_nat_redirect_ipv4: the incoming interface's primary address, or
                // 127.0.0.1 for locally generated packets.
                let addr = match f.pkt.iif {
                    None => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                    Some(dev) => self
                        .routes
                        .interfaces()
                        .iter()
                        .find(|i| i.name == dev)
                        .and_then(|i| i.addrs.iter().find(|(a, _)| a.is_ipv4()))
                        .map(|&(a, _)| a),
                };
                match addr {
                    Some(a) => Some(port_range(a, p)),
                    None => return Err(Fate::Dropped(DropCause::NoMasqueradeAddress)),
                }
            }
            Some(NatRequest::Masquerade(_)) | None => None,
        };
        self.bind(f, h, manip, hook, range, req.as_ref())
    }

    /// The nat table at POSTROUTING (MASQUERADE needs the outgoing interface), then the
    /// rewrite.
    #[inline]
    fn nat_postrouting(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        dev: IfName,
        next_hop: IpAddr,
    ) -> Result<(), Fate> {
        let Some(h) = f.handle else {
            return Ok(());
        };
        if self.needs_nat_lookup(h, Manip::Src) {
            self.nat_lookup_postrouting(now, f, h, dev, next_hop)?;
        }
        self.rewrite(f, h, Manip::Src, Hook::PostRouting);
        Ok(())
    }

    /// A connection's first packet at POSTROUTING: the nat table, and the binding it asks
    /// for (MASQUERADE's address from the outgoing interface).
    #[inline(never)]
    fn nat_lookup_postrouting(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        h: CtHandle,
        dev: IfName,
        next_hop: IpAddr,
    ) -> Result<(), Fate> {
        let manip = Manip::Src;
        let req = self.run_nat_table(now, f, Hook::PostRouting)?;
        let range = match &req {
            Some(NatRequest::Snat(r)) | Some(NatRequest::Dnat(r)) => Some(range_of(r)),
            Some(NatRequest::Masquerade(p)) => {
                // nf_nat_masquerade_ipv4: the outgoing interface's address for this next
                // hop (inet_select_addr); none → drop.
                match self.routes.select_source(dev, next_hop) {
                    Some(a) => Some(port_range(a, p)),
                    None => return Err(Fate::Dropped(DropCause::NoMasqueradeAddress)),
                }
            }
            _ => None,
        };
        self.bind(f, h, manip, Hook::PostRouting, range, req.as_ref())
    }

    /// Whether the nat table must be consulted (`nf_nat_inet_fn`): ctinfo NEW or RELATED and
    /// NAT of this manip type not yet set up.
    #[inline]
    fn needs_nat_lookup(&self, h: CtHandle, manip: Manip) -> bool {
        use sim_conntrack::CtInfo as K;
        matches!(h.ctinfo, K::New | K::Related | K::RelatedReply)
            && !self.conntrack.nat_initialized(h.id, manip)
    }

    fn run_nat_table(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        hook: Hook,
    ) -> Result<Option<NatRequest>, Fate> {
        if self.has_nft_nat(f, hook) {
            return self.nat_lookups(now, f, hook);
        }
        self.run_iptables_nat(now, f, hook)
    }

    /// The iptables nat table's lookup for a connection's first packet at `hook`.
    fn run_iptables_nat(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        hook: Hook,
    ) -> Result<Option<NatRequest>, Fate> {
        let table = Table::Nat;
        let verdict = match self.replay(f, table, hook) {
            Some(v) => v,
            None => self.eval(now, f, table, hook),
        };
        match verdict.action {
            Action::Accept => Ok(verdict.nat),
            Action::Drop => Err(Fate::Dropped(DropCause::Rule { table, hook })),
            Action::Reject(_) => Err(Fate::Rejected { table, hook }),
        }
    }

    /// Sets up the binding (or a null binding) for a new connection.
    fn bind(
        &mut self,
        f: &mut Flight,
        h: CtHandle,
        manip: Manip,
        hook: Hook,
        range: Option<NatRange>,
        req: Option<&NatRequest>,
    ) -> Result<(), Fate> {
        let what = f.trace.as_ref().map(|_| match (req, &range) {
            (Some(NatRequest::Dnat(_)), Some(r)) => format!("DNAT to {r}"),
            (Some(NatRequest::Snat(_)), Some(r)) => format!("SNAT to {r}"),
            (Some(NatRequest::Masquerade(_)), Some(r)) => format!("MASQUERADE to {r}"),
            (Some(NatRequest::Redirect(_)), Some(r)) => format!("REDIRECT to {r}"),
            _ => "null binding (no nat rule matched)".to_string(),
        });
        f.view = None;
        // A NAT target of the wrong manip type for this hook cannot be in a valid ruleset
        // (iptables refuses DNAT in POSTROUTING); treat it as no mapping.
        // No copy of the entry unless a trace shows its reply tuple.
        let result = match range {
            Some(r) => self.conntrack.nat_bind(h.id, manip, &r),
            None => self.conntrack.nat_null_bind(h.id, manip),
        };
        match result {
            Ok(()) => {
                if let Some(what) = what {
                    let reply = self
                        .conntrack
                        .get(h.id)
                        .map(|e| tuple_text(&e.reply))
                        .unwrap_or_default();
                    Self::step(f, |_| Step::NatSetup {
                        hook,
                        manip,
                        what,
                        reply,
                    });
                }
                Ok(())
            }
            Err(e) => Err(Fate::Dropped(DropCause::Nat(e.to_string()))),
        }
    }

    #[inline]
    fn rewrite(&mut self, f: &mut Flight, h: CtHandle, manip: Manip, hook: Hook) {
        if f.trace.is_none() {
            self.conntrack.nat_packet(h, manip, &mut f.pkt);
            return;
        }
        self.rewrite_traced(f, h, manip, hook);
    }

    #[inline(never)]
    fn rewrite_traced(&mut self, f: &mut Flight, h: CtHandle, manip: Manip, hook: Hook) {
        let before = f.trace.as_ref().map(|_| f.pkt);
        if self.conntrack.nat_packet(h, manip, &mut f.pkt) {
            if let Some(before) = before {
                Self::step(f, |p| Step::Rewrite {
                    hook,
                    before: before.to_string(),
                    after: p.to_string(),
                });
            }
        }
    }

    /// The confirm hook. Returns a fate when the packet is dropped here.
    #[inline]
    fn confirm(&mut self, now: SimTime, f: &mut Flight) -> Option<Fate> {
        let h = f.handle?;
        if f.trace.is_some() {
            return self.confirm_traced(now, f, h);
        }
        match self.conntrack.confirm(now, h) {
            Ok(()) => None,
            Err(e) => Self::confirm_failed(f, e),
        }
    }

    /// [`Netns::confirm`] with a trace, which says when an entry enters the table.
    #[inline(never)]
    fn confirm_traced(&mut self, now: SimTime, f: &mut Flight, h: CtHandle) -> Option<Fate> {
        let was_confirmed = self
            .conntrack
            .get(h.id)
            .map(|e| e.status.contains(Status::CONFIRMED))
            .unwrap_or(true);
        match self.conntrack.confirm(now, h) {
            Ok(()) => {
                if !was_confirmed {
                    let line = self
                        .conntrack
                        .get(h.id)
                        .map(|e| e.list_line(now).to_string())
                        .unwrap_or_default();
                    Self::step(f, |_| Step::Confirm(line));
                }
                None
            }
            Err(e) => Self::confirm_failed(f, e),
        }
    }

    /// A confirm that failed: the packet loses its entry, and is dropped on a clash.
    #[cold]
    fn confirm_failed(f: &mut Flight, e: ConfirmError) -> Option<Fate> {
        f.handle = None;
        f.view = None;
        match e {
            ConfirmError::InsertFailed(_) => Some(Fate::Dropped(DropCause::InsertFailed)),
            ConfirmError::NoEntry(_) => None,
        }
    }

    /// A packet that stops before confirm releases its new entry without events.
    fn dropped(&mut self, now: SimTime, f: &mut Flight, fate: Fate) -> Fate {
        if let Some(h) = f.handle {
            self.conntrack.discard(now, h);
        }
        fate
    }
}

fn range_of(r: &crate::rule::NatRange) -> NatRange {
    NatRange {
        addrs: r.addrs.map(|(a, b)| (IpAddr::V4(a), IpAddr::V4(b))),
        ports: r.ports,
        random: r.random,
        random_fully: r.random_fully,
        persistent: r.persistent,
    }
}

fn port_range(addr: IpAddr, p: &PortNat) -> NatRange {
    NatRange {
        addrs: Some((addr, addr)),
        ports: p.ports,
        random: p.random,
        random_fully: p.random_fully,
        persistent: false,
    }
}

fn fate_text(fate: &Fate, out: &[Egress]) -> String {
    match fate {
        Fate::Transmitted => match out.first() {
            Some(Egress::Transmit {
                dev,
                next_hop,
                packet,
            }) => format!("transmitted on {dev} to {next_hop}: {packet}"),
            _ => "transmitted".into(),
        },
        Fate::Delivered => match out.first() {
            Some(Egress::LocalDeliver { packet }) => format!("delivered locally: {packet}"),
            _ => "delivered locally".into(),
        },
        Fate::Dropped(c) => format!("dropped: {c}"),
        Fate::Rejected { table, hook } => format!("rejected by {table} {hook}"),
        Fate::RejectedNft { chain, hook } => format!("rejected by nft chain {chain} ({hook})"),
    }
}

#[cfg(test)]
mod tests;
