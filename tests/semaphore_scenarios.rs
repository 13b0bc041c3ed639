//! Scenario tests of timeline semaphores: values, failure, host waits,
//! timepoints. Every blocking wait has a timeout so a bug fails, not hangs.

use fenceline::testing::SemaphoreInternals;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use fenceline::testing::timepoint::{Registration, Timepoint, TimepointPool};
use fenceline::{wait_all, wait_any, Error, ErrorKind, Semaphore, Timeout};

// Under Miri (about a thousand times slower) a hang limit of 10 s fails
// healthy runs.
const LONG: Duration = Duration::from_secs(if cfg!(miri) { 900 } else { 10 });

fn internal(msg: &'static str) -> Error {
    Error::new(ErrorKind::Internal, msg)
}

#[test]
fn no_op() {
    let s = Semaphore::new(7);
    assert_eq!(s.query().unwrap(), 7);
    let t = s.clone();
    assert!(t.same(&s));
    assert!(!Semaphore::new(7).same(&s));
}

#[test]
fn normal_signaling() {
    let s = Semaphore::new(0);
    s.signal(1).unwrap();
    assert_eq!(s.query().unwrap(), 1);
    s.signal(5).unwrap();
    assert_eq!(s.query().unwrap(), 5);
    s.clone().signal(6).unwrap();
    assert_eq!(s.query().unwrap(), 6);
}

#[test]
fn non_increasing_signal_rejected() {
    let s = Semaphore::new(3);
    for v in [0, 2, 3] {
        let e = s.signal(v).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains(&format!("signal({v})")), "{e}");
        assert_eq!(s.query().unwrap(), 3, "value unchanged");
    }
    let e = s.signal(u64::MAX).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(s.query().unwrap(), 3);
}

#[test]
fn failure() {
    let s = Semaphore::new(2);
    s.fail(internal("boom"));
    let e = s.query().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal);
    assert_eq!(e.message(), "boom");
    assert_eq!(s.signal(3).unwrap_err().message(), "boom");
    assert_eq!(s.wait(1, Timeout::Immediate).unwrap_err().message(), "boom");
}

#[test]
fn failure_preserves_kind() {
    for kind in [
        ErrorKind::Cancelled,
        ErrorKind::Aborted,
        ErrorKind::ResourceExhausted,
        ErrorKind::Unavailable,
    ] {
        let s = Semaphore::new(0);
        s.fail(Error::new(kind, "x"));
        assert_eq!(s.query().unwrap_err().kind(), kind);
        assert_eq!(s.wait(1, LONG).unwrap_err().kind(), kind);
    }
}

#[test]
fn double_failure_keeps_first() {
    let s = Semaphore::new(0);
    s.fail(Error::new(ErrorKind::Aborted, "first"));
    s.fail(Error::new(ErrorKind::Internal, "second"));
    let e = s.query().unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::Aborted, "first"));
}

#[test]
fn empty_wait() {
    wait_all(&[], Timeout::Immediate).unwrap();
    wait_all(&[], Timeout::Never).unwrap();
    let e = wait_any(&[], Timeout::Immediate).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn wait_already_signaled() {
    let s = Semaphore::new(4);
    s.wait(3, Timeout::Immediate).unwrap();
    s.wait(4, Timeout::Immediate).unwrap();
    s.wait(4, Timeout::Never).unwrap();
}

#[test]
fn wait_unsignaled_immediate_and_finite() {
    let s = Semaphore::new(1);
    let e = s.wait(2, Timeout::Immediate).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
    for ms in [1u64, 20] {
        let start = Instant::now();
        let e = s.wait(2, Duration::from_millis(ms)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
        assert!(
            start.elapsed() >= Duration::from_millis(ms),
            "returned DeadlineExceeded before the timeout"
        );
    }
    assert_eq!(s.query().unwrap(), 1);
}

#[test]
fn wait_later_signaled_beyond() {
    let s = Semaphore::new(0);
    let t = {
        let s = s.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(10));
            s.signal(10).unwrap();
        })
    };
    s.wait(5, LONG).unwrap();
    assert!(s.query().unwrap() >= 10);
    t.join().unwrap();
}

