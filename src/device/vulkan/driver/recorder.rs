//! A queue's recorder of dispatches, transfers and barriers.

use std::sync::Arc;

use ash::vk;

use super::{internal, Gpu, MappedBuffer, Pipeline, Timeline, MAX_DISPATCH_BUFFERS};
use crate::error::{Error, ErrorKind};

/// What names a `VkBuffer` for a recorded command: a [`MappedBuffer`],
/// or the handle itself (a fenceline buffer's, `HostMem::mapped_handle`)
/// with the buffer's length.
pub(crate) trait RawBuffer {
    fn raw(&self) -> vk::Buffer;
    /// Bytes a kernel sees (`arrayLength`, and where `robustBufferAccess`
    /// bounds its accesses): the buffer's length, which for a pooled
    /// buffer is less than the memory behind it.
    fn len(&self) -> usize;
}

impl RawBuffer for MappedBuffer {
    fn raw(&self) -> vk::Buffer {
        self.raw
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl<T: RawBuffer + ?Sized> RawBuffer for &T {
    fn raw(&self) -> vk::Buffer {
        (**self).raw()
    }
    fn len(&self) -> usize {
        (**self).len()
    }
}

impl RawBuffer for (vk::Buffer, usize) {
    fn raw(&self) -> vk::Buffer {
        self.0
    }
    fn len(&self) -> usize {
        self.1
    }
}

/// A command pool and one primary command buffer of a queue family,
/// recorded, submitted and reset again: a queue's recorder.
pub(crate) struct Recorder {
    gpu: Arc<Gpu>,
    pool: vk::CommandPool,
    pub(crate) buffer: vk::CommandBuffer,
}

impl Recorder {
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<Recorder, Error> {
        let d = &gpu.device;
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(gpu.family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: a live device; `info` lives for the call.
        let pool = unsafe { d.create_command_pool(&info, None) }
            .map_err(|r| internal("vkCreateCommandPool", r))?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: a pool of this device; `alloc` lives for the call.
        let buffers = unsafe { d.allocate_command_buffers(&alloc) };
        let buffer = match buffers {
            Ok(b) => b[0],
            Err(r) => {
                // SAFETY: made above, unused.
                unsafe { d.destroy_command_pool(pool, None) };
                return Err(internal("vkAllocateCommandBuffers", r));
            }
        };
        Ok(Recorder {
            gpu: gpu.clone(),
            pool,
            buffer,
        })
    }

    /// Resets the pool (the work last submitted from it completed: the
    /// caller waited for it) and begins a one-time-submit recording.
    pub(crate) fn begin(&mut self) -> Result<(), Error> {
        let d = &self.gpu.device;
        // SAFETY: the pool's buffer is not pending (`&mut self`, and the
        // caller waited for its last submission).
        unsafe { d.reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty()) }
            .map_err(|r| internal("vkResetCommandPool", r))?;
        let info = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a reset buffer of this pool.
        unsafe { d.begin_command_buffer(self.buffer, &info) }
            .map_err(|r| internal("vkBeginCommandBuffer", r))
    }

    /// Fills `len` bytes at `offset` (multiples of 4) with `word`.
    pub(crate) fn fill(&mut self, buffer: impl RawBuffer, offset: usize, len: usize, word: u32) {
        // SAFETY: a recording buffer of this device (`begin`); the buffer
        // was made with TRANSFER_DST; the range's validity is the
        // validation layer's to check.
        unsafe {
            self.gpu.device.cmd_fill_buffer(
                self.buffer,
                buffer.raw(),
                offset as u64,
                len as u64,
                word,
            )
        };
    }

    /// Copies `data` (at most 65536 bytes, a multiple of 4) into
    /// `buffer` at `offset` (a multiple of 4), from the command buffer.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn update(&mut self, buffer: impl RawBuffer, offset: usize, data: &[u8]) {
        // SAFETY: as in `fill`; the data is copied into the command
        // buffer by the call.
        unsafe {
            self.gpu
                .device
                .cmd_update_buffer(self.buffer, buffer.raw(), offset as u64, data)
        };
    }

    /// Copies `len` bytes from `src` at `src_offset` to `dst` at
    /// `dst_offset`.
    pub(crate) fn copy(
        &mut self,
        src: impl RawBuffer,
        src_offset: usize,
        dst: impl RawBuffer,
        dst_offset: usize,
        len: usize,
    ) {
        let region = [vk::BufferCopy::default()
            .src_offset(src_offset as u64)
            .dst_offset(dst_offset as u64)
            .size(len as u64)];
        // SAFETY: as in `fill` (TRANSFER_SRC and TRANSFER_DST buffers).
        unsafe {
            self.gpu
                .device
                .cmd_copy_buffer(self.buffer, src.raw(), dst.raw(), &region)
        };
    }

    /// Dispatches `groups` workgroups of `pipeline`, its bindings set to
    /// `buffers` (one each) and its push constants to `push`.
    pub(crate) fn dispatch(
        &mut self,
        pipeline: &Pipeline,
        groups: [u32; 3],
        buffers: &[impl RawBuffer],
        push: &[u8],
    ) -> Result<(), Error> {
        if buffers.len() != pipeline.bindings as usize || buffers.len() > MAX_DISPATCH_BUFFERS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a dispatch of {} buffers: its pipeline binds {} (at most {MAX_DISPATCH_BUFFERS})",
                    buffers.len(),
                    pipeline.bindings
                ),
            ));
        }
        let d = &self.gpu.device;
        // On the stack: recording a dispatch allocates nothing.
        let mut infos = [[vk::DescriptorBufferInfo::default()]; MAX_DISPATCH_BUFFERS];
        for (info, b) in infos.iter_mut().zip(buffers) {
            info[0] = vk::DescriptorBufferInfo::default()
                .buffer(b.raw())
                .offset(0)
                .range(b.len() as u64);
        }
        let mut writes = [vk::WriteDescriptorSet::default(); MAX_DISPATCH_BUFFERS];
        for (i, (write, info)) in writes.iter_mut().zip(&infos).enumerate() {
            *write = vk::WriteDescriptorSet::default()
                .dst_binding(i as u32)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(info);
        }
        let writes = &writes[..buffers.len()];
        // SAFETY: a recording buffer of this device; a pipeline of it;
        // every pointer lives for the calls (the driver copies what it
        // keeps).
        unsafe {
            d.cmd_bind_pipeline(
                self.buffer,
                vk::PipelineBindPoint::COMPUTE,
                pipeline.pipeline,
            )
        };
        // SAFETY: as above; a push-descriptor layout of this pipeline.
        unsafe {
            self.gpu.push.cmd_push_descriptor_set(
                self.buffer,
                vk::PipelineBindPoint::COMPUTE,
                pipeline.layout,
                0,
                writes,
            )
        };
        if !push.is_empty() {
            // SAFETY: as above; the range was declared by the layout.
            unsafe {
                d.cmd_push_constants(
                    self.buffer,
                    pipeline.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    push,
                )
            };
        }
        // SAFETY: as above, with the pipeline and its bindings set.
        unsafe { d.cmd_dispatch(self.buffer, groups[0], groups[1], groups[2]) };
        Ok(())
    }

    /// A barrier between what was recorded before and what comes after:
    /// every transfer and compute write before is visible to every read
    /// and write after (a fenceline command buffer's `barrier`).
    pub(crate) fn barrier(&mut self) {
        let stages = vk::PipelineStageFlags2::TRANSFER | vk::PipelineStageFlags2::COMPUTE_SHADER;
        self.memory_barrier(stages, stages);
    }

    /// The barrier that opens a submission: the writes of every command
    /// submitted before on the queue (an action ordered before this one on
    /// the host, whose wait was met there) are visible to this one's.
    pub(crate) fn barrier_after_earlier_work(&mut self) {
        let stages = vk::PipelineStageFlags2::TRANSFER | vk::PipelineStageFlags2::COMPUTE_SHADER;
        self.memory_barrier(vk::PipelineStageFlags2::ALL_COMMANDS, stages);
    }

    /// The barrier that closes a submission: its writes are visible to
    /// the host once its signal is seen there (`Buffer::read`).
    pub(crate) fn barrier_to_host(&mut self) {
        let stages = vk::PipelineStageFlags2::TRANSFER | vk::PipelineStageFlags2::COMPUTE_SHADER;
        self.memory_barrier(stages, vk::PipelineStageFlags2::HOST);
    }

    fn memory_barrier(&mut self, src: vk::PipelineStageFlags2, dst: vk::PipelineStageFlags2) {
        let access = vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE;
        let barrier = [vk::MemoryBarrier2::default()
            .src_stage_mask(src)
            .src_access_mask(access)
            .dst_stage_mask(dst)
            .dst_access_mask(access)];
        let info = vk::DependencyInfo::default().memory_barriers(&barrier);
        // SAFETY: a recording buffer of this device; `info` lives for the
        // call.
        unsafe { self.gpu.device.cmd_pipeline_barrier2(self.buffer, &info) };
    }

    /// Ends the recording and submits it to `queue`, signalling `signal`
    /// to its value when done.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn submit(
        &mut self,
        queue: vk::Queue,
        signal: (&Timeline, u64),
    ) -> Result<(), Error> {
        self.end()?;
        submit(&self.gpu, queue, Some(self), &[], signal)
    }

    /// Ends the recording.
    pub(crate) fn end(&mut self) -> Result<(), Error> {
        // SAFETY: a recording buffer of this device.
        unsafe { self.gpu.device.end_command_buffer(self.buffer) }
            .map_err(|r| internal("vkEndCommandBuffer", r))
    }
}

