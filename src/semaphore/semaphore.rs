//! `Semaphore`: a timeline semaphore (a `u64` that only grows, or fails).
//!
//! # Synchronization
//!
//! `value` is the only thing the fast paths touch: `query` is one load,
//! `signal` one CAS and, when nobody waits, one more load. Registered
//! timepoints sit in a list ordered by value behind a short critical section
//! (a `Mutex`), held for O(k + 1) work when k timepoints fire and never while
//! a callback runs. The list is **not** lock-free; the fast paths are.
//!
//! No lost wake-up: a registration stores `waiting` and then reads `value`
//! with a read-modify-write; a signal CASes `value` (acquire-release) and
//! then reads `waiting`. RMWs on `value` are totally ordered: if the
//! registration's RMW comes first, the signal's CAS acquires it and sees
//! `waiting != 0`, so it takes the lock and fires the timepoint; if the
//! signal's CAS comes first, the registration reads the new value and
//! answers "reached". Who unlinks a timepoint, under the lock, fires it, so
//! it fires exactly once.

use std::fmt;
use std::ptr::{self, NonNull};

use crossbeam_utils::CachePadded;

use super::event_pool::AnyEvent;
use super::timepoint::Timepoint;
use crate::error::{Error, ErrorKind};
use crate::list::{DList, Handle};
use crate::semaphore::timepoint::TimepointLink;
use crate::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Arc, Mutex, MutexGuard};
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
///   before the timeout). It spins briefly, then parks.
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
    /// Timepoints in `waiters.list`; written under the lock, read by signals.
    waiting: AtomicUsize,
    /// The first failure, set once before `value` becomes `FAILED_VALUE`.
    failure: AtomicPtr<Error>,
    waiters: Mutex<Waiters>,
}

/// Device signals one semaphore remembers at once.
pub const DEVICE_SIGNALS: usize = 8;

/// Pruned device signals, dropped after the lock is released (no heap).
type Stale = [Option<AnyEvent>; DEVICE_SIGNALS];

/// State guarded by the semaphore's lock.
struct Waiters {
    /// Registered timepoints, ordered by value (ties in registration order).
    list: DList<TimepointLink>,
    /// Timepoints compared or unlinked so far (a cost counter for tests).
    examined: u64,
    /// Recorded device events and the value each brings the semaphore to.
    device: [Option<(u64, AnyEvent)>; DEVICE_SIGNALS],
}

impl Waiters {
    /// Moves out every device signal at or below `current` (useless: the
    /// value is already reached) into `out`, to be dropped unlocked.
    fn prune(&mut self, current: u64, out: &mut Stale) {
        for (entry, slot) in self.device.iter_mut().zip(out.iter_mut()) {
            if entry.as_ref().is_some_and(|(v, _)| *v <= current) {
                *slot = entry.take().map(|(_, e)| e);
            }
        }
    }
}

