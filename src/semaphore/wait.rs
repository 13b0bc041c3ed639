//! Host waits: a thread blocks until semaphores reach values.
//!
//! A wait checks the values first (no lock, no allocation), spins briefly,
//! then registers one timepoint per unreached semaphore and parks. The
//! timepoints come from the wait nodes' pool (see `node_pool`), and the
//! wait keeps track of them on its stack (up to [`INLINE_WAITS`]
//! semaphores; more use one heap array), so a wait allocates nothing once
//! the pool is warm. The semaphores' values stay the source of truth: a
//! timepoint only wakes the thread, which re-checks, so spurious wake-ups
//! are harmless. A wait that ends before a timepoint fired abandons it
//! (`Semaphore::abandon`: never waits for another thread); one that ends
//! while the semaphore's firing pass holds it (claimed, its callback not
//! run yet) leaves the node to the callback ([`LaterFrees`]: whichever
//! of the two is done second gives it back), so no wait ever waits for
//! another thread's callbacks. The node, not the waiting thread's stack,
//! holds what the callback needs (a handle to the thread to unpark).

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::node_pool::{self, LaterFrees};
use super::state::{Registration, Semaphore};
use super::timeout::Timeout;
use super::timepoint::Timepoint;
use crate::error::{Error, ErrorKind};
use crate::sync::liveness;
use crate::sync::thread::{self, Thread};
use crate::sync::UnsafeCell;

/// Semaphores one wait can watch without touching the heap.
pub const INLINE_WAITS: usize = 8;

/// How long a blocking wait yields before it parks, in nanoseconds (see
/// [`set_wait_yield`]). A setting, not state the model checker explores:
/// std's atomic, and under loom no wait spins.
static WAIT_YIELD_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(50_000);

/// Sets how long a blocking host wait ([`Semaphore::wait`], [`wait_all`],
/// [`wait_any`]) keeps re-checking its values, yielding to other threads
/// in between, before it parks, for every wait of the process that starts
/// afterwards; returns the previous setting. The default is 50 us: a park
/// and its wake-up cost 5-20 us of latency, so a wait that ends soon after
/// it starts is cheaper yielding, at the price of a core kept busy.
///
/// - `Duration::ZERO`: park right after a short backoff (about 3 us of
///   spinning, then four yields): least CPU, one futex wake of latency.
/// - `Duration::MAX`: never park (the wait yields until its value or its
///   timeout): least latency, one core kept busy; for a latency-critical
///   thread that owns its core.
///
/// A timeout is honoured either way. [`Semaphore::wait_async`] never
/// yields (its executor decides), and idle device workers are set with
/// [`CpuConfig`](crate::CpuConfig)'s `spin`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let before = fenceline::semaphore::set_wait_yield(Duration::ZERO);
/// assert_eq!(fenceline::semaphore::wait_yield(), Duration::ZERO);
/// fenceline::semaphore::set_wait_yield(before);
/// ```
pub fn set_wait_yield(yield_for: Duration) -> Duration {
    let ns = u64::try_from(yield_for.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(WAIT_YIELD_NS.swap(ns, std::sync::atomic::Ordering::Relaxed))
}

/// How long a blocking host wait yields before it parks (see
/// [`set_wait_yield`]).
pub fn wait_yield() -> Duration {
    Duration::from_nanos(WAIT_YIELD_NS.load(std::sync::atomic::Ordering::Relaxed))
}

impl Semaphore {
    /// Blocks until the value is `>= value` (Ok), the semaphore fails (its
    /// error), or `timeout` elapses (`DeadlineExceeded`, never earlier).
    ///
    /// Ending the wait never waits for another thread: a timepoint it no
    /// longer needs is given up at once, also one that a signal's firing
    /// pass holds at that moment (its callback gives the memory back).
    ///
    /// # Errors
    ///
    /// - The semaphore's failure (its own kind), if it failed before or
    ///   during the wait.
    /// - [`DeadlineExceeded`](ErrorKind::DeadlineExceeded) if `timeout`
    ///   elapsed first; with [`Timeout::Immediate`], if the value was not
    ///   reached at the call.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{ErrorKind, Semaphore, Timeout};
    ///
    /// let s = Semaphore::new(0);
    /// let producer = s.clone();
    /// let t = std::thread::spawn(move || producer.signal(1));
    /// s.wait(1, Duration::from_secs(5))?;
    /// t.join().expect("the producer does not panic")?;
    /// assert_eq!(s.wait(2, Timeout::Immediate).unwrap_err().kind(), ErrorKind::DeadlineExceeded);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn wait(&self, value: u64, timeout: impl Into<Timeout>) -> Result<(), Error> {
        wait_all(&[(self, value)], timeout)
    }
}

