//! The pending queue: actions gated by timeline semaphores, issued to a
//! backend without a mutex and without allocating.
//!
//! # Invariants (ARCHITECTURE.md, "Pending queue"), and where they are kept
//!
//! - **Submit** builds a `QueueAction` in block-pool memory (wait
//!   and signal lists copied inline, 8 of each, more in chained pool
//!   blocks; the payload; backend scratch), pushes it on a `TransferStack`
//!   and requests an issue. No lock, no allocation (`PendingQueue::submit`).
//!   A submitter that finds no pass running takes the issuer's turn and
//!   handles its action at once (`take_turn`), its block from the issuer's
//!   stash; while the queue's actions finish inside their own `submit`,
//!   the action borrows the caller's semaphore handles and holds no queue
//!   reference (`Lent`), and one that escapes gets its references before
//!   `submit` returns (`QueueState::settle`, `Kept`/`Done`).
//! - **Issue is a drain protocol**, not a lock (`PendingQueue::issue`): the
//!   caller that raises the request counter from 0 becomes the issuer and
//!   runs passes until it can swing the counter back to 0 from the value
//!   its last pass began with; everyone else only bumps the counter. A
//!   request made during a pass makes that CAS fail, so the issuer passes
//!   again: nothing is stranded, and only one thread ever runs a pass.
//!   After its own action and `ISSUE_PASSES_BEFORE_HAND_OFF` passes of
//!   others' requests, the issuer offers the turn to its backend
//!   (`Backend::wants_turn`, `hand_off_turn`: a CPU device hands it to a
//!   worker), so a submitter or signaller returns in bounded time; the
//!   turn moves whole (the counter is not swung back) and the new holder
//!   drains on.
//! - **A pass looks only at new and woken actions** (`QueueState::pass`): new
//!   ones come from the submit stack in submission order; a pending action
//!   arms *one* queue-wake timepoint, on its first unsatisfied wait, and is
//!   looked at again only when that timepoint fires (the callback pushes it
//!   on the woken stack and requests an issue). Each action keeps a cursor
//!   over its waits, so every wait is examined once. A completion that
//!   readies one action costs O(1), however deep the backlog.
//! - **Completion** (`Completion::complete`) signals the action's
//!   semaphores (or fails them with the payload's error), releases the
//!   action's memory, and the timepoints it fires request the issue passes
//!   that follow. It may run on any thread, during a pass or not.
//! - **Failure**: a failed wait semaphore fails the action's signal
//!   semaphores with that error and skips the payload; so does a payload
//!   error; an error issuing one action fails only that action.
//! - **Shutdown** (`PendingQueue::shutdown`, also on drop) fails every
//!   action still pending with `Cancelled`, waits for issued ones to
//!   complete, and returns all memory.

mod action;
pub(crate) mod backend;
#[cfg(any(feature = "cuda", feature = "vulkan", feature = "testing", test))]
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod completion_stack;
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod issuer;
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod pending;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;

#[cfg(feature = "vulkan")]
pub(crate) use action::DEVICE_WAITS;
pub(crate) use backend::Internal;
pub use backend::{Backend, Completion, IssueTurn};
#[cfg(any(feature = "cuda", feature = "vulkan"))]
pub(crate) use completion_stack::{CompletionStack, Completions};
pub(crate) use pending::in_issue_pass;
pub use pending::{PendingQueue, QueueStats};