/// The answer of [`Semaphore::register`].
#[derive(Debug)]
pub enum Registration {
    /// Linked: the callback will run once (unless `cancel` returns `true`).
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
        Semaphore {
            inner: Arc::new(Inner {
                value: CachePadded::new(AtomicU64::new(initial.min(FAILED_VALUE - 1))),
                waiting: AtomicUsize::new(0),
                failure: AtomicPtr::new(ptr::null_mut()),
                waiters: Mutex::new(Waiters {
                    list: DList::new(),
                    examined: 0,
                    device: Default::default(),
                }),
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
        // Acquire: whoever signalled this value released its writes.
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
            // Acquire pairs with a registration's RMW (see module docs).
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
        if inner.waiting.load(Ordering::Relaxed) != 0 {
            inner.fire_reached();
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
        let inner = &*self.inner;
        let boxed = Box::into_raw(Box::new(error));
        // AcqRel: publish the error before `value` says FAILED_VALUE (Release);
        // Acquire on failure to read the winner if we lost.
        if inner
            .failure
            .compare_exchange(ptr::null_mut(), boxed, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // SAFETY: `boxed` was never published.
            drop(unsafe { Box::from_raw(boxed) });
            return;
        }
        // AcqRel: pairs with registrations' RMWs like a signal's CAS.
        inner.value.swap(FAILED_VALUE, Ordering::AcqRel);
        let error = inner.failure();
        let (fired, events) = {
            let mut waiters = inner.lock();
            let fired = waiters.list.take_all();
            mark_unlinked(&fired);
            waiters.examined += fired.len() as u64;
            inner.waiting.store(0, Ordering::Relaxed);
            (fired, std::mem::take(&mut waiters.device))
        };
        drop(events);
        fire_all(fired, Err(error));
    }

    /// Records that a device event, once complete, brings this semaphore to
    /// `value` (the device-wait shortcut: a later device wait on `>= value`
    /// can wait on the event instead of the host). Keeps at most
    /// [`DEVICE_SIGNALS`]; returns `false` (and drops `event`) when the
    /// value is already reached, the semaphore failed, or the table is full
    /// of values that are still useful: callers then simply wait on the
    /// host.
    pub fn record_device_signal(&self, value: u64, event: AnyEvent) -> bool {
        let mut stale: Stale = Default::default();
        let recorded = {
            let mut waiters = self.inner.lock();
            let current = self.inner.value.load(Ordering::Acquire);
            if current == FAILED_VALUE || value <= current {
                false
            } else {
                waiters.prune(current, &mut stale);
                match waiters.device.iter_mut().find(|e| e.is_none()) {
                    Some(slot) => {
                        *slot = Some((value, event.clone()));
                        true
                    }
                    None => false,
                }
            }
        };
        drop(stale); // released with no lock held
        drop(event);
        recorded
    }

    /// The recorded device event with the **smallest** value `>= value`, with
    /// a new reference to it (the caller's to drop), or `None`.
    pub fn device_signal_reaching(&self, value: u64) -> Option<(u64, AnyEvent)> {
        let mut stale: Stale = Default::default();
        let found = {
            let mut waiters = self.inner.lock();
            let current = self.inner.value.load(Ordering::Acquire);
            if current != FAILED_VALUE {
                waiters.prune(current, &mut stale);
            }
            waiters
                .device
                .iter()
                .flatten()
                .filter(|(v, _)| *v >= value)
                .min_by_key(|(v, _)| *v)
                .map(|(v, e)| (*v, e.clone()))
        };
        drop(stale);
        found
    }

    /// Registers `tp` to fire when the value reaches `tp.value()` or the
    /// semaphore fails. O(1) when values are registered in increasing
    /// order (the common chain), O(n) at worst.
    ///
    /// # Safety
    /// `tp` is valid, not registered anywhere, and stays valid and unmoved
    /// until its callback runs or [`cancel`](Self::cancel) returns `true`
    /// (see the timepoint contract in [`timepoint`](super::timepoint)).
    #[must_use = "`Reached` and `Failed` mean the callback will not run: the caller must act on them"]
    pub unsafe fn register(&self, tp: NonNull<Timepoint>) -> Registration {
        let inner = &*self.inner;
        // SAFETY: valid per contract.
        let target = unsafe { tp.as_ref() }.value();
        if let Some(done) = inner.check(target) {
            return done;
        }
        let mut waiters = inner.lock();
        let n = waiters.list.len();
        inner.waiting.store(n + 1, Ordering::Relaxed);
        // An RMW, not a load: it reads the latest value in `value`'s total
        // order and releases the `waiting` store to the next signal's CAS.
        let current = inner.value.fetch_add(0, Ordering::AcqRel);
        if current == FAILED_VALUE || current >= target {
            inner.waiting.store(n, Ordering::Relaxed);
            drop(waiters);
            return inner.check(target).unwrap_or(Registration::Reached);
        }
        // Insert after the last timepoint with a value <= target.
        let mut at = waiters.list.back();
        while let Some(node) = at {
            waiters.examined += 1;
            // SAFETY: linked nodes are valid (their owners' contract).
            if unsafe { node.as_ref() }.value() <= target {
                break;
            }
            // SAFETY: `node` is linked in this list.
            at = unsafe { waiters.list.prev(node) };
        }
        // SAFETY: `tp` is ours to link (contract: valid until it fires or
        // is cancelled, and not registered anywhere), `at` is linked here.
        unsafe {
            waiters.list.insert_after(at, Handle::from_raw(tp));
            tp.as_ref().linked.with_mut(|l| *l = true);
        }
        Registration::Pending
    }

    /// Unlinks `tp` if it is still registered: `true` means its callback
    /// will never run; `false` means it is not linked: its callback has run
    /// or is running (or it was never registered).
    ///
    /// # Safety
    /// `tp` is valid and was registered on this semaphore (or never
    /// registered anywhere).
    #[must_use = "`false` means the callback is running or ran: the timepoint may not be reused until it is done"]
    pub unsafe fn cancel(&self, tp: NonNull<Timepoint>) -> bool {
        let inner = &*self.inner;
        let mut waiters = inner.lock();
        // SAFETY: valid per contract; `linked` is guarded by this lock.
        let linked = unsafe { tp.as_ref() }.linked.with(|l| unsafe { *l });
        if !linked {
            return false;
        }
        // SAFETY: linked in this semaphore's list (contract + flag).
        unsafe {
            let _ = waiters.list.remove(tp);
            tp.as_ref().linked.with_mut(|l| *l = false);
        }
        inner.waiting.store(waiters.list.len(), Ordering::Relaxed);
        true
    }

    /// Timepoints this semaphore has compared or unlinked so far: a cost
    /// counter for tests proving that a signal's work does not grow with
    /// the number of timepoints left registered.
    #[doc(hidden)]
    pub fn timepoints_examined(&self) -> u64 {
        self.inner.lock().examined
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Waiters> {
        // A panic cannot happen while the lock is held (no user code runs
        // under it), so poisoning is impossible; recover anyway.
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stored failure. Only called once `value == FAILED_VALUE` was seen,
    /// which happens after the failure was published.
    fn failure(&self) -> Error {
        let p = self.failure.load(Ordering::Acquire);
        if p.is_null() {
            return Error::new(ErrorKind::Internal, "semaphore failed without an error");
        }
        // SAFETY: set once, freed only when the last handle drops.
        unsafe { (*p).clone() }
    }

    /// `Some` answer when `target` is reached or the semaphore failed.
    fn check(&self, target: u64) -> Option<Registration> {
        match self.value.load(Ordering::Acquire) {
            FAILED_VALUE => Some(Registration::Failed(self.failure())),
            v if v >= target => Some(Registration::Reached),
            _ => None,
        }
    }

    /// Unlinks every timepoint the current value reaches and fires them
    /// after unlocking. O(k + 1) for k fired.
    #[cold]
    fn fire_reached(&self) {
        let mut fired = DList::new();
        {
            let mut waiters = self.lock();
            let current = self.value.load(Ordering::Acquire);
            if current == FAILED_VALUE {
                return; // `fail` fires everything
            }
            while let Some(node) = waiters.list.front() {
                waiters.examined += 1;
                // SAFETY: linked nodes are valid.
                if unsafe { node.as_ref() }.value() > current {
                    break;
                }
                // SAFETY: valid until fired; the flag is guarded by the lock
                // we hold.
                unsafe { node.as_ref() }
                    .linked
                    .with_mut(|l| unsafe { *l = false });
                // Moves from the semaphore's list to ours, still valid until
                // fired.
                fired.extend(waiters.list.pop_front());
            }
            self.waiting.store(waiters.list.len(), Ordering::Relaxed);
        }
        fire_all(fired, Ok(()));
    }
}

/// Clears the `linked` flag of every node of `taken` (just unlinked from a
/// semaphore's list). Must run under that semaphore's lock, so a `cancel`
/// never sees a stale `true`.
fn mark_unlinked(taken: &DList<TimepointLink>) {
    for node in taken.iter() {
        // SAFETY: the nodes are valid until fired; the flag is guarded by the
        // lock our caller holds.
        unsafe { node.as_ref() }
            .linked
            .with_mut(|l| unsafe { *l = false });
    }
}

/// Fires each timepoint of `fired` (unlinked, flags cleared), with no lock
/// held. A panicking callback does not keep the others from firing (a
/// host waiter would wait forever for its node); the first panic goes on
/// unwinding once every one has fired.
fn fire_all(mut fired: DList<TimepointLink>, result: Result<(), Error>) {
    let mut panicked = FirstPanic::default();
    while let Some(node) = fired.pop_front().map(Handle::into_raw) {
        // SAFETY: unlinked under the lock and now owned by us; popped from
        // our local list before the callback may free it.
        panicked.run(|| unsafe { Timepoint::fire(node, result.clone()) });
    }
    panicked.resume();
}

impl Drop for Inner {
    fn drop(&mut self) {
        let waiters = self.waiters.get_mut().unwrap_or_else(|p| p.into_inner());
        let stranded = waiters.list.take_all();
        mark_unlinked(&stranded);
        waiters.device = Default::default();
        fire_all(
            stranded,
            Err(Error::new(
                ErrorKind::Cancelled,
                "semaphore dropped while timepoints were registered",
            )),
        );
        let p = self.failure.swap(ptr::null_mut(), Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: set once from `Box::into_raw`, freed once here.
            drop(unsafe { Box::from_raw(p) });
        }
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
