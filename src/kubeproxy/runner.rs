//! When kube-proxy syncs: a sans-IO model of `async.BoundedFrequencyRunner` as the iptables
//! proxier drives it (pkg/util/async/bounded_frequency_runner.go, proxier.go `NewProxier`,
//! `syncProxyRules`).
//!
//! kube-proxy builds its runner as `NewBoundedFrequencyRunner("sync-runner", syncProxyRules,
//! minSyncPeriod, time.Hour, burstSyncs=2)`:
//!
//! - A change to a Service or EndpointSlice calls `Run()`. The loop then calls `tryRun`: a
//!   token bucket (rate `1/minSyncPeriod`, burst 2, full at start) decides whether a sync may
//!   start now. If not, the runner's timer is set to `minSyncPeriod - (now - lastRun)` (or
//!   left earlier if already earlier), and the sync happens then. Requests made meanwhile
//!   coalesce into that one sync.
//! - Every run resets the timer to `maxInterval` (one hour): a sync happens at least hourly.
//! - A sync is *full* when a full sync is needed (the first one, or after a failed one) or
//!   when the last full sync is at least `FullSyncPeriod` (one hour) old; otherwise *partial*.
//!   (kube-proxy compares `time.Since(lastFullSync) > FullSyncPeriod`; its hourly timer fires a
//!   hair after the hour because the sync itself takes time, so the simulation, where syncs
//!   take no time, uses `>=` to land on the same decision.)
//! - A failed sync calls `RetryAfter(syncPeriod)` and forces the next sync to be full.
//! - At start-up kube-proxy calls `syncProxyRules` directly (from `OnEndpointSlicesSynced`),
//!   outside the runner: that first full sync spends no token and does not touch the timer.
//!
//! `syncPeriod` also drives the canary check of `iptables.Monitor`; nothing in the simulation
//! flushes the canary, so it never triggers a sync here.
//!
//! Call order: [`SyncRunner::on_change`] when an object changes; ask
//! [`SyncRunner::poll_timeout`] for the next instant to call [`SyncRunner::on_timeout`]; that
//! returns the kind of sync to perform now, if any. Report a failed sync with
//! [`SyncRunner::on_sync_failed`]. When a timer and a request are due at once, one `tryRun`
//! serves both (Go's `select` would serve them one after the other in a random order).

use sim_core::{SimDuration, SimTime};

/// `proxyutil.FullSyncPeriod`: the longest time between full syncs, and `maxInterval`.
pub const FULL_SYNC_PERIOD: SimDuration = SimDuration::from_secs(3600);

/// kube-proxy's sync timing parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncTiming {
    /// `--iptables-min-sync-period` (default 1 s): the token bucket's refill interval.
    pub min_sync_period: SimDuration,
    /// `--iptables-sync-period` (default 30 s): the retry delay after a failed sync.
    pub sync_period: SimDuration,
    /// `burstSyncs` (2): syncs allowed back to back before the rate limit applies.
    pub burst_syncs: u32,
    /// The runner's `maxInterval` and `FullSyncPeriod` (one hour).
    pub full_sync_period: SimDuration,
}

impl Default for SyncTiming {
    fn default() -> SyncTiming {
        SyncTiming {
            min_sync_period: SimDuration::from_secs(1),
            sync_period: SimDuration::from_secs(30),
            burst_syncs: 2,
            full_sync_period: FULL_SYNC_PERIOD,
        }
    }
}

/// Full or partial sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    /// Every chain rewritten, jump rules ensured.
    Full,
    /// Only the chains of Services that changed since the last sync.
    Partial,
}

/// The sync scheduler of one kube-proxy. See the module documentation.
#[derive(Clone, Debug)]
pub struct SyncRunner {
    timing: SyncTiming,
    /// Token-bucket credit in nanoseconds (one token = `min_sync_period`).
    credit_ns: u128,
    credit_at: SimTime,
    last_run: Option<SimTime>,
    timer: SimTime,
    requested: Option<SimTime>,
    initial_at: Option<SimTime>,
    need_full_sync: bool,
    last_full_sync: Option<SimTime>,
    retry_at: Option<SimTime>,
}

