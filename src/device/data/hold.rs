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
//!
//! Queue-ordered memory (`Queue::alloca`) adds two marks that no take
//! gets past: `PENDING` until the alloca's action runs (which clears it
//! with a CAS), `GONE` once the dealloca's action ran (a CAS from a word
//! nobody holds, so never under a running user). A buffer's bytes are
//! therefore never touched before its alloca ran or after its dealloca
//! ran, and are recycled only when its last handle is gone.

use crate::sync::atomic::{AtomicU64, Ordering};

/// The word's value while a writer holds it.
const WRITER: u64 = 1 << 63;
/// Set until a transient buffer's alloca ran.
const PENDING: u64 = 1 << 62;
/// Set once a transient buffer's dealloca ran: for good.
const GONE: u64 = 1 << 61;
/// Bits no take gets past.
const CLOSED: u64 = WRITER | PENDING | GONE;

/// Where a buffer is in its queue-ordered life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Life {
    /// Its alloca has not run yet.
    Pending,
    /// Usable.
    Live,
    /// Its dealloca ran.
    Gone,
}

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

    /// A word of a buffer whose alloca has not run.
    pub fn new_pending() -> Hold {
        Hold(AtomicU64::new(PENDING))
    }

    /// Marks a word nobody else can see yet as pending.
    pub fn set_pending(&self) {
        self.0.store(PENDING, Ordering::Relaxed);
    }

    /// The alloca ran: the buffer is usable from now on. `false` (and
    /// nothing changes) if its dealloca ran first.
    pub fn make_live(&self) -> bool {
        // Release: pairs with the Acquire CAS of the first `try_take`;
        // publishes the zeroed bytes (written before the buffer was handed
        // out) to the first taker. (No one can hold a pending word.)
        self.0
            .compare_exchange(PENDING, 0, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// The dealloca ran: nothing may take the word again. `Err` with the
    /// word's life if it cannot be closed: a user holds it (`Live`), or it
    /// is gone already.
    pub fn close(&self) -> Result<(), Life> {
        let mut now = self.0.load(Ordering::Relaxed);
        loop {
            if now & GONE != 0 {
                return Err(Life::Gone);
            }
            if now & !PENDING != 0 {
                return Err(Life::Live);
            }
            // Acquire: pairs with the Release RMWs in `give_back`; the last
            // holders' uses happen before the memory is recycled (when the
            // last handle goes).
            match self
                .0
                .compare_exchange_weak(now, GONE, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(seen) => now = seen,
            }
        }
    }

    /// Where the buffer is in its queue-ordered life.
    pub fn life(&self) -> Life {
        // Acquire: pairs with the Release CAS in `make_live` and the Release
        // RMWs in `give_back`; callers only branch on the life (error
        // checks) and read no bytes on it.
        let now = self.0.load(Ordering::Acquire);
        if now & GONE != 0 {
            Life::Gone
        } else if now & PENDING != 0 {
            Life::Pending
        } else {
            Life::Live
        }
    }

    /// Takes the word for `access`: `false` (and nothing taken) if a
    /// holder conflicts (a writer, or for a write any holder).
    pub fn try_take(&self, access: Access) -> bool {
        match access {
            // Acquire: pairs with the Release RMWs in `give_back` and the
            // Release CAS in `make_live`; the writer sees the previous
            // holders' accesses and the zeroed bytes.
            Access::Write => self
                .0
                .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok(),
            Access::Read => {
                let mut now = self.0.load(Ordering::Relaxed);
                loop {
                    if now & CLOSED != 0 {
                        return false;
                    }
                    // Readers never fail because of other readers: a CAS
                    // that lost to one retries with the new count.
                    // Acquire: pairs with the Release RMWs in `give_back`
                    // and the Release CAS in `make_live`; the reader sees
                    // the last writer's bytes and the zeroed bytes.
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
    ///
    /// Errors (`Internal`, and the word is left as it was): the word holds
    /// no such hold (a give-back without its take, or a second one). In
    /// every build: a read hold given back twice would otherwise let a
    /// writer in beside a live reader.
    pub fn give_back(&self, access: Access) -> Result<(), crate::error::Error> {
        let taken = match access {
            // Only its writer touches a written word. Release: pairs with
            // the Acquire CASes in `try_take` and `close`; publishes the
            // writer's bytes to the next holder.
            Access::Write => self
                .0
                .compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed)
                .map(|_| ()),
            Access::Read => {
                let mut now = self.0.load(Ordering::Relaxed);
                loop {
                    if now & CLOSED != 0 || now == 0 {
                        break Err(now);
                    }
                    // A CAS that lost to another reader retries. Release:
                    // pairs with the Acquire CASes of a writer's `try_take`
                    // and `close`; this reader's reads happen before them.
                    match self.0.compare_exchange_weak(
                        now,
                        now - 1,
                        Ordering::Release,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break Ok(()),
                        Err(seen) => now = seen,
                    }
                }
            }
        };
        taken.map_err(|word| not_taken(access, word))
    }

    #[cfg(any(test, feature = "testing"))]
    /// Whether anyone holds the word (tests).
    pub fn is_held(&self) -> bool {
        // Acquire: pairs with the Release RMWs in `give_back`; a test's
        // check, which reads no bytes on it.
        self.0.load(Ordering::Acquire) & !(PENDING | GONE) != 0
    }
}

/// The error of a give-back with no hold to give back.
#[cold]
fn not_taken(access: Access, word: u64) -> crate::error::Error {
    crate::error::Error::new(
        crate::error::ErrorKind::Internal,
        format!("a {access:?} hold given back that was not taken (word {word:#x})"),
    )
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
        h.give_back(Access::Read).unwrap();
        assert!(!h.try_take(Access::Write), "one reader still holds it");
        h.give_back(Access::Read).unwrap();
        assert!(!h.is_held());
        assert!(h.try_take(Access::Write));
        assert!(!h.try_take(Access::Read), "a writer holds it");
        assert!(!h.try_take(Access::Write), "a writer holds it");
        h.give_back(Access::Write).unwrap();
        assert!(!h.is_held());
        assert!(h.try_take(Access::Read));
        h.give_back(Access::Read).unwrap();
    }

    /// A give-back without its take fails and changes nothing, in every
    /// build. Mutation checked: the `debug_assert` of before (a release
    /// build wrapped the count, and a writer then got in beside the
    /// remaining reader).
    #[test]
    fn a_second_give_back_fails_and_changes_nothing() {
        let h = Hold::new();
        assert!(h.try_take(Access::Read));
        assert!(h.try_take(Access::Read));
        h.give_back(Access::Read).unwrap();
        h.give_back(Access::Read).unwrap();
        assert!(h.give_back(Access::Read).is_err(), "a third give-back");
        assert!(h.give_back(Access::Write).is_err(), "never written");
        assert!(!h.is_held());
        assert!(h.try_take(Access::Read));
        assert!(!h.try_take(Access::Write), "the reader still holds it");
        h.give_back(Access::Read).unwrap();
        assert!(h.try_take(Access::Write));
        assert!(h.give_back(Access::Read).is_err(), "a writer holds it");
        assert!(!h.try_take(Access::Read), "still the writer's");
        h.give_back(Access::Write).unwrap();
        // Closed words: nothing to give back.
        h.set_pending();
        assert!(h.give_back(Access::Read).is_err());
        assert!(h.make_live());
        assert!(h.close().is_ok());
        assert!(h.give_back(Access::Read).is_err());
    }
}
