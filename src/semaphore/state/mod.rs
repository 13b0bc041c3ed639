//! `Semaphore`: a timeline semaphore (a `u64` that only grows, or fails).
//!
//! # Synchronization
//!
//! `value` is the only thing the fast paths touch: `query` is one load,
//! `signal` one CAS and, when nobody waits, one more load.
//!
//! Registered timepoints sit in a list ordered by value that one thread at
//! a time works on: the one holding the **turn** (`LOCKED` in `turn`). The
//! list is never waited for by a signal or a registration (the drain
//! protocol the pending queue uses): a registration pushes its timepoint
//! on a lock-free inbox, a signal or a failure only needs a pass over the
//! list; both then take the turn if it is free and unrequested (one CAS
//! from 0), or else set `REQUEST` and take the turn if it is free, in one
//! read-modify-write. Whoever holds the turn passes until no request is
//! left: it merges the inbox into the list (sorted), reads the value with
//! a read-modify-write, unlinks what it reaches (everything if failed),
//! and gives the turn back with a CAS that fails while a new request is
//! pending. The timepoints it unlinked fire after that, with no turn held,
//! so a callback never runs while another thread could be waiting for the
//! turn. Only `cancel` waits for the turn (it must unlink its timepoint
//! before its memory is reused), and then only for another thread's list
//! work, never for a callback.
//!
//! `abandon` gives up a timepoint without waiting: the timepoint's memory
//! outlives the call (host waits and futures take theirs from a pool), so
//! the turn's holder may unlink it later. It claims the timepoint with a
//! CAS (`ARMED` to `ABANDONED`; a firing claims it with the same CAS to
//! `FIRED`, run by the turn's holder as it unlinks it, so exactly one of
//! the two wins), pushes it on a lock-free stack of removals and requests
//! a pass. Each round takes the removals first, then the inbox: a removal
//! was pushed after its registration, so once the round has seen the one
//! it sees the other, and the timepoint is linked by the end of the merge
//! (or was unlinked before, by a scan that found it abandoned and left it
//! out). The round unlinks it in O(1), and runs its callback with the turn
//! given back, which hands the memory back.
//!
//! No lost wake-up: a registration counts itself in `registered` (an
//! RMW), pushes on the inbox and requests a pass; the turn's holder counts
//! what it unlinks in `unlinked` (a load and a release store: one holder
//! at a time). A signal CASes `value` (acquire-release) and then, if
//! `registered != unlinked`, requests a pass. A pass reads `value` with a
//! read-modify-write, so RMWs on `value` order it with the signal: if the
//! pass reads the signalled value, it fires the timepoint; if it read the
//! value before, the signal's CAS acquired that read, which came after the
//! registration's count, so the signal's `registered` counts it. The
//! signal reads `unlinked` first, with acquire: every registration whose
//! unlinking that count includes happened before, so `registered` counts
//! those too, and a still-linked timepoint keeps the two apart: the
//! signal requests another pass, which reads the signalled value. Who
//! unlinks a timepoint, holding the turn, fires it, so it fires exactly
//! once.

use std::fmt;
use std::ptr::{self, NonNull};

use crossbeam_utils::CachePadded;

use super::event_pool::AnyEvent;
use super::timepoint::Timepoint;
use crate::error::{Error, ErrorKind};
use crate::list::{DList, Handle, TransferStack};
use crate::semaphore::timepoint::{TimepointInbox, TimepointLink, TimepointRemoval};
use crate::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Arc, Mutex, MutexGuard, UnsafeCell};
use crate::unwind::FirstPanic;

/// The value that marks a failed semaphore; never a valid payload.
pub(crate) const FAILED_VALUE: u64 = u64::MAX;

