//! The data plane on the CUDA device (simulated driver when no GPU):
//! queue-ordered memory (`Queue::alloca` / `dealloca` as
//! `cuMemAllocAsync` / `cuMemFreeAsync` on the queue's stream) is usable
//! only between its alloca and its dealloca, and its free is ordered after
//! the stream work that uses it. Every test also asserts that the
//! simulated driver saw no misuse (no use of unallocated or freed memory).
#![cfg(feature = "cuda")]

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fenceline::{Buffer, CudaConfig, Device, ErrorKind, KernelArg, Semaphore};

#[path = "common/cuda.rs"]
mod cuda;

const T: Duration = Duration::from_secs(10);

fn device() -> Option<Device> {
    cuda::device_with(CudaConfig {
        queues: 2,
        ..Default::default()
    })
}

fn read_u32(b: &Buffer, offset: usize) -> u32 {
    let mut out = [0u8; 4];
    b.read(offset, &mut out).unwrap();
    u32::from_ne_bytes(out)
}

/// A one-launch command buffer of the counting kernel on `counter`
/// (`grid` threads: adds their number).
fn count_into(d: &Device, counter: &Buffer, grid: u32) -> fenceline::CommandBuffer {
    cuda::register_test_kernels();
    let k = d.load_kernel(cuda::COUNT_PTX, "fenceline_count").unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.launch(
        &k,
        [grid, 1, 1],
        [1, 1, 1],
        0,
        &[KernelArg::Buffer(counter, 0)],
    )
    .unwrap();
    cb.end().unwrap();
    cb
}

#[test]
fn cuda_alloca_then_a_launch_writing_it_reads_back() {
    let Some(d) = device() else { return };
    let misuse = cuda::misuse_count();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let tmp = q.alloca(&[], &[(&s, 1)], 256).unwrap();
    s.wait(1, T).unwrap();
    // Zeroed by the alloca (the simulator fills new memory with 0xCD).
    let mut bytes = [0xFFu8; 256];
    tmp.read(0, &mut bytes).unwrap();
    assert!(bytes.iter().all(|b| *b == 0), "alloca memory is zeroed");
    let cb = count_into(&d, &tmp, 6);
    q.execute(&[(&s, 1)], &[(&s, 2)], &[&cb]).unwrap();
    q.execute(&[(&s, 2)], &[(&s, 3)], &[&cb]).unwrap();
    s.wait(3, T).unwrap();
    assert_eq!(read_u32(&tmp, 0), 12);
    tmp.write(4, &7u32.to_ne_bytes()).unwrap();
    assert_eq!(read_u32(&tmp, 4), 7);
    q.dealloca(&[(&s, 3)], &[(&s, 4)], &tmp).unwrap();
    s.wait(4, T).unwrap();
    assert_eq!(cuda::misuse_count(), misuse, "{}", cuda::last_misuse());
}

/// Mutations checked: `DeviceMem::host_copy` not taking the life word
/// (a host copy before the alloca ran: the read goes to address 0 and
/// fails as `Internal`, not `FailedPrecondition`), and
/// `CommandBuffer::check_buffer` not checking a transient's address (the
/// fill is recorded and fails only at `end`).
#[test]
fn cuda_alloca_used_before_its_alloca_ran_is_failed_precondition() {
    let Some(d) = device() else { return };
    let misuse = cuda::misuse_count();
    let q = d.queue(0).unwrap();
    let (gate, s) = (Semaphore::new(0), Semaphore::new(0));
    let tmp = q.alloca(&[(&gate, 1)], &[(&s, 1)], 64).unwrap();
    let fp = ErrorKind::FailedPrecondition;
    let mut out = [0u8; 4];
    assert_eq!(tmp.read(0, &mut out).unwrap_err().kind(), fp);
    assert_eq!(tmp.write(0, &[1]).unwrap_err().kind(), fp);
    let mut cb = d.command_buffer().unwrap();
    assert_eq!(cb.fill(&tmp, 0, 64, &[1]).unwrap_err().kind(), fp);
    let k = d.load_kernel(cuda::COUNT_PTX, "fenceline_count").unwrap();
    let e = cb
        .launch(&k, [1, 1, 1], [1, 1, 1], 0, &[KernelArg::Buffer(&tmp, 0)])
        .unwrap_err();
    assert_eq!(e.kind(), fp);
    gate.signal(1).unwrap();
    s.wait(1, T).unwrap();
    tmp.write(0, &[1]).unwrap();
    cb.fill(&tmp, 0, 64, &[2]).unwrap();
    cb.end().unwrap();
    q.execute(&[], &[(&s, 2)], &[&cb]).unwrap();
    s.wait(2, T).unwrap();
    tmp.read(0, &mut out).unwrap();
    assert_eq!(out, [2; 4]);
    q.dealloca(&[], &[(&s, 3)], &tmp).unwrap();
    s.wait(3, T).unwrap();
    assert_eq!(cuda::misuse_count(), misuse, "{}", cuda::last_misuse());
}

