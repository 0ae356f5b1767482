//! A client's queries, kept only while they can still change.
//!
//! A client numbers its queries from 0 and records each one ([`QueryRecord`]). Over a long
//! run (days of simulated time, a query every few milliseconds) keeping them all would make
//! memory grow with the run; the simulation driver instead takes the finished ones from the
//! front ([`QueryLog::take_finished`]) into running totals — what the summary and the
//! expectations need of them — so only the queries still in flight, and those after the
//! oldest of them, stay.

use crate::cluster::apps::{QueryOutcome, QueryRecord};

/// The queries kept below this many are never taken: a short run keeps them all.
const KEEP_AT_LEAST: usize = 64;

/// A client's query records in order, from the oldest kept one.
#[derive(Debug, Clone, Default)]
pub struct QueryLog {
    /// The number of the first record kept (the queries before it were taken).
    base: u32,
    kept: Vec<QueryRecord>,
    /// How many were kept after the last take: the next take waits until twice as many are,
    /// so the front's removal costs O(1) per record on average.
    after_take: usize,
}

impl QueryLog {
    /// An empty log.
    pub fn new() -> QueryLog {
        QueryLog::default()
    }

    /// Appends query `r.seq`, the next number.
    pub fn push(&mut self, r: QueryRecord) {
        debug_assert_eq!(
            u64::from(r.seq),
            u64::from(self.base) + self.kept.len() as u64,
            "queries are recorded in order"
        );
        self.kept.push(r);
    }

    /// Query `seq`, if it is kept.
    pub fn get(&self, seq: u32) -> Option<&QueryRecord> {
        let i = seq.checked_sub(self.base)? as usize;
        self.kept.get(i).filter(|r| r.seq == seq)
    }

    /// Query `seq`, to change it, if it is kept.
    pub fn get_mut(&mut self, seq: u32) -> Option<&mut QueryRecord> {
        let i = seq.checked_sub(self.base)? as usize;
        self.kept.get_mut(i).filter(|r| r.seq == seq)
    }

    /// The queries kept, oldest first: every query until some are taken.
    pub fn kept(&self) -> &[QueryRecord] {
        &self.kept
    }

    /// Removes and returns the finished queries at the front — those with an outcome that
    /// `open` (the client's own test: is the query's socket or connection still there?) says
    /// can no longer change — once enough are kept to make it worth it; an empty list
    /// otherwise. The queries stay in order: the front ones go, in order, every time.
    pub fn take_finished(&mut self, open: impl Fn(u32) -> bool) -> Vec<QueryRecord> {
        if self.kept.len() < KEEP_AT_LEAST.max(2 * self.after_take) {
            return Vec::new();
        }
        let n = self
            .kept
            .iter()
            .position(|r| r.outcome == QueryOutcome::Pending || open(r.seq))
            .unwrap_or(self.kept.len());
        let taken: Vec<QueryRecord> = self.kept.drain(..n).collect();
        self.base += n as u32;
        self.after_take = self.kept.len();
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim_core::SimTime;

    fn rec(seq: u32, done: bool) -> QueryRecord {
        QueryRecord {
            seq,
            sent_at: SimTime::from_nanos(u64::from(seq)),
            src_port: 40000,
            attempts: 1,
            outcome: if done {
                QueryOutcome::Answered(SimTime::from_nanos(u64::from(seq) + 1))
            } else {
                QueryOutcome::Pending
            },
        }
    }

    #[test]
    fn the_finished_front_is_taken_in_order_and_numbers_still_find_the_rest() {
        let mut log = QueryLog::new();
        for s in 0..63 {
            log.push(rec(s, true));
        }
        assert!(log.take_finished(|_| false).is_empty(), "too few to bother");
        log.push(rec(63, true));
        log.push(rec(64, false));
        for s in 65..100 {
            log.push(rec(s, true));
        }
        // Query 10 is finished but still open (a connection still there): the front stops
        // before it.
        let taken = log.take_finished(|s| s == 10);
        assert_eq!(
            taken.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        assert!(log.get(9).is_none());
        assert_eq!(log.get(10).map(|r| r.seq), Some(10));
        assert_eq!(log.get_mut(99).map(|r| r.seq), Some(99));
        assert_eq!(log.kept().len(), 90);
        // The next take waits until twice as many are kept.
        assert!(log.take_finished(|_| false).is_empty());
        for s in 100..190 {
            log.push(rec(s, true));
        }
        let taken = log.take_finished(|_| false);
        assert_eq!(taken.len(), 54, "up to the pending query 64");
        assert_eq!(log.kept()[0].seq, 64);
    }
}
