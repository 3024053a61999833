//! How to reach the cluster and what schema to create there.

use lock_core::tls::TlsFiles;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The default keyspace.
pub const DEFAULT_KEYSPACE: &str = "distributed_locks";
/// The CQL native protocol port a node listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 9042;
/// The environment variable with the contact points: `host:port[,host:port…]`.
pub const ENV_NODES: &str = "LOCK_CASSANDRA_NODES";
/// The environment variable with the keyspace name (optional).
pub const ENV_KEYSPACE: &str = "LOCK_CASSANDRA_KEYSPACE";
/// The environment variable with the replication (optional, see [`Replication`]'s `FromStr`).
pub const ENV_REPLICATION: &str = "LOCK_CASSANDRA_REPLICATION";
/// The environment variable naming the local datacenter (optional): set, `QUORUM` is sent as
/// `LOCAL_QUORUM` and `ONE` as `LOCAL_ONE`, and the driver prefers that datacenter's nodes.
pub const ENV_LOCAL_DC: &str = "LOCK_CASSANDRA_LOCAL_DC";
/// The environment variable that creates the keyspace without tablets (optional; `1`/`true`/
/// `yes` or `0`/`false`/`no`): see [`CassandraConfig::tablets_off`].
pub const ENV_TABLETS_OFF: &str = "LOCK_CASSANDRA_TABLETS_OFF";
/// The environment variable with the CA file (PEM) that signed the nodes' certificates:
/// set, the client speaks TLS to every node (see [`CassandraConfig::tls`]).
pub const ENV_CA: &str = "LOCK_CASSANDRA_CA";
/// The environment variable with the client's certificate file (PEM), for nodes that require
/// one (`require_client_auth`); with [`ENV_KEY`] and [`ENV_CA`].
pub const ENV_CERT: &str = "LOCK_CASSANDRA_CERT";
/// The environment variable with the client certificate's private key file (PEM).
pub const ENV_KEY: &str = "LOCK_CASSANDRA_KEY";

/// A configuration that cannot be used, with what is wrong in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Cassandra configuration: {0}")]
pub struct ConfigError(pub String);

/// The keyspace's replication, as `CREATE KEYSPACE … WITH replication = {…}` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// `NetworkTopologyStrategy` with one factor for every datacenter (the `replication_factor`
    /// shorthand of Cassandra 4.0+ and ScyllaDB): the default, accepted everywhere this crate
    /// targets, including ScyllaDB 2026.2+, which refuses `SimpleStrategy` with tablets.
    EveryDatacenter {
        /// Replicas of every row in each datacenter.
        replication_factor: u32,
    },
    /// `SimpleStrategy`: deprecated by ScyllaDB (refused by 2026.2+ keyspaces with tablets),
    /// still fine on Cassandra.
    Simple {
        /// Replicas of every row.
        replication_factor: u32,
    },
    /// `NetworkTopologyStrategy` with a replication factor per datacenter: production.
    NetworkTopology {
        /// `(datacenter name, replicas there)`.
        datacenters: Vec<(String, u32)>,
    },
}

impl Default for Replication {
    /// One replica per datacenter: what a single-node development cluster can hold.
    fn default() -> Self {
        Replication::EveryDatacenter { replication_factor: 1 }
    }
}

impl Replication {
    /// The replication map in CQL, e.g.
    /// `{'class': 'NetworkTopologyStrategy', 'replication_factor': 1}`.
    pub fn cql(&self) -> String {
        match self {
            Replication::EveryDatacenter { replication_factor } => {
                format!("{{'class': 'NetworkTopologyStrategy', 'replication_factor': {replication_factor}}}")
            }
            Replication::Simple { replication_factor } => {
                format!("{{'class': 'SimpleStrategy', 'replication_factor': {replication_factor}}}")
            }
            Replication::NetworkTopology { datacenters } => {
                let mut s = String::from("{'class': 'NetworkTopologyStrategy'");
                for (dc, rf) in datacenters {
                    s.push_str(&format!(", '{}': {rf}", dc.replace('\'', "''")));
                }
                s.push('}');
                s
            }
        }
    }

