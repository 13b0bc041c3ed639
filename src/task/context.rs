//! What a running task may do to the executor that runs it: make tasks
//! from the worker's block cache, make them ready where every worker can
//! take them, and reach the executor's shared state. A task's `run` gets a
//! [`TaskContext`], never the [`Worker`] itself: the worker loop's own
//! state (its retirement batches, held joins, idling and parking) stays
//! out of every kind's reach.

use std::ptr::NonNull;

use super::header::Task;
use super::worker::{ExecutorState, TaskPool, Worker};
use super::Priority;
use crate::pool::BlockCache;
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

/// The running worker, as the task it runs sees it: a view of the worker
/// (the same pointer, so lending it to a task costs nothing and the
/// worker loop compiles as it would with no view) that offers only what a
/// task may use.
#[repr(transparent)]
pub(crate) struct TaskContext(Worker);

impl TaskContext {
    /// The view of `worker` lent to the task it runs.
    #[inline]
    pub(crate) fn of(worker: &mut Worker) -> &mut TaskContext {
        // SAFETY: `TaskContext` is `repr(transparent)` over `Worker` (same
        // layout), and the result reborrows `worker` for its lifetime.
        unsafe { &mut *(worker as *mut Worker).cast::<TaskContext>() }
    }

    /// The worker's block cache, for one operation (see `Worker::cache`).
    #[inline]
    pub(crate) fn cache(&mut self) -> &mut BlockCache<TaskPool> {
        self.0.cache()
    }

    /// Workers of the executor.
    #[inline]
    pub(crate) fn workers(&self) -> usize {
        self.0.shared.seats.len()
    }

    /// The executor's shared state.
    #[inline]
    pub(crate) fn executor(&self) -> &Arc<ExecutorState> {
        &self.0.shared
    }

    /// Whether a task of `priority` that can stop early (a dispatch shard
    /// between tiles) should watch for higher-priority work: the executor
    /// has levels and something can outrank it.
    #[inline]
    pub(crate) fn watches(&self, priority: Priority) -> bool {
        self.0.levels() && priority != Priority::High
    }

    /// Whether a ready task of a higher priority than `priority` waits
    /// (asked only when [`watches`](Self::watches) said so).
    #[inline]
    pub(crate) fn outranked(&self, priority: Priority) -> bool {
        self.0.outranked(priority)
    }

    /// Counts `task`, new and ready, among the executor's live tasks and
    /// [`push`](Self::push)es it.
    #[inline]
    pub(crate) fn spawn(&mut self, task: NonNull<Task>) {
        self.0.shared.live.fetch_add(1, Ordering::Relaxed);
        self.0.push(task);
    }

    /// Makes `task` ready on this worker (see `Worker::push`); the caller
    /// [`publish`](Self::publish)es before it runs anything that may
    /// block.
    #[inline]
    pub(crate) fn push(&mut self, task: NonNull<Task>) {
        self.0.push(task);
    }

    /// Tells the other workers of the tasks pushed since the last call
    /// (see `Worker::publish`).
    #[inline]
    pub(crate) fn publish(&mut self) {
        self.0.publish();
    }
}
