//! The driver's errors, mapped onto [`StoreError`]: pure functions over the driver's types.
//!
//! | driver error | `StoreError` | applied? |
//! |---|---|---|
//! | `DbError::WriteTimeout`, `DbError::WriteFailure` | [`StoreError::WriteTimeout`] (server's received / required) | maybe |
//! | client-side request timeout of a write or delete | [`StoreError::WriteTimeout`] (0 of required) | maybe |
//! | `DbError::ReadTimeout`, client-side timeout of a read | [`StoreError::ReadTimeout`] | — |
//! | `DbError::Unavailable` | [`StoreError::Unavailable`] (required / alive) | no |
//! | broken connection, no connection in any pool, empty query plan, connect failures | [`StoreError::Unreachable`], naming the contact points | maybe |
//! | syntax error, invalid, unauthorized, bad credentials, config error, overloaded, bootstrapping, rate limit, read failure, server error, serialization, protocol | [`StoreError::Rejected`], with the driver's message | no |
//!
//! "maybe" means [`StoreError::may_have_applied`] is true: the algorithms treat such a write
//! as possibly landed and delete the cell again.

use lock_core::store::{Consistency, StoreError};
use scylla::errors::{
    ConnectionError, ConnectionPoolError, ConnectionSetupRequestErrorKind, DbError, ExecutionError, MetadataError,
    NewSessionError, PrepareError, RequestAttemptError, SchemaAgreementError,
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
    /// Creating the keyspace or a table, preparing statements, waiting for schema agreement.
    Schema,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Write => "write",
            Operation::Delete => "delete",
            Operation::Read => "read",
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
    /// At which consistency.
    pub consistency: Consistency,
    /// Replicas a quorum is a majority of, for the "required" of a client-side timeout.
    pub replicas: usize,
    /// The contact points, named in `Unreachable` messages.
    pub nodes: &'a [String],
}

