//! The Vulkan device's own behaviour, beyond the scenarios it shares with
//! the other devices: waits met on the GPU, holds that keep host copies off
//! buffers in use, identity checks, SPIR-V kernels with push constants and
//! binding-table slots, and fills and updates at any alignment. On a real
//! driver with the validation layer (see `common/vulkan.rs`); any
//! validation message fails a test.
#![cfg(feature = "vulkan")]

use std::time::Duration;

use fenceline::{CpuConfig, Device, ErrorKind, Semaphore, SpirvBinding, SpirvKernel, VulkanConfig};

#[path = "common/vulkan.rs"]
mod vulkan;

const LONG: Duration = Duration::from_secs(30);

/// Each workgroup adds 1 to `out[0]` 1000 times (atomics: no compiler
/// folds the loop; lavapipe ends a loop after 65535 iterations, hence
/// workgroups), then stores 1 to `out[1]`: a dispatch that runs for a
/// while.
const SPIN: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<atomic<u32>>;
@compute @workgroup_size(1)
fn main() {
    for (var j = 0u; j < 1000u; j++) {
        atomicAdd(&out[0], 1u);
    }
    atomicStore(&out[1], 1u);
}
"#;

/// `dst[i] = src[i] * 2 + add` (push constant).
const SCALE_ADD: &str = r#"
struct Params { add: u32 }
var<push_constant> params: Params;
@group(0) @binding(0) var<storage, read_write> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < arrayLength(&src)) {
        dst[i] = src[i] * 2u + params.add;
    }
}
"#;

fn load(device: &Device, wgsl: &str, buffers: usize, push: usize) -> SpirvKernel {
    let words = vulkan::spirv(wgsl);
    // SAFETY: naga wrote the module from WGSL it validated; its entry
    // `main` binds `buffers` storage buffers and takes `push` bytes of push
    // constants.
    unsafe { device.load_spirv(&words, "main", buffers, push) }.unwrap()
}

