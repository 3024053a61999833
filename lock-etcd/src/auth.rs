//! Who the backend is to etcd, and how each request goes out: the user and password of
//! [`EtcdConfig::credentials`], the token they buy, the check at connect that this identity
//! may use the lock root, and every request counted, bounded and, when etcd refuses its token,
//! sent once more with a fresh one.
//!
//! etcd's `Authenticate` trades a user and password for a token that `etcd-client` adds to
//! every key-value and watch request (it adds none to the lease service's requests: etcd 3.4
//! checks no grant or keep-alive, only a revoke, see the crate docs). A simple token expires
//! after `--auth-token-ttl` (300 s by default) without use, and a request that races a change
//! to users or roles is refused as of an old auth revision; `etcd-client` 0.18 never
//! authenticates again by itself (`Client::refresh_token` exists, nothing calls it). So on
//! "invalid auth token", "revision of auth store is old", or "user name is empty" when we have
//! credentials (auth was enabled after we connected), [`Auth::call`] authenticates again (one
//! `Authenticate` for all the requests refused at that moment) and sends the request once
//! more: what Go's client does in its retry interceptor.

use crate::rpc::Rpc;
use crate::{backend_err, kind_of, said, EtcdConfig};
use etcd_client::{Client, GetOptions};
use lock_core::requests::RequestHook;
use lock_core::secret::Credentials;
use lock_core::tls::TlsFiles;
use lock_core::{BackendErrorKind, LockError};
use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The backend's client and identity; every request goes out through [`Auth::call`].
pub(crate) struct Auth {
    pub client: Client,
    credentials: Option<Credentials>,
    /// The TLS files, for messages: which CA, which client certificate.
    tls: Option<TlsFiles>,
    pub endpoints: Arc<str>,
    requests: RequestHook,
    /// How many times we have authenticated: a request refused on the token of epoch `n`
    /// authenticates again only if no other request has done so since.
    epoch: AtomicU64,
    /// One authentication at a time: a burst of refused requests costs one `Authenticate`.
    renewing: tokio::sync::Mutex<()>,
}

/// Why one attempt at a request failed.
pub(crate) enum Failure {
    /// etcd (or the transport) answered with an error.
    Etcd(etcd_client::Error),
    /// No answer within the time allowed.
    TimedOut(Duration),
    /// etcd refused our token and authenticating again failed: the refusal, and why.
    Reauth(etcd_client::Error, String),
}

impl Auth {
    pub fn new(client: Client, config: &EtcdConfig, endpoints: Arc<str>) -> Auth {
        Auth {
            client,
            credentials: config.credentials.clone(),
            tls: config.tls.clone(),
            endpoints,
            requests: config.requests.clone(),
            epoch: AtomicU64::new(0),
            renewing: tokio::sync::Mutex::new(()),
        }
    }

    /// The client certificate we present, if any.
    fn client_cert(&self) -> Option<String> {
        let cert = self.tls.as_ref().and_then(|t| t.cert.as_ref());
        cert.map(|c| c.display().to_string())
    }

    /// Who we are, for messages: `user 'name'`, the user our client certificate names (etcd
    /// takes its common name as the user of a request without a token), or that we have no
    /// credentials.
    fn who(&self) -> String {
        match (&self.credentials, self.client_cert()) {
            (Some(c), _) => format!("user '{}'", c.user),
            (None, Some(cert)) => {
                format!("the user of the client certificate {cert} (its common name)")
            }
            (None, None) => "a client without credentials".into(),
        }
    }

    /// Authenticate as the configured user, if any, when connecting. A server whose
    /// authentication is disabled is no error: like Go's client we go on without a token (so
    /// that clients can be given credentials before the operator enables auth), and
    /// authenticate once the server asks for a user.
    pub async fn sign_in(&self, within: Duration) -> Result<(), LockError> {
        let Some(user) = self.credentials.as_ref().map(|c| c.user.as_str()) else {
            return Ok(());
        };
        match self.authenticate().await {
            Ok(()) => Ok(()),
            Err(e) if etcd_says(&e, "authentication is not enabled") => Ok(()),
            Err(e) if etcd_says(&e, "authentication failed") => {
                let text = format!(
                    "etcd at {} refused the credentials of user '{user}': {}",
                    self.endpoints,
                    etcd_message(&e).unwrap_or_default()
                );
                Err(said(BackendErrorKind::Refused, text, e))
            }
            Err(e) => Err(match self.refusal(&e, within).await {
                Some((kind, refusal)) => said(kind, refusal, e),
                None => {
                    let text = format!(
                        "cannot authenticate user '{user}' on etcd at {}: {}",
                        self.endpoints,
                        self.describe(&e)
                    );
                    said(kind_of(&e), text, e)
                }
            }),
        }
    }

