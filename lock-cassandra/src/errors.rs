//! The driver's errors, mapped onto [`StoreError`]: pure functions over the driver's types.
//!
//! | driver error | `StoreError` | applied? |
//! |---|---|---|
//! | `DbError::WriteTimeout`, `DbError::WriteFailure` | [`StoreError::WriteTimeout`] (server's received / required) | maybe |
//! | client-side request timeout of a write or delete | [`StoreError::WriteTimeout`] (0 of required) | maybe |
//! | `DbError::ReadTimeout`, client-side timeout of a read | [`StoreError::ReadTimeout`] | — |
//! | `DbError::Unavailable` | [`StoreError::Unavailable`] (required / alive) | no |
//! | compare-and-set: `DbError::WriteTimeout`/`WriteFailure` with write type `CAS` (a Paxos phase, or contention past `cas_contention_timeout`), or any other type but `SIMPLE`; `DbError::ReadTimeout` (its read phase) | [`StoreError::CasTimeout`] of kind [`Paxos`](CasTimeoutKind::Paxos) (server's received / required) | maybe |
//! | compare-and-set: `DbError::WriteTimeout`/`WriteFailure` with write type `SIMPLE` (the commit of a decided proposal) | [`StoreError::CasTimeout`] of kind [`Commit`](CasTimeoutKind::Commit) | yes, decided |
//! | compare-and-set: error code `0x1700` (`CAS_WRITE_UNKNOWN`, proposal accepted by fewer than a quorum), which the driver leaves as `DbError::Other` | [`StoreError::CasTimeout`] of kind [`PartiallyAccepted`](CasTimeoutKind::PartiallyAccepted) (0 of the Paxos quorum: the body is not decoded) | maybe |
//! | compare-and-set: client-side request timeout | [`StoreError::CasTimeout`] of kind [`Paxos`](CasTimeoutKind::Paxos), 0 of the Paxos quorum | maybe |
//! | SERIAL read: `DbError::ReadTimeout`, `DbError::WriteTimeout` (a Paxos phase), client-side timeout | [`StoreError::ReadTimeout`] at `QUORUM` (the Paxos quorum, as the embedded store reports it) | — |
//! | broken connection, no connection in any pool, empty query plan, connect failures | [`StoreError::Unreachable`], naming the contact points | maybe |
//! | syntax error, invalid, unauthorized, bad credentials, config error, overloaded, bootstrapping, rate limit, read failure, server error, serialization, protocol | [`StoreError::Rejected`], with the driver's message | no |
//!
//! "maybe" means [`StoreError::may_have_applied`] is true: the algorithms treat such a write
//! as possibly landed and delete the cell again (a compare-and-set: read the row at SERIAL).
//!
//! **What a compare-and-set timeout can tell, over protocol v4.** Cassandra 4.0 knows more
//! than v4 can carry: its `CasWriteTimeoutException` (with the number of contended rounds) and
//! `CasWriteUnknownResultException` (error `CAS_WRITE_UNKNOWN`) exist only in protocol v5, and
//! to a v4 client, like this driver, it sends both as a plain write timeout of type `CAS`
//! (`ErrorMessage.encode`). So on Cassandra a proposal accepted by fewer than a quorum is
//! reported as [`Paxos`](CasTimeoutKind::Paxos) (which promises just as little: a later round
//! may complete it, or not), and `contentions` is always 0. `CAS_WRITE_UNKNOWN` is mapped all
//! the same, for a server that would send it.

use lock_core::store::{CasTimeoutKind, Consistency, SerialConsistency, StoreError};
use scylla::errors::{
    ConnectionError, ConnectionPoolError, ConnectionSetupRequestErrorKind, DbError, ExecutionError,
    MetadataError, NewSessionError, PrepareError, RequestAttemptError, SchemaAgreementError,
    WriteType,
};
use std::fmt;
use std::time::Duration;

/// What kind of request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// An insert (or a batch of them).
    Write,
    /// A delete.
    Delete,
    /// A select.
    Read,
    /// A conditional statement or batch (a lightweight transaction).
    Cas,
    /// A select at SERIAL or LOCAL_SERIAL (a Paxos read).
    SerialRead,
    /// Creating the keyspace or a table, preparing statements, waiting for schema agreement.
    Schema,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Write => "write",
            Operation::Delete => "delete",
            Operation::Read => "read",
            Operation::Cas => "compare-and-set",
            Operation::SerialRead => "serial read",
            Operation::Schema => "schema setup",
        })
    }
}

/// The request an error belongs to: what the mapping needs to say what failed.
#[derive(Debug, Clone, Copy)]
pub struct RequestInfo<'a> {
    /// What was asked.
    pub op: Operation,
    /// On which table.
    pub table: &'a str,
    /// At which consistency: a compare-and-set's commit consistency; `QUORUM` for a SERIAL
    /// read (the Paxos quorum, as its timeouts report it).
    pub consistency: Consistency,
    /// The serial consistency of a compare-and-set or a SERIAL read; `None` for the others.
    pub serial: Option<SerialConsistency>,
    /// Replicas a quorum is a majority of, for the "required" of a client-side timeout.
    pub replicas: usize,
    /// The contact points, named in `Unreachable` messages.
    pub nodes: &'a [String],
}

