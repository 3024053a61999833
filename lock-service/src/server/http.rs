//! The node's HTTP endpoint (`--metrics-addr`): `GET /metrics` (the metrics of
//! [`super::metrics`], in Prometheus' text format) and `GET /health` (200 or 503, with a JSON
//! object saying why).
//!
//! **Why by hand.** Two read-only GETs, one request per connection, need a request line, the
//! end of the headers and a response with a length: a few dozen lines on tokio, which the node
//! already runs. hyper (and a framework above it) would bring a large dependency tree to the
//! server build, and its keep-alive, pipelining and bodies are nothing a scraper needs.
//!
//! **What it answers.** `GET` (or `HEAD`) of `/metrics` or `/health`, a query string ignored;
//! another method on them 405, any other path 404, a request that is not HTTP/1.x 400. Every
//! answer closes the connection.
//!
//! **Bounds.** The request's head must come whole within [`READ_TIMEOUT`] of connecting (else
//! 408) and within [`MAX_HEAD`] bytes (else 400); a body is never read. An answer must be
//! taken within [`WRITE_TIMEOUT`]. At most [`MAX_CONNECTIONS`] connections are served at once;
//! one more is closed at once. The endpoint runs on the node's client runtime, and reads the
//! state machine for an instant per request: Raft, on its own thread, never waits for it.

use super::Node;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The longest request head read, in bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a request's head may take to come, from connecting.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer may take to be written.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections served at once.
pub const MAX_CONNECTIONS: usize = 64;

/// Accept and serve until the task is aborted ([`Node::shutdown`]).
pub(super) async fn run(node: Arc<Node>, listener: TcpListener) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("accepting an HTTP connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Over the limit: closed unanswered, rather than queued behind slow ones.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let node = node.clone();
        tokio::spawn(async move {
            serve(&node, stream).await;
            drop(slot);
        });
    }
}

/// An answer: status, content type, body.
struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
    /// `HEAD`: the headers alone.
    head_only: bool,
    /// `Allow`, for a 405.
    allow: bool,
}

impl Response {
    fn new(status: u16, content_type: &'static str, body: String) -> Response {
        Response { status, content_type, body, head_only: false, allow: false }
    }

    fn text(status: u16, body: impl Into<String>) -> Response {
        let mut body = body.into();
        body.push('\n');
        Response::new(status, "text/plain; charset=utf-8", body)
    }

    fn bytes(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            503 => "Service Unavailable",
            _ => "Error",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\nConnection: close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if self.allow {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        if !self.head_only {
            out.push_str(&self.body);
        }
        out.into_bytes()
    }
}

/// Why a request's head could not be read.
enum Unread {
    /// Not HTTP, or too large: answered 400.
    Bad(String),
    /// The connection closed or failed first: nothing to answer.
    Gone,
}

/// A request: its method and path.
struct Request {
    method: String,
    path: String,
}

/// Serve one connection: one request, one answer, closed.
async fn serve(node: &Node, mut stream: TcpStream) {
    let response = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Err(_) => Response::text(408, "the request's head did not come in time"),
        Ok(Err(Unread::Gone)) => return,
        Ok(Err(Unread::Bad(why))) => Response::text(400, why),
        Ok(Ok(request)) => answer(node, &request).await,
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&response.bytes()).await?;
        stream.shutdown().await?;
        // Read what the client still sends (the rest of an oversized head, say) for a while:
        // a socket closed with unread bytes is reset, and the client may lose the answer.
        let mut sink = [0u8; 4096];
        let mut left: usize = 64 * 1024;
        while left > 0 {
            match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
                _ => break,
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// The answer to `request`.
async fn answer(node: &Node, request: &Request) -> Response {
    let known = matches!(request.path.as_str(), "/metrics" | "/health");
    let head_only = request.method == "HEAD";
    if !known {
        return Response::text(
            404,
            format!("{}: not found (try /metrics or /health)", request.path),
        );
    }
    if request.method != "GET" && !head_only {
        let mut r = Response::text(405, format!("{} is not served: GET it", request.method));
        r.allow = true;
        return r;
    }
    let mut response = if request.path == "/metrics" {
        Response::new(200, super::metrics::CONTENT_TYPE, node.render_metrics())
    } else {
        let (healthy, mut body) = node.health().await;
        body.push('\n');
        Response::new(if healthy { 200 } else { 503 }, "application/json", body)
    };
    response.head_only = head_only;
    response
}

/// Read a request's head (up to the blank line after the headers) and parse it.
async fn read_head(stream: &mut TcpStream) -> Result<Request, Unread> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let end = loop {
        match find_end(&buf) {
            Some(at) if at <= MAX_HEAD => break at,
            _ if buf.len() >= MAX_HEAD => {
                return Err(Unread::Bad(format!("the request's head is over {MAX_HEAD} bytes")));
            }
            _ => {}
        }
        let n = stream.read(&mut chunk).await.map_err(|_| Unread::Gone)?;
        if n == 0 {
            return Err(if buf.is_empty() {
                Unread::Gone
            } else {
                Unread::Bad("the request ended before its head did".into())
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    parse(&buf[..end]).map_err(Unread::Bad)
}

/// Where the head in `buf` ends (the blank line after its headers), if it does.
fn find_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// Parse a request head: `METHOD SP TARGET SP HTTP/1.x`, then `Name: value` lines.
fn parse(head: &[u8]) -> Result<Request, String> {
    let head = std::str::from_utf8(head).map_err(|_| "the request is not text".to_string())?;
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("not an HTTP request line (METHOD TARGET HTTP/1.1)".into());
    };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic());
    if !token(method) || !target.starts_with('/') || !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return Err("not an HTTP/1.x request line (METHOD /PATH HTTP/1.1)".into());
    }
    if lines
        .any(|l| l.split_once(':').is_none_or(|(name, _)| name.is_empty() || name.contains(' ')))
    {
        return Err("a malformed header line".into());
    }
    let path = target.split('?').next().unwrap_or_default();
    Ok(Request { method: method.to_string(), path: path.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_are_parsed_or_refused() {
        let ok = parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*").unwrap();
        assert_eq!((ok.method.as_str(), ok.path.as_str()), ("GET", "/metrics"));
        assert!(parse(b"GET /health HTTP/1.0").is_ok());
        for bad in [
            &b"garbage"[..],
            b"GET /metrics",
            b"GET metrics HTTP/1.1",
            b"GET /metrics HTTP/2",
            b"GET /metrics HTTP/1.1 extra",
            b"GET /metrics HTTP/1.1\r\nno colon",
            b"\xff\xfe /metrics HTTP/1.1",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
