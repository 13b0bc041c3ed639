//! `wait`: until a semaphore reaches a value, parked on a timepoint, with an
//! optional deadline.

use std::ptr::NonNull;
use std::time::Instant;

use super::Kind;
use crate::error::{Error, ErrorKind};
use crate::list::{DoubleLinks, Handle};
use crate::semaphore::{Registration, Semaphore, Timepoint};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;
use crate::task::task::{Outcome, Task, FLAG_CANCELLED};
use crate::task::worker::{ExecutorState, Worker};

/// A wait task's payload: what it waits for, its timepoint, and its place
/// in the executor's list of parked waits (for timeouts and shutdown).
pub(crate) struct WaitState {
    links: DoubleLinks<WaitState>,
    task: NonNull<Task>,
    /// The executor, held while the task is suspended: the wake hands the
    /// task over and then notifies a worker, and the executor may be
    /// dropped between the two.
    shared: Option<Arc<ExecutorState>>,
    sem: Semaphore,
    value: u64,
    pub(crate) deadline: Option<Instant>,
    timepoint: Timepoint,
    /// In `shared.waits`; guarded by that lock.
    listed: crate::sync::Cell<bool>,
    /// Being expired (timed out or cancelled at shutdown) by a worker that
    /// took it off `shared.waits`: the callback must not requeue the task
    /// (the expiring worker does). Guarded by that lock.
    expiring: crate::sync::Cell<bool>,
    /// The callback ran while `expiring`. Guarded by that lock.
    fired: crate::sync::Cell<bool>,
}
crate::link!(
    /// A suspended wait's place in the executor's list of parked waits.
    pub(crate) WaitLink: DoubleLinks<WaitState> => links
);

impl WaitState {
    pub(crate) fn new(sem: Semaphore, value: u64, deadline: Option<Instant>) -> WaitState {
        WaitState {
            links: DoubleLinks::new(),
            task: NonNull::dangling(),
            shared: None,
            sem,
            value,
            deadline,
            timepoint: Timepoint::new(value, wait_wake, std::ptr::null()),
            listed: crate::sync::Cell::new(false),
            expiring: crate::sync::Cell::new(false),
            fired: crate::sync::Cell::new(false),
        }
    }

    /// Takes a parked wait whose deadline passed (or every one, at
    /// shutdown) off the executor's list, to expire it with [`expire`]
    /// once the list's lock is released: its callback will then not
    /// requeue the task.
    ///
    /// # Safety
    /// `w` is linked in `waits` (the executor's list, locked).
    pub(crate) unsafe fn take_for_expiry(
        w: NonNull<WaitState>,
        waits: &mut crate::list::DList<WaitLink>,
    ) -> crate::list::Handle<WaitLink> {
        // SAFETY: listed, hence alive.
        let state = unsafe { w.as_ref() };
        state.expiring.set(true);
        state.listed.set(false);
        // SAFETY: linked in `waits`.
        unsafe { waits.remove(w) }
    }

    /// Expires a wait taken by [`take_for_expiry`], with no lock held (a
    /// cancel may run callbacks, and wait callbacks take the executor's
    /// list): returns its task to requeue, or `None` if its callback will
    /// requeue it. Cancelled in time, the task is flagged cancelled at
    /// shutdown (or finds its deadline passed when it runs); fired, it
    /// finds its value reached.
    ///
    /// # Safety
    /// `w` was taken by `take_for_expiry` on `exec`'s list and not since.
    pub(crate) unsafe fn expire(
        w: NonNull<WaitState>,
        exec: &ExecutorState,
        shutdown: bool,
    ) -> Option<NonNull<Task>> {
        // SAFETY: `expiring` keeps the callback from requeueing the task,
        // so the state is alive until we decide below.
        let state = unsafe { w.as_ref() };
        // SAFETY: the timepoint was registered on `sem` (it was listed).
        let cancelled = unsafe { state.sem.cancel(NonNull::from(&state.timepoint)) };
        let waits = exec.lock_waits();
        state.expiring.set(false);
        if cancelled {
            // No callback will run: the task is ours.
            if shutdown {
                // SAFETY: the task is suspended and now ours.
                unsafe { state.task.as_ref() }
                    .flags
                    .fetch_or(FLAG_CANCELLED, Ordering::Relaxed);
            }
            return Some(state.task);
        }
        // Fired: if its callback already ran, it left the task to us;
        // otherwise, seeing `expiring` cleared, it requeues the task itself
        // (both decided under the list's lock).
        let ours = state.fired.get();
        state.fired.set(false);
        drop(waits);
        ours.then_some(state.task)
    }
}

