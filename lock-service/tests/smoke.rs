mod support;

use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceClient};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_take_turns() {
    let cluster = tokio::task::spawn_blocking(|| support::cluster(3)).await.unwrap();
    let config = ClientConfig { ttl: Duration::from_secs(2), ..ClientConfig::default() };
    let a = ServiceClient::connect(&cluster.endpoints(), config.clone()).await.unwrap();
    let b = ServiceClient::connect(&cluster.endpoints(), config).await.unwrap();
    let la = a.locker("a").unwrap();
    let lb = b.locker("b").unwrap();
    let g = la.lock("x", None).await.unwrap();
    assert!(lb.try_lock("x").await.unwrap().is_none());
    let waiter = tokio::spawn(async move { lb.lock("x", None).await.map(|g| (g.token(), g)) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t1 = g.token();
    g.release().await.unwrap();
    let (t2, g2) = waiter.await.unwrap().unwrap();
    assert!(t2 > t1);
    g2.release().await.unwrap();
    drop(cluster);
}
