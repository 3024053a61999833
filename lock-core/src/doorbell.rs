//! Doorbells: how a lock's clients wake each other when the store cannot push.
//!
//! Cassandra has no way to tell a waiter that its turn came (the thesis, section 6), but the
//! lock's own clients can: whoever releases the lock knows who is next. A [`Doorbell`] is one
//! process's side of that: it listens for rings addressed to its waiters and rings others'.
//! A waiter writes its doorbell's [`Doorbell::address`] into its queue cell, registers with
//! [`Doorbell::listen`], and whoever reads that cell can [`Doorbell::ring`] it.
//!
//! A ring is a hint, never a grant: it is best effort (it may be lost, late or duplicated), and
//! a woken waiter still takes the lock through the store. It names the lock, the waiter (its
//! owner id) and the waiter's place in the queue (its ticket); a ring for a place the waiter no
//! longer holds is dropped, so a stale ring never wakes a later request.
//!
//! Two transports:
//! - [`LocalDoorbells`]: in one process, for the embedded store; each ring is delivered after
//!   a delay the caller models (the embedded store gives the one-way latency of its network:
//!   half a round trip with jitter, from its seeded RNG) and may be dropped or delayed on
//!   purpose ([`LocalDoorbells::set_faults`]).
//! - [`UdpDoorbells`]: one UDP socket per process; the address is `udp://host:port`, and each
//!   datagram carries `lock \t owner \t ticket`. Rings to an address nobody listens on are
//!   lost, as UDP is.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// One process's doorbells.
pub trait Doorbell: Send + Sync + 'static {
    /// Where others ring this process's waiters (written into queue cells).
    fn address(&self) -> String;
    /// `owner` waits for lock `lock_id` at place `ticket`: rings for exactly that are
    /// delivered to the returned [`Notify`] (a ring while nobody waits is kept as one permit).
    /// A new registration of the same owner and lock replaces the old one.
    fn listen(&self, lock_id: &str, owner: &str, ticket: &str) -> Arc<Notify>;
    /// `owner` no longer waits for `lock_id`.
    fn forget(&self, lock_id: &str, owner: &str);
    /// Ring `owner`'s place `ticket` on `lock_id` at `address`. Best effort: never fails, never
    /// waits for delivery.
    fn ring(&self, address: &str, lock_id: &str, owner: &str, ticket: &str);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A waiter's key: (lock id, owner id).
type WaiterKey = (String, String);

/// The waiters of one process, by (lock, owner): their place (ticket) and their bell.
#[derive(Default)]
struct Registry {
    waiters: Mutex<HashMap<WaiterKey, (String, Arc<Notify>)>>,
    delivered: std::sync::atomic::AtomicU64,
}

impl Registry {
    fn listen(&self, lock_id: &str, owner: &str, ticket: &str) -> Arc<Notify> {
        let bell = Arc::new(Notify::new());
        lock(&self.waiters)
            .insert((lock_id.to_owned(), owner.to_owned()), (ticket.to_owned(), Arc::clone(&bell)));
        bell
    }

    fn forget(&self, lock_id: &str, owner: &str) {
        lock(&self.waiters).remove(&(lock_id.to_owned(), owner.to_owned()));
    }

    /// Wakes the waiter if it still waits at that place; true when it did.
    fn deliver(&self, lock_id: &str, owner: &str, ticket: &str) -> bool {
        let waiters = lock(&self.waiters);
        match waiters.get(&(lock_id.to_owned(), owner.to_owned())) {
            Some((t, bell)) if t == ticket => {
                bell.notify_one();
                self.delivered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }
}

/// What the fault switches do to rings ([`LocalDoorbells::set_faults`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RingFaults {
    /// The fraction of rings lost (0.0 to 1.0).
    pub drop: f64,
    /// Extra delay added to every ring delivered.
    pub delay: Duration,
}

/// Doorbells within one process: each ring is delivered after `delay()` (plus any fault
/// delay) on the current tokio runtime, by a task of its own.
pub struct LocalDoorbells {
    registry: Arc<Registry>,
    delay: Box<dyn Fn() -> Duration + Send + Sync>,
    faults: Mutex<(RingFaults, StdRng)>,
    rung: std::sync::atomic::AtomicU64,
}

impl LocalDoorbells {
    /// Doorbells whose rings take `delay()` each to arrive; `seed` draws which rings a fault
    /// drops.
    pub fn new(delay: impl Fn() -> Duration + Send + Sync + 'static, seed: u64) -> Self {
        LocalDoorbells {
            registry: Arc::default(),
            delay: Box::new(delay),
            faults: Mutex::new((RingFaults::default(), StdRng::seed_from_u64(seed))),
            rung: Default::default(),
        }
    }

    /// From now on drop `faults.drop` of the rings and delay the others by `faults.delay` more
    /// (`RingFaults::default()`: healthy again).
    pub fn set_faults(&self, faults: RingFaults) {
        lock(&self.faults).0 = faults;
    }

    /// Rings sent, and rings that woke a waiter.
    pub fn counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.rung.load(Relaxed), self.registry.delivered.load(Relaxed))
    }
}

/// The address of every [`LocalDoorbells`].
pub const LOCAL_ADDRESS: &str = "local";

impl Doorbell for LocalDoorbells {
    fn address(&self) -> String {
        LOCAL_ADDRESS.to_owned()
    }

    fn listen(&self, lock_id: &str, owner: &str, ticket: &str) -> Arc<Notify> {
        self.registry.listen(lock_id, owner, ticket)
    }

    fn forget(&self, lock_id: &str, owner: &str) {
        self.registry.forget(lock_id, owner);
    }

