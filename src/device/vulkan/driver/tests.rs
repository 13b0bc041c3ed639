//! The driver layer on a real driver: Mesa's lavapipe in CI (installed by
//! `.ci/run`), or whatever Vulkan device the machine has, always with the
//! validation layer (synchronization validation on). Any validation
//! message fails a test. With `FENCELINE_VULKAN` set (CI sets it), a
//! driver or layer that cannot be had fails the tests; without it they
//! are skipped with a note.

use std::sync::{Arc, Mutex, MutexGuard};

use super::*;

/// The messenger's record is process-wide: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub(super) const SECOND: u64 = 1_000_000_000;

/// The first device with validation on, or `None` (skipped) where none
/// can be had and `FENCELINE_VULKAN` is unset.
pub(super) fn gpu() -> Option<(MutexGuard<'static, ()>, Arc<Gpu>)> {
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let required = std::env::var_os("FENCELINE_VULKAN").is_some();
    let config = InstanceConfig {
        validation: true,
        loader: None,
    };
    let opened = Instance::new(&config).and_then(|i| Gpu::new(&Arc::new(i), 0, &[1.0, 1.0]));
    match opened {
        Ok(gpu) => {
            let _ = validation_messages();
            Some((guard, Arc::new(gpu)))
        }
        Err(e) if required => {
            panic!("FENCELINE_VULKAN is set, but no Vulkan device with validation: {e}")
        }
        Err(e) => {
            eprintln!("skipped (set FENCELINE_VULKAN to require it): {e}");
            None
        }
    }
}

pub(super) fn assert_no_messages() {
    let messages = validation_messages();
    assert!(messages.is_empty(), "validation messages: {messages:#?}");
}

#[test]
fn opens_a_device_with_a_compute_queue_under_validation() {
    let Some((_one, gpu)) = gpu() else { return };
    assert!(!gpu.queues.is_empty());
    assert!(!gpu.name.is_empty());
    drop(gpu);
    assert_no_messages();
}

// Catches: a wait or signal of a submission not reaching the GPU's
// timeline semantics (the value only grows, a submission waits on the GPU
// for another's value). Mutation checked: the submission without its wait
// (its signal of 5 then happens at once: `b` reads 5 before `a` is
// signalled).
#[test]
fn a_submission_waits_on_the_gpu_and_signals_a_timeline() {
    let Some((_one, gpu)) = gpu() else { return };
    {
        let a = Timeline::new(&gpu, 0).unwrap();
        let b = Timeline::new(&gpu, 0).unwrap();
        submit_wait_signal(&gpu, gpu.queues[0], (&a, 1), (&b, 5)).unwrap();
        // The GPU waits for `a`: `b` stays where it was.
        assert!(!b.wait(5, SECOND / 20).unwrap());
        assert_eq!(b.value().unwrap(), 0);
        a.signal(1).unwrap();
        assert!(b.wait(5, 5 * SECOND).unwrap());
        assert_eq!(b.value().unwrap(), 5);
        // SAFETY: a queue of this device, used by this thread alone.
        unsafe { gpu.device.queue_wait_idle(gpu.queues[0]) }.unwrap();
    }
    drop(gpu);
    assert_no_messages();
}

// Catches: a messenger that records nothing (every "no message" check
// above would then pass for nothing). A binary semaphore made with a
// non-zero initial value is invalid
// (VUID-VkSemaphoreTypeCreateInfo-semaphoreType-03279) and harmless to
// the driver, which ignores the value. Mutation checked: the callback
// recording nothing (this test fails; the others pass for nothing).
#[test]
fn a_validation_error_is_recorded() {
    let Some((_one, gpu)) = gpu() else { return };
    let mut kind = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::BINARY)
        .initial_value(1);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
    // SAFETY: a live device; `info` lives for the call.
    let raw = unsafe { gpu.device.create_semaphore(&info, None) }.unwrap();
    // SAFETY: made above, unused.
    unsafe { gpu.device.destroy_semaphore(raw, None) };
    drop(gpu);
    let messages = validation_messages();
    assert!(
        messages.iter().any(|m| m.contains("03279")),
        "expected VUID 03279 among {messages:#?}"
    );
}

// Catches: a missing loader panicking or reported as anything but
// `Unavailable` (the promise of `Device::vulkan` on a machine without
// Vulkan). Needs no driver.
#[test]
fn no_loader_is_unavailable() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let config = InstanceConfig {
        validation: false,
        loader: Some("/nonexistent/libvulkan.so.1".into()),
    };
    let e = Instance::new(&config)
        .err()
        .expect("no instance without a loader");
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.to_string().contains("no Vulkan loader"), "{e}");
}