/// Blocks until every `(semaphore, value)` is reached. A failure of any
/// of them ends the wait with that failure; the others are untouched.
/// An empty list is reached at once.
///
/// # Errors
///
/// - The failure (its own kind) of a semaphore of `list` that failed.
/// - [`DeadlineExceeded`](ErrorKind::DeadlineExceeded) if `timeout` elapsed
///   before every value was reached; with [`Timeout::Immediate`], if one
///   was not reached at the call.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fenceline::{wait_all, ErrorKind, Semaphore, Timeout};
///
/// let (a, b) = (Semaphore::new(0), Semaphore::new(0));
/// a.signal(1)?;
/// let e = wait_all(&[(&a, 1), (&b, 2)], Timeout::Immediate).unwrap_err();
/// assert_eq!(e.kind(), ErrorKind::DeadlineExceeded); // b is not at 2 yet
/// b.signal(2)?;
/// wait_all(&[(&a, 1), (&b, 2)], Duration::from_secs(5))?;
/// # Ok::<(), fenceline::Error>(())
/// ```
pub fn wait_all(list: &[(&Semaphore, u64)], timeout: impl Into<Timeout>) -> Result<(), Error> {
    wait_many(list, Mode::All, timeout.into()).map(|_| ())
}

/// Blocks until one `(semaphore, value)` is reached and returns its index
/// (the lowest reached index). A failure of any of them ends the wait with
/// that failure. An empty list is `InvalidArgument`.
///
/// # Errors
///
/// - [`InvalidArgument`](ErrorKind::InvalidArgument) if `list` is empty.
/// - The failure (its own kind) of a semaphore of `list` that failed
///   (entries are checked in order: the first one that is reached or failed
///   decides).
/// - [`DeadlineExceeded`](ErrorKind::DeadlineExceeded) if `timeout` elapsed
///   before any value was reached; with [`Timeout::Immediate`], if none was
///   reached at the call.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fenceline::{wait_any, ErrorKind, Semaphore, Timeout};
///
/// let (a, b) = (Semaphore::new(0), Semaphore::new(0));
/// b.signal(2)?;
/// assert_eq!(wait_any(&[(&a, 1), (&b, 2)], Duration::from_secs(5))?, 1);
/// a.signal(1)?;
/// assert_eq!(wait_any(&[(&a, 1), (&b, 2)], Timeout::Immediate)?, 0); // lowest index
/// assert_eq!(wait_any(&[], Timeout::Immediate).unwrap_err().kind(), ErrorKind::InvalidArgument);
/// # Ok::<(), fenceline::Error>(())
/// ```
pub fn wait_any(list: &[(&Semaphore, u64)], timeout: impl Into<Timeout>) -> Result<usize, Error> {
    if list.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "wait_any on an empty list can never be satisfied",
        ));
    }
    wait_many(list, Mode::Any, timeout.into())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    All,
    Any,
}

/// `Some(result)` when the wait is over, judged from the values alone.
fn check(list: &[(&Semaphore, u64)], mode: Mode) -> Option<Result<usize, Error>> {
    let mut all = true;
    for (i, (sem, value)) in list.iter().enumerate() {
        match sem.query() {
            Err(e) => return Some(Err(e)),
            Ok(v) if v >= *value => {
                if mode == Mode::Any {
                    return Some(Ok(i));
                }
            }
            Ok(_) => all = false,
        }
    }
    // `All` with every value reached (or an empty list).
    (mode == Mode::All && all).then_some(Ok(0))
}

/// One timepoint of a host wait, in the wait nodes' pool.
#[repr(C)]
struct WaitNode {
    /// First field: the callback gets a pointer to it and casts back.
    tp: Timepoint,
    /// The waiting thread: taken out by the callback before its mark, so
    /// that it unparks the thread without touching the node (or anything
    /// of the waiter's) again.
    thread: UnsafeCell<Option<Thread>>,
    /// The callback's and the wait's marks: the later one gives the node
    /// back. The callback's mark also tells the waiter (with a
    /// read-modify-write after each park) that it was woken.
    end: LaterFrees,
}

/// A wait's hold on one node.
#[derive(Clone, Copy)]
struct NodeHold {
    node: Option<NonNull<WaitNode>>,
    /// `register` answered `Pending`.
    registered: bool,
}

