//! loom models of the timeline semaphore: a timepoint registered while
//! another thread signals, fails or cancels is answered exactly once and
//! never lost; a parked host wait is always woken.
//!
//! Each model runs both ways of taking the turn (the CAS from 0 of a pass
//! nobody asked for, and the `fetch_or` of a request): mutation checked,
//! the CAS from 0 with a relaxed success ordering (the list not taken
//! from its last holder) fails every model here but the event handle's.
#![cfg(fenceline_loom)]

use fenceline::testing::SemaphoreInternals;
use std::ptr::NonNull;

use fenceline::testing::timepoint::{Registration, Timepoint};
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

// The list's turn (see `src/semaphore/state/turn.rs`): registrations and signals never
// wait for it; whoever holds it serves every request before giving it back.
// Mutations checked, each fails a model below: giving the turn back with a
// plain store instead of the CAS that fails on a new request (a request
// made during the last pass is lost: a timepoint never fires); reading the
// value in a pass with a plain load instead of a read-modify-write (a
// signal whose CAS came first is missed); counting a registration in
// `registered` after it asked for a pass instead of before (a signal reads 0
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

// A signal whose pass takes a free turn uses the value it wrote instead of
// reading the latest (one RMW less): a later signal's value must still
// reach a timepoint that pass merged or left. Mutation checked: the
// signalled value used in every round of that pass (`finish_turn`'s
// re-rounds too, not only the first) fails this model: the registration
// of 2 merged by the pass of `signal(1)`, whose request made it pass
// again, never fires.
#[test]
fn two_signals_racing_a_registration_fire_it_once() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        // Registered first, so the first signal finds a waiter and passes.
        let one = Tp::new(1, &counter);
        // SAFETY: outlives the model's threads.
        assert!(matches!(
            unsafe { s.register(one.0) },
            Registration::Pending
        ));
        let first = {
            let s = s.clone();
            // Fails (nothing changes) if the second came first.
            thread::spawn(move || s.signal(1).is_ok())
        };
        let second = {
            let s = s.clone();
            thread::spawn(move || s.signal(2).unwrap())
        };
        let two = Tp::new(2, &counter);
        // SAFETY: `two` outlives its firing (dropped after the joins).
        let answer = unsafe { s.register(two.0) };
        let _ = first.join().unwrap();
        second.join().unwrap();
        let pending = usize::from(matches!(answer, Registration::Pending));
        assert!(!matches!(answer, Registration::Failed(_)));
        assert_eq!(
            counter.load(Ordering::SeqCst),
            1 + pending,
            "each registered timepoint fires once"
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

/// Counts an abandonable timepoint's callbacks: a firing in the low half
/// (`Ok` or `Err` alike), a hand-back of an abandoned one in the high.
unsafe fn track(tp: NonNull<Timepoint>, _result: Result<(), Error>) {
    // SAFETY: the counter outlives every timepoint of the model.
    let tp = unsafe { tp.as_ref() };
    let counter = unsafe { &*tp.context().cast::<AtomicUsize>() };
    let unit = if tp.is_abandoned() { 1 << 16 } else { 1 };
    counter.fetch_add(unit, Ordering::SeqCst);
}

/// A heap abandonable timepoint, freed by the model once every thread is
/// joined and the semaphore is dropped (so a hand-back that came too early
/// shows in the counts instead of as a use after free).
fn abandonable(value: u64, counter: &AtomicUsize) -> Tp {
    let tp = Box::new(Timepoint::abandonable(
        value,
        track,
        (counter as *const AtomicUsize).cast(),
    ));
    Tp(NonNull::from(Box::leak(tp)))
}

/// What `abandon`'s answer promises, once every thread is done: `true`,
/// the callback ran once to hand the timepoint back and it never fired;
/// `false`, it fired once and was never handed back. Nothing stays
/// registered.
fn assert_abandoned_or_fired(abandoned: bool, counter: &AtomicUsize, s: &Semaphore) {
    let (fired, released) = {
        let c = counter.load(Ordering::SeqCst);
        (c & 0xffff, c >> 16)
    };
    if abandoned {
        assert_eq!(
            (fired, released),
            (0, 1),
            "abandoned: handed back once, never fired"
        );
    } else {
        assert_eq!((fired, released), (1, 0), "not abandoned: fired once");
    }
    assert_eq!(s.timepoints_registered(), 0, "nothing stays registered");
}

// Catches: an abandoned timepoint that still fires, or that is handed
// back twice or not at all, when `abandon` races the signal that reaches
// it. Mutations checked: a firing that does not claim the timepoint
// (`claim_fire` always `true`): the failure model below sees it fired and
// handed back; the removal that does not unlink a still linked
// timepoint: loom reports a data race (the scan reads the timepoint its
// callback hands back).
#[test]
fn abandon_racing_signal_fires_or_hands_back_exactly_once() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        let tp = abandonable(1, &counter);
        // SAFETY: `tp` outlives the semaphore (dropped after it).
        assert!(matches!(unsafe { s.register(tp.0) }, Registration::Pending));
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1).unwrap())
        };
        // SAFETY: registered on `s` (`Pending`), abandoned once.
        let abandoned = unsafe { s.abandon(tp.0) };
        signaller.join().unwrap();
        assert_abandoned_or_fired(abandoned, &counter, &s);
        drop(s);
        drop(tp);
    });
}

