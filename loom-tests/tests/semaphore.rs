//! loom models of the timeline semaphore: a timepoint registered while
//! another thread signals, fails or cancels is answered exactly once and
//! never lost; a parked host wait is always woken.
//!
//! Each model runs both ways of taking the turn (the CAS from 0 of a pass
//! nobody asked for, and the `fetch_or` of a request): mutation checked,
//! the CAS from 0 with a relaxed success ordering (the list not taken
//! from its last holder) fails every model here but the event handle's.
#![cfg(fenceline_loom)]

use std::ptr::NonNull;

use fenceline::semaphore::{Registration, Timepoint};
use fenceline::{Error, ErrorKind, Semaphore, Timeout};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Counts firings: `Ok` in the low half, `Err` in the high.
unsafe fn count(tp: NonNull<Timepoint>, result: Result<(), Error>) {
    // SAFETY: the counter outlives every timepoint of the model.
    let counter = unsafe { &*tp.as_ref().context().cast::<AtomicUsize>() };
    counter.fetch_add(if result.is_ok() { 1 } else { 1 << 16 }, Ordering::SeqCst);
}

/// A heap timepoint the model frees at the end (it must outlive firing).
struct Tp(NonNull<Timepoint>);
// SAFETY: the timepoint is handed between threads under the semaphore's
// contract.
unsafe impl Send for Tp {}
unsafe impl Sync for Tp {}
impl Tp {
    fn new(value: u64, counter: &AtomicUsize) -> Tp {
        let tp = Box::new(Timepoint::new(
            value,
            count,
            (counter as *const AtomicUsize).cast(),
        ));
        Tp(NonNull::from(Box::leak(tp)))
    }
}
impl Drop for Tp {
    fn drop(&mut self) {
        // SAFETY: from `Box::leak`; no longer registered when dropped.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

#[test]
fn registration_racing_signal_fires_exactly_once() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1).unwrap())
        };
        let tp = Tp::new(1, &counter);
        // SAFETY: `tp` outlives its firing (dropped after the join).
        let answer = unsafe { s.register(tp.0) };
        signaller.join().unwrap();
        let fired = counter.load(Ordering::SeqCst);
        match answer {
            Registration::Reached => assert_eq!(fired, 0, "answered twice"),
            Registration::Pending => assert_eq!(fired, 1, "lost wake-up"),
            Registration::Failed(e) => panic!("{e}"),
        }
    });
}

#[test]
fn registration_racing_fail_fires_exactly_once() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        let failer = {
            let s = s.clone();
            thread::spawn(move || s.fail(Error::new(ErrorKind::Aborted, "x")))
        };
        let tp = Tp::new(1, &counter);
        // SAFETY: `tp` outlives its firing.
        let answer = unsafe { s.register(tp.0) };
        failer.join().unwrap();
        let fired = counter.load(Ordering::SeqCst);
        match answer {
            Registration::Failed(e) => {
                assert_eq!(e.kind(), ErrorKind::Aborted);
                assert_eq!(fired, 0);
            }
            Registration::Pending => assert_eq!(fired, 1 << 16, "fired once, with the error"),
            Registration::Reached => panic!("never signalled"),
        }
    });
}

#[test]
fn cancel_racing_signal_is_exclusive() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        let tp = Tp::new(1, &counter);
        // SAFETY: `tp` outlives the model's threads.
        assert!(matches!(unsafe { s.register(tp.0) }, Registration::Pending));
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1).unwrap())
        };
        // SAFETY: registered on `s`.
        let cancelled = unsafe { s.cancel(tp.0) };
        signaller.join().unwrap();
        assert_eq!(counter.load(Ordering::SeqCst), usize::from(!cancelled));
    });
}

#[test]
fn parked_waiter_is_woken_by_signal() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1).unwrap())
        };
        s.wait(1, Timeout::Never).unwrap();
        signaller.join().unwrap();
    });
}

#[test]
fn waiter_sees_failure_racing_with_its_wait() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let failer = {
            let s = s.clone();
            thread::spawn(move || s.fail(Error::new(ErrorKind::Cancelled, "dropped")))
        };
        let e = s.wait(1, Timeout::Never).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Cancelled);
        failer.join().unwrap();
    });
}

