//! Teardown, reentrancy, panics and bad input: each test here reproduces a
//! defect a review found through the public API, and fails (or hangs into
//! its time limit) with that defect put back. The mutation each catches is
//! named in its comment.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use fenceline::queue::{Backend, Completion, PendingQueue};
use fenceline::semaphore::{Registration, Timepoint};
use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::{CpuConfig, Device, Error, ErrorKind, Semaphore, Tile, Timeout};

// Under Miri (about a thousand times slower) a hang limit of 10 s fails
// healthy runs.
const LIMIT: Duration = Duration::from_secs(if cfg!(miri) { 900 } else { 10 });

/// Runs `f` on its own thread; fails the test if it has not returned
/// within `LIMIT` (a hang becomes a failure, not a stuck CI run).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after {LIMIT:?} (hang)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

/// Signals its semaphore when dropped: placed after a handle in a tuple,
/// it reports that the handle's drop returned.
struct SignalOnDrop(Semaphore);
impl Drop for SignalOnDrop {
    fn drop(&mut self) {
        let _ = self.0.signal(1);
    }
}

fn cpu(workers: usize, queues: usize) -> Device {
    Device::cpu_with(CpuConfig {
        workers,
        queues,
        ..Default::default()
    })
    .unwrap()
}

// ---------------------------------------------------------------------------
// The last handle dropped inside the device's own work
// ---------------------------------------------------------------------------

// Mutation caught: `Device` drop waiting for in-flight work to reach zero
// wherever it runs (it then waits for the host call running it: hang).
#[test]
fn a_host_call_holding_the_last_handles_finishes_and_signals() {
    within("host call dropping the last device handle", || {
        let device = cpu(2, 1);
        let queue = device.queue(0).unwrap();
        let done = Semaphore::new(0);
        let q = queue.clone();
        let inner = done.clone();
        // The host call takes the device and a queue handle: once the test
        // drops its own queue handle, they are the last; they drop on the
        // worker when the call's closure is consumed.
        queue
            .host_call(&[], &[(&done, 1)], move || {
                let _keep = (device, q);
                inner.query().map(|_| ())
            })
            .unwrap();
        drop(queue);
        done.wait(1, LIMIT).unwrap();
    });
}