/// Mutations checked: removing the issue-time check in
/// `CudaBackend::enqueue` (`each_cuda_transient(... device_ptr ...)`):
/// the gated execute's fill is enqueued after the free, the simulator
/// reports the use of freed memory and the execute's signal does not
/// fail; removing the submit-time check (`check_transient_use`):
/// `execute` of a recording naming a freed buffer returns `Ok`.
#[test]
fn cuda_alloca_used_after_its_dealloca_ran_is_failed_precondition() {
    let Some(d) = device() else { return };
    let misuse = cuda::misuse_count();
    let q = d.queue(0).unwrap();
    let (gate, s, late) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let tmp = q.alloca(&[], &[(&s, 1)], 64).unwrap();
    s.wait(1, T).unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.fill(&tmp, 0, 64, &[9]).unwrap();
    cb.end().unwrap();
    let mut one_shot = d.command_buffer_one_shot().unwrap();
    one_shot.fill(&tmp, 0, 64, &[8]).unwrap();
    one_shot.end().unwrap();
    // Submitted while the buffer is usable, issued after its dealloca
    // (which has no waits, so it is issued first).
    q.execute(&[(&gate, 1)], &[(&late, 1)], &[&cb]).unwrap();
    q.execute(&[(&gate, 1)], &[(&late, 2)], &[&one_shot])
        .unwrap();
    q.dealloca(&[], &[(&s, 2)], &tmp).unwrap();
    s.wait(2, T).unwrap();
    gate.signal(1).unwrap();
    let fp = ErrorKind::FailedPrecondition;
    assert_eq!(late.wait(1, T).unwrap_err().kind(), fp);
    assert_eq!(late.wait(2, T).unwrap_err().kind(), fp);
    // Anything after: refused at once.
    let mut out = [0u8; 4];
    assert_eq!(tmp.read(0, &mut out).unwrap_err().kind(), fp);
    assert_eq!(tmp.write(0, &[1]).unwrap_err().kind(), fp);
    let e = q.execute(&[], &[(&s, 3)], &[&cb]).unwrap_err();
    assert_eq!(e.kind(), fp);
    let mut again = d.command_buffer().unwrap();
    assert_eq!(again.fill(&tmp, 0, 4, &[1]).unwrap_err().kind(), fp);
    // A second dealloca fails its signal; the first one stands.
    q.dealloca(&[], &[(&s, 3)], &tmp).unwrap();
    assert_eq!(s.wait(3, T).unwrap_err().kind(), fp);
    assert_eq!(cuda::misuse_count(), misuse, "{}", cuda::last_misuse());
}

#[test]
fn cuda_alloca_buffers_stay_on_their_queue() {
    let Some(d) = device() else { return };
    let (q0, q1) = (d.queue(0).unwrap(), d.queue(1).unwrap());
    let s = Semaphore::new(0);
    let tmp = q0.alloca(&[], &[(&s, 1)], 64).unwrap();
    s.wait(1, T).unwrap();
    let cb = count_into(&d, &tmp, 1);
    let ia = ErrorKind::InvalidArgument;
    assert_eq!(q1.execute(&[], &[], &[&cb]).unwrap_err().kind(), ia);
    assert_eq!(q1.dealloca(&[], &[], &tmp).unwrap_err().kind(), ia);
    let plain = d.buffer(64).unwrap();
    assert_eq!(q0.dealloca(&[], &[], &plain).unwrap_err().kind(), ia);
    let cpu = Device::cpu().unwrap();
    let foreign = cpu.queue(0).unwrap().alloca(&[], &[], 64).unwrap();
    assert_eq!(q0.dealloca(&[], &[], &foreign).unwrap_err().kind(), ia);
    assert_eq!(
        cpu.queue(0)
            .unwrap()
            .dealloca(&[], &[], &tmp)
            .unwrap_err()
            .kind(),
        ia
    );
    q0.dealloca(&[], &[(&s, 2)], &tmp).unwrap();
    s.wait(2, T).unwrap();
}

