//! The fencing row stays small: tokens strictly increase over many grants while only the
//! newest few token cells stay live, and reading the greatest token scans no tombstone.
use lock_core::context::ClientContext;
use lock_core::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel};
use lock_core::fence::{column_token, FENCE_TABLE, KEEP_TOKENS};
use lock_core::lease::{CellKey, CellRelease, LeaseConfig, LeaseKeeper};
use lock_core::store::{CellStore, CellWrite};
use std::time::Duration;
use tokio::time::Instant;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn tokens_increase_and_the_row_keeps_only_the_newest() {
    let store = EmbeddedStore::new(EmbeddedConfig {
        replicas: 3,
        latency: LatencyModel::new(Duration::from_millis(1), Duration::from_millis(1)),
        ..EmbeddedConfig::default()
    });
    let mut last = 0;
    for round in 0..60 {
        // Holders alternate, as a lock's would.
        let owner = format!("holder-{}", round % 3);
        let client = store.client(owner.clone());
        let ctx = ClientContext::new(owner.clone(), client.clock(), round);
        let lease = LeaseKeeper::start(
            client.clone(),
            ctx.timestamps.clone(),
            LeaseConfig::new(ctx.ttl, ctx.consistency),
        );
        let started = Instant::now();
        let cell = CellWrite {
            column: owner.clone(),
            value: vec![],
            timestamp: ctx.timestamps.next(),
            ttl: Some(ctx.ttl),
        };
        client.write("main", "lock", &[cell], ctx.consistency).await.unwrap();
        lease.add(CellKey::new("main", "lock", &owner), vec![], started);
        let guard =
            CellRelease::new(&client, &ctx, "lock", lease).into_guard(&owner).await.unwrap();
        assert!(guard.token() > last, "token {} after {last}", guard.token());
        last = guard.token();
        guard.release().await.unwrap();
    }
    assert_eq!(last, 60);
    let live = store.inspect_replica(0, FENCE_TABLE, "lock").unwrap();
    let tokens: Vec<u64> = live.iter().filter_map(|c| column_token(&c.column)).collect();
    assert_eq!(tokens, (60 - KEEP_TOKENS + 1..=60).rev().collect::<Vec<_>>());
    assert_eq!(store.inspect_tombstones(0, FENCE_TABLE, "lock"), Some(60 - KEEP_TOKENS as usize));
    let stats = &store.tombstone_counters()[FENCE_TABLE];
    assert_eq!(
        (stats.reads, stats.max),
        (60, 0),
        "the greatest token is read without scanning a tombstone"
    );
}
