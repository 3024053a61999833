//! One peer connection: the hello that names the cluster, then Raft's requests in turn.

use super::listener::HANDSHAKE;
use super::Node;
use crate::proto::{encode, send, MAX_PEER_FRAME};
use crate::raft::{PeerReply, PeerRequest};
use crate::tls::BoxIo;
use std::sync::Arc;
use tokio::net::TcpStream;

/// Serve one peer connection: a hello naming our cluster, then Raft's requests in turn.
pub(super) async fn serve_peer(node: Arc<Node>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut stream: BoxIo = match node.tls.as_ref().and_then(|t| t.peers.as_ref()) {
        None => Box::new(stream),
        Some(peers) => match tokio::time::timeout(HANDSHAKE, peers.accept(stream)).await {
            Ok(Ok(s)) => Box::new(s),
            Ok(Err(e)) => {
                tracing::warn!("a peer's TLS handshake failed: {e}");
                return;
            }
            Err(_) => return,
        },
    };
    // The hello comes within the handshake's time too: a stranger that connects and says
    // nothing does not hold a connection.
    let hello = crate::proto::read_frame::<PeerRequest, _>(&mut stream, MAX_PEER_FRAME);
    match tokio::time::timeout(HANDSHAKE, hello).await.unwrap_or(Ok(None)) {
        Ok(Some(PeerRequest::Hello { cluster, from })) if cluster == node.token => {
            if send(&mut stream, &encode(&PeerReply::Hello(Ok(())))).await.is_err() {
                return;
            }
            tracing::debug!("peer {from} connected");
        }
        Ok(Some(PeerRequest::Hello { cluster, from })) => {
            let why = format!(
                "node {} belongs to cluster {:?}, not {cluster:?} (node {from} dialled it)",
                node.id, node.token
            );
            tracing::warn!("{why}");
            let _ = send(&mut stream, &encode(&PeerReply::Hello(Err(why)))).await;
            return;
        }
        _ => return,
    }
    loop {
        let request =
            match crate::proto::read_frame::<PeerRequest, _>(&mut stream, MAX_PEER_FRAME).await {
                Ok(Some(r)) => r,
                _ => return,
            };
        let reply = match request {
            PeerRequest::Append(r) => PeerReply::Append(node.raft.append_entries(r).await),
            PeerRequest::Vote(r) => PeerReply::Vote(node.raft.vote(r).await),
            PeerRequest::Snapshot(r) => PeerReply::Snapshot(node.raft.install_snapshot(r).await),
            PeerRequest::Hello { .. } => return,
        };
        if send(&mut stream, &encode(&reply)).await.is_err() {
            return;
        }
    }
}
