//! Giving up a wait never waits for another thread, nor for the thread
//! that is firing it: a `wait_async` future dropped from a waker that the
//! same signal runs, from another semaphore's waker in a chain, or from
//! another thread while a long batch of callbacks runs, and a timed-out
//! host wait whose timepoint a firing pass holds, all return at once.
//!
//! Each test runs the call that used to hang on a thread of its own and
//! waits for it with a timeout, so a regression fails instead of hanging.
//! Mutation checked for every test here: the owner's side of the node
//! protocol waiting for the callback's mark again (the drop of a future
//! spinning until its callback ran, and a host wait's `unregister` doing
//! the same) makes each of them time out.

use fenceline::testing::SemaphoreInternals;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use fenceline::{Error, Semaphore};

type Fut = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// How long a call that must return at once may take before the test
/// calls it a hang (generous: a loaded CI machine).
const HANG: Duration = Duration::from_secs(20);

/// Counts its wakes.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Arc<Count>, Waker) {
    let c = Arc::new(Count::default());
    (c.clone(), Waker::from(c))
}

/// When woken, drops the futures it holds (a waker that cancels its
/// siblings, as a `select` built on an inline-polling executor does).
#[derive(Default)]
struct DropOnWake {
    victims: Mutex<Vec<Fut>>,
    wakes: AtomicUsize,
}

impl Wake for DropOnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let victims = std::mem::take(&mut *self.victims.lock().unwrap());
        drop(victims);
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

/// When woken, signals another semaphore (a waker that runs work
/// inline).
struct SignalOnWake(&'static Semaphore, u64);

impl Wake for SignalOnWake {
    fn wake(self: Arc<Self>) {
        self.0.signal(self.1).unwrap();
    }
}

/// When woken, says so and blocks until the test lets it go: a long
/// callback at the head of a batch.
struct Block {
    entered: Mutex<mpsc::Sender<()>>,
    gate: Mutex<mpsc::Receiver<()>>,
}

impl Wake for Block {
    fn wake(self: Arc<Self>) {
        self.entered.lock().unwrap().send(()).unwrap();
        let _ = self.gate.lock().unwrap().recv_timeout(HANG * 2);
    }
}

fn pending(f: &mut Fut, w: &Waker) {
    assert!(
        f.as_mut().poll(&mut Context::from_waker(w)).is_pending(),
        "registered, not reached"
    );
}

fn ready(f: &mut Fut) -> Result<(), Error> {
    let (_c, w) = counting();
    match f.as_mut().poll(&mut Context::from_waker(&w)) {
        Poll::Ready(r) => r,
        Poll::Pending => panic!("the future was not resolved"),
    }
}

/// Runs `f` on a thread of its own; `Err` if it did not return in time.
fn returns_in_time(f: impl FnOnce() + Send + 'static) -> Result<(), mpsc::RecvTimeoutError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(HANG)
}

/// Fails the test if `r` timed out, without dropping `keep` (futures a
/// hung signal may still hold: dropping them would hang the failing test
/// the same way instead of failing it).
fn or_hang<T>(r: Result<(), mpsc::RecvTimeoutError>, keep: T, what: &str) -> T {
    if r.is_err() {
        std::mem::forget(keep);
        panic!("{what}");
    }
    keep
}

// On the code before the fix this hung: the signal's pass claims both
// timepoints, the first one's waker drops the second future, and that
// drop spun until the second callback ran, which is queued behind it on
// the same thread.
#[test]
fn a_waker_that_drops_a_sibling_future_does_not_hang_the_signal() {
    static S: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));
    let dropper = Arc::new(DropOnWake::default());
    let mut first: Fut = Box::pin(S.wait_async(1));
    pending(&mut first, &Waker::from(dropper.clone()));
    let (victim_wakes, vw) = counting();
    let mut victim: Fut = Box::pin(S.wait_async(1));
    pending(&mut victim, &vw);
    dropper.victims.lock().unwrap().push(victim);
    assert_eq!(S.timepoints_registered(), 2);

    let r = returns_in_time(|| S.signal(1).unwrap());
    let mut first = or_hang(r, first, "signal(1) hung on a drop from a waker");

    assert_eq!(dropper.wakes.load(Ordering::SeqCst), 1);
    assert!(dropper.victims.lock().unwrap().is_empty(), "dropped");
    assert_eq!(
        victim_wakes.0.load(Ordering::SeqCst),
        0,
        "a future dropped before its callback ran is never woken"
    );
    ready(&mut first).unwrap();
    assert_eq!(S.timepoints_registered(), 0);
}

// On the code before the fix this hung: A's pass claims `a1` and `a2`;
// `a1`'s waker signals B, whose pass fires `b`, whose waker drops `a2`,
// which spun until `a2`'s callback ran: queued behind `a1` on this
// thread.
#[test]
fn a_drop_through_a_chain_of_wakers_does_not_hang_the_first_signal() {
    static A: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));
    static B: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));
    let mut a1: Fut = Box::pin(A.wait_async(1));
    pending(&mut a1, &Waker::from(Arc::new(SignalOnWake(&B, 1))));
    let (a2_wakes, a2w) = counting();
    let mut a2: Fut = Box::pin(A.wait_async(1));
    pending(&mut a2, &a2w);
    let dropper = Arc::new(DropOnWake::default());
    dropper.victims.lock().unwrap().push(a2);
    let mut b: Fut = Box::pin(B.wait_async(1));
    pending(&mut b, &Waker::from(dropper.clone()));

    let r = returns_in_time(|| A.signal(1).unwrap());
    let (mut a1, mut b) = or_hang(r, (a1, b), "A.signal(1) hung on a drop from B's waker");

    assert_eq!(B.query().unwrap(), 1, "a1's waker signalled B");
    assert_eq!(dropper.wakes.load(Ordering::SeqCst), 1);
    assert!(dropper.victims.lock().unwrap().is_empty());
    assert_eq!(a2_wakes.0.load(Ordering::SeqCst), 0);
    ready(&mut a1).unwrap();
    ready(&mut b).unwrap();
    assert_eq!(A.timepoints_registered(), 0);
    assert_eq!(B.timepoints_registered(), 0);
}

