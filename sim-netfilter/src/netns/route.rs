//! Interfaces, addresses and the routing table of a network namespace.
//!
//! Enough of the kernel's FIB for a Kubernetes node: connected routes of each interface
//! address, per-destination routes (a pod's `/32` on its veth), routes via a gateway (other
//! nodes' pod CIDRs) and a default route. The lookup is longest prefix first, then the route
//! added first (`fib_table_lookup` picks the longest prefix; among equal prefixes we keep the
//! order of insertion, where the kernel would use metric and insertion order).
//!
//! IPv4 lookups go through an index kept up to date as routes and addresses change (updated in
//! place when an interface or a route is added, rebuilt otherwise): one sorted array of
//! networks per prefix length present, searched from the longest length down (a binary search
//! per length, so a node with a route per pod and per node stays cheap), and the local
//! addresses sorted for `is_local`. IPv6 (rare here) scans the routes in order.
//!
//! **Shared routes.** In a cluster every node holds a route to every other node's pod CIDR:
//! n² routes in all, 6 GB at 10,000 nodes. [`SharedRoutes`] holds such a list once, and
//! [`RoutingTable::add_shared_routes`] gives a namespace all of them but one (its own) without
//! a copy. The table behaves exactly as if the routes had been added with
//! [`RoutingTable::add_routes`] at that moment: [`RoutingTable::routes`] lists them in that
//! place, and lookups find the same route. While a shared list is attached, a namespace's
//! own routes never have the network and length of one of the shared ones (where one would,
//! the shared routes are first copied in and the table becomes an ordinary one), so a lookup
//! is the longer of the two prefixes found.

use sim_core::IfName;
use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

/// An address prefix `addr/len`, stored masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why a prefix is impossible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The prefix length exceeds the family's width.
    #[error("prefix length /{len} is too long for {addr} (at most /32 for IPv4, /128 for IPv6)")]
    PrefixTooLong {
        /// The address given.
        addr: IpAddr,
        /// The length given.
        len: u8,
    },
    /// The text is not `ADDRESS[/LEN]`.
    #[error("{0:?} is not an address prefix: expected ADDRESS/LEN such as 10.244.0.0/16")]
    BadPrefix(String),
    /// A route names an interface the namespace does not have.
    #[error("no interface named {0} in this namespace")]
    NoSuchInterface(IfName),
    /// The interface exists already.
    #[error("interface {0} exists already")]
    DuplicateInterface(IfName),
    /// A gateway or address is of the other IP family than the prefix.
    #[error("{0} and {1} are of different IP families")]
    FamilyMismatch(IpAddr, IpAddr),
}

fn width(a: IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

fn mask(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            IpAddr::V4((u32::from(v) & m).into())
        }
        IpAddr::V6(v) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            IpAddr::V6((u128::from(v) & m).into())
        }
    }
}

impl Prefix {
    /// `addr/len`, masked to its network address.
    pub fn new(addr: IpAddr, len: u8) -> Result<Prefix, RouteError> {
        if len > width(addr) {
            return Err(RouteError::PrefixTooLong { addr, len });
        }
        Ok(Prefix {
            addr: mask(addr, len),
            len,
        })
    }
    /// The host prefix of one address (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Prefix {
        Prefix {
            addr,
            len: width(addr),
        }
    }
    /// The default route's prefix of a family (`0.0.0.0/0` or `::/0`).
    pub fn default_for(v4: bool) -> Prefix {
        if v4 {
            Prefix {
                addr: IpAddr::V4(0.into()),
                len: 0,
            }
        } else {
            Prefix {
                addr: IpAddr::V6(0.into()),
                len: 0,
            }
        }
    }
    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }
    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }
    /// Whether this is a `/0`.
    pub fn is_default(&self) -> bool {
        self.len == 0
    }
    /// Whether `a` lies inside the prefix (never across families).
    pub fn contains(&self, a: IpAddr) -> bool {
        a.is_ipv4() == self.addr.is_ipv4() && mask(a, self.len) == self.addr
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl std::str::FromStr for Prefix {
    type Err = RouteError;
    /// `10.244.0.0/16`, or a bare address as a host prefix.
    fn from_str(s: &str) -> Result<Prefix, RouteError> {
        let bad = || RouteError::BadPrefix(s.to_string());
        match s.split_once('/') {
            Some((a, l)) => {
                let addr: IpAddr = a.parse().map_err(|_| bad())?;
                let len: u8 = l.parse().map_err(|_| bad())?;
                Prefix::new(addr, len)
            }
            None => Ok(Prefix::host(s.parse().map_err(|_| bad())?)),
        }
    }
}

/// A network interface with its addresses (the first of each family is the primary one,
/// which MASQUERADE uses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Its name.
    pub name: IfName,
    /// Its addresses with their prefix lengths, primary first.
    pub addrs: Vec<(IpAddr, u8)>,
}

/// One route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The destinations it covers.
    pub dst: Prefix,
    /// The next hop, or `None` for a directly connected destination.
    pub gateway: Option<IpAddr>,
    /// The interface it leaves by.
    pub dev: IfName,
}

impl fmt::Display for Route {
    /// Like `ip route`: `10.244.1.0/24 via 172.18.0.3 dev eth0`, `default via … dev eth0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.dst.is_default() {
            f.write_str("default")?;
        } else if self.dst.prefix_len() == width(self.dst.addr()) {
            write!(f, "{}", self.dst.addr())?;
        } else {
            write!(f, "{}", self.dst)?;
        }
        if let Some(g) = self.gateway {
            write!(f, " via {g}")?;
        }
        write!(f, " dev {}", self.dev)
    }
}

/// What a route lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteDecision {
    /// The destination is an address of this namespace: deliver locally (INPUT).
    Local,
    /// Send it out of `dev` towards `next_hop` (the gateway, or the destination itself).
    Forward {
        /// Outgoing interface.
        dev: IfName,
        /// The next hop's address.
        next_hop: IpAddr,
        /// The route used.
        route: Route,
    },
    /// No route: the packet is dropped.
    Unreachable,
}

