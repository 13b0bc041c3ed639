//! `PendingQueue`: submit, the issue drain protocol, completion, shutdown.
//! The invariants are listed in the [module docs](super).

use std::fmt;
use std::mem;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use super::action::{QueueAction, SubmitLink, WaitingLink, DEVICE_WAITS, DONE, KEPT, LENT, OWNED};
use super::backend::{Backend, Completion, IssueTurn};
use crate::error::{Error, ErrorKind};
use crate::list::{DList, Handle, TransferStack};
use crate::pool::{BlockCache, BlockPool, BlockPoolConfig, BlockSource, RawBlock};
use crate::semaphore::{Registration, Semaphore, Timepoint};
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{liveness, UnsafeCell};
use crate::trace;
use crate::unwind::{panic_error, FirstPanic};

/// Flow ids of "a signal readied this action" (the action's address with
/// the top bit flipped, apart from its submission's flow).
const READIED: u64 = 1 << 63;

/// How many of the actions after a woken one in the queue's waiting list
/// its handling starts fetching (`QueueAction::prefetch`). In a chain over
/// two queues the next one in the list is woken two hops later. On a hop
/// whose actions another core wrote, one ahead cut the time by about a
/// fifth, two ahead by a fifth to a third (ARCHITECTURE.md, A hop's lines
/// fetched ahead).
const PREFETCH_WAITING: usize = 2;

/// How many passes of other threads' requests the thread that took a
/// queue's issuer turn runs, after its own action, before it offers the
/// turn to the backend ([`Backend::hand_off_turn`]) if requests keep
/// coming: what bounds a `submit` or a `signal` under a steady stream of
/// submissions from other threads.
pub const ISSUE_PASSES_BEFORE_HAND_OFF: u32 = 1;

type Action<B> = QueueAction<<B as Backend>::Payload>;

/// State shared by the queue handle, its actions and their callbacks.
pub(crate) struct QueueState<B: Backend> {
    backend: B,
    pool: BlockPool,
    /// Submitted, not yet looked at.
    incoming: TransferStack<SubmitLink<B::Payload>>,
    /// Pending actions whose timepoint fired.
    woken: TransferStack<SubmitLink<B::Payload>>,
    /// Issue requests; whoever raises it from 0 is the issuer.
    requests: CachePadded<AtomicUsize>,
    closed: AtomicBool,
    /// References: the handle's, one per action taken in and not
    /// finished, one per running `issue` (and handed-off turn), and the
    /// issuer's credit (taken ahead, see `take_refs`); the last release
    /// frees the state.
    refs: CachePadded<AtomicUsize>,
    /// Only the issuer touches this (the drain protocol excludes others).
    issuer: UnsafeCell<IssuerState<B::Payload>>,
    /// The issuer's stash of action blocks (the issuer only, borrowed for
    /// one acquire or release at a time: a completion inside a pass gives
    /// its block back here while the pass holds `issuer`): an action made
    /// and finished under the issuer's turn costs no RMW on the pool.
    issuer_blocks: UnsafeCell<BlockCache<PoolRef>>,
    /// Actions examined by passes (a cost counter for tests).
    examined: AtomicU64,
    /// Written by the issuer only (a load and a store, no RMW): new
    /// actions it took in, and actions in its waiting list.
    taken_in: AtomicU64,
    waiting_now: AtomicU64,
    /// Turns handed to the backend, counted when the new holder takes it
    /// up (the issuer only).
    hand_offs: AtomicU64,
    /// Finished actions by outcome, counted (one RMW) before their signals
    /// are made, so a thread that sees a signal sees the count.
    finished: CachePadded<Finished>,
    /// The same, counted by the threads the backend gives a slot of their
    /// own (`Backend::finish_slot`: a CPU device's workers), each with a
    /// load and a store.
    finished_by_slot: Box<[CachePadded<Finished>]>,
    /// The same, for actions finished inside a pass of this queue (a
    /// backend completing in `issue`, a cancel, a failure): written by the
    /// issuer only, with a load and a store.
    finished_in_pass: Finished,
    /// This state's own address, with the provenance of its allocation:
    /// what references are released (and the state freed) through.
    this: NonNull<QueueState<B>>,
}

/// The issuer's stash, borrowed only inside each acquire and release,
/// never across them: `QueueAction::destroy` drops the payload (user code,
/// which may finish another action of the same queue on this thread, in
/// the same pass, and free its blocks into the same stash) between its
/// releases.
struct Stash<'a>(&'a UnsafeCell<BlockCache<PoolRef>>);

impl Stash<'_> {
    /// # Safety
    /// Only the calling thread uses the stash while this lives (it is the
    /// issuer: holds the turn, or runs inside its pass on its thread),
    /// borrowing it one operation at a time.
    unsafe fn new(cell: &UnsafeCell<BlockCache<PoolRef>>) -> Stash<'_> {
        Stash(cell)
    }
}

impl BlockSource for Stash<'_> {
    #[inline]
    fn acquire(&mut self) -> Result<RawBlock, Error> {
        // SAFETY: exclusive per `new`'s contract, for this call only (no
        // user code runs inside).
        self.0.with_mut(|c| unsafe { (*c).acquire() })
    }

    #[inline]
    unsafe fn release(&mut self, block: RawBlock) {
        // SAFETY: as in `acquire`; the block's contract is forwarded.
        self.0.with_mut(|c| unsafe { (*c).release(block) })
    }
}

/// Finished actions by outcome.
#[derive(Default)]
struct Finished {
    completed: AtomicU64,
    failed: AtomicU64,
    cancelled: AtomicU64,
}

