//! A recording's counted references ([`RecordingRef`], a [`Counted`]) and the device's
//! pool of released recordings ([`RecordingPool`]): the last reference
//! clears its recording and hands it back, lock-free, where a submission
//! completes; a new command buffer takes one from the pool.

use std::ptr::NonNull;

use super::{Recording, RecordingLink};
use crate::error::Error;
use crate::list::{Handle, SList, TransferStack};
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::counted::{Counted, Counts};
use crate::sync::{Arc, Mutex};

/// One counted reference to a recording. The last one dropped recycles it.
pub(crate) type RecordingRef = Counted<Recording>;

// SAFETY: `refs` is the references' count alone (`take` sets it to 1
// while the recording is in no list and held by nobody).
unsafe impl Counts for Recording {
    #[inline]
    fn count(&self) -> &AtomicUsize {
        &self.refs
    }

    /// Resets the recording and gives it back. Out of line: a
    /// submission's command buffer is usually still held by its caller
    /// (re-executed each frame), so most drops stop at the count.
    #[cold]
    #[inline(never)]
    unsafe fn last_drop(this: NonNull<Recording>) {
        // SAFETY: the last reference (the contract): the recording is
        // ours alone.
        let recording = unsafe { &mut *this.as_ptr() };
        let panicked = recording.reset();
        match recording.pool.take() {
            Some(pool) => {
                // SAFETY: cleared, in no list (it was handed out), and the
                // pool frees it (or hands it out again) from here on.
                pool.free.push(unsafe { Handle::from_raw(this) });
                // May be the pool's last reference: it then frees every
                // recording it holds, this one included.
                drop(pool);
            }
            // SAFETY: made by `Box::into_raw` in `RecordingPool::take`.
            None => drop(unsafe { Box::from_raw(this.as_ptr()) }),
        }
        panicked.resume();
    }
}

/// What a device's recordings are for.
#[derive(Clone)]
pub(crate) enum Target {
    /// A CPU device, by its identity (`DeviceInner::Cpu::id`).
    Cpu(u64),
    Cuda(std::sync::Arc<crate::device::cuda::shared::CudaShared>),
    Vulkan(std::sync::Arc<crate::device::vulkan::shared::VulkanShared>),
}

impl Target {
    /// Whether `buffer` is memory of this device (a CPU buffer names its
    /// device by the device's identity, never reused).
    pub(crate) fn owns(&self, buffer: &super::Buffer) -> bool {
        match self {
            Target::Cpu(id) => buffer.host_device() == Some(*id),
            Target::Cuda(shared) => shared.owns(buffer),
            Target::Vulkan(shared) => shared.owns(buffer),
        }
    }

    /// Whether the device's actions hold every buffer shared (for
    /// reading), whatever they do with it: a Vulkan device's work runs
    /// on the GPU, ordered there by semaphores and barriers, and may
    /// overlap a dependent issued with a GPU-side wait; the holds keep
    /// the host's copies off its buffers (`HostMem::held`).
    pub(crate) fn shares_holds(&self) -> bool {
        matches!(self, Target::Vulkan(_))
    }
}

/// A device's released recordings, handed out again by
/// [`take`](Self::take). Releasing is lock-free (it happens where a
/// submission completes); taking locks the spare list (it happens where a
/// command buffer is made).
pub(crate) struct RecordingPool {
    pub(crate) target: Target,
    free: TransferStack<RecordingLink>,
    spare: Mutex<SList<RecordingLink>>,
}

impl RecordingPool {
    pub(crate) fn new(target: Target) -> RecordingPool {
        RecordingPool {
            target,
            free: TransferStack::new(),
            spare: Mutex::new(SList::new()),
        }
    }

    /// A cleared recording (a released one when there is one), for a new
    /// command buffer.
    ///
    /// # Errors
    /// `ResourceExhausted` if a new recording's memory cannot be had.
    pub(crate) fn take(pool: &Arc<Self>, one_shot: bool) -> Result<RecordingRef, Error> {
        let reused = {
            let mut spare = pool.spare.lock().unwrap_or_else(|p| p.into_inner());
            if spare.is_empty() {
                *spare = pool.free.take_all();
            }
            spare.pop_front()
        };
        let ptr = match reused {
            Some(handle) => handle.into_raw(),
            None => NonNull::from(Box::leak(Box::new(Recording::new()?))),
        };
        // SAFETY: a recording in no list and held by nobody: ours.
        let recording = unsafe { &mut *ptr.as_ptr() };
        recording.refs.store(1, Ordering::Relaxed);
        recording.pool = Some(pool.clone());
        recording.one_shot = one_shot;
        // SAFETY: counted 1 (this reference) above; recycled only by its
        // `last_drop`.
        Ok(unsafe { Counted::from_raw(ptr) })
    }
}

impl Drop for RecordingPool {
    fn drop(&mut self) {
        let spare = std::mem::take(&mut *self.spare.lock().unwrap_or_else(|p| p.into_inner()));
        let mut all = self.free.take_all();
        all.append(&mut { spare });
        while let Some(handle) = all.pop_front() {
            // SAFETY: pooled recordings were made by `Box` in `take`, and
            // released (cleared, no pool reference): ours to free.
            drop(unsafe { Box::from_raw(handle.into_raw().as_ptr()) });
        }
    }
}
