//! What this thread is doing for which queue: signalling from a `finish`,
//! running an issue pass (thread-locals read by wake-ups and by
//! `in_issue_pass`).

crate::sync::thread_local! {
    pub(super) static PASS_DEPTH: std::cell::Cell<u32> = std::cell::Cell::new(0);
    /// The queue state whose issue pass this thread runs now (innermost).
    pub(super) static ISSUING: std::cell::Cell<*const ()> = std::cell::Cell::new(std::ptr::null());
    /// The action this thread's `submit` is handling first in its own
    /// pass (innermost), until a finish here clears it.
    pub(super) static DIRECT: std::cell::Cell<*const ()> = std::cell::Cell::new(std::ptr::null());
    /// The queue state a `finish` on this thread keeps alive while it
    /// signals (innermost; see `Signalling`).
    pub(super) static HELD: std::cell::Cell<*const ()> = std::cell::Cell::new(std::ptr::null());
}

/// Marks the calling thread as signalling for a finished action of the
/// queue `queue`, whose state the finish keeps alive until after this is
/// dropped (also when unwinding): a wake-up of another action of that
/// queue on this thread, inside those signals, needs no reference of its
/// own (`queue_wake`).
pub(super) struct Signalling {
    outer: *const (),
}

impl Signalling {
    #[inline]
    pub(super) fn enter(queue: *const ()) -> Signalling {
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
pub(super) struct PassDepth {
    outer: *const (),
}

impl PassDepth {
    #[inline]
    pub(super) fn enter(queue: *const ()) -> PassDepth {
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
pub(super) fn issuing(queue: *const ()) -> bool {
    ISSUING.with(|q| q.get() == queue)
}

/// Whether the calling thread is inside some queue's issue pass: a device
/// whose last handle is dropped there (a cancelled action's captures, on
/// the thread whose signal ran the pass) must not wait for its queues to
/// drain, since this very pass holds one of them.
pub(crate) fn in_issue_pass() -> bool {
    PASS_DEPTH.with(|d| d.get() > 0)
}