// Mutation caught: as above, from a dispatch closure whose recording holds
// the last queue handle (dropped when the finished action frees its
// payload, on a worker).
#[test]
fn a_dispatch_closure_holding_the_last_queue_handle_finishes() {
    within("dispatch closure dropping the last queue handle", || {
        let device = cpu(2, 1);
        let queue = device.queue(0).unwrap();
        let tiles = Arc::new(AtomicUsize::new(0));
        let freed = Semaphore::new(0);
        let mut cb = device.command_buffer().unwrap();
        // Dropped in order: the queue handle, then the flag.
        let held = (queue.clone(), SignalOnDrop(freed.clone()));
        let t = tiles.clone();
        cb.dispatch([8, 1, 1], move |_: &Tile| {
            let _ = &held;
            t.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        cb.end().unwrap();
        let done = Semaphore::new(0);
        queue.execute(&[], &[(&done, 1)], &[&cb]).unwrap();
        drop((cb, queue, device));
        done.wait(1, LIMIT).unwrap();
        assert_eq!(tiles.load(Ordering::Relaxed), 8);
        freed
            .wait(1, LIMIT)
            .expect("dropping the last handle returned");
    });
}

// Mutation caught: as above, with the host call submitting the next stage
// through the captured queue (the reason to capture it) before dropping it.
#[test]
fn a_host_call_may_submit_the_next_stage_then_drop_the_last_handle() {
    within("host call chaining through the last handle", || {
        let device = cpu(2, 2);
        let (first, second) = (device.queue(0).unwrap(), device.queue(1).unwrap());
        let (done, freed, ran) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
        let d = done.clone();
        let held = (second, SignalOnDrop(freed.clone()));
        first
            .host_call(&[], &[(&ran, 1)], move || {
                held.0.host_call(&[], &[(&d, 1)], || Ok(()))?;
                drop(held); // the last handle (the test dropped its own)
                Ok(())
            })
            .unwrap();
        drop(first);
        drop(device);
        done.wait(1, LIMIT).unwrap();
        freed
            .wait(1, LIMIT)
            .expect("dropping the last handle returned");
        ran.wait(1, LIMIT).unwrap();
    });
}

// Mutation caught: `Device` drop waiting for its queues to drain when it
// runs inside one of their issue passes (here: a pending host call holding
// the last handles is failed by a signal on the test thread; the pass that
// fails it drops the captures, and the drop waited for that very pass).
// Found by the soak test.
#[test]
fn a_pending_action_holding_the_last_handles_may_be_failed() {
    within(
        "failing a pending action that holds the last handles",
        || {
            let device = cpu(1, 1);
            let queue = device.queue(0).unwrap();
            let (gate, out, freed) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
            let held = (device, queue.clone(), SignalOnDrop(freed.clone()));
            queue
                .host_call(&[(&gate, 1)], &[(&out, 1)], move || {
                    let _ = &held;
                    Ok(())
                })
                .unwrap();
            drop(queue);
            gate.fail(Error::new(ErrorKind::Aborted, "the gate failed"));
            freed
                .wait(1, LIMIT)
                .expect("dropping the last handle returned");
            assert_eq!(out.query().unwrap_err().kind(), ErrorKind::Aborted);
        },
    );
}

// Mutation caught: `Executor` drop joining its workers from one of them
// (a task that captured the executor: joining itself).
#[test]
fn an_executor_dropped_from_its_own_task_shuts_down() {
    within("executor dropped inside its own task", || {
        let exec = Arc::new(
            Executor::new(ExecutorConfig {
                workers: 2,
                ..Default::default()
            })
            .unwrap(),
        );
        let scope = Scope::new();
        let ran = Semaphore::new(0);
        let r = ran.clone();
        let mut g = exec.graph(&scope);
        let mine = Some(exec.clone());
        let mut slot = mine;
        g.call(move |_| {
            drop(slot.take());
            r.signal(1)
        })
        .unwrap();
        g.submit();
        drop(exec);
        ran.wait(1, LIMIT).unwrap();
        scope.wait_idle(LIMIT).unwrap();
    });
}

// ---------------------------------------------------------------------------
// Panics in user code keep every protocol consistent
// ---------------------------------------------------------------------------

/// A backend whose `issue` panics for payload 0 and completes the rest.
struct PanickyBackend;

impl Backend for PanickyBackend {
    type Payload = u32;
    fn issue(&self, work: Completion<Self>) {
        if *work.payload() == 0 {
            panic!("backend refuses payload 0");
        }
        work.complete(Ok(()));
    }
}

// Mutation caught: a panic out of `Backend::issue` unwinding through the
// drain protocol (the request counter stays above zero: nothing is ever
// issued again, and the queue's drop hangs).
#[test]
fn a_panicking_backend_fails_its_action_and_the_queue_keeps_issuing() {
    within("queue after a panicking backend", || {
        let q = PendingQueue::new(PanickyBackend).unwrap();
        let (bad, good) = (Semaphore::new(0), Semaphore::new(0));
        q.submit(&[], &[(&bad, 1)], 0).unwrap();
        let e = bad.query().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal, "{e}");
        q.submit(&[], &[(&good, 1)], 1).unwrap();
        assert_eq!(good.query().unwrap(), 1, "the next action was issued");
        // And a pending one, issued later from a signal.
        let gate = Semaphore::new(0);
        q.submit(&[(&gate, 1)], &[(&good, 2)], 2).unwrap();
        gate.signal(1).unwrap();
        assert_eq!(good.query().unwrap(), 2);
        drop(q);
    });
}

unsafe fn panicking_callback(_tp: NonNull<Timepoint>, _r: Result<(), Error>) {
    panic!("timepoint callback panicked");
}

unsafe fn counting_callback(tp: NonNull<Timepoint>, _r: Result<(), Error>) {
    // SAFETY: the context is an `AtomicUsize` the test leaks until every
    // callback fired.
    let count = unsafe { &*tp.as_ref().context().cast::<AtomicUsize>() };
    count.fetch_add(1, Ordering::SeqCst);
}

// Mutation caught: `fire_all` letting one callback's panic skip the rest
// (the second timepoint never fires; a host waiter never wakes).
#[test]
fn a_panicking_timepoint_callback_does_not_skip_the_others() {
    within("fire_all with a panicking callback", || {
        let s = Semaphore::new(0);
        let fired: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        let ctx = (fired as *const AtomicUsize).cast::<()>();
        let bad = Box::leak(Box::new(Timepoint::new(1, panicking_callback, ctx)));
        let good = Box::leak(Box::new(Timepoint::new(1, counting_callback, ctx)));
        // SAFETY: both leaked (valid until freed once they fired), registered
        // once.
        unsafe {
            assert!(matches!(
                s.register(NonNull::from(&*bad)),
                Registration::Pending
            ));
            assert!(matches!(
                s.register(NonNull::from(&*good)),
                Registration::Pending
            ));
        }
        // A host waiter too: its node must fire and its unregister finish.
        let waiter = {
            let s = s.clone();
            std::thread::spawn(move || s.wait(1, LIMIT))
        };
        std::thread::sleep(Duration::from_millis(20)); // let it register
        let signalled = std::panic::catch_unwind(|| s.signal(1));
        assert!(
            signalled.is_err(),
            "the callback's panic reaches the signaller"
        );
        assert_eq!(fired.load(Ordering::SeqCst), 1, "the other timepoint fired");
        assert_eq!(s.query().unwrap(), 1);
        waiter.join().unwrap().unwrap();
        // SAFETY: both fired (off the semaphore's list, never touched
        // again), and nothing reads the counter any more: freed once, so
        // the test leaks nothing (LeakSanitizer).
        unsafe {
            drop(Box::from_raw(bad as *mut Timepoint));
            drop(Box::from_raw(good as *mut Timepoint));
            drop(Box::from_raw(
                fired as *const AtomicUsize as *mut AtomicUsize,
            ));
        }
    });
}

// Mutation caught: a panic from a timepoint callback fired inside an issue
// pass (an action's completion signalling) wedging the drain counter.
#[test]
fn a_callback_panicking_inside_a_pass_leaves_the_queue_working() {
    within("queue after a callback panicked inside its pass", || {
        let q = PendingQueue::new(PanickyBackend).unwrap();
        let s = Semaphore::new(0);
        let bad = Box::leak(Box::new(Timepoint::new(
            1,
            panicking_callback,
            std::ptr::null(),
        )));
        // SAFETY: leaked (valid until freed once it fired), registered once.
        unsafe {
            assert!(matches!(
                s.register(NonNull::from(&*bad)),
                Registration::Pending
            ))
        };
        // Completes inside the pass; its signal fires the bad callback.
        // (Inside `Backend::issue`, which contains it: the submitter may or
        // may not see the panic, the queue must not care.)
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            q.submit(&[], &[(&s, 1)], 1)
        }));
        assert_eq!(s.query().unwrap(), 1, "the action still signalled");
        // A callback fired by a cancellation inside a pass: the gate fails,
        // the pending action fails its signal, the callback panics.
        let (gate, t) = (Semaphore::new(0), Semaphore::new(0));
        let bad2 = Box::leak(Box::new(Timepoint::new(
            1,
            panicking_callback,
            std::ptr::null(),
        )));
        // SAFETY: leaked (valid until freed once it fired), registered once.
        unsafe {
            assert!(matches!(
                t.register(NonNull::from(&*bad2)),
                Registration::Pending
            ))
        };
        q.submit(&[(&gate, 1)], &[(&t, 1)], 1).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gate.fail(Error::new(ErrorKind::Aborted, "gate"))
        }));
        assert!(
            r.is_err(),
            "the callback's panic reaches the thread that failed the gate"
        );
        assert_eq!(t.query().unwrap_err().kind(), ErrorKind::Aborted);
        let next = Semaphore::new(0);
        q.submit(&[], &[(&next, 1)], 1).unwrap();
        assert_eq!(next.query().unwrap(), 1, "later submissions are issued");
        drop(q);
        // SAFETY: both fired (off their semaphores' lists, never touched
        // again): freed once, so the test leaks nothing (LeakSanitizer).
        unsafe {
            drop(Box::from_raw(bad as *mut Timepoint));
            drop(Box::from_raw(bad2 as *mut Timepoint));
        }
    });
}

