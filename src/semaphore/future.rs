//! Awaiting a semaphore from any async runtime: [`Semaphore::wait_async`].
//!
//! The future holds a node from the wait nodes' pool (see `node_pool`:
//! no allocation once the pool is warm): its timepoint and an
//! [`AtomicWaker`]-style slot for the waker of the task that polls it.
//! The first poll checks the value, takes a node, stores the waker and
//! registers the timepoint; the timepoint's callback, on the thread that
//! signals, takes the waker out, publishes the outcome and sets its mark
//! on the node ([`LaterFrees`]: its last access), then wakes the task, and
//! the future gives the node back when it sees the mark.
//!
//! Dropping the future never waits for another thread. Before the
//! timepoint fired, the drop abandons it (`Semaphore::abandon`: the
//! semaphore hands the node back later, and never wakes the task). If the
//! semaphore's firing pass has claimed it already (its callback queued
//! behind others of the same batch, maybe on this very thread, or
//! running), the drop sets its own mark and returns: whichever of the
//! callback and the drop marks second gives the node back. A callback
//! that sees the drop's mark does not wake the task; one that marked
//! first may wake it once while a drop on another thread returns (a
//! spurious wake-up, which every waker allows).
//!
//! Waker replacement (a poll with another task's waker) races the
//! callback safely: the slot's state word lets exactly one of the two own
//! the stored waker at a time, and a poll that finds the callback begun
//! wakes its own waker at once (`futures`' `AtomicWaker`, made one-shot:
//! the callback's mark is never cleared, so no later poll can store a
//! waker that nobody will wake).

use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};

use super::node_pool::{self, LaterFrees};
use super::state::{Registration, Semaphore};
use super::timepoint::Timepoint;
use crate::error::Error;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{liveness, UnsafeCell};

/// No one holds the waker slot.
const IDLE: usize = 0;
/// A poll is storing a waker.
const REGISTERING: usize = 1;
/// The callback has begun: set once, never cleared.
const WAKING: usize = 2;

/// A waker slot shared by one poller and a one-shot waker (the
/// timepoint's callback), without a lock. Once the callback has begun
/// (`WAKING`), every later `register` wakes its own waker at once, so a
/// poll that does not yet see the callback's outcome is polled again.
pub(crate) struct AtomicWaker {
    state: AtomicUsize,
    waker: UnsafeCell<Option<Waker>>,
}

impl AtomicWaker {
    pub(crate) fn new() -> AtomicWaker {
        AtomicWaker {
            state: AtomicUsize::new(IDLE),
            waker: UnsafeCell::new(None),
        }
    }

    /// Stores `waker` (keeping the stored one if it would wake the same
    /// task). Called by the poller only, never concurrently with itself.
    pub(crate) fn register(&self, waker: &Waker) {
        // Acquire: a success reads `IDLE` from `new` or the poller's own
        // earlier CAS below (`take` never clears `WAKING`); a failure
        // pairs with `take`'s `fetch_or`, and only the branch depends on it.
        if self
            .state
            .compare_exchange(IDLE, REGISTERING, Ordering::Acquire, Ordering::Acquire)
            .is_err()
        {
            // The callback has begun: it may have taken an older waker (or
            // none), so wake this one now.
            waker.wake_by_ref();
            return;
        }
        self.waker.with_mut(|slot| {
            // SAFETY: REGISTERING gives us the slot: `take` leaves it alone
            // while this state is set.
            match unsafe { &*slot } {
                Some(old) if old.will_wake(waker) => {}
                // SAFETY: as for the read just above: the slot is ours.
                _ => unsafe { *slot = Some(waker.clone()) },
            }
        });
        // Release: pairs with the Acquire of `take`'s `fetch_or`: the
        // stored waker, to a `take` that comes after. The Acquire halves
        // guard nothing (on failure the slot stays ours).
        if self
            .state
            .compare_exchange(REGISTERING, IDLE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // The callback began while we stored, and left the slot to us
            // (the state stays `REGISTERING | WAKING`, so it is still
            // ours): wake the task ourselves.
            // SAFETY: as above.
            let stored = self.waker.with_mut(|slot| unsafe { (*slot).take() });
            if let Some(w) = stored {
                w.wake();
            }
        }
    }