// A kernel that stays on the GPU until the test lets it go, then stores
// 42 at its pointer argument.
static HOLD: AtomicBool = AtomicBool::new(false);
static STORED: AtomicU32 = AtomicU32::new(0);

extern "C" fn hold_store(_: *const u32, _: *const u32, params: *const *const c_void) {
    let start = Instant::now();
    while HOLD.load(Ordering::SeqCst) && start.elapsed() < T {
        std::thread::sleep(Duration::from_micros(200));
    }
    // SAFETY: one 8-byte parameter, the address of a u32 in (host-backed)
    // device memory that the simulator checked is allocated.
    unsafe {
        let addr = *(*params).cast::<u64>();
        (addr as *mut u32).write(42);
    }
    STORED.fetch_add(1, Ordering::SeqCst);
}

const HOLD_PTX: &str = "
.version 7.0
.target sm_50
.address_size 64
.visible .entry fenceline_hold_store(.param .u64 p) { ret; }
";

/// The free of a dealloca issued while a kernel using the buffer still
/// runs on the stream is ordered after it. Mutation checked: issuing
/// `cuMemFreeAsync` on the null stream instead of the queue's
/// (`DeviceMem::free_on`): the simulator reports the free reached under
/// the running kernel.
#[test]
fn cuda_dealloca_is_ordered_after_running_stream_work() {
    if !cuda::is_sim() {
        println!("skipped: needs the simulated driver's host-implemented kernels");
        return;
    }
    let Some(d) = device() else { return };
    assert!(cuda::register_kernel(
        "fenceline_hold_store",
        &[8],
        hold_store
    ));
    let misuse = cuda::misuse_count();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let tmp = q.alloca(&[], &[(&s, 1)], 64).unwrap();
    s.wait(1, T).unwrap();
    let k = d.load_kernel(HOLD_PTX, "fenceline_hold_store").unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.launch(&k, [1, 1, 1], [1, 1, 1], 0, &[KernelArg::Buffer(&tmp, 0)])
        .unwrap();
    cb.end().unwrap();
    HOLD.store(true, Ordering::SeqCst);
    let stored = STORED.load(Ordering::SeqCst);
    q.execute(&[], &[(&s, 2)], &[&cb]).unwrap();
    // No waits: issued (its free enqueued) while the kernel still runs.
    q.dealloca(&[], &[(&s, 3)], &tmp).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        STORED.load(Ordering::SeqCst),
        stored,
        "the kernel still runs"
    );
    HOLD.store(false, Ordering::SeqCst);
    s.wait(3, T).unwrap();
    assert_eq!(STORED.load(Ordering::SeqCst), stored + 1);
    assert_eq!(cuda::misuse_count(), misuse, "{}", cuda::last_misuse());
    let mut out = [0u8; 4];
    let e = tmp.read(0, &mut out).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
}

// Binding tables: kernel-argument slots resolved per submission.

/// Launches of `fenceline_slot_add(u32* p, u32 v)` whose pointer was 0
/// (a slot left unresolved).
static NULL_POINTERS: AtomicU32 = AtomicU32::new(0);

extern "C" fn slot_add(_: *const u32, _: *const u32, params: *const *const c_void) {
    // SAFETY: two parameters (8 and 4 bytes); a non-null pointer is the
    // address of a u32 in (host-backed) device memory that the simulator
    // checked is allocated.
    unsafe {
        let addr = *(*params).cast::<u64>();
        let v = *(*params.add(1)).cast::<u32>();
        if addr == 0 {
            NULL_POINTERS.fetch_add(1, Ordering::SeqCst);
            return;
        }
        (*(addr as *const AtomicU32)).fetch_add(v, Ordering::SeqCst);
    }
}

const SLOT_PTX: &str = "
.version 7.0
.target sm_50
.address_size 64
.visible .entry fenceline_slot_add(.param .u64 p, .param .u32 v) { ret; }
";

