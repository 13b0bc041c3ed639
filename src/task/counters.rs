//! The small lock-free counters the executor is built from, kept apart so
//! the loom models in `loom-tests/` check exactly the code the executor
//! runs: a task's join count, a dispatch's tile counter, and the workers'
//! sleep state.

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A task's pending-dependency count. The predecessor that takes it to zero
/// makes the task ready: exactly one does.
#[derive(Debug, Default)]
pub struct JoinCount(AtomicU32);

impl JoinCount {
    /// A count of `n`.
    pub fn new(n: u32) -> JoinCount {
        JoinCount(AtomicU32::new(n))
    }

    /// One more predecessor (while building, or a running task adding
    /// children it holds for).
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// One more predecessor while the task is still private to its builder
    /// (no other thread can see it: a plain load and store, no RMW).
    pub fn add_unshared(&self) {
        self.0
            .store(self.0.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Sets the count (a running task holding itself while it adds
    /// children: nobody else can touch it yet).
    pub fn set(&self, n: u32) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// The current count.
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    /// One predecessor finished: `true` for the one that made the count
    /// zero. AcqRel: every predecessor's effects happen-before whoever then
    /// runs the task (release by each, acquire by the last).
    pub fn finish_one(&self) -> bool {
        self.0.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

/// A dispatch's tile counter: shards claim `[start, end)` ranges of
/// `chunk` tiles until `total` are claimed; every tile once.
#[derive(Debug)]
pub struct TileCounter {
    next: AtomicU64,
    total: u64,
    chunk: u64,
}

impl TileCounter {
    /// `total` tiles claimed `chunk` (>= 1) at a time.
    pub fn new(total: u64, chunk: u64) -> TileCounter {
        TileCounter {
            next: AtomicU64::new(0),
            total,
            chunk: chunk.max(1),
        }
    }

    /// Tiles in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Claims the next range, or `None` when every tile is claimed.
    /// Relaxed: the counter only partitions the range; the tiles' effects
    /// are ordered by the shards' completion (a `JoinCount`).
    pub fn claim(&self) -> Option<(u64, u64)> {
        let start = self.next.fetch_add(self.chunk, Ordering::Relaxed);
        (start < self.total).then(|| (start, (start + self.chunk).min(self.total)))
    }
}

const SLEEPER: u64 = 1;
const EPOCH: u64 = 1 << 16;

/// The workers' sleep state: `(epoch << 16) | sleepers` in one atomic.
///
/// A worker about to park reads [`epoch`](Self::epoch), looks for work one
/// last time, then [`announce`](Self::announce)s itself: that RMW returns
/// the epoch, and if it moved, work may have arrived and the worker must not
/// park. A submitter publishes its work, then [`notify`](Self::notify)s:
/// that RMW bumps the epoch and returns whether anyone was asleep (then it
/// wakes one). Both RMWs hit one atomic, so one of the two always sees the
/// other: no lost wake-up.
#[derive(Debug, Default)]
pub struct SleepState(AtomicU64);

impl SleepState {
    /// A state with no sleeper.
    pub fn new() -> SleepState {
        SleepState(AtomicU64::new(0))
    }

    /// The current epoch (Acquire: what was published before the epoch
    /// moved is visible).
    pub fn epoch(&self) -> u64 {
        self.0.load(Ordering::Acquire) & !(EPOCH - 1)
    }

    /// Counts the caller as a sleeper. `true`: the epoch is still `epoch`,
    /// park. `false`: it moved, look for work again. Either way the caller
    /// calls [`leave`](Self::leave) afterwards.
    pub fn announce(&self, epoch: u64) -> bool {
        self.0.fetch_add(SLEEPER, Ordering::AcqRel) & !(EPOCH - 1) == epoch
    }

    /// The current epoch, read with a read-modify-write: the latest value
    /// whatever the caller synchronized with (a parked worker re-checks
    /// with it after waking: an unpark alone need not order memory under
    /// the model checker).
    pub fn epoch_now(&self) -> u64 {
        self.0.fetch_add(0, Ordering::Acquire) & !(EPOCH - 1)
    }

    /// The caller is no longer a sleeper.
    pub fn leave(&self) {
        self.0.fetch_sub(SLEEPER, Ordering::AcqRel);
    }

    /// Work was published: bump the epoch. `true` if someone may be asleep
    /// (the caller wakes one).
    pub fn notify(&self) -> bool {
        self.0.fetch_add(EPOCH, Ordering::AcqRel) & (EPOCH - 1) != 0
    }
}
