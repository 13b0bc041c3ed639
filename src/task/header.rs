//! The task: a 64-byte header and a payload in one 256-byte pool block.

use std::mem::{self, MaybeUninit};
use std::ptr::NonNull;

use super::context::TaskContext;
use super::edges::Successors;
use super::join_count::JoinCount;
use super::scope::ScopeInner;
use super::Priority;
use crate::error::Error;
use crate::list::SingleLinks;
use crate::sync::atomic::{AtomicU32, Ordering};
use crate::sync::Cell;

/// Bytes of payload after the 64-byte header.
/// (Larger under loom, whose cells and atomics carry tracking state: a
/// wait task's timepoint does not fit 192 bytes there.)
pub(crate) const PAYLOAD: usize = if cfg!(fenceline_loom) { 320 } else { 192 };
/// Bytes of one task block (header + payload): 256 (asserted), more under
/// loom, whose atomics are larger.
pub(crate) const TASK_BLOCK: usize = mem::size_of::<Task>();

/// `flags`: a predecessor failed; skip the payload and propagate.
pub(crate) const FLAG_FAILED: u32 = 1;
/// `flags`: cancelled by executor shutdown (waits).
pub(crate) const FLAG_CANCELLED: u32 = 2;

/// `build`: the task is a barrier's dependent.
pub(crate) const FORKED: u8 = 1;
/// `build`: the completion task was set by `Graph::precede`.
pub(crate) const PRECEDED: u8 = 2;

/// What running a task's payload produced.
pub(crate) enum Outcome {
    /// Finished (with its result): retire and notify dependents.
    Done(Result<(), Error>),
    /// Waiting on children or a timepoint, which will make it ready again.
    Suspended,
}

/// The payload's behaviour, one static table per payload type.
pub(crate) struct VTable {
    /// Runs (or re-runs) the payload.
    pub(crate) run: unsafe fn(NonNull<Task>, &mut TaskContext) -> Outcome,
    /// Drops the payload (once, when the task is freed); `None` when the
    /// payload has no drop glue (a nop, a barrier), so that freeing it
    /// makes no call and sets up no unwind guard.
    pub(crate) drop: Option<unsafe fn(NonNull<Task>)>,
    /// Called instead of `run` when a predecessor failed (a fence fails
    /// its semaphore); most kinds do nothing.
    pub(crate) skip: unsafe fn(NonNull<Task>),
    /// The kind's name, for messages.
    pub(crate) name: &'static str,
    /// The payload is a `BarrierPayload`, whose dependents retiring the
    /// task releases (read on every retirement: a flag, not a compare).
    pub(crate) forks: bool,
}

/// A task in pool memory. The header is the first 64 bytes (asserted);
/// the payload follows it in the same block.
///
/// Who owns a task when: the graph builder until submission; then the
/// queue it sits in, or the worker running it; a task waiting for its
/// predecessors is owned by them collectively (the one that takes
/// `unfinished` to zero makes it ready). Retiring frees the block.
#[repr(C, align(64))]
pub(crate) struct Task {
    /// [`QueueLink`]: the graph's task list, then the injector or a spill.
    pub(crate) next: SingleLinks<Task>,
    /// [`ForkLink`]: the dependents of the barrier this task follows.
    pub(crate) fork_links: SingleLinks<Task>,
    /// The task this one counts toward (its join), if any.
    pub(crate) completion_task: Cell<Option<NonNull<Task>>>,
    /// Predecessors still running (+ a hold while the task itself runs and
    /// adds children).
    pub(crate) unfinished: JoinCount,
    /// `FLAG_FAILED`, `FLAG_CANCELLED`.
    pub(crate) flags: AtomicU32,
    pub(crate) scope: NonNull<ScopeInner>,
    pub(crate) vtable: &'static VTable,
    /// Block index in the executor's task pool.
    pub(crate) block: u32,
    /// While the graph is built: `FORKED` (the task is some barrier's
    /// dependent), `PRECEDED` (its completion task is a `precede` edge,
    /// which `set_completion` may move to `successors`).
    pub(crate) build: Cell<u8>,
    /// Its scope counts it (`ScopeInner::counted`, copied at creation:
    /// the retirement must not read an uncounted scope, which may be
    /// gone by then).
    pub(crate) counted: bool,
    /// How many times the payload ran (nested calls, dispatch phases).
    pub(crate) runs: Cell<u8>,
    /// The priority of the task's queue or graph: where it waits while
    /// ready on an executor with levels. Set at creation.
    pub(crate) priority: Priority,
    /// Successors past the completion task (`Graph::precede`): one
    /// inline, more in edge blocks.
    pub(crate) successors: Cell<Successors>,
    /// Interior-mutable: the running worker writes it while other code
    /// holds `&Task` for the header.
    pub(crate) payload: std::cell::UnsafeCell<Payload>,
}

