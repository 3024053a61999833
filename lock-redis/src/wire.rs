//! What every connection of the backend sends passes a [`Wire`], which reports each command to
//! the backend's [`RequestHook`] before it goes (see [`crate::link`]): a leaf module, so that
//! the link and the Sentinel lookup both use it without importing each other.

use lock_core::requests::RequestHook;
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisConnectionInfo, RedisFuture, Value};
use std::sync::Arc;

/// Where a link reports the commands it sends: the backend's hook, under the name of the
/// server they go to (`redis`, `sentinel`, Redlock's `master-<i>`).
#[derive(Clone)]
pub(crate) struct Wire {
    hook: RequestHook,
    target: Arc<str>,
}

impl Wire {
    pub(crate) fn new(hook: RequestHook, target: &str) -> Wire {
        Wire { hook, target: target.into() }
    }

    /// The same hook, for commands to another server (the Sentinels).
    pub(crate) fn to(&self, target: &str) -> Wire {
        Wire::new(self.hook.clone(), target)
    }

    /// `conn`, with every command sent on it reported.
    pub(crate) fn on<'a, C: ConnectionLike>(&'a self, conn: &'a mut C) -> Counted<'a, C> {
        Counted { conn, wire: self }
    }

    /// A connection made by a client of `info`: what the driver sent to set it up, out of the
    /// link's sight. With `CLIENT SETINFO` left out ([`quiet`]) that is the
    /// authentication (`HELLO` on RESP3, else `AUTH` when there is a password) and `SELECT`
    /// when the database is not 0.
    pub(crate) fn connected(&self, info: &RedisConnectionInfo) {
        let auth = match info.protocol().supports_resp3() {
            true => Some("HELLO"),
            false => info.password().map(|_| "AUTH"),
        };
        for command in auth.into_iter().chain((info.db() != 0).then_some("SELECT")) {
            self.hook.sent(&self.target, command);
        }
    }

    fn command(&self, cmd: &Cmd) {
        let name = match cmd.args_iter().next() {
            Some(redis::Arg::Simple(name)) => std::str::from_utf8(name).unwrap_or("?"),
            _ => "?",
        };
        self.hook.sent(&self.target, name);
    }

    fn pipeline(&self, pipeline: &Pipeline) {
        if pipeline.is_transaction() {
            self.hook.sent(&self.target, "MULTI");
        }
        pipeline.cmd_iter().for_each(|cmd| self.command(cmd));
        if pipeline.is_transaction() {
            self.hook.sent(&self.target, "EXEC");
        }
    }
}

/// A connection whose commands are reported to a [`Wire`] as they are sent.
pub(crate) struct Counted<'a, C> {
    conn: &'a mut C,
    wire: &'a Wire,
}

impl<C: ConnectionLike> ConnectionLike for Counted<'_, C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.wire.command(cmd);
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.wire.pipeline(pipeline);
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// Settings whose connections send, when set up, nothing but what the server needs
/// (authentication, database): not the driver's two `CLIENT SETINFO`, which only label the
/// connection in `CLIENT LIST` and would be requests the link cannot see: a Sentinel's client
/// (a server's or a master's leaves them out too, with its credentials).
pub(crate) fn quiet() -> RedisConnectionInfo {
    RedisConnectionInfo::default().set_skip_set_lib_name()
}
