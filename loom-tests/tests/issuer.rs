//! loom model of `IssuerThread` (`src/queue/issuer.rs`): the thread a
//! device owns to take the issuer turns its queues hand off. A turn offered
//! from another thread runs once, while the offerer and others go on (no
//! lost wake-up between the thread's last look and its park), and none is
//! stranded when the last queue handle goes (the thread exits only after
//! one more look).
#![cfg(fenceline_loom)]

use std::ptr::NonNull;

use fenceline::testing::issuer::IssuerThread;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// The turn: a counter, bumped once per run.
///
/// # Safety
/// `turn` points to a live `AtomicUsize`.
unsafe fn count(turn: NonNull<()>) {
    // SAFETY: the caller's contract.
    unsafe { turn.cast::<AtomicUsize>().as_ref() }.fetch_add(1, Ordering::Relaxed);
}

/// A pointer handed to another thread.
struct Send_(NonNull<()>);
// SAFETY: the counter it points to is shared through an `Arc` kept alive
// by the model until every thread joined.
unsafe impl Send for Send_ {}

// Two queues' turns offered from two threads while the issuer thread
// parks and wakes; the model waits for both to run before it lets go of
// its handle. Mutation checked: `offer` not taking the thread's flag
// (no `wake`): the thread stays parked and the model never sees the turn
// run (loom: deadlock / a spin that never ends).
#[test]
fn offered_turns_each_run_once_without_a_lost_wake_up() {
    loom::model(|| {
        let (t, issuer) = IssuerThread::start("model-issuer", 2, count).unwrap();
        let counters = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let offerers: Vec<_> = (0..2)
            .map(|slot| {
                let issuer = issuer.clone();
                let turn = Send_(NonNull::from(&counters[slot]).cast());
                thread::spawn(move || {
                    let turn = turn;
                    // SAFETY: `count` expects a counter, alive until the end.
                    unsafe { issuer.offer(slot, turn.0) };
                })
            })
            .collect();
        for o in offerers {
            o.join().unwrap();
        }
        while counters.iter().any(|c| c.load(Ordering::Relaxed) == 0) {
            thread::yield_now();
        }
        drop(issuer);
        drop(t); // joins: the thread exits once no handle is left
        for c in counters.iter() {
            assert_eq!(c.load(Ordering::Relaxed), 1, "each turn ran once");
        }
    });
}

// A turn offered just before the last handle goes: it still runs before
// the thread exits. Mutation checked: the thread exiting as soon as it
// reads no handle left, without one more look at the slots: the turn is
// stranded (the count stays 0).
#[test]
fn a_turn_offered_before_the_last_handle_goes_is_not_stranded() {
    loom::model(|| {
        let (t, issuer) = IssuerThread::start("model-issuer", 1, count).unwrap();
        let counter = Arc::new(AtomicUsize::new(0));
        let offerer = {
            let turn = Send_(NonNull::from(&*counter).cast());
            thread::spawn(move || {
                let turn = turn;
                // SAFETY: as above.
                unsafe { issuer.offer(0, turn.0) };
                // The last handle, dropped right after its offer.
                drop(issuer);
            })
        };
        offerer.join().unwrap();
        drop(t);
        assert_eq!(counter.load(Ordering::Relaxed), 1, "the turn ran once");
    });
}
