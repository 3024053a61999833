//! Where each session's connection is, so that a grant committed for a waiter is pushed down
//! its connection in the same step that applied it.

use super::lock;
use crate::proto::{encode, Push, ServerFrame, SessionId};
use crate::state::Event;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::mpsc;

/// A connection's outgoing frames.
pub(super) type Outbox = mpsc::Sender<Vec<u8>>;

/// The most frames waiting to be written to one connection. A client that stops reading its
/// socket while the server has grants to push for it is cut off when this fills, rather than
/// letting the node buffer without bound.
pub(super) const OUTBOX: usize = 4096;

/// Where each session's connection is, to push its grants.
#[derive(Default)]
pub(super) struct Hub {
    pub(super) conns: Mutex<HashMap<SessionId, Outbox>>,
}

impl Hub {
    pub(super) fn attach(&self, session: SessionId, out: &Outbox) {
        lock(&self.conns).insert(session, out.clone());
    }

    pub(super) fn deliver(&self, events: Vec<Event>) {
        let mut conns = lock(&self.conns);
        for event in events {
            match event {
                Event::Granted { session, lock, owner, token, attempt } => {
                    let push = Push::Granted { lock, owner, token, attempt };
                    push_to(&mut conns, session, push);
                }
                Event::Revoked { session, lock, owner, token, by } => {
                    push_to(&mut conns, session, Push::Revoked { lock, owner, token, by });
                }
                Event::Ended { session, reason } => {
                    if let Some(out) = conns.remove(&session) {
                        let push = ServerFrame::Push(Push::SessionEnded { reason });
                        let _ = out.try_send(encode(&push));
                    }
                }
            }
        }
    }
}

/// Push `push` to `session`'s connection; one too slow to take it is forgotten (its client
/// resumes, and learns what it holds, when it reconnects).
pub(super) fn push_to(conns: &mut HashMap<SessionId, Outbox>, session: SessionId, push: Push) {
    if let Some(out) = conns.get(&session) {
        if out.try_send(encode(&ServerFrame::Push(push))).is_err() {
            tracing::warn!("session {session}'s connection does not keep up: dropped");
            conns.remove(&session);
        }
    }
}
