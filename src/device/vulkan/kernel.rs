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

/// A buffer bound to a SPIR-V dispatch
/// ([`CommandBuffer::dispatch_spirv`](crate::CommandBuffer::dispatch_spirv)):
/// binding `i` of the kernel's descriptor set 0 is the dispatch's `i`-th.
#[derive(Clone, Copy, Debug)]
pub enum SpirvBinding<'a> {
    /// A buffer named at record.
    Buffer(&'a Buffer),
    /// The buffer in slot `slot` of each submission's binding table
    /// ([`Queue::execute_with`](crate::Queue::execute_with)): resolved per
    /// submission, so one recording runs on new buffers every time.
    Slot(u32),
}

/// A recorded binding.
pub(crate) enum Bound {
    Buffer(Buffer),
    Slot(usize),
}

/// A recorded dispatch: the kernel, its workgroups, its bindings (binding
/// `i` is `bindings[i]`) and its push constants, both in the recording's
/// arena.
pub(crate) struct SpirvDispatch {
    pub(crate) pipeline: Arc<Pipeline>,
    pub(crate) groups: [u32; 3],
    /// Owned: dropped with the command.
    bindings: NonNull<[Bound]>,
    push: NonNull<[u8]>,
}

impl SpirvDispatch {
    /// # Safety
    /// `bindings` (owned by the new command from here on) and `push` are
    /// in the arena of the recording the command goes into.
    pub(crate) unsafe fn new(
        kernel: &SpirvKernel,
        groups: [u32; 3],
        bindings: NonNull<[Bound]>,
        push: NonNull<[u8]>,
    ) -> SpirvDispatch {
        SpirvDispatch {
            pipeline: kernel.pipeline.clone(),
            groups,
            bindings,
            push,
        }
    }

    /// The bindings, binding 0 first.
    pub(crate) fn bindings(&self) -> &[Bound] {
        // SAFETY: in the arena of the recording holding the command,
        // alive while it is (`new`).
        unsafe { self.bindings.as_ref() }
    }

    /// The buffers named at record.
    pub(crate) fn buffers(&self) -> impl Iterator<Item = &Buffer> + Clone {
        self.bindings().iter().filter_map(|b| match b {
            Bound::Buffer(b) => Some(b),
            Bound::Slot(_) => None,
        })
    }

    /// The binding-table slots bound.
    pub(crate) fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.bindings().iter().filter_map(|b| match b {
            Bound::Slot(s) => Some(*s),
            Bound::Buffer(_) => None,
        })
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
        unsafe { self.bindings.as_ptr().drop_in_place() }
    }
}

// SAFETY: the pointers are to data in the recording's arena, owned by the
// command and only read through `&self`; buffers are `Send + Sync`.
unsafe impl Send for SpirvDispatch {}
// SAFETY: as above.
unsafe impl Sync for SpirvDispatch {}