/// Panics when dropped.
struct PanicOnDrop;
impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("a capture panicked in Drop");
    }
}

// Mutation caught: dropping a task's payload outside the panic guard (the
// panic kills the worker: its batch of retirements is lost, `wait_idle`
// and the executor's drop hang).
#[test]
fn a_capture_panicking_in_drop_fails_its_task_and_the_worker_lives() {
    within("executor after a capture panicked in Drop", || {
        let exec = Executor::new(ExecutorConfig {
            workers: 1,
            ..Default::default()
        })
        .unwrap();
        for _ in 0..3 {
            let scope = Scope::new();
            let mut g = exec.graph(&scope);
            let capture = PanicOnDrop;
            let a = g
                .call(move |_| {
                    let _ = &capture;
                    Ok(())
                })
                .unwrap();
            let after = Arc::new(AtomicUsize::new(0));
            let b = {
                let after = after.clone();
                g.call(move |_| {
                    after.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
                .unwrap()
            };
            g.set_completion(a, b).unwrap();
            g.submit();
            let e = scope.wait_idle(LIMIT).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Internal, "{e}");
            assert!(e.message().contains("Drop"), "{e}");
            assert_eq!(
                after.load(Ordering::Relaxed),
                0,
                "its dependent was skipped"
            );
        }
        // The one worker still runs work.
        let scope = Scope::new();
        let mut g = exec.graph(&scope);
        g.nop().unwrap();
        g.submit();
        scope.wait_idle(LIMIT).unwrap();
        drop(exec);
    });
}

// Mutation caught: as above, for a host call whose captures are dropped
// without it running (cancelled at shutdown) or after it ran.
#[test]
fn a_host_call_capture_panicking_in_drop_fails_only_its_action() {
    within("device after a host call capture panicked in Drop", || {
        let device = cpu(1, 1);
        let q = device.queue(0).unwrap();
        let (a, b) = (Semaphore::new(0), Semaphore::new(0));
        let capture = PanicOnDrop;
        q.host_call(&[], &[(&a, 1)], move || {
            let _ = &capture;
            Ok(())
        })
        .unwrap();
        let e = a.wait(1, LIMIT).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal, "{e}");
        q.host_call(&[], &[(&b, 1)], || Ok(())).unwrap();
        b.wait(1, LIMIT).unwrap();
        // Pending at drop: cancelled, and its capture's panic is contained.
        let (never, c) = (Semaphore::new(0), Semaphore::new(0));
        let capture = PanicOnDrop;
        q.host_call(&[(&never, 1)], &[(&c, 1)], move || {
            let _ = &capture;
            Ok(())
        })
        .unwrap();
        drop(q);
        drop(device);
        assert!(c.query().is_err(), "the cancelled action failed its signal");
    });
}

