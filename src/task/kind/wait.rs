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
use crate::task::context::TaskContext;
use crate::task::header::{Outcome, Task, FLAG_CANCELLED};
use crate::task::worker::ExecutorState;

/// A wait task's payload: what it waits for, its timepoint, and its place
/// in the executor's list of parked waits (for timeouts and shutdown).
///
/// The protocol (no lock on the signalling thread, no waiting anywhere):
/// the timepoint is [abandonable](Timepoint::abandonable). Its callback,
/// whether it fires or was abandoned, only requeues the task (lock-free).
/// The task lists the state and registers it in one critical section of
/// the list's lock (listed first: once registered, the task may run again
/// elsewhere, and this worker touches nothing of it); a worker expiring
/// parked waits (a deadline passed, or shutdown) claims
/// the timepoint for abandoning under that lock too, and unlists the
/// state. A requeued task unlists itself under the lock before anything
/// else. So whoever touches a parked state under the lock finds it alive:
/// its task cannot run past that first step (and retire) meanwhile. A
/// claim that lost to a firing leaves the task to the callback; a claim
/// that won keeps the timepoint (and the state) alive until its callback
/// runs, which is after the expiring worker handed it to the semaphore
/// ([`Semaphore::abandon_claimed`]) with the lock released.
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
}
link!(
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
            timepoint: Timepoint::abandonable(value, wait_wake, std::ptr::null()),
            listed: crate::sync::Cell::new(false),
        }
    }

    /// Takes a parked wait whose deadline passed (or every one, at
    /// shutdown) off the executor's list and claims its timepoint for
    /// abandoning: claimed, the state goes on `claimed`, for
    /// [`abandon_claimed`](Self::abandon_claimed) once the list's lock is
    /// released; otherwise it fired, and its callback requeues the task.
    ///
    /// # Safety
    /// `w` is linked in `waits` (the executor's list, locked).
    pub(crate) unsafe fn expire(
        w: NonNull<WaitState>,
        waits: &mut crate::list::DList<WaitLink>,
        claimed: &mut crate::list::DList<WaitLink>,
    ) {
        // SAFETY: listed, hence alive: its task, if requeued, is stopped at
        // its first step (unlisting) by the lock we hold.
        let state = unsafe { w.as_ref() };
        state.listed.set(false);
        // SAFETY: linked in `waits`.
        let w = unsafe { waits.remove(w) };
        if state.timepoint.claim_abandon() {
            // Claimed: alive until its callback runs, which needs
            // `abandon_claimed` first.
            claimed.push_back(w);
        }
    }

    /// Hands a timepoint claimed by [`expire`](Self::expire) to its
    /// semaphore: its callback (here, or on the thread holding the
    /// semaphore's turn) requeues the task.
    ///
    /// # Safety
    /// `w` was put on a `claimed` list by `expire` and taken off it, and
    /// not handed over since.
    pub(crate) unsafe fn abandon_claimed(w: NonNull<WaitState>) {
        // SAFETY: claimed, so alive until its callback runs.
        let state = unsafe { w.as_ref() };
        // Our own handle: the callback may requeue the task, which may
        // retire and free the state (and its handle) during the call.
        let sem = state.sem.clone();
        // SAFETY: registered on `sem` (it was listed), claimed once, alive
        // until its callback runs.
        unsafe { sem.abandon_claimed(NonNull::from(&state.timepoint)) };
    }

    /// Takes the state out of the executor's list of parked waits, if it
    /// is there (a requeued task's first step; an expiry unlisted it
    /// already).
    fn unlist(&self, exec: &ExecutorState) {
        let mut waits = exec.lock_waits();
        if self.listed.get() {
            // SAFETY: listed means linked in `waits`, whose lock we hold.
            let _ = unsafe { waits.remove(NonNull::from(self)) };
            self.listed.set(false);
        }
        // Release: pairs with the Acquire loads of the count in
        // `Worker::nearest_deadline` and `expire_waits` (idle.rs); a hint.
        exec.suspended_waits.store(waits.len(), Ordering::Release);
    }
}

/// Timepoint callback of a wait task, fired or abandoned: requeue the
/// task (flagged cancelled if abandoned at shutdown). Takes no lock.
unsafe fn wait_wake(tp: NonNull<Timepoint>, _result: Result<(), Error>) {
    // SAFETY: the timepoint lies in the `WaitState` holding it, alive
    // while the task is suspended (it is, until we requeue it).
    let context = unsafe { tp.as_ref() }.context();
    // SAFETY: the context is the `WaitState` holding this timepoint, alive
    // while the task is suspended (it is, until we requeue it).
    let state = unsafe { &*context.cast::<WaitState>() };
    // Our own reference to the executor: once the task is injected it may
    // run, retire (dropping the state's reference) and be the executor's
    // last task, and the executor may be freed before `notify` below.
    let Some(shared) = state.shared.clone() else {
        unreachable!("a suspended wait task holds its executor");
    };
    let task = state.task;
    // SAFETY: as above; read before the task is requeued.
    // Acquire: pairs with the Release store in `begin_shutdown` (state.rs).
    if unsafe { tp.as_ref() }.is_abandoned() && shared.shutdown.load(Ordering::Acquire) {
        // SAFETY: the task is suspended and ours to requeue.
        unsafe { task.as_ref() }
            .flags
            .fetch_or(FLAG_CANCELLED, Ordering::Relaxed);
    }
    shared.inject(task);
}

