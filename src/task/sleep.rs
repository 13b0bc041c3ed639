//! `SleepState`: the workers' sleep protocol in one atomic word (its own
//! file so the loom models check exactly the code the executor runs).

use crate::sync::atomic::{AtomicU64, Ordering};

const SLEEPER: u64 = 1;
const EPOCH: u64 = 1 << 16;

/// The workers' sleep state: `(epoch << 16) | sleepers` in one atomic.
///
/// A worker about to park reads [`epoch`](Self::epoch), looks for work one
/// last time, then [`announce`](Self::announce)s itself: that RMW returns
/// the epoch, and if it moved, work may have arrived and the worker must not
/// park. A submitter publishes its work, then [`notify`](Self::notify)s:
/// that RMW bumps the epoch and returns whether anyone was asleep (then it
/// wakes one). Both RMWs hit one atomic, so one of the two always sees the
/// other: no lost wake-up.
#[derive(Debug, Default)]
pub struct SleepState(AtomicU64);

impl SleepState {
    /// A state with no sleeper.
    pub fn new() -> SleepState {
        SleepState(AtomicU64::new(0))
    }

    /// The current epoch (Acquire: pairs with the AcqRel bump in
    /// [`notify`](Self::notify): what was published before it is visible).
    pub fn epoch(&self) -> u64 {
        self.0.load(Ordering::Acquire) & !(EPOCH - 1)
    }

    /// Counts the caller as a sleeper. `true`: the epoch is still `epoch`,
    /// park. `false`: it moved, look for work again. Either way the caller
    /// calls [`leave`](Self::leave) afterwards.
    pub fn announce(&self, epoch: u64) -> bool {
        // AcqRel: pairs with `notify`'s RMW, both ways: one of the two sees
        // the other (the work published before, or the sleeper's flag).
        self.0.fetch_add(SLEEPER, Ordering::AcqRel) & !(EPOCH - 1) == epoch
    }

    /// The current epoch, read with a read-modify-write: the latest value
    /// whatever the caller synchronized with (a parked worker re-checks
    /// with it after waking: an unpark alone need not order memory under
    /// the model checker). AcqRel: pairs with `notify`'s RMW, as `announce`:
    /// what the caller did before (arming its `sleeping` flag again) is
    /// visible to a later `notify`.
    pub fn epoch_now(&self) -> u64 {
        self.0.fetch_add(0, Ordering::AcqRel) & !(EPOCH - 1)
    }

    /// The caller is no longer a sleeper.
    pub fn leave(&self) {
        // AcqRel: pairs with the other RMWs on the word (`notify`,
        // `announce`); only its place in their order matters (a hint).
        self.0.fetch_sub(SLEEPER, Ordering::AcqRel);
    }

    /// Work was published: bump the epoch. `true` if someone may be asleep
    /// (the caller wakes one).
    pub fn notify(&self) -> bool {
        // AcqRel: pairs with `announce` and `epoch_now` (both ways) and with
        // `epoch`'s Acquire load: the work published before the bump.
        self.0.fetch_add(EPOCH, Ordering::AcqRel) & (EPOCH - 1) != 0
    }
}
