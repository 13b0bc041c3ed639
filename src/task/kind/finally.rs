//! `finally`: runs whether or not its predecessors failed, and is told which.

use std::ptr::NonNull;

use super::Kind;
use crate::error::{Error, ErrorKind};
use crate::small_box::SmallBox;
use crate::task::context::TaskContext;
use crate::task::header::{Outcome, Task, PAYLOAD};
use crate::unwind::guarded;

/// Runs whether or not its predecessors failed, and is told which. The
/// closure is in the task block when it fits ([`FINALLY_INLINE_BYTES`]),
/// boxed otherwise.
pub(crate) struct FinallyPayload<F> {
    f: Option<SmallBox<F, FINALLY_INLINE_BYTES>>,
}

/// Bytes of captured state a `finally` keeps in its task block: the
/// payload less the `Option`'s tag (one alignment unit).
pub const FINALLY_INLINE_BYTES: usize = PAYLOAD - 16;

impl<F> FinallyPayload<F> {
    pub(crate) fn new(f: F) -> Self {
        FinallyPayload {
            f: Some(SmallBox::new(f)),
        }
    }
}

impl<F> Kind for FinallyPayload<F>
where
    F: FnOnce(Result<(), Error>) + Send + 'static,
{
    const NAME: &'static str = "finally";

    unsafe fn run(task: NonNull<Task>, _tasks: &mut TaskContext) -> Outcome {
        // SAFETY: the payload is a `FinallyPayload<F>`, ours while running.
        let p = unsafe { &mut *Task::payload_ptr::<FinallyPayload<F>>(task) };
        if let Some(f) = p.f.take().map(SmallBox::into_inner) {
            Outcome::Done(guarded(|| {
                f(Ok(()));
                Ok(())
            }))
        } else {
            Outcome::Done(Ok(()))
        }
    }

    unsafe fn skip(task: NonNull<Task>) {
        // SAFETY: the payload is a `FinallyPayload<F>`, ours while
        // skipping it.
        let p = unsafe { &mut *Task::payload_ptr::<FinallyPayload<F>>(task) };
        // SAFETY: the calling worker owns the task, which keeps its scope
        // alive.
        let t = unsafe { task.as_ref() };
        if let Some(f) = p.f.take().map(SmallBox::into_inner) {
            // SAFETY: as above.
            let error = unsafe { t.scope.as_ref() }
                .first_error()
                .unwrap_or_else(|| Error::new(ErrorKind::Aborted, "a task before it failed"));
            let _ = guarded(|| {
                f(Err(error));
                Ok(())
            });
        }
    }
}