impl RequestInfo<'_> {
    fn what(&self) -> String {
        match (self.op, self.serial) {
            (Operation::Cas, Some(serial)) => {
                format!(
                    "{} on table '{}' at {serial} (commit at {})",
                    self.op, self.table, self.consistency
                )
            }
            (_, Some(serial)) => format!("{} on table '{}' at {serial}", self.op, self.table),
            (_, None) => format!("{} on table '{}' at {}", self.op, self.table, self.consistency),
        }
    }
    fn unreachable(&self, detail: impl fmt::Display) -> StoreError {
        StoreError::Unreachable(format!(
            "{} failed: no connection to the cluster (contact points {}): {detail}",
            self.what(),
            self.nodes.join(", ")
        ))
    }
    fn rejected(&self, detail: impl fmt::Display) -> StoreError {
        StoreError::Rejected(format!("{} failed: {detail}", self.what()))
    }
    fn is_write(&self) -> bool {
        matches!(self.op, Operation::Write | Operation::Delete)
    }
}

fn count(n: i32) -> usize {
    n.max(0) as usize
}

/// The error code of Cassandra's `CasWriteUnknownResultException` (protocol v5), which the
/// driver, decoding v4, leaves as [`DbError::Other`].
pub const CAS_WRITE_UNKNOWN: i32 = 0x1700;

/// Map the error of executing a statement.
pub fn map_execution_error(err: &ExecutionError, req: &RequestInfo<'_>) -> StoreError {
    match err {
        ExecutionError::LastAttemptError(e) => map_attempt_error(e, req),
        ExecutionError::RequestTimeout(after) => client_timeout(*after, req),
        ExecutionError::ConnectionPoolError(e) => map_pool_error(e, req),
        ExecutionError::EmptyPlan => {
            req.unreachable("the load balancing policy found no node to send the request to")
        }
        ExecutionError::PrepareError(e) => map_prepare_error(e, req),
        ExecutionError::SchemaAgreementError(e) => map_schema_agreement_error(e, req),
        ExecutionError::MetadataError(e) => map_metadata_error(e, req),
        other => req.rejected(other),
    }
}

/// A client-side timeout: the driver gave up waiting, nothing is known of the server's side.
fn client_timeout(after: Duration, req: &RequestInfo<'_>) -> StoreError {
    let required = req.consistency.required(req.replicas.max(1));
    match req.op {
        Operation::Write | Operation::Delete => {
            StoreError::WriteTimeout { consistency: req.consistency, received: 0, required }
        }
        Operation::Read | Operation::SerialRead => {
            StoreError::ReadTimeout { consistency: req.consistency, received: 0, required }
        }
        Operation::Cas => cas_timeout(CasTimeoutKind::Paxos, 0, None, req),
        Operation::Schema => {
            req.rejected(format!("no answer within the client-side timeout of {after:?}"))
        }
    }
}

/// Map the error of the last attempt at a request.
pub fn map_attempt_error(err: &RequestAttemptError, req: &RequestInfo<'_>) -> StoreError {
    match err {
        RequestAttemptError::DbError(db, message) => map_db_error(db, message, req),
        RequestAttemptError::BrokenConnectionError(e) => req.unreachable(e),
        RequestAttemptError::UnableToAllocStreamId => {
            req.unreachable("no free stream id on the connection (too many requests in flight)")
        }
        other => req.rejected(other),
    }
}

/// A compare-and-set whose outcome is unknown; `required` defaults to the Paxos quorum.
fn cas_timeout(
    kind: CasTimeoutKind,
    received: usize,
    required: Option<usize>,
    req: &RequestInfo<'_>,
) -> StoreError {
    let serial = req.serial.unwrap_or_default();
    let required = required.unwrap_or_else(|| serial.required(req.replicas.max(1)));
    // Protocol v4 does not carry the number of contended rounds (see the module docs).
    StoreError::CasTimeout { kind, received, required, contentions: 0 }
}