    /// Replicas of every row over the whole cluster: what `QUORUM` is a majority of (for
    /// [`Replication::EveryDatacenter`], those of one datacenter: the number of datacenters is
    /// the cluster's to tell).
    pub fn replicas(&self) -> usize {
        match self {
            Replication::EveryDatacenter { replication_factor }
            | Replication::Simple { replication_factor } => *replication_factor as usize,
            Replication::NetworkTopology { datacenters } => {
                datacenters.iter().map(|(_, rf)| *rf as usize).sum()
            }
        }
    }

    /// Replicas in datacenter `dc` (for `LOCAL_QUORUM`); the whole cluster's for `SimpleStrategy`.
    pub fn replicas_in(&self, dc: &str) -> usize {
        match self {
            Replication::EveryDatacenter { replication_factor }
            | Replication::Simple { replication_factor } => *replication_factor as usize,
            Replication::NetworkTopology { datacenters } => {
                datacenters.iter().filter(|(d, _)| d == dc).map(|(_, rf)| *rf as usize).sum()
            }
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Replication::Simple { replication_factor: 0 }
            | Replication::EveryDatacenter { replication_factor: 0 } => {
                Err(ConfigError("the replication factor must be at least 1".into()))
            }
            Replication::Simple { .. } | Replication::EveryDatacenter { .. } => Ok(()),
            Replication::NetworkTopology { datacenters } => {
                if datacenters.is_empty() {
                    return Err(ConfigError(
                        "NetworkTopologyStrategy needs at least one datacenter".into(),
                    ));
                }
                for (dc, rf) in datacenters {
                    if dc.trim().is_empty() {
                        return Err(ConfigError("a datacenter name is empty".into()));
                    }
                    if *rf == 0 {
                        return Err(ConfigError(format!(
                            "datacenter '{dc}' has replication factor 0"
                        )));
                    }
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Replication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Replication::EveryDatacenter { replication_factor } => {
                write!(f, "NetworkTopologyStrategy:{replication_factor}")
            }
            Replication::Simple { replication_factor } => {
                write!(f, "SimpleStrategy:{replication_factor}")
            }
            Replication::NetworkTopology { datacenters } => {
                f.write_str("NetworkTopologyStrategy:")?;
                for (i, (dc, rf)) in datacenters.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{dc}={rf}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Replication {
    type Err = ConfigError;

    /// `NetworkTopologyStrategy:3` (or `nts:3`, or just `3`): 3 replicas in every datacenter;
    /// `NetworkTopologyStrategy:dc1=3,dc2=3` (or `nts:dc1=3,dc2=3`); `SimpleStrategy:3` (or
    /// `simple:3`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let bad = |why: &str| {
            ConfigError(format!(
                "replication '{s}': {why} (expected 'NetworkTopologyStrategy:N', 'NetworkTopologyStrategy:dc1=N,dc2=M' or 'SimpleStrategy:N')"
            ))
        };
        let (class, rest) = match s.split_once(':') {
            Some((c, r)) => (c.trim(), r.trim()),
            None => ("NetworkTopologyStrategy", s),
        };
        let replication = match class.to_ascii_lowercase().as_str() {
            "simplestrategy" | "simple" => {
                let rf = rest
                    .parse::<u32>()
                    .map_err(|_| bad("the replication factor is not a number"))?;
                Replication::Simple { replication_factor: rf }
            }
            "networktopologystrategy" | "nts" if !rest.contains('=') && !rest.is_empty() => {
                let rf = rest
                    .parse::<u32>()
                    .map_err(|_| bad("the replication factor is not a number"))?;
                Replication::EveryDatacenter { replication_factor: rf }
            }
            "networktopologystrategy" | "nts" => {
                let mut datacenters = Vec::new();
                for part in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let (dc, rf) = part
                        .split_once('=')
                        .ok_or_else(|| bad("a datacenter entry is not 'name=N'"))?;
                    let rf = rf
                        .trim()
                        .parse::<u32>()
                        .map_err(|_| bad("a replication factor is not a number"))?;
                    datacenters.push((dc.trim().to_string(), rf));
                }
                Replication::NetworkTopology { datacenters }
            }
            _ => return Err(bad("unknown replication class")),
        };
        replication.validate().map_err(|e| bad(&e.0))?;
        Ok(replication)
    }
}

/// Everything [`CassandraStore::connect`](crate::CassandraStore::connect) needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CassandraConfig {
    /// Contact points, `host:port` each (`[v6addr]:port` for IPv6). The driver discovers the
    /// rest of the cluster from them.
    pub nodes: Vec<String>,
    /// The keyspace holding the lock tables; default [`DEFAULT_KEYSPACE`].
    pub keyspace: String,
    /// Replication of the keyspace when it is created here (an existing keyspace is kept as is).
    pub replication: Replication,
    /// How long one connection attempt to one node may take (the driver's connect timeout).
    /// Connecting as a whole is also bounded, by this plus 5 s.
    pub connect_timeout: Duration,
    /// Client-side bound of every request; the server's own timeouts (Cassandra's defaults:
    /// 2 s for writes, 5 s for reads) usually answer first, with more detail.
    pub request_timeout: Duration,
    /// The local datacenter: when set, the driver prefers its nodes, `QUORUM` is sent as
    /// `LOCAL_QUORUM` and `ONE` as `LOCAL_ONE` (correct only while every contender of a lock
    /// uses the same datacenter).
    pub local_datacenter: Option<String>,
    /// Create the keyspace and the tables if missing (`IF NOT EXISTS`). Off: they must exist,
    /// e.g. when the client may not alter the schema.
    pub create_schema: bool,
    /// `gc_grace_seconds` of tables created here; `None` keeps the server's default (10 days).
    /// See the crate docs on tombstones before lowering it.
    pub gc_grace_seconds: Option<u32>,
    /// How long to wait for the nodes to agree on the schema after creating a keyspace or table.
    pub schema_agreement_timeout: Duration,
    /// User name and password for `PasswordAuthenticator` clusters.
    pub credentials: Option<(String, String)>,
    /// ScyllaDB only: create the keyspace with `tablets = {'enabled': false}`, because ScyllaDB
    /// refuses lightweight transactions (`CellStore::cas`, SERIAL reads) in keyspaces with
    /// tablets, which its recent releases create by default. Off by default: Apache Cassandra
    /// refuses the option. An existing keyspace is kept as it is either way.
    pub tablets_off: bool,
    /// TLS to every node (`None`: plain text): the CA that signed the nodes' certificates
    /// (required; this build trusts no system roots), and a client certificate and key for
    /// nodes that require one. Each node's certificate must name its IP address (crate docs,
    /// "TLS"). Checked by [`CassandraConfig::validate`], which names a file it cannot use.
    pub tls: Option<TlsFiles>,
}

impl Default for CassandraConfig {
    fn default() -> Self {
        CassandraConfig {
            nodes: vec![format!("127.0.0.1:{DEFAULT_PORT}")],
            keyspace: DEFAULT_KEYSPACE.to_string(),
            replication: Replication::default(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            local_datacenter: None,
            create_schema: true,
            gc_grace_seconds: None,
            schema_agreement_timeout: Duration::from_secs(30),
            credentials: None,
            tablets_off: false,
            tls: None,
        }
    }
}

impl CassandraConfig {
    /// The defaults, with these contact points.
    pub fn new(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        CassandraConfig {
            nodes: nodes.into_iter().map(Into::into).collect(),
            ..CassandraConfig::default()
        }
    }

    /// The defaults, with contact points parsed from `host:port[,host:port…]` (see [`parse_nodes`]).
    pub fn from_nodes(nodes: &str) -> Result<Self, ConfigError> {
        Ok(CassandraConfig::new(parse_nodes(nodes)?))
    }

    /// From the environment: [`ENV_NODES`] (required; `Ok(None)` when unset or empty),
    /// [`ENV_KEYSPACE`], [`ENV_REPLICATION`], [`ENV_LOCAL_DC`], [`ENV_TABLETS_OFF`], and for
    /// TLS [`ENV_CA`], [`ENV_CERT`] and [`ENV_KEY`] (optional).
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        CassandraConfig::from_vars(|name| std::env::var(name).ok())
    }

    /// As [`CassandraConfig::from_env`], reading variables through `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, ConfigError> {
        let Some(nodes) = var(ENV_NODES).filter(|n| !n.trim().is_empty()) else {
            return Ok(None);
        };
        let mut config = CassandraConfig::from_nodes(&nodes)
            .map_err(|e| ConfigError(format!("{ENV_NODES}: {}", e.0)))?;
        if let Some(ks) = var(ENV_KEYSPACE).filter(|k| !k.trim().is_empty()) {
            config.keyspace = ks.trim().to_string();
        }
        if let Some(r) = var(ENV_REPLICATION).filter(|r| !r.trim().is_empty()) {
            config.replication = r
                .parse()
                .map_err(|e: ConfigError| ConfigError(format!("{ENV_REPLICATION}: {}", e.0)))?;
        }
        if let Some(dc) = var(ENV_LOCAL_DC).filter(|d| !d.trim().is_empty()) {
            config.local_datacenter = Some(dc.trim().to_string());
        }
        if let Some(off) = var(ENV_TABLETS_OFF).filter(|o| !o.trim().is_empty()) {
            config.tablets_off = match off.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" => true,
                "0" | "false" | "no" => false,
                other => {
                    return Err(ConfigError(format!(
                        "{ENV_TABLETS_OFF}: '{other}' is not 1/true/yes or 0/false/no"
                    )))
                }
            };
        }
        config.tls = tls_from_vars(&var);
        if let Some(files) = &config.tls {
            crate::tls::client_config(files)
                .map_err(|e| ConfigError(format!("TLS ({ENV_CA}, {ENV_CERT}, {ENV_KEY}): {e}")))?;
        }
        config.validate()?;
        Ok(Some(config))
    }

