//! Workers: the threads that run tasks, their queues, stealing, parking.
//!
//! Each worker owns a LIFO `crossbeam_deque::Worker` (at most
//! [`LOCAL_CAP`] tasks, crossbeam's smallest buffer, so it never
//! reallocates); other workers steal from it. Everything else waits in the
//! executor's `TransferStack` injector, which every worker takes from:
//! threads that are not workers submit there, and a worker whose deque is
//! full spills there. No task is ever kept where only one worker can reach
//! it: a worker that blocks inside a task strands nothing (a worker
//! collects a burst of spilled tasks privately and publishes them, with one
//! CAS, before it runs anything else).
//!
//! # Sleeping without lost wake-ups
//! `sleep` packs `(epoch << 16) | sleepers` in one atomic. A worker about to
//! park reads the epoch, looks for work once more, then adds itself to
//! `sleepers` with a read-modify-write that also returns the epoch: if it
//! moved, work may have arrived and the worker looks again instead of
//! parking. A submitter publishes its task, then bumps the epoch with a
//! read-modify-write that returns `sleepers`: non-zero means someone may be
//! parked, so it wakes one. Both RMWs hit one atomic, so they are ordered:
//! either the submitter sees the sleeper, or the sleeper sees the new
//! epoch (and, through the RMW's acquire, the task).

use std::ptr::NonNull;
use std::time::Instant;

use super::deque::{Steal, Stealer, Worker as Deque};
use crossbeam_utils::CachePadded;

use super::kind::{WaitLink, WaitState};
use super::scope::ScopeInner;
use super::sleep::SleepState;
use super::task::{ForkLink, Outcome, QueueLink, Task, TaskPtr, FLAG_CANCELLED, FLAG_FAILED};
use crate::error::{Error, ErrorKind};
use crate::list::{DList, Handle, SList, TransferStack};
use crate::pool::{BlockCache, BlockPool, BlockSource, RawBlock};
use crate::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use crate::sync::thread::Thread;
use crate::sync::{liveness, Arc, Mutex, MutexGuard, UnsafeCell};
use crate::unwind::{panic_error, FirstPanic};

/// Tasks a worker's deque holds before the rest spill to the injector.
/// (1 under the model checker, so that small models reach the spill path.)
pub(crate) const LOCAL_CAP: usize = if cfg!(fenceline_loom) { 1 } else { 64 };

/// Most tasks in one chunk of the injector: what a taker's empty deque
/// holds, plus the one it runs. (3 under the model checker, more than its
/// deque and the task run, so that small models reach the give-back of a
/// chunk's rest.)
pub(crate) const CHUNK: usize = if cfg!(fenceline_loom) {
    3
} else {
    LOCAL_CAP + 1
};

/// One worker's slot in the shared state.
///
/// Waking a worker takes no lock. The worker writes its thread handle
/// once, when it starts, before it first sets `sleeping`; a waker reads the
/// handle only after a `swap` that took `sleeping` from `true` (acquiring
/// that write). So the handle is never read before it is written, and
/// never written again.
pub(crate) struct Slot {
    thread: UnsafeCell<Option<Thread>>,
    /// Set by the worker before it parks; cleared by whoever wakes it.
    sleeping: AtomicBool,
    /// What this worker did, for `Device::stats` (its own cache line: the
    /// worker writes it, wakers touch `sleeping`).
    pub(crate) counters: CachePadded<WorkerCounters>,
}

/// A worker's event counts and its `running` flag, written only by that
/// worker (loads and stores, no read-modify-write), read by anyone.
#[derive(Default)]
pub(crate) struct WorkerCounters {
    /// Times it parked.
    pub(crate) parks: AtomicU64,
    /// Times it was woken from a park to new work.
    pub(crate) wakeups: AtomicU64,
    /// Tasks it took from another worker's deque (a batch counts once).
    pub(crate) steals: AtomicU64,
    /// Busy: set when the worker starts a task after being idle, cleared
    /// when it next finds no task (enters `Worker::idle`). While it is
    /// clear, the worker looks at the executor's turn slots before it runs
    /// any task (user code that may block): see
    /// [`ExecutorState::offer_turn`], the protocol it is half of.
    running: AtomicBool,
}

impl WorkerCounters {
    /// Adds one to a counter of the calling worker's own slot.
    fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

impl Slot {
    fn new() -> Slot {
        Slot {
            thread: UnsafeCell::new(None),
            sleeping: AtomicBool::new(false),
            counters: CachePadded::new(WorkerCounters::default()),
        }
    }

    /// Records the calling thread as this slot's worker.
    ///
    /// # Safety
    /// Called once, by the slot's worker thread, before it first parks.
    pub(crate) unsafe fn register_current(&self) {
        // SAFETY: no waker reads the handle before it acquires the first
        // `sleeping = true`, which the worker stores after this write; the
        // caller calls this once, so there is no other writer.
        self.thread
            .with_mut(|t| unsafe { *t = Some(crate::sync::thread::current()) });
    }

    /// Takes the slot's `sleeping` flag; if the worker was asleep, unparks
    /// it. `true` if it was.
    fn wake(&self) -> bool {
        if !self.sleeping.swap(false, Ordering::AcqRel) {
            return false;
        }
        // SAFETY: the swap read the worker's `true`, stored (Release) after
        // it wrote its handle (`register_current`), which is never written
        // again: this read is ordered after the only write.
        self.thread.with(|t| {
            if let Some(t) = unsafe { &*t } {
                t.unpark();
            }
        });
        true
    }
}

/// State shared by the executor handle, its workers and its tasks.
pub(crate) struct ExecutorState {
    pub(crate) pool: BlockPool,
    /// Ready tasks in chunks of at most [`CHUNK`]: the stack links the
    /// chunks' first tasks through [`ForkLink`] (free once a task is ready:
    /// a barrier unlinks its dependents before releasing them), and each
    /// chunk chains its tasks through [`QueueLink`]. A taker gets a whole
    /// chunk and gives the other chunks back, so a 1024-way fork's spill
    /// is walked once, by the worker that runs it, not taken and given back
    /// whole by each taker in turn.
    pub(crate) injector: TransferStack<ForkLink>,
    pub(crate) stealers: Box<[Stealer<TaskPtr>]>,
    pub(crate) slots: Box<[Slot]>,
    sleep: CachePadded<SleepState>,
    pub(crate) shutdown: AtomicBool,
    /// Tasks created and not yet retired (graphs not submitted included).
    pub(crate) live: AtomicUsize,
    /// Wait tasks parked on a timepoint, for timeouts and shutdown.
    pub(crate) waits: Mutex<DList<WaitLink>>,
    /// `waits.len()`, readable without the lock.
    pub(crate) suspended_waits: AtomicUsize,
    #[cfg_attr(fenceline_loom, allow(dead_code))]
    pub(crate) spin: bool,
    /// Issuer turns offered to the workers ([`offer_turn`](Self::offer_turn)):
    /// one slot per queue of a CPU device, none for a bare executor.
    /// (Each on its own line: a worker reads them when it leaves idle and
    /// when it runs out of local work, an offer writes one.)
    turns: Box<[CachePadded<AtomicPtr<()>>]>,
    /// Runs a turn taken from `turns` (given with them).
    run_turn: Option<TurnRunner>,
}

/// Runs an issuer turn offered through [`ExecutorState::offer_turn`]
/// (type-erased: the executor does not know the queue's backend).
///
/// # Safety
/// The argument is a turn offered through `offer_turn` and taken from its
/// slot by the caller, run once.
pub(crate) type TurnRunner = unsafe fn(NonNull<()>);

// SAFETY: the raw task pointers inside (injector, waits) are owned by the
// structures holding them and only moved between threads with ownership.
unsafe impl Send for ExecutorState {}
// SAFETY: as above; shared access goes through atomics and mutexes.
unsafe impl Sync for ExecutorState {}

impl ExecutorState {
    pub(crate) fn new(
        workers: usize,
        spin: bool,
        stealers: Box<[Stealer<TaskPtr>]>,
        turns: usize,
        run_turn: Option<TurnRunner>,
    ) -> Result<ExecutorState, Error> {
        Ok(ExecutorState {
            pool: BlockPool::with_config(crate::pool::BlockPoolConfig {
                block_size: super::task::TASK_BLOCK,
                align: 64,
                first_chunk_blocks: 256,
                max_blocks: None,
            })?,
            injector: TransferStack::new(),
            stealers,
            slots: (0..workers).map(|_| Slot::new()).collect(),
            sleep: CachePadded::new(SleepState::new()),
            shutdown: AtomicBool::new(false),
            live: AtomicUsize::new(0),
            waits: Mutex::new(DList::new()),
            suspended_waits: AtomicUsize::new(0),
            spin,
            turns: (0..turns)
                .map(|_| CachePadded::new(AtomicPtr::new(std::ptr::null_mut())))
                .collect(),
            run_turn,
        })
    }

