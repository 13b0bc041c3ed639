//! Scenario tests of the pending queue on the deterministic testing backend.

use fenceline::testing::{PendingQueueInternals, SemaphoreInternals};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fenceline::queue::{Backend, Completion, PendingQueue};
use fenceline::semaphore::{AnyEvent, EventPool};
use fenceline::testing::TestingBackend;
use fenceline::{Error, ErrorKind, Semaphore};

fn queue() -> PendingQueue<TestingBackend> {
    PendingQueue::new(TestingBackend::new(false)).unwrap()
}

#[test]
fn submit_with_no_waits_issues_at_once() {
    let q = queue();
    let s = Semaphore::new(0);
    q.submit(&[], &[(&s, 1)], 7).unwrap();
    assert_eq!(q.backend().issued_log(), [7]);
    assert_eq!(s.query().unwrap(), 0, "signalled only on completion");
    assert_eq!(q.backend().complete_next(Ok(())), Some(7));
    assert_eq!(s.query().unwrap(), 1);
}

#[test]
fn wait_satisfied_before_submit() {
    let q = queue();
    let s = Semaphore::new(3);
    q.submit(&[(&s, 3)], &[], 1).unwrap();
    assert_eq!(q.backend().issued_log(), [1]);
    q.backend().complete_all();
}

#[test]
fn wait_satisfied_later_by_host_signal() {
    let q = queue();
    let s = Semaphore::new(0);
    let done = Semaphore::new(0);
    q.submit(&[(&s, 1)], &[(&done, 1)], 1).unwrap();
    assert!(
        q.backend().issued_log().is_empty(),
        "issued before its wait"
    );
    s.signal(1).unwrap();
    assert_eq!(q.backend().issued_log(), [1]);
    q.backend().complete_all();
    assert_eq!(done.query().unwrap(), 1);
}

#[test]
fn reverse_order_submission() {
    let q = queue();
    let s = Semaphore::new(0);
    q.submit(&[(&s, 1)], &[], 2).unwrap(); // consumer first
    q.submit(&[], &[(&s, 1)], 1).unwrap(); // then its producer
    assert_eq!(q.backend().issued_log(), [1]);
    q.backend().complete_next(Ok(())).unwrap();
    assert_eq!(q.backend().issued_log(), [1, 2]);
    q.backend().complete_all();
}

#[test]
fn two_consumers_of_different_values() {
    let q = queue();
    let s = Semaphore::new(0);
    q.submit(&[(&s, 2)], &[], 2).unwrap();
    q.submit(&[(&s, 1)], &[], 1).unwrap();
    s.signal(1).unwrap();
    assert_eq!(q.backend().issued_log(), [1]);
    s.signal(2).unwrap();
    assert_eq!(q.backend().issued_log(), [1, 2]);
    q.backend().complete_all();
}

#[test]
fn wait_for_a_value_already_passed() {
    let q = queue();
    let s = Semaphore::new(5);
    q.submit(&[(&s, 3)], &[], 1).unwrap();
    assert_eq!(q.backend().issued_log(), [1]);
    q.backend().complete_all();
}

#[test]
fn chain_of_10k_actions() {
    const N: u64 = 10_000;
    let q = queue();
    let s = Semaphore::new(0);
    for i in 0..N {
        q.submit(&[(&s, i)], &[(&s, i + 1)], i).unwrap();
    }
    let mut completed = 0;
    while q.backend().complete_next(Ok(())).is_some() {
        completed += 1;
    }
    assert_eq!(completed, N);
    assert_eq!(s.query().unwrap(), N);
    assert_eq!(q.backend().issued_log(), (0..N).collect::<Vec<_>>());
}

