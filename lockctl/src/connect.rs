//! From the command line's [`Connect`] to the client's endpoints and [`ClientConfig`].

use crate::cli::Connect;
use crate::exit::CtlError;
use lock_core::secret::{Credentials, Secret};
use lock_core::tls::TlsFiles;
use lock_service::client::{ClientConfig, ServiceAdmin, ServiceClient};
use std::time::Duration;

/// The variable the token of `--service-user` is read from.
pub const TOKEN_VAR: &str = "LOCK_SERVICE_TOKEN";
/// The benchmark harness's name for the endpoints, read when `LOCK_SERVICE` is not set.
pub const HARNESS_ENDPOINTS_VAR: &str = "LOCK_SERVICE_ENDPOINTS";

/// The nodes to dial: `--service`, `LOCK_SERVICE` or `LOCK_SERVICE_ENDPOINTS`.
pub fn endpoints(c: &Connect) -> Result<Vec<String>, CtlError> {
    let list = match &c.service {
        Some(s) => s.clone(),
        None => std::env::var(HARNESS_ENDPOINTS_VAR).map_err(|_| {
            CtlError::Usage(
                "name the service's nodes with --service HOST:PORT,... or LOCK_SERVICE".into(),
            )
        })?,
    };
    let endpoints = ServiceClient::parse_endpoints(&list);
    if endpoints.is_empty() {
        return Err(CtlError::Usage(format!("--service {list:?} names no node")));
    }
    for e in &endpoints {
        if !e.contains(':') {
            return Err(CtlError::Usage(format!("--service: {e:?} is not HOST:PORT")));
        }
    }
    Ok(endpoints)
}

/// The client's configuration: TLS, credentials and timeouts from the command line, the
/// session's TTL as given.
pub fn config(c: &Connect, ttl: Duration) -> Result<ClientConfig, CtlError> {
    let credentials = match &c.service_user {
        None => {
            if c.service_token_file.is_some() {
                return Err(CtlError::Usage("--service-token-file needs --service-user".into()));
            }
            None
        }
        Some(user) => {
            let token = match &c.service_token_file {
                Some(path) => Secret::from_file(path).map_err(CtlError::Usage)?,
                None => Secret::from_env(TOKEN_VAR).map_err(CtlError::Usage)?.ok_or_else(|| {
                    CtlError::Usage(format!(
                        "--service-user {user}: give its token in {TOKEN_VAR} or a file named \
                         by --service-token-file"
                    ))
                })?,
            };
            Some(Credentials::new(user.clone(), token))
        }
    };
    let tls = match &c.service_ca {
        Some(ca) => {
            let files = TlsFiles::trusting(ca);
            files.check().map_err(|e| CtlError::Usage(format!("--service-ca: {e}")))?;
            Some(files)
        }
        None => None,
    };
    Ok(ClientConfig {
        ttl,
        request_timeout: c.request_timeout,
        connect_timeout: Duration::from_secs(2).min(c.request_timeout),
        credentials,
        tls,
        ..ClientConfig::default()
    })
}

/// An administration client for the service the command line names.
pub fn admin(c: &Connect) -> Result<ServiceAdmin, CtlError> {
    let config = config(c, ClientConfig::default().ttl)?;
    ServiceAdmin::new(&endpoints(c)?, config).map_err(|e| CtlError::service("lock service", e))
}
