//! What a device backend provides to the pending queue, and the token it
//! completes actions with.

use std::fmt;
use std::ptr::NonNull;

use super::action::QueueAction;
use super::pending::QueueState;
use crate::error::{Error, ErrorKind};
use crate::semaphore::{AnyEvent, Semaphore};

/// A device backend: runs ready actions' payloads.
///
/// The queue calls [`issue`](Backend::issue) from an issue pass, with the
/// action's payload and the device events it must wait on first. The
/// backend runs (or launches) the payload and, when it is done, calls
/// [`Completion::complete`] exactly once, on any thread, possibly before
/// `issue` returns. Dropping a `Completion` completes with an `Internal`
/// error, so no action can be stranded.
pub trait Backend: Send + Sync + Sized + 'static {
    /// What one action runs (command buffers, a host call, ...).
    type Payload: Send + 'static;

    /// Runs or launches a ready action.
    fn issue(&self, work: Completion<Self>);

    /// Whether the calling thread may run an issue pass. A CUDA host
    /// callback may not make CUDA calls: it returns `false` there, and the
    /// queue calls [`wake_issuer`](Backend::wake_issuer) instead.
    fn can_issue_inline(&self) -> bool {
        true
    }

    /// Asks the backend's own issuer thread to call
    /// [`PendingQueue::issue`](super::PendingQueue::issue) soon.
    fn wake_issuer(&self) {}

    /// Whether the calling thread, holding the queue's issuer turn, should
    /// hand it to this backend ([`hand_off_turn`](Backend::hand_off_turn))
    /// rather than keep serving requests. `false`, the default: the turn
    /// is never offered.
    ///
    /// The thread that takes the turn (a submitter, or a signaller whose
    /// signal woke an action) handles its own action, then serves the
    /// requests other threads made meanwhile. After
    /// a bounded number of such passes (one), if requests keep coming, the queue asks this (once
    /// per drain), so that a `submit` or `signal` can return in bounded
    /// time under a steady stream from other threads.
    ///
    /// Every request in a handed-off turn waits until its
    /// [`IssueTurn::run`]: answer `true` only when that runs soon, not
    /// behind work that may itself wait for one of those actions (the
    /// built-in devices hand it to an idle worker or to a thread of their
    /// own that runs no user code). A backend with no such thread keeps
    /// the default: a thread that took the turn then serves every request
    /// that comes while it drains, and its `submit` is not bounded.
    fn wants_turn(&self) -> bool {
        false
    }

    /// Takes over the queue's issuer turn, after
    /// [`wants_turn`](Backend::wants_turn) said so on this thread: arrange
    /// for [`IssueTurn::run`] to be called on a thread that may issue (a
    /// worker), ordered after this call (a task queue, a mutex, a
    /// release store), and return `Ok`; or return the turn (`Err`, the
    /// default), and the calling thread keeps serving.
    fn hand_off_turn(&self, turn: IssueTurn<Self>) -> Result<(), IssueTurn<Self>> {
        Err(turn)
    }

    /// The device-wait shortcut: an event, already recorded on this
    /// backend, whose completion brings `semaphore` to `>= value`; the action
    /// may then be issued at once, waiting on the device. `None` (the
    /// default): wait on the host.
    fn device_wait(&self, semaphore: &Semaphore, value: u64) -> Option<AnyEvent> {
        let _ = (semaphore, value);
        None
    }

    /// How many threads finish this backend's actions with a count of
    /// their own (see [`finish_lane`](Backend::finish_lane)); `0`, the
    /// default: every finish outside an issue pass counts with an atomic
    /// read-modify-write on one shared counter. Sealed: only fenceline's
    /// own backends can name the token it takes, to override or call it.
    #[doc(hidden)]
    fn finish_lanes(&self, _: Internal) -> usize {
        0
    }

    /// The calling thread's lane, below [`finish_lanes`](Backend::finish_lanes),
    /// if it has one. Only one thread may answer a given lane at a time
    /// (the queue counts a finish there with a load and a store), and a
    /// lane passing to another thread must happen-before its next use
    /// there. `None`, the default: the shared counter. Sealed, as above.
    #[doc(hidden)]
    fn finish_lane(&self, _: Internal) -> Option<usize> {
        None
    }
}