/// The interfaces, addresses and routes of one namespace.
#[derive(Clone, Debug, Default)]
pub struct RoutingTable {
    ifaces: Vec<Interface>,
    /// Kept sorted by prefix length, longest first; stable for equal lengths.
    routes: Vec<Route>,
    /// Beside each of `routes`: whether it was added after the shared routes were attached
    /// (it lists after them among the routes of its length). All `false` without `shared`.
    late: Vec<bool>,
    /// The IPv4 lookup index over `ifaces` and `routes`.
    v4: V4Fib,
    /// Routes held in common with other namespaces (see the module documentation).
    shared: Option<Attached>,
}

/// IPv4 routes that many namespaces hold alike (every node's route to each other node's pod
/// CIDR), stored once: see [`RoutingTable::add_shared_routes`].
#[derive(Debug)]
pub struct SharedRoutes {
    /// Sorted by prefix length, longest first; stable for equal lengths (as given).
    routes: Vec<Route>,
    /// For each route as given, its index in `routes`.
    position: Vec<u32>,
    /// The lookup index over `routes` (no network twice at one length).
    levels: Vec<Level>,
}

impl SharedRoutes {
    /// The routes (destination, gateway, device), in the order [`RoutingTable::add_routes`]
    /// would be given them. `None` when they cannot be shared: a route is not IPv4 (or its
    /// gateway is not), or two routes have the same destination.
    pub fn new(routes: &[(Prefix, Option<IpAddr>, IfName)]) -> Option<Arc<SharedRoutes>> {
        let v4 = |a: IpAddr| a.is_ipv4();
        if routes
            .iter()
            .any(|(d, g, _)| !v4(d.addr()) || g.is_some_and(|g| !v4(g)))
        {
            return None;
        }
        let mut order: Vec<u32> = (0..routes.len() as u32).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(routes[i as usize].0.prefix_len()));
        let mut position = vec![0u32; routes.len()];
        for (at, &i) in order.iter().enumerate() {
            position[i as usize] = at as u32;
        }
        let sorted: Vec<Route> = order
            .iter()
            .map(|&i| {
                let (dst, gateway, dev) = routes[i as usize];
                Route { dst, gateway, dev }
            })
            .collect();
        let levels = V4Fib::build(&[], &sorted).levels;
        // Deduplicated levels shorter than the routes: some destination came twice.
        if levels.iter().map(|l| l.nets.len()).sum::<usize>() != sorted.len() {
            return None;
        }
        Some(Arc::new(SharedRoutes {
            routes: sorted,
            position,
            levels,
        }))
    }

    /// How many routes it holds.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// A [`SharedRoutes`] attached to one table, less one of its routes.
#[derive(Clone, Debug)]
struct Attached {
    table: Arc<SharedRoutes>,
    /// The index (in the table's sorted routes) of the route this namespace does not hold.
    skip: Option<u32>,
}

impl Attached {
    /// The index of the shared route to exactly `dst`, if this namespace holds it.
    fn find(&self, dst: Prefix) -> Option<usize> {
        let IpAddr::V4(net) = dst.addr() else {
            return None;
        };
        let len = dst.prefix_len();
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        let l = self.table.levels.iter().find(|l| l.mask == mask)?;
        let i = l
            .nets
            .binary_search_by_key(&u32::from(net), |&(n, _)| n)
            .ok()?;
        let at = l.nets[i].1;
        (Some(at) != self.skip).then_some(at as usize)
    }

    /// The longest-prefix shared route to `a` this namespace holds.
    #[inline]
    fn route(&self, a: u32) -> Option<&Route> {
        for l in &self.table.levels {
            let key = a & l.mask;
            if let Ok(i) = l.nets.binary_search_by_key(&key, |&(n, _)| n) {
                let at = l.nets[i].1;
                if Some(at) != self.skip {
                    return Some(&self.table.routes[at as usize]);
                }
            }
        }
        None
    }

    /// The routes this namespace holds, in order.
    fn routes(&self) -> impl Iterator<Item = (usize, &Route)> {
        let skip = self.skip.map(|s| s as usize);
        self.table
            .routes
            .iter()
            .enumerate()
            .filter(move |&(i, _)| Some(i) != skip)
    }
}

/// The IPv4 routes of one prefix length.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Level {
    mask: u32,
    /// (network, index in `routes`), sorted by network; for a network routed more than once
    /// only the route added first (the lowest index: `routes` is stable within a length).
    nets: Vec<(u32, u32)>,
}

/// The IPv4 side of a [`RoutingTable`] in searchable form: updated in place when an
/// interface or a route is added, rebuilt on other changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct V4Fib {
    /// One level per prefix length present, longest first.
    levels: Vec<Level>,
    /// IPv4 addresses of the interfaces, sorted, each with the index of the first interface
    /// (in the order they were added) that holds it.
    locals: Vec<(u32, u32)>,
}

impl V4Fib {
    fn build(ifaces: &[Interface], routes: &[Route]) -> V4Fib {
        let mut levels: Vec<Level> = Vec::new();
        // `routes` is sorted by length, longest first: each run of one length is a level
        // (sized at once: a node with a route per node rebuilds this on every pod added).
        let mut start = 0;
        for run in routes.chunk_by(|a, b| a.dst.prefix_len() == b.dst.prefix_len()) {
            let len = run[0].dst.prefix_len();
            let mut nets = Vec::with_capacity(run.len());
            for (i, r) in run.iter().enumerate() {
                if let IpAddr::V4(net) = r.dst.addr() {
                    nets.push((u32::from(net), (start + i) as u32));
                }
            }
            start += run.len();
            if !nets.is_empty() {
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                levels.push(Level { mask, nets });
            }
        }
        for l in &mut levels {
            // Stable sort by network, then keep the first route of each network.
            l.nets.sort_by_key(|&(n, _)| n);
            l.nets.dedup_by_key(|&mut (n, _)| n);
        }
        let mut locals: Vec<(u32, u32)> = Vec::new();
        for (i, iface) in ifaces.iter().enumerate() {
            for &(a, _) in &iface.addrs {
                if let IpAddr::V4(v) = a {
                    locals.push((u32::from(v), i as u32));
                }
            }
        }
        locals.sort_by_key(|&(a, _)| a);
        locals.dedup_by_key(|&mut (a, _)| a);
        V4Fib { levels, locals }
    }

