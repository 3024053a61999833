//! What the service's tests share: a cluster of `lock-server` nodes built from this crate.

#![allow(dead_code)]

use std::sync::OnceLock;
use test_servers::{ClusterOptions, LockService, ServiceCluster};

/// A new cluster of `n` nodes (killed and removed when dropped).
pub fn cluster(n: usize) -> ServiceCluster {
    ServiceCluster::launch(
        LockService::new(env!("CARGO_BIN_EXE_lock-server")),
        &ClusterOptions::new(n),
    )
    .unwrap_or_else(|e| panic!("start a lock-service cluster of {n}: {e}"))
}

/// The test binary's 3-node cluster, started by the first caller on a thread of its own.
pub fn shared_cluster() -> &'static ServiceCluster {
    static CLUSTER: OnceLock<ServiceCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        std::thread::spawn(|| {
            let started = std::time::Instant::now();
            let c = cluster(3);
            eprintln!("lock-service cluster of 3 formed in {:?}", started.elapsed());
            c
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}