/// Raw payload storage, aligned for anything up to 16 bytes.
#[repr(C, align(16))]
pub(crate) struct Payload(pub(crate) [MaybeUninit<u8>; PAYLOAD]);

/// A task pointer that may cross threads (ownership moves with it).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct TaskPtr(pub(crate) NonNull<Task>);
// SAFETY: a task is owned by one thread at a time (see `Task`); moving the
// pointer moves that ownership.
unsafe impl Send for TaskPtr {}

link!(
    /// A task's place in its graph's task list, then in the injector or a
    /// worker's spill (one at a time).
    pub(crate) QueueLink: SingleLinks<Task> => next
);
link!(
    /// A task's place among the dependents of the barrier it follows
    /// (from `Graph::fork` until the barrier retires).
    pub(crate) ForkLink: SingleLinks<Task> => fork_links
);

// SAFETY: a task is owned by one thread at a time (see `Task`); the header
// fields other threads touch meanwhile are atomics or written before the
// hand-off that publishes them.
unsafe impl Send for Task {}

#[cfg(not(fenceline_loom))]
static_assertions::const_assert_eq!(TASK_BLOCK, 256);
// The header is one cache line: the payload starts right after it.
#[cfg(not(fenceline_loom))]
static_assertions::const_assert_eq!(mem::offset_of!(Task, payload), crate::prefetch::CACHE_LINE);
// `#[repr(align(64))]` above is the cache line.
static_assertions::const_assert_eq!(mem::align_of::<Task>(), crate::prefetch::CACHE_LINE);

impl Task {
    /// The payload as a `T`, borrowed for as long as the task is.
    ///
    /// # Safety
    /// The task's payload is a live `T` (its vtable says so), not written
    /// while the borrow lasts.
    pub(crate) unsafe fn payload<T>(&self) -> &T {
        // SAFETY: forwarded contract; the payload is at a fixed offset of
        // this task, so the reference lives no longer than `self`'s.
        unsafe { &*Self::payload_ptr::<T>(NonNull::from(self)) }
    }

    /// Pointer to the payload as a `T` (size and alignment checked at
    /// compile time by `fits`).
    /// An address computation only (wrapping, no dereference): safe for
    /// any pointer; using the result needs a live task.
    pub(crate) fn payload_ptr<T>(task: NonNull<Task>) -> *mut T {
        task.as_ptr()
            .cast::<u8>()
            .wrapping_add(mem::offset_of!(Task, payload))
            .cast::<T>()
    }

    /// Whether a `T` fits in the payload.
    pub(crate) const fn fits<T>() -> bool {
        mem::size_of::<T>() <= PAYLOAD && mem::align_of::<T>() <= 16
    }

    /// Adds one predecessor.
    pub(crate) fn add_unfinished(&self) {
        self.unfinished.add();
    }

    /// Marks a predecessor's failure (before the decrement that may make
    /// this task ready, which releases it).
    pub(crate) fn mark_failed(&self) {
        self.flags.fetch_or(FLAG_FAILED, Ordering::Relaxed);
    }

    /// Starts fetching the task's header (and the line after it) into this
    /// core's cache (a hint: no effect on memory, never faults).
    #[inline(always)]
    pub(crate) fn prefetch(task: NonNull<Task>) {
        #[cfg(all(target_arch = "x86_64", not(miri), not(fenceline_loom)))]
        // SAFETY: a prefetch is only a hint to the cache: it reads nothing
        // the program sees and does not fault on any address.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(task.as_ptr().cast::<i8>());
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri), not(fenceline_loom))))]
        let _ = task;
    }

    /// The task's priority (see the field).
    #[inline]
    pub(crate) fn priority(task: NonNull<Task>) -> Priority {
        // SAFETY: a live task (the caller owns it or holds it in a queue);
        // the priority is written at creation, never after.
        unsafe { task.as_ref() }.priority
    }

    /// One predecessor finished: `true` if this made the task ready.
    pub(crate) fn finish_one(&self) -> bool {
        self.unfinished.finish_one()
    }

    /// `n` predecessors finished: `true` if this made the task ready.
    pub(crate) fn finish(&self, n: u32) -> bool {
        self.unfinished.finish(n)
    }
}