impl SyncRunner {
    /// A runner for a kube-proxy starting at `start`; its first (full) sync is due then.
    pub fn new(timing: SyncTiming, start: SimTime) -> SyncRunner {
        SyncRunner {
            timing,
            credit_ns: Self::cap(&timing),
            credit_at: start,
            last_run: None,
            timer: start + timing.full_sync_period,
            requested: None,
            initial_at: Some(start),
            need_full_sync: true,
            last_full_sync: None,
            retry_at: None,
        }
    }

    fn cap(t: &SyncTiming) -> u128 {
        t.min_sync_period.as_nanos() as u128 * t.burst_syncs.max(1) as u128
    }

    /// The timing parameters.
    pub fn timing(&self) -> SyncTiming {
        self.timing
    }

    /// A Service or EndpointSlice changed at `now` (`proxier.Sync()` → `Run()`). Before the
    /// start-up sync has run, changes request nothing: kube-proxy is not initialized yet, and
    /// that sync will include them.
    pub fn on_change(&mut self, now: SimTime) {
        if self.initial_at.is_some() {
            return;
        }
        if self.requested.is_none() {
            self.requested = Some(now);
        }
    }

    /// Forces the next sync to be full (kube-proxy's `needFullSync`, as set by a topology
    /// change or a failure) without scheduling it.
    pub fn need_full_sync(&mut self) {
        self.need_full_sync = true;
    }

    /// The instant [`SyncRunner::on_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        [
            self.initial_at,
            self.requested,
            self.retry_at,
            Some(self.timer),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Advances to `now` and returns the sync to perform now, if any. Call it at (or after)
    /// [`SyncRunner::poll_timeout`]; calling it early does nothing.
    pub fn on_timeout(&mut self, now: SimTime) -> Option<SyncKind> {
        if let Some(at) = self.initial_at {
            if at <= now {
                // The start-up sync bypasses the runner: no token, no timer reset.
                self.initial_at = None;
                return Some(self.decide(now));
            }
        }
        if let Some(at) = self.retry_at {
            if at <= now {
                // doRetry: the timer fires no later than the retry time.
                self.retry_at = None;
                if at < self.timer {
                    self.timer = at;
                }
            }
        }
        let requested = self.requested.is_some_and(|t| t <= now);
        if !requested && self.timer > now {
            return None;
        }
        self.requested = None;
        self.try_run(now)
    }

    /// The sync the runner started last ended at `end` (`kubeProxy.syncCost: modelled`,
    /// where a sync takes simulated time): `lastRun` and the `maxInterval` timer count from
    /// then, as `tryRun` sets them after the sync function returns. The start-up sync,
    /// outside the runner, leaves both alone.
    pub fn on_sync_done(&mut self, end: SimTime) {
        if self.last_run.is_some_and(|t| t < end) {
            self.last_run = Some(end);
            self.timer = end + self.timing.full_sync_period;
        }
    }

    /// The sync started at `now` failed (`RetryAfter(syncPeriod)`, `needFullSync = true`).
    pub fn on_sync_failed(&mut self, now: SimTime) {
        self.need_full_sync = true;
        let at = now + self.timing.sync_period;
        if self.retry_at.is_none_or(|r| at < r) {
            self.retry_at = Some(at);
        }
    }

    fn try_accept(&mut self, now: SimTime) -> bool {
        if self.timing.min_sync_period.is_zero() {
            return true;
        }
        let elapsed = now.saturating_since(self.credit_at).as_nanos() as u128;
        self.credit_ns = (self.credit_ns + elapsed).min(Self::cap(&self.timing));
        self.credit_at = now;
        let token = self.timing.min_sync_period.as_nanos() as u128;
        if self.credit_ns >= token {
            self.credit_ns -= token;
            true
        } else {
            false
        }
    }

    fn try_run(&mut self, now: SimTime) -> Option<SyncKind> {
        if self.try_accept(now) {
            self.last_run = Some(now);
            self.timer = now + self.timing.full_sync_period;
            return Some(self.decide(now));
        }
        // It can't run right now: run when the minimum interval since the last run has
        // passed, or at the scheduled time if that is sooner.
        let since = self
            .last_run
            .map(|t| now.saturating_since(t))
            .unwrap_or(SimDuration::MAX);
        let next_possible = self.timing.min_sync_period.saturating_sub(since);
        let next_scheduled = self.timer.saturating_since(now);
        self.timer = now + next_possible.min(next_scheduled);
        None
    }

