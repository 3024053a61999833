//! Backends: what a run opens before its contenders start, and what each contender gets.
//!
//! Only the embedded store is built into this binary so far. The other [`BackendKind`]s are
//! known to the command line and fail with a clear message in [`Backend::open`]; wiring one
//! means a variant in [`BackendClient`], a branch in [`Backend::open`] and in
//! [`Backend::contender`], and the backend's name in the algorithms' registry entries.

use crate::config::{BackendKind, RunConfig, TimeSourceKind};
use lock_core::context::ClientContext;
use lock_core::embedded::{EmbeddedClient, EmbeddedConfig, EmbeddedStore, StoreCounters};
use lock_core::time::{GlobalTime, GlobalTimeService, HybridClock};
use std::sync::Arc;
use std::time::Duration;

/// What one contender talks to.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum BackendClient {
    /// A client handle on the embedded store (its own id, counters and clock skew).
    Embedded(EmbeddedClient),
}

/// Checks, before anything runs, that `kind` is built into this binary.
pub fn check_available(kind: BackendKind) -> Result<(), String> {
    match kind {
        BackendKind::Embedded => Ok(()),
        other => Err(format!(
            "the {other} backend is not yet built in this binary (only --backend embedded is, for now)"
        )),
    }
}

/// An opened backend: the store a run's contenders share, and services the run needs (the
/// GlobalTime service).
pub struct Backend {
    kind: BackendKind,
    store: EmbeddedStore,
    _time_service: Option<GlobalTimeService>,
}

impl Backend {
    /// Number of replicas of the GlobalTime service when `--time-source global`.
    pub const TIME_SERVICE_REPLICAS: usize = 3;

    /// Opens the backend for `cfg`. Call inside the run's tokio runtime: the embedded store's
    /// clock starts now. With `--time-source global` the service is started and its first
    /// value awaited.
    pub async fn open(cfg: &RunConfig) -> Result<Backend, String> {
        check_available(cfg.backend)?;
        let latency = cfg.latency.model();
        let store = EmbeddedStore::new(EmbeddedConfig {
            replicas: cfg.replicas,
            latency: lock_core::embedded::LatencyModel::new(
                cfg.scaled(latency.fixed),
                cfg.scaled(latency.jitter),
            ),
            seed: cfg.seed,
            request_timeout: cfg.scaled(EmbeddedConfig::DEFAULT_REQUEST_TIMEOUT),
            gc_grace: cfg.scaled(cfg.gc_grace),
        });
        let time_service = if cfg.time_source == TimeSourceKind::Global {
            let replicas = cfg
                .service_skews(Self::TIME_SERVICE_REPLICAS)
                .into_iter()
                .enumerate()
                .map(|(i, skew)| {
                    let client = store
                        .client(format!("time-service-{i}"))
                        .with_skew(skew * cfg.time_scale() as i64);
                    let clock = client.clock();
                    (client, clock)
                })
                .collect();
            let service = GlobalTimeService::start(
                replicas,
                cfg.scaled(GlobalTimeService::DEFAULT_PERIOD),
                cfg.consistency,
            );
            // The first updates need a read and a write; wait until the cell exists.
            let reader = GlobalTime::new(store.client("time-service-probe"), cfg.consistency);
            let mut waited = Duration::ZERO;
            let step = cfg.scaled(Duration::from_millis(5));
            while !matches!(reader.read().await, Ok(Some(_))) {
                if waited > cfg.scaled(Duration::from_secs(5)) {
                    return Err("the GlobalTime service wrote no value within 5 s".into());
                }
                tokio::time::sleep(step).await;
                waited += step;
            }
            Some(service)
        } else {
            None
        };
        store.reset_counters();
        Ok(Backend {
            kind: cfg.backend,
            store,
            _time_service: time_service,
        })
    }

    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// The handle and context of contender `index`, with its clock skewed by `skew_us` (of the
    /// model) and the run's time source, TTL and consistency, all on the tokio clock's scale
    /// ([`RunConfig::time_scale`]).
    pub fn contender(
        &self,
        cfg: &RunConfig,
        index: usize,
        skew_us: i64,
    ) -> (BackendClient, ClientContext) {
        let owner = RunConfig::owner_id(index);
        let client = self
            .store
            .client(owner.clone())
            .with_skew(skew_us * cfg.time_scale() as i64);
        let clock = client.clock();
        let mut ctx = ClientContext::new(owner, clock, cfg.contender_seed(index))
            .with_ttl(cfg.scaled(cfg.ttl))
            .with_consistency(cfg.consistency);
        match cfg.time_source {
            TimeSourceKind::Local => {}
            TimeSourceKind::Hlc => ctx = ctx.with_time(Arc::new(HybridClock::new(clock))),
            TimeSourceKind::Global => {
                ctx = ctx.with_time(Arc::new(GlobalTime::new(client.clone(), cfg.consistency)))
            }
        }
        (BackendClient::Embedded(client), ctx)
    }

    /// The store's request counters since the contenders started, when the backend counts.
    pub fn counters(&self) -> Option<StoreCounters> {
        Some(self.store.counters())
    }

    /// A handle that reads the counters later (from another task), when the backend counts.
    pub fn counters_handle(&self) -> Option<EmbeddedStore> {
        Some(self.store.clone())
    }
}
