//! What a shared grant costs a client: readers and writers of one lock, and permit holders of
//! one semaphore, on the 3-node cluster, each contender on its own client with a request
//! tally. A grant costs one `Acquire` and one `Release` whatever it shares (the queue and the
//! hand-over are the server's: a writer's release grants the readers behind it in its own
//! commit, by push), plus the session's `Open` and whatever keep-alives a quiet session sends.

use crate::support;

use lock_core::requests::RequestTally;
use lock_core::{Access, RwLocker, Semaphore};
use lock_service::client::{ClientConfig, ServiceClient};
use std::sync::Arc;
use std::time::Duration;

const ROUNDS: u64 = 12;

async fn client(tally: &Arc<RequestTally>) -> ServiceClient {
    let cluster = tokio::task::spawn_blocking(support::shared_cluster).await.expect("cluster");
    let config = ClientConfig { requests: tally.hook(), ..ClientConfig::default() };
    ServiceClient::connect(&cluster.endpoints(), config).await.expect("connect")
}

/// Checks that each of `grants` grants cost one ask and one release, and that the rest of
/// `clients` clients' requests came from their sessions, not their grants: an `Open` to each
/// node tried before the leader answered, a `Close`, keep-alives. Returns requests per grant.
fn per_grant(tally: &RequestTally, grants: u64, clients: u64) -> f64 {
    let counts = tally.counts();
    let asks = tally.of("service", "Acquire");
    let releases = tally.of("service", "Release");
    assert_eq!((asks, releases), (grants, grants), "one ask and one release per grant: {counts:?}");
    let sessions = tally.total() - asks - releases;
    assert!(sessions <= 5 * clients, "{sessions} requests beside the grants': {counts:?}");
    tally.total() as f64 / grants as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_or_a_write_costs_one_ask_and_one_release() {
    let (readers, writers) = (RequestTally::new(), RequestTally::new());
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (tally, access) =
            if i % 3 == 2 { (&writers, Access::Write) } else { (&readers, Access::Read) };
        let locker = client(tally).await.rw_locker(&format!("c{i}")).expect("locker");
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let g = locker.lock("rw-requests", access, None).await.expect("lock");
                tokio::time::sleep(Duration::from_millis(5)).await;
                g.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender");
    }
    let (r, w) = (per_grant(&readers, 4 * ROUNDS, 4), per_grant(&writers, 2 * ROUNDS, 2));
    eprintln!("requests per grant, sessions' included: reads {r:.2}, writes {w:.2}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_of_permits_costs_one_ask_and_one_release() {
    let tally = RequestTally::new();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let sem = client(&tally).await.semaphore(&format!("c{i}")).expect("semaphore");
        tasks.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                let k = 1 + (r % 2) as u32;
                let p = sem.acquire("sem-requests", 3, k, None).await.expect("acquire");
                tokio::time::sleep(Duration::from_millis(5)).await;
                p.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender");
    }
    let p = per_grant(&tally, 6 * ROUNDS, 6);
    eprintln!("requests per acquire of permits, sessions' included: {p:.2}");
}
