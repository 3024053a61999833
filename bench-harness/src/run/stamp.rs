//! The grant log's clock: how the run stamps grants, releases and faults, in one process on
//! the tokio clock or across worker processes on the system clock. A leaf of [`crate::run`](mod@crate::run):
//! the contenders, the worker processes and the nemesis all stamp with it.

use tokio::time::Instant;

/// How the grant log's times are taken.
#[derive(Debug, Clone, Copy)]
pub enum Stamp {
    /// Model microseconds since `start` on the tokio clock (divided by `scale`): one process.
    Tokio {
        /// The run's start.
        start: Instant,
        /// [`crate::config::RunConfig::time_scale`].
        scale: u32,
    },
    /// Microseconds of the system clock since `start_us` (µs since the Unix epoch): comparable
    /// across the worker processes of one run.
    System {
        /// The run's common start, in microseconds since the Unix epoch.
        start_us: u64,
    },
}

impl Stamp {
    /// Microseconds since the run's start at tokio instant `t`, which is now (the system
    /// clock is read instead in [`Stamp::System`]).
    pub fn at(&self, t: Instant) -> u64 {
        match *self {
            Stamp::Tokio { start, scale } => us_between(scale, start, t),
            Stamp::System { start_us } => system_now_us().saturating_sub(start_us),
        }
    }

    /// Microseconds since the run's start at tokio instant `t`, which may be past: on the
    /// system clock, now less the time since `t`.
    pub fn past(&self, t: Instant) -> u64 {
        match *self {
            Stamp::Tokio { start, scale } => us_between(scale, start, t),
            Stamp::System { start_us } => {
                let ago = lock_core::rt::now().saturating_duration_since(t).as_micros() as u64;
                system_now_us().saturating_sub(start_us).saturating_sub(ago)
            }
        }
    }

    /// Microseconds since the run's start, now.
    pub fn now_us(&self) -> u64 {
        self.at(lock_core::rt::now())
    }
}

/// The system clock in microseconds since the Unix epoch.
pub fn system_now_us() -> u64 {
    lock_core::time::PhysicalClock::System.now_micros().max(0) as u64
}

/// Model microseconds between two tokio instants.
pub fn us_between(scale: u32, start: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(start).as_micros() as u64 / scale as u64
}