/// A command buffer (one-shot or reusable) adding `v` at slot 0's byte
/// `offset`, then, after a barrier, `v + 1` at slot 1's start.
fn slot_adder(d: &Device, one_shot: bool, v: u32, offset: usize) -> fenceline::CommandBuffer {
    assert!(cuda::register_kernel(
        "fenceline_slot_add",
        &[8, 4],
        slot_add
    ));
    let k = d.load_kernel(SLOT_PTX, "fenceline_slot_add").unwrap();
    let mut cb = if one_shot {
        d.command_buffer_one_shot().unwrap()
    } else {
        d.command_buffer().unwrap()
    };
    let launch = |cb: &mut fenceline::CommandBuffer, slot: u32, offset: usize, v: u32| {
        cb.launch(
            &k,
            [1, 1, 1],
            [1, 1, 1],
            0,
            &[KernelArg::Slot(slot, offset), KernelArg::U32(v)],
        )
        .unwrap();
    };
    launch(&mut cb, 0, offset, v);
    cb.barrier().unwrap();
    launch(&mut cb, 1, 0, v + 1);
    cb.end().unwrap();
    cb
}

/// One recording, new buffers every submission, several submissions in
/// flight at once (queued behind a gate): each launch sees its own
/// submission's table. Mutations checked: `Launch::update_node` not
/// called (`CudaGraph::launch_with_table`): the graph's launches keep
/// the recorded 0; `with_params` resolving slot arguments to the
/// recorded values: both paths launch with 0.
#[test]
fn cuda_table_slots_are_resolved_per_submission() {
    if !cuda::is_sim() {
        println!("skipped: needs the simulated driver's host-implemented kernels");
        return;
    }
    let Some(d) = device() else { return };
    let misuse = cuda::misuse_count();
    let nulls = NULL_POINTERS.load(Ordering::SeqCst);
    let q = d.queue(0).unwrap();
    for one_shot in [false, true] {
        let cb = slot_adder(&d, one_shot, 10, 4);
        let (gate, done) = (Semaphore::new(0), Semaphore::new(0));
        let frames: Vec<[Buffer; 2]> = (0..4)
            .map(|_| [d.buffer(8).unwrap(), d.buffer(4).unwrap()])
            .collect();
        for (i, [x, y]) in frames.iter().enumerate() {
            let i = i as u64;
            q.execute_with(&[(&gate, 1)], &[(&done, i + 1)], &[&cb], &[x, y])
                .unwrap();
        }
        gate.signal(1).unwrap();
        done.wait(4, T).unwrap();
        for [x, y] in &frames {
            assert_eq!(read_u32(x, 0), 0, "one-shot {one_shot}");
            assert_eq!(read_u32(x, 4), 10, "one-shot {one_shot}");
            assert_eq!(read_u32(y, 0), 11, "one-shot {one_shot}");
        }
    }
    assert_eq!(
        NULL_POINTERS.load(Ordering::SeqCst),
        nulls,
        "a slot left unresolved"
    );
    assert_eq!(cuda::misuse_count(), misuse, "{}", cuda::last_misuse());
}

/// The frame loop the tables are for: alloca, execute through a table,
/// dealloca, with no host wait in between (the buffer has no address
/// when the execute is submitted; its alloca is issued first).
#[test]
fn cuda_alloca_frames_through_a_table_without_host_waits() {
    if !cuda::is_sim() {
        println!("skipped: needs the simulated driver's host-implemented kernels");
        return;
    }
    let Some(d) = device() else { return };
    let misuse = cuda::misuse_count();
    let q = d.queue(0).unwrap();
    let cb = slot_adder(&d, false, 5, 0);
    let s = Semaphore::new(0);
    let mut kept = Vec::new();
    for frame in 0..50u64 {
        let v = 3 * frame;
        let (a, b) = (
            q.alloca(&[(&s, v)], &[(&s, v + 1)], 4).unwrap(),
            d.buffer(4).unwrap(),
        );
        q.execute_with(&[(&s, v + 1)], &[(&s, v + 2)], &[&cb], &[&a, &b])
            .unwrap();
        q.dealloca(&[(&s, v + 2)], &[(&s, v + 3)], &a).unwrap();
        kept.push(b);
    }
    s.wait(150, T).unwrap();
    assert!(kept.iter().all(|b| read_u32(b, 0) == 6));
    assert_eq!(cuda::misuse_count(), misuse, "{}", cuda::last_misuse());
}