// ---------------------------------------------------------------------------
// Every queued task stays reachable; scopes go idle on time; timers fire
// ---------------------------------------------------------------------------

// Mutation caught: a worker moving the whole injector into a private list
// and exposing only part of it to thieves (the rest is stranded while the
// worker blocks in a call waiting on a fence behind them).
#[test]
fn a_blocked_worker_strands_no_queued_task() {
    within("call waiting on a fence behind 40 nops", || {
        let exec = Executor::new(ExecutorConfig {
            workers: 2,
            spin: false,
        })
        .unwrap();
        let scope = Scope::new();
        let fence = Semaphore::new(0);
        let mut g = exec.graph(&scope);
        let f = fence.clone();
        let (tx, rx) = mpsc::channel();
        g.call(move |_| {
            let _ = tx.send(f.wait(1, Duration::from_secs(5)));
            Ok(())
        })
        .unwrap();
        let first = g.nop().unwrap();
        for _ in 1..40 {
            g.nop().unwrap();
        }
        let signal = g.fence(Some((&fence, 1))).unwrap();
        g.join_from(first, signal).unwrap();
        g.submit();
        let waited = rx.recv_timeout(LIMIT).unwrap();
        waited.expect("the fence behind the nops was reached");
        scope.wait_idle(LIMIT).unwrap();
    });
}

// Mutation caught: a worker publishing a scope's retirements only at its
// next idle or scope change at retire (the scope stays busy while the
// worker runs a long task of another scope).
#[test]
fn a_scope_is_idle_when_its_last_task_retires() {
    within(
        "scope idle while the worker runs another scope's task",
        || {
            let exec = Arc::new(
                Executor::new(ExecutorConfig {
                    workers: 1,
                    spin: false,
                })
                .unwrap(),
            );
            let (first, second) = (Scope::new(), Scope::new());
            let release = Semaphore::new(0);
            let mut g = exec.graph(&first);
            let (e, s2, r) = (exec.clone(), second.clone(), release.clone());
            // The one worker runs this task, which queues a long task of
            // another scope, then retires: the worker goes straight on to it.
            let mut long = Some(move || r.wait(1, LIMIT));
            g.call(move |_| {
                let mut g2 = e.graph(&s2);
                if let Some(f) = long.take() {
                    g2.call(move |_| f())?;
                }
                g2.submit();
                Ok(())
            })
            .unwrap();
            g.submit();
            let idle = first.wait_idle(Duration::from_secs(3));
            release.signal(1).unwrap();
            idle.expect("the first scope went idle while the other task ran");
            second.wait_idle(LIMIT).unwrap();
        },
    );
}