fn words(buffer: &fenceline::Buffer, n: usize) -> Vec<u32> {
    let mut bytes = vec![0u8; 4 * n];
    buffer.read(0, &mut bytes).unwrap();
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Returns once an issued action holds `buffer` (a host write of it
/// fails): a submission returns before its action is issued when another
/// thread holds the queue's issue turn.
fn until_held(buffer: &fenceline::Buffer) {
    let deadline = std::time::Instant::now() + LONG;
    while buffer.write(0, &[0]).is_ok() {
        assert!(std::time::Instant::now() < deadline, "never issued");
        std::thread::yield_now();
    }
}

/// A spin of `groups` thousand atomic adds to `out`, recorded.
fn spin(device: &Device, out: &fenceline::Buffer, groups: u32) -> fenceline::CommandBuffer {
    let k = load(device, SPIN, 1, 0);
    let mut cb = device.command_buffer().unwrap();
    cb.dispatch_spirv(&k, [groups, 1, 1], &[SpirvBinding::Buffer(out)], &[])
        .unwrap();
    cb.end().unwrap();
    cb
}

// Catches: a wait on another queue's signal met on the host (a round trip
// per link) instead of in the submission. Mutation checked:
// `VulkanBackend::device_wait` returning `None` (no device waits counted:
// the test fails on the count).
#[test]
fn a_wait_on_another_queues_signal_is_met_on_the_gpu() {
    let Some(d) = vulkan::device(2) else { return };
    let (q0, q1) = (d.queue(0).unwrap(), d.queue(1).unwrap());
    let (x, y) = (d.buffer(8).unwrap(), d.buffer(8).unwrap());
    let long = spin(&d, &x, 300);
    let mut copy = d.command_buffer().unwrap();
    copy.copy(&x, 0, &y, 0, 8).unwrap();
    copy.end().unwrap();
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    // The producer is issued, and runs for a while: the consumer, submitted
    // then, finds its value published and waits on the GPU.
    q0.execute(&[], &[(&a, 1)], &[&long]).unwrap();
    until_held(&x);
    q1.execute(&[(&a, 1)], &[(&b, 1)], &[&copy]).unwrap();
    b.wait(1, LONG).unwrap();
    assert_eq!(
        a.query().unwrap(),
        1,
        "the producer completed before the consumer"
    );
    assert_eq!(words(&y, 2), words(&x, 2), "the copy ran after the spin");
    assert_eq!(words(&y, 2)[1], 1);
    assert!(d.stats().device_waits >= 1, "{:?}", d.stats());
    vulkan::assert_no_messages();
}

// Catches: the same chain with `device_waits: false` still right (every
// wait met on the host), and counted as no GPU wait.
#[test]
fn with_device_waits_off_every_wait_is_met_on_the_host() {
    let Some(d) = vulkan::device_with(VulkanConfig {
        queues: 2,
        validation: true,
        device_waits: false,
        ..Default::default()
    }) else {
        return;
    };
    let (q0, q1) = (d.queue(0).unwrap(), d.queue(1).unwrap());
    let (x, y) = (d.buffer(8).unwrap(), d.buffer(8).unwrap());
    let long = spin(&d, &x, 100);
    let mut copy = d.command_buffer().unwrap();
    copy.copy(&x, 0, &y, 0, 8).unwrap();
    copy.end().unwrap();
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    q0.execute(&[], &[(&a, 1)], &[&long]).unwrap();
    q1.execute(&[(&a, 1)], &[(&b, 1)], &[&copy]).unwrap();
    b.wait(1, LONG).unwrap();
    assert_eq!(words(&y, 2), words(&x, 2));
    assert_eq!(d.stats().device_waits, 0);
    vulkan::assert_no_messages();
}

// Catches: a host copy racing the GPU's use of a buffer. Mutation checked:
// the Vulkan issue not taking the execute's holds (`take_holds` removed
// from `VulkanBackend::enqueue`): the write during the spin succeeds.
#[test]
fn a_host_copy_of_a_buffer_in_use_fails_and_succeeds_after() {
    let Some(d) = vulkan::device(1) else { return };
    let x = d.buffer(8).unwrap();
    let long = spin(&d, &x, 2_000);
    let done = Semaphore::new(0);
    d.queue(0)
        .unwrap()
        .execute(&[], &[(&done, 1)], &[&long])
        .unwrap();
    // Once issued, the action holds `x` until it completes.
    until_held(&x);
    let e = x.write(0, &[1, 2, 3, 4]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    let mut out = [0u8; 8];
    let e = x.read(0, &mut out).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    assert_eq!(done.query().unwrap(), 0, "the spin was still running");
    done.wait(1, LONG).unwrap();
    // Given back before the signal: a copy ordered after it succeeds.
    x.read(0, &mut out).unwrap();
    assert_eq!(u32::from_le_bytes(out[4..].try_into().unwrap()), 1);
    x.write(0, &[1, 2, 3, 4]).unwrap();
    vulkan::assert_no_messages();
}

// Catches: a command buffer, kernel or buffer used on a device that did
// not make it.
#[test]
fn another_devices_buffers_kernels_and_command_buffers_are_refused() {
    let Some(d) = vulkan::device(1) else { return };
    let Some(other) = vulkan::device(1) else {
        return;
    };
    let cpu = Device::cpu_with(CpuConfig {
        workers: 1,
        ..Default::default()
    })
    .unwrap();
    let (mine, theirs, host) = (
        d.buffer(64).unwrap(),
        other.buffer(64).unwrap(),
        cpu.buffer(64).unwrap(),
    );
    let mut cb = d.command_buffer().unwrap();
    for foreign in [&theirs, &host] {
        let e = cb.fill(foreign, 0, 4, &[1]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        let e = cb.copy(&mine, 0, foreign, 0, 4).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
    let k_other = load(&other, SCALE_ADD, 2, 4);
    let e = cb
        .dispatch_spirv(
            &k_other,
            [1, 1, 1],
            &[SpirvBinding::Buffer(&mine), SpirvBinding::Buffer(&mine)],
            &[0; 4],
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let k = load(&d, SCALE_ADD, 2, 4);
    let e = cb
        .dispatch_spirv(&k, [1, 1, 1], &[SpirvBinding::Buffer(&mine)], &[0; 4])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "binding count: {e}");
    let e = cb
        .dispatch_spirv(
            &k,
            [1, 1, 1],
            &[SpirvBinding::Buffer(&mine), SpirvBinding::Buffer(&theirs)],
            &[0; 4],
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = cb.dispatch([1, 1, 1], |_| Ok(())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    let words = vulkan::spirv(SCALE_ADD);
    // SAFETY: valid SPIR-V (naga), as `load` says.
    let e = unsafe { cpu.load_spirv(&words, "main", 2, 4) }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    // SAFETY: the magic number is checked before anything reaches the driver.
    let e = unsafe { d.load_spirv(&[1, 2, 3], "main", 2, 4) }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    cb.fill(&mine, 0, 64, &[7]).unwrap();
    cb.end().unwrap();
    let s = Semaphore::new(0);
    let e = other
        .queue(0)
        .unwrap()
        .execute(&[], &[(&s, 1)], &[&cb])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    assert_eq!(s.query().unwrap(), 0);
    vulkan::assert_no_messages();
}

#[test]
fn no_such_device_is_unavailable() {
    if vulkan::device(1).is_none() {
        return;
    }
    let e = Device::vulkan(1000).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
}

// Catches: push constants or table slots that do not reach the kernel, or
// a table resolved once instead of per submission. Mutation checked: slot
// `Bound::Slot(s)` resolved to `table.buffer(0)` (the second submission's
// output stays zero).
#[test]
fn a_kernel_gets_its_push_constants_and_each_submissions_table() {
    let Some(d) = vulkan::device(1) else { return };
    let k = load(&d, SCALE_ADD, 2, 4);
    let n = 100;
    let src = d.buffer(4 * n).unwrap();
    let bytes: Vec<u8> = (0..n as u32).flat_map(|i| i.to_le_bytes()).collect();
    src.write(0, &bytes).unwrap();
    let outs = [d.buffer(4 * n).unwrap(), d.buffer(4 * n).unwrap()];
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch_spirv(
        &k,
        [2, 1, 1],
        &[SpirvBinding::Slot(0), SpirvBinding::Slot(1)],
        &7u32.to_le_bytes(),
    )
    .unwrap();
    cb.end().unwrap();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let e = q.execute(&[], &[(&s, 1)], &[&cb]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "no table: {e}");
    for (i, out) in outs.iter().enumerate() {
        let v = i as u64;
        q.execute_with(&[(&s, v)], &[(&s, v + 1)], &[&cb], &[&src, out])
            .unwrap();
    }
    s.wait(2, LONG).unwrap();
    for out in &outs {
        let got = words(out, n);
        let want: Vec<u32> = (0..n as u32).map(|i| i * 2 + 7).collect();
        assert_eq!(got, want);
    }
    vulkan::assert_no_messages();
}

// Catches: fills and updates at offsets and lengths Vulkan's own commands
// refuse (not multiples of 4), several in one recording. Mutation checked:
// the staged bytes' offset not advanced past an update (`staged_len` 0 for
// updates): later pieces copy the wrong bytes.
#[test]
fn fills_and_updates_at_any_alignment_land_exactly() {
    let Some(d) = vulkan::device(1) else { return };
    let b = d.buffer(64).unwrap();
    let mut want = [0u8; 64];
    let mut cb = d.command_buffer().unwrap();
    let stage = |cb: &mut fenceline::CommandBuffer, f: &dyn Fn(&mut fenceline::CommandBuffer)| {
        f(cb);
        cb.barrier().unwrap();
    };
    stage(&mut cb, &|cb| cb.fill(&b, 1, 13, &[0xA1]).unwrap());
    want[1..14].fill(0xA1);
    stage(&mut cb, &|cb| cb.update(&[1, 2, 3], &b, 3).unwrap());
    want[3..6].copy_from_slice(&[1, 2, 3]);
    stage(&mut cb, &|cb| cb.fill(&b, 18, 22, &[0x10, 0x20]).unwrap());
    for (i, w) in want.iter_mut().enumerate().take(40).skip(18) {
        *w = if i % 2 == 0 { 0x10 } else { 0x20 };
    }
    stage(&mut cb, &|cb| cb.update(&[9; 7], &b, 41).unwrap());
    want[41..48].copy_from_slice(&[9; 7]);
    stage(&mut cb, &|cb| cb.fill(&b, 50, 2, &[0x33, 0x44]).unwrap());
    want[50..52].copy_from_slice(&[0x33, 0x44]);
    stage(&mut cb, &|cb| cb.fill(&b, 56, 8, &[1, 2, 3, 4]).unwrap());
    want[56..64].copy_from_slice(&[1, 2, 3, 4, 1, 2, 3, 4]);
    cb.end().unwrap();
    let s = Semaphore::new(0);
    d.queue(0)
        .unwrap()
        .execute(&[], &[(&s, 1)], &[&cb])
        .unwrap();
    s.wait(1, LONG).unwrap();
    let mut got = [0u8; 64];
    b.read(0, &mut got).unwrap();
    assert_eq!(got, want);
    vulkan::assert_no_messages();
}

// Catches: a buffer from `alloca` used before its alloca ran or after its
// dealloca ran (on the host or in a submission), and memory handed out
// again while a handle could still reach it. Mutation checked: the Vulkan
// issue not marking the alloca run (`alloca_ran` removed from
// `VulkanBackend::enqueue`): the write after the alloca's signal fails;
// `dealloca_ran` removed from the completer: the read after the dealloca
// succeeds.
#[test]
fn alloca_memory_is_usable_from_its_alloca_to_its_dealloca_on_any_queue() {
    let Some(d) = vulkan::device(2) else { return };
    let (q0, q1) = (d.queue(0).unwrap(), d.queue(1).unwrap());
    let (gate, s) = (Semaphore::new(0), Semaphore::new(0));
    let tmp = q0.alloca(&[(&gate, 1)], &[(&s, 1)], 100).unwrap();
    assert_eq!(tmp.len(), 100);
    let e = tmp.write(0, &[1]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "before: {e}");
    gate.signal(1).unwrap();
    s.wait(1, LONG).unwrap();
    let mut out = [0xFFu8; 100];
    tmp.read(0, &mut out).unwrap();
    assert_eq!(out, [0; 100], "zeroed");
    // Used and given back on the other queue.
    let mut cb = d.command_buffer().unwrap();
    cb.fill(&tmp, 0, 100, &[5]).unwrap();
    cb.end().unwrap();
    q1.execute(&[(&s, 1)], &[(&s, 2)], &[&cb]).unwrap();
    s.wait(2, LONG).unwrap();
    tmp.read(0, &mut out).unwrap();
    assert_eq!(out, [5; 100]);
    q1.dealloca(&[(&s, 2)], &[(&s, 3)], &tmp).unwrap();
    s.wait(3, LONG).unwrap();
    let e = tmp.read(0, &mut out).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "after: {e}");
    let e = q0.execute(&[], &[(&s, 4)], &[&cb]).unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::FailedPrecondition,
        "a submission after: {e}"
    );
    let e = q0
        .dealloca(&[], &[(&s, 4)], &d.buffer(8).unwrap())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "not an alloca's: {e}");
    // The memory goes back to the pool only with the last handle: a new
    // alloca of the same size is other memory while `tmp` and `cb` live.
    let again = q0.alloca(&[], &[(&s, 4)], 100).unwrap();
    s.wait(4, LONG).unwrap();
    again.write(0, &[9; 100]).unwrap();
    let e = tmp.read(0, &mut out).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    drop((tmp, cb));
    vulkan::assert_no_messages();
}

// Catches: priorities lost on the way to the queues, or refused.
#[test]
fn queue_priorities_are_kept() {
    if vulkan::device(1).is_none() {
        return;
    }
    use fenceline::Priority;
    let d = Device::vulkan_with_priorities(
        0,
        VulkanConfig {
            queues: 3,
            validation: true,
            ..Default::default()
        },
        &[Priority::High, Priority::Low],
    )
    .unwrap();
    let got: Vec<_> = (0..3).map(|i| d.queue(i).unwrap().priority()).collect();
    assert_eq!(got, [Priority::High, Priority::Low, Priority::Normal]);
    let e = Device::vulkan_with_priorities(0, VulkanConfig::default(), &[Priority::High; 2])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    vulkan::assert_no_messages();
}

// Catches: a producer that fails after its submission (its signals were
// published, a dependent waits for them on the GPU) leaving the dependent
// to signal success, or to hang. Here the producer is a dealloca, issued
// behind a long spin, that finds the buffer held when it completes (by an
// action issued after it): it fails, `FailedPrecondition`. All on one
// queue, whose completions come in submission order on any device.
// Mutation checked: the completer's wait for the producers of GPU-side
// waits removed (`finish`): the dependent signals success.
#[test]
fn a_producer_failing_after_submission_fails_its_gpu_waiting_dependent_kind_kept() {
    let Some(d) = vulkan::device(1) else { return };
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let tmp = q.alloca(&[], &[(&s, 1)], 64).unwrap();
    s.wait(1, LONG).unwrap();
    let other = d.buffer(8).unwrap();
    let first = spin(&d, &other, 5_000);
    let holder = spin(&d, &tmp, 100);
    let [ran, freed, held, after] = [0; 4].map(Semaphore::new);
    q.execute(&[], &[(&ran, 1)], &[&first]).unwrap();
    q.dealloca(&[], &[(&freed, 1)], &tmp).unwrap();
    q.execute(&[], &[(&held, 1)], &[&holder]).unwrap();
    until_held(&tmp);
    let mut cb = d.command_buffer().unwrap();
    cb.fill(&d.buffer(4).unwrap(), 0, 4, &[1]).unwrap();
    cb.end().unwrap();
    q.execute(&[(&freed, 1)], &[(&after, 1)], &[&cb]).unwrap();
    let e = freed.wait(1, LONG).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    let e = after.wait(1, LONG).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "kind kept: {e}");
    fenceline::wait_all(&[(&ran, 1), (&held, 1)], LONG).unwrap();
    assert!(
        d.stats().device_waits >= 1,
        "the dependent waited on the GPU"
    );
    // The buffer stayed usable (the dealloca did not run).
    tmp.write(0, &[1]).unwrap();
    vulkan::assert_no_messages();
}

// Catches: a semaphore a Vulkan action signals behaving otherwise than
// one the host signals: `query`, `wait_async`, and a failure (kind kept)
// seen through them.
#[test]
fn a_semaphore_signalled_by_vulkan_work_behaves_as_any_other() {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    fn block_on<F: Future>(f: F) -> F::Output {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut Context::from_waker(&waker)) {
                return v;
            }
            std::thread::park_timeout(Duration::from_millis(10));
        }
    }
    let Some(d) = vulkan::device(2) else { return };
    let (q0, q1) = (d.queue(0).unwrap(), d.queue(1).unwrap());
    let b = d.buffer(4).unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.fill(&b, 0, 4, &[3]).unwrap();
    cb.end().unwrap();
    let (gate, s) = (Semaphore::new(0), Semaphore::new(0));
    q0.execute(&[(&gate, 1)], &[(&s, 5)], &[&cb]).unwrap();
    assert_eq!(s.query().unwrap(), 0);
    gate.signal(1).unwrap();
    block_on(s.wait_async(5)).unwrap();
    assert_eq!(s.query().unwrap(), 5);
    // A failure flows through a Vulkan action, kind kept, to an async wait.
    let t = Semaphore::new(0);
    q1.execute(&[(&gate, 2)], &[(&t, 1)], &[&cb]).unwrap();
    gate.fail(fenceline::Error::new(ErrorKind::Aborted, "upstream"));
    let e = block_on(t.wait_async(1)).unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::Aborted, "upstream"));
    vulkan::assert_no_messages();
}