    pub(crate) fn lock_waits(&self) -> MutexGuard<'_, DList<WaitLink>> {
        self.waits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pushes a ready task from any thread and wakes a worker.
    pub(crate) fn inject(&self, task: NonNull<Task>) {
        let mut chunk = SList::<QueueLink>::new();
        // SAFETY: the task is ready and ours to hand over, in no queue; it
        // stays allocated until it runs.
        chunk.push_back(unsafe { Handle::from_raw(task) });
        self.push_chunks(Self::chunk(chunk));
        self.notify();
    }

    /// Pushes a whole ready list from any thread and wakes a worker.
    pub(crate) fn inject_list(&self, mut list: SList<QueueLink>) {
        if list.is_empty() {
            return;
        }
        let mut chunks = SList::<ForkLink>::new();
        while !list.is_empty() {
            chunks.append(&mut Self::chunk(list.split_front(CHUNK)));
        }
        self.push_chunks(chunks);
        self.notify();
    }

    /// A non-empty list of ready tasks as one chunk (a one-chunk list).
    pub(crate) fn chunk(list: SList<QueueLink>) -> SList<ForkLink> {
        let mut one = SList::new();
        if let Some(first) = list.into_chain() {
            // SAFETY: the chain's first task stands for the chunk; it is
            // ready, so its fork link is free (see `injector`).
            one.push_back(unsafe { Handle::from_raw(first) });
        }
        one
    }

    pub(crate) fn push_chunks(&self, chunks: SList<ForkLink>) {
        // Ready tasks are independent: the order of chunks means nothing,
        // so no walk to keep it.
        self.injector.push_list_unordered(chunks);
    }

    /// New work was published: bump the epoch; wake one sleeper if any.
    /// The caller holds a reference to the executor (a worker, a graph, a
    /// handle, or one taken for the call).
    pub(crate) fn notify(&self) {
        let sleepers = self.sleep.notify();
        // After the first access: the model checker may run another thread
        // (one that frees the state) just before it.
        liveness::check(self, "the executor's state (worker notified)");
        if sleepers {
            self.wake_one();
        }
    }

    fn wake_one(&self) {
        for slot in self.slots.iter() {
            // Load first: most slots are awake, and a swap would take their
            // cache line from them.
            if slot.sleeping.load(Ordering::Relaxed) && slot.wake() {
                return;
            }
        }
    }

    /// Starts the shutdown: workers exit once no task is left.
    pub(crate) fn begin_shutdown(&self) {
        // Release: a worker that sees the flag (Acquire, in `idle`) also
        // sees the tasks this thread counted in `live` before (a graph made
        // and submitted just before its executor is dropped). With Relaxed
        // on both sides the fences below do not order them when the
        // worker's fence comes first: the teardown model then saw a worker
        // read the flag set and `live` still 0, exit, and strand the graph.
        self.shutdown.store(true, Ordering::Release);
        // Pairs with the fences of `Worker::flush` and `Worker::idle`.
        fence(Ordering::SeqCst);
        self.wake_all();
    }

    /// Wakes every worker (shutdown, or the last task retired under it).
    pub(crate) fn wake_all(&self) {
        self.sleep.notify();
        for slot in self.slots.iter() {
            // Only a worker whose `sleeping` the swap takes from `true` is
            // unparked. One that sets it later read its epoch either before
            // the bump above (its `announce` then sees the epoch moved and
            // it does not park) or after (it then sees what was published
            // before the bump, the shutdown flag included).
            slot.wake();
        }
    }
}

impl Drop for ExecutorState {
    fn drop(&mut self) {
        liveness::died(self as *const ExecutorState);
    }
}

/// The executor's task pool, owned through the executor's state: a
/// worker's block cache holds one, so the pool outlives every cached block
/// however the worker and the executor are dropped.
#[derive(Clone)]
pub(crate) struct TaskPool(pub(crate) Arc<ExecutorState>);

impl std::ops::Deref for TaskPool {
    type Target = BlockPool;

