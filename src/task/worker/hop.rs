//! A worker's own deque ([`Local`]) and the hop: graphs submitted by a
//! completion running on a worker go on that worker's deque; turns offered
//! to idle workers.

use super::*;

/// A worker's own deque, in an allocation of its own so that two paths
/// on the worker's thread reach it through raw pointers, never through the
/// worker's `&mut`: the worker itself, and a completion's `Graph::submit`
/// during a hop (see [`Hop`]). Everything in it is used through `&`
/// (the deque's methods, a `Cell`).
pub(crate) struct Local {
    /// The worker's index in its executor.
    pub(super) index: usize,
    pub(super) deque: Deque<TaskPtr>,
    /// The executor the worker runs for (a hop only lands on a worker of
    /// the executor the graph belongs to).
    pub(super) exec: *const ExecutorState,
    /// A hop pushed tasks on the deque: the worker announces them (as
    /// its own pushes) unless it is about to run the only one.
    pub(super) hopped: std::cell::Cell<bool>,
    /// The one task a hop made ready, when it was the only one and the
    /// deque was empty: the worker runs it next, right after the task
    /// whose completion hopped (no deque push and pop, whose pop is a
    /// full fence). Emptied after every run and at every `find`, so a
    /// task never stays here while the worker does anything else.
    pub(super) next: std::cell::Cell<Option<NonNull<Task>>>,
    /// Tasks [`ExecutorState::hop_alone`] put in `next` without counting
    /// them in `ExecutorState::live`. Each is paid for by the task that
    /// hopped it, which is running then and counted: that one's
    /// retirement on this worker is not subtracted from `live` (`flush`
    /// nets the two), so `live` stays above zero while either is alive.
    pub(super) uncounted: std::cell::Cell<usize>,
    /// Task blocks, cached per worker (no atomics while the stash lasts):
    /// the worker's retirements and spawns, and the graphs a completion
    /// issues on this thread ([`ExecutorState::worker_cache`]), so a chain
    /// reuses the blocks its last hop freed. Only this thread touches it,
    /// and only through borrows that end before any user code runs (moving
    /// a closure into a block, taking a block back): two of them never
    /// overlap.
    pub(super) cache: std::cell::UnsafeCell<BlockCache<TaskPool>>,
}

crate::sync::thread_local! {
    /// The running worker's `Local` on a worker thread (null elsewhere).
    pub(super) static LOCAL: std::cell::Cell<*const Local> = std::cell::Cell::new(std::ptr::null());
    /// Set while a completion runs on this thread that lets the graphs it
    /// submits hop onto this worker's deque ([`Hop`]).
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
        self.seats.len()
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
        // With levels, only `Normal` tasks go on a deque (see
        // `Worker::push`): the others to their injectors.
        if self.levels
            && ready
                .front()
                .is_some_and(|t| Task::priority(t) != Priority::Normal)
        {
            return Err(ready);
        }
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
        self.seats
            .iter()
            .any(|s| !s.counters.running.load(Ordering::Relaxed))
    }

    /// Offers `turn`, a queue's issuer turn (run by this executor's
    /// [`TurnRunner`]), to the workers through its queue's cell `cell`,
    /// from a thread that is not a worker. `Ok`: a worker that is not
    /// inside a task will run it before it runs any task (none of them
    /// can be blocked in user code meanwhile). `Err(turn)`: every worker
    /// is busy (maybe blocked until an action in this very turn is
    /// issued): the caller keeps the turn and drains on.
    ///
    /// The protocol is Dekker's: this thread stores the cell, fences and
    /// reads the workers' `running` flags; a worker leaving idle stores
    /// its flag, fences and reads the cells (`Worker::execute`). With both
    /// fences sequentially consistent one of the two sees the other: if
    /// this reads a worker's flag clear, that worker sees the turn before
    /// its next task (or, idle, after the wake-up this sends); if every
    /// flag reads set, the turn is taken back unless a worker took it
    /// first. (A worker is busy from the task it takes after idling until
    /// it next finds none: between tasks too, so a flag set once per busy
    /// stretch and one fence per stretch do, not per task.)
    ///
    /// The cell must be empty: a queue has one turn.
    pub(crate) fn offer_turn(&self, cell: usize, turn: NonNull<()>) -> Result<(), NonNull<()>> {
        let cell = &self.turns[cell];
        debug_assert!(cell.load(Ordering::Relaxed).is_null(), "one turn a queue");
        // Release: pairs with the Acquire swap in `Worker::run_turns`
        // (run.rs): the old holder's passes happen before the taker's.
        cell.store(turn.as_ptr(), Ordering::Release);
        // SeqCst: pairs with the fence in `Worker::execute` (run.rs), the
        // Dekker protocol above.
        fence(Ordering::SeqCst);
        if self.has_idle_worker() {
            // Wakes a parked worker, or stops one from parking past it.
            self.notify();
            return Ok(());
        }
        // Acquire: pairs with nothing: this reads our own store back or a
        // worker's null (its swap is Acquire only); not needed.
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
        // With levels, a `Low` task never runs next: it waits behind
        // everything else (a `High` or `Normal` one runs next unless the
        // worker then finds a `High` one waiting: `find_leveled`).
        if self.levels && Task::priority(task) == Priority::Low {
            return Err(task);
        }
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