/// Map an error the server answered a compare-and-set or a SERIAL read with; `None` for the
/// errors these map as every request does.
fn map_paxos_db_error(err: &DbError, req: &RequestInfo<'_>) -> Option<StoreError> {
    use scylla::statement::Consistency as D;
    match (req.op, err) {
        (
            Operation::Cas,
            DbError::WriteTimeout { received, required, write_type, .. }
            | DbError::WriteFailure { received, required, write_type, .. },
        ) => {
            // Cassandra's commit phase times out as a SIMPLE write (StorageProxy.commitPaxos):
            // the proposal was accepted by a quorum, so it is decided.
            let kind = if *write_type == WriteType::Simple {
                CasTimeoutKind::Commit
            } else {
                CasTimeoutKind::Paxos
            };
            Some(cas_timeout(kind, count(*received), Some(count(*required)), req))
        }
        // The QUORUM read between prepare and propose: nothing of this round was proposed,
        // reported as the embedded store does (a Paxos-phase timeout).
        (Operation::Cas, DbError::ReadTimeout { received, required, .. }) => {
            Some(cas_timeout(CasTimeoutKind::Paxos, count(*received), Some(count(*required)), req))
        }
        (Operation::Cas, DbError::Other(CAS_WRITE_UNKNOWN)) => {
            Some(cas_timeout(CasTimeoutKind::PartiallyAccepted, 0, None, req))
        }
        // Cassandra turns a SERIAL read's Paxos timeout into a read timeout itself; a server
        // that sends it as a write timeout is mapped the same way.
        (
            Operation::SerialRead,
            DbError::ReadTimeout { received, required, .. }
            | DbError::WriteTimeout { received, required, .. },
        ) => Some(StoreError::ReadTimeout {
            consistency: req.consistency,
            received: count(*received),
            required: count(*required),
        }),
        // Too few replicas for the Paxos quorum (the commit's level reports itself as usual).
        (
            Operation::Cas | Operation::SerialRead,
            DbError::Unavailable { consistency: D::Serial | D::LocalSerial, required, alive },
        ) => Some(StoreError::Unavailable {
            consistency: Consistency::Quorum,
            required: count(*required),
            alive: count(*alive),
        }),
        _ => None,
    }
}

/// Map an error the server answered with.
pub fn map_db_error(err: &DbError, message: &str, req: &RequestInfo<'_>) -> StoreError {
    if let Some(mapped) = map_paxos_db_error(err, req) {
        return mapped;
    }
    let c = req.consistency;
    match err {
        DbError::WriteTimeout { received, required, .. } => StoreError::WriteTimeout {
            consistency: c,
            received: count(*received),
            required: count(*required),
        },
        // Some replicas failed, others may have applied the write.
        DbError::WriteFailure { received, required, .. } if req.is_write() => {
            StoreError::WriteTimeout {
                consistency: c,
                received: count(*received),
                required: count(*required),
            }
        }
        DbError::ReadTimeout { received, required, .. } => StoreError::ReadTimeout {
            consistency: c,
            received: count(*received),
            required: count(*required),
        },
        DbError::Unavailable { required, alive, .. } => StoreError::Unavailable {
            consistency: c,
            required: count(*required),
            alive: count(*alive),
        },
        other => req.rejected(format!("the server refused it: {other}: {message}")),
    }
}

fn map_pool_error(err: &ConnectionPoolError, req: &RequestInfo<'_>) -> StoreError {
    match err {
        ConnectionPoolError::Broken { last_connection_error }
            if is_refusal(last_connection_error) =>
        {
            req.rejected(err)
        }
        // A node discovered after the connect (or whose certificate changed) refusing TLS:
        // a configuration to fix, not an outage to wait out.
        ConnectionPoolError::Broken { last_connection_error } => {
            match tls_hint(&last_connection_error.to_string()) {
                Some(hint) => req.rejected(format!("{err}: {hint}")),
                None => req.unreachable(err),
            }
        }
        _ => req.unreachable(err),
    }
}

/// Map the error of preparing a statement.
pub fn map_prepare_error(err: &PrepareError, req: &RequestInfo<'_>) -> StoreError {
    match err {
        PrepareError::ConnectionPoolError(e) => map_pool_error(e, req),
        PrepareError::AllAttemptsFailed { first_attempt } => map_attempt_error(first_attempt, req),
        other => req.rejected(other),
    }
}

/// Map the error of waiting for schema agreement.
pub fn map_schema_agreement_error(err: &SchemaAgreementError, req: &RequestInfo<'_>) -> StoreError {
    match err {
        SchemaAgreementError::ConnectionPoolError(e) => map_pool_error(e, req),
        SchemaAgreementError::RequestError(e) => map_attempt_error(e, req),
        SchemaAgreementError::PrepareError(e) => map_prepare_error(e, req),
        SchemaAgreementError::Timeout(after) => {
            req.rejected(format!("the nodes did not agree on the schema within {after:?}"))
        }
        other => req.rejected(other),
    }
}

fn map_metadata_error(err: &MetadataError, req: &RequestInfo<'_>) -> StoreError {
    match err {
        MetadataError::ConnectionPoolError(e) => map_pool_error(e, req),
        other => req.rejected(other),
    }
}

/// True when a connection failed because the server refused the client (credentials, rights),
/// not because it could not be reached.
pub fn is_refusal(err: &ConnectionError) -> bool {
    match err {
        ConnectionError::ConnectionSetupRequestError(e) => is_refusal_kind(e.get_error()),
        _ => false,
    }
}