    fn deref(&self) -> &BlockPool {
        &self.0.pool
    }
}

/// A worker's own deque, in an allocation of its own so that two paths
/// on the worker's thread reach it through raw pointers, never through the
/// worker's `&mut`: the worker itself, and a completion's `Graph::submit`
/// during a hop (see [`Hop`]). Everything in it is used through `&`
/// (the deque's methods, a `Cell`).
pub(crate) struct Local {
    /// The worker's index in its executor.
    index: usize,
    deque: Deque<TaskPtr>,
    /// The executor the worker runs for (a hop only lands on a worker of
    /// the executor the graph belongs to).
    exec: *const ExecutorState,
    /// A hop pushed tasks on the deque: the worker announces them (as
    /// its own pushes) unless it is about to run the only one.
    hopped: std::cell::Cell<bool>,
    /// The one task a hop made ready, when it was the only one and the
    /// deque was empty: the worker runs it next, right after the task
    /// whose completion hopped (no deque push and pop, whose pop is a
    /// full fence). Emptied after every run and at every `find`, so a
    /// task never stays here while the worker does anything else.
    next: std::cell::Cell<Option<NonNull<Task>>>,
    /// Tasks [`ExecutorState::hop_alone`] put in `next` without counting
    /// them in `ExecutorState::live`. Each is paid for by the task that
    /// hopped it, which is running then and counted: that one's
    /// retirement on this worker is not subtracted from `live` (`flush`
    /// nets the two), so `live` stays above zero while either is alive.
    uncounted: std::cell::Cell<usize>,
    /// Task blocks, cached per worker (no atomics while the stash lasts):
    /// the worker's retirements and spawns, and the graphs a completion
    /// issues on this thread ([`ExecutorState::worker_cache`]), so a chain
    /// reuses the blocks its last hop freed. Only this thread touches it,
    /// and only through borrows that end before any user code runs (moving
    /// a closure into a block, taking a block back): two of them never
    /// overlap.
    cache: std::cell::UnsafeCell<BlockCache<TaskPool>>,
}

// The model checker's threads need its own thread-locals (they share one
// OS thread); its macro takes no `const` initializer.
#[cfg(not(fenceline_loom))]
std::thread_local! {
    /// The running worker's `Local` on a worker thread (null elsewhere).
    static LOCAL: std::cell::Cell<*const Local> = const { std::cell::Cell::new(std::ptr::null()) };
    /// Set while a completion runs on this thread that lets the graphs it
    /// submits hop onto this worker's deque ([`Hop`]).
    static HOP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
#[cfg(fenceline_loom)]
loom::thread_local! {
    static LOCAL: std::cell::Cell<*const Local> = std::cell::Cell::new(std::ptr::null());
    static HOP: std::cell::Cell<bool> = std::cell::Cell::new(false);
}

/// While alive, the graphs submitted on this thread (a worker of their
/// executor) go on this worker's own deque instead of the injector: the
/// next action of a chain then runs on the worker that completed the one
/// before, with no injector push, no wake-up and no steal. Only for
/// completion code that returns to the worker loop promptly without
/// waiting on anything (a queue action's completion: signals, issues):
/// the worker announces the tasks when it next looks for work, so a
/// caller that blocked instead would leave them unannounced.
pub(crate) struct Hop {
    was: bool,
}

impl Hop {
    pub(crate) fn enter() -> Hop {
        Hop {
            was: HOP.with(|h| h.replace(true)),
        }
    }
}

impl Drop for Hop {
    fn drop(&mut self) {
        let was = self.was;
        HOP.with(|h| h.set(was));
    }
}

impl ExecutorState {
    /// The block cache of the worker of this executor running on this
    /// thread, if the caller is one: a graph built here (a completion's
    /// issue) can take its blocks from it and the retirements refill it,
    /// so a chain's hops touch no pool atomic. The pointer is valid while
    /// the calling task runs; borrow it only for one acquire or release
    /// at a time, on this thread (see `Local::cache`).
    pub(crate) fn worker_cache(&self) -> Option<NonNull<BlockCache<TaskPool>>> {
        NonNull::new(self.local_here()?.cache.get())
    }

    /// The calling thread's worker state, if it is a worker of this
    /// executor. Valid while the calling task runs, on this thread only.
    fn local_here(&self) -> Option<&Local> {
        let local = LOCAL.with(|l| l.get());
        // SAFETY: a non-null `LOCAL` is the running worker's, alive while
        // it runs (cleared before it is freed); only this thread uses it.
        let local = unsafe { local.as_ref() }?;
        std::ptr::eq(local.exec, self).then_some(local)
    }

    /// The number of workers.
    pub(crate) fn workers(&self) -> usize {
        self.slots.len()
    }

    /// The calling thread's worker index, if it is a worker of this
    /// executor (one thread per index, for the executor's life).
    pub(crate) fn worker_index(&self) -> Option<usize> {
        Some(self.local_here()?.index)
    }

    /// Puts `ready` on the calling worker's deque if a [`Hop`] is active
    /// and the caller is a worker of this executor; `Err(ready)`
    /// otherwise. Tasks past the deque's room go to the injector.
    pub(crate) fn hop(&self, mut ready: SList<QueueLink>) -> Result<(), SList<QueueLink>> {
        if !HOP.with(|h| h.get()) {
            return Err(ready);
        }
        let Some(local) = self.local_here() else {
            return Err(ready);
        };
        if local.next.get().is_none() && local.deque.is_empty() {
            if let Some(only) = ready.pop_front() {
                if ready.is_empty() {
                    // The chain's usual hop: one task, nothing else here.
                    // The worker runs it next, with no announcement (as
                    // it would pop the only task of its deque).
                    local.next.set(Some(only.into_raw()));
                    return Ok(());
                }
                ready.push_front(only);
            }
        }
        while local.deque.len() < LOCAL_CAP {
            let Some(task) = ready.pop_front() else { break };
            local.deque.push(TaskPtr(task.into_raw()));
        }
        local.hopped.set(true);
        self.inject_list(ready);
        Ok(())
    }

    /// Some worker is idle now (it found no task: it looks for work,
    /// spins or is parked). Relaxed loads: a hint, unless ordered by a
    /// fence (as in [`offer_turn`](Self::offer_turn)).
    pub(crate) fn has_idle_worker(&self) -> bool {
        self.slots
            .iter()
            .any(|s| !s.counters.running.load(Ordering::Relaxed))
    }

    /// Offers `turn`, a queue's issuer turn (run by this executor's
    /// [`TurnRunner`]), to the workers through its queue's slot `slot`,
    /// from a thread that is not a worker. `Ok`: a worker that is not
    /// inside a task will run it before it runs any task (none of them
    /// can be blocked in user code meanwhile). `Err(turn)`: every worker
    /// is busy (maybe blocked until an action in this very turn is
    /// issued): the caller keeps the turn and drains on.
    ///
    /// The protocol is Dekker's: this thread stores the slot, fences and
    /// reads the workers' `running` flags; a worker leaving idle stores
    /// its flag, fences and reads the slots (`Worker::execute`). With both
    /// fences sequentially consistent one of the two sees the other: if
    /// this reads a worker's flag clear, that worker sees the turn before
    /// its next task (or, idle, after the wake-up this sends); if every
    /// flag reads set, the turn is taken back unless a worker took it
    /// first. (A worker is busy from the task it takes after idling until
    /// it next finds none: between tasks too, so a flag set once per busy
    /// stretch and one fence per stretch do, not per task.)
    ///
    /// The slot must be empty: a queue has one turn.
    pub(crate) fn offer_turn(&self, slot: usize, turn: NonNull<()>) -> Result<(), NonNull<()>> {
        let cell = &self.turns[slot];
        debug_assert!(cell.load(Ordering::Relaxed).is_null(), "one turn a queue");
        // Release: the old holder's passes happen before the taker's.
        cell.store(turn.as_ptr(), Ordering::Release);
        fence(Ordering::SeqCst);
        if self.has_idle_worker() {
            // Wakes a parked worker, or stops one from parking past it.
            self.notify();
            return Ok(());
        }
        match NonNull::new(cell.swap(std::ptr::null_mut(), Ordering::Acquire)) {
            Some(back) => Err(back),
            // A worker took it meanwhile: it runs it.
            None => Ok(()),
        }
    }

    /// `task`, a ready task not counted in `live`, alone: runs next on
    /// the calling worker if a [`Hop`] is active, the caller is a worker
    /// of this executor, and nothing else waits there (its `next` and
    /// deque empty), counted by that worker's running task (see
    /// [`Local::uncounted`]: no RMW on `live`). `Err(task)` otherwise,
    /// still uncounted.
    pub(crate) fn hop_alone(&self, task: NonNull<Task>) -> Result<(), NonNull<Task>> {
        if !HOP.with(|h| h.get()) {
            return Err(task);
        }
        let Some(local) = self.local_here() else {
            return Err(task);
        };
        if local.next.get().is_some() || !local.deque.is_empty() {
            return Err(task);
        }
        // A `Hop` is only active inside a task this worker runs (a
        // completion at the end of its payload), which `live` counts until
        // its retirement here is flushed: netted with this one.
        local.uncounted.set(local.uncounted.get() + 1);
        local.next.set(Some(task));
        Ok(())
    }
}

/// A worker thread's private state.
pub(crate) struct Worker {
    pub(crate) index: usize,
    /// Owned (freed in `drop`); see [`Local`].
    local: NonNull<Local>,
    /// Ready tasks that did not fit the deque, collected during one step
    /// and published to the injector (one CAS) before the next task runs.
    spill: SList<QueueLink>,
    /// Tasks were pushed on the deque since the last `notify`: idle
    /// workers must hear of them before this worker runs anything.
    unannounced: bool,
    /// Retirements not yet subtracted from their scope's count...
    retired_scope: Option<(NonNull<ScopeInner>, usize)>,
    /// ... and from `shared.live` (flushed when idle, on a scope change,
    /// or every `FLUSH_EVERY`).
    retired_live: usize,
    /// Finished predecessors of one completion task whose decrements this
    /// worker holds back: the tasks it ran in a row with that completion
    /// task (a fork/join's branches), one read-modify-write on the join's
    /// contended count for all of them instead of one each. Released
    /// before this worker runs a task with another completion task, and
    /// before it looks beyond its own deque (steal, injector, park), so
    /// the join is never delayed by anything but its own predecessors.
    held_join: Option<(NonNull<Task>, u32)>,
    /// This worker's `running` flag as it last stored it (see
    /// [`WorkerCounters`]).
    busy: bool,
    /// The executor this worker runs for.
    pub(crate) shared: Arc<ExecutorState>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: made by `Box::leak` in `new`, freed once, here; `run`
        // cleared the thread's pointer to it when it returned.
        drop(unsafe { Box::from_raw(self.local.as_ptr()) });
    }
}

/// How long an idle worker polls the executor's epoch before it starts
/// yielding, when the executor spins: a read between single `pause`s
/// (until something is published the line stays in this core's cache, so
/// polling costs the other cores nothing), so work published meanwhile is
/// seen one `pause` and one miss after it lands. Longer than a chain's
/// usual gap between two pieces of work (a dispatch's frame to the next:
/// 1-2 us on the project's VM). Polling at single `pause`s, not at an
/// exponential backoff's growing gaps (up to 64 `pause`s), is what lets a
/// dispatch's second worker and a spinning worker's first tile start
/// soon after the work is published (figures in BENCHMARKS.md). A host
/// wait keeps its backoff: polling there too slows a prebuilt fork/join
/// (its waiting thread is a third thread on two cores).
#[cfg(not(fenceline_loom))]
const SPIN_POLLING: std::time::Duration = std::time::Duration::from_micros(4);

/// How long an idle worker keeps yielding (after it polled) before it
/// parks, when the executor spins: work that comes back within it (a
/// graph built on another thread, the next frame) finds the worker awake,
/// with no futex wake (5-20 us on the project's VM) on either side. A
/// 1024-way fork/join built and run in a loop went from 144-162 us to
/// 97-101 us with it (rayon's own workers yield for a while before they
/// sleep too).
#[cfg(not(fenceline_loom))]
pub(crate) const SPIN_YIELDING: std::time::Duration = std::time::Duration::from_micros(50);

/// A join count (read at a predecessor's retirement) from which the worker
/// holds its decrement back (`Worker::held_join`): below it, the
/// predecessors left are few, and the last of them had better continue
/// with the join at once than push it from a later release (a binary
/// join tree ran about 20% slower holding at every count). (2 under the
/// model checker, so that its small joins reach the held path.)
const HOLD_FROM: u32 = if cfg!(fenceline_loom) { 2 } else { 4 };

/// Retirements a worker batches before publishing them.
const FLUSH_EVERY: usize = 64;

impl Worker {
    pub(crate) fn new(index: usize, shared: Arc<ExecutorState>, deque: Deque<TaskPtr>) -> Worker {
        let local = Box::new(Local {
            index,
            deque,
            exec: Arc::as_ptr(&shared),
            hopped: std::cell::Cell::new(false),
            next: std::cell::Cell::new(None),
            uncounted: std::cell::Cell::new(0),
            cache: std::cell::UnsafeCell::new(BlockCache::new(TaskPool(shared.clone()))),
        });
        Worker {
            index,
            shared,
            local: NonNull::from(Box::leak(local)),
            spill: SList::new(),
            unannounced: false,
            retired_scope: None,
            retired_live: 0,
            held_join: None,
            busy: false,
        }
    }