    fn decide(&mut self, now: SimTime) -> SyncKind {
        let stale = self
            .last_full_sync
            .is_none_or(|t| now.saturating_since(t) >= self.timing.full_sync_period);
        if self.need_full_sync || stale {
            self.need_full_sync = false;
            self.last_full_sync = Some(now);
            SyncKind::Full
        } else {
            SyncKind::Partial
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> SimTime {
        SimTime::from_millis(v)
    }

    /// Drives the runner until `until`, returning (instant, kind) of every sync.
    fn drive(r: &mut SyncRunner, changes: &[u64], until: u64) -> Vec<(u64, SyncKind)> {
        let mut out = Vec::new();
        let mut changes: Vec<SimTime> = changes.iter().map(|&c| ms(c)).collect();
        changes.reverse();
        loop {
            let next_change = changes.last().copied();
            let next_timer = r.poll_timeout();
            let now = match (next_change, next_timer) {
                (Some(c), Some(t)) if c <= t => {
                    changes.pop();
                    r.on_change(c);
                    continue;
                }
                (Some(c), None) => {
                    changes.pop();
                    r.on_change(c);
                    continue;
                }
                (_, Some(t)) => t,
                (None, None) => break,
            };
            if now > ms(until) {
                break;
            }
            if let Some(k) = r.on_timeout(now) {
                out.push((now.as_nanos() / 1_000_000, k));
            }
        }
        out
    }

    #[test]
    fn start_up_sync_is_full_and_free() {
        let mut r = SyncRunner::new(SyncTiming::default(), ms(0));
        assert_eq!(r.poll_timeout(), Some(ms(0)));
        // Changes before the start-up sync are part of it.
        r.on_change(ms(0));
        assert_eq!(r.on_timeout(ms(0)), Some(SyncKind::Full));
        assert_eq!(r.on_timeout(ms(0)), None);
        // The start-up sync spent no token: two changes right after use the burst of two.
        let got = drive(&mut r, &[0, 1, 2], 10_000);
        assert_eq!(
            got,
            vec![
                (0, SyncKind::Partial),
                (1, SyncKind::Partial),
                (1001, SyncKind::Partial)
            ]
        );
    }

    #[test]
    fn burst_of_two_then_one_per_min_sync_period() {
        let mut r = SyncRunner::new(SyncTiming::default(), ms(0));
        assert_eq!(r.on_timeout(ms(0)), Some(SyncKind::Full));
        // Changes at 5.0, 5.1, 5.2, 5.3 s: two run at once (burst), the third waits until
        // 1 s after the last run (6.1 s) and serves the fourth too.
        let got = drive(&mut r, &[5000, 5100, 5200, 5300], 20_000);
        assert_eq!(
            got,
            vec![
                (5000, SyncKind::Partial),
                (5100, SyncKind::Partial),
                (6100, SyncKind::Partial)
            ]
        );
        // The bucket refills one token per second: a change at 6.5 s waits until 7.1 s.
        let got = drive(&mut r, &[6500], 20_000);
        assert_eq!(got, vec![(7100, SyncKind::Partial)]);
        // After a quiet while the burst is available again; changes at one instant coalesce.
        let got = drive(&mut r, &[12_000, 12_000, 12_001, 12_002], 20_000);
        assert_eq!(
            got,
            vec![
                (12_000, SyncKind::Partial),
                (12_001, SyncKind::Partial),
                (13_001, SyncKind::Partial)
            ]
        );
    }

    #[test]
    fn hourly_full_resync_without_changes() {
        let mut r = SyncRunner::new(SyncTiming::default(), ms(0));
        assert_eq!(r.on_timeout(ms(0)), Some(SyncKind::Full));
        // The timer was set to one hour at loop start.
        assert_eq!(r.poll_timeout(), Some(ms(3_600_000)));
        assert_eq!(r.on_timeout(ms(3_599_999)), None);
        assert_eq!(r.on_timeout(ms(3_600_000)), Some(SyncKind::Full));
        assert_eq!(r.poll_timeout(), Some(ms(7_200_000)));
    }

    #[test]
    fn a_partial_sync_an_hour_after_the_last_full_one_becomes_full() {
        let mut r = SyncRunner::new(SyncTiming::default(), ms(0));
        assert_eq!(r.on_timeout(ms(0)), Some(SyncKind::Full));
        r.on_change(ms(1_800_000));
        assert_eq!(r.on_timeout(ms(1_800_000)), Some(SyncKind::Partial));
        r.on_change(ms(3_600_000));
        assert_eq!(r.on_timeout(ms(3_600_000)), Some(SyncKind::Full));
        // The timer restarted from the last run.
        assert_eq!(r.poll_timeout(), Some(ms(7_200_000)));
    }

    #[test]
    fn failure_retries_after_sync_period_with_a_full_sync() {
        let mut r = SyncRunner::new(SyncTiming::default(), ms(0));
        assert_eq!(r.on_timeout(ms(0)), Some(SyncKind::Full));
        r.on_change(ms(10_000));
        assert_eq!(r.on_timeout(ms(10_000)), Some(SyncKind::Partial));
        r.on_sync_failed(ms(10_000));
        assert_eq!(r.poll_timeout(), Some(ms(40_000)));
        assert_eq!(r.on_timeout(ms(40_000)), Some(SyncKind::Full));
        assert_eq!(r.poll_timeout(), Some(ms(3_640_000)));
    }

    #[test]
    fn early_calls_do_nothing_and_changes_coalesce() {
        let mut r = SyncRunner::new(SyncTiming::default(), ms(1000));
        assert_eq!(r.on_timeout(ms(999)), None);
        assert_eq!(r.on_timeout(ms(1000)), Some(SyncKind::Full));
        for t in [2000, 2001, 2002] {
            r.on_change(ms(t));
        }
        assert_eq!(r.poll_timeout(), Some(ms(2000)));
        assert_eq!(r.on_timeout(ms(2002)), Some(SyncKind::Partial));
        assert_eq!(r.on_timeout(ms(2002)), None, "three changes, one sync");
    }

    #[test]
    fn a_sync_that_takes_time_counts_min_sync_period_from_its_end() {
        let mut r = SyncRunner::new(SyncTiming::default(), ms(0));
        assert_eq!(r.on_timeout(ms(0)), Some(SyncKind::Full));
        r.on_change(ms(10_000));
        r.on_change(ms(10_000));
        assert_eq!(r.on_timeout(ms(10_000)), Some(SyncKind::Partial));
        // That sync took 2.5 s; a change during it waits for its end, then for the token
        // (the burst of two: one left), and runs at once.
        r.on_sync_done(ms(12_500));
        r.on_change(ms(11_000));
        assert_eq!(r.on_timeout(ms(12_500)), Some(SyncKind::Partial));
        r.on_sync_done(ms(12_600));
        r.on_change(ms(12_700));
        assert_eq!(r.on_timeout(ms(12_700)), Some(SyncKind::Partial));
        r.on_sync_done(ms(12_800));
        // The bucket is short of a token now: the next change waits a full minSyncPeriod
        // after the end of the last run (12.8 s), not after its start (12.7 s).
        r.on_change(ms(12_900));
        assert_eq!(r.on_timeout(ms(12_900)), None);
        assert_eq!(r.poll_timeout(), Some(ms(13_800)));
        assert_eq!(r.on_timeout(ms(13_800)), Some(SyncKind::Partial));
        // The hourly timer counts from the end too.
        r.on_sync_done(ms(14_000));
        assert_eq!(r.poll_timeout(), Some(ms(3_614_000)));
    }

    #[test]
    fn zero_min_sync_period_never_limits() {
        let t = SyncTiming {
            min_sync_period: SimDuration::ZERO,
            ..SyncTiming::default()
        };
        let mut r = SyncRunner::new(t, ms(0));
        let got = drive(&mut r, &[1, 2, 3, 4], 100);
        assert_eq!(got.len(), 5);
    }
}