/// A queue's action counts at one moment (see [`PendingQueue::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Actions the queue took in (counted when its issuer first looks at
    /// them, so a submission still on its way in is not counted yet).
    pub submitted: u64,
    /// Actions finished successfully.
    pub completed: u64,
    /// Actions finished with an error other than `Cancelled`.
    pub failed: u64,
    /// Actions finished with `Cancelled` (shutdown).
    pub cancelled: u64,
    /// Taken in and not finished: `submitted - completed - failed -
    /// cancelled`.
    pub in_flight: u64,
    /// Of those, actions waiting on a semaphore (not yet issued).
    pub pending: u64,
    /// Times the thread holding the issuer turn handed it to the backend
    /// ([`Backend::hand_off_turn`]) instead of serving other threads'
    /// requests on (counted once the backend's thread takes it up).
    pub issuer_hand_offs: u64,
}

/// The queue's pool, reached from the issuer's cache beside it in the same
/// state (which outlives the cache: the state's `Drop` flushes it first).
struct PoolRef(NonNull<BlockPool>);

impl std::ops::Deref for PoolRef {
    type Target = BlockPool;

    fn deref(&self) -> &BlockPool {
        // SAFETY: points at the pool of the state that holds this cache,
        // alive for as long as the cache (see `PoolRef`).
        unsafe { self.0.as_ref() }
    }
}

/// What only the issuer touches.
struct IssuerState<P> {
    /// Actions waiting on a semaphore (each armed on a timepoint): looked
    /// at again only when that timepoint fires, or at shutdown.
    waiting: DList<WaitingLink<P>>,
    /// Whether the next direct submission is made lent (`LENT`): the last
    /// one finished inside its `submit` (a backend that completes in
    /// `issue`). One that escaped turns it off, so a backend that always
    /// completes later pays nothing for the guess after its first action.
    lend: bool,
    /// References to the state the issuer took ahead (counted in `refs`),
    /// one given to each action it takes in: the submitters take none,
    /// and the issuer one RMW per [`REF_CREDIT`] actions. Given back by
    /// the first drain that ends after the queue closed.
    credit: usize,
}

/// How many references to its state the issuer takes at a time for the
/// actions it takes in (see `IssuerState::credit`).
const REF_CREDIT: usize = 64;

// SAFETY: actions move between threads with their ownership; the issuer
// state is only touched by the single issuer (drain protocol); the rest is
// atomic or `Sync`.
unsafe impl<B: Backend> Send for QueueState<B> {}
// SAFETY: as above.
unsafe impl<B: Backend> Sync for QueueState<B> {}

