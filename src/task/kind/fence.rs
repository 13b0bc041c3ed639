//! `fence`: signals a semaphore when reached, fails it if a predecessor failed.

use std::ptr::NonNull;

use super::Kind;
use crate::error::{Error, ErrorKind};
use crate::semaphore::Semaphore;
use crate::task::context::TaskContext;
use crate::task::header::{Outcome, Task};

/// A fence's payload: the semaphore value it signals, if any.
pub(crate) struct FencePayload {
    pub(crate) signal: Option<(Semaphore, u64)>,
}

impl Kind for FencePayload {
    const NAME: &'static str = "fence";

    unsafe fn run(task: NonNull<Task>, _tasks: &mut TaskContext) -> Outcome {
        // SAFETY: the calling worker owns the task (`run`'s contract).
        let t = unsafe { task.as_ref() };
        // SAFETY: the payload is a `FencePayload`.
        let p = unsafe { t.payload::<FencePayload>() };
        Outcome::Done(match &p.signal {
            Some((sem, v)) => sem.signal(*v),
            None => Ok(()),
        })
    }

    unsafe fn skip(task: NonNull<Task>) {
        // SAFETY: the payload is a `FencePayload`; the task keeps its scope.
        let t = unsafe { task.as_ref() };
        // SAFETY: as above.
        let p = unsafe { t.payload::<FencePayload>() };
        if let Some((sem, _)) = &p.signal {
            // SAFETY: as above.
            let error = unsafe { t.scope.as_ref() }
                .first_error()
                .unwrap_or_else(|| {
                    Error::new(ErrorKind::Aborted, "a task before the fence failed")
                });
            sem.fail(error);
        }
    }
}