    fn ring(&self, address: &str, lock_id: &str, owner: &str, ticket: &str) {
        self.rung.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if address != LOCAL_ADDRESS {
            return;
        }
        let extra = {
            let mut f = lock(&self.faults);
            let (faults, rng) = &mut *f;
            if faults.drop > 0.0 && rng.random_bool(faults.drop.clamp(0.0, 1.0)) {
                return;
            }
            faults.delay
        };
        let delay = (self.delay)() + extra;
        let registry = Arc::clone(&self.registry);
        let (lock_id, owner, ticket) = (lock_id.to_owned(), owner.to_owned(), ticket.to_owned());
        let _ = crate::rt::try_spawn(async move {
            crate::rt::sleep(delay).await;
            registry.deliver(&lock_id, &owner, &ticket);
        });
    }
}

/// Doorbells over UDP: one socket per process, bound to a loopback or LAN address; rings are
/// datagrams `lock \t owner \t ticket` to `udp://host:port`.
pub struct UdpDoorbells {
    registry: Arc<Registry>,
    /// Sends rings: a plain non-blocking socket (a tokio socket's `try_send_to` refuses until
    /// the runtime has seen it writable), a clone of the one the listener reads.
    sender: std::net::UdpSocket,
    address: SocketAddr,
    listener: crate::rt::AbortHandle,
}

impl UdpDoorbells {
    /// Binds `bind` (e.g. `127.0.0.1:0`, or this host's address on the cluster's network so
    /// that other hosts can ring it) and starts listening on the current tokio runtime.
    pub async fn bind(bind: SocketAddr) -> std::io::Result<Arc<Self>> {
        let std_socket = std::net::UdpSocket::bind(bind)?;
        std_socket.set_nonblocking(true)?;
        let sender = std_socket.try_clone()?;
        let socket = tokio::net::UdpSocket::from_std(std_socket)?;
        let address = socket.local_addr()?;
        let registry: Arc<Registry> = Arc::default();
        let task = crate::rt::spawn({
            let registry = Arc::clone(&registry);
            async move {
                let mut buf = vec![0u8; 2048];
                loop {
                    let n = match socket.recv_from(&mut buf).await {
                        Ok((n, _)) => n,
                        // Never spin on a socket that keeps failing.
                        Err(_) => {
                            crate::rt::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let Ok(text) = std::str::from_utf8(&buf[..n]) else { continue };
                    let mut fields = text.split('\t');
                    if let (Some(l), Some(o), Some(t), None) =
                        (fields.next(), fields.next(), fields.next(), fields.next())
                    {
                        registry.deliver(l, o, t);
                    }
                }
            }
        });
        Ok(Arc::new(UdpDoorbells { registry, sender, address, listener: task.abort_handle() }))
    }

    /// The bound socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Rings that woke a waiter of this process.
    pub fn delivered(&self) -> u64 {
        self.registry.delivered.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for UdpDoorbells {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl Doorbell for UdpDoorbells {
    fn address(&self) -> String {
        format!("udp://{}", self.address)
    }

    fn listen(&self, lock_id: &str, owner: &str, ticket: &str) -> Arc<Notify> {
        self.registry.listen(lock_id, owner, ticket)
    }

    fn forget(&self, lock_id: &str, owner: &str) {
        self.registry.forget(lock_id, owner);
    }

    fn ring(&self, address: &str, lock_id: &str, owner: &str, ticket: &str) {
        let Some(to) = address.strip_prefix("udp://").and_then(|a| a.parse::<SocketAddr>().ok())
        else {
            return;
        };
        // A full send buffer or an unreachable address loses the ring: the fallback poll covers it.
        let _ = self.sender.send_to(format!("{lock_id}\t{owner}\t{ticket}").as_bytes(), to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_local_ring_arrives_after_its_delay_and_only_for_the_current_place() {
        let bells = LocalDoorbells::new(|| Duration::from_millis(3), 1);
        let bell = bells.listen("L", "a", "0001");
        let start = crate::rt::now();
        bells.ring(LOCAL_ADDRESS, "L", "a", "0001");
        bell.notified().await;
        assert_eq!(crate::rt::elapsed(start), Duration::from_millis(3));
        // A ring for an older place is dropped.
        bells.ring(LOCAL_ADDRESS, "L", "a", "0000");
        let late = crate::rt::timeout(Duration::from_secs(1), bell.notified()).await;
        assert!(late.is_err(), "a stale ring woke the waiter");
        assert_eq!(bells.counts(), (2, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn dropped_rings_never_arrive() {
        let bells = LocalDoorbells::new(|| Duration::ZERO, 7);
        bells.set_faults(RingFaults { drop: 1.0, delay: Duration::ZERO });
        let bell = bells.listen("L", "a", "1");
        bells.ring(LOCAL_ADDRESS, "L", "a", "1");
        assert!(crate::rt::timeout(Duration::from_secs(1), bell.notified()).await.is_err());
    }

    #[tokio::test]
    async fn udp_rings_cross_sockets_and_unknown_waiters_are_ignored() {
        let a = UdpDoorbells::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let b = UdpDoorbells::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let bell = b.listen("L", "w", "t1");
        a.ring(&b.address(), "L", "nobody", "t1");
        a.ring(&b.address(), "L", "w", "t1");
        crate::rt::timeout(Duration::from_secs(5), bell.notified())
            .await
            .expect("the ring crossed");
        assert_eq!(b.delivered(), 1);
        // Garbage addresses are ignored.
        a.ring("tcp://nowhere", "L", "w", "t1");
        a.ring("udp://not-an-address", "L", "w", "t1");
    }
}
