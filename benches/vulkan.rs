//! The Vulkan device (feature `vulkan`), on whatever device 0 the loader
//! finds (Mesa's lavapipe where there is no GPU), without validation:
//!
//! - `vulkan_execute`: host time per `Queue::execute`, against a
//!   hand-written `ash` loop on its own instance, device, queue and
//!   timeline semaphore, doing the same submissions. Each side submits
//!   chains of [`CHAIN`] submissions, each one dispatch of the `COUNT`
//!   kernel (one workgroup, an `atomicAdd` on a 4-byte buffer), timed from
//!   the first submit until the last one returns; then, outside the timed
//!   part, the host waits for the last value. Only signals, no waits: a
//!   frame loop on one queue relies on the queue's order (fenceline opens
//!   every submission with a barrier on earlier work) and waits on the host
//!   for an old frame's value before reusing its resources, which is the
//!   wait here between chains.
//!   - `fenceline`: `q.execute(&[], &[(&s, n)], &[&cb])` of one ended
//!     command buffer holding the dispatch. On the calling thread that is
//!     the pending queue's issue, a command buffer of the queue's ring
//!     (checked free against the timeline value last read, read again with
//!     `vkGetSemaphoreCounterValue` only when that does not show it), its
//!     pool reset and re-recorded (a barrier on earlier work, bind, push
//!     descriptor, dispatch, a barrier to the host), one `vkQueueSubmit2`
//!     signalling the queue's timeline value, the device signal published
//!     on `s`; the queue's completion thread waits for the value and
//!     signals `s`.
//!   - `ash_loop`: a ring of [`CHAIN`] command buffers (one pool each);
//!     per submission `vkWaitSemaphores` for the slot's previous value, the
//!     pool reset, the same commands and barriers recorded, one
//!     `vkQueueSubmit2` signalling the next timeline value.
//!   - `ash_loop_host_waiter` (a diagnostic, not the target's peer): the
//!     `ash` loop plus a thread that waits on the host for every value
//!     submitted, one `vkWaitSemaphores` each, woken (unparked) after each
//!     submit, as fenceline's completion thread is: what that thread alone
//!     costs the submitting thread.
//!
//!   Each figure is per submission.
//! - `vulkan_two_queue_chain`: a chain of links alternating between two
//!   queues of one device (q0, q1, q0, ...), each link the same dispatch
//!   waiting for the previous link's signal on one semaphore, timed from
//!   the first execute until the last link's signal is reached on the host:
//!   with the waits met on the GPU (`device_waits: true`) and on the host
//!   (`device_waits: false`), for chains of 8 and 32 links (8: as many
//!   device signals as a semaphore remembers at once; a longer chain
//!   submitted ahead keeps its newest). Each figure is per chain; the run prints how many
//!   waits the GPU met (a wait already reached when its link is submitted
//!   is met by neither). The floor, `ash_gpu_waits` and `ash_host_waits`:
//!   the same chains written with `ash`, on two timelines of one hardware
//!   queue, each link waiting for the one before in its `vkQueueSubmit2`
//!   or in a `vkWaitSemaphores` before it.
//!
//! Skipped, the reason printed, when `Device::vulkan(0)` is `Unavailable`.
//! Run with `cargo bench --features vulkan --bench vulkan`.
#![deny(
    clippy::undocumented_unsafe_blocks,
    clippy::multiple_unsafe_ops_per_block
)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ash::vk;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use crossbeam_utils::sync::{Parker, Unparker};
use fenceline::{
    CommandBuffer, Device, ErrorKind, Semaphore, SpirvBinding, SpirvKernel, VulkanConfig,
};

#[path = "../tests/common/vulkan.rs"]
mod vulkan;

const LONG: Duration = Duration::from_secs(10);

/// Submissions per timed chain in `vulkan_execute` (below fenceline's ring
/// of 256 command buffers, and the `ash` loop's ring size: neither side
/// waits for the GPU inside the timed part).
const CHAIN: usize = 64;

/// Links per chain in `vulkan_two_queue_chain`: 8, as many device
/// signals as a semaphore remembers at once (`DEVICE_SIGNALS`), and 32.
const LINKS: [u64; 2] = [8, 32];

