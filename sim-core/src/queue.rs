//! The event queue: events ordered by (time, sequence number).
//!
//! Two events scheduled for the same instant come out in the order they were pushed, so a run
//! never depends on heap internals. The driver pops the earliest event, advances its clock to
//! that event's time and handles it; handlers push new events (never earlier than now).

use crate::time::SimTime;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

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

/// A deterministic priority queue of events keyed by (time, sequence).
#[derive(Debug, Clone)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
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
            next_seq: 0,
        }
    }
    /// Schedules `event` at `at`; returns its sequence number.
    pub fn push(&mut self, at: SimTime, event: E) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Scheduled { at, seq, event });
        seq
    }
    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<Scheduled<E>> {
        self.heap.pop()
    }
    /// Removes and returns the earliest event if it fires at or before `limit`.
    pub fn pop_until(&mut self, limit: SimTime) -> Option<Scheduled<E>> {
        if self.heap.peek()?.at <= limit {
            self.heap.pop()
        } else {
            None
        }
    }
    /// When the earliest event fires.
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|s| s.at)
    }
    /// How many events are waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }
    /// Whether no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
}