/// A timeline semaphore: a cheap `Clone + Send + Sync` handle to a `u64`
/// payload that only grows, or that has failed with an [`Error`].
///
/// - [`signal(v)`](Self::signal) raises the value to `v`; `v` must be above
///   the current value (each value is signalled once) and below `u64::MAX`.
/// - [`fail(e)`](Self::fail) ends the timeline: the first failure is kept
///   and every later `query`, `wait` and `signal` returns it (kind kept).
/// - [`wait(v, timeout)`](Self::wait) blocks until the value is `>= v`, the
///   semaphore fails, or the timeout elapses (`DeadlineExceeded`, never
///   before the timeout). It spins briefly (a short backoff, then about
///   50 us of yielding to other threads: [`set_wait_yield`](crate::semaphore::set_wait_yield)
///   changes it), then parks.
///
/// ```
/// use std::time::Duration;
/// use fenceline::{Semaphore, Timeout};
/// let s = Semaphore::new(0);
/// let t = { let s = s.clone(); std::thread::spawn(move || s.signal(2)) };
/// s.wait(2, Duration::from_secs(5))?;
/// assert_eq!(s.query()?, 2);
/// t.join().unwrap()?;
/// # Ok::<(), fenceline::Error>(())
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

struct Inner {
    value: CachePadded<AtomicU64>,
    /// Timepoints registered so far (wrapping): counted by registrations
    /// with an RMW. With `unlinked`, the timepoints still waiting (in the
    /// inbox or the list) are `registered - unlinked`; a signal reads both.
    registered: AtomicUsize,
    /// Timepoints unlinked so far (fired or cancelled; wrapping): written
    /// only by the turn's holder, with a load and a release store (no
    /// RMW).
    unlinked: AtomicUsize,
    /// The first failure, set once before `value` becomes `FAILED_VALUE`.
    failure: AtomicPtr<Error>,
    /// `LOCKED`: a thread holds the turn (works on `list`); `REQUEST`: a
    /// pass was asked for since the holder last looked.
    turn: AtomicUsize,
    /// Registrations not merged into the list yet.
    inbox: TransferStack<TimepointInbox>,
    /// Abandoned timepoints the turn's holder has not unlinked yet.
    removals: TransferStack<TimepointRemoval>,
    /// Registered timepoints, ordered by value (ties in registration
    /// order): touched only by the thread holding the turn.
    list: UnsafeCell<DList<TimepointLink>>,
    /// Timepoints compared or unlinked so far (a cost counter for tests);
    /// written only by the turn's holder.
    examined: AtomicU64,
    /// The value the list was last scanned at: no linked timepoint's value
    /// is at or below it. Written only by the turn's holder.
    scanned: AtomicU64,
    /// Recorded device events and the value each brings the semaphore to
    /// (CUDA devices only).
    device: Mutex<DeviceSignals>,
}

/// `Inner::turn`: a thread works on the list.
const LOCKED: usize = 1;
/// `Inner::turn`: a pass over the list was asked for.
const REQUEST: usize = 2;

// SAFETY: `list` is touched only by the thread holding the turn (`turn`'s
// `LOCKED`, taken with acquire and given back with release); everything
// else is atomic or behind a mutex.
unsafe impl Sync for Inner {}
// SAFETY: as above; the timepoints the list points to are `Send`.
unsafe impl Send for Inner {}
// A panic never leaves the list half-changed: no user code runs while the
// turn is held (callbacks run after it is given back), so a semaphore is as
// unwind-safe as it was with its former mutex.
impl std::panic::RefUnwindSafe for Inner {}
impl std::panic::UnwindSafe for Inner {}

mod device_signals;
mod turn;

use device_signals::DeviceSignals;
#[cfg(feature = "testing")]
pub use device_signals::DEVICE_SIGNALS;
use turn::{abandoned, fire_all, keep_claimed, mark_unlinked, Unlinked};

/// The answer of [`Semaphore::register`].
#[derive(Debug)]
pub enum Registration {
    /// Registered: the callback will run once (unless `cancel` returns
    /// `true`), maybe before `register` returned, on this thread or another.
    Pending,
    /// The value was already reached; the callback will not run.
    Reached,
    /// The semaphore had failed; the callback will not run.
    Failed(Error),
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Semaphore");
        match self.query() {
            Ok(v) => d.field("value", &v),
            Err(e) => d.field("failed", &e),
        };
        d.finish()
    }
}