    /// What [`V4Fib::build`] would give once `route` is inserted at `pos` of the routes
    /// (every route from `pos` on moving up one).
    fn route_inserted(&mut self, pos: usize, route: &Route) {
        let pos = pos as u32;
        for l in &mut self.levels {
            for e in &mut l.nets {
                if e.1 >= pos {
                    e.1 += 1;
                }
            }
        }
        let IpAddr::V4(net) = route.dst.addr() else {
            return;
        };
        let len = route.dst.prefix_len();
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        // Levels go longest prefix first: the larger mask first.
        let at = self.levels.partition_point(|l| l.mask > mask);
        if self.levels.get(at).is_none_or(|l| l.mask != mask) {
            self.levels.insert(
                at,
                Level {
                    mask,
                    nets: Vec::new(),
                },
            );
        }
        let nets = &mut self.levels[at].nets;
        // A network routed already keeps its route: that one was added first (a lower index).
        if let Err(i) = nets.binary_search_by_key(&u32::from(net), |&(n, _)| n) {
            nets.insert(i, (u32::from(net), pos));
        }
    }

    /// What [`V4Fib::build`] would give once interface `iface`, the last one, holds `a`.
    fn local_added(&mut self, a: u32, iface: u32) {
        // An address held already stays with its interface: that one was added first.
        if let Err(i) = self.locals.binary_search_by_key(&a, |&(x, _)| x) {
            self.locals.insert(i, (a, iface));
        }
    }

    /// The index of the interface holding local address `a`.
    #[inline]
    fn local(&self, a: u32) -> Option<usize> {
        self.locals
            .binary_search_by_key(&a, |&(x, _)| x)
            .ok()
            .map(|i| self.locals[i].1 as usize)
    }

    /// The index in `routes` of the longest-prefix route to `a`.
    #[inline]
    fn route(&self, a: u32) -> Option<usize> {
        for l in &self.levels {
            let key = a & l.mask;
            let found = if l.nets.len() <= 4 {
                l.nets.iter().find(|&&(n, _)| n == key).map(|&(_, i)| i)
            } else {
                l.nets
                    .binary_search_by_key(&key, |&(n, _)| n)
                    .ok()
                    .map(|i| l.nets[i].1)
            };
            if let Some(i) = found {
                return Some(i as usize);
            }
        }
        None
    }
}

impl RoutingTable {
    /// An empty table: no interface, no route.
    pub fn new() -> RoutingTable {
        RoutingTable::default()
    }

    /// Adds an interface with its addresses, and the connected route of each address whose
    /// prefix is shorter than a host prefix (as the kernel does when an address is added).
    pub fn add_interface(
        &mut self,
        name: IfName,
        addrs: &[(IpAddr, u8)],
    ) -> Result<(), RouteError> {
        if self.ifaces.iter().any(|i| i.name == name) {
            return Err(RouteError::DuplicateInterface(name));
        }
        for &(a, l) in addrs {
            Prefix::new(a, l)?;
        }
        let index = self.ifaces.len() as u32;
        self.ifaces.push(Interface {
            name,
            addrs: addrs.to_vec(),
        });
        // The index is updated in place, not rebuilt: a node adds an interface and a route
        // per pod, over a table holding a route per node of the cluster.
        for &(a, l) in addrs {
            if let IpAddr::V4(v) = a {
                self.v4.local_added(u32::from(v), index);
            }
            if l < width(a) {
                self.insert_route(Route {
                    dst: Prefix::new(a, l)?,
                    gateway: None,
                    dev: name,
                });
            }
        }
        Ok(())
    }

    /// Adds an address to an existing interface (and its connected route).
    pub fn add_address(&mut self, dev: IfName, addr: IpAddr, len: u8) -> Result<(), RouteError> {
        let p = Prefix::new(addr, len)?;
        let iface = self
            .ifaces
            .iter_mut()
            .find(|i| i.name == dev)
            .ok_or(RouteError::NoSuchInterface(dev))?;
        iface.addrs.push((addr, len));
        if len < width(addr) {
            self.insert_route(Route {
                dst: p,
                gateway: None,
                dev,
            });
        }
        self.reindex();
        Ok(())
    }

    /// Removes an address from an interface (and the connected route it brought);
    /// `ip addr del`. Returns whether the interface had it.
    pub fn remove_address(&mut self, dev: IfName, addr: IpAddr) -> Result<bool, RouteError> {
        let iface = self
            .ifaces
            .iter_mut()
            .find(|i| i.name == dev)
            .ok_or(RouteError::NoSuchInterface(dev))?;
        let Some(at) = iface.addrs.iter().position(|&(a, _)| a == addr) else {
            return Ok(false);
        };
        let (_, len) = iface.addrs.remove(at);
        if len < width(addr) {
            let p = Prefix::new(addr, len)?;
            if let Some(r) = self
                .routes
                .iter()
                .position(|r| r.dst == p && r.gateway.is_none() && r.dev == dev)
            {
                self.routes.remove(r);
                self.late.remove(r);
            }
        }
        self.reindex();
        Ok(true)
    }

    /// Adds a route. `gateway` must be of the prefix's family.
    pub fn add_route(
        &mut self,
        dst: Prefix,
        gateway: Option<IpAddr>,
        dev: IfName,
    ) -> Result<(), RouteError> {
        if !self.ifaces.iter().any(|i| i.name == dev) {
            return Err(RouteError::NoSuchInterface(dev));
        }
        if let Some(g) = gateway {
            if g.is_ipv4() != dst.addr().is_ipv4() {
                return Err(RouteError::FamilyMismatch(dst.addr(), g));
            }
        }
        self.insert_route(Route { dst, gateway, dev });
        Ok(())
    }