/// `out[0] = arrayLength(&data)`; every word of `data` set to 7.
const LENGTH: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x == 0u) {
        out[0] = arrayLength(&data);
    }
    if (id.x < 64u) {
        data[id.x] = 7u;
    }
}
"#;

// Catches: a kernel bound to the memory behind a pooled buffer rather than
// the buffer itself (an alloca of 100 bytes sits in 256): it would see 64
// words, and write past the buffer's end. Mutation checked: the descriptor's range
// `vk::WHOLE_SIZE` (as before): `arrayLength` 64.
#[test]
fn a_kernel_sees_a_pooled_buffers_length_not_its_memorys() {
    let Some(d) = vulkan::device(1) else { return };
    let q = d.queue(0).unwrap();
    let k = load(&d, LENGTH, 2, 0);
    let s = Semaphore::new(0);
    let tmp = q.alloca(&[], &[(&s, 1)], 100).unwrap();
    let out = d.buffer(4).unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch_spirv(
        &k,
        [1, 1, 1],
        &[SpirvBinding::Buffer(&tmp), SpirvBinding::Buffer(&out)],
        &[],
    )
    .unwrap();
    cb.end().unwrap();
    q.execute(&[(&s, 1)], &[(&s, 2)], &[&cb]).unwrap();
    s.wait(2, LONG).unwrap();
    assert_eq!(words(&out, 1), [25], "100 bytes: 25 words");
    assert_eq!(words(&tmp, 25), [7; 25]);
    vulkan::assert_no_messages();
}

