//! What conntrack(8) does to a table: list, delete, insert, load, dump.

use super::*;

/// An entry to insert from userspace ([`Conntrack::insert`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewEntry {
    /// The original tuple.
    pub orig: Tuple,
    /// The reply tuple (after NAT).
    pub reply: Tuple,
    /// Status bits (`CONFIRMED` is added).
    pub status: Status,
    /// The TCP state (TCP only; ESTABLISHED if not given).
    pub tcp_state: Option<TcpState>,
    /// The connection mark.
    pub mark: u32,
    /// Time left before it times out.
    pub timeout: sim_core::SimDuration,
    /// How long ago it was created.
    pub age: sim_core::SimDuration,
    /// It has a timestamp (`nf_conn_tstamp`): its start is `age` before `now`. For
    /// [`Conntrack::load`], whether the listing printed one (`delta-time=`, `[start=…]`); for
    /// [`Conntrack::insert`], ignored (the kernel stamps an inserted entry at insertion when
    /// `nf_conntrack_timestamp` is 1).
    pub timestamped: bool,
    /// What is known of its TCP history.
    pub history: History,
}

/// What an inserted TCP entry's tracker state is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum History {
    /// As `conntrack -I` makes it (`ctnetlink_create_conntrack`): the state given, the
    /// rest of `struct ip_ct_tcp` zero (no close seen, last segment "SYN in the original
    /// direction", no window data).
    Userspace,
    /// An entry of a real node's `conntrack -L` listing, which prints only the state: what
    /// the state implies is filled in. FIN_WAIT, CLOSE_WAIT, LAST_ACK and TIME_WAIT are
    /// reached only after a FIN (`IP_CT_TCP_FLAG_CLOSE_INIT`); for CLOSE, which a RST from
    /// either side reaches, the RST is taken as the original direction's (so that a SYN from
    /// the client reopens it, as the kernel does when the client aborted); the window data
    /// are unknown, as after a mid-stream pickup: each direction's first segment
    /// initialises them, window checks liberal ([`crate::listing`]).
    Listed,
}

/// Why [`Conntrack::insert`] refused an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// One of its tuples is in the table already (`conntrack -I`: "File exists").
    Exists,
    /// The table is full (`nf_conntrack_max`) and nothing could be early-dropped.
    TableFull,
    /// The tuples are of different protocols or address families.
    Mismatch,
}

impl fmt::Display for InsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InsertError::Exists => "an entry with one of these tuples is already in the table",
            InsertError::TableFull => "the table is full (nf_conntrack_max)",
            InsertError::Mismatch => "the two tuples differ in protocol or address family",
        })
    }
}

impl std::error::Error for InsertError {}

impl Conntrack {
    // ----- list / delete -------------------------------------------------------------------

