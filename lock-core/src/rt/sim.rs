//! The simulation executor: one thread, a virtual clock, a timer heap.
//!
//! # Design
//! - **Time** is a count of nanoseconds since the simulation began. It moves only when no
//!   task can run: then it jumps to the earliest timer, and every timer due at that instant
//!   fires at once. A simulated hour of waiting costs nothing; a simulated microsecond of
//!   work costs whatever the work costs.
//! - **Tasks** live in a slab; a woken task's index goes to the back of a ready queue, and the
//!   queue runs first in, first out. A task woken twice before it runs runs once.
//! - **Timers** sit in a heap ordered by due time, then tie-breaker, then slot.
//! - **Ties.** Timers due at one instant fire in an order the seed draws (each timer gets a
//!   random tie-breaker when it is set), so which of two contenders whose store replies
//!   arrive in the same nanosecond goes first is neither fixed by who asked first nor left to
//!   chance: one seed, one order.
//! - **Cancellation.** A dropped sleep frees its slot; its entry in the heap goes stale and is
//!   skipped when it comes up, so a timeout that did not fire costs one heap entry and no
//!   wake-up.
//! - **Stalls.** When no task can run and no timer is set while the main future still waits,
//!   nothing could ever wake it: [`Simulation::block_on`] panics saying so, where a paused
//!   tokio runtime would hang.
//! - **Panics** in a task unwind through [`Simulation::block_on`]: a simulated run is one
//!   program, and a panic anywhere in it is that program's failure.
//!
//! Wakers are `Send` and `Sync` (tokio's synchronisation types require it), yet the ready
//! queue is a plain queue of the simulation's thread: a waker called on that thread, while
//! the simulation is entered, queues its task there directly. A waker called anywhere else
//! (another thread, or after the simulation ended) queues it behind a mutex instead, and the
//! executor moves those tasks to the back of its own queue before it runs the next task.

use super::JoinError;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tokio::time::Instant;

/// Distinguishes simulations, so that a sleep made in one is never freed in another.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static CURRENT: RefCell<Option<Rc<Core>>> = const { RefCell::new(None) };
}

fn with_core<R>(f: impl FnOnce(&Core) -> R) -> Option<R> {
    CURRENT.with(|c| c.borrow().as_deref().map(f))
}

/// Whether this thread runs inside a simulation.
pub(crate) fn active() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// The virtual time, inside a simulation.
pub(crate) fn now() -> Option<Instant> {
    with_core(|core| core.instant(core.now.get()))
}

type TaskFuture = Pin<Box<dyn Future<Output = ()>>>;

/// A timer heap entry: due time, seeded tie-breaker, slot, slot generation.
type Entry = (u64, u64, u32, u32);

/// The timers, earliest entry first: a min-heap whose nodes have four children, so that a
/// pop walks half as many levels as in a binary heap. Entries are plain values compared as
/// a whole, so any correct heap pops them in the same order.
#[derive(Default)]
struct TimerHeap(Vec<Entry>);

impl TimerHeap {
    fn peek(&self) -> Option<&Entry> {
        self.0.first()
    }

    fn push(&mut self, entry: Entry) {
        let heap = &mut self.0;
        let mut i = heap.len();
        heap.push(entry);
        while i > 0 {
            let parent = (i - 1) / 4;
            if heap[parent] <= entry {
                break;
            }
            heap[i] = heap[parent];
            i = parent;
        }
        heap[i] = entry;
    }