// Catches: a timepoint abandoned right after its registration, while
// another thread holds the list's turn and has not merged the
// registration yet, being handed back before it is merged (and then
// linked for good). `abandon` never waits: the holder serves it.
// Mutation checked: the round taking the removals after the inbox: the
// holder hands the timepoint back, then merges it from the inbox, and it
// stays registered.
#[test]
fn abandon_while_another_thread_holds_the_turn_is_served_by_it() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        let other = Arc::new(AtomicUsize::new(0));
        let (tp, kept) = (abandonable(5, &counter), abandonable(2, &other));
        let registrar = {
            let s = s.clone();
            let kept = kept.0.as_ptr() as usize;
            thread::spawn(move || {
                let kept = NonNull::new(kept as *mut Timepoint).unwrap();
                // SAFETY: `kept` outlives the semaphore.
                let _ = unsafe { s.register(kept) };
                s.signal(2).unwrap();
            })
        };
        // SAFETY: `tp` outlives the semaphore.
        assert!(matches!(unsafe { s.register(tp.0) }, Registration::Pending));
        // SAFETY: registered on `s`, abandoned once.
        let abandoned = unsafe { s.abandon(tp.0) };
        assert!(abandoned, "5 is never reached");
        registrar.join().unwrap();
        assert_eq!(other.load(Ordering::SeqCst), 1, "the kept one fired once");
        assert_abandoned_or_fired(abandoned, &counter, &s);
        drop(s);
        drop((tp, kept));
    });
}

// Catches: an abandoned timepoint fired with the failure, or never handed
// back, when `abandon` races `fail`. Mutation checked: the failure path
// not claiming what it unlinks (`keep_claimed` removed): fired and handed
// back.
#[test]
fn abandon_racing_fail_fires_or_hands_back_exactly_once() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let counter = Arc::new(AtomicUsize::new(0));
        let tp = abandonable(1, &counter);
        // SAFETY: `tp` outlives the semaphore.
        assert!(matches!(unsafe { s.register(tp.0) }, Registration::Pending));
        let failer = {
            let s = s.clone();
            thread::spawn(move || s.fail(Error::new(ErrorKind::Aborted, "x")))
        };
        // SAFETY: registered on `s`, abandoned once.
        let abandoned = unsafe { s.abandon(tp.0) };
        failer.join().unwrap();
        assert_abandoned_or_fired(abandoned, &counter, &s);
        drop(s);
        drop(tp);
    });
}

// Catches, in the real host wait: a node of `wait_any` that the wait no
// longer needs (another entry was reached) fired after the wait returned
// (the liveness check), or left registered. The wait abandons it while
// the other thread's signal may be firing it. Also catches `wait_any`
// answering a higher index than the lowest reached one (found by this
// model: `b`'s registration answered `Reached` and the wait returned 1
// although `a`, registered before, was reached too). The wait never waits
// for a fired node's callback: the later of the two gives it back.
// Mutation checked: the wait giving a fired node back without looking at
// the callback's mark: the node is given back twice ("use after free: a
// pooled value (released twice)").
#[test]
fn wait_any_gives_up_the_node_it_no_longer_needs() {
    loom::model(|| {
        let (a, b) = (Semaphore::new(0), Semaphore::new(0));
        let signaller = {
            let (a, b) = (a.clone(), b.clone());
            thread::spawn(move || {
                a.signal(1).unwrap();
                b.signal(1).unwrap();
            })
        };
        let i = fenceline::wait_any(&[(&a, 1), (&b, 1)], Timeout::Never).unwrap();
        signaller.join().unwrap();
        assert_eq!(i, 0, "a is signalled first");
        assert_eq!(a.timepoints_registered(), 0);
        assert_eq!(b.timepoints_registered(), 0);
    });
}
