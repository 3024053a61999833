//! The commit window: how many client commands are proposed to Raft at once, and whose turn
//! it is when the window is full.
//!
//! **Why a window.** openraft's core takes every queued write in one go (one poll, thousands
//! of them) and the leader appends each as an entry; a vote request or a leadership check
//! sent meanwhile waits behind all of them, and a client's command behind every command
//! queued before it. The window (`--commit-window`) keeps a few client commands at most
//! between the clients and the applied state, so the core's queue stays short, and a new command waits for at
//! most a window's worth of others to commit. What it costs is some throughput under a burst:
//! openraft still appends and replicates what is queued together, a window's worth a round
//! (one disk sync on each node), rather than everything queued.
//!
//! **Whose turn.** When the window is full, commands wait in a queue per connection, and a
//! freed place goes to the connections in turn (round robin), not to the command that came
//! first. So a connection that pipelines thousands of requests takes its share of the
//! window, not all of it: a bystander's single command waits for at most one command of each
//! other connection before it goes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// A connection's number, for its turn in the window.
pub(super) type ConnId = u64;

/// The commit window of one node.
pub(super) struct Gate {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Places free in the window.
    free: usize,
    /// The commands waiting, per connection, in the order each connection sent them.
    waiting: HashMap<ConnId, VecDeque<oneshot::Sender<Place>>>,
    /// The connections with commands waiting, in turn.
    turns: VecDeque<ConnId>,
}

/// A place in the window: given back when dropped, to the next connection in turn.
pub(super) struct Place {
    /// `None` once the place was handed on otherwise.
    gate: Option<Arc<Gate>>,
}

impl Gate {
    /// A window of `size` places.
    pub(super) fn new(size: usize) -> Arc<Gate> {
        Arc::new(Gate { state: Mutex::new(State { free: size, ..State::default() }) })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a command of connection `conn`: at once if one is free and nobody waits,
    /// else when the turns come to it.
    pub(super) async fn enter(self: &Arc<Self>, conn: ConnId) -> Place {
        let rx = {
            let mut guard = self.state();
            let state = &mut *guard;
            if state.free > 0 && state.turns.is_empty() {
                state.free -= 1;
                return Place { gate: Some(self.clone()) };
            }
            let (tx, rx) = oneshot::channel();
            let queue = state.waiting.entry(conn).or_default();
            if queue.is_empty() {
                state.turns.push_back(conn);
            }
            queue.push_back(tx);
            rx
        };
        // The sender is dropped only with the gate, and the gate lives as long as a place.
        rx.await.expect("a waiting command is always given a place")
    }

    /// Give a place back: to the next connection in turn, or to the free ones.
    fn leave(self: &Arc<Self>) {
        let mut guard = self.state();
        let state = &mut *guard;
        while let Some(conn) = state.turns.pop_front() {
            let Some(queue) = state.waiting.get_mut(&conn) else {
                continue;
            };
            let next = queue.pop_front();
            if queue.is_empty() {
                state.waiting.remove(&conn);
            } else {
                state.turns.push_back(conn);
            }
            let Some(next) = next else {
                continue;
            };
            match next.send(Place { gate: Some(self.clone()) }) {
                Ok(()) => return,
                // Its command is gone (its task was cancelled): the place goes on to the
                // next, and is not given back twice.
                Err(mut place) => place.gate = None,
            }
        }
        state.free += 1;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.leave();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the window full, a connection that asks once goes before the second command of a
    /// connection that queued many.
    #[tokio::test]
    async fn a_freed_place_goes_to_the_connections_in_turn() {
        let gate = Gate::new(1);
        let first = gate.enter(1).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (conn, n) in [(1, 0), (1, 1), (1, 2), (2, 0)] {
            let (gate, tx) = (gate.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let place = gate.enter(conn).await;
                tx.send((conn, n)).unwrap();
                drop(place);
            }));
            // Each is queued before the next is sent.
            tokio::task::yield_now().await;
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        let order: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(order, [(1, 0), (2, 0), (1, 1), (1, 2)]);
    }

    /// A place whose waiter is gone goes to the next one, and the window keeps its size.
    #[tokio::test]
    async fn a_place_is_never_lost() {
        let gate = Gate::new(2);
        let a = gate.enter(1).await;
        let b = gate.enter(1).await;
        let gone = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter(2).await }
        });
        tokio::task::yield_now().await;
        gone.abort();
        let _ = gone.await;
        drop(a);
        drop(b);
        let _c = gate.enter(3).await;
        let _d = gate.enter(3).await;
        assert_eq!(gate.state().free, 0);
        assert!(gate.state().turns.is_empty());
    }
}