// Catches: a queue's timeline semaphore destroyed, when the queue is
// freed, while another queue's submission that waits on it still runs
// (Vulkan forbids it; the point a GPU wait uses holds the timeline).
// Mutation checked: the point keeping no reference (`Point::set` without
// `keep`): lavapipe crashes (SIGSEGV) once queue 0's semaphore is
// destroyed under the pending wait. (The validation layer does not report
// it.)
#[test]
fn a_queue_freed_before_the_gpu_work_waiting_on_it_keeps_its_semaphore() {
    use fenceline::testing::VulkanInternals;
    let Some(d) = vulkan::device(2) else { return };
    let live = d.vulkan_live_timelines().unwrap();
    assert_eq!(live(), 2, "one timeline a queue");
    let (q0, q1) = (d.queue(0).unwrap(), d.queue(1).unwrap());
    let (x, y, z) = (
        d.buffer(8).unwrap(),
        d.buffer(8).unwrap(),
        d.buffer(4).unwrap(),
    );
    let first = spin(&d, &x, 1_000);
    let mut produce = d.command_buffer().unwrap();
    produce.fill(&z, 0, 4, &[1]).unwrap();
    produce.end().unwrap();
    let consume = spin(&d, &y, 10_000);
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    q0.execute(&[], &[], &[&first]).unwrap();
    until_held(&x);
    // Issued at once (published), completed only after the spin ahead of
    // it: the consumer finds its point and waits on the GPU.
    q0.execute(&[], &[(&a, 1)], &[&produce]).unwrap();
    until_held(&z);
    q1.execute(&[(&a, 1)], &[(&b, 1)], &[&consume]).unwrap();
    until_held(&y);
    assert!(d.stats().device_waits >= 1);
    // Everything freed while the consumer runs: queue 0's state goes as
    // soon as its last action completes.
    drop((q0, q1, d, first, produce, consume));
    a.wait(1, LONG).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    if y.write(0, &[0]).is_err() {
        // The consumer still runs (it holds `y`): queue 0's timeline is
        // kept for it.
        assert_eq!(
            live(),
            2,
            "queue 0's timeline destroyed under a pending wait"
        );
    }
    b.wait(1, LONG).unwrap();
    vulkan::assert_no_messages();
}