/// Submits `recorder`'s ended buffer (or no commands) to `queue`: after
/// `waits` (timeline semaphores and values), signalling `signal`.
///
/// The caller holds `queue`'s external synchronization (one thread at a
/// time submits to it).
pub(crate) fn submit(
    gpu: &Gpu,
    queue: vk::Queue,
    recorder: Option<&Recorder>,
    waits: &[vk::SemaphoreSubmitInfo<'_>],
    signal: (&Timeline, u64),
) -> Result<(), Error> {
    let buffers =
        recorder.map(|r| [vk::CommandBufferSubmitInfo::default().command_buffer(r.buffer)]);
    let signals = [vk::SemaphoreSubmitInfo::default()
        .semaphore(signal.0.raw)
        .value(signal.1)
        .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
    let submit = [vk::SubmitInfo2::default()
        .command_buffer_infos(buffers.as_ref().map_or(&[][..], |b| &b[..]))
        .wait_semaphore_infos(waits)
        .signal_semaphore_infos(&signals)];
    // SAFETY: a queue of this device used by one thread at a time (the
    // caller's), an ended buffer; every pointer lives for the call.
    unsafe { gpu.device.queue_submit2(queue, &submit, vk::Fence::null()) }
        .map_err(|r| internal("vkQueueSubmit2", r))
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // SAFETY: made in `new`; its buffer is not pending (its users wait
        // for their submissions before dropping it); destroyed once (its
        // buffer with it).
        unsafe { self.gpu.device.destroy_command_pool(self.pool, None) };
    }
}
