//! When a client sends ([`Scheduler`]): the one scheduler of every client kind (UDP, the TCP
//! clients, ping), so that a new kind only says how its sends follow each other ([`Pacing`]).

use super::ClientSchedule;
use crate::scenario::model::{Pause, SocketGap};
use sim_core::{SimDuration, SimRng, SimTime};
use std::collections::BTreeSet;

/// A shift of a schedule: every send whose nominal time is at or after `start + after` moves
/// later by `duration` (a TCP session's `pause`, a UDP socket's `gap`); the schedule's `stop`
/// stays where it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shift {
    /// From the schedule's start to the shift.
    pub(crate) after: SimDuration,
    /// How much later the sends from there go out.
    pub(crate) duration: SimDuration,
}

impl From<Pause> for Shift {
    fn from(p: Pause) -> Shift {
        Shift {
            after: p.after,
            duration: p.duration,
        }
    }
}

impl From<SocketGap> for Shift {
    fn from(g: SocketGap) -> Shift {
        Shift {
            after: g.after,
            duration: g.duration,
        }
    }
}

impl ClientSchedule {
    fn nominal(&self, k: u32) -> SimTime {
        self.start + self.interval.saturating_mul(k as u64)
    }

    /// When send `k` (from 0) goes out: its nominal time plus a jitter drawn from `rng` (no
    /// draw when there is no jitter), or `None` once `count` sends are made or the nominal
    /// time reaches `stop`. The one schedule of UDP, TCP and ping clients.
    pub(crate) fn send_time(&self, k: u32, rng: &mut SimRng) -> Option<SimTime> {
        let nominal = self.nominal(k);
        if self.count.is_some_and(|c| k >= c) || nominal >= self.stop {
            return None;
        }
        let jitter = if self.jitter.is_zero() {
            SimDuration::ZERO
        } else {
            SimDuration::from_nanos(rng.below(self.jitter.as_nanos().saturating_add(1)))
        };
        Some(nominal + jitter)
    }
}

/// How a client's sends follow each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pacing {
    /// Send `k` at `start + k × interval` plus its jitter ([`ClientSchedule::send_time`]),
    /// moved by the shift from where it applies.
    Periodic(Option<Shift>),
    /// One send at a time: the first at `start`, each next one when the client says the one
    /// before has ended ([`Scheduler::follow`]), as a `dig` loop runs.
    Sequential,
}

/// The sends of one client: how many went out, when the next one is due, and the client's
/// seeded jitter stream (`{label}/jitter`).
///
/// The schedule and pacing are passed in at each call, read from the client's configuration,
/// so the scheduler holds no copy of them. A client calls [`Scheduler::take_due`] in its
/// `handle_timeout` until it returns `None`, and puts [`Scheduler::next`] into its
/// `poll_timeout`.
#[derive(Debug, Clone)]
pub(crate) struct Scheduler {
    jitter_rng: SimRng,
    next_k: u32,
    next: Option<SimTime>,
}

impl Scheduler {
    /// The scheduler of a client whose seeded streams are named by `seed` and `label`. No
    /// send is scheduled until the client, once built, calls [`Scheduler::schedule`].
    pub(crate) fn new(seed: u64, label: &str) -> Scheduler {
        Scheduler {
            jitter_rng: SimRng::child(seed, label, "jitter"),
            next_k: 0,
            next: None,
        }
    }

    /// When the next send is due; `None` once the schedule has none left (or, sequential,
    /// while one is under way).
    pub(crate) fn next(&self) -> Option<SimTime> {
        self.next
    }