    /// What a worker allocates for itself, done before it counts as
    /// started (see `crate::sync::started`): its registration with the
    /// epoch of crossbeam's deques, which its first steal would otherwise
    /// make (one allocation, at whatever time that is).
    pub(crate) fn start_up(&mut self) {
        #[cfg(not(fenceline_loom))]
        {
            // A steal from our own deque (empty: nothing is taken) pins
            // the epoch, registering this thread with it.
            let _ = self.shared.stealers[self.index].steal();
        }
    }

    /// Tasks a hop put on the deque count as this worker's own pushes:
    /// announced before it runs anything else ([`find`](Self::find) lets
    /// it run the only one first).
    fn take_hopped(&mut self) {
        // SAFETY: as in `local`.
        if unsafe { self.local.as_ref() }.hopped.replace(false) {
            self.unannounced = true;
        }
    }

    /// The worker's block cache (see [`Local::cache`]), for one operation.
    pub(crate) fn cache(&mut self) -> &mut BlockCache<TaskPool> {
        // SAFETY: the cache is this thread's alone and no other borrow of
        // it is live: every borrow (this one's users, a graph's lent
        // access) ends before user code can run (see `Local::cache`).
        unsafe { &mut *self.local.as_ref().cache.get() }
    }

    fn local(&self) -> &Deque<TaskPtr> {
        // SAFETY: owned by this worker until its drop; only shared
        // references to it are ever made.
        unsafe { &self.local.as_ref().deque }
    }

