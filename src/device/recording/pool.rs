//! A recording's counted references ([`RecordingRef`]) and the device's
//! pool of released recordings ([`RecordingPool`]): the last reference
//! clears its recording and hands it back, lock-free, where a submission
//! completes; a new command buffer takes one from the pool.

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;

use super::{Recording, RecordingLink};
use crate::error::Error;
use crate::list::{Handle, SList, TransferStack};
use crate::sync::atomic::{fence, Ordering};
use crate::sync::{Arc, Mutex};

/// One counted reference to a recording. The last one dropped recycles it.
pub(crate) struct RecordingRef(NonNull<Recording>);

// SAFETY: a reference to a `Send + Sync` recording.
unsafe impl Send for RecordingRef {}
// SAFETY: as above.
unsafe impl Sync for RecordingRef {}

impl RecordingRef {
    /// Whether this is the only reference (nothing in flight holds it).
    pub(crate) fn is_unique(&self) -> bool {
        // Acquire: a holder's release (its last reads of the commands)
        // happens before we reuse the memory.
        self.refs.load(Ordering::Acquire) == 1
    }

    /// The recording, to record into.
    ///
    /// # Safety
    /// This is the only reference ([`is_unique`](Self::is_unique)), and no
    /// other borrow of the recording is live.
    pub(crate) unsafe fn get_mut(&mut self) -> &mut Recording {
        // SAFETY: forwarded contract.
        unsafe { self.0.as_mut() }
    }
}

impl Deref for RecordingRef {
    type Target = Recording;

    fn deref(&self) -> &Recording {
        // SAFETY: our counted reference keeps it alive.
        unsafe { self.0.as_ref() }
    }
}

impl Clone for RecordingRef {
    fn clone(&self) -> Self {
        // Relaxed: the clone comes from a live reference.
        self.refs.fetch_add(1, Ordering::Relaxed);
        RecordingRef(self.0)
    }
}

impl Drop for RecordingRef {
    #[inline]
    fn drop(&mut self) {
        // Release: our reads of the commands happen before the recycling.
        if self.refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // SAFETY: the count just reached zero: ours was the last reference.
        unsafe { self.recycle() };
    }
}

impl RecordingRef {
    /// The last reference's drop: resets the recording and gives it back.
    /// Out of line: a submission's command buffer is usually still held
    /// by its caller (re-executed each frame), so most drops stop at the
    /// count.
    ///
    /// # Safety
    /// This was the last reference (its release took the count to zero),
    /// and this is called once, from its drop.
    #[cold]
    #[inline(never)]
    unsafe fn recycle(&mut self) {
        fence(Ordering::Acquire);
        // SAFETY: the last reference (per contract): the recording is ours
        // alone.
        let recording = unsafe { &mut *self.0.as_ptr() };
        let panicked = recording.reset();
        match recording.pool.take() {
            // SAFETY: cleared, in no list (it was handed out), and the pool
            // frees it (or hands it out again) from here on.
            Some(pool) => {
                pool.free.push(unsafe { Handle::from_raw(self.0) });
                // May be the pool's last reference: it then frees every
                // recording it holds, this one included.
                drop(pool);
            }
            // SAFETY: made by `Box::into_raw` in `RecordingPool::take`.
            None => drop(unsafe { Box::from_raw(self.0.as_ptr()) }),
        }
        panicked.resume();
    }
}

impl fmt::Debug for RecordingRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// What a device's recordings are for.
#[derive(Clone)]
pub(crate) enum Target {
    /// A CPU device, by its identity (`DeviceInner::Cpu::id`).
    Cpu(u64),
    Cuda(std::sync::Arc<crate::device::cuda::CudaShared>),
}

impl Target {
    /// Whether `buffer` is memory of this device (a CPU buffer names its
    /// device by the device's identity, never reused).
    pub(crate) fn owns(&self, buffer: &super::Buffer) -> bool {
        match self {
            Target::Cpu(id) => buffer.host_device() == Some(*id),
            Target::Cuda(shared) => shared.owns(buffer),
        }
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
        Ok(RecordingRef(ptr))
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
