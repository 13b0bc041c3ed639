//! `PendingQueue`: submit, the issue drain protocol, completion, shutdown.
//! The invariants are listed in the [module docs](super).

use std::fmt;
use std::mem;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use super::action::{Lending, QueueAction, SubmitLink, WaitingLink, DEVICE_WAITS};
use super::backend::{Backend, Completion, Internal, IssueTurn};
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
    /// The same, counted by the threads the backend gives a lane of their
    /// own (`Backend::finish_lane`: a CPU device's workers), each with a
    /// load and a store.
    finished_by_lane: Box<[CachePadded<Finished>]>,
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
        self.0.with_mut(|c| {
            // SAFETY: exclusive per `new`'s contract, for this call only (no
            // user code runs inside).
            let cache = unsafe { &mut *c };
            // SAFETY: the block's contract is forwarded.
            unsafe { cache.release(block) }
        })
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
    /// Whether the next direct submission is made lent (`Lent`): the last
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

mod classify;
mod drain;
mod finish;
mod handle;
mod reentrancy;

#[cfg(feature = "testing")]
pub use drain::issue_passes_on_this_thread;
use drain::*;
pub use handle::PendingQueue;
use handle::*;
pub(crate) use reentrancy::in_issue_pass;
use reentrancy::*;