// Catches: transfers (fenceline's fill, update and copy) not ordered by
// the barrier a command buffer's `barrier` maps to (synchronization
// validation reports the hazard), a submission whose signal comes before
// its work, or a recorder that cannot be reused. Mutation checked: the
// second `barrier()` removed (synchronization validation reports
// SYNC-HAZARD-READ-AFTER-WRITE for the copy; the test fails on it).
#[test]
fn transfers_run_in_order_across_barriers_and_validate_clean() {
    let Some((_one, gpu)) = gpu() else { return };
    {
        let a = MappedBuffer::new(&gpu, 256).unwrap();
        let b = MappedBuffer::new(&gpu, 256).unwrap();
        let done = Timeline::new(&gpu, 0).unwrap();
        let mut rec = Recorder::new(&gpu).unwrap();
        for round in 1..=2u8 {
            rec.begin().unwrap();
            rec.fill(&a, 0, 256, u32::from_ne_bytes([round; 4]));
            rec.barrier();
            rec.update(&a, 0, &[10, 20, 30, round]);
            rec.barrier();
            rec.copy(&a, 0, &b, 16, 64);
            rec.submit(gpu.queues[0], (&done, u64::from(round)))
                .unwrap();
            assert!(done.wait(u64::from(round), 5 * SECOND).unwrap());
            let mut out = [0u8; 256];
            // SAFETY: the submission that wrote `b` completed (waited for
            // above); nothing else is in flight.
            unsafe { b.read(0, &mut out) };
            assert_eq!(out[16..20], [10, 20, 30, round]);
            assert!(out[20..80].iter().all(|&x| x == round), "round {round}");
        }
    }
    drop(gpu);
    assert_no_messages();
}

/// SPIR-V words of a WGSL compute kernel (naga: pure Rust).
pub(super) fn spirv(wgsl: &str) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(wgsl).expect("WGSL parses");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::PUSH_CONSTANT,
    )
    .validate(&module)
    .expect("WGSL validates");
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .expect("SPIR-V written")
}

const SCALE_ADD: &str = r#"
struct Params { add: u32 }
var<push_constant> params: Params;
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < arrayLength(&src)) {
        dst[i] = src[i] * 2u + params.add;
    }
}
"#;

// Catches: a dispatch whose buffers or push constants do not reach the
// kernel. Mutation checked: the push constants not pushed (`dst` reads
// `2 * src`, not `2 * src + 7`). (The barrier before the copy is not
// checked here: validation layer 1.3.239 reports no hazard for a compute
// write read by a later copy; the transfer tests check barriers.)
#[test]
fn a_spirv_kernel_runs_with_pushed_buffers_and_constants() {
    let Some((_one, gpu)) = gpu() else { return };
    {
        let kernel = Pipeline::new(&gpu, &spirv(SCALE_ADD), c"main", 2, 4).unwrap();
        let n = 256usize;
        let src = MappedBuffer::new(&gpu, 4 * n).unwrap();
        let dst = MappedBuffer::new(&gpu, 4 * n).unwrap();
        let out = MappedBuffer::new(&gpu, 4 * n).unwrap();
        let input: Vec<u8> = (0..n as u32).flat_map(u32::to_ne_bytes).collect();
        // SAFETY: nothing is in flight.
        unsafe { src.write(0, &input) };
        let done = Timeline::new(&gpu, 0).unwrap();
        let mut rec = Recorder::new(&gpu).unwrap();
        rec.begin().unwrap();
        rec.dispatch(
            &kernel,
            [(n / 64) as u32, 1, 1],
            &[&src, &dst],
            &7u32.to_ne_bytes(),
        )
        .unwrap();
        let wrong = rec.dispatch(&kernel, [1, 1, 1], &[&src], &[]);
        assert_eq!(
            wrong.unwrap_err().kind(),
            ErrorKind::InvalidArgument,
            "one buffer for a pipeline of two"
        );
        rec.barrier();
        rec.copy(&dst, 0, &out, 0, 4 * n);
        rec.submit(gpu.queues[0], (&done, 1)).unwrap();
        assert!(done.wait(1, 5 * SECOND).unwrap());
        let mut bytes = vec![0u8; 4 * n];
        // SAFETY: the submission completed (waited for above).
        unsafe { out.read(0, &mut bytes) };
        for (i, word) in bytes.chunks_exact(4).enumerate() {
            let v = u32::from_ne_bytes(word.try_into().unwrap());
            assert_eq!(v, 2 * i as u32 + 7, "element {i}");
        }
    }
    drop(gpu);
    assert_no_messages();
}
