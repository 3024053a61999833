//! The driver's session: its settings from a [`CassandraConfig`], and connecting within the
//! configured deadline.

use crate::{cql, errors, tls, CassandraConfig};
use lock_core::store::{Consistency, StoreError};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;

/// The driver's session settings of `config`, TLS aside.
pub(crate) fn session_builder(config: &CassandraConfig) -> SessionBuilder {
    let local = config.local_datacenter.is_some();
    let profile = ExecutionProfile::builder()
        .request_timeout(Some(config.request_timeout))
        .consistency(cql::driver_consistency(Consistency::Quorum, local))
        .build();
    let mut builder = SessionBuilder::new()
        .known_nodes(&config.nodes)
        .connection_timeout(config.connect_timeout)
        .hostname_resolution_timeout(Some(config.connect_timeout))
        .default_execution_profile_handle(profile.into_handle())
        .schema_agreement_timeout(config.schema_agreement_timeout)
        .keyspaces_to_fetch([config.keyspace.clone()]);
    if let Some(dc) = &config.local_datacenter {
        builder = builder.prefer_datacenter(dc.clone());
    }
    if let Some((user, password)) = &config.credentials {
        builder = builder.user(user, password);
    }
    builder
}

/// Build the session within [`CassandraConfig::connect_deadline`]. A plain client whose
/// connections were closed learns whether the nodes speak TLS there.
pub(crate) async fn open_session(
    config: &CassandraConfig,
    builder: SessionBuilder,
) -> Result<Session, StoreError> {
    let deadline = config.connect_deadline();
    match tokio::time::timeout(deadline, builder.build()).await {
        Err(_) => Err(errors::connect_timed_out(&config.nodes, config.connect_timeout, deadline)),
        Ok(Err(e)) => {
            if config.tls.is_none() {
                if let Some(why) = tls::plain_at_tls_port(&config.nodes, &e.to_string()).await {
                    return Err(StoreError::Rejected(why));
                }
            }
            Err(errors::map_connect_error(&e, &config.nodes, config.connect_timeout))
        }
        Ok(Ok(session)) => Ok(session),
    }
}
