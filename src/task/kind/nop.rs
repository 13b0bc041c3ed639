//! `nop` (a join point) and `barrier` (releases many dependents).

use std::ptr::NonNull;

use super::Kind;
use crate::list::SList;
use crate::task::context::TaskContext;
use crate::task::header::{ForkLink, Outcome, Task};

/// A task that does nothing: a join point.
pub(crate) struct Nop;

impl Kind for Nop {
    const NAME: &'static str = "nop";

    unsafe fn run(_task: NonNull<Task>, _tasks: &mut TaskContext) -> Outcome {
        Outcome::Done(Ok(()))
    }
}

/// A barrier's payload: its dependents, linked through their fork links.
/// At submit, the dependents whose only predecessor is the barrier move to
/// `sole`, in ready chunks (see `Graph::submit`): the barrier releases
/// them with no count to decrement, and hands whole chunks to the other
/// workers without walking them.
#[derive(Default)]
pub(crate) struct BarrierPayload {
    pub(crate) dependents: SList<ForkLink>,
    /// Chunks in the injector's form (`ExecutorState::injector`): their
    /// first tasks linked through their fork links, each chunk chained
    /// through its queue links.
    pub(crate) sole: SList<ForkLink>,
}

impl Kind for BarrierPayload {
    const NAME: &'static str = "barrier";
    const FORKS: bool = true;

    unsafe fn run(_task: NonNull<Task>, _tasks: &mut TaskContext) -> Outcome {
        Outcome::Done(Ok(()))
    }
}

/// The chunks of dependents whose only predecessor is `task`, if it is a
/// barrier (none otherwise), taken out of its payload.
///
/// # Safety
/// The caller owns `task`, which has finished running or was never
/// submitted (an unsubmitted graph freeing it, see `Graph::drop`).
pub(crate) unsafe fn take_sole(task: NonNull<Task>) -> SList<ForkLink> {
    // SAFETY: owned per contract.
    if unsafe { task.as_ref() }.vtable.forks {
        // SAFETY: as in `take_dependents`.
        std::mem::take(unsafe { &mut (*Task::payload_ptr::<BarrierPayload>(task)).sole })
    } else {
        SList::new()
    }
}

/// The fork dependents of `task` if it is a barrier (none otherwise),
/// taken out of its payload.
///
/// # Safety
/// The caller owns `task`, which has finished running.
pub(crate) unsafe fn take_dependents(task: NonNull<Task>) -> SList<ForkLink> {
    // SAFETY: owned per contract.
    if unsafe { task.as_ref() }.vtable.forks {
        // SAFETY: a barrier's payload is a `BarrierPayload`; the owner of
        // a finished task is the only one touching it.
        std::mem::take(unsafe { &mut (*Task::payload_ptr::<BarrierPayload>(task)).dependents })
    } else {
        SList::new()
    }
}