/// The lock-free pending queue of one device queue, generic over its
/// [`Backend`]. See the [module docs](super) for the protocol.
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
            .max(mem::size_of::<super::action::Overflow>())
            .max(512);
        let pool = BlockPool::with_config(BlockPoolConfig {
            block_size: size.next_power_of_two(),
            align: mem::align_of::<Action<B>>().max(64),
            // 256 actions up front: typical backlogs never grow the pool.
            first_chunk_blocks: if cfg!(fenceline_loom) { 4 } else { 256 },
            max_blocks: None,
        })?;
        let slots = backend.finish_slots();
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
            finished_by_slot: (0..slots)
                .map(|_| CachePadded::new(Finished::default()))
                .collect(),
            finished_in_pass: Finished::default(),
            this: NonNull::dangling(),
        });
        let this = NonNull::from(Box::leak(shared));
        // SAFETY: just leaked, not shared yet. (The dangling cache it
        // replaces is empty: dropping it touches no pool.)
        unsafe {
            (*this.as_ptr()).this = this;
            let pool = NonNull::from(&(*this.as_ptr()).pool);
            (*this.as_ptr()).issuer_blocks = UnsafeCell::new(BlockCache::new(PoolRef(pool)));
        }
        liveness::born(this.as_ptr());
        Ok(PendingQueue { shared: this })
    }

    fn shared(&self) -> &QueueState<B> {
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
            // SAFETY: as above for the stash, borrowed one acquire or
            // release at a time. A lent action borrows the caller's
            // semaphores, which outlive this call, and `drain` keeps it
            // (`settle`) before returning if it did not finish inside.
            let made = unsafe {
                QueueAction::create(
                    &mut Stash::new(&shared.issuer_blocks),
                    waits,
                    signals,
                    payload,
                    queue_wake::<B>,
                    owner,
                    lend,
                )
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
        // in before, so `in_flight` never underflows.
        let count = |f: fn(&Finished) -> &AtomicU64| {
            f(&shared.finished).load(Ordering::Acquire)
                + f(&shared.finished_in_pass).load(Ordering::Acquire)
                + (shared.finished_by_slot.iter())
                    .map(|slot| f(slot).load(Ordering::Acquire))
                    .sum::<u64>()
        };
        let completed = count(|f| &f.completed);
        let failed = count(|f| &f.failed);
        let cancelled = count(|f| &f.cancelled);
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
    #[doc(hidden)]
    pub fn actions_examined(&self) -> u64 {
        self.shared().examined.load(Ordering::Relaxed)
    }

    /// Blocks of the queue's action pool (for allocation tests).
    #[doc(hidden)]
    pub fn pool_capacity(&self) -> usize {
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

#[cfg(not(fenceline_loom))]
std::thread_local! {
    static PASS_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// The queue state whose issue pass this thread runs now (innermost).
    static ISSUING: std::cell::Cell<*const ()> = const { std::cell::Cell::new(std::ptr::null()) };
    /// The action this thread's `submit` is handling first in its own
    /// pass (innermost), until a finish here clears it.
    static DIRECT: std::cell::Cell<*const ()> = const { std::cell::Cell::new(std::ptr::null()) };
    /// The queue state a `finish` on this thread keeps alive while it
    /// signals (innermost; see `Signalling`).
    static HELD: std::cell::Cell<*const ()> = const { std::cell::Cell::new(std::ptr::null()) };
}
#[cfg(fenceline_loom)]
loom::thread_local! {
    static PASS_DEPTH: std::cell::Cell<u32> = std::cell::Cell::new(0);
    static ISSUING: std::cell::Cell<*const ()> = std::cell::Cell::new(std::ptr::null());
    static DIRECT: std::cell::Cell<*const ()> = std::cell::Cell::new(std::ptr::null());
    static HELD: std::cell::Cell<*const ()> = std::cell::Cell::new(std::ptr::null());
}

/// Marks the calling thread as signalling for a finished action of the
/// queue `queue`, whose state the finish keeps alive until after this is
/// dropped (also when unwinding): a wake-up of another action of that
/// queue on this thread, inside those signals, needs no reference of its
/// own (`queue_wake`).
struct Signalling {
    outer: *const (),
}

impl Signalling {
    #[inline]
    fn enter(queue: *const ()) -> Signalling {
        Signalling {
            outer: HELD.with(|h| h.replace(queue)),
        }
    }
}

impl Drop for Signalling {
    fn drop(&mut self) {
        HELD.with(|h| h.set(self.outer));
    }
}

/// Marks the calling thread as running an issue pass of the queue `queue`
/// (nested passes of other queues included) until dropped, even when
/// unwinding.
struct PassDepth {
    outer: *const (),
}

impl PassDepth {
    #[inline]
    fn enter(queue: *const ()) -> PassDepth {
        PASS_DEPTH.with(|d| d.set(d.get() + 1));
        PassDepth {
            outer: ISSUING.with(|q| q.replace(queue)),
        }
    }
}

impl Drop for PassDepth {
    fn drop(&mut self) {
        ISSUING.with(|q| q.set(self.outer));
        PASS_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// Whether the calling thread runs `queue`'s issue pass right now (so it
/// holds that queue's turn: the pass is inside `drain`, which runs only
/// under the turn, and a nested pass of another queue is a different
/// value until it returns).
#[inline]
fn issuing(queue: *const ()) -> bool {
    ISSUING.with(|q| q.get() == queue)
}

/// Whether the calling thread is inside some queue's issue pass: a device
/// whose last handle is dropped there (a cancelled action's captures, on
/// the thread whose signal ran the pass) must not wait for its queues to
/// drain, since this very pass holds one of them.
pub(crate) fn in_issue_pass() -> bool {
    PASS_DEPTH.with(|d| d.get() > 0)
}

/// `u64::MAX` is the reserved failure value: a wait on it can never be met
/// and a signal of it would fail the semaphore. Rejected before anything
/// is touched.
#[inline]
fn check_values(waits: &[(&Semaphore, u64)], signals: &[(&Semaphore, u64)]) -> Result<(), Error> {
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
fn reserved_value(waits: &[(&Semaphore, u64)], signals: &[(&Semaphore, u64)]) -> Result<(), Error> {
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

fn cancelled() -> Error {
    Error::new(
        ErrorKind::Cancelled,
        "the queue was shut down before the action ran",
    )
}

/// Timepoint callback of a pending action: hand it back to the issuer.
///
/// # Safety
/// `tp` is the timepoint of a live `Action<B>` whose owner is a `QueueState<B>`.
unsafe fn queue_wake<B: Backend>(tp: NonNull<Timepoint>, _result: Result<(), Error>) {
    // SAFETY: the context is the action, the owner its live queue (the
    // action holds a reference to it).
    let action =
        unsafe { NonNull::new_unchecked(tp.as_ref().context().cast_mut().cast::<Action<B>>()) };
    // SAFETY: as above.
    let this = unsafe {
        NonNull::new_unchecked((*action.as_ptr()).owner.cast_mut().cast::<QueueState<B>>())
    };
    // SAFETY: the action's reference keeps the state alive until the push.
    let shared = unsafe { this.as_ref() };
    // Hold our own reference across the hand-off and the issue request:
    // once the action is on the woken stack, a pass (a shutdown's, on
    // another thread) may finish it, and with it the last reference. The
    // guard gives it up even if the pass panics out of `request_issue`.
    // Not needed when this wake-up comes from the signals of a `finish`
    // of this same queue on this thread (a chain on one queue): that
    // finish gives its action's reference up only after its signals,
    // hence after this call returns.
    let mine = HELD.with(|h| h.get()) == this.as_ptr().cast_const().cast::<()>();
    let _held = (!mine).then(|| Reference::take(this));
    trace::flow_out(action.as_ptr() as u64 ^ READIED);
    // No pass running and this thread may issue: take the turn and handle
    // the action at once, as a direct submission does (no push on the
    // woken stack, no `take_all`s unless a request comes in meanwhile).
    if shared.take_turn() {
        liveness::check(shared, "a queue's state (woken directly)");
        shared.drain(1, Some(First::Woken(action)));
        return;
    }
    // SAFETY: the fired timepoint gave us the action (its submit link is
    // free: an armed action is on no stack); the stack takes it.
    shared.woken.push(unsafe { Handle::from_raw(action) });
    shared.request_issue();
}

/// What a drain handles before its first pass: an action its caller
/// already holds, with no round trip through a stack.
enum First<B: Backend> {
    /// A submitter's new action (`true`: made lent).
    New(NonNull<Action<B>>, bool),
    /// An armed action whose waits were just met (its timepoint fired on
    /// this thread).
    Woken(NonNull<Action<B>>),
}

/// One counted reference to a queue's state, given up when dropped (also
/// while unwinding).
struct Reference<B: Backend>(NonNull<QueueState<B>>);

impl<B: Backend> Reference<B> {
    /// Takes a new reference to `this`, which the caller keeps alive until
    /// this returns (it holds a reference itself).
    fn take(this: NonNull<QueueState<B>>) -> Reference<B> {
        // SAFETY: alive per contract.
        unsafe { this.as_ref() }
            .refs
            .fetch_add(1, Ordering::Relaxed);
        Reference(this)
    }
}

impl<B: Backend> Drop for Reference<B> {
    fn drop(&mut self) {
        // SAFETY: the reference taken in `take`, given up once.
        unsafe { QueueState::release(self.0) };
    }
}

enum Class {
    Ready,
    Waiting,
    Failed(Error),
}

impl<B: Backend> QueueState<B> {
    /// Drops one reference; the last frees the state.
    ///
    /// # Safety
    /// The caller owns one reference.
    unsafe fn release(this: NonNull<QueueState<B>>) {
        // SAFETY: our reference keeps it alive until here.
        if unsafe { this.as_ref() }.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            liveness::died(this.as_ptr());
            // SAFETY: the last reference: nothing else can reach it.
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }

    /// Asks for an issue pass: runs it here if this thread may, else wakes
    /// the backend's issuer. The caller holds a reference (a handle, an
    /// action it owns, or one taken for the call).
    fn request_issue(&self) {
        if self.backend.can_issue_inline() {
            self.issue();
        } else {
            self.backend.wake_issuer();
        }
    }

    /// The drain protocol. The caller holds a reference across the call
    /// (the last action may finish during a pass after the handle is gone).
    ///
    /// Unwind-safe: a panic out of a pass (a timepoint callback that
    /// panicked while an action signalled) is caught; the issuer finishes
    /// the drain (so later requests are served) and then resumes the first
    /// panic on this thread.
    fn issue(&self) {
        // AcqRel: acquire what requesters published before bumping;
        // release our own pushes to the issuer we may hand over to.
        let seen = self.requests.fetch_add(1, Ordering::AcqRel) + 1;
        // After the first access: the model checker may run another thread
        // (one that frees the state) just before it.
        liveness::check(self, "a queue's state (issue requested)");
        if seen == 1 {
            self.drain(seen, None);
        }
    }

    /// A submission's shortcut: when no pass is running and this thread
    /// may issue, take the issuer's turn (0 to 1); the submitter then makes
    /// its action from the issuer's stash and hands it to `drain` as its
    /// first, without the round trip through the submit stack (its push
    /// and the pass's `take_all`). `false`: the turn is taken (or issuing
    /// here is not allowed); the caller pushes the action and requests an
    /// issue instead. New actions have no order among themselves (a queue
    /// orders only through semaphores), so handling this one before older
    /// ones still on the stack is allowed.
    fn take_turn(&self) -> bool {
        if !self.backend.can_issue_inline() || self.requests.load(Ordering::Relaxed) != 0 {
            return false;
        }
        // AcqRel: acquire the previous issuer's release of the turn (its
        // writes to the issuer state); release is for symmetry with
        // `issue`'s bump.
        self.requests
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// After a direct submission's first handling: learns whether it
    /// finished inside (the next one is made lent) or escaped; a lent one
    /// that escaped gets references of its own now (`KEPT`), before its
    /// submitter returns and its caller's handles may go, unless a finish
    /// on another thread got there first (`DONE`): then it is freed here.
    ///
    /// # Safety
    /// The caller is the issuer, inside the `submit` that made `action`
    /// (`lent`: made `LENT`); `escaped`: it did not finish on this thread.
    #[inline(always)]
    unsafe fn settle(
        &self,
        issuer: &mut IssuerState<B::Payload>,
        action: NonNull<Action<B>>,
        lent: bool,
        escaped: bool,
    ) {
        issuer.lend = !escaped;
        // Otherwise finished and freed here, or owned (then it may be
        // finished and freed on another thread by now: not touched).
        if escaped && lent {
            // SAFETY: forwarded contract.
            unsafe { self.keep_escaped(issuer, action) };
        }
    }

    /// `settle` for a lent action that escaped (out of line: the common
    /// direct submission finishes inside).
    ///
    /// # Safety
    /// As `settle`, for a lent action that escaped.
    #[cold]
    #[inline(never)]
    unsafe fn keep_escaped(
        &self,
        issuer: &mut IssuerState<B::Payload>,
        action: NonNull<Action<B>>,
    ) {
        // SAFETY: a lent action is freed by its submitter unless it was
        // kept first, so it is alive until below. (Its state alone: the
        // backend may be using the rest of it on another thread.)
        let state = unsafe { QueueAction::lent_state(action) };
        if state.load(Ordering::Acquire) == DONE {
            // Finished elsewhere (its signals made, counted) with our
            // handles: nothing was taken, nothing to give back.
            // SAFETY: ours now; the issuer's stash, this thread's alone.
            unsafe { QueueAction::destroy(action, &mut Stash::new(&self.issuer_blocks), false) };
            return;
        }
        // SAFETY: `LENT`, and we are inside its `submit`.
        unsafe { QueueAction::keep_entries(action) };
        self.take_refs(issuer, 1);
        // Release: a finisher that reads `KEPT` sees the references.
        if state.swap(KEPT, Ordering::AcqRel) == DONE {
            // Finished meanwhile: free it with the references just taken.
            // SAFETY: as above; the caller's handle keeps the state alive
            // past the release.
            unsafe {
                QueueAction::destroy(action, &mut Stash::new(&self.issuer_blocks), true);
                QueueState::release(self.this);
            }
        }
    }

    /// Continues a drain whose turn was handed off ([`IssueTurn`]), then
    /// gives up the turn's reference.
    ///
    /// # Safety
    /// The caller holds `this`'s issuer turn (handed over to it, ordered
    /// after the previous holder's last pass) and one reference, which
    /// this gives up.
    pub(crate) unsafe fn resume_turn(this: NonNull<QueueState<B>>) {
        // SAFETY: the turn's reference keeps the state alive until the
        // release.
        let shared = unsafe { this.as_ref() };
        // The release makes the reference go even if a pass unwinds.
        let _reference = Reference(this);
        // The turn is held (the counter was never swung back), so this is
        // at least 1. Acquire: every request counted here published its
        // push before (the requesters' `fetch_add` release, in the
        // counter's release sequence), so the first pass sees it.
        let seen = shared.requests.load(Ordering::Acquire);
        // Counted by the turn's new holder (the issuer writes it alone).
        Self::add(&shared.hand_offs, 1);
        shared.drain_turn(seen, None, false);
    }

    /// Runs passes as the issuer until the turn is given back with no
    /// request left; `first`, an action the caller holds (a new one, or one
    /// just woken), is handled before the first pass. Not inlined: its
    /// callers share this copy (a direct submission inlines `drain_turn`).
    #[inline(never)]
    fn drain(&self, seen: usize, first: Option<First<B>>) {
        self.drain_turn(seen, first, true);
    }

    /// `drain`; `may_hand_off`: after its own action and
    /// [`ISSUE_PASSES_BEFORE_HAND_OFF`] passes with requests still coming,
    /// the turn is offered to the backend (once, if it wants it here), and
    /// if it takes it this returns without giving the turn back: the
    /// backend's thread drains on.
    ///
    /// Inlined into a direct submission (see [`PendingQueue::submit`]):
    /// the call and the loop's prologue were a measurable part of it.
    #[inline(always)]
    fn drain_turn(&self, mut seen: usize, mut first: Option<First<B>>, mut may_hand_off: bool) {
        let _pass = PassDepth::enter(self.this.as_ptr().cast_const().cast());
        let mut panicked = FirstPanic::default();
        let mut passes = 0;
        loop {
            // SAFETY: the counter went from 0 to 1 under us: we are the only
            // issuer until we swing it back to 0.
            let issuer = unsafe { self.issuer_state() };
            match first.take() {
                None => {
                    panicked.run(|| self.pass(issuer));
                    passes += 1;
                }
                Some(First::Woken(action)) => {
                    let closed = self.closed.load(Ordering::Acquire);
                    // SAFETY: its timepoint fired on this thread, which
                    // handed it here: armed, in `waiting`, on no stack.
                    panicked.run(|| unsafe { self.handle_woken(issuer, action, closed) });
                    self.add_examined(1);
                }
                Some(First::New(action, lent)) => {
                    let closed = self.closed.load(Ordering::Acquire);
                    if !lent {
                        // Before its handling, which may finish it.
                        self.take_refs(issuer, 1);
                    }
                    Self::add(&self.taken_in, 1);
                    let id = action.as_ptr().cast_const().cast::<()>();
                    let outer = DIRECT.with(|d| d.replace(id));
                    panicked.run(|| self.handle(issuer, action, closed));
                    // A finish on this thread meanwhile cleared it.
                    let escaped = DIRECT.with(|d| d.replace(outer)) == id;
                    // SAFETY: the submitter's action, handled just above;
                    // the caller (its `submit`) is still inside.
                    unsafe { self.settle(issuer, action, lent, escaped) };
                    self.add_examined(1);
                }
            }
            // The caller's reference keeps the state alive to here (a
            // use after free fails a loom model).
            liveness::check(self, "a queue's state (turn given back)");
            // SAFETY: the turn is still ours; the borrow ends here.
            self.return_credit_if_closed(unsafe { self.issuer_state() });
            match self
                .requests
                .compare_exchange(seen, 0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => seen = now,
            }
            if may_hand_off && passes >= ISSUE_PASSES_BEFORE_HAND_OFF {
                may_hand_off = false;
                if !self.backend.wants_turn() {
                    continue;
                }
                // The token's reference: the caller's may go as soon as we
                // return, and the new holder drains after that.
                self.refs.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the turn is ours (the counter is not 0, and only
                // we swing it back); the token takes it and the reference.
                let turn = unsafe { IssueTurn::new(self.this) };
                match self.backend.hand_off_turn(turn) {
                    // The turn is the backend's now: no pass of ours after
                    // this, and the counter stays up for its holder.
                    Ok(()) => break,
                    Err(turn) => {
                        let this = turn.into_raw();
                        // SAFETY: the token's reference, taken above (ours
                        // keeps the state alive: not the last).
                        unsafe { QueueState::release(this) };
                    }
                }
            }
        }
        panicked.resume();
    }

    /// Takes a woken action out of `waiting` and handles it.
    ///
    /// # Safety
    /// The caller is the issuer; `action` was armed (so it is in
    /// `waiting`), its timepoint fired, and it is on no stack.
    unsafe fn handle_woken(
        &self,
        issuer: &mut IssuerState<B::Payload>,
        action: NonNull<Action<B>>,
        closed: bool,
    ) {
        // SAFETY: per contract, in `waiting`; the issuer's alone.
        unsafe {
            // The next actions waiting on this queue are likely the next
            // ones woken (a chain wakes its actions in order); their lines
            // were written by their submitter, maybe on another core: start
            // fetching the next two now, so that their own hops do not wait
            // for them (see ARCHITECTURE.md, A hop's lines fetched ahead).
            // (A successor of a linked node is linked in the same list.)
            // The last one's link is not read: it was not fetched yet, and
            // a load of it would wait for the whole miss (a fifth of
            // `drain_turn`'s samples when it did).
            let mut ahead = issuer.waiting.next(action);
            for i in 1..=PREFETCH_WAITING {
                let Some(next) = ahead else { break };
                QueueAction::prefetch(next);
                if i < PREFETCH_WAITING {
                    ahead = issuer.waiting.next(next);
                }
            }
            let _ = issuer.waiting.remove(action);
            (*action.as_ptr()).armed = false;
        }
        self.waiting_left();
        trace::flow_in(action.as_ptr() as u64 ^ READIED);
        trace::instant(
            trace::Kind::Ready,
            action.as_ptr() as u64,
            self.this.as_ptr() as u64,
            0,
        );
        self.handle(issuer, action, closed);
    }

    /// # Safety
    /// The caller is the issuer (drain protocol).
    #[allow(clippy::mut_from_ref)] // exclusive by the protocol, not by borrow
    unsafe fn issuer_state(&self) -> &mut IssuerState<B::Payload> {
        // SAFETY: forwarded contract: only the issuer gets here.
        self.issuer.with_mut(|p| unsafe { &mut *p })
    }

    /// One pass: woken actions (older), then new ones, in order.
    ///
    /// Each action is handled under its own unwind guard: a panic while
    /// handling one (its completion firing a panicking timepoint callback)
    /// never strands the others taken with it; the first panic is resumed
    /// once every taken action was handled.
    fn pass(&self, issuer: &mut IssuerState<B::Payload>) {
        let closed = self.closed.load(Ordering::Acquire);
        let mut examined = 0;
        let mut panicked = FirstPanic::default();
        let mut woken = self.woken.take_all();
        while let Some(action) = woken.pop_front().map(Handle::into_raw) {
            examined += 1;
            // SAFETY: a woken action was armed, hence in `waiting`, and is
            // off the stack now.
            panicked.run(|| unsafe { self.handle_woken(issuer, action, closed) });
        }
        let mut new = self.incoming.take_all();
        if !new.is_empty() {
            // Before any is handled (and may finish).
            self.take_refs(issuer, new.len());
            Self::add(&self.taken_in, new.len() as u64);
        }
        while let Some(action) = new.pop_front().map(Handle::into_raw) {
            examined += 1;
            panicked.run(|| self.handle(issuer, action, closed));
        }
        if closed {
            panicked.run(|| self.cancel_waiting(issuer));
        }
        if examined > 0 {
            self.add_examined(examined);
        }
        panicked.resume();
    }

    /// Hands out `n` references to the state, for actions the issuer takes
    /// in, from its credit, taking [`REF_CREDIT`] more ahead (one RMW) when
    /// it runs out; once the queue is closed, only what is missing.
    fn take_refs(&self, issuer: &mut IssuerState<B::Payload>, n: usize) {
        if issuer.credit < n {
            let ahead = if self.closed.load(Ordering::Acquire) {
                0
            } else {
                REF_CREDIT
            };
            let more = n - issuer.credit + ahead;
            self.refs.fetch_add(more, Ordering::Relaxed);
            issuer.credit += more;
        }
        issuer.credit -= n;
    }

    /// Gives the issuer's credit back once the queue is closed: the drain
    /// that ends after `shutdown` (a handle's drop runs one) leaves only
    /// the actions' own references, so the last one frees the state.
    /// Called under the turn before each attempt to give it back; the
    /// drain's caller holds a reference, so this is never the last.
    fn return_credit_if_closed(&self, issuer: &mut IssuerState<B::Payload>) {
        if issuer.credit > 0 && self.closed.load(Ordering::Acquire) {
            let credit = std::mem::take(&mut issuer.credit);
            let before = self.refs.fetch_sub(credit, Ordering::Release);
            debug_assert!(before > credit, "the drain's caller holds a reference");
        }
    }

    /// Counts actions examined; called by the issuer only.
    fn add_examined(&self, n: u64) {
        Self::add(&self.examined, n);
    }

    /// Adds to a counter only the issuer writes (one pass at a time): a
    /// load and a store, no RMW. Release: a reader that acquires it sees
    /// what the issuer did before.
    fn add(counter: &AtomicU64, n: u64) {
        let before = counter.load(Ordering::Relaxed);
        counter.store(before.wrapping_add(n), Ordering::Release);
    }

    /// Lowers the issuer's waiting count (the issuer only).
    fn waiting_left(&self) {
        Self::add(&self.waiting_now, u64::MAX);
    }

    fn handle(
        &self,
        issuer: &mut IssuerState<B::Payload>,
        action: NonNull<Action<B>>,
        closed: bool,
    ) {
        if closed {
            // SAFETY: the issuer owns the action; the caller of the pass
            // holds a reference, so the state outlives this call.
            unsafe { QueueState::finish(self.this, action, Err(cancelled()), false) };
            return;
        }
        // The backend and `device_wait` are user code (a custom `Backend`):
        // a panic there fails this action only.
        match catch_unwind(AssertUnwindSafe(|| self.classify(action))) {
            Ok(Class::Ready) => {
                let (t, id) = (trace::now(), action.as_ptr() as u64);
                trace::flow_in(id);
                // SAFETY: a ready action of this queue, taken out of the
                // waiting list; it holds a reference to `self`.
                let work = unsafe { Completion::new(action, self.this) };
                // A panicking `issue` drops the token while unwinding,
                // which fails the action (see `Completion`'s `Drop`).
                let _ = catch_unwind(AssertUnwindSafe(|| self.backend.issue(work)));
                trace::span(trace::Kind::Issue, t, id, self.this.as_ptr() as u64, 0);
            }
            // SAFETY: armed and ours to list, in no waiting list (taken
            // out when woken, or new).
            Ok(Class::Waiting) => {
                issuer
                    .waiting
                    .push_back(unsafe { Handle::from_raw(action) });
                Self::add(&self.waiting_now, 1);
            }
            // SAFETY: the issuer owns the action; the caller of the pass
            // holds a reference, so the state outlives this call.
            Ok(Class::Failed(e)) => unsafe { QueueState::finish(self.this, action, Err(e), false) },
            Err(panic) => {
                // Not armed anywhere: `classify` arms last, and a
                // registration does not run user code.
                let e = panic_error("the backend's device_wait", &*panic);
                // SAFETY: as above.
                unsafe { QueueState::finish(self.this, action, Err(e), false) };
            }
        }
    }

    /// Advances the action's wait cursor; arms its timepoint on the first
    /// wait that is neither reached nor satisfiable on the device.
    fn classify(&self, action: NonNull<Action<B>>) -> Class {
        // SAFETY: the issuer owns the action during the pass.
        let a = unsafe { &mut *action.as_ptr() };
        while a.cursor < a.wait_count {
            let (sem, value) = a.wait(a.cursor as usize);
            let (sem, value) = (NonNull::from(sem), *value);
            // SAFETY: the entry stays in place and unchanged while the
            // action lives (only the fields written below change), and the
            // action outlives this call: no clone (two RMWs) needed.
            let sem = unsafe { sem.as_ref() };
            match sem.query() {
                Err(e) => return Class::Failed(e),
                Ok(v) if v >= value => {
                    a.cursor += 1;
                    continue;
                }
                Ok(_) => {}
            }
            if usize::from(a.device_wait_count) < DEVICE_WAITS {
                if let Some(event) = self.backend.device_wait(sem, value) {
                    a.device_waits[usize::from(a.device_wait_count)] = Some(event);
                    a.device_wait_count += 1;
                    a.cursor += 1;
                    continue;
                }
            }
            a.timepoint =
                Timepoint::new(value, queue_wake::<B>, action.as_ptr().cast_const().cast());
            a.armed = true;
            // SAFETY: the timepoint lives in the action, which stays put
            // until the callback hands it back (or `cancel` succeeds).
            match unsafe { sem.register(NonNull::from(&a.timepoint)) } {
                Registration::Pending => return Class::Waiting,
                Registration::Reached => {
                    a.armed = false;
                    a.cursor += 1;
                }
                Registration::Failed(e) => {
                    a.armed = false;
                    return Class::Failed(e);
                }
            }
        }
        Class::Ready
    }

    /// Cancels every pending action whose timepoint can still be cancelled
    /// (the others are being woken and will be cancelled by the next pass).
    fn cancel_waiting(&self, issuer: &mut IssuerState<B::Payload>) {
        let mut cursor = issuer.waiting.front();
        while let Some(action) = cursor {
            // SAFETY: linked in `waiting`.
            cursor = unsafe { issuer.waiting.next(action) };
            // SAFETY: the issuer owns listed actions' bookkeeping.
            let a = unsafe { &*action.as_ptr() };
            let (sem, _) = a.wait(a.cursor as usize);
            // SAFETY: armed on `sem` (the wait at the cursor).
            if unsafe { sem.cancel(NonNull::from(&a.timepoint)) } {
                // SAFETY: linked in `waiting`; now ours.
                let _ = unsafe { issuer.waiting.remove(action) };
                self.waiting_left();
                // SAFETY: as in `handle`.
                unsafe { QueueState::finish(self.this, action, Err(cancelled()), false) };
            }
        }
    }

    /// Signals (or fails) the action's semaphores and frees it.
    /// `reached_ok`: a signal value already reached is not an error (see
    /// [`Completion::complete_reached_ok`]).
    ///
    /// # Safety
    /// `this` is a live queue state and the caller owns `action`, one of
    /// its actions, whose reference this gives up: the state may be freed
    /// before this returns (so it takes a pointer, not `&self`).
    pub(crate) unsafe fn finish(
        this: NonNull<QueueState<B>>,
        action: NonNull<Action<B>>,
        result: Result<(), Error>,
        reached_ok: bool,
    ) {
        // SAFETY: the action's reference keeps the state alive until the
        // release below (a lent action's submitter, inside `submit`, does);
        // this borrow is not used after it.
        let shared = unsafe { this.as_ref() };
        // SAFETY: the caller owns the finished action.
        let a = unsafe { &*action.as_ptr() };
        // Finished inside its own direct submission, on this thread: its
        // submitter (and the caller's handles) outlive this call.
        let id = action.as_ptr().cast_const().cast::<()>();
        let inline = DIRECT.with(|d| {
            let mine = d.get() == id;
            if mine {
                d.set(std::ptr::null());
            }
            mine
        });
        // Signals fire timepoints, whose callbacks may panic: every signal
        // is still made, the action still freed and its reference given
        // up; then the first panic goes on unwinding.
        // Counted before any signal: whoever sees a signal of this action
        // sees it finished (the signal's release publishes the count).
        // Inside our own pass: the issuer's counts (no RMW).
        // On a thread with a slot of its own (a CPU worker): its counts,
        // with no RMW either (one thread per slot).
        let in_pass = issuing(this.as_ptr().cast_const().cast());
        let (counts, alone) = if in_pass {
            (&shared.finished_in_pass, true)
        } else {
            match shared.backend.finish_slot() {
                Some(i) if i < shared.finished_by_slot.len() => {
                    (&*shared.finished_by_slot[i], true)
                }
                _ => (&*shared.finished, false),
            }
        };
        let counter = match &result {
            Ok(()) => &counts.completed,
            Err(e) if e.kind() == ErrorKind::Cancelled => &counts.cancelled,
            Err(_) => &counts.failed,
        };
        if alone {
            Self::add(counter, 1);
        } else {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let t = trace::now();
        let mut panicked = FirstPanic::default();
        // The state lives until the release below, after the signals.
        let signalling = Signalling::enter(this.as_ptr().cast_const().cast());
        for i in 0..a.signal_count as usize {
            let (sem, value) = a.signal(i);
            panicked.run(|| match &result {
                Ok(()) => {
                    let signalled = if reached_ok {
                        sem.signal_at_least(*value)
                    } else {
                        sem.signal(*value)
                    };
                    if let Err(e) = signalled {
                        // A failed semaphore keeps its first error; a value
                        // that does not advance is the submitter's bug,
                        // surfaced to every waiter.
                        sem.fail(e);
                    }
                }
                Err(e) => sem.fail(e.clone()),
            });
        }
        drop(signalling);
        trace::span(
            trace::Kind::Complete,
            t,
            action.as_ptr() as u64,
            this.as_ptr() as u64,
            u64::from(result.is_err()),
        );
        // A lent action holds no references: finished inline it has none to
        // give back; finished elsewhere, its submitter either kept it
        // (`KEPT`: freed here as owned) or will free it (`LENT`: left).
        let owned = match a.lent.load(Ordering::Acquire) {
            OWNED => true,
            LENT if inline => false,
            _ => {
                // Acquire: a `KEPT` action's references; release: our
                // signals, before a submitter that frees it.
                if a.lent.swap(DONE, Ordering::AcqRel) == LENT {
                    panicked.resume();
                    return;
                }
                true
            }
        };
        // SAFETY: owned and done; its blocks go back to our pool (a panic
        // dropping the payload is contained inside): through the issuer's
        // stash when this thread runs our pass (a backend completing inside
        // `issue`, a cancel or failure in a pass), borrowed one release at
        // a time (`Stash`).
        unsafe {
            if in_pass {
                QueueAction::destroy(action, &mut Stash::new(&shared.issuer_blocks), owned);
            } else {
                QueueAction::destroy(action, &mut &shared.pool, owned);
            }
        }
        if owned {
            // SAFETY: the action's reference, given up once.
            unsafe { QueueState::release(this) };
        }
        panicked.resume();
    }
}

impl<B: Backend> Drop for QueueState<B> {
    fn drop(&mut self) {
        // The issuer's stash goes back before the pool drops, through this
        // `&mut self` (not the stash's own pointer into it, which this
        // exclusive borrow forbids writing through now).
        let pool = &self.pool;
        self.issuer_blocks.with_mut(|c| {
            // SAFETY: `&mut self`: nothing else borrows the stash; its pool
            // is this state's.
            unsafe { (*c).flush_to(pool) }
        });
        // The issuer's credit counts in `refs`: given back before the last
        // reference could go.
        debug_assert_eq!(
            // SAFETY: `&mut self`: nothing else borrows the issuer state.
            self.issuer.with_mut(|i| unsafe { (*i).credit }),
            0,
            "the issuer's reference credit outlived the queue"
        );
        // The last reference: every action finished. Anything still on a
        // stack would be a bug; cancel it rather than leak it.
        let stray = self.incoming.take_all();
        debug_assert!(stray.is_empty(), "actions left on the submit stack");
        let _ = stray;
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::{Signalling, HELD};

    /// A `finish`'s mark that it holds its queue's state is the innermost
    /// one's, and gone once that finish is done signalling, also when a
    /// signal unwinds: a stale mark would let a later wake-up on this
    /// thread skip the reference it needs (mutation checked: `Drop` not
    /// restoring the outer mark fails this).
    #[test]
    fn a_finishs_mark_is_the_innermost_and_gone_after_its_signals() {
        let held = || HELD.with(|h| h.get());
        // Two distinct addresses (never dereferenced).
        let (x, y) = (0u8, 0u8);
        let (a, b) = (
            std::ptr::from_ref(&x).cast::<()>(),
            std::ptr::from_ref(&y).cast::<()>(),
        );
        {
            let _outer = Signalling::enter(a);
            assert_eq!(held(), a);
            {
                let _inner = Signalling::enter(b);
                assert_eq!(held(), b);
            }
            assert_eq!(held(), a);
            let unwound = std::panic::catch_unwind(|| {
                let _inner = Signalling::enter(b);
                panic!("a signal's callback panics");
            });
            assert!(unwound.is_err());
            assert_eq!(held(), a);
        }
        assert!(held().is_null());
    }
}
