//! A buffer's hold word: who is using its bytes right now.
//!
//! Unordered actions may run at the same time (a queue orders only
//! through semaphores), so two actions, or an action and the host, could
//! otherwise touch one buffer's plain bytes at once: a data race. Each
//! CPU-device buffer has one atomic word that every user of its bytes
//! takes for the span of its use, without waiting: shared for readers
//! (any number at once), exclusive for one writer. A take that meets a
//! conflicting holder fails (the caller reports `FailedPrecondition`);
//! nobody waits, so a hold can never deadlock and a preempted holder
//! never blocks anyone: it only makes conflicting work fail.
//!
//! The word is `WRITER` or the number of readers. Taking it is a CAS
//! (Acquire: the taker sees every write of the holders before it, which
//! gave it back with Release), giving it back one RMW (Release). So the
//! word also orders the bytes: whoever holds it after a writer sees that
//! writer's bytes, whether or not a semaphore ordered the two.

use crate::sync::atomic::{AtomicU64, Ordering};

/// The word's value while a writer holds it.
const WRITER: u64 = 1 << 63;

/// How a user touches a buffer's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reads only: shared with other readers.
    Read,
    /// Writes (and maybe reads): exclusive.
    Write,
}

/// A buffer's hold word. See the [module docs](self).
#[derive(Debug, Default)]
pub struct Hold(AtomicU64);

impl Hold {
    /// A word nobody holds.
    pub fn new() -> Hold {
        Hold(AtomicU64::new(0))
    }

    /// Takes the word for `access`: `false` (and nothing taken) if a
    /// holder conflicts (a writer, or for a write any holder).
    pub fn try_take(&self, access: Access) -> bool {
        match access {
            Access::Write => self
                .0
                .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok(),
            Access::Read => {
                let mut now = self.0.load(Ordering::Relaxed);
                loop {
                    if now & WRITER != 0 {
                        return false;
                    }
                    // Readers never fail because of other readers: a CAS
                    // that lost to one retries with the new count.
                    match self.0.compare_exchange_weak(
                        now,
                        now + 1,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return true,
                        Err(seen) => now = seen,
                    }
                }
            }
        }
    }

    /// Gives back a hold taken with `access`.
    ///
    /// Called once per successful [`try_take`](Self::try_take), by its
    /// taker, after its last access to the bytes (Release: the next taker
    /// sees them).
    pub fn give_back(&self, access: Access) {
        let before = match access {
            Access::Write => self.0.fetch_sub(WRITER, Ordering::Release),
            Access::Read => self.0.fetch_sub(1, Ordering::Release),
        };
        debug_assert!(
            match access {
                Access::Write => before == WRITER,
                Access::Read => before & WRITER == 0 && before > 0,
            },
            "a hold given back that was not taken ({access:?}, word {before:#x})"
        );
    }

    /// Whether anyone holds the word (tests).
    pub fn is_held(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::*;

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let h = Hold::new();
        assert!(h.try_take(Access::Read));
        assert!(h.try_take(Access::Read));
        assert!(!h.try_take(Access::Write), "readers hold it");
        h.give_back(Access::Read);
        assert!(!h.try_take(Access::Write), "one reader still holds it");
        h.give_back(Access::Read);
        assert!(!h.is_held());
        assert!(h.try_take(Access::Write));
        assert!(!h.try_take(Access::Read), "a writer holds it");
        assert!(!h.try_take(Access::Write), "a writer holds it");
        h.give_back(Access::Write);
        assert!(!h.is_held());
        assert!(h.try_take(Access::Read));
        h.give_back(Access::Read);
    }
}