    /// `conntrack -L [filter]` at `now`: confirmed entries not yet expired that match, in
    /// creation order.
    pub fn list(&self, now: SimTime, filter: &Filter) -> Vec<CtEntry> {
        let mut out: Vec<CtEntry> = self
            .slab
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                // A clash entry is in the table by its reply tuple only: the dump, which
                // walks the original direction, never shows it.
                e.life == Life::Confirmed
                    && e.timeout > now
                    && !e.status.contains(Status::NAT_CLASH)
            })
            .map(|(s, _)| self.snapshot(s))
            .filter(|e| filter.matches(e))
            .collect();
        out.sort_by_key(|e| e.seq);
        out
    }

    /// `conntrack -D [filter]` at `now`: deletes the matching entries (DESTROY events with
    /// cause [`DestroyCause::Delete`]) and returns them as they were, in creation order.
    /// An empty result is what makes the real tool exit non-zero.
    pub fn delete(&mut self, now: SimTime, filter: &Filter) -> Vec<CtEntry> {
        self.expire(now);
        let found = self.list(now, filter);
        let cause = DestroyCause::Delete {
            portid: self.portid,
        };
        for e in &found {
            if let Some(slot) = self.slot_of(e.id) {
                self.destroy(slot, now, cause, false);
            }
        }
        found
    }

    /// Deletes one entry by id (a reconciler that already listed it). Returns it as it was.
    pub fn delete_entry(&mut self, now: SimTime, id: EntryId) -> Option<CtEntry> {
        self.expire(now);
        let slot = self.slot_of(id)?;
        if self.slab[slot].life != Life::Confirmed {
            return None;
        }
        let snap = self.snapshot(slot);
        let cause = DestroyCause::Delete {
            portid: self.portid,
        };
        self.destroy(slot, now, cause, false);
        Some(snap)
    }

    /// Inserts a confirmed entry from userspace, as `conntrack -I` does
    /// (`ctnetlink_create_conntrack`): its tuples, status, TCP state, mark and timeout as
    /// given, created `age` ago (which decides when a UDP entry's next packet may make it
    /// ASSURED: more than 2 s after creation, `nf_conntrack_udp_packet`). Queues a `[NEW]`
    /// event and counts `insert` (`nf_conntrack_hash_check_insert`). Refused when either
    /// tuple is in the table already (the kernel's `EEXIST`) or the table is full.
    pub fn insert(&mut self, now: SimTime, e: &NewEntry) -> Result<EntryId, InsertError> {
        self.insert_as(now, e, false)
    }

    /// Puts an entry of a node's saved state (`conntrack -L` of a real node) into the table:
    /// as [`Conntrack::insert`], but it is the starting state, not traffic: no `[NEW]` event,
    /// no `insert` counted, and its timestamp start (when [`NewEntry::timestamped`]) `age`
    /// before `now`, which may lie before the simulation's start.
    pub fn load(&mut self, now: SimTime, e: &NewEntry) -> Result<EntryId, InsertError> {
        self.insert_as(now, e, true)
    }

    fn insert_as(
        &mut self,
        now: SimTime,
        e: &NewEntry,
        loaded: bool,
    ) -> Result<EntryId, InsertError> {
        self.expire(now);
        if e.orig.proto != e.reply.proto || e.orig.src.is_ipv4() != e.reply.src.is_ipv4() {
            return Err(InsertError::Mismatch);
        }
        let (o, r) = (Key::from_tuple(&e.orig), Key::from_tuple(&e.reply));
        let (ho, hr) = (o.hash(&self.hseed), r.hash(&self.hseed));
        if self.lookup_key(ho, &o).is_some() || self.lookup_key(hr, &r).is_some() {
            return Err(InsertError::Exists);
        }
        let slot = self.alloc(now, o, r, ho).ok_or(InsertError::TableFull)?;
        let v = (slot as u32) << 1;
        self.index.insert(hr, v | 1);
        self.index.insert(ho, v);
        let deadline = now.saturating_add(e.timeout);
        let events = self.cfg.events != 0 && !loaded;
        self.marks[slot] = e.mark;
        if loaded {
            self.starts[slot] = if e.timestamped {
                created_ns(now, e.age)
            } else {
                NO_START
            };
        }
        let ent = &mut self.slab[slot];
        ent.status = e.status;
        ent.status.insert(Status::CONFIRMED);
        if e.orig.proto == IPPROTO_TCP {
            let st = e.tcp_state.unwrap_or(TcpState::Established);
            ent.set_tcp_state(st as u8);
            let w = match e.history {
                History::Userspace => crate::tcp_window::Window::default(),
                History::Listed => {
                    use crate::track::TcpIndex;
                    *ent.tcp_flags_mut() = match st {
                        TcpState::FinWait
                        | TcpState::CloseWait
                        | TcpState::LastAck
                        | TcpState::TimeWait => TcpIndex::None as u8 | tf::CLOSE_INIT_ORIG,
                        TcpState::Close => TcpIndex::Rst as u8,
                        _ => TcpIndex::None as u8,
                    };
                    crate::tcp_window::Window::listed()
                }
            };
            let name = self.windows.alloc(w);
            self.slab[slot].set_tcp_window(name);
        } else if e.orig.proto == sim_core::packet::IPPROTO_UDP {
            // stream_ts = creation + 2 s, which may lie before the simulation's start (an
            // entry of a real node's listing older than the run).
            ent.set_stream_ts(created_ns(now, e.age).saturating_add(2_000_000_000));
        }
        let ent = &mut self.slab[slot];
        ent.timeout = deadline;
        ent.armed = deadline;
        ent.life = Life::Confirmed;
        ent.pending = if events { ev::NEW } else { 0 };
        self.timers.push(Reverse(Timer::new(deadline, slot as u32)));
        self.confirmed += 1;
        if !loaded {
            self.stats.insert += 1;
        }
        self.deliver(slot, now);
        Ok(self.id_of(slot))
    }

    /// The whole `conntrack -L` output at `now` (stdout lines, then the stderr summary line
    /// is [`crate::shown_summary`]).
    pub fn dump(&self, now: SimTime, filter: &Filter) -> String {
        let mut s = String::new();
        for e in self.list(now, filter) {
            s.push_str(&e.list_line(now).to_string());
            s.push('\n');
        }
        s
    }

    pub(crate) fn tcp_flags_mut(&mut self, slot: usize) -> &mut u8 {
        self.slab[slot].tcp_flags_mut()
    }
}
