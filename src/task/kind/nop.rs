//! `nop` (a join point) and `barrier` (releases many dependents).

use std::ptr::NonNull;

use super::Kind;
use crate::task::task::{Outcome, Task};
use crate::task::worker::Worker;

/// A task that does nothing: a join point.
pub(crate) struct Nop;

impl Kind for Nop {
    const NAME: &'static str = "nop";

    unsafe fn run(_task: NonNull<Task>, _worker: &mut Worker) -> Outcome {
        Outcome::Done(Ok(()))
    }
}

/// A barrier's payload: its dependents, linked by `fork_next`.
pub(crate) struct BarrierPayload {
    pub(crate) head: Option<NonNull<Task>>,
    pub(crate) tail: Option<NonNull<Task>>,
}

impl Kind for BarrierPayload {
    const NAME: &'static str = "barrier";
    const FORKS: bool = true;

    unsafe fn run(_task: NonNull<Task>, _worker: &mut Worker) -> Outcome {
        Outcome::Done(Ok(()))
    }
}

/// The first fork dependent of `task` if it is a barrier.
///
/// # Safety
/// `task` is valid.
pub(crate) unsafe fn fork_head(task: NonNull<Task>) -> Option<NonNull<Task>> {
    // SAFETY: valid per contract.
    let t = unsafe { task.as_ref() };
    if t.vtable.forks {
        // SAFETY: a barrier's payload is a `BarrierPayload`.
        unsafe { t.payload::<BarrierPayload>() }.head
    } else {
        None
    }
}
