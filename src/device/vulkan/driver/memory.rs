//! Buffers in memory the host can map.

use std::sync::Arc;

use ash::vk;

use super::{internal, Gpu};
use crate::error::{Error, ErrorKind};

/// A buffer in memory the host can map (host-visible and coherent:
/// lavapipe's, and a GPU's upload heap), mapped for its whole life.
pub(crate) struct MappedBuffer {
    gpu: Arc<Gpu>,
    pub(crate) raw: vk::Buffer,
    memory: vk::DeviceMemory,
    ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the handles may be used from any thread (Vulkan's external
// synchronization rules cover the calls, which take `&mut` or are
// read-only); the mapping is plain memory reached only through the
// `unsafe` copies, whose callers order them with the GPU's use.
unsafe impl Send for MappedBuffer {}
// SAFETY: as above.
unsafe impl Sync for MappedBuffer {}

impl MappedBuffer {
    /// `len` (> 0) bytes usable as a transfer source and destination.
    pub(crate) fn new(gpu: &Arc<Gpu>, len: usize) -> Result<MappedBuffer, Error> {
        let d = &gpu.device;
        let info = vk::BufferCreateInfo::default()
            .size(len as u64)
            .usage(
                vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST
                    | vk::BufferUsageFlags::STORAGE_BUFFER,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a live device; `info` lives for the call.
        let raw =
            unsafe { d.create_buffer(&info, None) }.map_err(|r| internal("vkCreateBuffer", r))?;
        // SAFETY: the buffer was made above on this device.
        let needs = unsafe { d.get_buffer_memory_requirements(raw) };
        let vi = &gpu.instance.instance;
        // SAFETY: a physical device of this instance.
        let kinds = unsafe { vi.get_physical_device_memory_properties(gpu.physical) };
        let wanted = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let kind = (0..kinds.memory_type_count).find(|&i| {
            needs.memory_type_bits & (1 << i) != 0
                && kinds.memory_types[i as usize]
                    .property_flags
                    .contains(wanted)
        });
        let memory = kind
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::ResourceExhausted,
                    "no host-visible, coherent memory type for a buffer",
                )
            })
            .and_then(|kind| {
                let alloc = vk::MemoryAllocateInfo::default()
                    .allocation_size(needs.size)
                    .memory_type_index(kind);
                // SAFETY: a live device; `alloc` lives for the call.
                unsafe { d.allocate_memory(&alloc, None) }.map_err(|r| {
                    Error::new(
                        ErrorKind::ResourceExhausted,
                        format!("vkAllocateMemory of {} bytes: {r:?}", needs.size),
                    )
                })
            });
        let memory = match memory {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: made above, unused.
                unsafe { d.destroy_buffer(raw, None) };
                return Err(e);
            }
        };
        // From here on its drop frees what is made.
        let mut this = MappedBuffer {
            gpu: gpu.clone(),
            raw,
            memory,
            ptr: std::ptr::null_mut(),
            len,
        };
        // SAFETY: fresh memory of a size and type the buffer accepts.
        unsafe { d.bind_buffer_memory(raw, memory, 0) }
            .map_err(|r| internal("vkBindBufferMemory", r))?;
        // SAFETY: host-visible memory, not mapped before; unmapped when
        // freed (`Drop`).
        let ptr = unsafe { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
            .map_err(|r| internal("vkMapMemory", r))?;
        this.ptr = ptr.cast();
        Ok(this)
    }

    /// The mapping's first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Copies `data` into the buffer at `offset` (in bounds).
    ///
    /// # Safety
    /// No GPU work that touches these bytes is in flight (coherent memory:
    /// the write is visible to work submitted after this returns).
    pub(crate) unsafe fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset <= self.len && data.len() <= self.len - offset);
        // SAFETY: `offset` is within the mapping (asserted).
        let at = unsafe { self.ptr.add(offset) };
        // SAFETY: in bounds of the mapping (asserted); no GPU access to
        // these bytes (the contract); `data` is not in the mapping (a
        // shared borrow of it would need this same contract).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len()) };
    }

    /// Copies the buffer's bytes at `offset` into `out` (in bounds).
    ///
    /// # Safety
    /// No GPU work that writes these bytes is in flight, and the work that
    /// wrote them completed (waited for on the host).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) unsafe fn read(&self, offset: usize, out: &mut [u8]) {
        assert!(offset <= self.len && out.len() <= self.len - offset);
        // SAFETY: `offset` is within the mapping (asserted).
        let at = unsafe { self.ptr.add(offset) };
        // SAFETY: in bounds (asserted); no GPU write in flight (the
        // contract).
        unsafe { std::ptr::copy_nonoverlapping(at, out.as_mut_ptr(), out.len()) };
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        let d = &self.gpu.device;
        if !self.ptr.is_null() {
            // SAFETY: mapped in `new`, unmapped once.
            unsafe { d.unmap_memory(self.memory) };
        }
        // SAFETY: made in `new`; no submission that uses it is in flight
        // (its users wait for them before dropping it).
        unsafe { d.destroy_buffer(self.raw, None) };
        // SAFETY: as above; freed once, after the buffer.
        unsafe { d.free_memory(self.memory, None) };
    }
}