/// Whether there is a Vulkan device; prints why not, once.
fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| match Device::vulkan(0) {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::Unavailable => {
            eprintln!("vulkan benches skipped: {e}");
            false
        }
        Err(e) => panic!("Device::vulkan(0): {e}"),
    })
}

fn config(queues: usize, device_waits: bool) -> VulkanConfig {
    VulkanConfig {
        queues,
        validation: false,
        device_waits,
        ..Default::default()
    }
}

/// The `COUNT` kernel loaded on `device`, its 4-byte counter, and an ended
/// command buffer holding one dispatch of one workgroup of it.
fn count_dispatch(device: &Device) -> (SpirvKernel, fenceline::Buffer, CommandBuffer) {
    let kernel = vulkan::count_kernel(device);
    let counter = device.buffer(4).unwrap();
    let mut cb = device.command_buffer().unwrap();
    cb.dispatch_spirv(&kernel, [1, 1, 1], &[SpirvBinding::Buffer(&counter)], &[])
        .unwrap();
    cb.end().unwrap();
    (kernel, counter, cb)
}

fn read_count(counter: &fenceline::Buffer) -> u32 {
    let mut out = [0u8; 4];
    counter.read(0, &mut out).unwrap();
    u32::from_ne_bytes(out)
}

fn execute(c: &mut Criterion) {
    if !available() {
        return;
    }
    let mut group = c.benchmark_group("vulkan_execute");
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));

    {
        let device = Device::vulkan_with(0, config(1, true)).unwrap();
        let (_kernel, counter, cb) = count_dispatch(&device);
        let q = device.queue(0).unwrap();
        let s = Semaphore::new(0);
        let mut n = 0u64;
        group.bench_function("fenceline", |b| {
            b.iter_custom(|iters| {
                let mut host = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let k = left.min(CHAIN as u64);
                    let t = Instant::now();
                    for _ in 0..k {
                        n += 1;
                        q.execute(&[], &[(&s, n)], &[&cb]).unwrap();
                    }
                    host += t.elapsed();
                    s.wait(n, LONG).unwrap();
                    left -= k;
                }
                host
            })
        });
        s.wait(n, LONG).unwrap();
        assert_eq!(
            u64::from(read_count(&counter)),
            n,
            "fenceline: dispatches run"
        );
    }

    for (name, waiter) in [("ash_loop", false), ("ash_loop_host_waiter", true)] {
        let mut peer = AshLoop::new(&vulkan::spirv(vulkan::COUNT), waiter);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let peer = &mut peer;
                let mut host = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let k = left.min(CHAIN as u64);
                    let t = Instant::now();
                    for _ in 0..k {
                        peer.submit();
                    }
                    host += t.elapsed();
                    peer.wait_last();
                    left -= k;
                }
                host
            })
        });
        peer.wait_last();
        assert_eq!(
            u64::from(peer.count()),
            peer.submitted,
            "ash loop: dispatches run"
        );
    }
    group.finish();
}

