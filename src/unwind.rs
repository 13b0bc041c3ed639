//! The one home for panic capture: user code (closures, their captures'
//! `Drop`, a custom `Backend`, timepoint callbacks) may panic; fenceline
//! turns such a panic into an [`Error`] where an action or task can fail
//! with it, and otherwise finishes its own bookkeeping before letting the
//! panic go on (rayon-core's `unwind.rs` plays this role there).

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use crate::error::{Error, ErrorKind};

/// Runs `f`, turning a panic into an `Internal` error.
pub(crate) fn guarded<R>(f: impl FnOnce() -> Result<R, Error>) -> Result<R, Error> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => Err(panic_error("task", &*panic)),
    }
}

/// The error a panic of `what` becomes: `Internal`, with the panic's
/// message when it has one.
pub(crate) fn panic_error(what: &str, panic: &(dyn Any + Send)) -> Error {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".to_string());
    Error::new(ErrorKind::Internal, format!("{what} panicked: {message}"))
}

/// Runs several steps that must all run even if one panics, and keeps the
/// first panic to [`resume`](Self::resume) once they did.
#[derive(Default)]
pub(crate) struct FirstPanic(Option<Box<dyn Any + Send>>);

impl FirstPanic {
    /// Runs `f`; `None` if it panicked (the panic is kept if it is the
    /// first).
    #[inline]
    pub(crate) fn run<R>(&mut self, f: impl FnOnce() -> R) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(r) => Some(r),
            Err(p) => {
                self.keep(p);
                None
            }
        }
    }

    /// Keeps `panic` if it is the first.
    pub(crate) fn keep(&mut self, panic: Box<dyn Any + Send>) {
        self.0.get_or_insert(panic);
    }

    /// Takes the first panic out (the caller handles it).
    pub(crate) fn take(&mut self) -> Option<Box<dyn Any + Send>> {
        self.0.take()
    }

    /// Goes on unwinding with the first panic, if any step panicked
    /// (unless this thread is already unwinding: then the panic is
    /// dropped, as a second panic would abort).
    #[inline]
    pub(crate) fn resume(self) {
        if let Some(p) = self.0 {
            resume_first(p);
        }
    }
}

/// [`FirstPanic::resume`]'s rare half, out of line: every completion
/// calls `resume`, and almost none has a panic to go on with.
#[cold]
#[inline(never)]
fn resume_first(p: Box<dyn Any + Send>) {
    if !std::thread::panicking() {
        resume_unwind(p);
    }
}