impl Kind for WaitState {
    const NAME: &'static str = "wait";

    unsafe fn run(task: NonNull<Task>, tasks: &mut TaskContext) -> Outcome {
        let ptr = Task::payload_ptr::<WaitState>(task);
        {
            // A shared borrow until the state is out of the list: an
            // expiring worker may still write its list fields (interior
            // mutable) under the lock.
            // SAFETY: the payload is a `WaitState`.
            let state = unsafe { &*ptr };
            if state.shared.is_some() {
                // Requeued (fired or abandoned): out of the list first,
                // under its lock, before anything may end the task.
                state.unlist(tasks.executor());
            }
        }
        // SAFETY: the payload is a `WaitState`, owned by the running worker
        // now that no list holds it.
        let state = unsafe { &mut *ptr };
        // SAFETY: ours while running.
        // Acquire: pairs with no Release (`wait_wake` sets the flag
        // Relaxed); the injector's push and take order it before this run.
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
                state.shared = Some(tasks.executor().clone());
            }
            let ctx = (state as *const WaitState).cast::<()>();
            state.timepoint = Timepoint::abandonable(state.value, wait_wake, ctx);
            let timed = state.deadline.is_some();
            let mut waits = tasks.executor().lock_waits();
            // Listed and registered in one critical section, so no
            // expiring worker sees the state listed before its timepoint is
            // registered; listed first, as once registered the timepoint
            // may fire and the task run again on another worker, after
            // which this one must not touch the state. The callbacks a
            // registration may run take no such lock.
            // SAFETY: the state lives in the suspended task's payload until
            // its task, requeued, unlists it (under this lock); `listed` is
            // false, so it is in no list.
            waits.push_back(unsafe { Handle::from_raw(NonNull::from(&*state)) });
            state.listed.set(true);
            // SAFETY: the timepoint stays in place until its callback runs
            // (the task is suspended, its block not freed, until then).
            match unsafe { state.sem.register(NonNull::from(&state.timepoint)) } {
                Registration::Pending => {
                    // Release: pairs with the count's Acquire loads in
                    // idle.rs, as in `unlist`.
                    tasks
                        .executor()
                        .suspended_waits
                        .store(waits.len(), Ordering::Release);
                    drop(waits);
                    if timed {
                        // A parked worker armed its timer before this
                        // deadline existed: wake one, so it re-arms (this
                        // worker may stay busy with other tasks for long).
                        tasks.executor().notify();
                    }
                    return Outcome::Suspended;
                }
                Registration::Reached | Registration::Failed(_) => {
                    // Never registered: out again before anyone saw it.
                    // SAFETY: listed just above, under this lock.
                    let _ = unsafe { waits.remove(NonNull::from(&*state)) };
                    state.listed.set(false);
                    // Loop: the query above now answers.
                }
            }
        }
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::task::{Executor, ExecutorConfig, Scope};
    use crate::{Semaphore, Timeout};

    /// A signal that wakes a parked wait task takes no lock: it returns
    /// while another thread holds the executor's list of parked waits (the
    /// woken task then waits for the list, on its worker). Mutation
    /// checked: `wait_wake` taking that list's lock, as it did before: the
    /// signal does not return while the list is held.
    #[test]
    fn a_signal_wakes_a_parked_wait_task_while_the_list_of_waits_is_held() {
        let exec = Executor::new(ExecutorConfig {
            workers: 1,
            spin: false,
        })
        .unwrap();
        let scope = Scope::new();
        let gate = Semaphore::new(0);
        let mut g = exec.graph(&scope);
        g.wait(&gate, 1, Timeout::Never).unwrap();
        g.submit();
        while gate.timepoints_registered() == 0 {
            std::thread::yield_now();
        }
        let waits = exec.shared.lock_waits();
        assert_eq!(waits.len(), 1, "the wait task is parked");
        let (tx, rx) = mpsc::channel();
        let signaller = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.signal(1).unwrap();
                tx.send(()).unwrap();
            })
        };
        let returned = rx.recv_timeout(Duration::from_secs(5)).is_ok();
        drop(waits);
        signaller.join().unwrap();
        assert!(returned, "the signal waited for the list of parked waits");
        scope.wait_idle(Duration::from_secs(10)).unwrap();
    }
}