mod sealed {
    /// A value only fenceline can make: a trait method that takes one can
    /// be neither called nor overridden outside the crate (its type cannot
    /// be named there).
    #[derive(Clone, Copy, Debug)]
    #[allow(unnameable_types)] // unnameable on purpose: the seal
    pub struct Internal(pub(crate) ());
}
pub(crate) use sealed::Internal;

/// A queue's issuer turn, handed to its backend by
/// [`Backend::hand_off_turn`]: whoever holds it is the queue's only issuer
/// until [`run`](Self::run) finishes the drain. It holds a reference to the
/// queue (the queue outlives it). Dropping it runs the drain on the
/// dropping thread, so a turn is never lost.
pub struct IssueTurn<B: Backend> {
    shared: NonNull<QueueState<B>>,
}

// SAFETY: the turn may be served from any thread that may issue (the
// backend's check), and the state it points to is `Sync`; the turn's
// exclusivity is passed along with the token (the backend's hand-over
// orders the old issuer's writes before the new one's reads).
unsafe impl<B: Backend> Send for IssueTurn<B> {}

impl<B: Backend> IssueTurn<B> {
    /// A turn the caller holds, with a reference of its own.
    ///
    /// # Safety
    /// The caller holds the issuer turn of `shared` (a live state) and
    /// gives it up to this token; the token owns one counted reference.
    pub(crate) unsafe fn new(shared: NonNull<QueueState<B>>) -> IssueTurn<B> {
        IssueTurn { shared }
    }

    /// Finishes the drain on this thread: passes until no request is left,
    /// then gives the turn back.
    pub fn run(self) {
        let shared = self.shared;
        std::mem::forget(self);
        // SAFETY: the token holds the turn and a reference (`new`).
        unsafe { QueueState::resume_turn(shared) };
    }

    /// The token as a pointer, its turn and reference kept (the backend
    /// declined it, or parks it to run later: [`from_raw`](Self::from_raw)).
    pub(crate) fn into_raw(self) -> NonNull<QueueState<B>> {
        let shared = self.shared;
        std::mem::forget(self);
        shared
    }

    /// The token again.
    ///
    /// # Safety
    /// `shared` came from [`into_raw`](Self::into_raw), once.
    pub(crate) unsafe fn from_raw(shared: NonNull<QueueState<B>>) -> IssueTurn<B> {
        IssueTurn { shared }
    }

    /// Runs a turn a device's thread took from a turn cell: the device's
    /// turn runner (`TurnRunner`) for queues of backend `B`.
    ///
    /// # Safety
    /// `turn` is an `IssueTurn<B>` made a pointer by
    /// [`into_raw`](Self::into_raw) (in `hand_off_turn`), taken from its
    /// cell once.
    pub(crate) unsafe fn run_raw(turn: NonNull<()>) {
        // SAFETY: the caller's contract: the pointer `into_raw` made, once.
        unsafe { IssueTurn::<B>::from_raw(turn.cast()) }.run();
    }
}

impl<B: Backend> Drop for IssueTurn<B> {
    fn drop(&mut self) {
        // SAFETY: as in `run`.
        unsafe { QueueState::resume_turn(self.shared) };
    }
}

impl<B: Backend> fmt::Debug for IssueTurn<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IssueTurn")
    }
}

/// An issued action, owned by the backend until completed.
pub struct Completion<B: Backend> {
    pub(crate) action: NonNull<QueueAction<B::Payload>>,
    pub(crate) shared: NonNull<QueueState<B>>,
}

// SAFETY: the token owns the action (payload `Send`) and refers to the
// queue's shared state, which outlives every action.
unsafe impl<B: Backend> Send for Completion<B> {}

impl<B: Backend> fmt::Debug for Completion<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Completion")
    }
}

impl<B: Backend> Completion<B> {
    /// The action's payload.
    pub fn payload(&self) -> &B::Payload {
        // SAFETY: the token owns the live action.
        let payload = unsafe { &(*self.action.as_ptr()).payload };
        // SAFETY: the payload was written.
        unsafe { payload.assume_init_ref() }
    }