// Mutation caught: a timed wait's deadline armed only by the worker that
// parks after suspending it (a worker parked earlier keeps sleeping with no
// timer while the suspending worker runs a long task).
#[test]
fn a_timed_wait_fires_while_another_worker_idles() {
    within("timed wait with the other worker parked", || {
        let exec = Executor::new(ExecutorConfig {
            workers: 2,
            spin: false,
        })
        .unwrap();
        // Let both workers park with no timer.
        std::thread::sleep(Duration::from_millis(100));
        let scope = Scope::new();
        let (never, release) = (Semaphore::new(0), Semaphore::new(0));
        let (tx, rx) = mpsc::channel();
        let mut g = exec.graph(&scope);
        // Ready together: one worker takes both, suspends the wait, then
        // runs the long call; the other stays parked.
        let w = g.wait(&never, 1, Duration::from_millis(100)).unwrap();
        let report = g
            .finally(move |r| {
                let _ = tx.send(r);
            })
            .unwrap();
        g.set_completion(w, report).unwrap();
        let r = release.clone();
        g.call(move |_| r.wait(1, LIMIT)).unwrap();
        g.submit();
        let got = rx.recv_timeout(Duration::from_secs(3));
        release.signal(1).unwrap();
        let e = got
            .expect("the wait timed out while the other worker was idle")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
        let _ = scope.wait_idle(LIMIT);
    });
}

// ---------------------------------------------------------------------------
// Bad input: a clear error, nothing changed
// ---------------------------------------------------------------------------

// Mutation caught: the tile count computed with a wrapping product (a
// `[u32::MAX; 3]` grid then runs the wrong number of tiles in release).
#[test]
fn a_grid_whose_tile_count_overflows_is_rejected_at_record_time() {
    let device = cpu(1, 1);
    let mut cb = device.command_buffer().unwrap();
    let e = cb.dispatch([u32::MAX; 3], |_: &Tile| Ok(())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Nothing was recorded: the buffer ends empty and runs nothing.
    cb.dispatch([u32::MAX, u32::MAX, 1], |_: &Tile| Ok(()))
        .expect("2^64 - 2^33 + 1 tiles still count in u64");
    let exec = Executor::new(ExecutorConfig {
        workers: 1,
        ..Default::default()
    })
    .unwrap();
    let scope = Scope::new();
    let mut g = exec.graph(&scope);
    let e = g.dispatch([u32::MAX; 3], |_: &Tile| Ok(())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(
        format!("{g:?}").contains("tasks: 0"),
        "no task added: {g:?}"
    );
}

// Mutation caught: submitting `u64::MAX` (the failure value) as a wait or
// signal value (the wait can never be met; the signal fails the semaphore
// at completion).
#[test]
fn the_reserved_value_is_rejected_at_submit_and_nothing_changes() {
    let device = cpu(1, 1);
    let q = device.queue(0).unwrap();
    let (s, t) = (Semaphore::new(0), Semaphore::new(0));
    let e = q.barrier(&[], &[(&s, u64::MAX)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = q
        .host_call(&[(&s, u64::MAX)], &[(&t, 1)], || Ok(()))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let mut cb = device.command_buffer().unwrap();
    cb.end().unwrap();
    let e = q
        .execute(&[], &[(&t, 1), (&s, u64::MAX)], &[&cb])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Every semaphore untouched, and the queue still works.
    q.barrier(&[], &[(&s, 1), (&t, 1)]).unwrap();
    s.wait(1, LIMIT).unwrap();
    t.wait(1, LIMIT).unwrap();
    assert_eq!(
        s.wait(2, Timeout::Immediate).unwrap_err().kind(),
        ErrorKind::DeadlineExceeded
    );
}
