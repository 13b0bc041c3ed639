//! `JoinCount`: a task's count of unfinished predecessors (its own file so
//! the loom models in `loom-tests/` check exactly the code the executor
//! runs).

use crate::sync::atomic::{AtomicU32, Ordering};

/// A task's count of unfinished predecessors. The predecessor that takes it to zero
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

    /// The current count. Acquire: pairs with the predecessors' AcqRel
    /// decrements in [`finish`](Self::finish) (a 1 read by a predecessor
    /// means the others' effects happen-before, as in `is_last`).
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    /// One predecessor finished: `true` for the one that made the count
    /// zero. AcqRel: every predecessor's effects happen-before whoever then
    /// runs the task (release by each, acquire by the last).
    pub fn finish_one(&self) -> bool {
        self.finish(1)
    }

    /// Whether the count is 1: the caller, a predecessor, is the last one
    /// (Acquire: pairs with the other predecessors' AcqRel decrements in
    /// [`finish`](Self::finish), so their effects happen-before this
    /// read). Nobody else will touch the count then, so
    /// [`finish_last`](Self::finish_last) may stand in for the
    /// read-modify-write.
    pub fn is_last(&self) -> bool {
        self.0.load(Ordering::Acquire) == 1
    }

    /// The last predecessor finished (after [`is_last`](Self::is_last)
    /// said so): the count goes to zero with a plain store, no
    /// read-modify-write; the task is ready.
    pub fn finish_last(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    /// `n` predecessors finished at once (a worker that held back the
    /// decrements of several predecessors it ran in a row): `true` for the
    /// call that made the count zero. AcqRel as in `finish_one`: pairs with
    /// the other predecessors' decrements here (release by each, acquire
    /// by the last) and with the Acquire loads of `get` and `is_last`.
    pub fn finish(&self, n: u32) -> bool {
        self.0.fetch_sub(n, Ordering::AcqRel) == n
    }
}
