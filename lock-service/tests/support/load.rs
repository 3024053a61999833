//! Contenders taking one lock in turn on a cluster while a test changes it under them, every
//! hold logged and checked at the end: no two overlap, tokens rise in grant order, and no
//! holder is told its lease was lost.

use lock_core::conformance::{assert_exclusive, Hold, HoldLog};
use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceClient};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Contenders taking one lock in turn until stopped, their holds logged.
pub struct Load {
    /// Every hold, as its contender saw it.
    pub log: HoldLog,
    stop: Arc<AtomicBool>,
    /// Failed acquires and releases.
    pub errors: Arc<AtomicUsize>,
    /// Holders told their lease was lost while they held.
    pub lost: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    /// Start `contenders` clients of `config` taking `lock` (named `c0`, `c1`, ...); each is
    /// given only `endpoints` and finds the rest itself.
    pub async fn start(
        endpoints: &[String],
        contenders: usize,
        lock: &'static str,
        config: ClientConfig,
    ) -> Load {
        let log = HoldLog::default();
        let stop = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(AtomicUsize::new(0));
        let lost = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..contenders {
            let client = ServiceClient::connect(endpoints, config.clone()).await.unwrap();
            let locker = client.locker(&format!("c{i}")).unwrap();
            let (log, stop, errors, lost) =
                (log.clone(), stop.clone(), errors.clone(), lost.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let g = match locker.lock(lock, Some(Duration::from_secs(10))).await {
                        Ok(g) => g,
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::SeqCst) < 5 {
                                eprintln!("c{i}: lock: {e}");
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let granted = Instant::now();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    if g.is_lost() {
                        lost.fetch_add(1, Ordering::SeqCst);
                    }
                    log.push(Hold {
                        lock_id: lock.into(),
                        owner: g.owner().to_string(),
                        granted,
                        released: Instant::now(),
                        token: g.token(),
                    });
                    if let Err(e) = g.release().await {
                        if errors.fetch_add(1, Ordering::SeqCst) < 5 {
                            eprintln!("c{i}: release: {e}");
                        }
                    }
                }
            }));
        }
        Load { log, stop, errors, lost, tasks }
    }

    /// Grants so far.
    pub fn grants(&self) -> usize {
        self.log.holds().len()
    }

    /// Wait until `more` grants were made after this call, or panic naming `phase`.
    pub async fn granting(&self, more: usize, phase: &str) {
        let from = self.grants();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.grants() < from + more {
            assert!(Instant::now() < deadline, "no grants for 30 s {phase}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The longest time the lock was free since `since`: from a release to the next grant.
    pub fn longest_gap_since(&self, since: Instant) -> Duration {
        let mut holds = self.log.holds();
        holds.sort_by_key(|h| h.granted);
        holds
            .windows(2)
            .filter(|w| w[1].granted >= since)
            .map(|w| w[1].granted.saturating_duration_since(w[0].released))
            .max()
            .unwrap_or_default()
    }

    /// Stop the contenders and check every hold; the longest gap between one release and
    /// the next grant.
    pub async fn finish(self) -> Duration {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .expect("contender stops")
                .unwrap();
        }
        let mut holds = self.log.holds();
        let checked = assert_exclusive(&holds);
        assert_eq!(self.lost.load(Ordering::SeqCst), 0, "a holder lost its session");
        holds.sort_by_key(|h| h.granted);
        let gap = holds
            .windows(2)
            .map(|w| w[1].granted.saturating_duration_since(w[0].released))
            .max()
            .unwrap_or_default();
        eprintln!(
            "{checked} grants checked, {} lock errors, longest gap between grants {gap:?}",
            self.errors.load(Ordering::SeqCst)
        );
        gap
    }
}