impl NodeHold {
    const EMPTY: NodeHold = NodeHold {
        node: None,
        registered: false,
    };
}

/// Callback of a host-wait timepoint: wake the waiter, or hand back an
/// abandoned node.
///
/// # Safety
/// `tp` is the `tp` field of a live `WaitNode`. Unless abandoned, the node
/// stays alive until the callback's mark, or longer if the wait ended
/// first (then the callback gives it back); abandoned, the node is the
/// callback's.
unsafe fn wake(tp: NonNull<Timepoint>, _result: Result<(), Error>) {
    let node = tp.cast::<WaitNode>();
    // SAFETY: alive (contract).
    let abandoned = unsafe { tp.as_ref() }.is_abandoned();
    liveness::check(node.as_ptr(), "a host wait's node (its callback)");
    if abandoned {
        // The wait is over and gave the node up: ours to hand back.
        // SAFETY: alive (contract).
        let index = unsafe { tp.as_ref() }.pool_index();
        // SAFETY: from the pool with its timepoint's index; not used after.
        unsafe { node_pool::release(node, index) };
        return;
    }
    // SAFETY: alive until our mark (contract). A field projection, not
    // `&WaitNode`: the waiter reads `end` meanwhile.
    let thread = unsafe { std::ptr::addr_of!((*node.as_ptr()).thread) };
    // SAFETY: alive until our mark (contract).
    let thread = unsafe { &*thread }.with_mut(|t| unsafe { (*t).take() });
    // SAFETY: alive until our mark (contract): a field projection.
    let end = unsafe { std::ptr::addr_of!((*node.as_ptr()).end) };
    // SAFETY: alive until our mark (contract), which this sets. Our last
    // access unless the wait ended first.
    if unsafe { &*end }.fire() {
        // The wait ended first (timed out, or another semaphore decided
        // it): nobody to wake; the node is ours to give back.
        // SAFETY: the wait gave the node up: ours, alive.
        let index = unsafe { (*node.as_ptr()).tp.pool_index() };
        // SAFETY: from the pool with its timepoint's index; the wait gave
        // it up; not used after.
        unsafe { node_pool::release(node, index) };
        return;
    }
    // The waiter may have returned by now: a stray unpark only makes one
    // later park of that thread return early, which every park allows.
    if let Some(t) = thread {
        t.unpark();
    }
}

fn wait_many(list: &[(&Semaphore, u64)], mode: Mode, timeout: Timeout) -> Result<usize, Error> {
    if let Some(done) = check(list, mode) {
        return done;
    }
    let start = Instant::now();
    let deadline = timeout.deadline_from(start);
    if timeout == Timeout::Immediate {
        return Err(deadline_exceeded(timeout));
    }
    // Spin a little: a signal from another core often lands within a few
    // hundred nanoseconds, far cheaper than parking; then yield for
    // `wait_yield()` (50 us by default, as an idle worker does): a park
    // and its futex wake cost 5-20 us on the project's VM, on the path of
    // every wait that ends soon after (a fork/join's `wait_idle`: 99-102
    // to 93-96 us). (Not under loom, whose scheduler would explore every
    // spin.)
    #[cfg(not(fenceline_loom))]
    {
        let backoff = crossbeam_utils::Backoff::new();
        while !backoff.is_completed() {
            backoff.snooze();
            if let Some(done) = check(list, mode) {
                return done;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(deadline_exceeded(timeout));
            }
        }
        let yield_for = wait_yield();
        while start.elapsed() < yield_for {
            std::thread::yield_now();
            if let Some(done) = check(list, mode) {
                return done;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(deadline_exceeded(timeout));
            }
        }
    }
    let me = thread::current();
    let mut inline = [NodeHold::EMPTY; INLINE_WAITS];
    let mut heap: Vec<NodeHold> = Vec::new();
    let slots: &mut [NodeHold] = if list.len() <= INLINE_WAITS {
        &mut inline[..list.len()]
    } else {
        heap.resize(list.len(), NodeHold::EMPTY);
        &mut heap[..]
    };
    let held = Held { list, slots };
    park_until(list, held.slots, &me, mode, timeout, deadline)
    // `held` gives the nodes back here, also on unwinding.
}

/// The nodes a wait holds: given back (see [`unregister`]) when dropped,
/// also when a panic unwinds out of a registration (a registration's pass
/// may fire other timepoints, whose callbacks may panic: ours, registered
/// by then, must not be left registered with a callback that would wake
/// a waiter that is gone).
struct Held<'a, 'b> {
    list: &'a [(&'b Semaphore, u64)],
    slots: &'a mut [NodeHold],
}

