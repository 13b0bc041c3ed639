//! `Scope`: counts a group of tasks, keeps the first error, waits for idle.

use std::fmt;
use std::ptr::NonNull;
use std::time::Instant;

use crate::error::Error;
use crate::semaphore::{Semaphore, Timeout};
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Arc, Mutex};

/// A group of tasks: how many are outstanding, the **first** error any of
/// them produced, and a way to wait until none is left.
///
/// Cheap to clone (a handle). While any of its tasks is outstanding the
/// scope's state stays alive even if every handle is dropped.
#[derive(Clone)]
pub struct Scope {
    pub(crate) inner: Arc<ScopeInner>,
}

pub(crate) struct ScopeInner {
    /// A reusable scope's place in its owner's free list (a device queue
    /// recycles one scope per submission).
    pub(crate) link: crate::list::SingleLinks<ScopeInner>,
    /// Whether its tasks are counted in `pending` (set at creation, never
    /// changed). A device's per-submission scope is not: the submission's
    /// final task already waits for every other one (joins), so nothing
    /// waits for the scope to go idle, and counting cost six RMWs per
    /// `execute` (enter with its reference, leave with the idle count,
    /// the idle signal and the reference's drop). Its tasks use it only for
    /// the first error, while the submission keeps it alive (its final
    /// task holds a handle); a retiring task never touches it.
    pub(crate) counted: bool,
    pending: AtomicUsize,
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    /// Times the scope went idle; `idle` is signalled to that count.
    idles: AtomicU64,
    idle: Semaphore,
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("pending", &self.pending())
            .field("failed", &self.inner.failed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for Scope {
    fn default() -> Self {
        Self::new()
    }
}

impl Scope {
    /// An empty scope.
    pub fn new() -> Scope {
        Scope::with_counting(true)
    }

    /// A scope whose tasks are not counted (`ScopeInner::counted`): its
    /// `pending` stays 0 and `wait_idle` does not wait. For a submission
    /// whose own final task joins every other task.
    pub(crate) fn uncounted() -> Scope {
        Scope::with_counting(false)
    }

    fn with_counting(counted: bool) -> Scope {
        Scope {
            inner: Arc::new(ScopeInner {
                link: crate::list::SingleLinks::new(),
                counted,
                pending: AtomicUsize::new(0),
                failed: AtomicBool::new(false),
                error: Mutex::new(None),
                idles: AtomicU64::new(0),
                idle: Semaphore::new(0),
            }),
        }
    }

    /// Tasks submitted in this scope and not yet retired (workers publish
    /// retirements in small batches, at the latest when they go idle).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::task::{Executor, ExecutorConfig, Scope};
    ///
    /// let exec = Executor::new(ExecutorConfig { workers: 1, ..Default::default() })?;
    /// let scope = Scope::new();
    /// let mut g = exec.graph(&scope);
    /// g.nop()?;
    /// g.nop()?;
    /// assert_eq!(scope.pending(), 0); // tasks count from `submit` on
    /// g.submit();
    /// scope.wait_idle(Duration::from_secs(5))?;
    /// assert_eq!(scope.pending(), 0);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn pending(&self) -> usize {
        // Acquire: pairs with the AcqRel decrements in `leave`.
        self.inner.pending.load(Ordering::Acquire)
    }

    /// The first error any task of the scope produced.
    pub fn error(&self) -> Option<Error> {
        self.inner.first_error()
    }

    /// Blocks until no task of the scope is outstanding, then returns the
    /// first error (if any task failed). Every task submitted before the
    /// call (and every task those spawn) has retired when it returns `Ok`
    /// or the scope's error; while other threads keep submitting to the
    /// scope, it returns at the first moment it finds none outstanding.
    ///
    /// # Errors
    ///
    /// - The scope's first error, as its task failed with it (a panic
    ///   becomes [`Internal`](crate::ErrorKind::Internal)), until
    ///   [`take_error`](Self::take_error) takes it out.
    /// - [`DeadlineExceeded`](crate::ErrorKind::DeadlineExceeded) if tasks
    ///   are still outstanding when `timeout` elapses.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::task::{Executor, ExecutorConfig, Scope};
    /// use fenceline::{Error, ErrorKind};
    ///
    /// let exec = Executor::new(ExecutorConfig { workers: 2, ..Default::default() })?;
    /// let scope = Scope::new();
    /// let mut g = exec.graph(&scope);
    /// g.call(|_| Ok(()))?;
    /// g.call(|_| Err(Error::new(ErrorKind::InvalidArgument, "bad input")))?;
    /// g.submit();
    /// let e = scope.wait_idle(Duration::from_secs(5)).unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    /// assert_eq!(scope.pending(), 0); // every task retired
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn wait_idle(&self, timeout: impl Into<Timeout>) -> Result<(), Error> {
        let inner = &*self.inner;
        let timeout = timeout.into();
        let deadline = match timeout {
            Timeout::After(_) => timeout.deadline_from(Instant::now()),
            Timeout::Immediate | Timeout::Never => None,
        };
        // Idle only when the pending count reads zero: a wake-up of the
        // idle semaphore may come from an earlier idle transition, whose
        // retirement took the count to zero (seen by an earlier call) but
        // bumped `idles` only after this call read it (loom model
        // `a_reused_scope_is_idle_only_after_its_second_submission_ran`).
        loop {
            // Read the idle count before the pending count: if the scope
            // goes idle after our check, the count passes `seen` by then.
            // Acquire (both): pairs with the AcqRel RMWs in `leave`; a zero
            // count means the retired tasks' effects happen-before.
            let seen = inner.idles.load(Ordering::Acquire);
            if inner.pending.load(Ordering::Acquire) == 0 {
                break;
            }
            let left = deadline.map_or(timeout, |d| {
                Timeout::After(d.saturating_duration_since(Instant::now()))
            });
            inner.idle.wait(seen + 1, left)?;
        }
        match self.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Takes the first error out, so the scope can be reused for unrelated
    /// work (a device reuses scopes across submissions). Without a
    /// recorded error this takes no lock.
    pub fn take_error(&self) -> Option<Error> {
        // Acquire and Release: pair with `record`'s store and the loads in
        // `first_error`; the error itself is under the lock, the flag a hint.
        if !self.inner.failed.load(Ordering::Acquire) {
            return None;
        }
        let mut slot = self.inner.lock_error();
        self.inner.failed.store(false, Ordering::Release);
        slot.take()
    }

    /// Keeps `error` as the scope's error if it is the first one (tasks do
    /// this when they fail; callers may too).
    pub fn fail(&self, error: Error) {
        self.inner.record(error);
    }

    /// The scope's state, with the `Arc`'s own provenance (the last task
    /// may free it through this pointer, see `leave`).
    pub(crate) fn as_ptr(&self) -> NonNull<ScopeInner> {
        // SAFETY: an `Arc`'s pointer is never null.
        unsafe { NonNull::new_unchecked(Arc::as_ptr(&self.inner).cast_mut()) }
    }
}

impl ScopeInner {
    fn lock_error(&self) -> crate::sync::MutexGuard<'_, Option<Error>> {
        self.error.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first error, if any.
    pub(crate) fn first_error(&self) -> Option<Error> {
        // Acquire: pairs with `record`'s Release store (the error itself is
        // read under the lock).
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.lock_error().clone()
    }

    /// Keeps `error` if it is the scope's first.
    pub(crate) fn record(&self, error: Error) {
        let mut slot = self.lock_error();
        if slot.is_none() {
            *slot = Some(error);
            // Release: pairs with the Acquire loads in `first_error` and
            // `take_error`.
            self.failed.store(true, Ordering::Release);
        }
    }

    /// `n` more outstanding tasks. Going from idle takes a reference that
    /// keeps the scope alive until it is idle again.
    ///
    /// # Safety
    /// `this` points to a live scope (the caller holds a handle or an
    /// outstanding task of it).
    pub(crate) unsafe fn enter(this: NonNull<ScopeInner>, scope: &Scope, n: usize) {
        // SAFETY: live per contract.
        let inner = unsafe { this.as_ref() };
        // AcqRel: pairs with `leave`'s AcqRel decrements (an entry from 0
        // follows the last busy stretch's) and the Acquire loads of `pending`.
        if inner.counted && inner.pending.fetch_add(n, Ordering::AcqRel) == 0 {
            let _ = Arc::into_raw(scope.inner.clone());
        }
    }

    /// Like `enter`, from a task of the scope (which keeps it alive).
    pub(crate) fn enter_from_task(&self) {
        if !self.counted {
            return;
        }
        // AcqRel: pairs with the same as in `enter`.
        let before = self.pending.fetch_add(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a running task keeps its scope non-idle");
    }

    /// `n` counted tasks retired (workers batch their decrements; the
    /// increments are never delayed, so the count never drops below the
    /// truth). Reaching zero signals idle and drops the reference `enter`
    /// took.
    ///
    /// # Safety
    /// `this` is live and counted, and the caller retires `n` tasks it
    /// counted.
    pub(crate) unsafe fn leave(this: NonNull<ScopeInner>, n: usize) {
        // SAFETY: our outstanding tasks keep the scope alive until here.
        let inner = unsafe { this.as_ref() };
        // AcqRel: the Release pairs with the Acquire loads in `pending` and
        // `wait_idle` (our retirements before), the Acquire with the other
        // decrements. `idles`' RMW below pairs with `wait_idle`'s load.
        if inner.pending.fetch_sub(n, Ordering::AcqRel) == n {
            let n = inner.idles.fetch_add(1, Ordering::AcqRel) + 1;
            // Two idle transitions may race to signal; the later value
            // covers the earlier, so a value already reached is no error
            // (and builds none: an `Error` would be two allocations).
            let _ = inner.idle.signal_at_least(n);
            // SAFETY: the reference forgotten by the 0 -> 1 `enter`.
            drop(unsafe { Arc::from_raw(this.as_ptr().cast_const()) });
        }
    }
}

link!(
    /// A scope's place in a free list of reusable scopes.
    pub(crate) ScopeLink: SingleLinks<ScopeInner> => link
);

impl Scope {
    /// The scope as a handle for a free list, keeping its reference.
    pub(crate) fn into_handle(self) -> crate::list::Handle<ScopeLink> {
        let ptr = Arc::into_raw(self.inner).cast_mut();
        // SAFETY: `Arc::into_raw` is never null.
        let ptr = unsafe { NonNull::new_unchecked(ptr) };
        // SAFETY: the reference `into_raw` keeps keeps the state alive and
        // in place until `from_handle`; a scope handed over by value is in
        // no free list.
        unsafe { crate::list::Handle::from_raw(ptr) }
    }

    /// The scope a free list held, with its reference.
    pub(crate) fn from_handle(handle: crate::list::Handle<ScopeLink>) -> Scope {
        Scope {
            // SAFETY: made by `into_handle` from an `Arc`, taken back once.
            inner: unsafe { Arc::from_raw(handle.into_raw().as_ptr().cast_const()) },
        }
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::*;

    /// Two idle transitions race (workers publish retirements in
    /// batches): the later one may signal `idle` first, and the earlier
    /// one's lower value is then already reached. That is no error, and
    /// builds none: an `Error` (its message and its `Arc`) was two
    /// allocations on a worker in steady state, which
    /// `trace_allocates_nothing` caught once in CI (a device's host calls
    /// count in a scope). Fails with `signal` for `signal_at_least` in
    /// `leave`.
    #[test]
    fn an_idle_signal_overtaken_by_a_later_one_allocates_nothing() {
        let scope = Scope::new();
        let this = NonNull::from(&*scope.inner);
        // SAFETY: `scope` is a live handle.
        unsafe { ScopeInner::enter(this, &scope, 1) };
        assert_eq!(Arc::strong_count(&scope.inner), 2);
        // The next transition's signal, come first.
        scope.inner.idle.signal(2).unwrap();
        let allocated = crate::test_alloc::on_this_thread(|| {
            // SAFETY: live (our handle); the task `enter` counted retires.
            unsafe { ScopeInner::leave(this, 1) }
        });
        assert_eq!(allocated, 0);
        assert_eq!(scope.inner.idle.query().unwrap(), 2);
        assert_eq!(scope.pending(), 0);
        assert_eq!(Arc::strong_count(&scope.inner), 1);
    }
}