    /// Makes a task ready on this worker: on its deque (stealable), or, if
    /// that is full, in the spill. Either way [`publish`](Self::publish)
    /// tells the other workers before this worker runs anything else.
    pub(crate) fn push(&mut self, task: NonNull<Task>) {
        if self.local().len() < LOCAL_CAP {
            self.local().push(TaskPtr(task));
            self.unannounced = true;
        } else {
            // SAFETY: the task is ready and ours, in no queue; it stays
            // allocated until it runs.
            self.spill.push_back(unsafe { Handle::from_raw(task) });
        }
    }

    /// Makes the tasks pushed since the last call reachable by every
    /// worker and wakes a sleeper for them: the spill goes to the injector,
    /// and the epoch moves (the full sleep protocol, one RMW per step that
    /// made tasks ready, not per task). Called before running any task (it
    /// may block: a sleeper that missed a cheaper hint would then sleep
    /// next to work nobody else runs, and the blocked task may be waiting
    /// for exactly that work) and after a running call spawned a child.
    pub(crate) fn publish(&mut self) {
        self.take_hopped();
        if !self.spill.is_empty() {
            self.shared.inject_list(std::mem::take(&mut self.spill));
        } else if self.unannounced {
            self.shared.notify();
        }
        self.unannounced = false;
    }

    /// The task a hop left in [`Local::next`], if any.
    fn take_next(&mut self) -> Option<NonNull<Task>> {
        // SAFETY: as in `local`.
        unsafe { self.local.as_ref() }.next.take()
    }

    /// The next task to run: a hop's, own deque, injector, steal.
    fn find(&mut self) -> Option<NonNull<Task>> {
        if let Some(t) = self.take_next() {
            return Some(t);
        }
        self.take_hopped();
        if self.spill.is_empty() {
            if let Some(t) = self.local().pop() {
                if self.local().is_empty() {
                    // We run the only task there was: nobody else needs to
                    // hear of it (a hop's next action stays on this worker
                    // with no wake-up).
                    self.unannounced = false;
                } else {
                    self.publish();
                }
                return Some(t.0);
            }
        }
        // Nothing left here: held decrements go out before looking
        // elsewhere (or parking); the join they complete runs here.
        if let Some(ready) = self.release_join() {
            self.publish();
            return Some(ready);
        }
        self.publish();
        if let Some(t) = self.local().pop() {
            return Some(t.0);
        }
        // Issuer turns offered to the workers: drained here, the tasks
        // they issue land on our deque.
        if self.run_turns() {
            if let Some(t) = self.local().pop() {
                self.unannounced |= !self.local().is_empty();
                return Some(t.0);
            }
        }
        // Oldest chunk first (the reversal walks chunks, not tasks).
        let mut chunks = self.shared.injector.take_all();
        if let Some(head) = chunks.pop_front().map(Handle::into_raw) {
            // SAFETY: the chunk's chain was given up to the injector by
            // `chunk` and is ours now that the take gave us its head.
            let mut taken = unsafe { walk_chunk(head) };
            let first = taken.pop_front().map(Handle::into_raw);
            let Some(first) = first else {
                unreachable!("a chunk holds a task");
            };
            // Keep what fits the deque (stealable there) and give the rest
            // back to the injector for the other workers.
            while self.local().len() < LOCAL_CAP {
                match taken.pop_front() {
                    Some(t) => self.local().push(TaskPtr(t.into_raw())),
                    None => break,
                }
            }
            if !taken.is_empty() {
                chunks.append(&mut ExecutorState::chunk(taken));
            }
            if !chunks.is_empty() {
                // In order (a walk over chunks): the oldest stay first.
                self.shared.injector.push_list(chunks);
                // Its notify covers the tasks kept as well.
                self.shared.notify();
            } else {
                // Workers woken for these may have found the injector
                // empty: tell them before running `first`.
                self.unannounced |= !self.local().is_empty();
            }
            return Some(first);
        }
        let n = self.shared.stealers.len();
        for k in 1..n {
            let victim = (self.index + k) % n;
            loop {
                match self.shared.stealers[victim].steal_batch_and_pop(self.local()) {
                    Steal::Success(t) => {
                        WorkerCounters::bump(&self.shared.slots[self.index].counters.steals);
                        crate::trace::instant(crate::trace::Kind::Steal, 0, victim as u64, 0);
                        // The rest of the batch sits on our deque now.
                        self.unannounced |= !self.local().is_empty();
                        return Some(t.0);
                    }
                    Steal::Empty => break,
                    Steal::Retry => continue,
                }
            }
        }
        None
    }

    /// The worker loop; returns at shutdown once no task is left.
    pub(crate) fn run(&mut self) {
        let local = self.local.as_ptr().cast_const();
        LOCAL.with(|l| l.set(local));
        struct Clear;
        impl Drop for Clear {
            fn drop(&mut self) {
                LOCAL.with(|l| l.set(std::ptr::null()));
            }
        }
        let _clear = Clear;
        loop {
            if let Some(task) = self.find() {
                self.execute(task);
                continue;
            }
            if !self.idle() {
                return;
            }
        }
    }

    /// Publishes the batched retirements: scopes may go idle, shutdown may
    /// see the last task gone. Called when idle, every `FLUSH_EVERY`, and
    /// before running a task of another scope (so a scope whose last task
    /// retired here is idle before this worker starts on unrelated, maybe
    /// long, work).
    fn flush(&mut self) {
        if let Some((scope, n)) = self.retired_scope.take() {
            // SAFETY: our unpublished retirements keep the scope's count
            // above zero, hence the scope alive, until this call.
            unsafe { ScopeInner::leave(scope, n) };
        }
        // Tasks that `hop_alone` left uncounted each keep one of our
        // retirements in `live` (see `Local::uncounted`): netted here. By
        // now each one's hopper has retired here, so this is no more than
        // `retired_live`; were it more (never seen), the rest is counted.
        // SAFETY: as in `local`.
        let uncounted = unsafe { self.local.as_ref() }.uncounted.replace(0);
        if uncounted > self.retired_live {
            let more = uncounted - std::mem::take(&mut self.retired_live);
            self.shared.live.fetch_add(more, Ordering::Relaxed);
        } else {
            self.retired_live -= uncounted;
        }
        if self.retired_live > 0 {
            let n = std::mem::take(&mut self.retired_live);
            if self.shared.live.fetch_sub(n, Ordering::AcqRel) == n {
                // The last task retired. With the fences of
                // `begin_shutdown` and `idle`'s exit check (a store-load
                // race): either this sees the shutdown and wakes everyone,
                // or an idle worker that sees the shutdown also sees `live`
                // at zero and exits instead of parking. (loom found a
                // worker parked for good at shutdown without the fences.)
                fence(Ordering::SeqCst);
                if self.shared.shutdown.load(Ordering::Relaxed) {
                    self.shared.wake_all();
                }
            }
        }
    }

