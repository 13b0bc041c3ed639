//! The one error type of fenceline: an [`ErrorKind`] and a message.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// What went wrong, in the vocabulary of status codes (as IREE and gRPC use).
///
/// `#[non_exhaustive]`: match with a wildcard arm.
#[non_exhaustive]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ErrorKind {
    /// An argument was malformed (bad size, non-increasing signal value, …).
    InvalidArgument,
    /// An offset or length fell outside the object it refers to.
    OutOfRange,
    /// A wait ran out of time before its condition held.
    DeadlineExceeded,
    /// The operation was abandoned part way (e.g. a dependency failed).
    Aborted,
    /// Work was cancelled before it ran (e.g. its device was dropped).
    Cancelled,
    /// A pool or capacity limit was reached.
    ResourceExhausted,
    /// The object was not in a state that allows the operation.
    FailedPrecondition,
    /// A backend (driver, device) is not present or not usable.
    Unavailable,
    /// A bug or an unexpected failure inside fenceline or a backend.
    Internal,
}

impl ErrorKind {
    /// The kind's name, as `Display` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::OutOfRange => "out of range",
            ErrorKind::DeadlineExceeded => "deadline exceeded",
            ErrorKind::Aborted => "aborted",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::ResourceExhausted => "resource exhausted",
            ErrorKind::FailedPrecondition => "failed precondition",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error: a [`ErrorKind`] and a message saying what was wrong and with
/// which value.
///
/// Cloning never allocates (a message built at run time is shared), so one
/// failure can be handed to every waiter of a semaphore.
///
/// ```
/// use fenceline::{Error, ErrorKind};
/// let e = Error::new(ErrorKind::InvalidArgument, format!("fill pattern length {}: must be 1, 2 or 4", 3));
/// assert_eq!(e.kind(), ErrorKind::InvalidArgument);
/// assert_eq!(e.to_string(), "invalid argument: fill pattern length 3: must be 1, 2 or 4");
/// ```
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    message: Message,
}

#[derive(Clone)]
enum Message {
    Static(&'static str),
    Shared(Arc<str>),
}

impl Error {
    /// An error of `kind`. A `&'static str` message is stored as is; a
    /// `String` is moved into a shared buffer once.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Error {
        let message = match message.into() {
            Cow::Borrowed(s) => Message::Static(s),
            Cow::Owned(s) => Message::Shared(Arc::from(s)),
        };
        Error { kind, message }
    }

    /// An error of `kind` whose message was made out of line (a cold
    /// function returns the message, the caller wraps it here, inline).
    /// A hot loop that builds its errors this way knows at compile time
    /// that the result is an `Err`, so a loop-invariant check that fails
    /// leaves the loop for good and the compiler can move it out of the
    /// loop; an `Error` returned whole by an opaque call could, as far as
    /// the optimizer knows, carry the niche of `Ok` and re-enter it.
    #[inline(always)]
    pub(crate) fn with_shared(kind: ErrorKind, message: Arc<str>) -> Error {
        Error {
            kind,
            message: Message::Shared(message),
        }
    }

    /// The kind of error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind.
    pub fn message(&self) -> &str {
        match &self.message {
            Message::Static(s) => s,
            Message::Shared(s) => s,
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("message", &self.message())
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message())
    }
}

impl std::error::Error for Error {}

static_assertions::assert_impl_all!(Error: Send, Sync, Clone, std::error::Error);
static_assertions::assert_impl_all!(ErrorKind: Copy, Eq, std::fmt::Debug, Send, Sync);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_and_message_are_kept() {
        let e = Error::new(ErrorKind::ResourceExhausted, "pool at cap of 4 blocks");
        assert_eq!(e.kind(), ErrorKind::ResourceExhausted);
        assert_eq!(e.message(), "pool at cap of 4 blocks");
        assert_eq!(e.to_string(), "resource exhausted: pool at cap of 4 blocks");
        let owned = Error::new(ErrorKind::OutOfRange, format!("offset {} past {}", 9, 8));
        let copy = owned.clone();
        assert_eq!(copy.message(), "offset 9 past 8");
        assert_eq!(copy.kind(), ErrorKind::OutOfRange);
    }

    #[test]
    fn every_kind_has_a_distinct_name() {
        let kinds = [
            ErrorKind::InvalidArgument,
            ErrorKind::OutOfRange,
            ErrorKind::DeadlineExceeded,
            ErrorKind::Aborted,
            ErrorKind::Cancelled,
            ErrorKind::ResourceExhausted,
            ErrorKind::FailedPrecondition,
            ErrorKind::Unavailable,
            ErrorKind::Internal,
        ];
        let names: std::collections::HashSet<_> = kinds.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), kinds.len());
    }
}
