//! The node's two listeners (clients and peers): where each binds, and the accept loop that
//! hands every connection to a task of its own (a `handler` for a client, a
//! `peer` for a peer), as tokio's mini-redis does with its `Listener` and
//! `Handler`: the loop only accepts, so a slow connection never holds up the next.

use super::{Node, ServerError};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

pub(super) fn listen_addr(
    given: Option<SocketAddr>,
    advertised: &str,
    what: &'static str,
) -> Result<SocketAddr, ServerError> {
    match given {
        Some(a) => Ok(a),
        None => advertised.parse().map_err(|e| {
            ServerError::Config(format!(
                "this node's {what} address {advertised:?} is not IP:PORT ({e}); \
                 give --listen-{} explicitly",
                if what == "clients" { "client" } else { "peer" }
            ))
        }),
    }
}

pub(super) fn listen_err(
    what: &'static str,
    addr: SocketAddr,
    source: std::io::Error,
) -> ServerError {
    ServerError::Listen { what, addr: addr.to_string(), source }
}

pub(super) async fn bind(addr: SocketAddr, what: &'static str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).await.map_err(|e| listen_err(what, addr, e))
}

/// Accepts `what` ("client", "peer") connections on `listener`, each served by `serve` on a
/// task of its own; a failed accept (out of file descriptors) is logged and retried.
pub(super) struct Listener<F> {
    pub(super) node: Arc<Node>,
    pub(super) listener: TcpListener,
    pub(super) what: &'static str,
    pub(super) serve: F,
}

impl<F, Fut> Listener<F>
where
    F: Fn(Arc<Node>, TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    /// Accept until the task is aborted ([`Node::shutdown`]).
    pub(super) async fn run(self) {
        let Listener { node, listener, what, serve } = self;
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(serve(node.clone(), stream));
                }
                Err(e) => {
                    tracing::warn!("accepting a {what}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// How long a peer may take over its TLS handshake, and over its hello (clients have
/// `--handshake-timeout-ms`).
pub(super) const HANDSHAKE: Duration = Duration::from_secs(10);