    /// Counts one retirement of a task of `scope` (`None`: an uncounted
    /// scope, only the live count), in the batch.
    fn count_retired(&mut self, scope: Option<NonNull<ScopeInner>>) {
        match (&mut self.retired_scope, scope) {
            (_, None) => {}
            (Some((s, n)), Some(scope)) if *s == scope => *n += 1,
            (_, Some(scope)) => {
                if let Some((s, n)) = self.retired_scope.replace((scope, 1)) {
                    // SAFETY: as in `flush`.
                    unsafe { ScopeInner::leave(s, n) };
                }
            }
        }
        self.retired_live += 1;
        if self.retired_live >= FLUSH_EVERY {
            self.flush();
        }
    }

    /// No work found: spin a little, then park. `false`: time to exit.
    fn idle(&mut self) -> bool {
        self.flush();
        if self.busy {
            self.busy = false;
            self.set_running(false);
        }
        // SAFETY: `self.shared` is never reassigned, and the `Arc` keeps
        // the state alive for as long as this worker (a borrow through a
        // pointer, not a clone: two read-modify-writes per idle cycle).
        let shared: &ExecutorState = unsafe { &*Arc::as_ptr(&self.shared) };
        let epoch = shared.sleep.epoch();
        #[cfg(not(fenceline_loom))]
        if shared.spin {
            // Poll the epoch with one `pause` between reads (see
            // `SPIN_POLLING`), then yield.
            let since = Instant::now();
            loop {
                for _ in 0..32 {
                    if shared.sleep.epoch() != epoch {
                        return true;
                    }
                    crate::sync::hint::spin_loop();
                }
                // The clock is read once a batch (about 0.8 us).
                if since.elapsed() >= SPIN_POLLING {
                    break;
                }
            }
            let since = Instant::now();
            while since.elapsed() < SPIN_YIELDING {
                std::thread::yield_now();
                if shared.sleep.epoch() != epoch {
                    return true;
                }
            }
        }
        if let Some(task) = self.find() {
            self.execute(task);
            return true;
        }
        if self.expire_waits() {
            return true; // requeued waits on our own deque: run them
        }
        // The fence pairs with those of `flush` and `begin_shutdown`.
        fence(Ordering::SeqCst);
        if shared.shutdown.load(Ordering::Acquire) && shared.live.load(Ordering::Acquire) == 0 {
            return false;
        }
        // Park, also at shutdown while some task still runs elsewhere: the
        // worker that retires the last one wakes everyone (`flush`), and
        // its epoch bump stops us from parking past it (`announce`).
        let slot = &shared.slots[self.index];
        // Read before the flag is armed: nothing between the announce and
        // the park takes a lock (a lock there held the worker while a
        // waker unparked it; under loom, whose blocked lock drops a
        // pending unpark, that worker then parked for good). A deadline
        // listed after this read comes with a `notify`, which this worker
        // sees in its announce or is woken by.
        let deadline = self.nearest_deadline();
        // Swaps, not stores, for both of the worker's writes to its flag.
        // A store would be enough for the C++ model (a waker's swap, being
        // an RMW, reads the latest value), but loom lets a plain store fall
        // between another thread's swap read and write (loom issues #254,
        // #389): its waker then reads a stale `false` and the model
        // deadlocks with this worker parked. Parking is the slow path.
        let _ = slot.sleeping.swap(true, Ordering::Release);
        if shared.sleep.announce(epoch) {
            let counters = &slot.counters;
            WorkerCounters::bump(&counters.parks);
            let parked = crate::trace::now();
            // Sleep until the epoch moves: every wake (`notify`, `wake_all`)
            // bumps it before unparking, so a wake-up is never missed and a
            // stale unpark token only costs one more look. (No look before
            // the first park: `announce` just read the epoch unchanged, and
            // a waker after it finds our flag set.)
            loop {
                match deadline {
                    None => crate::sync::thread::park(),
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            break;
                        }
                        crate::sync::park_timeout(d - now);
                    }
                }
                if shared.sleep.epoch_now() != epoch {
                    WorkerCounters::bump(&counters.wakeups);
                    break; // the usual wake-up: one RMW
                }
                // Woken to an unchanged epoch: a waker whose bump we had
                // already seen (it came before our epoch read) may have
                // taken our flag, and we are about to park again. Arm it
                // again before looking once more: without this a later
                // waker counts us as a sleeper, finds no flag set and wakes
                // nobody, a lost wake-up. The epoch read after it is an
                // AcqRel RMW, so either that waker's bump comes after it
                // (and the waker's flag swap then sees this `true`) or we
                // see the bump and stay up.
                let _ = slot.sleeping.swap(true, Ordering::AcqRel);
                if shared.sleep.epoch_now() != epoch {
                    WorkerCounters::bump(&counters.wakeups);
                    break;
                }
            }
            crate::trace::span(crate::trace::Kind::Park, parked, 0, self.index as u64, 0);
        }
        let _ = slot.sleeping.swap(false, Ordering::Release);
        shared.sleep.leave();
        true
    }

    fn nearest_deadline(&self) -> Option<Instant> {
        if self.shared.suspended_waits.load(Ordering::Acquire) == 0 {
            return None;
        }
        let waits = self.shared.lock_waits();
        waits
            .iter()
            // SAFETY: listed wait states are alive (their tasks are
            // suspended, owned by the list until removed).
            .filter_map(|w| unsafe { w.as_ref() }.deadline)
            .min()
    }

    /// Times out (or, at shutdown, cancels) parked waits: abandons their
    /// timepoints, whose callbacks requeue the tasks (see `WaitState`);
    /// `true` if it abandoned any.
    fn expire_waits(&mut self) -> bool {
        if self.shared.suspended_waits.load(Ordering::Acquire) == 0 {
            return false;
        }
        let shutdown = self.shared.shutdown.load(Ordering::Acquire);
        let now = Instant::now();
        let mut claimed = DList::<WaitLink>::new();
        {
            let mut waits = self.shared.lock_waits();
            let mut cursor = waits.front();
            while let Some(w) = cursor {
                // SAFETY: `w` is linked in `waits`.
                cursor = unsafe { waits.next(w) };
                // SAFETY: listed, hence alive.
                let due = shutdown || unsafe { w.as_ref() }.deadline.is_some_and(|d| d <= now);
                if due {
                    // SAFETY: listed, hence linked here; we hold the lock.
                    unsafe { WaitState::expire(w, &mut waits, &mut claimed) };
                }
            }
            self.shared
                .suspended_waits
                .store(waits.len(), Ordering::Release);
        }
        // Handed over with the lock released (a hand-over may run
        // semaphore callbacks here).
        let any = !claimed.is_empty();
        while let Some(w) = claimed.pop_front() {
            // SAFETY: put there by `expire`, taken off just now.
            unsafe { WaitState::abandon_claimed(w.into_raw()) };
        }
        any
    }

    /// Runs `task`, then whatever it makes ready next, on this worker.
    pub(crate) fn execute(&mut self, task: NonNull<Task>) {
        if !self.busy {
            // Leaving idle: the worker's half of `offer_turn`'s protocol.
            // A turn offered while this worker read as idle runs before
            // `task`, which may block.
            self.busy = true;
            self.set_running(true);
            fence(Ordering::SeqCst);
            self.run_turns();
        }
        self.run_tasks(task);
    }

    /// This worker's `running` flag: a store, not an RMW (its alone).
    fn set_running(&self, running: bool) {
        self.shared.slots[self.index]
            .counters
            .running
            .store(running, Ordering::Relaxed);
    }

    /// Runs the issuer turns offered in the executor's slots
    /// ([`ExecutorState::offer_turn`]); `true` if there were any. Called
    /// when the worker leaves idle (flag already set) and from
    /// [`find`](Self::find) once out of local work (before the injector,
    /// where a turn handed off as a task used to be found). An idle
    /// worker's flag reads busy while it drains, so a turn offered
    /// meanwhile (the other workers busy too) is taken back by its
    /// offerer, who drains it at once, rather than queued behind this
    /// drain; it is cleared again after (a drain runs no task, and an idle
    /// worker still looks at the slots before its next task).
    fn run_turns(&self) -> bool {
        let Some(run) = self.shared.run_turn else {
            return false;
        };
        let mut any = false;
        for cell in self.shared.turns.iter() {
            // A load first: the slots' line stays shared while empty.
            if cell.load(Ordering::Relaxed).is_null() {
                continue;
            }
            // Acquire: pairs with the offer's release store.
            if let Some(turn) = NonNull::new(cell.swap(std::ptr::null_mut(), Ordering::Acquire)) {
                if !any && !self.busy {
                    self.set_running(true);
                }
                any = true;
                // A turn issues work and runs no task; a panic out of it
                // (a backend's) must not end the worker: the queue's drain
                // gave the turn back before rethrowing it.
                // SAFETY: offered through `offer_turn` (the runner's
                // contract) and taken from its slot by the swap above,
                // once.
                let _ =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { run(turn) }));
            }
        }
        if any && !self.busy {
            self.set_running(false);
        }
        any
    }

    /// Runs `task`, then the tasks it makes ready here, until none.
    fn run_tasks(&mut self, mut task: NonNull<Task>) {
        loop {
            // SAFETY: a ready task is owned by the worker running it.
            let t = unsafe { task.as_ref() };
            // Its fork link holds a prefetch hint or nothing: a barrier's
            // dependent leaves the barrier's list, a chunk's head the
            // chunk list, before either can run (see `set_prefetch_hint`).
            // SAFETY: ours, and no list links it through that field.
            if let Some(ahead) = unsafe { crate::list::links_next::<ForkLink>(task) } {
                Task::prefetch(ahead);
            }
            // Decrements held for another join go out first: this task may
            // run long (or block), and the join does not wait for it.
            if let Some((held, _)) = self.held_join {
                if t.completion_task.get() != Some(held) {
                    if let Some(ready) = self.release_join() {
                        self.push(ready);
                    }
                }
            }
            // Before running anything (it may block): every other ready
            // task reachable by other workers, and retirements of another
            // scope published.
            self.publish();
            if self
                .retired_scope
                .is_some_and(|(scope, _)| scope != t.scope)
            {
                self.flush();
            }
            let flags = t.flags.load(Ordering::Acquire);
            let outcome = if flags & FLAG_FAILED != 0 {
                // A predecessor failed: skip the payload (its failure is
                // already the scope's), but pass it on.
                // SAFETY: the vtable matches the payload.
                unsafe { (t.vtable.skip)(task) };
                Outcome::Done(Err(Error::new(ErrorKind::Aborted, "a predecessor failed")))
            } else {
                t.runs.set(t.runs.get().saturating_add(1));
                // Read before the run: a task that suspends may be
                // finished, freed and its block reused by another worker
                // before `run` returns here (Miri caught the trace reading
                // them after).
                let (start, scope, kind) = (crate::trace::now(), t.scope, t.vtable.name);
                // SAFETY: the vtable matches the payload (set at creation).
                let outcome = unsafe { (t.vtable.run)(task, self) };
                crate::trace::span(
                    crate::trace::Kind::Task,
                    start,
                    task.as_ptr() as u64,
                    scope.as_ptr() as u64,
                    crate::trace::task_kind(kind),
                );
                outcome
            };
            // The error alone is moved out, only when there is one (moving
            // the whole 32-byte result was 15 of a chain hop's 175 worker
            // instructions).
            let mut error = match outcome {
                Outcome::Suspended => return,
                Outcome::Done(Ok(())) => None,
                Outcome::Done(Err(e)) => Some(e),
            };
            // Drop the payload now, under the guard: a panic in its
            // captures' `Drop` fails the task like a panic of its body
            // (the body's own error, if any, is the one kept).
            // SAFETY: done; the payload is dropped once, here.
            if let Err(e) = unsafe { drop_payload(task) } {
                error.get_or_insert(e);
            }
            let failed = match error {
                None => false,
                Some(e) => {
                    if flags & FLAG_FAILED == 0 || flags & FLAG_CANCELLED != 0 {
                        // SAFETY: the task keeps its scope alive.
                        unsafe { t.scope.as_ref() }.record(e);
                    }
                    true
                }
            };
            // A hop during the run (its completion readied the next
            // action) left that action's only task: run it next, after
            // anything the retirement makes ready here is pushed.
            let hopped = self.take_next();
            let next = self.retire(task, failed);
            match (next, hopped) {
                (Some(n), Some(h)) => {
                    self.push(h);
                    task = n;
                }
                (Some(n), None) | (None, Some(n)) => task = n,
                (None, None) => return,
            }
        }
    }

    /// Releases the decrements held back in `held_join`: the completion
    /// task, if that made it ready (the caller runs or pushes it).
    fn release_join(&mut self) -> Option<NonNull<Task>> {
        let (c, n) = self.held_join.take()?;
        // SAFETY: a completion task outlives its predecessors; the held
        // decrements keep it from running (and being freed) until here.
        unsafe { c.as_ref() }.finish(n).then_some(c)
    }

    /// Notifies the task's completion and fork dependents, frees it, and
    /// returns one newly ready task to continue with (a completion task
    /// it was not the last predecessor of counts later: `held_join`).
    fn retire(&mut self, task: NonNull<Task>, failed: bool) -> Option<NonNull<Task>> {
        // SAFETY: we own the finished task.
        let t = unsafe { task.as_ref() };
        let mut next = None;
        if let Some(c) = t.completion_task.get() {
            // SAFETY: a completion task outlives its predecessors.
            let c_ref = unsafe { c.as_ref() };
            if failed {
                c_ref.mark_failed();
            }
            match &mut self.held_join {
                Some((held, n)) if *held == c => *n += 1,
                _ => {
                    if let Some(ready) = self.release_join() {
                        self.push(ready);
                    }
                    // A count of 1 is ours alone (a decrement held back
                    // elsewhere keeps it above 1): the task is ready now,
                    // with no read-modify-write (a chain's next link runs
                    // here at once; `JoinCount::is_last`). A few left: an
                    // RMW, so the last of them continues with the join at
                    // once (a join tree's parent). Many left (a wide
                    // join): hold ours, the next task here may well be
                    // another predecessor of the same join.
                    let remaining = c_ref.unfinished.get();
                    if remaining == 1 {
                        c_ref.unfinished.finish_last();
                        next = Some(c);
                    } else if remaining < HOLD_FROM {
                        if c_ref.finish_one() {
                            next = Some(c);
                        }
                    } else {
                        self.held_join = Some((c, 1));
                    }
                }
            }
        }
        // SAFETY: we own the finished task.
        let mut dependents = unsafe { super::kind::take_dependents(task) };
        // Popping unlinks a dependent before `finish_one` may let it run
        // (and be freed).
        while let Some(d) = dependents.pop_front().map(Handle::into_raw) {
            // SAFETY: dependents outlive the barrier.
            let d_ref = unsafe { d.as_ref() };
            if failed {
                d_ref.mark_failed();
            }
            // The barrier is most often a dependent's only predecessor:
            // then no read-modify-write (see `JoinCount::is_last`).
            let ready = if d_ref.unfinished.is_last() {
                d_ref.unfinished.finish_last();
                true
            } else {
                d_ref.finish_one()
            };
            if ready {
                match next {
                    None => next = Some(d),
                    Some(_) => self.push(d),
                }
            }
        }
        // Dependents whose only predecessor this barrier is, in ready
        // chunks since submit: no count to decrement. This worker keeps
        // the first chunk (it continues with its first task and pushes the
        // rest on its deque); the others go to the injector whole, for the
        // other workers to walk.
        // SAFETY: we own the finished task.
        let mut sole = unsafe { super::kind::take_sole(task) };
        if failed {
            // Every one of them is marked failed first (its run is skipped).
            while let Some(head) = sole.pop_front().map(Handle::into_raw) {
                // SAFETY: the chunk's chain was made by `Graph::submit`
                // and is ours now that its barrier finished.
                let mut chunk = unsafe { SList::<QueueLink>::from_chain(head) };
                while let Some(d) = chunk.pop_front().map(Handle::into_raw) {
                    // SAFETY: dependents outlive the barrier.
                    unsafe { d.as_ref() }.mark_failed();
                    match next {
                        None => next = Some(d),
                        Some(_) => self.push(d),
                    }
                }
            }
        } else if let Some(head) = sole.pop_front().map(Handle::into_raw) {
            // SAFETY: as above.
            let mut chunk = unsafe { walk_chunk(head) };
            while let Some(d) = chunk.pop_front().map(Handle::into_raw) {
                match next {
                    None => next = Some(d),
                    Some(_) => self.push(d),
                }
            }
            if !sole.is_empty() {
                self.shared.push_chunks(sole);
                self.shared.notify();
            }
        }
        // An uncounted scope is not touched: its submission's final task
        // may have run on another worker by now, and the scope gone with
        // its device (mutation checked: reading it here is a use after
        // free that the soak test finds under Miri).
        let scope = t.counted.then_some(t.scope);
        // SAFETY: the task is done and its payload dropped (`execute`).
        unsafe { release_block(self.cache(), task) };
        self.count_retired(scope);
        next
    }
}

