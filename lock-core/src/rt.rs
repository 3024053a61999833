//! The runtime the locks and the embedded store run on: a clock, sleeps, timeouts, yields and
//! spawned tasks, on whichever of two executors the calling thread is in.
//!
//! - Inside [`Simulation::block_on`] every call goes to the [`sim`] executor: one thread, a
//!   virtual clock that jumps from event to event, and a timer heap whose ties the seed
//!   orders. A run costs only the work its tasks do, and one seed gives one run.
//! - Anywhere else every call goes to tokio: wall time on a multi-thread runtime for the real
//!   engines, or tokio's paused clock under `start_paused` (tests written for it keep
//!   working).
//!
//! Code that wants both writes against this module only: `rt::now()` instead of
//! `Instant::now()`, `rt::sleep` instead of `tokio::time::sleep`, `rt::spawn` instead of
//! `tokio::spawn`. tokio's synchronisation types (`Notify`, `watch`, `mpsc`, `oneshot`,
//! `Mutex`) need no runtime and work in both; but a value several tasks wait on together is
//! a [`Signal`], which wakes them in a fixed order where `watch` wakes them in a random one.
//! Instants are tokio's [`Instant`] in both, so types that store them are unchanged; in a
//! simulation they read as the simulation's start plus its virtual time.
//!
//! Calling tokio's own timers or `tokio::spawn` inside a simulation panics ("no reactor
//! running"): a call that escaped this module is found the first time it runs, never
//! silently timed by the wall clock.

mod signal;
pub mod sim;

pub use signal::Signal;
pub use sim::Simulation;
pub use tokio::time::Instant;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The current time: the simulation's virtual clock inside one, tokio's clock elsewhere.
pub fn now() -> Instant {
    sim::now().unwrap_or_else(Instant::now)
}

/// Time since `since` on the current clock (zero for an instant to come): what
/// `Instant::elapsed` would say, had it asked this module for the time.
pub fn elapsed(since: Instant) -> Duration {
    now().saturating_duration_since(since)
}

/// Whether the calling thread runs inside a [`Simulation`].
pub fn in_simulation() -> bool {
    sim::active()
}

/// Waits until `duration` has passed.
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(now() + duration)
}

/// Waits until `deadline`.
pub fn sleep_until(deadline: Instant) -> Sleep {
    match sim::Timer::new(deadline) {
        Some(timer) => Sleep(SleepInner::Sim(timer)),
        None => Sleep(SleepInner::Tokio(Box::pin(tokio::time::sleep_until(deadline)))),
    }
}

/// A sleep of either executor (see [`sleep`]).
#[must_use = "a sleep does nothing unless awaited"]
pub struct Sleep(SleepInner);

enum SleepInner {
    Sim(sim::Timer),
    Tokio(Pin<Box<tokio::time::Sleep>>),
}

impl Sleep {
    /// When it ends.
    pub fn deadline(&self) -> Instant {
        match &self.0 {
            SleepInner::Sim(t) => t.deadline(),
            SleepInner::Tokio(s) => s.deadline(),
        }
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            SleepInner::Sim(t) => t.poll(cx),
            SleepInner::Tokio(s) => s.as_mut().poll(cx),
        }
    }
}

/// The error of a [`timeout`] whose time ran out first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// Runs `future` for at most `duration`: its output, or [`Elapsed`].
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    timeout_at(now() + duration, future)
}

/// Runs `future` until `deadline` at most: its output, or [`Elapsed`].
pub fn timeout_at<F: Future>(deadline: Instant, future: F) -> Timeout<F> {
    Timeout { future, sleep: sleep_until(deadline) }
}

/// A future with a deadline (see [`timeout`]).
#[must_use = "a timeout does nothing unless awaited"]
pub struct Timeout<F> {
    future: F,
    sleep: Sleep,
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned: it is never moved out of `self`, and
        // `Timeout` has no Drop of its own; `sleep` is Unpin and not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        if let Poll::Ready(out) = future.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        Pin::new(&mut this.sleep).poll(cx).map(|()| Err(Elapsed))
    }
}