/// A batch whose first callback blocks until the returned sender is used
/// (or dropped): the signalling thread is inside it when this returns.
/// Returns the gate, the blocked future and the signalling thread.
fn a_blocked_batch(
    s: &'static Semaphore,
    before_signal: impl FnOnce(),
) -> (mpsc::Sender<()>, Fut, std::thread::JoinHandle<()>) {
    let (entered_tx, entered) = mpsc::channel();
    let (gate, gate_rx) = mpsc::channel();
    let block = Arc::new(Block {
        entered: Mutex::new(entered_tx),
        gate: Mutex::new(gate_rx),
    });
    let mut head: Fut = Box::pin(s.wait_async(1));
    pending(&mut head, &Waker::from(block));
    before_signal();
    let signaller = std::thread::spawn(move || s.signal(1).unwrap());
    entered
        .recv_timeout(HANG)
        .expect("the batch's first callback runs");
    (gate, head, signaller)
}

// On the code before the fix the drop spun until the signalling thread
// had run every callback ahead of the dropped future's: here, until the
// gate opened, which the test does only after the drop returned.
#[test]
fn a_drop_on_another_thread_returns_while_the_batch_runs() {
    static S: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));
    let (victim_wakes, vw) = counting();
    let victim = Arc::new(Mutex::new(None::<Fut>));
    let (gate, head, signaller) = a_blocked_batch(&S, || {
        let mut f: Fut = Box::pin(S.wait_async(1));
        pending(&mut f, &vw);
        *victim.lock().unwrap() = Some(f);
    });
    // The signaller is inside the head's waker: the victim's timepoint is
    // claimed by the pass, its callback not run.
    let dropped = {
        let victim = victim.clone();
        returns_in_time(move || drop(victim.lock().unwrap().take()))
    };
    gate.send(()).unwrap();
    signaller.join().unwrap();
    let mut head = or_hang(
        dropped,
        head,
        "the drop waited for the signalling thread's batch",
    );
    assert_eq!(victim_wakes.0.load(Ordering::SeqCst), 0);
    ready(&mut head).unwrap();
    assert_eq!(S.timepoints_registered(), 0);
}

// On the code before the fix the wait, its deadline passed and its value
// reached, spun in its clean-up until its timepoint's callback ran,
// queued behind the blocked one.
#[test]
fn a_timed_out_host_wait_returns_while_the_batch_runs() {
    static S: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));
    let (result_tx, result) = mpsc::channel();
    let (gate, head, signaller) = a_blocked_batch(&S, || {
        std::thread::spawn(move || {
            let _ = result_tx.send(S.wait(1, Duration::from_millis(100)));
        });
        // Parked on its timepoint (after its short spin).
        while S.timepoints_registered() < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let waited = result.recv_timeout(HANG);
    gate.send(()).unwrap();
    signaller.join().unwrap();
    let r = waited.as_ref().map(|_| ()).map_err(|e| *e);
    let mut head = or_hang(
        r,
        head,
        "the host wait waited for the signalling thread's batch",
    );
    let waited = waited.unwrap();
    // Its value was reached before it looked again (the signal's CAS came
    // before its callbacks).
    waited.unwrap();
    ready(&mut head).unwrap();
    assert_eq!(S.timepoints_registered(), 0);
}

// Many at once: 10k futures, each dropped by a sibling's waker within one
// signal's batch; half of them registered after their sibling (dropped
// before their callback: never woken), half before (woken, then dropped).
// Every node goes back to the pool: `wait_async_allocates_nothing` runs
// the same drop in a loop under a counting allocator.
#[test]
fn ten_thousand_futures_dropped_from_their_siblings_wakers() {
    static S: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));
    const N: usize = 10_000;
    let (victim_wakes, vw) = counting();
    let mut siblings = Vec::with_capacity(N);
    for i in 0..N {
        let dropper = Arc::new(DropOnWake::default());
        let mut sibling: Fut = Box::pin(S.wait_async(1));
        let mut victim: Fut = Box::pin(S.wait_async(1));
        if i % 2 == 0 {
            pending(&mut sibling, &Waker::from(dropper.clone()));
            pending(&mut victim, &vw);
        } else {
            pending(&mut victim, &vw);
            pending(&mut sibling, &Waker::from(dropper.clone()));
        }
        dropper.victims.lock().unwrap().push(victim);
        siblings.push((sibling, dropper));
    }
    assert_eq!(S.timepoints_registered(), 2 * N);

    let r = returns_in_time(|| S.signal(1).unwrap());
    let mut siblings = or_hang(r, siblings, "the signal hung on drops from wakers");

    for (sibling, dropper) in siblings.iter_mut() {
        assert_eq!(dropper.wakes.load(Ordering::SeqCst), 1);
        assert!(dropper.victims.lock().unwrap().is_empty());
        ready(sibling).unwrap();
    }
    assert_eq!(
        victim_wakes.0.load(Ordering::SeqCst),
        N / 2,
        "exactly the victims whose callbacks ran before their drop are woken"
    );
    assert_eq!(S.timepoints_registered(), 0);
}