    /// Schedules the next send (the first, or the one after the last taken): periodic, at its time on `schedule` moved by
    /// the shift where it applies; sequential, the first at the start and no other (the next
    /// one follows the end of this one).
    pub(crate) fn schedule(&mut self, schedule: &ClientSchedule, pacing: Pacing) {
        let s = schedule;
        let k = self.next_k;
        self.next = match pacing {
            Pacing::Sequential => match k {
                0 => self.sequential_at(s, s.start),
                _ => None,
            },
            Pacing::Periodic(Some(sh)) if s.nominal(k) >= s.start + sh.after => {
                let moved = ClientSchedule {
                    start: s.start + sh.duration,
                    ..s.clone()
                };
                moved.send_time(k, &mut self.jitter_rng)
            }
            Pacing::Periodic(_) => s.send_time(k, &mut self.jitter_rng),
        };
    }

    /// The send due at `now`, if one is: returns its number (from 0) and schedules the next.
    pub(crate) fn take_due(
        &mut self,
        now: SimTime,
        schedule: &ClientSchedule,
        pacing: Pacing,
    ) -> Option<u32> {
        if self.next.is_none_or(|t| t > now) {
            return None;
        }
        let k = self.next_k;
        self.next_k += 1;
        self.schedule(schedule, pacing);
        Some(k)
    }

    /// A sequential client's send ended (or could not be made): the next one at `at`, unless
    /// the count is made or `at` reaches the stop.
    pub(crate) fn follow(&mut self, schedule: &ClientSchedule, at: SimTime) {
        self.next = self.sequential_at(schedule, at);
    }

    fn sequential_at(&self, s: &ClientSchedule, at: SimTime) -> Option<SimTime> {
        (s.count.is_none_or(|c| self.next_k < c) && at < s.stop).then_some(at)
    }
}

/// The ids whose deadline has come at `now`, in deadline order: `deadlines` holds a client's
/// queries, requests or connections by `(deadline, id)`.
pub(crate) fn due_at(deadlines: &BTreeSet<(SimTime, u32)>, now: SimTime) -> Vec<u32> {
    deadlines
        .range(..=(now, u32::MAX))
        .map(|(_, k)| *k)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(count: Option<u32>) -> ClientSchedule {
        ClientSchedule {
            start: SimTime::ZERO,
            stop: SimTime::from_secs(100),
            interval: SimDuration::from_secs(10),
            jitter: SimDuration::ZERO,
            count,
        }
    }

    /// Every send, taken when due: (number, the second it was due).
    fn drain(s: &mut Scheduler, sched: &ClientSchedule, pacing: Pacing) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        while let Some(t) = s.next() {
            let k = s.take_due(t, sched, pacing).unwrap();
            out.push((k, t.since_start().as_secs()));
        }
        out
    }

    #[test]
    fn a_shift_moves_the_sends_from_its_start_and_keeps_the_stop() {
        let sched = schedule(None);
        let pacing = Pacing::Periodic(Some(Shift {
            after: SimDuration::from_secs(25),
            duration: SimDuration::from_secs(30),
        }));
        let mut s = Scheduler::new(1, "c");
        s.schedule(&sched, pacing);
        let secs: Vec<u64> = drain(&mut s, &sched, pacing).iter().map(|x| x.1).collect();
        // 0, 10, 20 on time; from the nominal 30 s on, 30 s later, until the stop at 100 s.
        assert_eq!(secs, [0, 10, 20, 60, 70, 80, 90]);
    }

    #[test]
    fn a_sequential_client_sends_one_at_a_time_up_to_its_count() {
        let sched = schedule(Some(2));
        let mut s = Scheduler::new(1, "c");
        s.schedule(&sched, Pacing::Sequential);
        assert_eq!(
            s.take_due(SimTime::ZERO, &sched, Pacing::Sequential),
            Some(0)
        );
        assert_eq!(s.next(), None, "nothing while the first is under way");
        s.follow(&sched, SimTime::from_secs(15));
        assert_eq!(
            s.take_due(SimTime::from_secs(14), &sched, Pacing::Sequential),
            None
        );
        assert_eq!(
            s.take_due(SimTime::from_secs(15), &sched, Pacing::Sequential),
            Some(1)
        );
        s.follow(&sched, SimTime::from_secs(30));
        assert_eq!(s.next(), None, "the count is made");
    }
}