fn two_queue_chain(c: &mut Criterion) {
    if !available() {
        return;
    }
    let mut group = c.benchmark_group("vulkan_two_queue_chain");
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for (name, device_waits) in [("device_waits", true), ("host_waits", false)] {
        let device = Device::vulkan_with(0, config(2, device_waits)).unwrap();
        let (_kernel, counter, cb) = count_dispatch(&device);
        let qs = [device.queue(0).unwrap(), device.queue(1).unwrap()];
        let s = Semaphore::new(0);
        let mut n = 0u64;
        for links in LINKS {
            let (n0, gpu0) = (n, device.stats().device_waits);
            group.bench_function(BenchmarkId::new(name, links), |b| {
                b.iter(|| {
                    for _ in 0..links {
                        qs[(n % 2) as usize]
                            .execute(&[(&s, n)], &[(&s, n + 1)], &[&cb])
                            .unwrap();
                        n += 1;
                    }
                    s.wait(n, LONG).unwrap();
                })
            });
            // What share of the waits the GPU met (the first link's wait
            // is always reached already).
            eprintln!(
                "vulkan_two_queue_chain/{name}/{links}: {} links, {} waits met on the GPU",
                n - n0,
                device.stats().device_waits - gpu0
            );
        }
        assert_eq!(u64::from(read_count(&counter)), n, "{name}: dispatches run");
    }
    // The floor: the same chains written with `ash`, on two timelines of
    // one hardware queue, each link waiting for the previous one on the
    // GPU (`vkQueueSubmit2` with a wait) or on the host (`vkWaitSemaphores`
    // before the next submit).
    for (name, gpu) in [("ash_gpu_waits", true), ("ash_host_waits", false)] {
        let mut peer = AshLoop::new(&vulkan::spirv(vulkan::COUNT), false);
        for links in LINKS {
            group.bench_function(BenchmarkId::new(name, links), |b| {
                b.iter(|| {
                    let mut prev = None;
                    for k in 0..links {
                        let t = (k % 2) as usize;
                        if let (false, Some((pt, pv))) = (gpu, prev) {
                            peer.wait_for(pt, pv);
                        }
                        let v = peer.submit_on(t, if gpu { prev } else { None });
                        prev = Some((t, v));
                    }
                    if let Some((t, v)) = prev {
                        peer.wait_for(t, v);
                    }
                })
            });
        }
        assert_eq!(
            u64::from(peer.count()),
            peer.submitted,
            "{name}: dispatches run"
        );
    }
    group.finish();
}

/// One slot of the `ash` loop's ring: a pool, its command buffer, and the
/// timeline and value its last submission signals.
struct Slot {
    pool: vk::CommandPool,
    cb: vk::CommandBuffer,
    last: Option<(vk::Semaphore, u64)>,
}

/// The peer: the same submissions written with `ash` directly, on an
/// instance and device of its own (device 0, its first compute-capable
/// queue family, the features fenceline enables).
struct AshLoop {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    push: ash::khr::push_descriptor::Device,
    queue: vk::Queue,
    /// Two timelines, as two fenceline queues have (both submit to the
    /// one hardware queue here, as fenceline's do on lavapipe).
    timelines: [vk::Semaphore; 2],
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    mapped: *const u32,
    ring: Vec<Slot>,
    /// Submissions made.
    submitted: u64,
    /// The last value submitted to signal each timeline.
    values: [u64; 2],
    /// A thread that waits on the host for every value submitted, one
    /// `vkWaitSemaphores` each, as a fenceline queue's completion thread
    /// does (`ash_loop_host_waiter`).
    waiter: Option<Waiter>,
}

/// What the submitting thread and the waiter share.
struct WaiterShared {
    submitted: AtomicU64,
    stop: AtomicBool,
}

struct Waiter {
    shared: Arc<WaiterShared>,
    unparker: Unparker,
    thread: Option<JoinHandle<()>>,
}