#[test]
fn wait_all_but_not_all_signaled() {
    let a = Semaphore::new(1);
    let b = Semaphore::new(0);
    let e = wait_all(&[(&a, 1), (&b, 1)], Duration::from_millis(5)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
    let e = wait_all(&[(&a, 1), (&b, 1)], Timeout::Immediate).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
}

#[test]
fn wait_all_and_all_signaled() {
    let a = Semaphore::new(0);
    let b = Semaphore::new(0);
    let t = {
        let (a, b) = (a.clone(), b.clone());
        thread::spawn(move || {
            a.signal(1).unwrap();
            thread::sleep(Duration::from_millis(5));
            b.signal(2).unwrap();
        })
    };
    wait_all(&[(&a, 1), (&b, 2)], LONG).unwrap();
    assert_eq!((a.query().unwrap(), b.query().unwrap()), (1, 2));
    t.join().unwrap();
}

#[test]
fn wait_any_already_signaled() {
    let a = Semaphore::new(0);
    let b = Semaphore::new(5);
    assert_eq!(
        wait_any(&[(&a, 1), (&b, 2)], Timeout::Immediate).unwrap(),
        1
    );
    assert_eq!(
        wait_any(&[(&b, 1), (&a, 2)], Timeout::Immediate).unwrap(),
        0
    );
}

#[test]
fn wait_any_later_signaled() {
    let a = Semaphore::new(0);
    let b = Semaphore::new(0);
    let t = {
        let b = b.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(10));
            b.signal(3).unwrap();
        })
    };
    assert_eq!(wait_any(&[(&a, 1), (&b, 3)], LONG).unwrap(), 1);
    assert_eq!(a.query().unwrap(), 0);
    t.join().unwrap();
}

#[test]
fn wait_on_more_semaphores_than_inline() {
    let sems: Vec<Semaphore> = (0..20).map(|_| Semaphore::new(0)).collect();
    let list: Vec<(&Semaphore, u64)> = sems.iter().map(|s| (s, 1)).collect();
    let t = {
        let sems = sems.clone();
        thread::spawn(move || {
            for s in &sems {
                s.signal(1).unwrap();
            }
        })
    };
    wait_all(&list, LONG).unwrap();
    t.join().unwrap();
    let fresh: Vec<Semaphore> = (0..20).map(|_| Semaphore::new(0)).collect();
    let list: Vec<(&Semaphore, u64)> = fresh.iter().map(|s| (s, 1)).collect();
    fresh[17].signal(1).unwrap();
    assert_eq!(wait_any(&list, LONG).unwrap(), 17);
}

#[test]
fn ping_pong() {
    const ROUNDS: u64 = 5000;
    let ping = Semaphore::new(0);
    let pong = Semaphore::new(0);
    let t = {
        let (ping, pong) = (ping.clone(), pong.clone());
        thread::spawn(move || {
            for i in 1..=ROUNDS {
                ping.wait(i, LONG).unwrap();
                pong.signal(i).unwrap();
            }
        })
    };
    for i in 1..=ROUNDS {
        ping.signal(i).unwrap();
        pong.wait(i, LONG).unwrap();
        assert_eq!(pong.query().unwrap(), i);
    }
    t.join().unwrap();
}

#[test]
fn many_waiters_same_value() {
    let s = Semaphore::new(0);
    let woke = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let (s, woke) = (s.clone(), woke.clone());
            thread::spawn(move || {
                s.wait(1, LONG).unwrap();
                woke.fetch_add(1, Ordering::Relaxed);
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(20));
    assert_eq!(woke.load(Ordering::Relaxed), 0, "nobody wakes early");
    s.signal(1).unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(woke.load(Ordering::Relaxed), 8);
}

#[test]
fn fail_then_wait() {
    let s = Semaphore::new(0);
    s.fail(Error::new(ErrorKind::Aborted, "gone"));
    let e = s.wait(1, LONG).unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::Aborted, "gone"));
}

#[test]
fn wait_then_fail() {
    let s = Semaphore::new(0);
    let t = {
        let s = s.clone();
        thread::spawn(move || s.wait(1, LONG))
    };
    thread::sleep(Duration::from_millis(10));
    s.fail(Error::new(ErrorKind::Cancelled, "device lost"));
    let e = t.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled);
}

#[test]
fn multi_wait_then_fail() {
    let a = Semaphore::new(0);
    let b = Semaphore::new(0);
    let t = {
        let (a, b) = (a.clone(), b.clone());
        thread::spawn(move || wait_all(&[(&a, 1), (&b, 1)], LONG))
    };
    thread::sleep(Duration::from_millis(10));
    b.fail(Error::new(ErrorKind::Internal, "b failed"));
    assert_eq!(t.join().unwrap().unwrap_err().message(), "b failed");
    assert_eq!(a.query().unwrap(), 0, "the other semaphore is untouched");
    a.signal(1).unwrap();
    // wait_any fails too when one of its semaphores failed.
    let c = Semaphore::new(0);
    assert_eq!(
        wait_any(&[(&c, 1), (&b, 1)], LONG).unwrap_err().message(),
        "b failed"
    );
}

