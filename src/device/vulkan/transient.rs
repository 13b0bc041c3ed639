//! A Vulkan device's memory for `Queue::alloca`: buffers of host-visible
//! memory in power-of-two size classes, each taken back (header and
//! mapping) when its last handle drops and handed out again, so a frame
//! loop of allocas allocates nothing once warm. Lock-free (one bounded
//! queue per class); a class keeps at most [`KEPT`] buffers, and frees
//! what comes back past that.

use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use crossbeam_queue::ArrayQueue;

use super::driver::{Gpu, MappedBuffer};
use crate::device::data::buffer::HostRef;
use crate::device::data::host_mem::{HostMem, Mapped, Recycle};
use crate::device::BUFFER_ALIGN;
use crate::error::{Error, ErrorKind};

/// The smallest class, in bytes.
const SMALLEST: usize = 256;
/// Classes: `SMALLEST << c` bytes for `c` below this (up to 256 MiB);
/// a larger alloca gets memory of its own, freed with its last handle.
const CLASSES: usize = 21;
/// Buffers a class keeps.
const KEPT: usize = 64;

/// A header taken back, owned by the queue it sits in.
struct Kept(NonNull<HostMem>);

// SAFETY: an owned header (nothing else reaches it), whose memory is
// `Send + Sync` (`HostMem`).
unsafe impl Send for Kept {}

pub(crate) struct TransientPool {
    gpu: Arc<Gpu>,
    device: u64,
    classes: Vec<ArrayQueue<Kept>>,
}

impl TransientPool {
    pub(crate) fn new(gpu: Arc<Gpu>, device: u64) -> TransientPool {
        TransientPool {
            gpu,
            device,
            classes: (0..CLASSES).map(|_| ArrayQueue::new(KEPT)).collect(),
        }
    }

    /// A buffer of `len > 0` zeroed bytes, pending (unusable until its
    /// alloca runs).
    pub(crate) fn alloca(this: &Arc<TransientPool>, len: usize) -> Result<HostRef, Error> {
        let class = (0..CLASSES).find(|&c| SMALLEST << c >= len);
        if let Some(kept) = class.and_then(|c| this.classes[c].pop()) {
            // SAFETY: taken back by `recycle` (ours now), a transient
            // header of this class: `len` fits its capacity.
            return Ok(unsafe { HostRef::reuse_mapped(kept.0, len) });
        }
        let capacity = class.map_or(len, |c| SMALLEST << c);
        let mem = MappedBuffer::new(&this.gpu, capacity)?;
        let ptr = mapping(&mem)?;
        let weak: Weak<TransientPool> = Arc::downgrade(this);
        let mapped = Mapped {
            handle: ash::vk::Handle::as_raw(mem.raw),
            capacity,
            transient: true,
            owner: Box::new(mem),
            recycle: class.map(|_| weak as Weak<dyn Recycle>),
        };
        // SAFETY: the mapping of `capacity` bytes, reached only through
        // this handle and the device's work, alive until its owner drops;
        // aligned (`mapping`).
        Ok(unsafe { HostRef::mapped(ptr, len, this.device, mapped) })
    }
}

/// The first byte of `mem`'s mapping, checked aligned.
pub(crate) fn mapping(mem: &MappedBuffer) -> Result<NonNull<u8>, Error> {
    let ptr = NonNull::new(mem.ptr())
        .ok_or_else(|| Error::new(ErrorKind::Internal, "vkMapMemory returned a null mapping"))?;
    if ptr.as_ptr() as usize % BUFFER_ALIGN != 0 {
        return Err(Error::new(
            ErrorKind::Internal,
            "the driver mapped a buffer below BUFFER_ALIGN",
        ));
    }
    Ok(ptr)
}

impl Recycle for TransientPool {
    unsafe fn recycle(&self, mem: NonNull<HostMem>) {
        // SAFETY: ours (contract): nothing else reaches it.
        let capacity = unsafe { mem.as_ref() }.mapped_capacity().unwrap_or(0);
        let class = (0..CLASSES).find(|&c| SMALLEST << c == capacity);
        let back = match class {
            Some(c) => self.classes[c].push(Kept(mem)),
            None => Err(Kept(mem)),
        };
        if let Err(Kept(mem)) = back {
            // SAFETY: ours, made by `HostRef::mapped`.
            unsafe { HostMem::free_mapped(mem) };
        }
    }
}

impl Drop for TransientPool {
    fn drop(&mut self) {
        for class in &self.classes {
            while let Some(Kept(mem)) = class.pop() {
                // SAFETY: ours (taken back), made by `HostRef::mapped`.
                unsafe { HostMem::free_mapped(mem) };
            }
        }
    }
}