#[test]
fn failure_propagates_through_a_chain() {
    let q = queue();
    let (a, b, c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    q.submit(&[], &[(&a, 1)], 1).unwrap();
    q.submit(&[(&a, 1)], &[(&b, 1)], 2).unwrap();
    q.submit(&[(&b, 1)], &[(&c, 1)], 3).unwrap();
    q.backend()
        .complete_next(Err(Error::new(ErrorKind::Aborted, "kernel fault")))
        .unwrap();
    for s in [&a, &b, &c] {
        let e = s.query().unwrap_err();
        assert_eq!(
            (e.kind(), e.message()),
            (ErrorKind::Aborted, "kernel fault")
        );
    }
    assert_eq!(
        q.backend().issued_log(),
        [1],
        "failed waits skip the payload"
    );
    assert_eq!(q.backend().in_flight(), 0);
}

#[test]
fn payload_error_fails_every_signal() {
    let q = queue();
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    q.submit(&[], &[(&a, 1), (&b, 4)], 1).unwrap();
    q.backend()
        .complete_next(Err(Error::new(ErrorKind::Internal, "boom")))
        .unwrap();
    assert_eq!(a.query().unwrap_err().message(), "boom");
    assert_eq!(b.query().unwrap_err().message(), "boom");
}

#[test]
fn waiting_on_a_failed_semaphore_fails_at_once() {
    let q = queue();
    let (w, out) = (Semaphore::new(0), Semaphore::new(0));
    w.fail(Error::new(ErrorKind::Unavailable, "device lost"));
    q.submit(&[(&w, 1)], &[(&out, 1)], 1).unwrap();
    assert!(q.backend().issued_log().is_empty());
    assert_eq!(out.query().unwrap_err().kind(), ErrorKind::Unavailable);
}

#[test]
fn drop_cancels_pending_actions() {
    let (gate, out1, out2) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    {
        let q = queue();
        q.submit(&[(&gate, 1)], &[(&out1, 1)], 1).unwrap();
        q.submit(&[(&out1, 1)], &[(&out2, 1)], 2).unwrap();
        assert!(q.backend().issued_log().is_empty());
    }
    for s in [&out1, &out2] {
        assert_eq!(s.query().unwrap_err().kind(), ErrorKind::Cancelled);
    }
    // The gate's timepoint was cancelled, not left behind.
    gate.signal(1).unwrap();
}

/// Holds what it issues where the test can reach it after the queue's
/// handle is gone, and says when the queue's state dropped it.
/// Issuing payload `HOLD` blocks until `release` is signalled to 1: the
/// issuer's turn is held meanwhile, so other submissions go through the
/// submit stack.
struct Held {
    issued: Arc<Mutex<Vec<Completion<Held>>>>,
    dropped: Arc<AtomicBool>,
    release: Semaphore,
}

const HOLD: u64 = u64::MAX;

impl Backend for Held {
    type Payload = u64;
    fn issue(&self, work: Completion<Self>) {
        if *work.payload() == HOLD {
            self.release
                .wait(1, std::time::Duration::from_secs(60))
                .unwrap();
        }
        self.issued.lock().unwrap().push(work);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

// The issuer takes references to the state ahead for the actions it takes
// in (its credit); the queue's state must still be freed by the last
// action to finish after the handle went, not kept (leaked) by the credit,
// nor freed while an issued action still holds it. Actions come both ways:
// 100 directly (a submitter that takes the turn), then, while a held
// action keeps the turn, 100 through the submit stack (taken in by one
// pass, more than a credit's worth). Mutations caught: the credit never
// given back (`return_credit_if_closed` not called: the state, and so the
// backend, is never dropped); no references for the actions a pass takes
// in (`take_refs` skipped in `pass`: the state is freed while actions
// still hold it, and completing them crashes on the use after free).
#[test]
fn the_state_outlives_issued_actions_and_is_freed_by_the_last() {
    let issued = Arc::new(Mutex::new(Vec::new()));
    let dropped = Arc::new(AtomicBool::new(false));
    let out = [Semaphore::new(0), Semaphore::new(0)];
    let release = Semaphore::new(0);
    let q = PendingQueue::new(Held {
        issued: issued.clone(),
        dropped: dropped.clone(),
        release: release.clone(),
    })
    .unwrap();
    for i in 0..100 {
        q.submit(&[], &[(&out[0], i + 1)], 0).unwrap();
    }
    std::thread::scope(|sc| {
        let q = &q;
        // Holds the turn inside its `issue` until released.
        let holder = sc.spawn(move || q.submit(&[], &[], HOLD).unwrap());
        while q.stats().submitted < 101 {
            std::thread::yield_now();
        }
        for i in 0..100 {
            q.submit(&[], &[(&out[1], i + 1)], 1).unwrap();
        }
        assert_eq!(q.stats().submitted, 101, "the turn was held");
        release.signal(1).unwrap();
        holder.join().unwrap();
    });
    assert_eq!(q.in_flight(), 201);
    assert_eq!(q.stats().in_flight, 201);
    drop(q);
    let mut works = std::mem::take(&mut *issued.lock().unwrap());
    assert_eq!(works.len(), 201);
    let last = works.pop().unwrap();
    for w in works {
        w.complete(Ok(()));
    }
    assert!(
        !dropped.load(Ordering::SeqCst),
        "freed while an issued action still holds the state"
    );
    last.complete(Ok(()));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the state outlived its last action"
    );
    for s in &out {
        assert_eq!(s.query().unwrap(), 100);
    }
}

#[test]
fn submit_after_shutdown_is_cancelled() {
    let q = queue();
    q.shutdown();
    let s = Semaphore::new(0);
    let e = q.submit(&[], &[(&s, 1)], 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled);
    assert_eq!(s.query().unwrap_err().kind(), ErrorKind::Cancelled);
}

#[test]
fn more_than_eight_waits_and_signals() {
    let q = queue();
    let waits: Vec<Semaphore> = (0..40).map(|_| Semaphore::new(0)).collect();
    let signals: Vec<Semaphore> = (0..40).map(|_| Semaphore::new(0)).collect();
    let wl: Vec<(&Semaphore, u64)> = waits.iter().map(|s| (s, 1)).collect();
    let sl: Vec<(&Semaphore, u64)> = signals
        .iter()
        .enumerate()
        .map(|(i, s)| (s, i as u64 + 1))
        .collect();
    q.submit(&wl, &sl, 1).unwrap();
    for (i, s) in waits.iter().enumerate() {
        assert!(
            q.backend().issued_log().is_empty(),
            "issued after {i} of 40 waits"
        );
        s.signal(1).unwrap();
    }
    assert_eq!(q.backend().issued_log(), [1]);
    q.backend().complete_all();
    for (i, s) in signals.iter().enumerate() {
        assert_eq!(s.query().unwrap(), i as u64 + 1);
    }
}

#[test]
fn deep_backlog_released_by_one_signal_is_linear() {
    const N: u64 = 100_000;
    let q = PendingQueue::new(TestingBackend::new(true)).unwrap();
    let gate = Semaphore::new(0);
    let done = Semaphore::new(0);
    for i in 0..N {
        q.submit(&[(&gate, 1)], &[], i).unwrap();
    }
    let before = q.actions_examined();
    assert_eq!(before, N, "each submission examined once");
    gate.signal(1).unwrap();
    let examined = q.actions_examined() - before;
    assert_eq!(
        examined, N,
        "releasing the backlog examines each action once"
    );
    assert_eq!(q.backend().issued_log().len() as u64, N);
    q.submit(&[], &[(&done, 1)], N).unwrap();
    assert_eq!(done.query().unwrap(), 1);
}

#[test]
fn chain_cost_stays_constant_per_action() {
    // Each completion readies one action: examined stays ~2 per action
    // however long the backlog.
    const N: u64 = 20_000;
    let q = queue();
    let s = Semaphore::new(0);
    for i in 0..N {
        q.submit(&[(&s, i + 1)], &[(&s, i + 2)], i).unwrap();
    }
    s.signal(1).unwrap();
    while q.backend().complete_next(Ok(())).is_some() {}
    assert_eq!(s.query().unwrap(), N + 1);
    assert!(
        q.actions_examined() <= 2 * N,
        "examined {}",
        q.actions_examined()
    );
}

/// A backend whose device can wait on events it recorded.
struct DeviceBackend {
    events: EventPool<u32>,
    issued: Mutex<Vec<(u64, usize)>>,
    held: Mutex<Vec<Completion<DeviceBackend>>>,
}

impl Backend for DeviceBackend {
    type Payload = u64;
    fn issue(&self, work: Completion<Self>) {
        let waits = work.device_waits().count();
        self.issued.lock().unwrap().push((*work.payload(), waits));
        // Record: "when this completes, each signal is reached".
        for (sem, value) in work.signals() {
            let ev = self.events.acquire().unwrap().erase();
            sem.record_device_signal(value, ev);
        }
        self.held.lock().unwrap().push(work);
    }
    fn device_wait(&self, semaphore: &Semaphore, value: u64) -> Option<AnyEvent> {
        semaphore.device_signal_reaching(value).map(|(_, e)| e)
    }
}

#[test]
fn device_wait_shortcut_issues_before_the_producer_finished() {
    let q = PendingQueue::new(DeviceBackend {
        events: EventPool::new(|| Ok(0u32), |_| {}, 0, 16).unwrap(),
        issued: Mutex::new(Vec::new()),
        held: Mutex::new(Vec::new()),
    })
    .unwrap();
    let s = Semaphore::new(0);
    q.submit(&[], &[(&s, 1)], 1).unwrap();
    q.submit(&[(&s, 1)], &[], 2).unwrap();
    assert_eq!(
        *q.backend().issued.lock().unwrap(),
        [(1, 0), (2, 1)],
        "the consumer was issued at once, waiting on the producer's event"
    );
    assert_eq!(s.query().unwrap(), 0, "the producer has not finished");
    let held: Vec<_> = std::mem::take(&mut *q.backend().held.lock().unwrap());
    for w in held {
        w.complete(Ok(()));
    }
    assert_eq!(s.query().unwrap(), 1);
}

#[test]
fn dropping_a_completion_fails_its_signals() {
    struct Dropper(Arc<Mutex<u32>>);
    impl Backend for Dropper {
        type Payload = ();
        fn issue(&self, work: Completion<Self>) {
            *self.0.lock().unwrap() += 1;
            drop(work);
        }
    }
    let count = Arc::new(Mutex::new(0));
    let q = PendingQueue::new(Dropper(count.clone())).unwrap();
    let s = Semaphore::new(0);
    q.submit(&[], &[(&s, 1)], ()).unwrap();
    assert_eq!(*count.lock().unwrap(), 1);
    assert_eq!(s.query().unwrap_err().kind(), ErrorKind::Internal);
}

#[test]
fn completion_stack_hands_over_in_order_and_a_dropped_one_fails_its_actions() {
    use fenceline::testing::CompletionStack;
    let q = PendingQueue::new(TestingBackend::new(false)).unwrap();
    let (a, b, c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    q.submit(&[], &[(&a, 1)], 1).unwrap();
    q.submit(&[], &[(&b, 1)], 2).unwrap();
    q.submit(&[], &[(&c, 1)], 3).unwrap();
    let stack = CompletionStack::<TestingBackend>::default();
    while let Some(work) = q.backend().take_next() {
        stack.push(work);
    }
    // Oldest first; stop after the first, dropping the iterator.
    let mut taken = stack.take_all();
    let first = taken.next().unwrap();
    assert_eq!(*first.payload(), 1);
    first.complete(Ok(()));
    drop(taken);
    assert!(stack.is_empty());
    assert_eq!(a.query().unwrap(), 1);
    // Dropped before being yielded: completed with an error, not leaked.
    assert_eq!(b.query().unwrap_err().kind(), ErrorKind::Internal);
    assert_eq!(c.query().unwrap_err().kind(), ErrorKind::Internal);
    assert_eq!(q.in_flight(), 0);
}

/// Completes even-numbered actions inside `issue`, holds odd ones for
/// another thread.
struct Alternating {
    held: Mutex<Vec<Completion<Alternating>>>,
}

impl Backend for Alternating {
    type Payload = u64;
    fn issue(&self, work: Completion<Self>) {
        if *work.payload() % 2 == 0 {
            work.complete(Ok(()));
        } else {
            self.held.lock().unwrap().push(work);
        }
    }
}

/// A submission made with the caller's semaphore handles (no references
/// taken: the last one finished inside its `submit`) that then escapes to
/// another thread must take references before `submit` returns: here the
/// submitter drops its only handle to each action's own semaphore at once,
/// and a completer thread signals it later through the action. Every
/// action finishes and signals (its witness, which the test keeps).
/// (Run under Miri too, where a missing reference is a use-after-free.)
#[test]
fn actions_made_with_the_callers_handles_that_escape_keep_their_semaphores() {
    let q = Arc::new(
        PendingQueue::new(Alternating {
            held: Mutex::new(Vec::new()),
        })
        .unwrap(),
    );
    const N: u64 = if cfg!(miri) { 8 } else { 400 };
    let completer = {
        let q = q.clone();
        std::thread::spawn(move || {
            let mut done = 0;
            while done < N / 2 {
                let held: Vec<_> = std::mem::take(&mut *q.backend().held.lock().unwrap());
                done += held.len() as u64;
                for work in held {
                    work.complete(Ok(()));
                }
                std::thread::yield_now();
            }
        })
    };
    let mut witnesses = Vec::new();
    for i in 0..N {
        let (mine, witness) = (Semaphore::new(0), Semaphore::new(0));
        q.submit(&[], &[(&mine, 1), (&witness, 1)], i).unwrap();
        if i % 2 == 0 {
            assert_eq!(mine.query().unwrap(), 1, "completed inside submit");
        }
        witnesses.push(witness);
        // `mine` goes here: a held action signals it through its own
        // reference.
    }
    completer.join().unwrap();
    for (i, w) in witnesses.iter().enumerate() {
        assert_eq!(w.query().unwrap(), 1, "action {i} signalled");
    }
    let stats = q.stats();
    assert_eq!((stats.completed, stats.in_flight), (N, 0));
}

/// Issues in lockstep with a submitting thread: `issue` of action `i`
/// returns only once that thread has submitted `i + 1` (or is done), so
/// every pass of the issuer ends with a request pending, as under a steady
/// stream from another thread. Completes inline. Takes handed-off turns.
struct Lockstep {
    issued: AtomicU64,
    submitted: AtomicU64,
    last: u64,
    log: Mutex<Vec<u64>>,
    turns: Mutex<Vec<fenceline::queue::IssueTurn<Lockstep>>>,
}

impl Backend for Lockstep {
    type Payload = u64;
    fn issue(&self, work: Completion<Self>) {
        use Ordering::SeqCst;
        let id = *work.payload();
        self.log.lock().unwrap().push(id);
        self.issued.store(id, SeqCst);
        while id < self.last && self.submitted.load(SeqCst) <= id {
            std::thread::yield_now();
        }
        work.complete(Ok(()));
    }
    fn wants_turn(&self) -> bool {
        true
    }
    fn hand_off_turn(
        &self,
        turn: fenceline::queue::IssueTurn<Self>,
    ) -> Result<(), fenceline::queue::IssueTurn<Self>> {
        self.turns.lock().unwrap().push(turn);
        Ok(())
    }
}

/// The thread that takes the issuer turn serves its own action and
/// `ISSUE_PASSES_BEFORE_HAND_OFF` passes of another thread's submissions,
/// then hands the turn off and returns, though that thread keeps
/// submitting; whoever runs the turn issues the rest, each once, in order.
/// Mutation checked: without the hand-off in `drain_turn` the first
/// `submit` serves all 200 submissions of the other thread before it
/// returns (the log assertion fails).
#[test]
fn a_submitter_hands_the_turn_off_under_a_steady_stream() {
    use Ordering::SeqCst;
    const LAST: u64 = 200;
    assert_eq!(fenceline::testing::ISSUE_PASSES_BEFORE_HAND_OFF, 1);
    let q = Arc::new(
        PendingQueue::new(Lockstep {
            issued: AtomicU64::new(u64::MAX),
            submitted: AtomicU64::new(0),
            last: LAST,
            log: Mutex::new(Vec::new()),
            turns: Mutex::new(Vec::new()),
        })
        .unwrap(),
    );
    let s = Semaphore::new(0);
    let stream = {
        let (q, s) = (q.clone(), s.clone());
        std::thread::spawn(move || {
            for i in 1..=LAST {
                // One ahead of the issuer: submit `i` once `i - 1` issued.
                while q.backend().issued.load(SeqCst) != i - 1 {
                    std::thread::yield_now();
                }
                q.submit(&[], &[(&s, i)], i).unwrap();
                q.backend().submitted.store(i, SeqCst);
            }
        })
    };
    // Action 0 (no other thread holds the turn yet): this thread issues
    // it, then one pass (action 1), then hands off with action 2 pending.
    q.submit(&[], &[], 0).unwrap();
    assert_eq!(*q.backend().log.lock().unwrap(), [0, 1]);
    assert_eq!(q.backend().turns.lock().unwrap().len(), 1);
    assert_eq!(q.stats().issuer_hand_offs, 0, "counted when taken up");
    // The turn's new holder (here, this thread again) drains the rest.
    let turn = q.backend().turns.lock().unwrap().pop().unwrap();
    turn.run();
    stream.join().unwrap();
    assert_eq!(
        *q.backend().log.lock().unwrap(),
        (0..=LAST).collect::<Vec<_>>()
    );
    assert_eq!(s.query().unwrap(), LAST);
    let stats = q.stats();
    assert_eq!((stats.issuer_hand_offs, stats.in_flight), (1, 0));
}

/// A signal whose wake-ups chain on an inline-completing queue: the
/// signalling thread serves the first action and one pass, then hands the
/// turn off; dropping the handed-off turn drains the rest on the dropping
/// thread (a turn is never lost). Mutation checked: without the hand-off
/// the signal issues all 20 actions itself (the first log assertion
/// fails); `IssueTurn`'s drop not draining leaves 18 stranded (the last).
#[test]
fn a_signaller_hands_off_a_chain_and_a_dropped_turn_still_drains() {
    let q = PendingQueue::new(TestingBackend::handing_off(true)).unwrap();
    let s = Semaphore::new(0);
    for i in 1..=20 {
        q.submit(&[(&s, i)], &[(&s, i + 1)], i).unwrap();
    }
    assert!(q.backend().issued_log().is_empty());
    s.signal(1).unwrap();
    assert_eq!(q.backend().issued_log(), [1, 2]);
    assert_eq!(q.backend().turns_waiting(), 1);
    assert_eq!(s.query().unwrap(), 3, "the two issued completed inline");
    let turns = q.backend().take_turns();
    assert_eq!(turns.len(), 1);
    drop(turns);
    assert_eq!(s.query().unwrap(), 21, "the dropped turn drained the chain");
    assert_eq!(q.backend().issued_log(), (1..=20).collect::<Vec<_>>());
    assert_eq!(q.stats().issuer_hand_offs, 1);
}

/// Keeps the first action it is given, and puts it into the payload of the
/// next, which it completes inside `issue`: dropping that payload (in the
/// finish, while its blocks go back) fails the kept action on the same
/// thread, inside the same pass.
struct Nesting {
    kept: Mutex<Option<Completion<Nesting>>>,
}

impl Backend for Nesting {
    type Payload = Option<Completion<Nesting>>;
    fn issue(&self, mut work: Completion<Self>) {
        let mut kept = self.kept.lock().unwrap();
        match kept.take() {
            None => *kept = Some(work),
            Some(first) => {
                drop(kept);
                *work.payload_mut() = Some(first);
                work.complete(Ok(()));
            }
        }
    }
}

// A finish drops its action's payload between giving back the action's
// blocks to the issuer's stash; a payload whose drop finishes another
// action of the same queue on this thread gives that one's blocks back to
// the same stash, nested. The stash is borrowed one release at a time
// (`Stash`), so the two never alias. Mutation caught (under Miri, `cargo
// +nightly miri test --test queue_scenarios a_payload`): the finish holding
// one `&mut` to the stash across the payload's drop, as the code once did
// (Tree Borrows reports the outer borrow used after the inner one wrote).
#[test]
fn a_payload_whose_drop_finishes_another_action_frees_both() {
    let q = PendingQueue::new(Nesting {
        kept: Mutex::new(None),
    })
    .unwrap();
    let (first, second) = (Semaphore::new(0), Semaphore::new(0));
    q.submit(&[], &[(&first, 1)], None).unwrap();
    q.submit(&[], &[(&second, 1)], None).unwrap();
    assert_eq!(second.query().unwrap(), 1);
    // Dropped inside the second's finish without completing: failed.
    assert_eq!(first.query().unwrap_err().kind(), ErrorKind::Internal);
    assert_eq!(q.in_flight(), 0);
    let s = q.stats();
    assert_eq!((s.completed, s.failed), (1, 1));
}
