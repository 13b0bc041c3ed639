//! The queue's handle: construction, `submit` (validation, the submit
//! stack, the issue request), `issue`, `shutdown`, statistics.

use super::*;

/// The lock-free pending queue of one device queue, generic over its
/// [`Backend`]. See the [module docs](crate::queue) for the protocol.
pub struct PendingQueue<B: Backend> {
    shared: NonNull<QueueState<B>>,
}

// SAFETY: the handle only reaches the `Sync` shared state.
unsafe impl<B: Backend> Send for PendingQueue<B> {}
// SAFETY: as above.
unsafe impl<B: Backend> Sync for PendingQueue<B> {}

impl<B: Backend> fmt::Debug for PendingQueue<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingQueue").finish()
    }
}

impl<B: Backend> PendingQueue<B> {
    /// A queue issuing to `backend`.
    pub fn new(backend: B) -> Result<PendingQueue<B>, Error> {
        let size = mem::size_of::<Action<B>>()
            .max(mem::size_of::<crate::queue::action::Overflow>())
            .max(512);
        let pool = BlockPool::with_config(BlockPoolConfig {
            block_size: size.next_power_of_two(),
            align: mem::align_of::<Action<B>>().max(crate::prefetch::CACHE_LINE),
            // 256 actions up front: typical backlogs never grow the pool.
            first_chunk_blocks: if cfg!(fenceline_loom) { 4 } else { 256 },
            max_blocks: None,
        })?;
        let slots = backend.finish_lanes(Internal(()));
        let shared = Box::new(QueueState {
            backend,
            pool,
            incoming: TransferStack::new(),
            woken: TransferStack::new(),
            requests: CachePadded::new(AtomicUsize::new(0)),
            closed: AtomicBool::new(false),
            refs: CachePadded::new(AtomicUsize::new(1)),
            issuer: UnsafeCell::new(IssuerState {
                waiting: DList::new(),
                lend: true,
                credit: 0,
            }),
            // Pointed at the state's own pool once the state has its place.
            issuer_blocks: UnsafeCell::new(BlockCache::new(PoolRef(NonNull::dangling()))),
            examined: AtomicU64::new(0),
            taken_in: AtomicU64::new(0),
            waiting_now: AtomicU64::new(0),
            hand_offs: AtomicU64::new(0),
            finished: CachePadded::new(Finished::default()),
            finished_by_lane: (0..slots)
                .map(|_| CachePadded::new(Finished::default()))
                .collect(),
            finished_in_pass: Finished::default(),
            this: NonNull::dangling(),
        });
        let this = NonNull::from(Box::leak(shared));
        // SAFETY: just leaked, not shared yet.
        unsafe { (*this.as_ptr()).this = this };
        // SAFETY: just leaked, not shared yet.
        let pool = NonNull::from(unsafe { &(*this.as_ptr()).pool });
        // SAFETY: just leaked, not shared yet. (The dangling cache it
        // replaces is empty: dropping it touches no pool.)
        unsafe { (*this.as_ptr()).issuer_blocks = UnsafeCell::new(BlockCache::new(PoolRef(pool))) };
        liveness::born(this.as_ptr());
        Ok(PendingQueue { shared: this })
    }

    pub(super) fn shared(&self) -> &QueueState<B> {
        // SAFETY: the handle holds a reference until it drops.
        unsafe { self.shared.as_ref() }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.shared().backend
    }

    /// Submits an action: `payload` runs once every `(semaphore, value)` of
    /// `waits` is reached; then every `(semaphore, value)` of `signals` is
    /// signalled (or failed with the payload's error). No lock, and no
    /// allocation once the queue's pool is warm.
    ///
    /// Errors: `Cancelled` after [`shutdown`](Self::shutdown) (the signals
    /// are failed with it); `ResourceExhausted` if no memory.
    pub fn submit(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        payload: B::Payload,
    ) -> Result<(), Error> {
        check_values(waits, signals)?;
        let t = trace::now();
        let shared = self.shared();
        // Acquire: pairs with the Release store in `shutdown`; the flag
        // carries nothing else (a pass cancels what slips past it).
        if shared.closed.load(Ordering::Acquire) {
            let e = cancelled();
            for (s, _) in signals {
                s.fail(e.clone());
            }
            return Err(e);
        }
        // The state's own pointer (its allocation's provenance): the last
        // reference may be released, and the state freed, through it.
        let owner = shared.this.as_ptr().cast_const().cast::<()>();
        // The handle (borrowed for this call) keeps the state alive.
        let id;
        if shared.take_turn() {
            // The issuer now: the action's block comes from the issuer's
            // stash, and the action is handled at once, without the round
            // trip through the submit stack (its push and the pass's
            // `take_all`).
            // SAFETY: the turn is ours: only the issuer touches its state;
            // this borrow ends here.
            let lend = unsafe { shared.issuer_state() }.lend;
            let made = {
                // SAFETY: as above for the stash (the turn is ours), borrowed
                // one acquire or release at a time.
                let mut stash = unsafe { Stash::new(&shared.issuer_blocks) };
                // SAFETY: a lent action borrows the caller's semaphores,
                // which outlive this call, and `drain` keeps it (`settle`)
                // before returning if it did not finish inside.
                unsafe {
                    QueueAction::create(
                        &mut stash,
                        waits,
                        signals,
                        payload,
                        queue_wake::<B>,
                        owner,
                        lend,
                    )
                }
            };
            let action = match made {
                Ok(action) => action,
                Err(e) => {
                    // Give the turn back (serving requests made meanwhile).
                    shared.drain(1, None);
                    return Err(e);
                }
            };
            // Its reference (unless lent) is the issuer's to give, in
            // `drain`, before its handling can finish it.
            id = action.as_ptr() as u64;
            trace::flow_out(id);
            shared.drain_turn(1, Some(First::New(action, lend)), true);
        } else {
            // SAFETY: not lent.
            let action = unsafe {
                QueueAction::create(
                    &mut &shared.pool,
                    waits,
                    signals,
                    payload,
                    queue_wake::<B>,
                    owner,
                    false,
                )
            }?;
            id = action.as_ptr() as u64;
            trace::flow_out(id);
            // It takes no reference to the state: the issuer that takes it
            // in gives it one (`take_refs`). Until then the state outlives
            // it: the caller's handle does through this call, and whichever
            // pass serves the request below holds a reference of its own
            // (a handle's drop first runs a pass too: `shutdown`).
            // SAFETY: a new action, in no list, handed to the submit stack;
            // it stays allocated until it is finished.
            shared.incoming.push(unsafe { Handle::from_raw(action) });
            shared.request_issue();
        }
        trace::span(
            trace::Kind::Submit,
            t,
            id,
            shared.this.as_ptr() as u64,
            (waits.len() as u64) << 32 | signals.len() as u64,
        );
        Ok(())
    }