    fn pop(&mut self) -> Option<Entry> {
        let heap = &mut self.0;
        let last = heap.pop()?;
        let Some(&top) = heap.first() else { return Some(last) };
        let n = heap.len();
        let mut i = 0;
        loop {
            let first = 4 * i + 1;
            if first >= n {
                break;
            }
            let mut least = first;
            for child in first + 1..(first + 4).min(n) {
                if heap[child] < heap[least] {
                    least = child;
                }
            }
            if heap[least] >= last {
                break;
            }
            heap[i] = heap[least];
            i = least;
        }
        heap[i] = last;
        Some(top)
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

struct TimerSlot {
    generation: u32,
    waker: Option<Waker>,
}

struct TaskSlot {
    generation: u32,
    future: Option<TaskFuture>,
    header: Option<Arc<Header>>,
    waker: Option<Waker>,
}

/// Tasks woken away from the simulation's thread (or outside the simulation), in order.
struct RemoteQueue {
    /// The simulation the tasks belong to.
    sim: u64,
    /// Set when `queue` may hold tasks.
    pending: AtomicBool,
    queue: Mutex<VecDeque<(u32, u32)>>,
}

impl RemoteQueue {
    fn new(sim: u64) -> Self {
        RemoteQueue { sim, pending: AtomicBool::new(false), queue: Mutex::new(VecDeque::new()) }
    }

    /// Queues `task` on its simulation's own queue when this thread runs that simulation,
    /// behind the mutex otherwise.
    fn push(&self, task: (u32, u32)) {
        let local = with_core(|core| {
            if core.id == self.sim {
                core.ready.borrow_mut().push_back(task);
            }
            core.id == self.sim
        });
        if local != Some(true) {
            self.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(task);
            self.pending.store(true, Ordering::Release);
        }
    }

    /// Moves every task queued behind the mutex, in order, to the back of `ready`.
    fn drain_into(&self, ready: &RefCell<VecDeque<(u32, u32)>>) {
        if self.pending.swap(false, Ordering::AcqRel) {
            ready.borrow_mut().append(&mut self.queue.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }
}

/// What a task's waker and join handle share.
struct Header {
    index: u32,
    generation: u32,
    queued: AtomicBool,
    aborted: AtomicBool,
    remote: Arc<RemoteQueue>,
}

impl Wake for Header {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.remote.push((self.index, self.generation));
        }
    }
}

struct Core {
    id: u64,
    base: std::time::Instant,
    now: Cell<u64>,
    rng: Cell<u64>,
    timers: RefCell<TimerHeap>,
    slots: RefCell<Vec<TimerSlot>>,
    free_slots: RefCell<Vec<u32>>,
    tasks: RefCell<Vec<TaskSlot>>,
    free_tasks: RefCell<Vec<u32>>,
    /// The tasks that were woken, in order.
    ready: RefCell<VecDeque<(u32, u32)>>,
    remote: Arc<RemoteQueue>,
    due: RefCell<Vec<Waker>>,
    closing: Cell<bool>,
    polls: Cell<u64>,
    fired: Cell<u64>,
}

impl Core {
    fn instant(&self, nanos: u64) -> Instant {
        Instant::from_std(self.base + Duration::from_nanos(nanos))
    }

    fn nanos(&self, at: Instant) -> u64 {
        let since = at.into_std().saturating_duration_since(self.base);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }

    /// splitmix64: the tie-breakers' stream.
    fn draw(&self) -> u64 {
        let mut z = self.rng.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.rng.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn set_timer(&self, at: u64, waker: Waker) -> (u32, u32) {
        let mut slots = self.slots.borrow_mut();
        let slot = match self.free_slots.borrow_mut().pop() {
            Some(i) => {
                slots[i as usize].waker = Some(waker);
                i
            }
            None => {
                slots.push(TimerSlot { generation: 0, waker: Some(waker) });
                (slots.len() - 1) as u32
            }
        };
        let generation = slots[slot as usize].generation;
        let tie = self.draw();
        self.timers.borrow_mut().push((at, tie, slot, generation));
        (slot, generation)
    }

    fn update_timer(&self, slot: u32, generation: u32, waker: &Waker) {
        let mut slots = self.slots.borrow_mut();
        let s = &mut slots[slot as usize];
        if s.generation == generation {
            match &s.waker {
                Some(w) if w.will_wake(waker) => {}
                _ => s.waker = Some(waker.clone()),
            }
        }
    }

    fn free_timer(&self, slot: u32, generation: u32) {
        let mut slots = self.slots.borrow_mut();
        let s = &mut slots[slot as usize];
        if s.generation == generation {
            s.generation = s.generation.wrapping_add(1);
            s.waker = None;
            self.free_slots.borrow_mut().push(slot);
        }
    }

    /// Moves the clock to the next due timer and wakes every timer due then. False when no
    /// timer is set.
    fn advance(&self) -> bool {
        {
            let mut timers = self.timers.borrow_mut();
            let mut slots = self.slots.borrow_mut();
            let mut due = self.due.borrow_mut();
            let live =
                |&(_, _, slot, generation): &Entry| slots[slot as usize].generation == generation;
            while timers.peek().is_some_and(|e| !live(e)) {
                timers.pop();
            }
            let Some(&(at, ..)) = timers.peek() else { return false };
            if at > self.now.get() {
                self.now.set(at);
            }
            while let Some(&(t, _, slot, generation)) = timers.peek() {
                if t > at {
                    break;
                }
                timers.pop();
                let s = &mut slots[slot as usize];
                if s.generation == generation {
                    if let Some(w) = s.waker.take() {
                        due.push(w);
                    }
                }
            }
        }
        let due = std::mem::take(&mut *self.due.borrow_mut());
        self.fired.set(self.fired.get() + due.len() as u64);
        let mut due = due;
        for w in due.drain(..) {
            w.wake();
        }
        // Keep the buffer's capacity.
        *self.due.borrow_mut() = due;
        true
    }

    fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        let state = Arc::new(JoinState::<F::Output>::default());
        let completer = Completer { state: state.clone(), done: false };
        let task = async move {
            let mut completer = completer;
            let out = future.await;
            completer.finish(out);
        };
        if self.closing.get() {
            drop(task);
            return JoinHandle { state };
        }
        let mut tasks = self.tasks.borrow_mut();
        let index = match self.free_tasks.borrow_mut().pop() {
            Some(i) => i,
            None => {
                tasks.push(TaskSlot { generation: 0, future: None, header: None, waker: None });
                (tasks.len() - 1) as u32
            }
        };
        let slot = &mut tasks[index as usize];
        let header = Arc::new(Header {
            index,
            generation: slot.generation,
            queued: AtomicBool::new(true),
            aborted: AtomicBool::new(false),
            remote: self.remote.clone(),
        });
        slot.future = Some(Box::pin(task));
        slot.waker = Some(Waker::from(header.clone()));
        slot.header = Some(header.clone());
        *state.header.lock().unwrap_or_else(|e| e.into_inner()) = Some(header);
        self.ready.borrow_mut().push_back((index, slot.generation));
        JoinHandle { state }
    }

    fn free_task(&self, index: u32) {
        let mut tasks = self.tasks.borrow_mut();
        let slot = &mut tasks[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.future = None;
        slot.header = None;
        slot.waker = None;
        self.free_tasks.borrow_mut().push(index);
    }

    /// Polls task `index` once, if it is still the task that was woken.
    fn run(&self, index: u32, generation: u32) {
        // The future, its waker and its header are taken out of the slot while it runs (a
        // task it spawns may grow the slab) and put back after: moved, not cloned.
        let (mut future, waker, header) = {
            let mut tasks = self.tasks.borrow_mut();
            let Some(slot) = tasks.get_mut(index as usize) else { return };
            if slot.generation != generation {
                return;
            }
            let Some(future) = slot.future.take() else { return };
            let waker = slot.waker.take().expect("a live task has a waker");
            let header = slot.header.take().expect("a live task has a header");
            (future, waker, header)
        };
        header.queued.store(false, Ordering::Release);
        if header.aborted.load(Ordering::Acquire) {
            drop(future);
            self.free_task(index);
            return;
        }
        self.polls.set(self.polls.get() + 1);
        let mut cx = Context::from_waker(&waker);
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(()) => {
                drop(future);
                self.free_task(index);
            }
            Poll::Pending => {
                let mut tasks = self.tasks.borrow_mut();
                let slot = &mut tasks[index as usize];
                slot.future = Some(future);
                slot.waker = Some(waker);
                slot.header = Some(header);
            }
        }
    }

    /// Drops every task, including those spawned while the others are dropped.
    fn close(&self) {
        self.closing.set(true);
        loop {
            let futures: Vec<TaskFuture> =
                self.tasks.borrow_mut().iter_mut().filter_map(|s| s.future.take()).collect();
            if futures.is_empty() {
                break;
            }
            drop(futures);
        }
        self.timers.borrow_mut().clear();
    }
}

/// Makes `core` this thread's simulation until dropped, and puts back whatever was before.
struct Enter(Option<Rc<Core>>);

impl Enter {
    fn new(core: Rc<Core>) -> Self {
        Enter(CURRENT.with(|c| c.borrow_mut().replace(core)))
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// A deterministic executor in simulated time (see the [module docs](self)).
///
/// ```
/// use lock_core::rt::{self, Simulation};
/// use std::time::Duration;
///
/// let mut sim = Simulation::new(7);
/// let waited = sim.block_on(async {
///     let start = rt::now();
///     let task = rt::spawn(async { rt::sleep(Duration::from_secs(3600)).await; 42 });
///     let answer = task.await.unwrap();
///     (answer, rt::now() - start)
/// });
/// assert_eq!(waited, (42, Duration::from_secs(3600)));
/// ```
pub struct Simulation {
    core: Rc<Core>,
}

impl Simulation {
    /// A simulation whose ties `seed` orders, its clock at zero.
    pub fn new(seed: u64) -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Simulation {
            core: Rc::new(Core {
                id,
                base: std::time::Instant::now(),
                now: Cell::new(0),
                rng: Cell::new(seed),
                timers: RefCell::new(TimerHeap::default()),
                slots: RefCell::new(Vec::new()),
                free_slots: RefCell::new(Vec::new()),
                tasks: RefCell::new(Vec::new()),
                free_tasks: RefCell::new(Vec::new()),
                ready: RefCell::new(VecDeque::new()),
                remote: Arc::new(RemoteQueue::new(id)),
                due: RefCell::new(Vec::new()),
                closing: Cell::new(false),
                polls: Cell::new(0),
                fired: Cell::new(0),
            }),
        }
    }

    /// Runs `future` to its end, with every task it spawns, in simulated time.
    ///
    /// # Panics
    /// When a task panics, and when the simulation stalls: `future` still waits while no
    /// task can run and no timer is set.
    pub fn block_on<F: Future>(&mut self, future: F) -> F::Output {
        let _enter = Enter::new(self.core.clone());
        let core = &*self.core;
        let main = Arc::new(MainWaker(AtomicBool::new(true)));
        let waker = Waker::from(main.clone());
        let mut cx = Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        loop {
            if main.0.swap(false, Ordering::AcqRel) {
                if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                    return out;
                }
            }
            // First in, first out; the queue is not borrowed while a task runs, so the tasks
            // it wakes go to the back.
            loop {
                if core.remote.pending.load(Ordering::Relaxed) {
                    core.remote.drain_into(&core.ready);
                }
                let next = core.ready.borrow_mut().pop_front();
                match next {
                    Some((index, generation)) => core.run(index, generation),
                    None => break,
                }
            }
            if main.0.load(Ordering::Acquire) {
                continue;
            }
            if !core.advance() {
                panic!(
                    "the simulation stalled at {:?} of simulated time: no task can run, no \
                     timer is set, and the future run by block_on still waits",
                    Duration::from_nanos(core.now.get())
                );
            }
        }
    }

    /// Simulated time since the simulation began.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.core.now.get())
    }

    /// Task polls so far.
    pub fn polls(&self) -> u64 {
        self.core.polls.get()
    }

    /// Timers fired so far.
    pub fn timers_fired(&self) -> u64 {
        self.core.fired.get()
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        // Tasks are dropped inside the simulation, so that what their destructors start
        // (a spawned release) finds it, closing, and is dropped in turn.
        let _enter = Enter::new(self.core.clone());
        self.core.close();
    }
}

struct MainWaker(AtomicBool);

impl Wake for MainWaker {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// A sleep in the simulation.
pub(crate) struct Timer {
    core: u64,
    at: u64,
    deadline: Instant,
    slot: Option<(u32, u32)>,
}

impl Timer {
    /// A timer due at `deadline`, inside a simulation; `None` outside one.
    pub(crate) fn new(deadline: Instant) -> Option<Timer> {
        with_core(|core| Timer { core: core.id, at: core.nanos(deadline), deadline, slot: None })
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        let slot = self.slot;
        let (ready, set) = with_core(|core| {
            if core.id != self.core || core.now.get() >= at {
                return (true, None);
            }
            match slot {
                None => (false, Some(core.set_timer(at, cx.waker().clone()))),
                Some((s, g)) => {
                    core.update_timer(s, g, cx.waker());
                    (false, None)
                }
            }
        })
        // Outside its simulation a timer can never fire: it ends at once rather than hang.
        .unwrap_or((true, None));
        if set.is_some() {
            self.slot = set;
        }
        if ready {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some((slot, generation)) = self.slot {
            let id = self.core;
            with_core(|core| {
                if core.id == id {
                    core.free_timer(slot, generation)
                }
            });
        }
    }
}

/// Yields once: the task goes to the back of the ready queue.
#[derive(Default)]
pub(crate) struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Spawns on this thread's simulation, or gives the future back outside one.
pub(crate) fn spawn<F>(future: F) -> Result<JoinHandle<F::Output>, F>
where
    F: Future + 'static,
    F::Output: 'static,
{
    CURRENT.with(|c| match c.borrow().as_deref() {
        Some(core) => Ok(core.spawn(future)),
        None => Err(future),
    })
}

/// A task's output on its way to the join handle.
struct Outcome<T> {
    result: Option<Result<T, JoinError>>,
    waiter: Option<Waker>,
    finished: bool,
}

struct JoinState<T> {
    result: Mutex<Outcome<T>>,
    header: Mutex<Option<Arc<Header>>>,
}

impl<T> Default for JoinState<T> {
    fn default() -> Self {
        JoinState {
            result: Mutex::new(Outcome { result: None, waiter: None, finished: false }),
            header: Mutex::new(None),
        }
    }
}

impl<T> JoinState<T> {
    fn complete(&self, result: Result<T, JoinError>) {
        let waker = {
            let mut r = self.result.lock().unwrap_or_else(|e| e.into_inner());
            r.result = Some(result);
            r.finished = true;
            r.waiter.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
    fn finished(&self) -> bool {
        self.result.lock().unwrap_or_else(|e| e.into_inner()).finished
    }
    fn abort(&self) {
        if let Some(h) = self.header.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            h.aborted.store(true, Ordering::Release);
            h.wake_by_ref();
        }
    }
}

/// Hands a task's output to its join handle, or `Cancelled` when the task is dropped first.
struct Completer<T> {
    state: Arc<JoinState<T>>,
    done: bool,
}

impl<T> Completer<T> {
    fn finish(&mut self, out: T) {
        self.done = true;
        self.state.complete(Ok(out));
    }
}

impl<T> Drop for Completer<T> {
    fn drop(&mut self) {
        if !self.done {
            self.state.complete(Err(JoinError::Cancelled));
        }
    }
}

/// A task of the simulation.
pub(crate) struct JoinHandle<T> {
    state: Arc<JoinState<T>>,
}

impl<T: Send + 'static> JoinHandle<T> {
    pub(crate) fn abort(&self) {
        self.state.abort()
    }
    pub(crate) fn is_finished(&self) -> bool {
        self.state.finished()
    }
    pub(crate) fn abort_handle(&self) -> AbortHandle {
        let state: Arc<dyn Abortable> = self.state.clone();
        AbortHandle(state)
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut r = self.state.result.lock().unwrap_or_else(|e| e.into_inner());
        match r.result.take() {
            Some(result) => Poll::Ready(result),
            None => {
                assert!(!r.finished, "a join handle polled after it gave its output");
                r.waiter = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

trait Abortable: Send + Sync {
    fn abort(&self);
    fn finished(&self) -> bool;
}

impl<T: Send> Abortable for JoinState<T> {
    fn abort(&self) {
        JoinState::abort(self)
    }
    fn finished(&self) -> bool {
        JoinState::finished(self)
    }
}

/// Aborts a task of the simulation.
#[derive(Clone)]
pub(crate) struct AbortHandle(Arc<dyn Abortable>);

impl AbortHandle {
    pub(crate) fn abort(&self) {
        self.0.abort()
    }
    pub(crate) fn is_finished(&self) -> bool {
        self.0.finished()
    }
}

#[cfg(test)]
mod tests;