    /// Set the keyspace.
    pub fn with_keyspace(mut self, keyspace: impl Into<String>) -> Self {
        self.keyspace = keyspace.into();
        self
    }

    /// Set the replication of a keyspace created here.
    pub fn with_replication(mut self, replication: Replication) -> Self {
        self.replication = replication;
        self
    }

    /// Set the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Set the request timeout.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Set the local datacenter (see [`CassandraConfig::local_datacenter`]).
    pub fn with_local_datacenter(mut self, dc: impl Into<String>) -> Self {
        self.local_datacenter = Some(dc.into());
        self
    }

    /// Create the keyspace without tablets (ScyllaDB, for lightweight transactions; see
    /// [`CassandraConfig::tablets_off`]).
    pub fn with_tablets_off(mut self, off: bool) -> Self {
        self.tablets_off = off;
        self
    }

    /// Speak TLS to every node with these files (see [`CassandraConfig::tls`]).
    pub fn with_tls(mut self, tls: TlsFiles) -> Self {
        self.tls = Some(tls);
        self
    }

    /// How long connecting may take as a whole before it is given up: the connect timeout
    /// plus 5 s for the driver's handshake and first metadata fetch.
    pub fn connect_deadline(&self) -> Duration {
        self.connect_timeout + Duration::from_secs(5)
    }

