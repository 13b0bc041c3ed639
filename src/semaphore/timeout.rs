//! `Timeout`: how long a wait may block.

use std::time::{Duration, Instant};

/// How long a wait may block. Every timeout parameter in fenceline is
/// `impl Into<Timeout>`, so a `Duration` works directly.
///
/// ```
/// use std::time::Duration;
/// use fenceline::{Semaphore, Timeout, ErrorKind};
/// let s = Semaphore::new(0);
/// assert_eq!(s.wait(1, Timeout::Immediate).unwrap_err().kind(), ErrorKind::DeadlineExceeded);
/// assert_eq!(s.wait(1, Duration::from_millis(1)).unwrap_err().kind(), ErrorKind::DeadlineExceeded);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Timeout {
    /// Do not block: check once.
    Immediate,
    /// Block until the condition holds (or a failure ends the wait).
    Never,
    /// Block at most this long.
    After(Duration),
}

impl From<Duration> for Timeout {
    fn from(d: Duration) -> Timeout {
        Timeout::After(d)
    }
}

impl Timeout {
    /// The instant this timeout ends if it starts at `start`; `None` for a
    /// timeout that never ends (including a duration too long to represent).
    pub(crate) fn deadline_from(self, start: Instant) -> Option<Instant> {
        match self {
            Timeout::Immediate => Some(start),
            Timeout::Never => None,
            Timeout::After(d) => start.checked_add(d),
        }
    }
}