    /// Adds routes (destination, gateway, device) as [`RoutingTable::add_route`] would one
    /// after the other, but reindexes once: a node's route to every other node's pod CIDR is
    /// a thousand routes in a big cluster. On error none is added.
    pub fn add_routes(
        &mut self,
        routes: &[(Prefix, Option<IpAddr>, IfName)],
    ) -> Result<(), RouteError> {
        for &(dst, gateway, dev) in routes {
            if !self.ifaces.iter().any(|i| i.name == dev) {
                return Err(RouteError::NoSuchInterface(dev));
            }
            if let Some(g) = gateway {
                if g.is_ipv4() != dst.addr().is_ipv4() {
                    return Err(RouteError::FamilyMismatch(dst.addr(), g));
                }
            }
        }
        if routes.iter().any(|(dst, _, _)| self.shared_has(*dst)) {
            self.unshare();
        }
        let late = self.shared.is_some();
        // `insert_route` puts a route after every route at least as long: appending them
        // all and sorting stably by length, longest first, gives the same order.
        let mut all: Vec<(Route, bool)> = self.routes.drain(..).zip(self.late.drain(..)).collect();
        all.extend(
            routes
                .iter()
                .map(|&(dst, gateway, dev)| (Route { dst, gateway, dev }, late)),
        );
        all.sort_by_key(|(r, _)| std::cmp::Reverse(r.dst.prefix_len()));
        (self.routes, self.late) = all.into_iter().unzip();
        self.reindex();
        Ok(())
    }

    /// Adds every route of `shared` but the one given as its `skip`-th (counting as they
    /// were given to [`SharedRoutes::new`]), as [`RoutingTable::add_routes`] would, without
    /// copying them: the namespaces of a cluster's nodes hold one list of the routes to each
    /// node's pod CIDR, each less its own. Where this table already routes one of those
    /// destinations itself, the routes are copied in instead. Errors as `add_routes`.
    pub fn add_shared_routes(
        &mut self,
        shared: &Arc<SharedRoutes>,
        skip: Option<usize>,
    ) -> Result<(), RouteError> {
        for r in &shared.routes {
            if !self.ifaces.iter().any(|i| i.name == r.dev) {
                return Err(RouteError::NoSuchInterface(r.dev));
            }
        }
        let skip = skip.and_then(|k| shared.position.get(k).copied());
        let attached = Attached {
            table: Arc::clone(shared),
            skip,
        };
        let clash = self.routes.iter().any(|r| attached.find(r.dst).is_some());
        if self.shared.is_some() || clash {
            let copy: Vec<_> = attached
                .routes()
                .map(|(_, r)| (r.dst, r.gateway, r.dev))
                .collect();
            return self.add_routes(&copy);
        }
        self.shared = Some(attached);
        Ok(())
    }

    /// Whether one of the attached shared routes goes to exactly `dst`.
    fn shared_has(&self, dst: Prefix) -> bool {
        self.shared.as_ref().is_some_and(|s| s.find(dst).is_some())
    }

    /// Copies the shared routes in, in their place: an ordinary table that routes the same.
    fn unshare(&mut self) {
        let all = self.routes().into_owned();
        self.shared = None;
        self.late = vec![false; all.len()];
        self.routes = all;
        self.reindex();
    }

    /// Makes room for `additional` more routes at once (a node about to get a route per
    /// node and per pod), instead of doubling the table's memory as they come.
    pub fn reserve(&mut self, additional: usize) {
        self.routes.reserve_exact(additional);
        self.late.reserve_exact(additional);
    }

    /// Removes every route to exactly `dst`; returns how many went.
    pub fn remove_route(&mut self, dst: Prefix) -> usize {
        if self.shared_has(dst) {
            self.unshare();
        }
        let before = self.routes.len();
        let mut keep = self.routes.iter().map(|r| r.dst != dst);
        self.late.retain(|_| keep.next().unwrap_or(true));
        self.routes.retain(|r| r.dst != dst);
        let removed = before - self.routes.len();
        if removed > 0 {
            self.reindex();
        }
        removed
    }

    fn reindex(&mut self) {
        self.v4 = V4Fib::build(&self.ifaces, &self.routes);
    }

    /// Inserts `r` after every route at least as long, and into the index.
    fn insert_route(&mut self, r: Route) {
        if self.shared_has(r.dst) {
            self.unshare();
        }
        let pos = self
            .routes
            .partition_point(|x| x.dst.prefix_len() >= r.dst.prefix_len());
        self.routes.insert(pos, r);
        self.late.insert(pos, self.shared.is_some());
        self.v4.route_inserted(pos, &r);
    }

    /// The interfaces, in the order they were added.
    pub fn interfaces(&self) -> &[Interface] {
        &self.ifaces
    }