    /// Replicas a `QUORUM` (or `LOCAL_QUORUM`) request is a majority of, by the configured
    /// replication: used to fill in "required" when the driver timed out without an answer.
    pub fn quorum_base(&self) -> usize {
        match &self.local_datacenter {
            Some(dc) => self.replication.replicas_in(dc).max(1),
            None => self.replication.replicas().max(1),
        }
    }

    /// Check every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.nodes.is_empty() {
            return Err(ConfigError("no contact points (nodes) given".into()));
        }
        for n in &self.nodes {
            parse_node(n)?;
        }
        crate::names::validate_identifier("keyspace", &self.keyspace)
            .map_err(|e| ConfigError(e.to_string()))?;
        self.replication.validate()?;
        if self.connect_timeout.is_zero() {
            return Err(ConfigError("the connect timeout must be above zero".into()));
        }
        if self.request_timeout.is_zero() {
            return Err(ConfigError("the request timeout must be above zero".into()));
        }
        if let (Some(dc), Replication::NetworkTopology { .. }) =
            (&self.local_datacenter, &self.replication)
        {
            if self.replication.replicas_in(dc) == 0 && self.create_schema {
                return Err(ConfigError(format!(
                    "local datacenter '{dc}' has no replicas in the replication {}",
                    self.replication
                )));
            }
        }
        if let Some(files) = &self.tls {
            crate::tls::client_config(files)
                .map_err(|e| ConfigError(format!("CassandraConfig::tls: {e}")))?;
        }
        Ok(())
    }
}

/// The TLS files named by [`ENV_CA`], [`ENV_CERT`] and [`ENV_KEY`]; `None` when none is set.
fn tls_from_vars(var: &impl Fn(&str) -> Option<String>) -> Option<TlsFiles> {
    let path = |name| var(name).filter(|p| !p.trim().is_empty()).map(|p| p.trim().into());
    let files = TlsFiles { ca: path(ENV_CA), cert: path(ENV_CERT), key: path(ENV_KEY) };
    (files != TlsFiles::default()).then_some(files)
}