// -------------------------------------------------------------------------
// Timepoints
// -------------------------------------------------------------------------

/// A chain link: when `from` reaches a value, signal `to` with it.
struct Chain {
    to: Semaphore,
    /// Signal `to` with the fired value plus this.
    add: u64,
    fired: AtomicUsize,
}

unsafe fn chain_cb(tp: NonNull<Timepoint>, result: Result<(), Error>) {
    // SAFETY: the test keeps the context alive until the chain is done.
    let tp = unsafe { tp.as_ref() };
    // SAFETY: as above.
    let chain = unsafe { &*tp.context().cast::<Chain>() };
    chain.fired.fetch_add(1, Ordering::SeqCst);
    match result {
        Ok(()) => chain.to.signal(tp.value() + chain.add).unwrap(),
        Err(e) => chain.to.fail(e),
    }
}

#[test]
fn chain_signal_from_callback() {
    // a -> b -> c through callbacks, which run with no lock held.
    let (a, b, c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let ab = Chain {
        to: b.clone(),
        add: 0,
        fired: AtomicUsize::new(0),
    };
    let bc = Chain {
        to: c.clone(),
        add: 0,
        fired: AtomicUsize::new(0),
    };
    let mut tp_ab = Timepoint::new(1, chain_cb, (&ab as *const Chain).cast());
    let mut tp_bc = Timepoint::new(1, chain_cb, (&bc as *const Chain).cast());
    // SAFETY: both timepoints outlive their firing (checked below).
    unsafe {
        assert!(matches!(
            b.register(NonNull::from(&mut tp_bc)),
            Registration::Pending
        ));
        assert!(matches!(
            a.register(NonNull::from(&mut tp_ab)),
            Registration::Pending
        ));
    }
    a.signal(1).unwrap();
    c.wait(1, LONG).unwrap();
    assert_eq!(ab.fired.load(Ordering::SeqCst), 1);
    assert_eq!(bc.fired.load(Ordering::SeqCst), 1);
    // A callback may re-enter the semaphore that fired it (no lock held).
    let again = Chain {
        to: a.clone(),
        add: 1,
        fired: AtomicUsize::new(0),
    };
    let mut tp = Timepoint::new(2, chain_cb, (&again as *const Chain).cast());
    // SAFETY: `tp` outlives its firing.
    unsafe {
        assert!(matches!(
            a.register(NonNull::from(&mut tp)),
            Registration::Pending
        ))
    };
    a.signal(2).unwrap();
    assert_eq!(a.query().unwrap(), 3);
    assert_eq!(again.fired.load(Ordering::SeqCst), 1);
}

/// Counts firings; the context is a shared counter.
unsafe fn count_cb(tp: NonNull<Timepoint>, result: Result<(), Error>) {
    assert!(result.is_ok());
    // SAFETY: the counter outlives the test's timepoints.
    let counter = unsafe { &*tp.as_ref().context().cast::<AtomicUsize>() };
    counter.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn concurrent_timepoint_registration_and_signal() {
    for _ in 0..200 {
        let s = Semaphore::new(0);
        let fired = AtomicUsize::new(0);
        let reached = AtomicUsize::new(0);
        let barrier = Barrier::new(2);
        let mut tps: Vec<Timepoint> = (1..=4)
            .map(|v| Timepoint::new(v, count_cb, (&fired as *const AtomicUsize).cast()))
            .collect();
        thread::scope(|scope| {
            scope.spawn(|| {
                barrier.wait();
                for v in 1..=4 {
                    s.signal(v).unwrap();
                }
            });
            barrier.wait();
            for tp in tps.iter_mut() {
                // SAFETY: each timepoint outlives the scope.
                match unsafe { s.register(NonNull::from(tp)) } {
                    Registration::Pending => {}
                    Registration::Reached => {
                        reached.fetch_add(1, Ordering::SeqCst);
                    }
                    Registration::Failed(e) => panic!("{e}"),
                }
            }
        });
        assert_eq!(
            fired.load(Ordering::SeqCst) + reached.load(Ordering::SeqCst),
            4,
            "each timepoint answered exactly once"
        );
    }
}

#[test]
fn cancel_racing_signal() {
    for _ in 0..500 {
        let s = Semaphore::new(0);
        let fired = AtomicUsize::new(0);
        let mut tp = Timepoint::new(1, count_cb, (&fired as *const AtomicUsize).cast());
        let ptr = NonNull::from(&mut tp);
        // SAFETY: `tp` outlives the race (the scope below).
        assert!(matches!(unsafe { s.register(ptr) }, Registration::Pending));
        let cancelled = thread::scope(|scope| {
            scope.spawn(|| s.signal(1).unwrap());
            // SAFETY: registered on `s` above.
            unsafe { s.cancel(ptr) }
        });
        assert_eq!(
            fired.load(Ordering::SeqCst),
            usize::from(!cancelled),
            "cancelled xor fired"
        );
        // SAFETY: no longer registered.
        assert!(!unsafe { s.cancel(ptr) }, "a second cancel finds nothing");
    }
}

#[test]
fn timepoints_fire_in_value_order_and_only_when_reached() {
    let s = Semaphore::new(0);
    let fired = AtomicUsize::new(0);
    let ctx = (&fired as *const AtomicUsize).cast();
    let mut tps: Vec<Timepoint> = [5u64, 1, 3, 3, 9]
        .iter()
        .map(|&v| Timepoint::new(v, count_cb, ctx))
        .collect();
    for tp in tps.iter_mut() {
        // SAFETY: the timepoints outlive the test's signals.
        let r = unsafe { s.register(NonNull::from(tp)) };
        assert!(matches!(r, Registration::Pending));
    }
    s.signal(2).unwrap();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    s.signal(4).unwrap();
    assert_eq!(fired.load(Ordering::SeqCst), 3);
    s.signal(8).unwrap();
    assert_eq!(fired.load(Ordering::SeqCst), 4);
    s.signal(9).unwrap();
    assert_eq!(fired.load(Ordering::SeqCst), 5);
}

#[test]
fn failure_fires_timepoints_with_the_error() {
    unsafe fn expect_err(tp: NonNull<Timepoint>, result: Result<(), Error>) {
        // SAFETY: the counter outlives the test.
        let counter = unsafe { &*tp.as_ref().context().cast::<AtomicUsize>() };
        assert_eq!(result.unwrap_err().kind(), ErrorKind::Aborted);
        counter.fetch_add(1, Ordering::SeqCst);
    }
    let s = Semaphore::new(0);
    let fired = AtomicUsize::new(0);
    let mut tp = Timepoint::new(1, expect_err, (&fired as *const AtomicUsize).cast());
    // SAFETY: `tp` outlives the failure.
    let r = unsafe { s.register(NonNull::from(&mut tp)) };
    assert!(matches!(r, Registration::Pending));
    s.fail(Error::new(ErrorKind::Aborted, "stop"));
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    let mut late = Timepoint::new(1, expect_err, (&fired as *const AtomicUsize).cast());
    // SAFETY: not linked when the answer is immediate.
    match unsafe { s.register(NonNull::from(&mut late)) } {
        Registration::Failed(e) => assert_eq!(e.kind(), ErrorKind::Aborted),
        other => panic!("{other:?}"),
    }
}

/// Releases a pooled timepoint from its own callback.
unsafe fn release_cb(tp: NonNull<Timepoint>, _result: Result<(), Error>) {
    // SAFETY: the context is the pool, alive for the test.
    let pool = unsafe { &*tp.as_ref().context().cast::<TimepointPool>() };
    // SAFETY: the timepoint came from `pool` and is no longer registered.
    unsafe { pool.release(tp) };
}

#[test]
fn signal_cost_is_linear_in_fired_timepoints() {
    // 100k pooled timepoints registered in increasing order, released one
    // signal at a time: each registration appends, each signal pops one.
    const N: u64 = 100_000;
    let pool = TimepointPool::new(None).unwrap();
    let ctx = (&pool as *const TimepointPool).cast();
    let s = Semaphore::new(0);
    for v in 1..=N {
        let tp = pool.acquire(v, release_cb, ctx).unwrap();
        // SAFETY: pooled timepoint, released by its callback.
        assert!(matches!(unsafe { s.register(tp) }, Registration::Pending));
    }
    let after_register = s.timepoints_examined();
    assert!(
        after_register <= N,
        "registration examined {after_register}"
    );
    for v in 1..=N {
        s.signal(v).unwrap();
    }
    let examined = s.timepoints_examined() - after_register;
    // Each signal examines the one it fires plus the next one it stops at.
    assert!(
        examined <= 2 * N,
        "signals examined {examined} for {N} timepoints"
    );
    let mut pool = pool;
    let capacity = pool.capacity();
    assert_eq!(
        pool.blocks_mut().count_free(),
        capacity,
        "every timepoint came back"
    );
}