    /// The routes, longest prefix first (among routes of one length, the one added first
    /// first), shared ones included.
    pub fn routes(&self) -> Cow<'_, [Route]> {
        let Some(sh) = &self.shared else {
            return Cow::Borrowed(&self.routes);
        };
        // Per length, longest first: this table's routes added before the shared ones, the
        // shared ones, the routes added after.
        let mut out = Vec::with_capacity(self.routes.len() + sh.table.routes.len());
        let mut own = self.routes.iter().zip(&self.late).peekable();
        let mut shared = sh.routes().map(|(_, r)| r).peekable();
        loop {
            let len = match (own.peek(), shared.peek()) {
                (None, None) => break,
                (Some((o, _)), None) => o.dst.prefix_len(),
                (None, Some(s)) => s.dst.prefix_len(),
                (Some((o, _)), Some(s)) => o.dst.prefix_len().max(s.dst.prefix_len()),
            };
            while let Some((o, _)) = own.next_if(|(o, late)| o.dst.prefix_len() == len && !**late) {
                out.push(*o);
            }
            while let Some(s) = shared.next_if(|s| s.dst.prefix_len() == len) {
                out.push(*s);
            }
            while let Some((o, _)) = own.next_if(|(o, _)| o.dst.prefix_len() == len) {
                out.push(*o);
            }
        }
        Cow::Owned(out)
    }

    /// Whether `a` is an address of this namespace. All of 127.0.0.0/8 and ::1 are local, as
    /// the kernel's `local` table makes them (`addrtype LOCAL` agrees).
    #[inline]
    pub fn is_local(&self, a: IpAddr) -> bool {
        match a {
            IpAddr::V4(v) => v.is_loopback() || self.v4.local(u32::from(v)).is_some(),
            IpAddr::V6(v) if v.is_loopback() => true,
            IpAddr::V6(_) => self
                .ifaces
                .iter()
                .any(|i| i.addrs.iter().any(|&(x, _)| x == a)),
        }
    }

    /// The interface that holds local address `a`, if any (the first added, when several
    /// hold it).
    pub fn interface_of(&self, a: IpAddr) -> Option<IfName> {
        match a {
            IpAddr::V4(v) => self.v4.local(u32::from(v)).map(|i| self.ifaces[i].name),
            IpAddr::V6(_) => self
                .ifaces
                .iter()
                .find(|i| i.addrs.iter().any(|&(x, _)| x == a))
                .map(|i| i.name),
        }
    }

    /// Whether `a` is the broadcast address of one of this namespace's IPv4 subnets (or
    /// 255.255.255.255).
    pub fn is_broadcast(&self, a: IpAddr) -> bool {
        let IpAddr::V4(v) = a else { return false };
        if v.is_broadcast() {
            return true;
        }
        self.ifaces.iter().any(|i| {
            i.addrs.iter().any(|&(x, l)| match x {
                IpAddr::V4(x) if l < 31 => {
                    let host_mask = u32::MAX >> l;
                    (u32::from(x) | host_mask) == u32::from(v)
                }
                _ => false,
            })
        })
    }

    /// The route decision for destination `dst` (`ip_route_input` / `ip_route_output`).
    pub fn lookup(&self, dst: IpAddr) -> RouteDecision {
        if self.is_local(dst) {
            return RouteDecision::Local;
        }
        match self.route_for(dst) {
            Some(r) => RouteDecision::Forward {
                dev: r.dev,
                next_hop: r.gateway.unwrap_or(dst),
                route: *r,
            },
            None => RouteDecision::Unreachable,
        }
    }

    /// The route to a destination that is not local (longest prefix, then first added).
    #[inline]
    pub(crate) fn route_for(&self, dst: IpAddr) -> Option<&Route> {
        match dst {
            IpAddr::V4(v) => {
                let a = u32::from(v);
                let own = self.v4.route(a).map(|i| &self.routes[i]);
                let Some(sh) = &self.shared else { return own };
                // No own route has a shared route's network and length: the longer wins.
                match (own, sh.route(a)) {
                    (Some(o), Some(s)) if s.dst.prefix_len() > o.dst.prefix_len() => Some(s),
                    (Some(o), _) => Some(o),
                    (None, s) => s,
                }
            }
            // Shared routes are IPv4 only.
            IpAddr::V6(_) => self.routes.iter().find(|r| r.dst.contains(dst)),
        }
    }

    /// The source address the kernel picks on `dev` for traffic to `next_hop`
    /// (`inet_select_addr(dev, dst, RT_SCOPE_UNIVERSE)`): on `dev`, the first address of the
    /// family whose subnet holds the next hop, else its first; addresses of host scope (all of
    /// 127.0.0.0/8 and ::1, as iproute2 adds them) never count. If `dev` has none, the first
    /// such address of any other interface, in the order they were added; else `None` (and
    /// MASQUERADE drops the packet: "lo ate my IP address").
    pub fn select_source(&self, dev: IfName, next_hop: IpAddr) -> Option<IpAddr> {
        let usable = |a: &IpAddr| a.is_ipv4() == next_hop.is_ipv4() && !a.is_loopback();
        if let Some(iface) = self.ifaces.iter().find(|i| i.name == dev) {
            let same_family = iface.addrs.iter().filter(|(a, _)| usable(a));
            let found = same_family
                .clone()
                .find(|&&(a, l)| {
                    Prefix::new(a, l)
                        .map(|p| p.contains(next_hop))
                        .unwrap_or(false)
                })
                .or_else(|| same_family.clone().next())
                .map(|&(a, _)| a);
            if found.is_some() {
                return found;
            }
        }
        self.ifaces
            .iter()
            .flat_map(|i| i.addrs.iter())
            .find(|(a, _)| usable(a))
            .map(|&(a, _)| a)
    }

    /// The source address for a locally generated packet to `dst`: the route's interface's
    /// selected source (IPv6: [`RoutingTable::select_source_v6`] for `dst`), or for a local
    /// destination the destination itself.
    pub fn source_for(&self, dst: IpAddr) -> Option<IpAddr> {
        match (self.lookup(dst), dst) {
            (RouteDecision::Local, _) => Some(dst),
            (RouteDecision::Forward { dev, .. }, IpAddr::V6(d)) => {
                self.select_source_v6(Some(dev), d).map(IpAddr::V6)
            }
            (RouteDecision::Forward { dev, next_hop, .. }, _) => self.select_source(dev, next_hop),
            (RouteDecision::Unreachable, _) => None,
        }
    }

    /// The IPv6 source address the kernel picks for a packet to `dst` leaving by `dev`
    /// (`ipv6_dev_get_saddr`, net/ipv6/addrconf.c, RFC 6724 §5), or `None` when no address
    /// qualifies (MASQUERADE then drops).
    ///
    /// Candidates: for a link-local (or multicast) destination only `dev`'s addresses, else
    /// every interface's, in the order the interfaces were added (`for_each_netdev`; `lo`'s
    /// `::1` is one of them). The unspecified address and multicast addresses never are.
    /// Among them, rule by rule, the first rule that tells two apart decides:
    /// 1. the destination itself;
    /// 2. appropriate scope: the smallest scope at least the destination's, else the largest
    ///    (`::1` and `fe80::/10` are link-local, `fec0::/10` site-local, the rest global,
    ///    ULA `fc00::/7` included);
    /// 5. an address of the outgoing interface;
    /// 6. the same label as the destination in the default policy table
    ///    (`ip6addrlbl_init_table`);
    /// 8. the longest prefix shared with the destination, at most the address's own prefix
    ///    length.
    ///
    /// On a tie the earlier candidate stays. Rules 3 (deprecated), 4 (home address) and 7
    /// (temporary addresses) tell nothing apart here: nfsim's addresses are all preferred,
    /// permanent and past duplicate address detection (none is tentative, which the kernel
    /// would skip). Checked on Linux 6.18 with `ip -6 route get` in a private namespace: a
    /// ULA destination routed out of a link holding `fd00::1/64` takes `fd00::1` even when
    /// another link holds an address of the destination's own /64 or label (rule 5 before 6
    /// and 8); a link with only a link-local address gives that one; with no address but
    /// `lo`'s, `::1`.
    pub fn select_source_v6(&self, dev: Option<IfName>, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        let dst_scope = v6_scope(dst);
        let only_dev = dst.is_multicast() || dst_scope <= SCOPE_LINKLOCAL;
        let dst_label = v6_label(dst);
        let mut best: Option<([i32; 5], Ipv6Addr)> = None;
        for iface in &self.ifaces {
            let on_dev = Some(iface.name) == dev;
            if only_dev && !on_dev {
                continue;
            }
            for &(a, len) in &iface.addrs {
                let IpAddr::V6(a) = a else { continue };
                if a.is_unspecified() || a.is_multicast() {
                    continue;
                }
                let scope = v6_scope(a);
                let scopedist = if scope >= dst_scope {
                    -scope
                } else {
                    scope - 128
                };
                let shared = (u128::from(a) ^ u128::from(dst)).leading_zeros() as i32;
                let score = [
                    i32::from(a == dst),
                    scopedist,
                    i32::from(on_dev || dev.is_none()),
                    i32::from(v6_label(a) == dst_label),
                    shared.min(i32::from(len)),
                ];
                if best.as_ref().is_none_or(|(b, _)| score > *b) {
                    best = Some((score, a));
                }
            }
        }
        best.map(|(_, a)| a)
    }
}

