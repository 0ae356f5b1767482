//! This thread's CPU time, for benches on a machine shared with other builds: wall time
//! counts the time the thread waited for a core, CPU time only the time it ran
//! (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, exact to the nanosecond, where
//! `/proc/thread-self/schedstat` moves only at the scheduler's tick). It still counts what
//! the other jobs cost the thread while it ran: a shared cache, a busy memory bus.

use std::time::Duration;

/// The CPU time this thread has run.
pub fn now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
