//! `call`: a closure that may spawn child calls and runs again after them.

use std::ptr::NonNull;

use super::{new_task, Kind};
use crate::error::Error;
use crate::pool::BlockSource;
use crate::small_box::SmallBox;
use crate::task::context::TaskContext;
use crate::task::header::{Outcome, Task, PAYLOAD};
use crate::task::scope::ScopeInner;
use crate::task::Priority;
use crate::unwind::guarded;

/// What a running call can do: add child calls that it joins on. A call
/// that added children runs again once they all finished (unless one
/// failed).
pub struct CallContext<'w> {
    tasks: &'w mut TaskContext,
    task: NonNull<Task>,
    children: u32,
    runs: u8,
}

impl CallContext<'_> {
    /// How many times this call has run before (0 on the first run).
    pub fn reentry(&self) -> u8 {
        self.runs.saturating_sub(1)
    }

    /// Adds a child call; this call runs again after all its children.
    ///
    /// Errors: `ResourceExhausted` if no task block can be had.
    pub fn spawn<F>(&mut self, f: F) -> Result<(), Error>
    where
        F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send + 'static,
    {
        // SAFETY: `self.task` is the running call, alive until it retires,
        // which waits for this child.
        let parent = unsafe { self.task.as_ref() };
        let child = make_call(self.tasks.cache(), parent.scope, parent.priority, f)?;
        // SAFETY: just created, ours.
        let c = unsafe { child.as_ref() };
        c.completion_task.set(Some(self.task));
        parent.add_unfinished();
        // SAFETY: the parent keeps the scope alive and non-idle.
        unsafe { parent.scope.as_ref() }.enter_from_task();
        self.children += 1;
        self.tasks.spawn(child);
        // The call keeps running (and may block on its child): idle
        // workers must be able to take the child now.
        self.tasks.publish();
        Ok(())
    }
}

/// A call's payload: its closure, in the task block when it fits there
/// ([`CALL_INLINE_BYTES`]), boxed otherwise.
struct CallPayload<F> {
    f: SmallBox<F, CALL_INLINE_BYTES>,
}

/// Bytes of captured state a call keeps in its task block: all of the
/// payload.
pub const CALL_INLINE_BYTES: usize = PAYLOAD;

impl<F> Kind for CallPayload<F>
where
    F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send + 'static,
{
    const NAME: &'static str = "call";

    unsafe fn run(task: NonNull<Task>, tasks: &mut TaskContext) -> Outcome {
        // SAFETY: the running worker owns the task.
        let t = unsafe { task.as_ref() };
        // Hold the task while it runs, so children finishing early cannot make
        // it ready before the closure returned.
        t.unfinished.set(1);
        let mut cx = CallContext {
            tasks,
            task,
            children: 0,
            runs: t.runs.get(),
        };
        // SAFETY: the payload is a `CallPayload<F>`, touched only by the worker
        // running the task.
        let payload = unsafe { &mut *Task::payload_ptr::<CallPayload<F>>(task) };
        let result = guarded(|| (payload.f.get_mut())(&mut cx));
        if cx.children == 0 {
            return Outcome::Done(result);
        }
        if let Err(e) = result {
            // SAFETY: the task keeps its scope alive.
            unsafe { t.scope.as_ref() }.record(e);
            t.mark_failed();
        }
        if t.finish_one() {
            // Every child already finished: ready again, run it again (or skip
            // it, if one failed) from the queue.
            cx.tasks.push(task);
        }
        Outcome::Suspended
    }
}

/// Creates a call task of priority `priority` (not yet ready:
/// `unfinished` 0, no links).
pub(crate) fn make_call<F, C: BlockSource + ?Sized>(
    cache: &mut C,
    scope: NonNull<ScopeInner>,
    priority: Priority,
    f: F,
) -> Result<NonNull<Task>, Error>
where
    F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send + 'static,
{
    new_task(cache, scope, priority, || CallPayload {
        f: SmallBox::new(f),
    })
}
