//! loom models of the pending queue's drain protocol on the testing
//! backend: concurrent submitters and completions, a host signal racing the
//! pass that parks an action, a direct wake racing a direct submission,
//! and shutdown racing a submit.
//!
//! The issuer that keeps finding requests after its own action and
//! `ISSUE_PASSES_BEFORE_HAND_OFF` passes hands its turn to the backend,
//! which runs it on another thread (`IssueTurn`), concurrently with what
//! the old holder still does after handing it off.
//!
//! A submission that finds no pass running takes the issuer's turn itself
//! and handles its action directly (`take_turn`). Mutation checked: that
//! turn taken with a plain store instead of a compare-exchange from 0 (two
//! issuers at once) fails the first and third models (loom reports the
//! issuer state's concurrent access).
#![cfg(fenceline_loom)]

use fenceline::queue::PendingQueue;
use fenceline::testing::TestingBackend;
use fenceline::{ErrorKind, Semaphore};
use loom::sync::Arc;
use loom::thread;

fn queue() -> Arc<PendingQueue<TestingBackend>> {
    Arc::new(PendingQueue::new(TestingBackend::new(false)).unwrap())
}

#[test]
fn submitters_and_a_completion_issue_each_action_once() {
    loom::model(|| {
        let q = queue();
        let s = Semaphore::new(0);
        let producer = {
            let (q, s) = (q.clone(), s.clone());
            thread::spawn(move || q.submit(&[], &[(&s, 1)], 1).unwrap())
        };
        let consumer = {
            let (q, s) = (q.clone(), s.clone());
            thread::spawn(move || q.submit(&[(&s, 1)], &[], 2).unwrap())
        };
        // This thread completes whatever is issued, concurrently.
        let mut done = Vec::new();
        while done.len() < 2 {
            match q.backend().complete_next(Ok(())) {
                Some(id) => done.push(id),
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
        consumer.join().unwrap();
        assert_eq!(done, [1, 2], "the consumer ran after its producer");
        assert_eq!(q.backend().issued_log(), [1, 2], "each issued exactly once");
        assert_eq!(q.backend().in_flight(), 0);
    });
}

#[test]
fn host_signal_racing_the_pending_decision_issues_the_action() {
    loom::model(|| {
        let q = queue();
        let s = Semaphore::new(0);
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1).unwrap())
        };
        q.submit(&[(&s, 1)], &[], 1).unwrap();
        signaller.join().unwrap();
        assert_eq!(q.backend().issued_log(), [1], "issued once, never stranded");
        q.backend().complete_all();
    });
}

#[test]
fn shutdown_racing_a_submit_completes_or_cancels_exactly_once() {
    loom::model(|| {
        let q = queue();
        let out = Semaphore::new(0);
        let submitter = {
            let (q, out) = (q.clone(), out.clone());
            thread::spawn(move || {
                let _ = q.submit(&[], &[(&out, 1)], 1);
            })
        };
        q.shutdown();
        submitter.join().unwrap();
        let issued = q.backend().issued_log() == [1];
        q.backend().complete_all();
        match out.query() {
            Ok(v) => {
                assert!(issued, "signalled without running");
                assert_eq!(v, 1);
            }
            Err(e) => {
                assert!(!issued, "ran and was cancelled too");
                assert_eq!(e.kind(), ErrorKind::Cancelled);
            }
        }
    });
}

// A submission that takes the issuer's turn makes its action lent (the
// caller's semaphore handles, no references taken) while its last direct
// action finished inside `submit` (the first one is lent). This one escapes
// (the backend holds it) and a completer on another thread finishes it
// while the submitter settles it: kept with references of its own, or
// freed by the submitter if the completer got there first. The submitter
// drops its only handle to `mine` as soon as `submit` returns, so the
// completer's signal of it relies on the action's own reference. Mutations
// checked: `settle` without `keep_entries` and the queue reference (the
// entries are dropped without having been counted: loom's `Arc` tracking
// panics); `finish` freeing a `LENT` action finished on another thread
// instead of leaving it to its submitter (both free it: the process aborts
// on the heap corruption).
#[test]
fn a_lent_action_finished_elsewhere_is_kept_or_freed_exactly_once() {
    loom::model(|| {
        let q = queue();
        let out = Semaphore::new(0);
        let seen = Semaphore::new(0);
        let submitter = {
            let (q, out, seen) = (q.clone(), out.clone(), seen.clone());
            thread::spawn(move || {
                let mine = Semaphore::new(0);
                q.submit(&[], &[(&out, 1), (&mine, 1)], 1).unwrap();
                // Tell the test whether `mine` was signalled by the time
                // `submit` returned, then let it go.
                seen.signal(1 + mine.query().unwrap()).unwrap();
            })
        };
        while q.backend().complete_next(Ok(())).is_none() {
            thread::yield_now();
        }
        submitter.join().unwrap();
        assert_eq!(out.query().unwrap(), 1, "signalled once");
        assert!(seen.query().unwrap() >= 1);
        assert_eq!(q.in_flight(), 0, "the action is gone");
        assert_eq!(q.stats().completed, 1);
    });
}

