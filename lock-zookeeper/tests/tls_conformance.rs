//! The shared conformance suite for the ZooKeeper recipe over mutual TLS (crate docs, "TLS"):
//! a server whose client port speaks TLS only and needs a client certificate, every contender
//! presenting one of the test CA's, through its own proxy (so the certificate must name
//! 127.0.0.1, the address dialled). One seed: the plain suite (`tests/conformance.rs`) runs
//! three.

use crate::support;

use lock_core::tls::TlsFiles;
use std::sync::OnceLock;
use std::time::Duration;
use test_servers::{TestPki, ZkClientAuth};

fn pki() -> &'static TestPki {
    static PKI: OnceLock<TestPki> = OnceLock::new();
    PKI.get_or_init(|| TestPki::new("lock-zookeeper-tls-conformance"))
}

async fn make_fixture(_seed: u64) -> support::ZkFixture {
    let server = tokio::task::block_in_place(|| support::shared_tls(pki(), ZkClientAuth::Need));
    let client = pki().client("conformance");
    let files = TlsFiles::trusting(pki().ca_file()).with_identity(&client.cert, &client.key);
    support::ZkFixture::new("tls-conf", Duration::from_secs(2)).await.over_tls(server, files)
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 1,
    contenders = 12
);