/// Mutations checked: the life check of the table's buffers at issue,
/// before anything is enqueued (`t.each_used(...)` in
/// `CudaBackend::enqueue`): the first launch (slot 0, a live buffer) is
/// enqueued and runs before the second one's slot fails.
#[test]
fn cuda_table_buffer_deallocated_before_the_execute_is_issued_fails_it() {
    if !cuda::is_sim() {
        println!("skipped: needs the simulated driver's host-implemented kernels");
        return;
    }
    let Some(d) = device() else { return };
    let misuse = cuda::misuse_count();
    let q = d.queue(0).unwrap();
    // One-shot: its launches are enqueued one by one.
    let cb = slot_adder(&d, true, 1, 0);
    let (gate, s, late) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let tmp = q.alloca(&[], &[(&s, 1)], 4).unwrap();
    let other = d.buffer(4).unwrap();
    s.wait(1, T).unwrap();
    q.execute_with(&[(&gate, 1)], &[(&late, 1)], &[&cb], &[&other, &tmp])
        .unwrap();
    q.dealloca(&[], &[(&s, 2)], &tmp).unwrap();
    s.wait(2, T).unwrap();
    gate.signal(1).unwrap();
    let e = late.wait(1, T).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    // Whatever was enqueued on the stream has run once this has.
    q.barrier(&[], &[(&s, 3)]).unwrap();
    s.wait(3, T).unwrap();
    assert_eq!(read_u32(&other, 0), 0, "nothing of the execute ran");
    // And after: refused at the call.
    let e = q
        .execute_with(&[], &[(&late, 2)], &[&cb], &[&other, &tmp])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert_eq!(cuda::misuse_count(), misuse, "{}", cuda::last_misuse());
}

/// Checked at `execute_with`, nothing submitted (`InvalidArgument`).
/// Mutations checked: `SlotTable::new`'s device check for a CUDA
/// recording always passing (the CPU buffer is accepted);
/// `Command::slot_accesses` reporting no launch slots (the short table
/// and `execute` without a table are accepted).
#[test]
fn cuda_table_validation_is_invalid_argument() {
    let Some(d) = device() else { return };
    let (q0, q1) = (d.queue(0).unwrap(), d.queue(1).unwrap());
    let nulls = NULL_POINTERS.load(Ordering::SeqCst);
    let cb = {
        cuda::register_kernel("fenceline_slot_add", &[8, 4], slot_add);
        let k = d.load_kernel(SLOT_PTX, "fenceline_slot_add").unwrap();
        let mut cb = d.command_buffer().unwrap();
        let args = |slot| [KernelArg::Slot(slot, 8), KernelArg::U32(1)];
        let e = cb
            .launch(&k, [1, 1, 1], [1, 1, 1], 0, &args(16))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "slot past MAX_SLOTS");
        cb.launch(&k, [1, 1, 1], [1, 1, 1], 0, &args(1)).unwrap();
        cb.end().unwrap();
        cb
    };
    let (a, b) = (d.buffer(16).unwrap(), d.buffer(16).unwrap());
    let ia = ErrorKind::InvalidArgument;
    let done = Semaphore::new(0);
    // A command buffer with slots needs a table.
    assert_eq!(
        q0.execute(&[], &[(&done, 1)], &[&cb]).unwrap_err().kind(),
        ia
    );
    // Short: slot 1 is bound.
    let e = q0
        .execute_with(&[], &[(&done, 1)], &[&cb], &[&a])
        .unwrap_err();
    assert_eq!(e.kind(), ia);
    // Shorter than the argument's offset.
    let short = d.buffer(4).unwrap();
    let e = q0
        .execute_with(&[], &[(&done, 1)], &[&cb], &[&a, &short])
        .unwrap_err();
    assert_eq!(e.kind(), ia);
    // Another device's buffer.
    let cpu = Device::cpu().unwrap().buffer(16).unwrap();
    let e = q0
        .execute_with(&[], &[(&done, 1)], &[&cb], &[&a, &cpu])
        .unwrap_err();
    assert_eq!(e.kind(), ia);
    // Another queue's alloca.
    let s = Semaphore::new(0);
    let theirs = q1.alloca(&[], &[(&s, 1)], 16).unwrap();
    let e = q0
        .execute_with(&[], &[(&done, 1)], &[&cb], &[&a, &theirs])
        .unwrap_err();
    assert_eq!(e.kind(), ia);
    assert_eq!(done.query().unwrap(), 0, "nothing was submitted");
    // And the right table runs.
    q0.execute_with(&[], &[(&done, 1)], &[&cb], &[&a, &b])
        .unwrap();
    done.wait(1, T).unwrap();
    if cuda::is_sim() {
        assert_eq!(read_u32(&b, 8), 1);
    }
    assert_eq!(
        NULL_POINTERS.load(Ordering::SeqCst),
        nulls,
        "a slot left unresolved"
    );
    q1.dealloca(&[(&s, 1)], &[(&s, 2)], &theirs).unwrap();
    s.wait(2, T).unwrap();
}
