//! What a device backend provides to the pending queue, and the token it
//! completes actions with.

use std::fmt;
use std::ptr::NonNull;

use super::action::QueueAction;
use super::pending::Shared;
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

    /// The device-wait shortcut: an event, already recorded on this
    /// backend, whose completion brings `semaphore` to `>= value`; the action
    /// may then be issued at once, waiting on the device. `None` (the
    /// default): wait on the host.
    fn device_wait(&self, semaphore: &Semaphore, value: u64) -> Option<AnyEvent> {
        let _ = (semaphore, value);
        None
    }
}

/// An issued action, owned by the backend until completed.
pub struct Completion<B: Backend> {
    pub(crate) action: NonNull<QueueAction<B::Payload>>,
    pub(crate) shared: NonNull<Shared<B>>,
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
        // SAFETY: the token owns the live action; the payload was written.
        unsafe { (*self.action.as_ptr()).payload.assume_init_ref() }
    }

    /// The action's payload, mutably.
    pub fn payload_mut(&mut self) -> &mut B::Payload {
        // SAFETY: as above, exclusively.
        unsafe { (*self.action.as_ptr()).payload.assume_init_mut() }
    }

    /// Device events the payload must wait on before it starts.
    pub fn device_waits(&self) -> impl Iterator<Item = &AnyEvent> {
        // SAFETY: as in `payload`.
        let a = unsafe { &*self.action.as_ptr() };
        a.device_waits.iter().flatten()
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

    /// Finishes the action: `Ok` signals its semaphores, an error fails
    /// them with it. Then its memory goes back to the pool.
    pub fn complete(self, result: Result<(), Error>) {
        let (action, shared) = (self.action, self.shared);
        std::mem::forget(self);
        // SAFETY: the queue's shared state outlives its actions.
        unsafe { shared.as_ref() }.finish(action, result);
    }
}

impl<B: Backend> Drop for Completion<B> {
    fn drop(&mut self) {
        // SAFETY: as in `complete`.
        unsafe { self.shared.as_ref() }.finish(
            self.action,
            Err(Error::new(
                ErrorKind::Internal,
                "backend dropped an issued action without completing it",
            )),
        );
    }
}