/// True for connection-setup failures that are the server refusing the client.
pub fn is_refusal_kind(kind: &ConnectionSetupRequestErrorKind) -> bool {
    match kind {
        ConnectionSetupRequestErrorKind::DbError(db, _) => {
            matches!(
                db,
                DbError::AuthenticationError | DbError::Unauthorized | DbError::ProtocolError
            )
        }
        ConnectionSetupRequestErrorKind::MissingAuthentication
        | ConnectionSetupRequestErrorKind::StartAuthSessionError(_)
        | ConnectionSetupRequestErrorKind::AuthChallengeEvaluationError(_)
        | ConnectionSetupRequestErrorKind::AuthFinishError(_) => true,
        _ => false,
    }
}

/// What connecting tried, for error messages.
pub fn connect_attempt(nodes: &[String], connect_timeout: Duration) -> String {
    format!(
        "tried to open a CQL connection (TCP connect with a {connect_timeout:?} timeout, then the native-protocol handshake and the cluster metadata fetch) to each contact point: {}",
        nodes.join(", ")
    )
}

/// Map the error of building the session (connecting).
pub fn map_connect_error(
    err: &NewSessionError,
    nodes: &[String],
    connect_timeout: Duration,
) -> StoreError {
    let tried = connect_attempt(nodes, connect_timeout);
    if let Some(hint) = tls_hint(&err.to_string()) {
        return StoreError::Rejected(format!("TLS to the cluster failed ({tried}): {err}: {hint}"));
    }
    let refused = match err {
        NewSessionError::EmptyKnownNodesList | NewSessionError::IllegalConfig(_) => true,
        NewSessionError::MetadataError(MetadataError::ConnectionPoolError(
            ConnectionPoolError::Broken { last_connection_error },
        )) => is_refusal(last_connection_error),
        NewSessionError::MetadataError(MetadataError::ConnectionPoolError(_)) => false,
        NewSessionError::MetadataError(MetadataError::FetchError(_)) => false,
        NewSessionError::MetadataError(_) => true,
        NewSessionError::FailedToResolveAnyHostname(_) => false,
        _ => true,
    };
    if refused {
        StoreError::Rejected(format!("the cluster refused the connection ({tried}): {err}"))
    } else {
        StoreError::Unreachable(format!("could not connect to the cluster ({tried}): {err}"))
    }
}

/// What rustls's words in `said` (a driver's or a probe's error text) mean, when they are a
/// refused TLS handshake or a peer that does not speak TLS; `None` for anything else (an
/// outage, a timeout, a server's CQL error).
pub fn tls_hint(said: &str) -> Option<&'static str> {
    let has = |words: &[&str]| words.iter().any(|w| said.contains(w));
    Some(if has(&["invalid peer certificate: UnknownIssuer", "BadSignature"]) {
        "the node's certificate is not signed by the CA the client trusts (the CA file of \
         CassandraConfig::tls, LOCK_CASSANDRA_CA)"
    } else if has(&["certificate not valid for name", "NotValidForName"]) {
        "the node's certificate does not name the IP address the client dialed: the driver \
         checks every node's certificate against its IP address (also for a contact point \
         given by host name, and for the nodes it discovers), so each node's certificate needs \
         its IP address as a subjectAltName (an IP SAN)"
    } else if has(&["Expired", "expired", "NotValidYet", "not valid yet"]) {
        "the node's certificate is not valid now (expired, or not valid yet)"
    } else if has(&["invalid peer certificate"]) {
        "the client refused the node's certificate"
    } else if has(&["received fatal alert: CertificateRequired"]) {
        "the node requires a client certificate (client_encryption_options: \
         require_client_auth): give CassandraConfig::tls a certificate and key \
         (TlsFiles::with_identity, LOCK_CASSANDRA_CERT and LOCK_CASSANDRA_KEY)"
    } else if has(&[
        "received fatal alert: BadCertificate",
        "received fatal alert: UnknownCA",
        "received fatal alert: CertificateUnknown",
        "received fatal alert: DecryptError",
        "received fatal alert: AccessDenied",
    ]) {
        "the node refused the client's certificate (not signed by a CA in the node's \
         truststore, or none given where the node requires one)"
    } else if has(&["received fatal alert: HandshakeFailure"]) {
        "the node ended the handshake: no TLS version or cipher suite in common, or a client \
         certificate it requires and did not get"
    } else if has(&["received fatal alert"]) {
        "the node ended the TLS handshake"
    } else if has(&["received corrupt message", "peer is incompatible", "peer misbehaved"]) {
        "the node did not answer in TLS: a plain CQL port (use the node's TLS port, e.g. \
         ScyllaDB's native_transport_port_ssl, or leave CassandraConfig::tls unset)"
    } else if has(&["tls handshake eof"]) {
        "the node closed the connection during the TLS handshake: a plain CQL port closes a \
         connection whose first bytes are no CQL frame (use the node's TLS port, or leave \
         CassandraConfig::tls unset)"
    } else {
        return None;
    })
}