    /// Runs the drain protocol on this thread (for a backend's issuer
    /// thread, after [`Backend::wake_issuer`]).
    pub fn issue(&self) {
        self.shared().issue();
    }

    /// Cancels every pending action (their signals fail with `Cancelled`)
    /// and refuses new ones. Issued actions still complete. Idempotent;
    /// also done on drop.
    pub fn shutdown(&self) {
        let shared = self.shared();
        // Release: pairs with the Acquire loads of `closed` in `submit` and
        // drain.rs; the flag carries nothing else. The pass that cancels
        // is ordered after it by the request in `issue` below.
        shared.closed.store(true, Ordering::Release);
        shared.issue();
    }

    /// Actions submitted and not yet finished (issued ones included):
    /// [`stats`](Self::stats)' `in_flight`, exact when no issue pass is
    /// running.
    pub fn in_flight(&self) -> usize {
        usize::try_from(self.stats().in_flight).unwrap_or(usize::MAX)
    }

    /// The queue's action counts: cheap (a few atomic loads), lock-free,
    /// no allocation. Counts are exact once the queue is idle; a thread
    /// that saw an action's signal also sees that action counted as
    /// finished.
    pub fn stats(&self) -> QueueStats {
        let shared = self.shared();
        // Finished first, then taken in: every finished action was taken
        // in before, so `in_flight` never underflows. The Acquire loads pair
        // with the Release stores in `QueueState::add` (drain.rs); the shared
        // `finished` counter's Relaxed `fetch_add` (finish.rs) pairs with none.
        let count = |f: fn(&Finished) -> &AtomicU64| {
            f(&shared.finished).load(Ordering::Acquire)
                + f(&shared.finished_in_pass).load(Ordering::Acquire)
                + (shared.finished_by_lane.iter())
                    .map(|lane| f(lane).load(Ordering::Acquire))
                    .sum::<u64>()
        };
        let completed = count(|f| &f.completed);
        let failed = count(|f| &f.failed);
        let cancelled = count(|f| &f.cancelled);
        // Acquire: pairs with `add`'s Release stores (drain.rs), as above.
        let submitted = shared.taken_in.load(Ordering::Acquire);
        QueueStats {
            submitted,
            completed,
            failed,
            cancelled,
            in_flight: submitted.saturating_sub(completed + failed + cancelled),
            pending: shared.waiting_now.load(Ordering::Relaxed),
            issuer_hand_offs: shared.hand_offs.load(Ordering::Acquire),
        }
    }

    /// Actions examined by issue passes so far (each new or woken action
    /// counts once per pass that looks at it): proves a pass never rescans
    /// the backlog.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn actions_examined(&self) -> u64 {
        self.shared().examined.load(Ordering::Relaxed)
    }

    /// Blocks of the queue's action pool (device stats; allocation
    /// tests).
    pub(crate) fn pool_capacity(&self) -> usize {
        self.shared().pool.capacity()
    }
}

impl<B: Backend> Drop for PendingQueue<B> {
    fn drop(&mut self) {
        self.shutdown();
        // SAFETY: the handle's reference, given up once; the last holder
        // (this, or the last action to finish) frees the state.
        unsafe { QueueState::release(self.shared) };
    }
}

/// `u64::MAX` is the reserved failure value: a wait on it can never be met
/// and a signal of it would fail the semaphore. Rejected before anything
/// is touched.
#[inline]
pub(super) fn check_values(
    waits: &[(&Semaphore, u64)],
    signals: &[(&Semaphore, u64)],
) -> Result<(), Error> {
    let reserved = |(_, v): &(&Semaphore, u64)| *v == u64::MAX;
    if !waits.iter().any(reserved) && !signals.iter().any(reserved) {
        return Ok(());
    }
    reserved_value(waits, signals)
}

/// [`check_values`]' error, out of line (every submission checks, almost
/// none fails).
#[cold]
#[inline(never)]
pub(super) fn reserved_value(
    waits: &[(&Semaphore, u64)],
    signals: &[(&Semaphore, u64)],
) -> Result<(), Error> {
    let bad = |list: &[(&Semaphore, u64)]| list.iter().position(|(_, v)| *v == u64::MAX);
    if let Some(i) = bad(waits) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("wait {i} on value u64::MAX: the largest value is reserved for failure"),
        ));
    }
    if let Some(i) = bad(signals) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("signal {i} of value u64::MAX: the largest value is reserved for failure"),
        ));
    }
    Ok(())
}

pub(super) fn cancelled() -> Error {
    Error::new(
        ErrorKind::Cancelled,
        "the queue was shut down before the action ran",
    )
}