    /// Takes the stored waker, or leaves it to a `register` in progress
    /// (which then wakes it itself). Called by the callback only, once.
    pub(crate) fn take(&self) -> Option<Waker> {
        // AcqRel: the Acquire pairs with a finished `register`'s Release
        // CAS back to `IDLE` (the waker it stored); the Release half
        // pairs with `register`'s Acquire CASes, which need nothing of it.
        if self.state.fetch_or(WAKING, Ordering::AcqRel) != IDLE {
            return None;
        }
        // SAFETY: `WAKING` from `IDLE`: no `register` will touch the slot
        // again.
        self.waker.with_mut(|slot| unsafe { (*slot).take() })
    }
}

/// A [`WaitFuture`]'s node in the wait nodes' pool: what the semaphore's
/// list points to.
#[repr(C)]
struct Node {
    /// First field: the callback gets a pointer to it and casts back.
    tp: Timepoint,
    waker: AtomicWaker,
    /// The callback's outcome, written before its mark in `end`.
    result: UnsafeCell<Option<Result<(), Error>>>,
    /// The callback's and the future's marks: the later one gives the
    /// node back.
    end: LaterFrees,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Not polled yet: nothing registered.
    New,
    /// The timepoint is registered: the callback or an abandon ends it.
    Registered,
    /// Finished (the callback ran, or the answer came without one).
    Done,
}

/// The future of [`Semaphore::wait_async`]: resolves to `Ok(())` once the
/// semaphore reaches the value, or to its failure.
///
/// Needs no runtime (only [`Waker`]) and allocates nothing once the wait
/// nodes' pool is warm: its timepoint is a pooled node, so the future is
/// `Unpin` and may be moved between polls. Polling it with a different
/// waker replaces the stored one. Dropping it before it resolves gives
/// its registration up without waiting for any thread, also from inside
/// a waker that the same signal is running: its waker is not called after
/// a drop that came first; a drop on another thread racing the firing may
/// see one spurious wake-up after it returns.
#[must_use = "futures do nothing unless polled"]
pub struct WaitFuture<'a> {
    semaphore: &'a Semaphore,
    value: u64,
    state: State,
    /// From the first poll that registers until the node goes back.
    node: Option<NonNull<Node>>,
}

// SAFETY: the node is touched by the polling thread (through `&mut self`)
// and by the callback only under the protocol above (the timepoint's
// claim, the waker slot's state word, then `end`); `Timepoint` and
// `Waker` are `Send`, and `Semaphore` is `Sync`.
unsafe impl Send for WaitFuture<'_> {}

impl std::fmt::Debug for WaitFuture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitFuture")
            .field("value", &self.value)
            .field("state", &self.state)
            .finish()
    }
}

/// Callback of an async wait's timepoint: publish the outcome and wake
/// the task, or hand back an abandoned node.
///
/// # Safety
/// `tp` is the `tp` field of a live pooled `Node`. Unless abandoned, the
/// node stays alive until the callback's mark (`end`), or longer if its
/// future dropped first (then the callback gives it back); abandoned, the
/// node is the callback's.
unsafe fn wake(tp: NonNull<Timepoint>, result: Result<(), Error>) {
    let node = tp.cast::<Node>().as_ptr();
    // SAFETY: alive (contract).
    let abandoned = unsafe { tp.as_ref() }.is_abandoned();
    liveness::check(node, "a wait_async future's node (its timepoint fired)");
    if abandoned {
        // The future was dropped and gave the node up: ours to hand back
        // (with any waker still stored, never woken).
        // SAFETY: alive (contract).
        let index = unsafe { tp.as_ref() }.pool_index();
        // SAFETY: from the pool with its timepoint's index; not used after.
        unsafe { node_pool::release(tp.cast::<Node>(), index) };
        return;
    }
    // Field projections, not `&Node`: the poller reads other fields
    // meanwhile.
    // SAFETY: alive until our mark (contract): a field projection.
    let waker = unsafe { std::ptr::addr_of!((*node).waker) };
    // SAFETY: alive until our mark (contract).
    let waker = unsafe { (*waker).take() };
    // Under the model checker: the drop may run right here; the node must
    // stay alive until our mark.
    liveness::check(node, "a wait_async future's node (its outcome written)");
    // SAFETY: alive until our mark (contract): a field projection.
    let slot = unsafe { std::ptr::addr_of!((*node).result) };
    // SAFETY: alive until our mark (contract); the poller reads `result`
    // only after our mark.
    unsafe { &*slot }.with_mut(|r| unsafe { *r = Some(result) });
    // Our last access unless the future dropped first: after this mark the
    // future may free the node.
    // SAFETY: alive until our mark (contract): a field projection.
    let end = unsafe { std::ptr::addr_of!((*node).end) };
    // SAFETY: alive until our mark (contract), which this sets.
    if unsafe { &*end }.fire() {
        // Dropped first: the node is ours to give back, and nobody awaits
        // the outcome (the waker is dropped unwoken).
        // SAFETY: the future gave the node up: ours, alive.
        let index = unsafe { (*node).tp.pool_index() };
        // SAFETY: from the pool with its timepoint's index; the future
        // gave it up; not used after.
        unsafe { node_pool::release(tp.cast::<Node>(), index) };
        drop(waker);
        return;
    }
    if let Some(w) = waker {
        w.wake();
    }
}