/// `IPV6_ADDR_SCOPE_LINKLOCAL`.
const SCOPE_LINKLOCAL: i32 = 0x2;

/// An address's scope as `__ipv6_addr_type` gives it (`IPV6_ADDR_SCOPE_*`): the multicast
/// scope field for multicast, link-local (2) for `fe80::/10` and for `::1` (RFC 6724 §3.4),
/// site-local (5) for `fec0::/10`, global (0xe) for the rest, ULA included.
fn v6_scope(a: Ipv6Addr) -> i32 {
    let s = a.segments();
    if a.is_multicast() {
        i32::from(s[0] & 0xf)
    } else if a.is_loopback() || s[0] & 0xffc0 == 0xfe80 {
        SCOPE_LINKLOCAL
    } else if s[0] & 0xffc0 == 0xfec0 {
        0x5
    } else {
        0xe
    }
}

/// An address's label in the kernel's default policy table (`ip6addrlbl_init_table`,
/// net/ipv6/addrlabel.c), longest prefix first.
fn v6_label(a: Ipv6Addr) -> u8 {
    const TABLE: [(u128, u8, u8); 9] = [
        (1, 128, 0),                     // ::1/128
        (0xffff_0000_0000, 96, 4),       // ::ffff:0:0/96
        (0, 96, 3),                      // ::/96
        (0x2001_0000_u128 << 96, 32, 6), // 2001::/32
        (0x2001_0010_u128 << 96, 28, 7), // 2001:10::/28
        (0x2002_u128 << 112, 16, 2),     // 2002::/16
        (0x3ffe_u128 << 112, 16, 12),    // 3ffe::/16
        (0xfec0_u128 << 112, 10, 11),    // fec0::/10
        (0xfc00_u128 << 112, 7, 5),      // fc00::/7
    ];
    let v = u128::from(a);
    TABLE
        .iter()
        .find(|&&(p, len, _)| (v ^ p) >> (128 - u32::from(len)) == 0)
        .map_or(1, |&(_, _, l)| l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_source_selection_follows_ipv6_dev_get_saddr() {
        let ip6 = |s: &str| -> Ipv6Addr { s.parse().unwrap() };
        let mut t = RoutingTable::new();
        t.add_interface(ifn("lo"), &[(ip("::1"), 128)]).unwrap();
        t.add_interface(ifn("t0"), &[]).unwrap();
        t.add_interface(ifn("t1"), &[]).unwrap();
        let t0 = Some(ifn("t0"));
        // Only lo's ::1: it is chosen (as `ip -6 route get` shows on Linux 6.18).
        assert_eq!(t.select_source_v6(t0, ip6("fd00::5")), Some(ip6("::1")));
        // A link-local destination: only the outgoing link's addresses, none here.
        assert_eq!(t.select_source_v6(t0, ip6("fe80::5")), None);
        t.add_address(ifn("t0"), ip("fe80::1"), 64).unwrap();
        // Both link-local in scope; rule 5 prefers the outgoing link's over lo's ::1.
        assert_eq!(t.select_source_v6(t0, ip6("fd00::5")), Some(ip6("fe80::1")));
        t.add_address(ifn("t0"), ip("fd00::1"), 64).unwrap();
        t.add_address(ifn("t1"), ip("fd01::1"), 64).unwrap();
        t.add_address(ifn("t1"), ip("2001:db8::1"), 64).unwrap();
        // Scope: a global destination takes a global address over the link-local one.
        assert_eq!(t.select_source_v6(t0, ip6("fd00::5")), Some(ip6("fd00::1")));
        // Rule 5 before 8: fd01:0:0:1::5 shares 48 bits with t1's fd01::1, but leaves by t0.
        assert_eq!(
            t.select_source_v6(t0, ip6("fd01:0:0:1::5")),
            Some(ip6("fd00::1"))
        );
        // Rule 5 before 6: a 2001:db8 destination out of t0 keeps t0's ULA.
        assert_eq!(
            t.select_source_v6(t0, ip6("2001:db8:1::5")),
            Some(ip6("fd00::1"))
        );
        // Leaving by t1: label (6) picks 2001:db8::1 for a global-label destination, and the
        // ULA for a ULA one.
        let t1 = Some(ifn("t1"));
        assert_eq!(
            t.select_source_v6(t1, ip6("2001:db8:9::5")),
            Some(ip6("2001:db8::1"))
        );
        assert_eq!(t.select_source_v6(t1, ip6("fd07::5")), Some(ip6("fd01::1")));
        // Link-local destination: the outgoing link's link-local address.
        assert_eq!(t.select_source_v6(t0, ip6("fe80::9")), Some(ip6("fe80::1")));
        // The destination itself wins (rule 1).
        assert_eq!(t.select_source_v6(t0, ip6("fd01::1")), Some(ip6("fd01::1")));
        // source_for: the route's interface.
        t.add_route("fd09::/64".parse().unwrap(), None, ifn("t1"))
            .unwrap();
        assert_eq!(t.source_for(ip("fd09::5")), Some(ip("fd01::1")));
    }

    fn ifn(s: &str) -> IfName {
        IfName::new(s).unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn node() -> RoutingTable {
        let mut t = RoutingTable::new();
        t.add_interface(ifn("eth0"), &[(ip("172.18.0.2"), 16)])
            .unwrap();
        t.add_interface(ifn("veth1"), &[(ip("10.244.1.1"), 32)])
            .unwrap();
        t.add_route(Prefix::host(ip("10.244.1.7")), None, ifn("veth1"))
            .unwrap();
        t.add_route(
            "10.244.2.0/24".parse().unwrap(),
            Some(ip("172.18.0.3")),
            ifn("eth0"),
        )
        .unwrap();
        t.add_route(
            Prefix::default_for(true),
            Some(ip("172.18.0.1")),
            ifn("eth0"),
        )
        .unwrap();
        t
    }

    #[test]
    fn a_batch_with_a_bad_route_adds_none() {
        let mut t = node();
        let before = t.routes().to_vec();
        let err = t.add_routes(&[
            (
                "10.244.3.0/24".parse().unwrap(),
                Some(ip("172.18.0.4")),
                ifn("eth0"),
            ),
            ("10.244.4.0/24".parse().unwrap(), None, ifn("eth9")),
        ]);
        assert_eq!(err, Err(RouteError::NoSuchInterface(ifn("eth9"))));
        assert_eq!(t.routes(), &before[..]);
        assert_eq!(
            t.lookup(ip("10.244.3.5")),
            node().lookup(ip("10.244.3.5")),
            "the default route, as before"
        );
    }

    #[test]
    fn longest_prefix_wins() {
        let t = node();
        assert_eq!(t.lookup(ip("172.18.0.2")), RouteDecision::Local);
        assert_eq!(t.lookup(ip("127.5.5.5")), RouteDecision::Local);
        match t.lookup(ip("10.244.1.7")) {
            RouteDecision::Forward { dev, next_hop, .. } => {
                assert_eq!((dev, next_hop), (ifn("veth1"), ip("10.244.1.7")))
            }
            x => panic!("{x:?}"),
        }
        match t.lookup(ip("10.244.2.9")) {
            RouteDecision::Forward { dev, next_hop, .. } => {
                assert_eq!((dev, next_hop), (ifn("eth0"), ip("172.18.0.3")))
            }
            x => panic!("{x:?}"),
        }
        match t.lookup(ip("10.96.0.10")) {
            RouteDecision::Forward {
                next_hop, route, ..
            } => {
                assert_eq!(next_hop, ip("172.18.0.1"));
                assert_eq!(route.to_string(), "default via 172.18.0.1 dev eth0");
            }
            x => panic!("{x:?}"),
        }
        assert_eq!(t.lookup(ip("fd00::1")), RouteDecision::Unreachable);
    }

    #[test]
    fn a_removed_pod_route_makes_the_ip_unreachable_or_default() {
        let mut t = RoutingTable::new();
        t.add_interface(ifn("eth0"), &[(ip("172.18.0.2"), 16)])
            .unwrap();
        t.add_interface(ifn("veth1"), &[(ip("10.244.1.1"), 32)])
            .unwrap();
        t.add_route(Prefix::host(ip("10.244.1.7")), None, ifn("veth1"))
            .unwrap();
        assert_eq!(t.remove_route(Prefix::host(ip("10.244.1.7"))), 1);
        assert_eq!(t.lookup(ip("10.244.1.7")), RouteDecision::Unreachable);
    }

    #[test]
    fn source_selection_and_errors() {
        let t = node();
        assert_eq!(t.source_for(ip("10.96.0.10")), Some(ip("172.18.0.2")));
        assert_eq!(
            t.select_source(ifn("eth0"), ip("172.18.9.9")),
            Some(ip("172.18.0.2"))
        );
        assert!(Prefix::new(ip("10.0.0.0"), 33).is_err());
        assert!("10.0.0.0/x".parse::<Prefix>().is_err());
        let mut t = node();
        assert!(matches!(
            t.add_route(Prefix::host(ip("1.1.1.1")), None, ifn("nope")),
            Err(RouteError::NoSuchInterface(_))
        ));
        assert!(t.is_broadcast(ip("172.18.255.255")));
        assert!(!t.is_broadcast(ip("172.18.0.255")));
    }

    /// The lookups as the plain scans the index replaced: routes in order (longest prefix
    /// first, insertion order within a length), interfaces in order.
    fn reference(t: &RoutingTable, dst: IpAddr) -> (RouteDecision, Option<IfName>) {
        let owner = t
            .interfaces()
            .iter()
            .find(|i| i.addrs.iter().any(|&(x, _)| x == dst))
            .map(|i| i.name);
        let local = match dst {
            IpAddr::V4(v) => v.is_loopback() || owner.is_some(),
            IpAddr::V6(v) => v.is_loopback() || owner.is_some(),
        };
        let decision = if local {
            RouteDecision::Local
        } else {
            match t.routes().iter().find(|r| r.dst.contains(dst)) {
                Some(r) => RouteDecision::Forward {
                    dev: r.dev,
                    next_hop: r.gateway.unwrap_or(dst),
                    route: *r,
                },
                None => RouteDecision::Unreachable,
            }
        };
        (decision, owner)
    }

    use proptest::prelude::*;

    /// Addresses from a small space (10.0.x.y with few x, y) so that routes overlap often.
    fn small_v4() -> impl Strategy<Value = IpAddr> {
        (
            0u8..4,
            prop_oneof![Just(0u8), Just(1), Just(7), Just(128), Just(255)],
        )
            .prop_map(|(x, y)| IpAddr::from([10, 0, x, y]))
    }

    #[derive(Clone, Debug)]
    enum Op {
        Iface(Vec<(IpAddr, u8)>),
        Route(IpAddr, u8, usize, bool),
        Remove(IpAddr, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        let len = prop_oneof![
            Just(0u8),
            Just(8),
            Just(16),
            Just(23),
            Just(24),
            Just(31),
            Just(32)
        ];
        prop_oneof![
            prop::collection::vec((small_v4(), len.clone()), 1..3).prop_map(Op::Iface),
            (small_v4(), len.clone(), 0usize..4, any::<bool>())
                .prop_map(|(a, l, d, g)| Op::Route(a, l, d, g)),
            (small_v4(), len).prop_map(|(a, l)| Op::Remove(a, l)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The index answers every lookup as the in-order scans do, whatever the sequence
        /// of interfaces, routes and removals (overlapping prefixes, the same network routed
        /// twice, the same address on several interfaces).
        #[test]
        fn indexed_lookups_equal_the_scans(
            ops in prop::collection::vec(op(), 1..24),
            probes in prop::collection::vec(small_v4(), 1..16),
        ) {
            let mut t = RoutingTable::new();
            let mut names = vec![ifn("lo")];
            t.add_interface(ifn("lo"), &[(ip("127.0.0.1"), 8)]).unwrap();
            for o in ops {
                match o {
                    Op::Iface(addrs) => {
                        let name = ifn(&format!("if{}", names.len()));
                        t.add_interface(name, &addrs).unwrap();
                        names.push(name);
                    }
                    Op::Route(a, l, d, g) => {
                        let dev = names[d % names.len()];
                        let gw = g.then(|| ip("10.0.9.9"));
                        t.add_route(Prefix::new(a, l).unwrap(), gw, dev).unwrap();
                    }
                    Op::Remove(a, l) => {
                        t.remove_route(Prefix::new(a, l).unwrap());
                    }
                }
                // Updated in place or rebuilt, the index is the one a rebuild gives.
                prop_assert_eq!(&t.v4, &V4Fib::build(&t.ifaces, &t.routes));
                for &p in probes.iter().chain([ip("127.1.2.3"), ip("192.168.1.1")].iter()) {
                    let (d, owner) = reference(&t, p);
                    prop_assert_eq!(t.lookup(p), d);
                    prop_assert_eq!(t.interface_of(p), owner);
                    prop_assert_eq!(t.is_local(p), d == RouteDecision::Local);
                }
            }
        }

        /// A table given shared routes (less one) lists and routes exactly as one given the
        /// same routes with `add_routes` at that moment, before and after any sequence of
        /// interfaces, routes and removals, whichever collide with the shared ones.
        #[test]
        fn shared_routes_equal_their_copies(
            before in prop::collection::vec(op(), 0..8),
            shared in prop::collection::vec((small_v4(), prop_oneof![Just(16u8), Just(24), Just(32)], any::<bool>()), 1..12),
            skip in prop::option::of(0usize..12),
            after in prop::collection::vec(op(), 0..16),
            probes in prop::collection::vec(small_v4(), 1..16),
        ) {
            let mut plain = RoutingTable::new();
            let mut names = vec![ifn("lo")];
            plain.add_interface(ifn("lo"), &[(ip("127.0.0.1"), 8)]).unwrap();
            let apply = |t: &mut RoutingTable, names: &mut Vec<IfName>, o: &Op, grow: bool| match o {
                Op::Iface(addrs) => {
                    let name = ifn(&format!("if{}", names.len()));
                    t.add_interface(name, addrs).unwrap();
                    if grow {
                        names.push(name);
                    }
                }
                Op::Route(a, l, d, g) => {
                    let dev = names[d % names.len()];
                    let gw = g.then(|| ip("10.0.9.9"));
                    t.add_route(Prefix::new(*a, *l).unwrap(), gw, dev).unwrap();
                }
                Op::Remove(a, l) => {
                    t.remove_route(Prefix::new(*a, *l).unwrap());
                }
            };
            for o in &before {
                apply(&mut plain, &mut names, o, true);
            }
            let mut routes: Vec<(Prefix, Option<IpAddr>, IfName)> = Vec::new();
            for (a, l, g) in shared {
                let p = Prefix::new(a, l).unwrap();
                if !routes.iter().any(|r| r.0 == p) {
                    routes.push((p, g.then(|| ip("10.0.9.9")), ifn("lo")));
                }
            }
            let table = SharedRoutes::new(&routes).unwrap();
            let mut with = plain.clone();
            let skip = skip.filter(|&k| k < routes.len());
            let copy: Vec<_> = (routes.iter().enumerate())
                .filter(|&(i, _)| Some(i) != skip)
                .map(|(_, r)| *r)
                .collect();
            plain.add_routes(&copy).unwrap();
            with.add_shared_routes(&table, skip).unwrap();
            let check = |plain: &RoutingTable, with: &RoutingTable| -> Result<(), TestCaseError> {
                prop_assert_eq!(plain.routes(), with.routes());
                for &p in probes.iter().chain([ip("127.1.2.3"), ip("192.168.1.1")].iter()) {
                    prop_assert_eq!(plain.lookup(p), with.lookup(p));
                    prop_assert_eq!(plain.lookup(p), reference(with, p).0);
                }
                Ok(())
            };
            check(&plain, &with)?;
            for o in &after {
                let mut n2 = names.clone();
                apply(&mut plain, &mut names, o, true);
                apply(&mut with, &mut n2, o, false);
                check(&plain, &with)?;
            }
        }

        /// Routes added in one batch end up where adding them one by one puts them: same
        /// order, same lookups.
        #[test]
        fn a_batch_of_routes_equals_adding_them_one_by_one(
            routes in prop::collection::vec((small_v4(), 0u8..33, 0usize..2, any::<bool>()), 1..40),
            split in 0usize..40,
            probes in prop::collection::vec(small_v4(), 1..16),
        ) {
            let mut one = RoutingTable::new();
            one.add_interface(ifn("eth0"), &[(ip("10.0.0.2"), 24)]).unwrap();
            one.add_interface(ifn("veth1"), &[(ip("10.0.3.1"), 32)]).unwrap();
            let mut batch = one.clone();
            let devs = [ifn("eth0"), ifn("veth1")];
            let routes: Vec<(Prefix, Option<IpAddr>, IfName)> = routes
                .into_iter()
                .map(|(a, l, d, g)| (Prefix::new(a, l).unwrap(), g.then(|| ip("10.0.0.1")), devs[d]))
                .collect();
            for &(p, g, d) in &routes {
                one.add_route(p, g, d).unwrap();
            }
            let (first, rest) = routes.split_at(split.min(routes.len()));
            batch.add_routes(first).unwrap();
            batch.add_routes(rest).unwrap();
            prop_assert_eq!(one.routes(), batch.routes());
            for &p in &probes {
                prop_assert_eq!(one.lookup(p), batch.lookup(p));
            }
        }
    }
}