impl Semaphore {
    /// A semaphore at `initial` (which must be below `u64::MAX`; a larger
    /// value is clamped to `u64::MAX - 1`).
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::Semaphore;
    ///
    /// let s = Semaphore::new(5);
    /// let same = s.clone(); // a handle to the same timeline
    /// same.signal(6)?;
    /// assert_eq!(s.query()?, 6);
    /// assert!(s.same(&same));
    /// assert_eq!(Semaphore::new(u64::MAX).query()?, u64::MAX - 1); // clamped
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    #[must_use = "a semaphore nobody holds can be neither signalled nor waited on"]
    pub fn new(initial: u64) -> Semaphore {
        super::node_pool::warm();
        Semaphore {
            inner: Arc::new(Inner {
                value: CachePadded::new(AtomicU64::new(initial.min(FAILED_VALUE - 1))),
                registered: AtomicUsize::new(0),
                unlinked: AtomicUsize::new(0),
                failure: AtomicPtr::new(ptr::null_mut()),
                turn: AtomicUsize::new(0),
                inbox: TransferStack::new(),
                removals: TransferStack::new(),
                list: UnsafeCell::new(DList::new()),
                examined: AtomicU64::new(0),
                scanned: AtomicU64::new(initial.min(FAILED_VALUE - 1)),
                device: Mutex::new(Default::default()),
            }),
        }
    }

    /// Whether two handles name the same semaphore.
    pub fn same(&self, other: &Semaphore) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The current value, or the failure. One atomic load when not failed.
    ///
    /// # Errors
    ///
    /// - The semaphore's failure, if it [failed](Self::fail): the error
    ///   given to the first `fail`, with its kind and message.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{Error, ErrorKind, Semaphore};
    ///
    /// let s = Semaphore::new(0);
    /// assert_eq!(s.query()?, 0);
    /// s.signal(2)?;
    /// assert_eq!(s.query()?, 2);
    /// s.fail(Error::new(ErrorKind::Aborted, "producer gave up"));
    /// assert_eq!(s.query().unwrap_err().kind(), ErrorKind::Aborted);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    #[inline]
    pub fn query(&self) -> Result<u64, Error> {
        // Acquire: pairs with the signalling CAS in `advance_inner` (or
        // `fail`'s swap): whoever signalled this value released its writes.
        let value = self.inner.value.load(Ordering::Acquire);
        if value == FAILED_VALUE {
            return Err(self.inner.failure());
        }
        Ok(value)
    }

    /// Raises the value to `value` and fires the timepoints it reaches.
    ///
    /// # Errors
    ///
    /// The value is unchanged when this returns an error:
    ///
    /// - The semaphore's failure (its own kind), if it
    ///   [failed](Self::fail).
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if `value` is not
    ///   above the current value, or is `u64::MAX` (reserved for failure).
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{ErrorKind, Semaphore};
    ///
    /// let s = Semaphore::new(1);
    /// s.signal(3)?; // values may be skipped
    /// assert_eq!(s.signal(3).unwrap_err().kind(), ErrorKind::InvalidArgument);
    /// assert_eq!(s.signal(u64::MAX).unwrap_err().kind(), ErrorKind::InvalidArgument);
    /// assert_eq!(s.query()?, 3);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    #[inline]
    pub fn signal(&self, value: u64) -> Result<(), Error> {
        self.advance(value, false)
    }

    /// As [`signal`](Self::signal), but a value already reached is not an
    /// error (nothing changes): for a producer whose dependents, having
    /// waited on it on the device, may complete on the host first.
    pub(crate) fn signal_at_least(&self, value: u64) -> Result<(), Error> {
        self.advance(value, true)
    }

    #[inline]
    fn advance(&self, value: u64, reached_ok: bool) -> Result<(), Error> {
        let t = crate::trace::now();
        let r = self.advance_inner(value, reached_ok);
        crate::trace::span(
            crate::trace::Kind::Signal,
            t,
            Arc::as_ptr(&self.inner) as u64,
            value,
            u64::from(r.is_err()),
        );
        r
    }

