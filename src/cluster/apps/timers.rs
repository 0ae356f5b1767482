//! The timers of one application ([`Timers`]): due by deadline, then in the order they were
//! set, in a queue that costs nothing while empty.

use sim_core::SimTime;
use std::collections::VecDeque;

/// Timers of one application, ordered by (deadline, insertion).
///
/// A queue kept in that order: an application's timers mostly come due in the order they
/// are set (a server's constant service time), so a timer is appended and the earliest
/// taken from the front, with no tree node per application (50,000 endpoint pods of a
/// big cluster each have one). An out-of-order timer is inserted after every timer due no
/// later. The queue's memory goes when it empties.
#[derive(Debug, Clone)]
pub(crate) struct Timers<T> {
    queue: VecDeque<(SimTime, T)>,
}

impl<T> Default for Timers<T> {
    fn default() -> Self {
        Timers {
            queue: VecDeque::new(),
        }
    }
}

impl<T> Timers<T> {
    pub(crate) fn add(&mut self, at: SimTime, what: T) {
        // After every timer due at or before `at`: insertion order among equal deadlines.
        let i = self.queue.partition_point(|(t, _)| *t <= at);
        self.queue.insert(i, (at, what));
    }
    pub(crate) fn next(&self) -> Option<SimTime> {
        self.queue.front().map(|(t, _)| *t)
    }
    pub(crate) fn pop_due(&mut self, now: SimTime) -> Option<T> {
        if self.queue.front()?.0 > now {
            return None;
        }
        let (_, what) = self.queue.pop_front()?;
        if self.queue.is_empty() {
            self.queue = VecDeque::new();
        }
        Some(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Timers come out by deadline, then in the order they were set, whatever the
        /// order of deadlines and however adds and pops interleave.
        #[test]
        fn timers_fire_by_deadline_then_insertion(ops in proptest::collection::vec((0u64..6, proptest::bool::ANY), 1..100)) {
            let mut timers = Timers::default();
            let mut model: Vec<(SimTime, usize)> = Vec::new();
            for (k, (secs, pop)) in ops.into_iter().enumerate() {
                if pop {
                    let now = SimTime::from_secs(secs);
                    // Stable: equal deadlines keep insertion order.
                    model.sort_by_key(|m| m.0);
                    let want = model.first().filter(|m| m.0 <= now).map(|m| m.1);
                    if want.is_some() {
                        model.remove(0);
                    }
                    proptest::prop_assert_eq!(timers.pop_due(now), want);
                } else {
                    timers.add(SimTime::from_secs(secs), k);
                    model.push((SimTime::from_secs(secs), k));
                }
                model.sort_by_key(|m| m.0);
                proptest::prop_assert_eq!(timers.next(), model.first().map(|m| m.0));
            }
        }
    }
}