impl Drop for Held<'_, '_> {
    fn drop(&mut self) {
        unregister(self.list, self.slots);
    }
}

/// A node's timepoint.
fn node_tp(node: NonNull<WaitNode>) -> NonNull<Timepoint> {
    // `tp` is the first field (`repr(C)`).
    node.cast::<Timepoint>()
}

fn park_until(
    list: &[(&Semaphore, u64)],
    slots: &mut [NodeHold],
    me: &Thread,
    mode: Mode,
    timeout: Timeout,
    deadline: Option<Instant>,
) -> Result<usize, Error> {
    for (i, ((sem, value), slot)) in list.iter().zip(slots.iter_mut()).enumerate() {
        let node = node_pool::acquire(|index| WaitNode {
            tp: Timepoint::abandonable(*value, wake, std::ptr::null()).in_block(index),
            thread: UnsafeCell::new(Some(me.clone())),
            end: LaterFrees::new(),
        })?;
        slot.node = Some(node);
        // Marked before the call: if a panic unwinds out of it (another
        // timepoint's callback, fired by its pass), ours is registered or
        // fired, and `unregister` must abandon it or wait for it.
        slot.registered = true;
        // SAFETY: the node is ours, unregistered, and stays valid until
        // its callback runs or `unregister` is done with it.
        match unsafe { sem.register(node_tp(node)) } {
            Registration::Pending => {}
            Registration::Failed(e) => {
                slot.registered = false;
                return Err(e);
            }
            // An earlier entry may have been reached meanwhile: the answer
            // is the lowest reached index (or the first failure).
            Registration::Reached if mode == Mode::Any => {
                slot.registered = false;
                return check(list, mode).unwrap_or(Ok(i));
            }
            Registration::Reached => slot.registered = false,
        }
    }
    loop {
        // Each fired node's mark, read with a read-modify-write: orders a
        // callback's signal before the re-check below however the
        // platform's unpark orders memory (std's does; the model
        // checker's does not). The value matters only for that ordering.
        for slot in slots.iter().filter(|s| s.registered) {
            if let Some(node) = slot.node {
                // SAFETY: ours until `unregister` (the callback never frees
                // it while the wait has not given it up): a field projection.
                let end = unsafe { std::ptr::addr_of!((*node.as_ptr()).end) };
                // SAFETY: ours until `unregister` (as just above).
                let _ = unsafe { &*end }.fired_latest();
            }
        }
        if let Some(done) = check(list, mode) {
            return done;
        }
        match deadline {
            None => crate::sync::thread::park(),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Err(deadline_exceeded(timeout));
                }
                crate::sync::park_timeout(d - now);
            }
        }
    }
}

/// Gives every node back without waiting for any thread: abandons each
/// registered one that has not fired (the semaphore hands it back later);
/// one that fired or is firing is left to its callback unless the callback
/// is done with it ([`LaterFrees`]); the unregistered ones go back to the
/// pool here.
fn unregister(list: &[(&Semaphore, u64)], slots: &[NodeHold]) {
    for ((sem, _), slot) in list.iter().zip(slots) {
        let Some(node) = slot.node else { continue };
        if slot.registered {
            // SAFETY: registered on `sem` (`Pending`), not abandoned
            // before, and valid until its callback runs.
            if unsafe { sem.abandon(node_tp(node)) } {
                continue;
            }
            // It fired or is about to: the later of us gives it back.
            // SAFETY: alive until both marks are set (ours is not): a field
            // projection.
            let end = unsafe { std::ptr::addr_of!((*node.as_ptr()).end) };
            // SAFETY: alive until both marks are set (ours is not).
            if !unsafe { &*end }.drop_owner() {
                continue;
            }
        }
        // SAFETY: acquired by this wait; no semaphore or callback uses it
        // any more: alive.
        let index = unsafe { (*node.as_ptr()).tp.pool_index() };
        // SAFETY: acquired by this wait; no semaphore or callback uses it
        // any more.
        unsafe { node_pool::release(node, index) };
    }
}

fn deadline_exceeded(timeout: Timeout) -> Error {
    Error::new(
        ErrorKind::DeadlineExceeded,
        match timeout {
            Timeout::Immediate => "wait with Timeout::Immediate: not reached yet",
            _ => "wait timed out before the semaphores reached their values",
        },
    )
}

#[cfg(not(fenceline_loom))]
static_assertions::const_assert!(std::mem::size_of::<WaitNode>() <= node_pool::BLOCK);