impl Waiter {
    fn start(device: ash::Device, timeline: vk::Semaphore) -> Waiter {
        let shared = Arc::new(WaiterShared {
            submitted: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let parker = Parker::new();
        let unparker = parker.unparker().clone();
        let s = shared.clone();
        let thread = std::thread::spawn(move || {
            let mut done = 0u64;
            loop {
                // Acquire: pairs with the Release store after each submit.
                if done < s.submitted.load(Ordering::Acquire) {
                    if wait_value(&device, timeline, done + 1, 100_000_000) {
                        done += 1;
                    }
                    continue;
                }
                if s.stop.load(Ordering::Acquire) {
                    return;
                }
                parker.park();
            }
        });
        Waiter {
            shared,
            unparker,
            thread: Some(thread),
        }
    }

    /// Joins the thread once every value submitted is reached.
    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.unparker.unpark();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// Waits on the host for `timeline` to reach `value`; `false` on timeout.
fn wait_value(device: &ash::Device, timeline: vk::Semaphore, value: u64, timeout_ns: u64) -> bool {
    let semaphores = [timeline];
    let values = [value];
    let info = vk::SemaphoreWaitInfo::default()
        .semaphores(&semaphores)
        .values(&values);
    // SAFETY: a live semaphore of this device (the waiter is joined
    // before it is destroyed); `info` lives for the call.
    match unsafe { device.wait_semaphores(&info, timeout_ns) } {
        Ok(()) => true,
        Err(vk::Result::TIMEOUT) => false,
        Err(r) => panic!("vkWaitSemaphores: {r:?}"),
    }
}

impl AshLoop {
    fn new(spirv: &[u32], waiter: bool) -> AshLoop {
        // SAFETY: loads the system's Vulkan loader (its initialization is
        // safe from any thread).
        let entry = unsafe { ash::Entry::load() }.expect("the Vulkan loader");
        let app = vk::ApplicationInfo::default()
            .application_name(c"fenceline-bench-peer")
            .api_version(vk::API_VERSION_1_3);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: every pointer in `info` lives for the call.
        let instance = unsafe { entry.create_instance(&info, None) }.unwrap();
        // SAFETY: a live instance.
        let physical = unsafe { instance.enumerate_physical_devices() }.unwrap()[0];
        // SAFETY: a physical device of this instance.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let family = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .expect("a compute queue family") as u32;
        let priorities = [1.0f32];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let mut f13 = vk::PhysicalDeviceVulkan13Features::default().synchronization2(true);
        let extensions = [ash::khr::push_descriptor::NAME.as_ptr()];
        let robust = vk::PhysicalDeviceFeatures::default().robust_buffer_access(true);
        let info = vk::DeviceCreateInfo::default()
            .enabled_features(&robust)
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&extensions)
            .push_next(&mut f12)
            .push_next(&mut f13);
        // SAFETY: a physical device of this instance; every pointer in
        // `info` lives for the call.
        let device = unsafe { instance.create_device(physical, &info, None) }.unwrap();
        // SAFETY: queue 0 of `family` was requested above.
        let queue = unsafe { device.get_device_queue(family, 0) };
        let push = ash::khr::push_descriptor::Device::new(&instance, &device);

        let timelines = [(); 2].map(|()| {
            let mut kind = vk::SemaphoreTypeCreateInfo::default()
                .semaphore_type(vk::SemaphoreType::TIMELINE)
                .initial_value(0);
            let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
            // SAFETY: a live device; `info` lives for the call.
            unsafe { device.create_semaphore(&info, None) }.unwrap()
        });

        // The pipeline, as `driver/pipeline.rs` makes it: one storage
        // buffer pushed as a descriptor, no push constants.
        let info = vk::ShaderModuleCreateInfo::default().code(spirv);
        // SAFETY: a live device; naga wrote the module from WGSL it
        // validated.
        let module = unsafe { device.create_shader_module(&info, None) }.unwrap();
        let binding = [vk::DescriptorSetLayoutBinding::default()
            .binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(1)
            .stage_flags(vk::ShaderStageFlags::COMPUTE)];
        let info = vk::DescriptorSetLayoutCreateInfo::default()
            .flags(vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR)
            .bindings(&binding);
        // SAFETY: a live device; `info` lives for the call.
        let set_layout = unsafe { device.create_descriptor_set_layout(&info, None) }.unwrap();
        let sets = [set_layout];
        let info = vk::PipelineLayoutCreateInfo::default().set_layouts(&sets);
        // SAFETY: a live device; `info` lives for the call.
        let layout = unsafe { device.create_pipeline_layout(&info, None) }.unwrap();
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout)];
        // SAFETY: a live device; `info` lives for the call.
        let made =
            unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
        let pipeline = made.map_err(|(_, r)| r).unwrap()[0];

        // The counter: 4 bytes of host-visible, coherent memory, mapped.
        let info = vk::BufferCreateInfo::default()
            .size(4)
            .usage(vk::BufferUsageFlags::STORAGE_BUFFER)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a live device; `info` lives for the call.
        let buffer = unsafe { device.create_buffer(&info, None) }.unwrap();
        // SAFETY: a buffer of this device.
        let needs = unsafe { device.get_buffer_memory_requirements(buffer) };
        // SAFETY: a physical device of this instance.
        let kinds = unsafe { instance.get_physical_device_memory_properties(physical) };
        let wanted = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let kind = (0..kinds.memory_type_count)
            .find(|&i| {
                needs.memory_type_bits & (1 << i) != 0
                    && kinds.memory_types[i as usize]
                        .property_flags
                        .contains(wanted)
            })
            .expect("host-visible, coherent memory");
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(needs.size)
            .memory_type_index(kind);
        // SAFETY: a live device; `alloc` lives for the call.
        let memory = unsafe { device.allocate_memory(&alloc, None) }.unwrap();
        // SAFETY: fresh memory of a size and type the buffer accepts.
        unsafe { device.bind_buffer_memory(buffer, memory, 0) }.unwrap();
        // SAFETY: host-visible memory, not mapped before; unmapped in drop.
        let ptr =
            unsafe { device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                .unwrap();
        let mapped = ptr.cast::<u32>().cast_const();
        // SAFETY: 4 bytes of the mapping, aligned (a mapping is aligned to
        // minMemoryMapAlignment); no GPU work in flight yet.
        unsafe { ptr.cast::<u32>().write_volatile(0) };

        let ring = (0..CHAIN)
            .map(|_| {
                let info = vk::CommandPoolCreateInfo::default()
                    .queue_family_index(family)
                    .flags(vk::CommandPoolCreateFlags::TRANSIENT);
                // SAFETY: a live device; `info` lives for the call.
                let pool = unsafe { device.create_command_pool(&info, None) }.unwrap();
                let alloc = vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: a pool of this device; `alloc` lives for the call.
                let cb = unsafe { device.allocate_command_buffers(&alloc) }.unwrap()[0];
                Slot {
                    pool,
                    cb,
                    last: None,
                }
            })
            .collect();
        let waiter = waiter.then(|| Waiter::start(device.clone(), timelines[0]));
        AshLoop {
            _entry: entry,
            instance,
            device,
            push,
            queue,
            timelines,
            module,
            set_layout,
            layout,
            pipeline,
            buffer,
            memory,
            mapped,
            ring,
            submitted: 0,
            values: [0; 2],
            waiter,
        }
    }

    /// One submission signalling timeline 0.
    fn submit(&mut self) {
        self.submit_on(0, None);
    }

    /// One submission: the next slot, once its last submission is done,
    /// re-recorded with the dispatch and fenceline's barriers, submitted
    /// waiting on the GPU for `wait` (a timeline and value), signalling
    /// timeline `t`'s next value, which it returns.
    fn submit_on(&mut self, t: usize, wait: Option<(usize, u64)>) -> u64 {
        let value = self.values[t] + 1;
        let d = &self.device;
        let slot = &mut self.ring[(self.submitted % CHAIN as u64) as usize];
        if let Some((timeline, last)) = slot.last {
            assert!(wait_value(d, timeline, last, u64::MAX));
        }
        let cb = slot.cb;
        // SAFETY: the pool's buffer is not pending: its last submission is
        // done (waited for above).
        unsafe { d.reset_command_pool(slot.pool, vk::CommandPoolResetFlags::empty()) }.unwrap();
        let info = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a reset buffer of this device.
        unsafe { d.begin_command_buffer(cb, &info) }.unwrap();
        let work = vk::PipelineStageFlags2::TRANSFER | vk::PipelineStageFlags2::COMPUTE_SHADER;
        // `Recorder::barrier_after_earlier_work`.
        barrier(d, cb, vk::PipelineStageFlags2::ALL_COMMANDS, work);
        // SAFETY: a recording buffer and a pipeline of this device.
        unsafe { d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, self.pipeline) };
        let buffers = [vk::DescriptorBufferInfo::default()
            .buffer(self.buffer)
            .offset(0)
            .range(vk::WHOLE_SIZE)];
        let writes = [vk::WriteDescriptorSet::default()
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&buffers)];
        // SAFETY: as above; the pipeline's push-descriptor layout; the
        // writes live for the call.
        unsafe {
            self.push.cmd_push_descriptor_set(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &writes,
            )
        };
        // SAFETY: as above, the pipeline and its binding set.
        unsafe { d.cmd_dispatch(cb, 1, 1, 1) };
        // `Recorder::barrier_to_host`, as `VulkanBackend::record` does.
        barrier(d, cb, work, vk::PipelineStageFlags2::HOST);
        // SAFETY: a recording buffer of this device.
        unsafe { d.end_command_buffer(cb) }.unwrap();
        let buffers = [vk::CommandBufferSubmitInfo::default().command_buffer(cb)];
        let signals = [vk::SemaphoreSubmitInfo::default()
            .semaphore(self.timelines[t])
            .value(value)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let waits = wait.map(|(w, v)| {
            [vk::SemaphoreSubmitInfo::default()
                .semaphore(self.timelines[w])
                .value(v)
                .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)]
        });
        let submit = [vk::SubmitInfo2::default()
            .command_buffer_infos(&buffers)
            .wait_semaphore_infos(waits.as_ref().map_or(&[][..], |w| &w[..]))
            .signal_semaphore_infos(&signals)];
        // SAFETY: a queue of this device, used by this thread alone; an
        // ended buffer; every pointer lives for the call.
        unsafe { d.queue_submit2(self.queue, &submit, vk::Fence::null()) }.unwrap();
        slot.last = Some((self.timelines[t], value));
        self.submitted += 1;
        self.values[t] = value;
        if let (Some(w), 0) = (&self.waiter, t) {
            // Release: pairs with the waiter's Acquire load.
            w.shared.submitted.store(value, Ordering::Release);
            w.unparker.unpark();
        }
        value
    }

    /// Waits on the host for timeline `t` to reach `value`.
    fn wait_for(&self, t: usize, value: u64) {
        assert!(wait_value(
            &self.device,
            self.timelines[t],
            value,
            LONG.as_nanos() as u64
        ));
    }

    /// Waits on the host for the last value submitted to timeline 0.
    fn wait_last(&self) {
        self.wait_for(0, self.values[0]);
    }

    /// The counter, once every submission is done (`wait_last`).
    fn count(&self) -> u32 {
        // SAFETY: 4 bytes of the live mapping; the GPU work that wrote
        // them is done (the caller waited), and its last barrier made the
        // writes visible to the host.
        unsafe { self.mapped.read_volatile() }
    }
}

