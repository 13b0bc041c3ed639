//! SPIR-V kernels ([`SpirvKernel`]) and their recorded dispatches.

use std::ptr::NonNull;
use std::sync::Arc;

use super::driver::Pipeline;
use crate::device::Buffer;

/// A compute kernel loaded from SPIR-V on a Vulkan device (feature
/// `vulkan`): [`Device::load_spirv`](crate::Device::load_spirv) makes it,
/// [`CommandBuffer::dispatch_spirv`](crate::CommandBuffer::dispatch_spirv)
/// records it. Cheap to clone (a handle).
#[derive(Clone)]
pub struct SpirvKernel {
    pub(crate) pipeline: Arc<Pipeline>,
    /// The identity of the device that loaded it.
    pub(crate) device: u64,
}

impl std::fmt::Debug for SpirvKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpirvKernel")
            .field("buffers", &self.pipeline.bindings)
            .field("push_constant_bytes", &self.pipeline.push_bytes)
            .finish()
    }
}

impl SpirvKernel {
    /// Storage buffers each dispatch binds (set 0, bindings `0..n`).
    pub fn buffers(&self) -> usize {
        self.pipeline.bindings as usize
    }

    /// Bytes of push constants each dispatch sets.
    pub fn push_constant_bytes(&self) -> usize {
        self.pipeline.push_bytes as usize
    }
}

/// A recorded dispatch: the kernel, its workgroups, its buffers (binding
/// `i` is `buffers[i]`) and its push constants, both in the recording's
/// arena.
pub(crate) struct SpirvDispatch {
    pub(crate) pipeline: Arc<Pipeline>,
    pub(crate) groups: [u32; 3],
    /// Owned: dropped with the command.
    buffers: NonNull<[Buffer]>,
    push: NonNull<[u8]>,
}

impl SpirvDispatch {
    /// # Safety
    /// `buffers` (owned by the new command from here on) and `push` are in
    /// the arena of the recording the command goes into.
    pub(crate) unsafe fn new(
        kernel: &SpirvKernel,
        groups: [u32; 3],
        buffers: NonNull<[Buffer]>,
        push: NonNull<[u8]>,
    ) -> SpirvDispatch {
        SpirvDispatch {
            pipeline: kernel.pipeline.clone(),
            groups,
            buffers,
            push,
        }
    }

    /// The buffers, binding `i` first.
    pub(crate) fn buffers(&self) -> impl Iterator<Item = &Buffer> + Clone {
        // SAFETY: in the arena of the recording holding the command,
        // alive while it is (`new`).
        unsafe { self.buffers.as_ref() }.iter()
    }

    /// The push constants.
    pub(crate) fn push_constants(&self) -> &[u8] {
        // SAFETY: in the arena of the recording holding the command,
        // alive and unchanged while it is (`new`).
        unsafe { self.push.as_ref() }
    }
}

impl Drop for SpirvDispatch {
    fn drop(&mut self) {
        // SAFETY: owned by this command alone (`new`), dropped once: a
        // command is dropped in place, once.
        unsafe { self.buffers.as_ptr().drop_in_place() }
    }
}

// SAFETY: the pointers are to data in the recording's arena, owned by the
// command and only read through `&self`; `Buffer` is `Send + Sync`.
unsafe impl Send for SpirvDispatch {}
// SAFETY: as above.
unsafe impl Sync for SpirvDispatch {}