/// Parse contact points `host:port[,host:port…]`: entries are trimmed, empty ones skipped, a
/// missing port means [`DEFAULT_PORT`], IPv6 addresses go in brackets (`[::1]:9042`).
/// Returns them normalized to `host:port`.
pub fn parse_nodes(s: &str) -> Result<Vec<String>, ConfigError> {
    let nodes: Vec<String> = s
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(parse_node)
        .collect::<Result<_, _>>()?;
    if nodes.is_empty() {
        return Err(ConfigError(format!(
            "no contact points in '{s}' (expected host:port[,host:port…])"
        )));
    }
    Ok(nodes)
}

/// Parse one contact point `host[:port]` into `host:port`.
pub fn parse_node(s: &str) -> Result<String, ConfigError> {
    let s = s.trim();
    let bad = |why: &str| ConfigError(format!("contact point '{s}': {why} (expected host:port)"));
    if s.is_empty() {
        return Err(bad("empty"));
    }
    if s.chars().any(char::is_whitespace) {
        return Err(bad("contains whitespace"));
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) =
            rest.split_once(']').ok_or_else(|| bad("unclosed '[' of an IPv6 address"))?;
        match after {
            "" => (format!("[{host}]"), None),
            p => (
                format!("[{host}]"),
                Some(p.strip_prefix(':').ok_or_else(|| bad("expected ':' after ']'"))?),
            ),
        }
    } else if s.matches(':').count() > 1 {
        return Err(bad("an IPv6 address must be written in brackets, e.g. [::1]:9042"));
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (s.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("no host"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(bad("the port is not a number in 1..=65535")),
            Ok(p) => p,
        },
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn nodes_parse_from_a_comma_separated_list() {
        assert_eq!(parse_nodes("127.0.0.1:9042").unwrap(), ["127.0.0.1:9042"]);
        assert_eq!(
            parse_nodes(" db1:9042, db2:19042 ,db3,").unwrap(),
            ["db1:9042", "db2:19042", "db3:9042"]
        );
        assert_eq!(parse_nodes("[::1]:9043,[fe80::1]").unwrap(), ["[::1]:9043", "[fe80::1]:9042"]);
        assert_eq!(parse_nodes("localhost").unwrap(), ["localhost:9042"]);
    }

    #[test]
    fn bad_node_lists_are_refused_with_the_reason() {
        for (input, needle) in [
            ("", "no contact points"),
            (" , ,", "no contact points"),
            ("db1:", "port"),
            ("db1:port", "port"),
            ("db1:70000", "port"),
            ("db1:0", "port"),
            (":9042", "no host"),
            ("::1:9042", "brackets"),
            ("[::1:9042", "unclosed"),
            ("[::1]9042", "':' after ']'"),
            ("db 1:9042", "whitespace"),
        ] {
            let err = parse_nodes(input).expect_err(input);
            assert!(err.0.contains(needle), "{input:?}: {err}");
        }
    }

    #[test]
    fn config_comes_from_environment_variables() {
        let vars: HashMap<&str, &str> = [
            (ENV_NODES, "10.0.0.1:9042,10.0.0.2"),
            (ENV_KEYSPACE, "locks_test"),
            (ENV_REPLICATION, "NetworkTopologyStrategy:dc1=3,dc2=2"),
            (ENV_LOCAL_DC, "dc1"),
        ]
        .into_iter()
        .collect();
        let config =
            CassandraConfig::from_vars(|k| vars.get(k).map(|v| v.to_string())).unwrap().unwrap();
        assert_eq!(config.nodes, ["10.0.0.1:9042", "10.0.0.2:9042"]);
        assert_eq!(config.keyspace, "locks_test");
        assert_eq!(
            config.replication,
            Replication::NetworkTopology {
                datacenters: vec![("dc1".into(), 3), ("dc2".into(), 2)]
            }
        );
        assert_eq!(config.local_datacenter.as_deref(), Some("dc1"));
        assert_eq!(config.quorum_base(), 3);
        assert!(!config.tablets_off, "tablets are left alone unless asked");
        for (value, off) in [
            ("1", true),
            ("TRUE", true),
            (" yes ", true),
            ("0", false),
            ("false", false),
            ("No", false),
        ] {
            let config = CassandraConfig::from_vars(|k| match k {
                ENV_NODES => Some("db".into()),
                ENV_TABLETS_OFF => Some(value.into()),
                _ => None,
            })
            .unwrap()
            .unwrap();
            assert_eq!(config.tablets_off, off, "{value:?}");
        }
        assert!(CassandraConfig::default().with_tablets_off(true).tablets_off);
    }

    #[test]
    fn config_from_environment_is_absent_without_nodes_and_defaults_the_rest() {
        assert_eq!(CassandraConfig::from_vars(|_| None).unwrap(), None);
        assert_eq!(
            CassandraConfig::from_vars(|k| (k == ENV_NODES).then(|| "  ".to_string())).unwrap(),
            None
        );
        let config =
            CassandraConfig::from_vars(|k| (k == ENV_NODES).then(|| "db:9142".to_string()))
                .unwrap()
                .unwrap();
        assert_eq!(config.nodes, ["db:9142"]);
        assert_eq!(config.keyspace, DEFAULT_KEYSPACE);
        assert_eq!(config.replication, Replication::EveryDatacenter { replication_factor: 1 });
        assert_eq!(config.local_datacenter, None);
        assert!(config.create_schema);
        assert_eq!(config.connect_timeout, Duration::from_secs(5));
    }

    #[test]
    fn bad_environment_values_name_the_variable() {
        let err = CassandraConfig::from_vars(|k| (k == ENV_NODES).then(|| "db:x".to_string()))
            .unwrap_err();
        assert!(err.0.contains(ENV_NODES), "{err}");
        let err = CassandraConfig::from_vars(|k| match k {
            ENV_NODES => Some("db".into()),
            ENV_REPLICATION => Some("Everywhere:3".into()),
            _ => None,
        })
        .unwrap_err();
        assert!(err.0.contains(ENV_REPLICATION), "{err}");
        let err = CassandraConfig::from_vars(|k| match k {
            ENV_NODES => Some("db".into()),
            ENV_KEYSPACE => Some("locks-test".into()),
            _ => None,
        })
        .unwrap_err();
        assert!(err.0.contains("keyspace"), "{err}");
        let err = CassandraConfig::from_vars(|k| match k {
            ENV_NODES => Some("db".into()),
            ENV_TABLETS_OFF => Some("maybe".into()),
            _ => None,
        })
        .unwrap_err();
        assert!(err.0.contains(ENV_TABLETS_OFF) && err.0.contains("maybe"), "{err}");
    }

    #[test]
    fn tls_comes_from_environment_variables_and_is_checked_naming_the_file() {
        let pki = test_servers::TestPki::new("cassandra-config");
        let me = pki.client("locker");
        let ca = pki.ca_file().display().to_string();
        let (cert, key) = (me.cert.display().to_string(), me.key.display().to_string());
        let vars = |set: &[(&str, &str)]| {
            let set: HashMap<String, String> =
                set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            CassandraConfig::from_vars(move |k| match k {
                ENV_NODES => Some("db".into()),
                other => set.get(other).cloned(),
            })
        };
        assert_eq!(vars(&[]).unwrap().unwrap().tls, None, "plain unless asked");
        let trusting = vars(&[(ENV_CA, &ca)]).unwrap().unwrap();
        assert_eq!(trusting.tls, Some(TlsFiles::trusting(pki.ca_file())));
        let mutual = vars(&[(ENV_CA, &ca), (ENV_CERT, &cert), (ENV_KEY, &key)]).unwrap().unwrap();
        assert_eq!(
            mutual.tls,
            Some(TlsFiles::trusting(pki.ca_file()).with_identity(&me.cert, &me.key))
        );
        // Each bad case names the variables and what is wrong, before any connection.
        let missing = vars(&[(ENV_CA, "/nonexistent/ca.pem")]).unwrap_err().0;
        assert!(missing.contains(ENV_CA) && missing.contains("/nonexistent/ca.pem"), "{missing}");
        let half = vars(&[(ENV_CA, &ca), (ENV_CERT, &cert)]).unwrap_err().0;
        assert!(half.contains(ENV_KEY) && half.contains("without its key"), "{half}");
        let no_ca = vars(&[(ENV_CERT, &cert), (ENV_KEY, &key)]).unwrap_err().0;
        assert!(no_ca.contains("no CA file") && no_ca.contains(ENV_CA), "{no_ca}");
        let swapped = vars(&[(ENV_CA, &key)]).unwrap_err().0;
        assert!(
            swapped.contains(&key) && swapped.contains("holds no PEM CERTIFICATE"),
            "{swapped}"
        );
    }

    #[test]
    fn validation_reads_the_tls_files() {
        let pki = test_servers::TestPki::new("cassandra-validate");
        let me = pki.client("locker");
        let good = CassandraConfig::default()
            .with_tls(TlsFiles::trusting(pki.ca_file()).with_identity(&me.cert, &me.key));
        assert!(good.validate().is_ok());
        let gone = CassandraConfig::default().with_tls(TlsFiles::trusting("/gone/ca.pem"));
        let e = gone.validate().unwrap_err();
        assert!(e
            .to_string()
            .contains("CassandraConfig::tls: cannot read the CA file /gone/ca.pem"));
        let no_key = TlsFiles {
            key: None,
            ..TlsFiles::trusting(pki.ca_file()).with_identity(&me.cert, &me.key)
        };
        let e = CassandraConfig::default().with_tls(no_key).validate().unwrap_err();
        assert!(e.0.contains("a client certificate was given without its key"), "{e}");
        let no_file = me.key.with_file_name("nope-key.pem");
        let missing_key = TlsFiles::trusting(pki.ca_file()).with_identity(&me.cert, &no_file);
        let e = CassandraConfig::default().with_tls(missing_key).validate().unwrap_err();
        assert!(e.0.contains("cannot read the client key") && e.0.contains("nope-key.pem"), "{e}");
    }

    #[test]
    fn replication_parses_and_renders_as_cql() {
        let simple: Replication = "SimpleStrategy:3".parse().unwrap();
        assert_eq!(simple, Replication::Simple { replication_factor: 3 });
        assert_eq!(simple.cql(), "{'class': 'SimpleStrategy', 'replication_factor': 3}");
        assert_eq!(
            "2".parse::<Replication>().unwrap(),
            Replication::EveryDatacenter { replication_factor: 2 }
        );
        assert_eq!("nts:1".parse::<Replication>().unwrap(), Replication::default());
        assert_eq!(
            Replication::default().cql(),
            "{'class': 'NetworkTopologyStrategy', 'replication_factor': 1}"
        );
        assert_eq!(
            "simple:1".parse::<Replication>().unwrap(),
            Replication::Simple { replication_factor: 1 }
        );
        let every: Replication = "NetworkTopologyStrategy:3".parse().unwrap();
        assert_eq!(every.to_string().parse::<Replication>().unwrap(), every);
        assert_eq!(every.replicas(), 3);
        let nts: Replication = "nts: dc1=3, dc'2=1".parse().unwrap();
        assert_eq!(nts.cql(), "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc''2': 1}");
        assert_eq!(nts.replicas(), 4);
        assert_eq!(nts.replicas_in("dc1"), 3);
        assert_eq!(nts.to_string().parse::<Replication>().unwrap(), nts);
        assert_eq!(simple.to_string().parse::<Replication>().unwrap(), simple);
        for bad in [
            "SimpleStrategy:0",
            "SimpleStrategy:x",
            "nts:",
            "nts:dc1",
            "nts:dc1=0",
            "nts:0",
            "0",
            "Local:1",
        ] {
            assert!(bad.parse::<Replication>().is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_checks_every_field() {
        assert!(CassandraConfig::default().validate().is_ok());
        let no_nodes = CassandraConfig { nodes: vec![], ..CassandraConfig::default() };
        assert!(no_nodes.validate().unwrap_err().0.contains("contact points"));
        let zero = CassandraConfig::default().with_request_timeout(Duration::ZERO);
        assert!(zero.validate().unwrap_err().0.contains("request timeout"));
        let zero = CassandraConfig::default().with_connect_timeout(Duration::ZERO);
        assert!(zero.validate().unwrap_err().0.contains("connect timeout"));
        let ks = CassandraConfig::default().with_keyspace("Locks");
        assert!(ks.validate().is_err());
        let dc = CassandraConfig::default()
            .with_replication("nts:dc1=3".parse().unwrap())
            .with_local_datacenter("dc2");
        assert!(dc.validate().unwrap_err().0.contains("dc2"));
        assert_eq!(CassandraConfig::default().connect_deadline(), Duration::from_secs(10));
    }
}