// A fired timepoint whose thread finds no pass running takes the issuer's
// turn and handles the woken action directly (`First::Woken`: no push on
// the woken stack, no `take_all`), racing a submitter that may take the
// turn the same way: each action is issued exactly once, and the woken
// one leaves the issuer's waiting list. Mutations checked: the wake taking
// the turn with a plain store (two issuers at once: loom reports the
// issuer state's concurrent access); the direct wake leaving the action
// in the waiting list (it is still counted pending here; the models above
// crash on its stale link once its block is reused).
#[test]
fn a_direct_wake_racing_a_direct_submission_issues_each_once() {
    loom::model(|| {
        let q = queue();
        let (gate, out) = (Semaphore::new(0), Semaphore::new(0));
        q.submit(&[(&gate, 1)], &[(&out, 1)], 1).unwrap();
        let submitter = {
            let q = q.clone();
            thread::spawn(move || q.submit(&[], &[], 2).unwrap())
        };
        gate.signal(1).unwrap();
        submitter.join().unwrap();
        let mut issued = q.backend().issued_log();
        issued.sort_unstable();
        assert_eq!(issued, [1, 2], "each issued exactly once");
        assert_eq!(
            q.stats().pending,
            0,
            "the woken action left the waiting list"
        );
        q.backend().complete_all();
        q.shutdown();
        assert_eq!(out.query().unwrap(), 1, "signalled, never cancelled");
        assert_eq!(q.in_flight(), 0);
    });
}

// Two threads submit (one of them twice) while this thread runs every
// issuer turn handed off, as a CPU device's worker does: the submitter
// holding the turn may hand it off after one pass with requests still
// coming, and this thread's drain then runs while that submitter returns.
// Each action is issued exactly once and none is stranded. Mutations
// checked: the old holder going on with its passes after the hand-off
// (`Ok(()) => {}` instead of `break`: two issuers at once, loom reports
// the issuer state's concurrent access); the old holder swinging the
// counter to 0 as it hands off (the third submission then takes the turn
// while this thread runs the handed-off one: the same report, found only
// with three preemptions, hence the bound; about three minutes).
#[test]
fn a_handed_off_turn_issues_each_action_once() {
    use loom::sync::atomic::{AtomicUsize, Ordering};
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let q = Arc::new(PendingQueue::new(TestingBackend::handing_off(true)).unwrap());
        let s = Semaphore::new(0);
        let done = Arc::new(AtomicUsize::new(0));
        let spawn = |ids: &'static [u64]| {
            let (q, s, done) = (q.clone(), s.clone(), done.clone());
            thread::spawn(move || {
                for &id in ids {
                    q.submit(&[], &[(&s, id)], id).unwrap();
                }
                done.fetch_add(1, Ordering::Release);
            })
        };
        let a = spawn(&[1]);
        let b = spawn(&[2, 3, 4]);
        while done.load(Ordering::Acquire) < 2 {
            q.backend().run_turns();
            thread::yield_now();
        }
        a.join().unwrap();
        b.join().unwrap();
        q.backend().run_turns();
        let mut issued = q.backend().issued_log();
        issued.sort_unstable();
        assert_eq!(
            issued,
            [1, 2, 3, 4],
            "each issued exactly once, none stranded"
        );
        assert_eq!(q.backend().turns_waiting(), 0);
        assert_eq!(q.in_flight(), 0);
    });
}

// Two threads, each with a handle (an `Arc` of the queue), submit one
// action and drop their handle; the backend completes each inside `issue`.
// One may find the turn taken and push its action to the submit stack,
// which takes no reference to the state: the pass that takes it in gives
// it one from the issuer's credit, and the credit goes back in the drain
// that ends after the last handle's shutdown. The state must outlive every
// action and be freed once (the model checker tracks the freed state: a
// later touch panics). Mutation checked: no references for the actions a
// pass takes in (`take_refs` skipped in `pass`: "use after free: a
// queue's state").
#[test]
fn the_last_handle_dropped_racing_a_submission_on_the_stack() {
    loom::model(|| {
        let q = Arc::new(PendingQueue::new(TestingBackend::new(true)).unwrap());
        let out = [Semaphore::new(0), Semaphore::new(0)];
        let spawn = |i: usize| {
            let (q, out) = (q.clone(), out[i].clone());
            thread::spawn(move || {
                q.submit(&[], &[(&out, 1)], i as u64).unwrap();
                drop(q);
            })
        };
        let (a, b) = (spawn(0), spawn(1));
        drop(q);
        a.join().unwrap();
        b.join().unwrap();
        for s in &out {
            assert_eq!(s.query().unwrap(), 1, "ran once, never cancelled");
        }
    });
}