    /// One `Authenticate`; the token goes to every clone of the client.
    async fn authenticate(&self) -> Result<(), etcd_client::Error> {
        let Some(c) = &self.credentials else { return Ok(()) };
        Rpc::Authenticate.sent(&self.requests);
        // `update_user` on a clone: the token cell is shared by every clone of the client.
        let mut client = self.client.clone();
        client.update_user(Some((c.user.clone(), c.password.expose().to_string()))).await?;
        self.epoch.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Authenticate again after a request sent at `epoch` had its token refused, unless another
    /// request has done so since.
    async fn renew(&self, epoch: u64) -> Result<(), String> {
        let _one = self.renewing.lock().await;
        if self.epoch.load(Ordering::Acquire) != epoch {
            return Ok(());
        }
        self.authenticate().await.map_err(|e| {
            format!("authenticating {} again failed: {}", self.who(), self.describe(&e))
        })
    }

    /// Whether `e` is etcd refusing our token (rather than our rights): worth a new token.
    fn token_refused(&self, e: &etcd_client::Error) -> bool {
        etcd_says(e, "invalid auth token")
            || etcd_says(e, "revision of auth store is old")
            || (self.credentials.is_some() && etcd_says(e, "user name is empty"))
    }

    /// `request`, an `rpc`: reported to the hook, bounded by `within`, and sent once more with
    /// a new token if etcd refused the one it carried.
    pub async fn send<T, F, Fut>(
        &self,
        rpc: Rpc,
        within: Duration,
        request: F,
    ) -> Result<T, Failure>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let epoch = self.epoch.load(Ordering::Acquire);
        match self.attempt(rpc, within, &request).await {
            Err(Failure::Etcd(e)) if self.token_refused(&e) => {
                if let Err(why) = self.renew(epoch).await {
                    return Err(Failure::Reauth(e, why));
                }
                self.attempt(rpc, within, &request).await
            }
            other => other,
        }
    }

    async fn attempt<T, F, Fut>(
        &self,
        rpc: Rpc,
        within: Duration,
        request: &F,
    ) -> Result<T, Failure>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        rpc.sent(&self.requests);
        match tokio::time::timeout(within, request()).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(Failure::Etcd(e)),
            Err(_) => Err(Failure::TimedOut(within)),
        }
    }

    /// [`Auth::send`], its failure a backend error for `rpc` on `key`.
    pub async fn call<T, F, Fut>(
        &self,
        rpc: Rpc,
        key: &str,
        within: Duration,
        request: F,
    ) -> Result<T, LockError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.send(rpc, within, request).await.map_err(|f| self.failed(rpc.what(), key, f))
    }

    /// A failure in words.
    pub fn explain(&self, failure: &Failure) -> String {
        match failure {
            Failure::Etcd(e) => self.describe(e),
            Failure::TimedOut(within) => format!("no answer within {within:?}"),
            Failure::Reauth(e, why) => format!("{}; {why}", self.describe(e)),
        }
    }

    /// etcd's own words for its refusals (`etcdserver: permission denied`, naming whose
    /// request it was), the client's for everything else.
    pub fn describe(&self, e: &etcd_client::Error) -> String {
        match etcd_message(e) {
            Some("permission denied") => format!(
                "permission denied to {} (its role must grant READWRITE on the lock root's keys)",
                self.who()
            ),
            Some("user name is empty") if self.credentials.is_none() => match self.client_cert() {
                None => "etcd has authentication enabled and this client has no credentials \
                         (user name is empty)"
                    .into(),
                Some(cert) => format!(
                    "etcd has authentication enabled and took no user from the client \
                     certificate {cert} (user name is empty): does it run with --client-cert-auth?"
                ),
            },
            Some(m) => m.to_string(),
            None => crate::tls::words(e),
        }
    }

    /// If `e`, the failure of a connection's first request, is a refused or broken connection
    /// (a refused TLS handshake, a server that speaks the other protocol) rather than etcd's
    /// answer: what was refused, naming the endpoints ([`crate::tls::refusal`]).
    async fn refusal(
        &self,
        e: &etcd_client::Error,
        within: Duration,
    ) -> Option<(BackendErrorKind, String)> {
        crate::tls::refusal(e, &self.endpoints, self.tls.as_ref(), within).await
    }

    /// A backend error of `kind` for `what` on `key`, in the client's own words `e`.
    pub fn err(&self, kind: BackendErrorKind, what: &str, key: &str, e: impl Display) -> LockError {
        backend_err(kind, format!("{what} {key} on etcd at {}: {e}", self.endpoints))
    }

    /// A backend error for `what` on `key` that `failure` ended, etcd's or the driver's error
    /// kept as the source.
    pub fn failed(&self, what: &str, key: &str, failure: Failure) -> LockError {
        let text =
            format!("{what} {key} on etcd at {}: {}", self.endpoints, self.explain(&failure));
        match failure {
            Failure::Etcd(e) | Failure::Reauth(e, _) => said(kind_of(&e), text, e),
            Failure::TimedOut(_) => backend_err(BackendErrorKind::Timeout, text),
        }
    }

    /// A backend error for `what` on `key` that the driver's `e` ended, kept as the source.
    pub fn driver_err(&self, what: &str, key: &str, e: etcd_client::Error) -> LockError {
        let text = format!("{what} {key} on etcd at {}: {e}", self.endpoints);
        said(kind_of(&e), text, e)
    }
}

