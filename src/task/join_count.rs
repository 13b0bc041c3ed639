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
