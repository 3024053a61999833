//! The thread that runs Raft: openraft's core and its tasks (replication, the state machine's
//! applier), the calls to the peers and the peer listener, on a runtime of their own.
//!
//! **Why a thread of its own.** Heartbeats, appends and votes must never wait behind client
//! work: a leader whose heartbeats are late by an election timeout is deposed, and every
//! request then in flight is answered `NotLeader`. On one runtime with the clients, a burst of
//! pipelined requests kept the thread busy past an election timeout (decoding, spawning, and
//! openraft's core taking every queued write in one poll), and the followers elected another
//! leader. (The core's own polls are kept short by the commit window, `gate`.)
//! Here the clients' runtime (`--threads`) hands commands to Raft over openraft's channels
//! and gets their outcomes back the same way; a busy client runtime only delays its own
//! requests. What crosses is two thread wake-ups per commit.

use super::{lock, ServerError};
use std::sync::Mutex;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The Raft thread and its runtime: [`RaftThread::handle`] spawns on it; it stops when told
/// to ([`RaftThread::stop`]) or when dropped, dropping every task still on it.
pub(super) struct RaftThread {
    handle: Handle,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// Told once the runtime and every task on it are gone.
    gone: Mutex<Option<oneshot::Receiver<()>>>,
}

impl RaftThread {
    /// Start the thread and its single-threaded runtime.
    pub(super) fn start() -> Result<RaftThread, ServerError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServerError::Runtime)?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let (done, gone) = oneshot::channel();
        std::thread::Builder::new()
            .name("raft".into())
            .spawn(move || {
                // Until told to stop, or until the node is gone without saying so.
                let _ = runtime.block_on(stopped);
                drop(runtime);
                let _ = done.send(());
            })
            .map_err(ServerError::Runtime)?;
        Ok(RaftThread { handle, stop: Mutex::new(Some(stop)), gone: Mutex::new(Some(gone)) })
    }

    /// Where Raft's tasks run.
    pub(super) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Stop the runtime and wait until every task on it is dropped (their files closed).
    pub(super) async fn stop(&self) {
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
        let gone = lock(&self.gone).take();
        if let Some(gone) = gone {
            let _ = gone.await;
        }
    }
}

impl Drop for RaftThread {
    fn drop(&mut self) {
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
    }
}