impl WaitState {
    /// Takes the state out of the executor's list of parked waits, if it
    /// is there (the wake and a registration that found the value reached
    /// both do; an expiry unlisted it already).
    fn unlist(&self, exec: &ExecutorState) {
        let mut waits = exec.lock_waits();
        if self.listed.get() {
            // SAFETY: listed means linked in `waits`, whose lock we hold.
            let _ = unsafe { waits.remove(NonNull::from(self)) };
            self.listed.set(false);
        }
        exec.suspended_waits.store(waits.len(), Ordering::Release);
    }
}

/// Timepoint callback of a wait task: unlist it and make it ready.
unsafe fn wait_wake(tp: NonNull<Timepoint>, _result: Result<(), Error>) {
    // SAFETY: the context is the `WaitState` holding this timepoint, alive
    // while the task is suspended (it is, until we requeue it).
    let state = unsafe { &*tp.as_ref().context().cast::<WaitState>() };
    // Our own reference to the executor: once the task is injected it may
    // run, retire (dropping the state's reference) and be the executor's
    // last task, and the executor may be freed before `notify` below.
    let Some(shared) = state.shared.clone() else {
        unreachable!("a suspended wait task holds its executor");
    };
    {
        let waits = shared.lock_waits();
        if state.expiring.get() {
            // A worker expiring the wait requeues the task once we report;
            // after this we touch nothing of it.
            state.fired.set(true);
            drop(waits);
            return;
        }
    }
    state.unlist(&shared);
    shared.inject(state.task);
}

impl Kind for WaitState {
    const NAME: &'static str = "wait";

    unsafe fn run(task: NonNull<Task>, worker: &mut Worker) -> Outcome {
        // SAFETY: the payload is a `WaitState`, owned by the running worker.
        let state = unsafe { &mut *Task::payload_ptr::<WaitState>(task) };
        // SAFETY: ours while running.
        if unsafe { task.as_ref() }.flags.load(Ordering::Acquire) & FLAG_CANCELLED != 0 {
            return Outcome::Done(Err(Error::new(
                ErrorKind::Cancelled,
                "wait task cancelled: the executor was dropped",
            )));
        }
        loop {
            match state.sem.query() {
                Err(e) => return Outcome::Done(Err(e)),
                Ok(v) if v >= state.value => return Outcome::Done(Ok(())),
                Ok(_) => {}
            }
            if state.deadline.is_some_and(|d| Instant::now() >= d) {
                return Outcome::Done(Err(Error::new(
                    ErrorKind::DeadlineExceeded,
                    format!("wait task: semaphore did not reach {} in time", state.value),
                )));
            }
            state.task = task;
            if state.shared.is_none() {
                state.shared = Some(worker.shared.clone());
            }
            let ctx = (state as *const WaitState).cast::<()>();
            state.timepoint = Timepoint::new(state.value, wait_wake, ctx);
            {
                let mut waits = worker.shared.lock_waits();
                // SAFETY: the state lives in the suspended task's payload until
                // the task is requeued, which unlists it first; `listed` is
                // false (an unlisted state), so it is in no list.
                waits.push_back(unsafe { Handle::from_raw(NonNull::from(&*state)) });
                state.listed.set(true);
                worker
                    .shared
                    .suspended_waits
                    .store(waits.len(), Ordering::Release);
            }
            // Read before registering: once registered, the timepoint may fire
            // and the task run (and be freed) on another worker.
            let timed = state.deadline.is_some();
            // SAFETY: the timepoint stays in place until it fires or is
            // cancelled (the task is suspended, its block not freed).
            match unsafe { state.sem.register(NonNull::from(&state.timepoint)) } {
                Registration::Pending => {
                    if timed {
                        // A parked worker armed its timer before this deadline
                        // existed: wake one, so it re-arms (this worker may
                        // stay busy with other tasks for long).
                        worker.shared.notify();
                    }
                    return Outcome::Suspended;
                }
                Registration::Reached | Registration::Failed(_) => {
                    state.unlist(&worker.shared);
                    // Loop: the query above now answers.
                }
            }
        }
    }
}