/// etcd's message in `e` without its `etcdserver: ` prefix, if `e` is etcd's refusal.
fn etcd_message(e: &etcd_client::Error) -> Option<&str> {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.message().strip_prefix("etcdserver: "),
        _ => None,
    }
}

/// Whether etcd refused with a message that contains `words`.
fn etcd_says(e: &etcd_client::Error, words: &str) -> bool {
    etcd_message(e).is_some_and(|m| m.contains(words))
}

/// The first key after every key that starts with `prefix`: the end of its range.
pub(crate) fn prefix_end(prefix: &str) -> String {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return String::from_utf8_lossy(&end).into_owned();
        }
    }
    "\\0".into()
}

/// Before any lease is granted, read one key name under `<root>/` (serializable: the member's
/// own copy, no round of the cluster), to learn within the connect timeout whether this
/// identity may use the lock root, and say what is missing if not. Locking needs READWRITE
/// on the whole range `[<root>/, prefix_end(<root>/))`: every waiter reads and watches the
/// keys before its own.
pub(crate) async fn check_root(auth: &Auth, root: &str, within: Duration) -> Result<(), LockError> {
    let prefix = format!("{root}/");
    let options =
        GetOptions::new().with_prefix().with_keys_only().with_limit(1).with_serializable();
    let read = || {
        let (mut kv, prefix, options) = (auth.client.kv_client(), prefix.clone(), options.clone());
        async move { kv.get(prefix, Some(options)).await }
    };
    let failure = match auth.send(Rpc::Range, within, read).await {
        Ok(_) => return Ok(()),
        Err(f) => f,
    };
    let ep = &auth.endpoints;
    let refusal = match &failure {
        Failure::Etcd(e) | Failure::Reauth(e, _) => etcd_message(e),
        Failure::TimedOut(_) => None,
    };
    if let Failure::Etcd(e) | Failure::Reauth(e, _) = &failure {
        if let Some((kind, connection)) = auth.refusal(e, within).await {
            return Err(match failure {
                Failure::Etcd(e) | Failure::Reauth(e, _) => said(kind, connection, e),
                Failure::TimedOut(_) => backend_err(kind, connection),
            });
        }
    }
    let kind = match &failure {
        Failure::Etcd(e) | Failure::Reauth(e, _) => kind_of(e),
        Failure::TimedOut(_) => BackendErrorKind::Timeout,
    };
    let text = match refusal {
        Some("user name is empty")
            if auth.credentials.is_none() && auth.client_cert().is_some() =>
        {
            format!(
                "etcd at {ep} has authentication enabled and took no user from the client \
                 certificate {} (etcdserver: user name is empty): a certificate is a user only \
                 on a server run with --client-cert-auth; otherwise set EtcdConfig::credentials",
                auth.client_cert().unwrap_or_default()
            )
        }
        Some("user name is empty") if auth.credentials.is_none() => format!(
            "etcd at {ep} has authentication enabled and no credentials were given \
             (etcdserver: user name is empty): set EtcdConfig::credentials to a user whose role \
             grants READWRITE on the lock root's keys [{prefix}, {})",
            prefix_end(&prefix)
        ),
        Some("permission denied") => format!(
            "etcd at {ep} denies {} access to the lock root {prefix} (etcdserver: permission \
             denied): its role must grant READWRITE on the key range [{prefix}, {})",
            auth.who(),
            prefix_end(&prefix)
        ),
        _ => format!(
            "cannot read the lock root {prefix} on etcd at {ep}: {}",
            auth.explain(&failure)
        ),
    };
    Err(match failure {
        Failure::Etcd(e) | Failure::Reauth(e, _) => said(kind, text, e),
        Failure::TimedOut(_) => backend_err(kind, text),
    })
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_range_ends_at_the_prefix_with_its_last_byte_raised() {
        assert_eq!(prefix_end("/locks/"), "/locks0");
        assert_eq!(prefix_end("a"), "b");
    }
}