    fn advance_inner(&self, value: u64, reached_ok: bool) -> Result<(), Error> {
        let inner = &*self.inner;
        let mut current = inner.value.load(Ordering::Relaxed);
        loop {
            if current == FAILED_VALUE {
                return Err(inner.failure());
            }
            if reached_ok && value <= current && value != FAILED_VALUE {
                return Ok(());
            }
            if value <= current || value == FAILED_VALUE {
                return Err(signal_error(value, current));
            }
            // AcqRel: Release publishes the signaller's writes to waiters;
            // both halves pair with a pass's RMW read of the value in
            // `round` (turn.rs), which follows registrations' counts (see
            // module docs).
            match inner.value.compare_exchange_weak(
                current,
                value,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        if inner.has_waiting() {
            inner.request_pass(Some(value));
        }
        Ok(())
    }

    /// Fails the semaphore with `error` unless it already failed (the first
    /// failure wins). Every registered timepoint fires with the error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Error, ErrorKind, Semaphore};
    ///
    /// let s = Semaphore::new(0);
    /// s.fail(Error::new(ErrorKind::Internal, "boom"));
    /// s.fail(Error::new(ErrorKind::Cancelled, "ignored: the first failure wins"));
    /// let e = s.wait(1, Duration::from_secs(5)).unwrap_err(); // fails at once
    /// assert_eq!((e.kind(), e.message()), (ErrorKind::Internal, "boom"));
    /// assert_eq!(s.signal(1).unwrap_err().kind(), ErrorKind::Internal);
    /// ```
    pub fn fail(&self, error: Error) {
        crate::trace::instant(
            crate::trace::Kind::Fail,
            Arc::as_ptr(&self.inner) as u64,
            0,
            0,
        );
        let inner = &*self.inner;
        let boxed = Box::into_raw(Box::new(error));
        // AcqRel: publish the error before `value` says FAILED_VALUE (Release;
        // pairs with the Acquire load in `Inner::failure`, turn.rs). Acquire
        // on failure reads the winner if we lost (unused: we free ours only).
        if inner
            .failure
            .compare_exchange(ptr::null_mut(), boxed, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // SAFETY: `boxed` was never published.
            drop(unsafe { Box::from_raw(boxed) });
            return;
        }
        // AcqRel: pairs with passes' RMW reads of the value in `round`
        // (turn.rs) like a signal's CAS, and with the Acquire loads of
        // `value` (`query`, `check`), which then read the failure.
        inner.value.swap(FAILED_VALUE, Ordering::AcqRel);
        // Unconditionally (not only when `waiting` says so): the pass fires
        // every registered timepoint with the error.
        inner.request_pass(None);
        let events = std::mem::take(&mut *inner.lock_device());
        drop(events);
    }

    /// Registers `tp` to fire when the value reaches `tp.value()` or the
    /// semaphore fails. Never waits for another thread: the timepoint goes
    /// on a lock-free inbox, and the thread holding the list's turn (this
    /// one, if the turn is free) links it at its place: O(1) when values
    /// are registered in increasing order (the common chain), O(n) at
    /// worst.
    ///
    /// `Reached` and `Failed` are answered only when the value check before
    /// registering says so; a value reached while registering is answered
    /// `Pending`, and the callback runs (possibly on this thread, before
    /// `register` returns: the caller must hold no lock its callback
    /// takes).
    ///
    /// # Safety
    /// `tp` is valid, not registered anywhere, and stays valid and unmoved
    /// until its callback runs or [`cancel`](Self::cancel) returns `true`
    /// (see the timepoint contract in [`timepoint`](super::timepoint)).
    #[must_use = "`Reached` and `Failed` mean the callback will not run: the caller must act on them"]
    pub(crate) unsafe fn register(&self, tp: NonNull<Timepoint>) -> Registration {
        let inner = &*self.inner;
        // SAFETY: valid per contract.
        let target = unsafe { tp.as_ref() }.value();
        if let Some(done) = inner.check(target) {
            return done;
        }
        // Counted before it can be seen: a signal that reads `registered`
        // after our pass read the value sees it (see the module docs).
        inner.registered.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `tp` is ours to link (contract: valid until it fires or
        // is cancelled, and not registered anywhere); the inbox is its
        // first list.
        inner.inbox.push(unsafe { Handle::from_raw(tp) });
        inner.request_pass(None);
        Registration::Pending
    }

    /// Unlinks `tp` if it is still registered: `true` means its callback
    /// will never run; `false` means it is not linked: its callback has run
    /// or is running (or it was never registered).
    ///
    /// The one semaphore operation that may wait for another thread: while
    /// a signal, a failure or a registration works on the list (O(k + 1)
    /// list work; callbacks run after it), so that `tp` is unlinked before
    /// this returns. It never waits for a callback: `false` leaves the
    /// timepoint to a callback that is running or queued to run (the
    /// caller must not reuse it until the callback is done with it).
    /// Host waits, `wait_async` futures and expiring wait tasks never
    /// call it: they give their timepoints up with
    /// [`abandon`](Self::abandon), which never waits, and when a firing
    /// has claimed the timepoint first they leave its memory to the
    /// callback (whichever of the two is done second gives it back)
    /// rather than wait for it. The pending queue calls it only when it is
    /// torn down or fails.
    ///
    /// # Safety
    /// `tp` is valid and was registered on this semaphore (or never
    /// registered anywhere).
    #[must_use = "`false` means the callback is running or ran: the timepoint may not be reused until it is done"]
    pub(crate) unsafe fn cancel(&self, tp: NonNull<Timepoint>) -> bool {
        let inner = &*self.inner;
        debug_assert!(
            // SAFETY: valid per contract.
            unsafe { tp.as_ref() }.is_plain(),
            "an abandonable timepoint is given up with `abandon`"
        );
        inner.take_turn();
        let mut out = Unlinked::default();
        // Serves the requests so far, which links `tp` if it is still in
        // the inbox (or fires it, if its value is reached).
        inner.round(true, None, &mut out);
        // SAFETY: we hold the turn.
        let list = unsafe { inner.list_mut() };
        // SAFETY: valid per contract; `linked` is the turn holder's.
        let linked = unsafe { tp.as_ref() }.linked.with(|l| unsafe { *l });
        if linked {
            // SAFETY: linked in this semaphore's list (contract + flag).
            let _ = unsafe { list.remove(tp) };
            // SAFETY: valid per contract; `linked` is the turn holder's.
            unsafe { tp.as_ref() }
                .linked
                .with_mut(|l| unsafe { *l = false });
            inner.count_unlinked(1);
        }
        inner.finish_turn(out);
        linked
    }

    /// Gives up an [abandonable](Timepoint::abandonable) registered
    /// timepoint without waiting for any thread: `true` means it will
    /// never fire (its callback runs once later, maybe on another thread
    /// or before this returns, only to hand its memory back: see
    /// [`Timepoint::is_abandoned`]); `false` means it fired or is firing
    /// (as for [`cancel`](Self::cancel)).
    ///
    /// Lock-free: one CAS on the timepoint, a push on the semaphore's
    /// stack of removals, and a request for a pass, which the thread
    /// holding the list's turn serves if there is one (it unlinks the
    /// timepoint in O(1)), or else this one.
    ///
    /// # Safety
    /// `tp` was made with [`Timepoint::abandonable`], registered on this
    /// semaphore (`register` answered `Pending`, or it unwound) or never
    /// registered anywhere, and not abandoned before; its memory stays
    /// valid until its callback runs.
    #[must_use = "`false` means the callback is running or ran: the timepoint may not be reused until it is done"]
    pub(crate) unsafe fn abandon(&self, tp: NonNull<Timepoint>) -> bool {
        // SAFETY: valid per contract.
        if !unsafe { tp.as_ref() }.claim_abandon() {
            return false;
        }
        // SAFETY: claimed just above; the rest is the caller's contract.
        unsafe { self.abandon_claimed(tp) };
        true
    }

    /// The second half of [`abandon`](Self::abandon), for a caller that
    /// claimed the timepoint itself ([`Timepoint::claim_abandon`]) where
    /// its memory was known to be valid (an executor's wait task, under
    /// the lock of its list of parked waits): hands it to the thread
    /// holding the list's turn, or serves it here.
    ///
    /// # Safety
    /// As for `abandon`, and `claim_abandon` on `tp` answered `true`.
    /// `self` must not be freed by the callback (call it on a handle of
    /// the caller's own, not one inside the timepoint's owner).
    pub(crate) unsafe fn abandon_claimed(&self, tp: NonNull<Timepoint>) {
        let inner = &*self.inner;
        // SAFETY: registered here and abandoned once (contract), so on no
        // other removal stack; the removal links are used by nothing else.
        inner.removals.push(unsafe { Handle::from_raw(tp) });
        inner.request_pass(None);
    }

    /// Timepoints this semaphore has compared or unlinked so far: a cost
    /// counter for tests proving that a signal's work does not grow with
    /// the number of timepoints left registered.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn timepoints_examined(&self) -> u64 {
        self.inner.examined.load(Ordering::Relaxed)
    }

    /// Timepoints registered and not yet unlinked (fired or cancelled): for
    /// tests proving that a dropped waiter leaves nothing behind. Exact
    /// when no registration, signal or cancel is running.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn timepoints_registered(&self) -> usize {
        // Acquire: pairs with the Release store in `count_unlinked`
        // (turn.rs). `registered`'s Acquire pairs with nothing: it is
        // counted with a Relaxed RMW (`register`).
        let unlinked = self.inner.unlinked.load(Ordering::Acquire);
        self.inner
            .registered
            .load(Ordering::Acquire)
            .wrapping_sub(unlinked)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // `&mut self`: the turn is ours.
        // SAFETY: exclusive access.
        let list = unsafe { self.list_mut() };
        // Removals first, as in a round (see there).
        let mut removals = self.removals.take_all();
        let mut stranded = DList::new();
        let _ = self.merge_inbox(list, FAILED_VALUE, &mut stranded);
        let mut rest = list.take_all();
        mark_unlinked(&rest);
        keep_claimed(&mut rest);
        stranded.append(&mut rest);
        let mut released = DList::new();
        while let Some(handle) = removals.pop_front() {
            // SAFETY: every timepoint is unlinked now (the list is empty);
            // an abandoned one is in no list through these links.
            released.push_back(unsafe { Handle::from_raw(handle.into_raw()) });
        }
        *self.lock_device() = Default::default();
        let mut panicked = FirstPanic::default();
        panicked.run(|| {
            fire_all(
                stranded,
                Err(Error::new(
                    ErrorKind::Cancelled,
                    "semaphore dropped while timepoints were registered",
                )),
            )
        });
        panicked.run(|| fire_all(released, Err(abandoned())));
        let p = self.failure.swap(ptr::null_mut(), Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: set once from `Box::into_raw`, freed once here.
            drop(unsafe { Box::from_raw(p) });
        }
        panicked.resume();
    }
}

fn signal_error(value: u64, current: u64) -> Error {
    if value == FAILED_VALUE {
        Error::new(
            ErrorKind::InvalidArgument,
            "signal(u64::MAX): the largest value is reserved",
        )
    } else {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("signal({value}): not above the current value {current}"),
        )
    }
}

static_assertions::assert_impl_all!(Semaphore: Send, Sync, Clone);

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn signal_at_least_treats_a_reached_value_as_done() {
        let s = Semaphore::new(0);
        s.signal_at_least(3).unwrap();
        assert_eq!(s.query().unwrap(), 3);
        // Reached or passed: nothing changes, no error (`signal` errs).
        s.signal_at_least(3).unwrap();
        s.signal_at_least(2).unwrap();
        assert_eq!(s.signal(2).unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(s.query().unwrap(), 3);
        s.signal_at_least(5).unwrap();
        assert_eq!(s.query().unwrap(), 5);
        // Still not past the reserved failure value, and a failure wins.
        assert!(s.signal_at_least(u64::MAX).is_err());
        s.fail(Error::new(ErrorKind::Aborted, "gone"));
        assert_eq!(s.signal_at_least(1).unwrap_err().kind(), ErrorKind::Aborted);
    }
}

#[cfg(all(test, not(fenceline_loom)))]
impl Semaphore {
    /// Handles to this semaphore (tests: who holds a reference).
    pub(crate) fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }
}