/// A ready chunk's chain as a list. The walk follows the queue links, one
/// dependent miss per task on blocks another core wrote; each task's
/// prefetch hint (`set_prefetch_hint`) starts the fetch of the task
/// `PREFETCH_AHEAD` places on, so several misses are in flight at once.
///
/// # Safety
/// As for `SList::from_chain`: `head` starts a chain of tasks linked
/// through `QueueLink` that the caller owns.
unsafe fn walk_chunk(head: NonNull<Task>) -> SList<QueueLink> {
    // SAFETY: per contract; the visit reads only the fork links.
    unsafe {
        SList::from_chain_visiting(head, |t| {
            // SAFETY: ours, and its fork link is free (a hint or nothing).
            if let Some(ahead) = crate::list::links_next::<ForkLink>(t) {
                Task::prefetch(ahead);
            }
        })
    }
}

/// How far ahead in a ready chunk a task's prefetch hint points.
pub(crate) const PREFETCH_AHEAD: usize = if cfg!(fenceline_loom) { 1 } else { 8 };

/// Points `task`'s free fork link at `ahead`, a task further on in the
/// same ready chunk (the chunk's walker prefetches it, so the walk's misses
/// overlap instead of following one another) or, at build, the task made
/// `PREFETCH_AHEAD` places after it in its graph (the worker that starts
/// `task` prefetches it: a chain's next headers). A hint only: nobody
/// dereferences it, and any list that takes the link overwrites it.
///
/// # Safety
/// The caller owns `task`, which is in no fork list.
pub(crate) unsafe fn set_prefetch_hint(task: NonNull<Task>, ahead: NonNull<Task>) {
    // SAFETY: per contract.
    unsafe { crate::list::set_links_next::<ForkLink>(task, Some(ahead)) }
}