/// A memory barrier, as `Recorder::memory_barrier` records it.
fn barrier(
    d: &ash::Device,
    cb: vk::CommandBuffer,
    src: vk::PipelineStageFlags2,
    dst: vk::PipelineStageFlags2,
) {
    let access = vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE;
    let barrier = [vk::MemoryBarrier2::default()
        .src_stage_mask(src)
        .src_access_mask(access)
        .dst_stage_mask(dst)
        .dst_access_mask(access)];
    let info = vk::DependencyInfo::default().memory_barriers(&barrier);
    // SAFETY: a recording buffer of this device; `info` lives for the call.
    unsafe { d.cmd_pipeline_barrier2(cb, &info) };
}

impl Drop for AshLoop {
    fn drop(&mut self) {
        if let Some(w) = &mut self.waiter {
            w.stop();
        }
        let d = &self.device;
        // SAFETY: a live device; after this nothing of it is in use.
        unsafe { d.device_wait_idle() }.unwrap();
        for slot in &self.ring {
            // SAFETY: made in `new`, not pending (the device is idle),
            // destroyed once (its buffer with it).
            unsafe { d.destroy_command_pool(slot.pool, None) };
        }
        // SAFETY: made in `new`, unused now, destroyed once.
        unsafe { d.destroy_pipeline(self.pipeline, None) };
        // SAFETY: as above.
        unsafe { d.destroy_pipeline_layout(self.layout, None) };
        // SAFETY: as above.
        unsafe { d.destroy_descriptor_set_layout(self.set_layout, None) };
        // SAFETY: as above.
        unsafe { d.destroy_shader_module(self.module, None) };
        for &timeline in &self.timelines {
            // SAFETY: as above.
            unsafe { d.destroy_semaphore(timeline, None) };
        }
        // SAFETY: as above.
        unsafe { d.destroy_buffer(self.buffer, None) };
        // SAFETY: mapped in `new`, unmapped once; nothing reads the mapping
        // after this.
        unsafe { d.unmap_memory(self.memory) };
        // SAFETY: as above; freed once, after its buffer.
        unsafe { d.free_memory(self.memory, None) };
        // SAFETY: everything made from it is destroyed above.
        unsafe { d.destroy_device(None) };
        // SAFETY: its only device is destroyed above.
        unsafe { self.instance.destroy_instance(None) };
    }
}

criterion_group!(benches, execute, two_queue_chain);
criterion_main!(benches);