/// Lets every other task that is ready run before the caller goes on.
pub async fn yield_now() {
    if sim::active() {
        sim::YieldNow::default().await
    } else {
        tokio::task::yield_now().await
    }
}

/// Runs `future` as a task of its own on the current executor. Outside a simulation this is
/// `tokio::spawn` and panics, as it does, outside a tokio runtime.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match sim::spawn(future) {
        Ok(handle) => JoinHandle(JoinInner::Sim(handle)),
        Err(future) => JoinHandle(JoinInner::Tokio(tokio::spawn(future))),
    }
}

/// [`spawn`] when an executor runs on this thread; `None` otherwise (the future is dropped):
/// for work a destructor hands off, which has nowhere to run once the runtime is gone.
pub fn try_spawn<F>(future: F) -> Option<JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match sim::spawn(future) {
        Ok(handle) => Some(JoinHandle(JoinInner::Sim(handle))),
        Err(future) => tokio::runtime::Handle::try_current()
            .ok()
            .map(|rt| JoinHandle(JoinInner::Tokio(rt.spawn(future)))),
    }
}

/// Why a task gave no output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// It was aborted, or its executor shut down first.
    #[error("task was cancelled")]
    Cancelled,
    /// It panicked.
    #[error("task panicked: {0}")]
    Panicked(String),
}

impl JoinError {
    /// Whether the task was cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, JoinError::Cancelled)
    }
    /// Whether the task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }
}

impl From<tokio::task::JoinError> for JoinError {
    fn from(e: tokio::task::JoinError) -> Self {
        if e.is_cancelled() {
            JoinError::Cancelled
        } else {
            JoinError::Panicked(e.to_string())
        }
    }
}

/// A spawned task: await it for its output; dropping it detaches the task.
pub struct JoinHandle<T>(JoinInner<T>);

enum JoinInner<T> {
    Sim(sim::JoinHandle<T>),
    Tokio(tokio::task::JoinHandle<T>),
}

impl<T: Send + 'static> JoinHandle<T> {
    /// Stops the task at its next await (or before it first runs).
    pub fn abort(&self) {
        match &self.0 {
            JoinInner::Sim(h) => h.abort(),
            JoinInner::Tokio(h) => h.abort(),
        }
    }
    /// Whether the task has ended (finished, panicked or been aborted).
    pub fn is_finished(&self) -> bool {
        match &self.0 {
            JoinInner::Sim(h) => h.is_finished(),
            JoinInner::Tokio(h) => h.is_finished(),
        }
    }
    /// A handle that can abort the task but not await it.
    pub fn abort_handle(&self) -> AbortHandle {
        match &self.0 {
            JoinInner::Sim(h) => AbortHandle(AbortInner::Sim(h.abort_handle())),
            JoinInner::Tokio(h) => AbortHandle(AbortInner::Tokio(h.abort_handle())),
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            JoinInner::Sim(h) => Pin::new(h).poll(cx),
            JoinInner::Tokio(h) => Pin::new(h).poll(cx).map_err(JoinError::from),
        }
    }
}

impl<T: Send + 'static> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle").field("finished", &self.is_finished()).finish()
    }
}

/// Aborts a task (see [`JoinHandle::abort_handle`]).
#[derive(Clone)]
pub struct AbortHandle(AbortInner);

#[derive(Clone)]
enum AbortInner {
    Sim(sim::AbortHandle),
    Tokio(tokio::task::AbortHandle),
}

impl AbortHandle {
    /// Stops the task at its next await.
    pub fn abort(&self) {
        match &self.0 {
            AbortInner::Sim(h) => h.abort(),
            AbortInner::Tokio(h) => h.abort(),
        }
    }
    /// Whether the task has ended.
    pub fn is_finished(&self) -> bool {
        match &self.0 {
            AbortInner::Sim(h) => h.is_finished(),
            AbortInner::Tokio(h) => h.is_finished(),
        }
    }
}

impl fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortHandle").field("finished", &self.is_finished()).finish()
    }
}