/// Drops a task's payload, turning a panic in its `Drop` into an error.
/// A payload with no drop glue (a nop, a barrier) costs a load and a test.
///
/// # Safety
/// The caller owns `task`, whose payload is live and dropped only here.
#[inline]
pub(crate) unsafe fn drop_payload(task: NonNull<Task>) -> Result<(), Error> {
    // SAFETY: owned per contract.
    match unsafe { task.as_ref() }.vtable.drop {
        None => Ok(()),
        // SAFETY: forwarded contract; `drop` is the payload's.
        Some(drop) => unsafe { drop_guarded(task, drop) },
    }
}

/// `drop_payload` for a payload with drop glue, under an unwind guard.
///
/// # Safety
/// As for `drop_payload`; `drop` is the task's vtable's.
unsafe fn drop_guarded(task: NonNull<Task>, drop: unsafe fn(NonNull<Task>)) -> Result<(), Error> {
    let mut panicked = FirstPanic::default();
    // SAFETY: the vtable matches the payload, dropped once.
    panicked.run(|| unsafe { drop(task) });
    match panicked.take() {
        None => Ok(()),
        Some(p) => Err(panic_error("dropping a task's captures", &*p)),
    }
}

/// Returns a task's block to `cache` (its payload already dropped).
///
/// # Safety
/// The caller owns `task`, which nobody will touch again; its payload was
/// dropped; `task` came from `cache`'s pool.
pub(crate) unsafe fn release_block<C: BlockSource + ?Sized>(cache: &mut C, task: NonNull<Task>) {
    // SAFETY: owned per contract.
    let block = unsafe { task.as_ref() }.block;
    // SAFETY: the task sits at the start of block `block` of the cache's pool.
    let raw = unsafe { RawBlock::from_parts(task.cast(), block) };
    // SAFETY: from this pool (the cache's), released once.
    unsafe { cache.release(raw) };
}