impl Semaphore {
    /// A future that resolves when the value is `>= value` (`Ok`) or the
    /// semaphore fails (its error). Works with any executor (it needs only
    /// a [`Waker`]), allocates nothing, and is cancel-safe: dropping it
    /// before it resolves leaves nothing registered, and never waits for
    /// any thread, also when the drop runs inside a waker that this
    /// semaphore's own signal is running (a waker cancelling a sibling):
    /// a future dropped before its signal's callback reached it is never
    /// woken; one dropped on another thread while the callback runs may
    /// be woken once more (a spurious wake-up).
    ///
    /// # Errors
    ///
    /// The semaphore's failure (its own kind), if it failed before the
    /// value was reached.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::Semaphore;
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     struct Noop;
    /// #     impl std::task::Wake for Noop { fn wake(self: std::sync::Arc<Self>) {} }
    /// #     let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
    /// #     let mut cx = std::task::Context::from_waker(&waker);
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop {
    /// #         if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; }
    /// #         std::thread::yield_now();
    /// #     }
    /// # }
    /// let s = Semaphore::new(0);
    /// let producer = s.clone();
    /// let t = std::thread::spawn(move || producer.signal(3));
    /// block_on(s.wait_async(3))?; // or `s.wait_async(3).await` in async code
    /// t.join().expect("the producer does not panic")?;
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn wait_async(&self, value: u64) -> WaitFuture<'_> {
        WaitFuture {
            semaphore: self,
            value,
            state: State::New,
            node: None,
        }
    }
}

impl WaitFuture<'_> {
    /// The node (only while it has one).
    fn node(&self) -> *mut Node {
        self.node.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    /// The callback's outcome, once its mark is seen; the node then goes
    /// back to the pool.
    fn outcome(&mut self) -> Option<Result<(), Error>> {
        let node = self.node?;
        let p = node.as_ptr();
        // SAFETY: the node is ours until we release it or drop it: a field
        // projection.
        let end = unsafe { std::ptr::addr_of!((*p).end) };
        // SAFETY: the node is ours until we release it or drop it; `end`
        // is atomic.
        if !unsafe { &*end }.fired() {
            return None;
        }
        // SAFETY: the node is ours until we release it or drop it: a field
        // projection.
        let slot = unsafe { std::ptr::addr_of!((*p).result) };
        // SAFETY: the callback wrote it before its mark (acquired above)
        // and, the future not dropped, never touches the node again.
        let r = unsafe { &*slot }.with_mut(|r| unsafe { (*r).take() });
        self.give_back(node);
        Some(r.unwrap_or(Ok(())))
    }

    /// Returns the node to the pool.
    fn give_back(&mut self, node: NonNull<Node>) {
        self.node = None;
        // SAFETY: ours (no semaphore or callback uses it any more), alive.
        let index = unsafe { (*node.as_ptr()).tp.pool_index() };
        // SAFETY: ours (no semaphore or callback uses it any more), from
        // the pool with this index.
        unsafe { node_pool::release(node, index) };
    }
}