    /// The action's payload, mutably.
    pub fn payload_mut(&mut self) -> &mut B::Payload {
        // SAFETY: the token owns the live action, exclusively.
        let payload = unsafe { &mut (*self.action.as_ptr()).payload };
        // SAFETY: the payload was written.
        unsafe { payload.assume_init_mut() }
    }

    /// Device events the payload must wait on before it starts.
    pub fn device_waits(&self) -> impl Iterator<Item = &AnyEvent> {
        // SAFETY: as in `payload`.
        let a = unsafe { &*self.action.as_ptr() };
        a.device_waits.iter().flatten()
    }

    /// `(semaphore, value)` the action waited on (all reached, or waited on
    /// the device through [`device_waits`](Self::device_waits)).
    pub fn waits(&self) -> impl Iterator<Item = (&Semaphore, u64)> {
        // SAFETY: as in `payload`.
        let a = unsafe { &*self.action.as_ptr() };
        (0..a.wait_count as usize).map(move |i| {
            let (s, v) = a.wait(i);
            (s, *v)
        })
    }

    /// `(semaphore, value)` the action signals when it completes.
    pub fn signals(&self) -> impl Iterator<Item = (&Semaphore, u64)> {
        // SAFETY: as in `payload`.
        let a = unsafe { &*self.action.as_ptr() };
        (0..a.signal_count as usize).map(move |i| {
            let (s, v) = a.signal(i);
            (s, *v)
        })
    }

    /// The token of an issued action, rebuilt from the action.
    ///
    /// # Safety
    /// `raw` is an issued action of a `PendingQueue<B>` whose token was
    /// forgotten (see [`CompletionStack::push`]); taken back once.
    #[cfg(any(feature = "cuda", feature = "vulkan", feature = "testing", test))]
    pub(super) unsafe fn from_raw(raw: *mut ()) -> Completion<B> {
        let action = raw.cast::<QueueAction<B::Payload>>();
        // SAFETY: per contract, a live issued action; its owner is the
        // queue's shared state, which outlives it.
        let owner = unsafe { (*action).owner };
        // SAFETY: non-null (made from a live object).
        let action = unsafe { NonNull::new_unchecked(action) };
        // SAFETY: non-null (made from a live object).
        let shared = unsafe { NonNull::new_unchecked(owner.cast_mut().cast::<QueueState<B>>()) };
        // SAFETY: the action is issued and its owner is its queue's state
        // (forwarded contract).
        unsafe { Completion::new(action, shared) }
    }

    /// The token of `action`, issued by the queue whose state is `shared`.
    ///
    /// # Safety
    /// `action` is a live action of that queue, ready and taken out of
    /// every list (the token owns it from here until `complete` or drop);
    /// `shared` is kept alive by the action's reference to it.
    pub(crate) unsafe fn new(
        action: NonNull<QueueAction<B::Payload>>,
        shared: NonNull<QueueState<B>>,
    ) -> Completion<B> {
        Completion { action, shared }
    }

    /// Finishes the action: `Ok` signals its semaphores, an error fails
    /// them with it. Then its memory goes back to the pool.
    pub fn complete(self, result: Result<(), Error>) {
        let (action, shared) = (self.action, self.shared);
        std::mem::forget(self);
        // SAFETY: the token owns the action, whose reference keeps the
        // state alive until `finish` gives it up.
        unsafe { QueueState::finish(shared, action, result, false) };
    }

    /// As [`complete`](Self::complete), but a signal whose value is already
    /// reached is not an error: for an action whose dependents waited on
    /// it on the device (the device-wait shortcut) and may have completed
    /// on the host, signalling higher values, before it.
    pub fn complete_reached_ok(self, result: Result<(), Error>) {
        let (action, shared) = (self.action, self.shared);
        std::mem::forget(self);
        // SAFETY: as in `complete`.
        unsafe { QueueState::finish(shared, action, result, true) };
    }
}

impl<B: Backend> Drop for Completion<B> {
    fn drop(&mut self) {
        // SAFETY: as in `complete`.
        let error = Error::new(
            ErrorKind::Internal,
            "backend dropped an issued action without completing it (or panicked in issue)",
        );
        // SAFETY: as in `complete`.
        unsafe { QueueState::finish(self.shared, self.action, Err(error), false) };
    }
}