impl RequestInfo<'_> {
    fn what(&self) -> String {
        format!("{} on table '{}' at {}", self.op, self.table, self.consistency)
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

/// Map the error of executing a statement.
pub fn map_execution_error(err: &ExecutionError, req: &RequestInfo<'_>) -> StoreError {
    match err {
        ExecutionError::LastAttemptError(e) => map_attempt_error(e, req),
        ExecutionError::RequestTimeout(after) => client_timeout(*after, req),
        ExecutionError::ConnectionPoolError(e) => map_pool_error(e, req),
        ExecutionError::EmptyPlan => req.unreachable("the load balancing policy found no node to send the request to"),
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
        Operation::Write | Operation::Delete => StoreError::WriteTimeout { consistency: req.consistency, received: 0, required },
        Operation::Read => StoreError::ReadTimeout { consistency: req.consistency, received: 0, required },
        Operation::Schema => req.rejected(format!("no answer within the client-side timeout of {after:?}")),
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

/// Map an error the server answered with.
pub fn map_db_error(err: &DbError, message: &str, req: &RequestInfo<'_>) -> StoreError {
    let c = req.consistency;
    match err {
        DbError::WriteTimeout { received, required, .. } => {
            StoreError::WriteTimeout { consistency: c, received: count(*received), required: count(*required) }
        }
        // Some replicas failed, others may have applied the write.
        DbError::WriteFailure { received, required, .. } if req.is_write() => {
            StoreError::WriteTimeout { consistency: c, received: count(*received), required: count(*required) }
        }
        DbError::ReadTimeout { received, required, .. } => {
            StoreError::ReadTimeout { consistency: c, received: count(*received), required: count(*required) }
        }
        DbError::Unavailable { required, alive, .. } => {
            StoreError::Unavailable { consistency: c, required: count(*required), alive: count(*alive) }
        }
        other => req.rejected(format!("the server refused it: {other}: {message}")),
    }
}

fn map_pool_error(err: &ConnectionPoolError, req: &RequestInfo<'_>) -> StoreError {
    match err {
        ConnectionPoolError::Broken { last_connection_error } if is_refusal(last_connection_error) => {
            req.rejected(err)
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
            matches!(db, DbError::AuthenticationError | DbError::Unauthorized | DbError::ProtocolError)
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
pub fn map_connect_error(err: &NewSessionError, nodes: &[String], connect_timeout: Duration) -> StoreError {
    let tried = connect_attempt(nodes, connect_timeout);
    let refused = match err {
        NewSessionError::EmptyKnownNodesList | NewSessionError::IllegalConfig(_) => true,
        NewSessionError::MetadataError(MetadataError::ConnectionPoolError(ConnectionPoolError::Broken {
            last_connection_error,
        })) => is_refusal(last_connection_error),
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

/// The error of a connect that did not finish within `deadline`.
pub fn connect_timed_out(nodes: &[String], connect_timeout: Duration, deadline: Duration) -> StoreError {
    StoreError::Unreachable(format!(
        "could not connect to the cluster within {deadline:?} ({})",
        connect_attempt(nodes, connect_timeout)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use scylla::errors::{BrokenConnectionErrorKind, WriteType};
    use scylla::statement::Consistency as D;
    use std::sync::Arc;

    fn nodes() -> Vec<String> {
        vec!["10.0.0.1:9042".into(), "10.0.0.2:9042".into()]
    }

    fn req(op: Operation, nodes: &[String]) -> RequestInfo<'_> {
        RequestInfo { op, table: "queue_lock_main", consistency: Consistency::Quorum, replicas: 3, nodes }
    }

    fn db(e: DbError) -> ExecutionError {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(e, "server says so".into()))
    }

    fn refused_io() -> ConnectionError {
        ConnectionError::IoError(Arc::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)))
    }

    #[test]
    fn write_timeout_may_have_applied() {
        let n = nodes();
        let e = db(DbError::WriteTimeout { consistency: D::Quorum, received: 1, required: 2, write_type: WriteType::Simple });
        let mapped = map_execution_error(&e, &req(Operation::Write, &n));
        assert_eq!(mapped, StoreError::WriteTimeout { consistency: Consistency::Quorum, received: 1, required: 2 });
        assert!(mapped.may_have_applied());
        let e = db(DbError::WriteTimeout { consistency: D::Quorum, received: 0, required: 2, write_type: WriteType::UnloggedBatch });
        assert!(map_execution_error(&e, &req(Operation::Delete, &n)).may_have_applied());
    }

    #[test]
    fn write_failure_of_a_write_may_have_applied() {
        let n = nodes();
        let e = db(DbError::WriteFailure { consistency: D::Quorum, received: 1, required: 2, numfailures: 1, write_type: WriteType::Simple });
        assert_eq!(
            map_execution_error(&e, &req(Operation::Write, &n)),
            StoreError::WriteTimeout { consistency: Consistency::Quorum, received: 1, required: 2 }
        );
    }

    #[test]
    fn read_timeout_is_a_read_timeout() {
        let n = nodes();
        let e = db(DbError::ReadTimeout { consistency: D::Quorum, received: 1, required: 2, data_present: false });
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
        assert_eq!(mapped, StoreError::Unavailable { consistency: Consistency::Quorum, required: 2, alive: 1 });
        assert!(!mapped.may_have_applied());
        assert_eq!(mapped.to_string(), "unavailable: 2 replicas required at QUORUM, 1 alive");
    }

    #[test]
    fn client_side_timeouts_depend_on_the_operation() {
        let n = nodes();
        let e = ExecutionError::RequestTimeout(Duration::from_secs(5));
        let write = map_execution_error(&e, &req(Operation::Write, &n));
        assert_eq!(write, StoreError::WriteTimeout { consistency: Consistency::Quorum, received: 0, required: 2 });
        assert!(write.may_have_applied());
        assert_eq!(
            map_execution_error(&e, &req(Operation::Delete, &n)),
            StoreError::WriteTimeout { consistency: Consistency::Quorum, received: 0, required: 2 }
        );
        assert_eq!(
            map_execution_error(&e, &req(Operation::Read, &n)),
            StoreError::ReadTimeout { consistency: Consistency::Quorum, received: 0, required: 2 }
        );
        assert!(matches!(map_execution_error(&e, &req(Operation::Schema, &n)), StoreError::Rejected(m) if m.contains("5s")));
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
            DbError::ReadFailure { consistency: D::Quorum, received: 0, required: 2, numfailures: 1, data_present: false },
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
        let pool = ExecutionError::ConnectionPoolError(ConnectionPoolError::Broken { last_connection_error: refused_io() });
        for e in [broken, pool, ExecutionError::EmptyPlan, ExecutionError::LastAttemptError(RequestAttemptError::UnableToAllocStreamId)] {
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
        let pool = PrepareError::ConnectionPoolError(ConnectionPoolError::Broken { last_connection_error: refused_io() });
        assert!(matches!(map_prepare_error(&pool, &r), StoreError::Unreachable(_)));
        let syntax = PrepareError::AllAttemptsFailed {
            first_attempt: RequestAttemptError::DbError(DbError::SyntaxError, "line 1:0 no viable alternative".into()),
        };
        assert!(matches!(map_prepare_error(&syntax, &r), StoreError::Rejected(m) if m.contains("no viable alternative")));
        let timeout = SchemaAgreementError::Timeout(Duration::from_secs(30));
        assert!(matches!(map_schema_agreement_error(&timeout, &r), StoreError::Rejected(m) if m.contains("schema")));
        let wrapped = ExecutionError::SchemaAgreementError(timeout);
        assert!(matches!(map_execution_error(&wrapped, &r), StoreError::Rejected(_)));
    }

    #[test]
    fn connect_failures_say_what_was_tried() {
        let n = nodes();
        let e = NewSessionError::MetadataError(MetadataError::ConnectionPoolError(ConnectionPoolError::Broken {
            last_connection_error: refused_io(),
        }));
        match map_connect_error(&e, &n, Duration::from_secs(5)) {
            StoreError::Unreachable(m) => {
                assert!(m.contains("10.0.0.1:9042, 10.0.0.2:9042"), "{m}");
                assert!(m.contains("5s timeout"), "{m}");
                assert!(m.to_lowercase().contains("refused"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        let dns = NewSessionError::FailedToResolveAnyHostname(vec!["nowhere.invalid:9042".into()]);
        assert!(matches!(map_connect_error(&dns, &n, Duration::from_secs(5)), StoreError::Unreachable(m) if m.contains("nowhere.invalid")));
        assert!(matches!(
            map_connect_error(&NewSessionError::EmptyKnownNodesList, &n, Duration::from_secs(5)),
            StoreError::Rejected(_)
        ));
        match connect_timed_out(&n, Duration::from_secs(5), Duration::from_secs(10)) {
            StoreError::Unreachable(m) => assert!(m.contains("within 10s") && m.contains("10.0.0.2:9042"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn authentication_failures_are_refusals_not_unreachability() {
        assert!(is_refusal_kind(&ConnectionSetupRequestErrorKind::MissingAuthentication));
        assert!(is_refusal_kind(&ConnectionSetupRequestErrorKind::DbError(DbError::AuthenticationError, "bad".into())));
        assert!(!is_refusal_kind(&ConnectionSetupRequestErrorKind::UnableToAllocStreamId));
        assert!(!is_refusal(&refused_io()));
        assert!(!is_refusal(&ConnectionError::ConnectTimeout));
    }
}