impl Future for WaitFuture<'_> {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.state {
            State::New => {
                match this.semaphore.query() {
                    Err(e) => {
                        this.state = State::Done;
                        return Poll::Ready(Err(e));
                    }
                    Ok(v) if v >= this.value => {
                        this.state = State::Done;
                        return Poll::Ready(Ok(()));
                    }
                    Ok(_) => {}
                }
                let value = this.value;
                let node = match node_pool::acquire(|index| Node {
                    tp: Timepoint::abandonable(value, wake, std::ptr::null()).in_block(index),
                    waker: AtomicWaker::new(),
                    result: UnsafeCell::new(None),
                    end: LaterFrees::new(),
                }) {
                    Ok(node) => node,
                    Err(e) => {
                        this.state = State::Done;
                        return Poll::Ready(Err(e));
                    }
                };
                this.node = Some(node);
                // SAFETY: a field projection of the node just acquired.
                let waker = unsafe { std::ptr::addr_of!((*node.as_ptr()).waker) };
                // SAFETY: not registered yet: only this thread touches it.
                unsafe { &*waker }.register(cx.waker());
                // `tp` is the first field (`repr(C)`).
                let tp = node.cast::<Timepoint>();
                // SAFETY: the node stays valid until its callback runs or
                // we give it back; registered nowhere else.
                match unsafe { this.semaphore.register(tp) } {
                    Registration::Pending => this.state = State::Registered,
                    Registration::Reached => {
                        this.give_back(node);
                        this.state = State::Done;
                        return Poll::Ready(Ok(()));
                    }
                    Registration::Failed(e) => {
                        this.give_back(node);
                        this.state = State::Done;
                        return Poll::Ready(Err(e));
                    }
                }
                // The callback may have run already (on this thread, or on
                // a signaller's): then it is over.
                match this.outcome() {
                    Some(r) => {
                        this.state = State::Done;
                        Poll::Ready(r)
                    }
                    None => Poll::Pending,
                }
            }
            State::Registered => {
                if let Some(r) = this.outcome() {
                    this.state = State::Done;
                    return Poll::Ready(r);
                }
                let node = this.node();
                // SAFETY: the node is ours until we release it or drop it: a
                // field projection.
                let waker = unsafe { std::ptr::addr_of!((*node).waker) };
                // SAFETY: the waker slot is shared with the callback under
                // its own protocol.
                unsafe { &*waker }.register(cx.waker());
                // Looked at again after storing the waker: a callback that
                // took the old waker before we stored this one has set its
                // mark by now or will wake the new one.
                match this.outcome() {
                    Some(r) => {
                        this.state = State::Done;
                        Poll::Ready(r)
                    }
                    None => Poll::Pending,
                }
            }
            // Polled again after it resolved: the answer from the value.
            State::Done => Poll::Ready(this.semaphore.wait(this.value, super::Timeout::Immediate)),
        }
    }
}

impl Drop for WaitFuture<'_> {
    fn drop(&mut self) {
        let Some(node) = self.node.take() else { return };
        // SAFETY: registered on this semaphore (`Pending`), or never
        // registered (a waker's `clone` panicked first) or caught by a
        // panic unwinding out of `register` (another timepoint's
        // callback): `abandon` hands the node back in each case. Not
        // abandoned before, valid until its callback runs.
        if unsafe { self.semaphore.abandon(node.cast::<Timepoint>()) } {
            // It will never fire; the semaphore hands the node back.
            return;
        }
        // It fired, or the firing pass claimed it and its callback is yet
        // to run (maybe on this thread, behind the waker that is dropping
        // us): never wait for it. Whichever of us marks second gives the
        // node back.
        // SAFETY: alive until both marks are set (ours is not): a field
        // projection.
        let end = unsafe { std::ptr::addr_of!((*node.as_ptr()).end) };
        // SAFETY: alive until both marks are set (ours is not); `end` is
        // atomic.
        if unsafe { &*end }.drop_owner() {
            // SAFETY: the callback is done with it and the future gave it
            // up: ours, alive.
            let index = unsafe { (*node.as_ptr()).tp.pool_index() };
            // SAFETY: the callback is done with it and the future gave it
            // up: ours, from the pool with this index.
            unsafe { node_pool::release(node, index) };
        }
    }
}

#[cfg(not(fenceline_loom))]
static_assertions::const_assert!(std::mem::size_of::<Node>() <= node_pool::BLOCK);