#[test]
fn event_handle_clone_and_drop_across_threads_returns_once() {
    use fenceline::semaphore::EventPool;
    loom::model(|| {
        let pool = EventPool::new(|| Ok(7u32), |_| {}, 1, 1).unwrap();
        let h = pool.acquire().unwrap();
        let other = h.clone();
        let t = thread::spawn(move || {
            assert_eq!(*other.event(), 7);
            drop(other);
        });
        drop(h);
        t.join().unwrap();
        // Exactly once: the single slot is free again (a missed return
        // fails this acquire; a double return would hand it out twice).
        let a = pool.acquire().unwrap();
        assert_eq!(
            pool.acquire().unwrap_err().kind(),
            ErrorKind::ResourceExhausted
        );
        drop(a);
    });
}

// The list's turn (see `semaphore.rs`): registrations and signals never
// wait for it; whoever holds it serves every request before giving it back.
// Mutations checked, each fails a model below: giving the turn back with a
// plain store instead of the CAS that fails on a new request (a request
// made during the last pass is lost: a timepoint never fires); reading the
// value in a pass with a plain load instead of a read-modify-write (a
// signal whose CAS came first is missed); counting a registration in
// `waiting` after it asked for a pass instead of before (a signal reads 0
// and asks for no pass); linking a newly registered timepoint whose value
// the pass's value already reaches instead of firing it (the list is
// scanned again only once the value moves: it would wait for a later
// signal).
//
// Signals and registrations never wait: each is one read-modify-write on
// the turn word (no loop), which is why no model needs to check it.

#[test]
fn two_registrations_and_a_signal_fire_each_timepoint_once() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        let (a, b) = (
            Arc::new(Tp::new(1, &counter)),
            Arc::new(Tp::new(1, &counter)),
        );
        let other = {
            let (s, b) = (s.clone(), b.clone());
            // SAFETY: `b` outlives its firing (joined before the drop).
            thread::spawn(move || unsafe { s.register(b.0) })
        };
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1).unwrap())
        };
        // SAFETY: `a` outlives its firing.
        let answer_a = unsafe { s.register(a.0) };
        let answer_b = other.join().unwrap();
        signaller.join().unwrap();
        let pending = [&answer_a, &answer_b]
            .iter()
            .filter(|r| matches!(r, Registration::Pending))
            .count();
        for r in [&answer_a, &answer_b] {
            assert!(!matches!(r, Registration::Failed(_)));
        }
        assert_eq!(
            counter.load(Ordering::SeqCst),
            pending,
            "each pending one fires once"
        );
    });
}

#[test]
fn a_signal_while_a_cancel_holds_the_turn_is_not_lost() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        let (a, b) = (Tp::new(1, &counter), Tp::new(2, &counter));
        // SAFETY: both outlive the model's threads.
        assert!(matches!(unsafe { s.register(a.0) }, Registration::Pending));
        assert!(matches!(unsafe { s.register(b.0) }, Registration::Pending));
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(2).unwrap())
        };
        // SAFETY: registered on `s`.
        let cancelled = unsafe { s.cancel(a.0) };
        signaller.join().unwrap();
        // `b` always fires; `a` fires unless cancelled first.
        assert_eq!(counter.load(Ordering::SeqCst), 1 + usize::from(!cancelled));
    });
}

#[test]
fn fail_racing_a_registration_and_a_signal_answers_each_once() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        let a = Arc::new(Tp::new(2, &counter));
        let failer = {
            let s = s.clone();
            thread::spawn(move || s.fail(Error::new(ErrorKind::Aborted, "x")))
        };
        let signaller = {
            let s = s.clone();
            thread::spawn(move || {
                let _ = s.signal(1); // may come after the failure
            })
        };
        // SAFETY: `a` outlives its firing.
        let answer = unsafe { s.register(a.0) };
        failer.join().unwrap();
        signaller.join().unwrap();
        let fired = counter.load(Ordering::SeqCst);
        match answer {
            Registration::Failed(e) => {
                assert_eq!(e.kind(), ErrorKind::Aborted);
                assert_eq!(fired, 0);
            }
            Registration::Pending => assert_eq!(fired, 1 << 16, "once, with the error"),
            Registration::Reached => panic!("2 was never signalled"),
        }
    });
}
