//! The event queue: events ordered by (time, sequence number).
//!
//! Two events scheduled for the same instant come out in the order they were pushed, so a run
//! never depends on heap internals. The driver pops the earliest event, advances its clock to
//! that event's time and handles it; handlers push new events (never earlier than now).

use crate::time::SimTime;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// A scheduled event as it sits in the queue.
#[derive(Debug, Clone)]
pub struct Scheduled<E> {
    /// When the event fires.
    pub at: SimTime,
    /// Insertion order, the tie-breaker for equal times.
    pub seq: u64,
    /// The event itself.
    pub event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Scheduled<E> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Where a queued event waits: its order key in the heap, the event itself in a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    at: SimTime,
    seq: u64,
    slot: u32,
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest (time, seq) first; `seq`
    /// is unique, so `slot` never decides.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A deterministic priority queue of events keyed by (time, sequence).
///
/// Two places hold the waiting events, and [`EventQueue::pop`] takes the earlier (time, seq)
/// of their two heads, so the order is exactly (time, seq) whatever goes where:
/// - events for the instant being handled (the time of the last pop, where a simulation
///   schedules most of its events: a packet handed on at once) wait in a FIFO, already in
///   (time, seq) order since every one has that time and sequence numbers only grow;
/// - the others wait in a binary heap of small keys (time, seq, slot), the events themselves
///   in a slab of slots, so that sifting moves 24 bytes per level instead of a whole event.
#[derive(Debug, Clone)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Key>,
    /// The heap's events, by slot; `None` in a free slot.
    slots: Vec<Option<E>>,
    /// Free slots, reused last-freed first.
    free: Vec<u32>,
    /// Events at `fifo_at`, in sequence order.
    fifo: VecDeque<Scheduled<E>>,
    /// The time of every event in `fifo`; moves to a popped event's time when `fifo` is empty.
    fifo_at: SimTime,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            fifo: VecDeque::new(),
            fifo_at: SimTime::ZERO,
            next_seq: 0,
        }
    }
    /// Schedules `event` at `at`; returns its sequence number.
    pub fn push(&mut self, at: SimTime, event: E) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if at == self.fifo_at {
            self.fifo.push_back(Scheduled { at, seq, event });
            return seq;
        }
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(event);
                s
            }
            None => {
                let s = u32::try_from(self.slots.len()).expect("fewer than 2^32 queued events");
                self.slots.push(Some(event));
                s
            }
        };
        self.heap.push(Key { at, seq, slot });
        seq
    }
    /// Whether the FIFO's head comes before the heap's.
    fn fifo_first(&self) -> Option<bool> {
        match (self.fifo.front(), self.heap.peek()) {
            (None, None) => None,
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (Some(f), Some(h)) => Some((f.at, f.seq) < (h.at, h.seq)),
        }
    }
    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<Scheduled<E>> {
        let s = if self.fifo_first()? {
            self.fifo.pop_front()?
        } else {
            let k = self.heap.pop()?;
            let event = self.slots[k.slot as usize]
                .take()
                .expect("a queued key's slot holds its event");
            self.free.push(k.slot);
            Scheduled {
                at: k.at,
                seq: k.seq,
                event,
            }
        };
        if self.fifo.is_empty() {
            self.fifo_at = s.at;
        }
        Some(s)
    }
    /// Removes and returns the earliest event if it fires at or before `limit`.
    pub fn pop_until(&mut self, limit: SimTime) -> Option<Scheduled<E>> {
        if self.peek_time()? <= limit {
            self.pop()
        } else {
            None
        }
    }
    /// When the earliest event fires.
    pub fn peek_time(&self) -> Option<SimTime> {
        if self.fifo_first()? {
            self.fifo.front().map(|s| s.at)
        } else {
            self.heap.peek().map(|k| k.at)
        }
    }
    /// How many events are waiting.
    pub fn len(&self) -> usize {
        self.heap.len() + self.fifo.len()
    }
    /// Whether no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty() && self.fifo.is_empty()
    }
    /// How many events were ever pushed.
    pub fn pushed(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_time_then_insertion() {
        let mut q = EventQueue::new();
        q.push(SimTime::from_secs(2), "c");
        q.push(SimTime::from_secs(1), "a");
        q.push(SimTime::from_secs(2), "d");
        q.push(SimTime::from_secs(1), "b");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|s| s.event)).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
    }

    #[test]
    fn pop_until_stops_at_the_limit() {
        let mut q = EventQueue::new();
        q.push(SimTime::from_secs(5), 5);
        q.push(SimTime::from_secs(1), 1);
        assert_eq!(q.pop_until(SimTime::from_secs(3)).map(|s| s.event), Some(1));
        assert!(q.pop_until(SimTime::from_secs(3)).is_none());
        assert_eq!(q.peek_time(), Some(SimTime::from_secs(5)));
    }

    proptest::proptest! {
        /// Whatever the mix of pushes (at the current instant, later, or even earlier) and
        /// pops, events come out in (time, seq) order, as from one sorted list.
        #[test]
        fn pops_in_time_then_sequence_order(ops in proptest::collection::vec((0u8..4, 0u64..6), 1..200)) {
            let mut q = EventQueue::new();
            let mut model: Vec<(SimTime, u64)> = Vec::new();
            let mut now = SimTime::ZERO;
            for (op, dt) in ops {
                match op {
                    // Pop the earliest.
                    0 => {
                        model.sort();
                        let want = (!model.is_empty()).then(|| model.remove(0));
                        let got = q.pop().map(|s| (s.at, s.event));
                        proptest::prop_assert_eq!(got, want);
                        if let Some((at, _)) = got {
                            now = at;
                        }
                    }
                    // Push at the current instant.
                    1 => {
                        let seq = q.pushed();
                        proptest::prop_assert_eq!(q.push(now, seq), seq);
                        model.push((now, seq));
                    }
                    // Push later, or earlier than the last pop.
                    _ => {
                        let secs = now.as_nanos() / 1_000_000_000;
                        let at = if op == 2 {
                            SimTime::from_secs(secs + dt)
                        } else {
                            SimTime::from_secs(secs - secs.min(dt))
                        };
                        let seq = q.push(at, q.pushed());
                        model.push((at, seq));
                    }
                }
                model.sort();
                proptest::prop_assert_eq!(q.len(), model.len());
                proptest::prop_assert_eq!(q.peek_time(), model.first().map(|m| m.0));
            }
        }
    }
}
