//! Retiring a finished task: its successors, its scope's count, its
//! payload and block.

use super::*;
use crate::task::edges::Successors;

impl Worker {
    /// Notifies the task's completion and fork dependents, frees it, and
    /// returns one newly ready task to continue with (a completion task
    /// it was not the last predecessor of counts later: `held_join`).
    pub(super) fn retire(&mut self, task: NonNull<Task>, failed: bool) -> Option<NonNull<Task>> {
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
        // Successors past the completion task (`Graph::precede`): one
        // decrement each, no holding (few share a join).
        let successors = t.successors.get();
        if successors != Successors::default() {
            let local = self.local;
            // SAFETY: the worker's `Local`, owned by this worker until its
            // drop; only shared references to it are ever made.
            let local = unsafe { local.as_ref() };
            // SAFETY: the worker's cache (see `cache`), borrowed for the
            // drain alone: the decrements and pushes below never touch it.
            let cache = unsafe { &mut *local.cache.get() };
            let finish = |s: NonNull<Task>| {
                // SAFETY: a successor outlives its predecessors.
                unsafe { self.finish_predecessor(s, failed, &mut next) }
            };
            // SAFETY: we own the finished task; its edge blocks came from
            // the task pool, which the worker's cache is a cache of.
            unsafe { successors.drain(cache, finish) };
        }
        // SAFETY: we own the finished task.
        let mut dependents = unsafe { crate::task::kind::take_dependents(task) };
        // Popping unlinks a dependent before `finish_one` may let it run
        // (and be freed).
        while let Some(d) = dependents.pop_front().map(Handle::into_raw) {
            // SAFETY: dependents outlive the barrier.
            unsafe { self.finish_predecessor(d, failed, &mut next) };
        }
        // Dependents whose only predecessor this barrier is, in ready
        // chunks since submit: no count to decrement. This worker keeps
        // the first chunk (it continues with its first task and pushes the
        // rest on its deque); the others go to the injector whole, for the
        // other workers to walk.
        // SAFETY: we own the finished task.
        let mut sole = unsafe { crate::task::kind::take_sole(task) };
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

impl Worker {
    /// One predecessor of `d` (the task retiring here) finished: `d` is
    /// marked failed first if it `failed`; if that made `d` ready, it is
    /// the task to continue with (`next`, if still free) or pushed. Most
    /// often the last predecessor: no read-modify-write then (see
    /// `JoinCount::is_last`).
    ///
    /// # Safety
    /// `d` is a successor of the retiring task, alive until this decrement
    /// (which may make it ready and let another worker run and free it).
    unsafe fn finish_predecessor(
        &mut self,
        d: NonNull<Task>,
        failed: bool,
        next: &mut Option<NonNull<Task>>,
    ) {
        // SAFETY: per contract.
        let d_ref = unsafe { d.as_ref() };
        if failed {
            d_ref.mark_failed();
        }
        let ready = if d_ref.unfinished.is_last() {
            d_ref.unfinished.finish_last();
            true
        } else {
            d_ref.finish_one()
        };
        if ready {
            match next {
                None => *next = Some(d),
                Some(_) => self.push(d),
            }
        }
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
pub(super) unsafe fn walk_chunk(head: NonNull<Task>) -> SList<QueueLink> {
    let visit = |t: NonNull<Task>| {
        // SAFETY: ours (per contract), and its fork link is free (a hint or
        // nothing).
        if let Some(ahead) = unsafe { crate::list::links_next::<ForkLink>(t) } {
            Task::prefetch(ahead);
        }
    };
    // SAFETY: per contract; the visit reads only the fork links.
    unsafe { SList::from_chain_visiting(head, visit) }
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
