//! Workers: the threads that run tasks, their queues, stealing, parking.
//!
//! Each worker owns a LIFO `crossbeam_deque::Worker` (at most
//! [`LOCAL_CAP`] tasks, crossbeam's smallest buffer, so it never
//! reallocates); other workers steal from it. Everything else waits in the
//! executor's injector (an [`Injector`] of chunks), which every worker
//! takes from:
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

use super::context::TaskContext;
use super::header::{ForkLink, Outcome, QueueLink, Task, TaskPtr, FLAG_CANCELLED, FLAG_FAILED};
use super::kind::{WaitLink, WaitState};
use super::scope::ScopeInner;
use super::sleep::SleepState;
use super::Priority;
use crate::error::{Error, ErrorKind};
use crate::list::{DList, Handle, Injector, SList, Take};
use crate::pool::{BlockCache, BlockPool, BlockSource, RawBlock};
use crate::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use crate::sync::sleeper::Sleeper;
use crate::sync::{liveness, Arc, Mutex, MutexGuard};
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

mod hop;
mod idle;
mod retire;
mod run;
mod state;

use hop::LOCAL;
pub(crate) use hop::{Hop, Local};
use retire::walk_chunk;
pub(crate) use retire::{drop_payload, release_block, set_prefetch_hint, PREFETCH_AHEAD};
pub(crate) use state::{ExecutorState, TaskPool, TurnRunner, WorkerCounters};

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
    /// `shared.levels`, kept here (read at every task).
    levels: bool,
    /// With levels: tasks started since the last fairness pick (see
    /// [`Priority::FAIRNESS_PERIOD`]).
    ticks: u32,
    /// With levels: the last fairness pick looked at `Low` first (the
    /// next looks at `Normal` first).
    low_first: bool,
    /// The executor this worker runs for.
    pub(super) shared: Arc<ExecutorState>,
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
        let levels = shared.levels;
        Worker {
            index,
            levels,
            shared,
            local: NonNull::from(Box::leak(local)),
            spill: SList::new(),
            unannounced: false,
            retired_scope: None,
            retired_live: 0,
            held_join: None,
            busy: false,
            ticks: 0,
            low_first: false,
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
    pub(super) fn cache(&mut self) -> &mut BlockCache<TaskPool> {
        // SAFETY: owned by this worker until its drop; only shared
        // references to it are ever made.
        let local = unsafe { self.local.as_ref() };
        // SAFETY: the cache is this thread's alone and no other borrow of
        // it is live: every borrow (this one's users, a graph's lent
        // access) ends before user code can run (see `Local::cache`).
        unsafe { &mut *local.cache.get() }
    }

    fn local(&self) -> &Deque<TaskPtr> {
        // SAFETY: owned by this worker until its drop; only shared
        // references to it are ever made.
        unsafe { &self.local.as_ref().deque }
    }

    /// Makes a task ready on this worker: on its deque (stealable), or, if
    /// that is full, in the spill. Either way [`publish`](Self::publish)
    /// tells the other workers before this worker runs anything else.
    ///
    /// With levels, a `High` or `Low` task goes to its level's injector
    /// instead (never on a deque, whose owner pops in LIFO order whatever
    /// the level), published at once.
    pub(super) fn push(&mut self, task: NonNull<Task>) {
        if self.levels && Task::priority(task) != Priority::Normal {
            self.shared.inject(task);
        } else if self.local().len() < LOCAL_CAP {
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
    pub(super) fn publish(&mut self) {
        self.take_hopped();
        if !self.spill.is_empty() {
            self.shared.inject_list(std::mem::take(&mut self.spill));
        } else if self.unannounced {
            self.shared.notify();
        }
        self.unannounced = false;
    }

    /// Whether the executor has priority levels.
    #[inline]
    pub(super) fn levels(&self) -> bool {
        self.levels
    }

    /// The task a hop left in [`Local::next`], if any.
    fn take_next(&mut self) -> Option<NonNull<Task>> {
        // SAFETY: as in `local`.
        unsafe { self.local.as_ref() }.next.take()
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
            // AcqRel: the Release pairs with the Acquire load of `live` in
            // `idle`'s exit check (idle.rs); the Acquire with the other
            // workers' decrements here.
            if self.shared.live.fetch_sub(n, Ordering::AcqRel) == n {
                // The last task retired. The fence pairs with the fences of
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
}
