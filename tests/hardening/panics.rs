//! Panics in user code keep every protocol consistent: the panicking
//! action fails, the rest run, the queue and workers live on.

use super::*;
use fenceline::testing::SemaphoreInternals;

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
