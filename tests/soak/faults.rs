//! Injected faults and tracked captures: the errors and panics the plan
//! injects, the panic hook that keeps quiet about them, and the captures
//! that count themselves alive (and may panic in `Drop`).

use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::Arc;

use fenceline::{Error, ErrorKind};

/// The payload of every panic the soak injects (the panic hook keeps quiet
/// about it; any other panic is reported as usual).
struct Injected;

/// Panics that were not injected, on any thread (a fenceline thread's
/// panic would otherwise go unnoticed: nobody joins a detached worker).
pub(crate) static UNEXPECTED_PANICS: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn install_quiet_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<Injected>() {
            UNEXPECTED_PANICS.fetch_add(1, Ordering::SeqCst);
            default(info);
        }
    }));
}

/// Counts itself alive in its round; panics when dropped if asked to (a
/// capture whose `Drop` panics). Every host-call and dispatch closure holds
/// one, so the round can tell that fenceline dropped every payload.
pub(crate) struct Tracked {
    live: Arc<AtomicIsize>,
    panic_on_drop: bool,
}

impl Tracked {
    pub(crate) fn new(live: &Arc<AtomicIsize>, panic_on_drop: bool) -> Tracked {
        live.fetch_add(1, Ordering::SeqCst);
        Tracked {
            live: live.clone(),
            panic_on_drop,
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
        // Never while unwinding: that would abort the process.
        if self.panic_on_drop && !std::thread::panicking() {
            std::panic::panic_any(Injected);
        }
    }
}

/// What the plan makes a body or a tile do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Returns `Err(Aborted)`.
    Error,
    /// Panics (an `Internal` error).
    Panic,
}

impl Fault {
    pub(crate) fn kind(self) -> ErrorKind {
        match self {
            Fault::Error => ErrorKind::Aborted,
            Fault::Panic => ErrorKind::Internal,
        }
    }
    pub(crate) fn raise(self) -> Result<(), Error> {
        match self {
            Fault::Error => Err(Error::new(ErrorKind::Aborted, "injected by the soak")),
            Fault::Panic => std::panic::panic_any(Injected),
        }
    }
}
