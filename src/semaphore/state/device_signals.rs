//! The device-wait shortcut: device events a semaphore remembers, each
//! with the value it brings the semaphore to, so a device wait on that
//! value can wait on the event instead of the host (CUDA devices).

use super::*;

/// Device signals one semaphore remembers at once.
pub const DEVICE_SIGNALS: usize = 8;

/// Pruned device signals, dropped after the lock is released (no heap).
// Recorded and looked up by CUDA devices (and tests) only; without them
// the table stays empty.
#[cfg(any(feature = "cuda", feature = "vulkan", feature = "testing", test))]
type Stale = [Option<AnyEvent>; DEVICE_SIGNALS];

/// The device signals a semaphore remembers.
pub(super) type DeviceSignals = [Option<(u64, AnyEvent)>; DEVICE_SIGNALS];

/// Moves out every device signal at or below `current` (useless: the value
/// is already reached) into `out`, to be dropped unlocked.
#[cfg(any(feature = "cuda", feature = "vulkan", feature = "testing", test))]
fn prune(device: &mut DeviceSignals, current: u64, out: &mut Stale) {
    for (entry, slot) in device.iter_mut().zip(out.iter_mut()) {
        if entry.as_ref().is_some_and(|(v, _)| *v <= current) {
            *slot = entry.take().map(|(_, e)| e);
        }
    }
}

#[cfg(any(feature = "cuda", feature = "vulkan", feature = "testing", test))]
impl Semaphore {
    /// Records that a device event, once complete, brings this semaphore to
    /// `value` (the device-wait shortcut: a later device wait on `>= value`
    /// can wait on the event instead of the host). Keeps at most
    /// [`DEVICE_SIGNALS`]: a full table gives up its smallest value for a
    /// larger one (the next to be waited for in a chain submitted ahead,
    /// where the smallest is the nearest to being reached; a wait that
    /// already took an event keeps its own reference). Returns `false`
    /// (and drops `event`) when the value is already reached, the
    /// semaphore failed, or every value kept is larger: callers then
    /// simply wait on the host.
    pub(crate) fn record_device_signal(&self, value: u64, event: AnyEvent) -> bool {
        let mut stale: Stale = Default::default();
        let recorded = {
            let mut device = self.inner.lock_device();
            // Acquire: pairs with the signals' CAS and `fail`'s swap
            // (mod.rs); only the number is used here.
            let current = self.inner.value.load(Ordering::Acquire);
            if current == FAILED_VALUE || value <= current {
                false
            } else {
                prune(&mut device, current, &mut stale);
                let slot = match device.iter().position(Option::is_none) {
                    Some(free) => Some(free),
                    // Full: the smallest value, if below this one.
                    None => device
                        .iter()
                        .enumerate()
                        .filter_map(|(i, e)| e.as_ref().map(|(v, _)| (*v, i)))
                        .min()
                        .filter(|(v, _)| *v < value)
                        .map(|(_, i)| i),
                };
                match slot {
                    Some(i) => {
                        let old = device[i].replace((value, event.clone()));
                        // Slot `i` was not pruned (it holds a value): its
                        // stale entry is free.
                        stale[i] = old.map(|(_, e)| e);
                        true
                    }
                    None => false,
                }
            }
        };
        drop(stale); // released with no lock held
        drop(event);
        recorded
    }

    /// The recorded device event with the **smallest** value `>= value`, with
    /// a new reference to it (the caller's to drop), or `None`.
    pub(crate) fn device_signal_reaching(&self, value: u64) -> Option<(u64, AnyEvent)> {
        let mut stale: Stale = Default::default();
        let found = {
            let mut device = self.inner.lock_device();
            // Acquire: pairs with the signals' CAS and `fail`'s swap
            // (mod.rs), as above.
            let current = self.inner.value.load(Ordering::Acquire);
            if current != FAILED_VALUE {
                prune(&mut device, current, &mut stale);
            }
            device
                .iter()
                .flatten()
                .filter(|(v, _)| *v >= value)
                .min_by_key(|(v, _)| *v)
                .map(|(v, e)| (*v, e.clone()))
        };
        drop(stale);
        found
    }
}

#[cfg(any(feature = "cuda", feature = "vulkan"))]
impl Semaphore {
    /// The device-wait shortcut's lookup for a device whose events come
    /// from `pool`: a recorded device signal reaching `value` whose event
    /// is the pool's (one the device can wait on), with a new reference.
    pub(crate) fn device_signal_in<E: Send + Sync + 'static>(
        &self,
        value: u64,
        pool: &crate::semaphore::EventPool<E>,
    ) -> Option<AnyEvent> {
        let (_, event) = self.device_signal_reaching(value)?;
        pool.event_of(&event)?;
        Some(event)
    }
}

impl Inner {
    pub(super) fn lock_device(&self) -> MutexGuard<'_, DeviceSignals> {
        // A panic cannot happen while the lock is held (no user code runs
        // under it), so poisoning is impossible; recover anyway.
        self.device.lock().unwrap_or_else(|p| p.into_inner())
    }
}