/// Whether `said` (a driver's error text) is a connection the peer closed or reset: what a
/// TLS-only port does to a plain client's first bytes.
pub fn closed_connection(said: &str) -> bool {
    let said = said.to_ascii_lowercase();
    [
        "reset by peer",
        "broken pipe",
        "connection closed",
        "end of file",
        "unexpected eof",
        "early eof",
    ]
    .iter()
    .any(|w| said.contains(w))
}

/// The error of a connect that did not finish within `deadline`.
pub fn connect_timed_out(
    nodes: &[String],
    connect_timeout: Duration,
    deadline: Duration,
) -> StoreError {
    StoreError::Unreachable(format!(
        "could not connect to the cluster within {deadline:?} ({})",
        connect_attempt(nodes, connect_timeout)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use scylla::errors::BrokenConnectionErrorKind;
    use scylla::statement::Consistency as D;
    use std::sync::Arc;

    fn nodes() -> Vec<String> {
        vec!["10.0.0.1:9042".into(), "10.0.0.2:9042".into()]
    }

    fn req(op: Operation, nodes: &[String]) -> RequestInfo<'_> {
        let serial = matches!(op, Operation::Cas | Operation::SerialRead)
            .then_some(SerialConsistency::Serial);
        RequestInfo {
            op,
            table: "queue_lock_main",
            consistency: Consistency::Quorum,
            serial,
            replicas: 3,
            nodes,
        }
    }

    fn db(e: DbError) -> ExecutionError {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(e, "server says so".into()))
    }

    fn refused_io() -> ConnectionError {
        ConnectionError::IoError(Arc::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )))
    }

    #[test]
    fn write_timeout_may_have_applied() {
        let n = nodes();
        let e = db(DbError::WriteTimeout {
            consistency: D::Quorum,
            received: 1,
            required: 2,
            write_type: WriteType::Simple,
        });
        let mapped = map_execution_error(&e, &req(Operation::Write, &n));
        assert_eq!(
            mapped,
            StoreError::WriteTimeout { consistency: Consistency::Quorum, received: 1, required: 2 }
        );
        assert!(mapped.may_have_applied());
        let e = db(DbError::WriteTimeout {
            consistency: D::Quorum,
            received: 0,
            required: 2,
            write_type: WriteType::UnloggedBatch,
        });
        assert!(map_execution_error(&e, &req(Operation::Delete, &n)).may_have_applied());
    }

    #[test]
    fn write_failure_of_a_write_may_have_applied() {
        let n = nodes();
        let e = db(DbError::WriteFailure {
            consistency: D::Quorum,
            received: 1,
            required: 2,
            numfailures: 1,
            write_type: WriteType::Simple,
        });
        assert_eq!(
            map_execution_error(&e, &req(Operation::Write, &n)),
            StoreError::WriteTimeout { consistency: Consistency::Quorum, received: 1, required: 2 }
        );
    }

    #[test]
    fn read_timeout_is_a_read_timeout() {
        let n = nodes();
        let e = db(DbError::ReadTimeout {
            consistency: D::Quorum,
            received: 1,
            required: 2,
            data_present: false,
        });
        assert_eq!(
            map_execution_error(&e, &req(Operation::Read, &n)),
            StoreError::ReadTimeout { consistency: Consistency::Quorum, received: 1, required: 2 }
        );
    }

    #[test]
    fn unavailable_was_not_applied_and_says_required_and_alive() {
        let n = nodes();
        let e = db(DbError::Unavailable { consistency: D::Quorum, required: 2, alive: 1 });
        let mapped = map_execution_error(&e, &req(Operation::Write, &n));
        assert_eq!(
            mapped,
            StoreError::Unavailable { consistency: Consistency::Quorum, required: 2, alive: 1 }
        );
        assert!(!mapped.may_have_applied());
        assert_eq!(mapped.to_string(), "unavailable: 2 replicas required at QUORUM, 1 alive");
    }

    #[test]
    fn client_side_timeouts_depend_on_the_operation() {
        let n = nodes();
        let e = ExecutionError::RequestTimeout(Duration::from_secs(5));
        let write = map_execution_error(&e, &req(Operation::Write, &n));
        assert_eq!(
            write,
            StoreError::WriteTimeout { consistency: Consistency::Quorum, received: 0, required: 2 }
        );
        assert!(write.may_have_applied());
        assert_eq!(
            map_execution_error(&e, &req(Operation::Delete, &n)),
            StoreError::WriteTimeout { consistency: Consistency::Quorum, received: 0, required: 2 }
        );
        assert_eq!(
            map_execution_error(&e, &req(Operation::Read, &n)),
            StoreError::ReadTimeout { consistency: Consistency::Quorum, received: 0, required: 2 }
        );
        assert!(
            matches!(map_execution_error(&e, &req(Operation::Schema, &n)), StoreError::Rejected(m) if m.contains("5s"))
        );
        let all = RequestInfo { consistency: Consistency::All, ..req(Operation::Read, &n) };
        assert_eq!(
            map_execution_error(&e, &all),
            StoreError::ReadTimeout { consistency: Consistency::All, received: 0, required: 3 }
        );
    }

    #[test]
    fn refusals_are_rejected_with_the_server_message() {
        let n = nodes();
        for e in [
            DbError::SyntaxError,
            DbError::Invalid,
            DbError::Unauthorized,
            DbError::ConfigError,
            DbError::Overloaded,
            DbError::IsBootstrapping,
            DbError::ServerError,
            DbError::ReadFailure {
                consistency: D::Quorum,
                received: 0,
                required: 2,
                numfailures: 1,
                data_present: false,
            },
        ] {
            let mapped = map_execution_error(&db(e.clone()), &req(Operation::Read, &n));
            match &mapped {
                StoreError::Rejected(m) => {
                    assert!(m.contains("server says so"), "{m}");
                    assert!(m.contains("read on table 'queue_lock_main' at QUORUM"), "{m}");
                }
                other => panic!("{e:?} mapped to {other:?}"),
            }
            assert!(!mapped.may_have_applied());
        }
    }

    #[test]
    fn connection_failures_are_unreachable_and_name_the_nodes() {
        let n = nodes();
        let broken = ExecutionError::LastAttemptError(RequestAttemptError::BrokenConnectionError(
            BrokenConnectionErrorKind::ChannelError.into(),
        ));
        let pool = ExecutionError::ConnectionPoolError(ConnectionPoolError::Broken {
            last_connection_error: refused_io(),
        });
        for e in [
            broken,
            pool,
            ExecutionError::EmptyPlan,
            ExecutionError::LastAttemptError(RequestAttemptError::UnableToAllocStreamId),
        ] {
            match map_execution_error(&e, &req(Operation::Write, &n)) {
                StoreError::Unreachable(m) => {
                    assert!(m.contains("10.0.0.1:9042, 10.0.0.2:9042"), "{m}");
                    assert!(m.contains("write on table 'queue_lock_main'"), "{m}");
                }
                other => panic!("{e:?} mapped to {other:?}"),
            }
        }
    }

    #[test]
    fn prepare_and_schema_errors_map_through_their_cause() {
        let n = nodes();
        let r = req(Operation::Schema, &n);
        let pool = PrepareError::ConnectionPoolError(ConnectionPoolError::Broken {
            last_connection_error: refused_io(),
        });
        assert!(matches!(map_prepare_error(&pool, &r), StoreError::Unreachable(_)));
        let syntax = PrepareError::AllAttemptsFailed {
            first_attempt: RequestAttemptError::DbError(
                DbError::SyntaxError,
                "line 1:0 no viable alternative".into(),
            ),
        };
        assert!(
            matches!(map_prepare_error(&syntax, &r), StoreError::Rejected(m) if m.contains("no viable alternative"))
        );
        let timeout = SchemaAgreementError::Timeout(Duration::from_secs(30));
        assert!(
            matches!(map_schema_agreement_error(&timeout, &r), StoreError::Rejected(m) if m.contains("schema"))
        );
        let wrapped = ExecutionError::SchemaAgreementError(timeout);
        assert!(matches!(map_execution_error(&wrapped, &r), StoreError::Rejected(_)));
    }

    #[test]
    fn connect_failures_say_what_was_tried() {
        let n = nodes();
        let e = NewSessionError::MetadataError(MetadataError::ConnectionPoolError(
            ConnectionPoolError::Broken { last_connection_error: refused_io() },
        ));
        match map_connect_error(&e, &n, Duration::from_secs(5)) {
            StoreError::Unreachable(m) => {
                assert!(m.contains("10.0.0.1:9042, 10.0.0.2:9042"), "{m}");
                assert!(m.contains("5s timeout"), "{m}");
                assert!(m.to_lowercase().contains("refused"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        let dns = NewSessionError::FailedToResolveAnyHostname(vec!["nowhere.invalid:9042".into()]);
        assert!(
            matches!(map_connect_error(&dns, &n, Duration::from_secs(5)), StoreError::Unreachable(m) if m.contains("nowhere.invalid"))
        );
        assert!(matches!(
            map_connect_error(&NewSessionError::EmptyKnownNodesList, &n, Duration::from_secs(5)),
            StoreError::Rejected(_)
        ));
        match connect_timed_out(&n, Duration::from_secs(5), Duration::from_secs(10)) {
            StoreError::Unreachable(m) => {
                assert!(m.contains("within 10s") && m.contains("10.0.0.2:9042"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn authentication_failures_are_refusals_not_unreachability() {
        assert!(is_refusal_kind(&ConnectionSetupRequestErrorKind::MissingAuthentication));
        assert!(is_refusal_kind(&ConnectionSetupRequestErrorKind::DbError(
            DbError::AuthenticationError,
            "bad".into()
        )));
        assert!(!is_refusal_kind(&ConnectionSetupRequestErrorKind::UnableToAllocStreamId));
        assert!(!is_refusal(&refused_io()));
        assert!(!is_refusal(&ConnectionError::ConnectTimeout));
    }

    /// A connection the driver lost to rustls's `refusal`, as its pool reports it.
    fn tls_broken(refusal: rustls::Error) -> ConnectionPoolError {
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, refusal);
        ConnectionPoolError::Broken {
            last_connection_error: ConnectionError::IoError(Arc::new(io)),
        }
    }

    #[test]
    fn tls_refusals_are_put_in_words() {
        let hint = |said: &str| tls_hint(said).unwrap_or_else(|| panic!("no hint for {said}"));
        assert!(hint("invalid peer certificate: UnknownIssuer").contains("not signed by the CA"));
        let name = "invalid peer certificate: certificate not valid for name \"10.0.0.1\"";
        assert!(hint(name).contains("IP SAN"));
        assert!(hint("received fatal alert: CertificateRequired").contains("requires a client"));
        assert!(hint("received fatal alert: BadCertificate").contains("refused the client's"));
        assert!(hint("received corrupt message of type InvalidContentType").contains("plain CQL"));
        assert!(hint("tls handshake eof").contains("closed the connection"));
        assert_eq!(tls_hint("Connection refused (os error 111)"), None);
        assert_eq!(tls_hint("Database returned an error: Bad credentials"), None);
        assert!(closed_connection("Failed to read the frame header: early eof"));
        assert!(!closed_connection("Connection refused (os error 111)"));
    }

    #[test]
    fn a_tls_refusal_is_rejected_at_connect_and_at_a_request_never_unreachable() {
        use rustls::CertificateError::UnknownIssuer;
        let n = nodes();
        let refused = tls_broken(rustls::Error::InvalidCertificate(UnknownIssuer));
        let e = NewSessionError::MetadataError(MetadataError::ConnectionPoolError(refused.clone()));
        match map_connect_error(&e, &n, Duration::from_secs(5)) {
            StoreError::Rejected(m) => {
                assert!(m.starts_with("TLS to the cluster failed"), "{m}");
                assert!(m.contains("UnknownIssuer") && m.contains("not signed by the CA"), "{m}");
                assert!(m.contains("10.0.0.1:9042, 10.0.0.2:9042"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        let request = ExecutionError::ConnectionPoolError(refused);
        match map_execution_error(&request, &req(Operation::Write, &n)) {
            StoreError::Rejected(m) => assert!(m.contains("not signed by the CA"), "{m}"),
            other => panic!("{other:?}"),
        }
        // An alert after the handshake (TLS 1.3 tells a refused client certificate only then).
        let alert =
            tls_broken(rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired));
        let request = ExecutionError::ConnectionPoolError(alert);
        match map_execution_error(&request, &req(Operation::Read, &n)) {
            StoreError::Rejected(m) => assert!(m.contains("requires a client certificate"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    fn write_timeout(write_type: WriteType, received: i32) -> ExecutionError {
        db(DbError::WriteTimeout { consistency: D::Serial, received, required: 2, write_type })
    }

    #[test]
    fn a_cas_timed_out_in_paxos_is_a_cas_timeout_that_may_have_applied() {
        let n = nodes();
        let cas = req(Operation::Cas, &n);
        let mapped = map_execution_error(&write_timeout(WriteType::Cas, 1), &cas);
        assert_eq!(
            mapped,
            StoreError::CasTimeout {
                kind: CasTimeoutKind::Paxos,
                received: 1,
                required: 2,
                contentions: 0
            }
        );
        assert!(mapped.may_have_applied());
        // A write failure of a Paxos phase says no more than a timeout.
        let failure = db(DbError::WriteFailure {
            consistency: D::Serial,
            received: 0,
            required: 2,
            numfailures: 2,
            write_type: WriteType::Cas,
        });
        assert!(matches!(
            map_execution_error(&failure, &cas),
            StoreError::CasTimeout { kind: CasTimeoutKind::Paxos, .. }
        ));
        // The read phase timing out: reported as a Paxos-phase timeout, as the embedded store does.
        let read = db(DbError::ReadTimeout {
            consistency: D::Quorum,
            received: 1,
            required: 2,
            data_present: false,
        });
        assert_eq!(
            map_execution_error(&read, &cas),
            StoreError::CasTimeout {
                kind: CasTimeoutKind::Paxos,
                received: 1,
                required: 2,
                contentions: 0
            }
        );
        // Another write type than SIMPLE on a conditional statement: nothing says it was decided.
        let batch = map_execution_error(&write_timeout(WriteType::BatchLog, 0), &cas);
        assert!(
            matches!(batch, StoreError::CasTimeout { kind: CasTimeoutKind::Paxos, .. }),
            "{batch:?}"
        );
    }

    #[test]
    fn a_cas_timed_out_in_its_commit_is_decided() {
        let n = nodes();
        let e = db(DbError::WriteTimeout {
            consistency: D::Quorum,
            received: 1,
            required: 2,
            write_type: WriteType::Simple,
        });
        let mapped = map_execution_error(&e, &req(Operation::Cas, &n));
        assert_eq!(
            mapped,
            StoreError::CasTimeout {
                kind: CasTimeoutKind::Commit,
                received: 1,
                required: 2,
                contentions: 0
            }
        );
        // The same answer to a plain write stays a write timeout.
        assert!(matches!(
            map_execution_error(&e, &req(Operation::Write, &n)),
            StoreError::WriteTimeout { .. }
        ));
    }

    #[test]
    fn cas_write_unknown_is_partially_accepted() {
        let n = nodes();
        let e = db(DbError::Other(CAS_WRITE_UNKNOWN));
        assert_eq!(
            map_execution_error(&e, &req(Operation::Cas, &n)),
            StoreError::CasTimeout {
                kind: CasTimeoutKind::PartiallyAccepted,
                received: 0,
                required: 2,
                contentions: 0
            }
        );
        // Another unknown code is a refusal.
        assert!(matches!(
            map_execution_error(&db(DbError::Other(0x1234)), &req(Operation::Cas, &n)),
            StoreError::Rejected(_)
        ));
    }

    #[test]
    fn a_cas_the_client_stopped_waiting_for_is_a_paxos_timeout_of_nothing_heard() {
        let n = nodes();
        let e = ExecutionError::RequestTimeout(Duration::from_secs(5));
        assert_eq!(
            map_execution_error(&e, &req(Operation::Cas, &n)),
            StoreError::CasTimeout {
                kind: CasTimeoutKind::Paxos,
                received: 0,
                required: 2,
                contentions: 0
            }
        );
        // Five replicas: the Paxos quorum is three, whatever the commit consistency.
        let five =
            RequestInfo { replicas: 5, consistency: Consistency::One, ..req(Operation::Cas, &n) };
        assert!(matches!(
            map_execution_error(&e, &five),
            StoreError::CasTimeout { required: 3, .. }
        ));
    }

    #[test]
    fn a_serial_read_times_out_as_a_read() {
        let n = nodes();
        let serial = req(Operation::SerialRead, &n);
        let expected =
            StoreError::ReadTimeout { consistency: Consistency::Quorum, received: 0, required: 2 };
        let server = db(DbError::ReadTimeout {
            consistency: D::Serial,
            received: 0,
            required: 2,
            data_present: false,
        });
        assert_eq!(map_execution_error(&server, &serial), expected);
        assert_eq!(map_execution_error(&write_timeout(WriteType::Cas, 0), &serial), expected);
        assert_eq!(
            map_execution_error(&ExecutionError::RequestTimeout(Duration::from_secs(5)), &serial),
            expected
        );
    }

    #[test]
    fn a_paxos_quorum_unavailable_is_unavailable_at_quorum() {
        let n = nodes();
        for op in [Operation::Cas, Operation::SerialRead] {
            let e = db(DbError::Unavailable { consistency: D::Serial, required: 2, alive: 1 });
            let mapped = map_execution_error(&e, &req(op, &n));
            assert_eq!(
                mapped,
                StoreError::Unavailable { consistency: Consistency::Quorum, required: 2, alive: 1 }
            );
            assert!(!mapped.may_have_applied());
        }
        // The commit's level unavailable: reported at the commit consistency.
        let all = RequestInfo { consistency: Consistency::All, ..req(Operation::Cas, &n) };
        let e = db(DbError::Unavailable { consistency: D::All, required: 3, alive: 2 });
        assert_eq!(
            map_execution_error(&e, &all),
            StoreError::Unavailable { consistency: Consistency::All, required: 3, alive: 2 }
        );
    }

    #[test]
    fn cas_refusals_name_the_serial_and_commit_levels() {
        let n = nodes();
        match map_execution_error(&db(DbError::Invalid), &req(Operation::Cas, &n)) {
            StoreError::Rejected(m) => assert!(
                m.contains(
                    "compare-and-set on table 'queue_lock_main' at SERIAL (commit at QUORUM)"
                ),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        let local = RequestInfo {
            serial: Some(SerialConsistency::LocalSerial),
            ..req(Operation::SerialRead, &n)
        };
        match map_execution_error(&db(DbError::Invalid), &local) {
            StoreError::Rejected(m) => {
                assert!(m.contains("serial read on table 'queue_lock_main' at LOCAL_SERIAL"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
}
