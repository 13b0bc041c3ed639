//! With a counting global allocator: after warm-up, 20k `execute` calls
//! (1 wait, 1 signal, one reused command buffer with a 64-tile dispatch)
//! allocate nothing on any thread, on a device with priority levels too; a host call allocates (one box) exactly
//! when its closure is larger than `HOST_CALL_INLINE_BYTES`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceline::{Binding, CpuConfig, Device, Priority, Semaphore, Tile, TileIo};

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

/// On `device`'s `queue`.
fn execute_allocates_nothing(device: Device, queue: usize) {
    let queue = device.queue(queue).unwrap();
    let sum = Arc::new(AtomicU64::new(0));
    let mut cb = device.command_buffer().unwrap();
    let s = sum.clone();
    cb.dispatch([8, 8, 1], move |t: &Tile| {
        s.fetch_add(u64::from(t.workgroup_id[0]), Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    let chain = Semaphore::new(0);
    let run = |from: u64, to: u64| {
        for i in from..to {
            queue
                .execute(&[(&chain, i)], &[(&chain, i + 1)], &[&cb])
                .unwrap();
            if i % 64 == 63 {
                // Keep the backlog bounded, like a real frame loop.
                chain.wait(i + 1, Duration::from_secs(10)).unwrap();
            }
        }
        chain.wait(to, Duration::from_secs(10)).unwrap();
    };
    run(0, 20_000);
    let before = common::allocations();
    run(20_000, 40_000);
    let allocations = common::allocations() - before;
    assert_eq!(sum.load(Ordering::Relaxed), 40_000 * 8 * 28);
    assert_eq!(allocations, 0, "20k executes allocated {allocations} times");
}

fn two_workers(queues: usize, priorities: &[Priority]) -> Device {
    let config = CpuConfig {
        workers: 2,
        queues,
        ..Default::default()
    };
    Device::cpu_with_priorities(config, priorities).unwrap()
}

/// Allocations of 100 host calls capturing `[u8; N]`, after 2000 warm-up
/// ones (enough for the device's per-submission pools to reach the most
/// ever in flight at once: a submission's bookkeeping can still be on its
/// way back when the next one starts).
fn host_call_allocations_per_100<const N: usize>(device: &Device) -> usize {
    let queue = device.queue(0).unwrap();
    let done = Semaphore::new(0);
    let mut next = 0;
    let mut round = || {
        let bytes = [1u8; N];
        next += 1;
        queue
            .host_call(&[], &[(&done, next)], move || {
                assert_eq!(bytes[0], 1);
                Ok(())
            })
            .unwrap();
        done.wait(next, Duration::from_secs(10)).unwrap();
    };
    for _ in 0..2000 {
        round();
    }
    let before = common::allocations();
    for _ in 0..100 {
        round();
    }
    common::allocations() - before
}

fn host_calls_allocate_only_past_their_documented_room() {
    use fenceline::device::HOST_CALL_INLINE_BYTES as ROOM;
    let device = Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(host_call_allocations_per_100::<ROOM>(&device), 0);
    assert_eq!(
        host_call_allocations_per_100::<{ ROOM + 1 }>(&device),
        100,
        "one byte more: one box per call"
    );
}

/// Records one frame's work into `cb` (fill, update, barrier, copy,
/// barrier, a 64-tile dispatch), ends it and executes it, signalling `done` to
/// `frame` once frame `frame - 1` signalled it.
fn record_frame(
    cb: &mut fenceline::CommandBuffer,
    queue: &fenceline::Queue,
    bufs: &[fenceline::Buffer; 2],
    done: &Semaphore,
    frame: u64,
    sum: &Arc<AtomicU64>,
) {
    let f = frame as u8;
    cb.fill(&bufs[0], 0, 64, &[f]).unwrap();
    cb.update(&[f; 16], &bufs[1], 32).unwrap();
    // Commands between barriers may run in parallel: the copy reads what
    // the fill wrote only after a barrier. (Without it the copy raced the
    // fill; the injector's old FIFO order happened to run the fill first.)
    cb.barrier().unwrap();
    cb.copy(&bufs[0], 0, &bufs[1], 0, 32).unwrap();
    cb.barrier().unwrap();
    let s = sum.clone();
    cb.dispatch([8, 8, 1], move |t: &Tile| {
        s.fetch_add(u64::from(t.workgroup_id[1]), Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    // After the previous frame: a queue orders nothing by itself.
    queue
        .execute(&[(done, frame - 1)], &[(done, frame)], &[cb])
        .unwrap();
}

/// Allocations of `frames` frames after as many warm-up ones; `fresh`
/// records each frame into a new command buffer, otherwise one command
/// buffer is reset and re-recorded. At most 8 frames are in flight.
fn frames_allocations(fresh: bool, one_shot: bool, frames: u64) -> usize {
    let device = Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap();
    let queue = device.queue(0).unwrap();
    let bufs = [device.buffer(64).unwrap(), device.buffer(64).unwrap()];
    let done = Semaphore::new(0);
    let sum = Arc::new(AtomicU64::new(0));
    let new_cb = || {
        if one_shot {
            device.command_buffer_one_shot().unwrap()
        } else {
            device.command_buffer().unwrap()
        }
    };
    let mut reused = new_cb();
    let mut run = |from: u64, to: u64| {
        for frame in from..to {
            if fresh {
                let mut cb = new_cb();
                record_frame(&mut cb, &queue, &bufs, &done, frame, &sum);
            } else {
                reused.reset().unwrap();
                record_frame(&mut reused, &queue, &bufs, &done, frame, &sum);
            }
            if frame % 8 == 7 {
                done.wait(frame, Duration::from_secs(10)).unwrap();
            }
        }
        done.wait(to - 1, Duration::from_secs(10)).unwrap();
    };
    run(1, frames + 1);
    // Then as many frames in flight at once as the measured run can have
    // (8, and one recording), behind a gate: the device's pools reach
    // their size whatever the timing (a worker descheduled at the wrong
    // moment would otherwise make the measured run the first to need a
    // ninth recording).
    let (gate, burst) = (Semaphore::new(0), Semaphore::new(0));
    for k in 1..=9u64 {
        let mut cb = new_cb();
        cb.fill(&bufs[0], 0, 64, &[1]).unwrap();
        cb.end().unwrap();
        let wait = if k == 1 { (&gate, 1) } else { (&burst, k - 1) };
        queue.execute(&[wait], &[(&burst, k)], &[&cb]).unwrap();
    }
    gate.signal(1).unwrap();
    burst.wait(9, Duration::from_secs(10)).unwrap();
    let before = common::allocations();
    run(frames + 1, 2 * frames + 1);
    let allocations = common::allocations() - before;
    assert_eq!(
        sum.load(Ordering::Relaxed),
        2 * frames * 8 * 28,
        "every tile ran"
    );
    let mut out = [0u8; 64];
    bufs[1].read(0, &mut out).unwrap();
    let last = (2 * frames) as u8;
    assert_eq!(out[..48], [last; 48], "the last frame's copy and update");
    allocations
}

fn fresh_recordings_every_frame_allocate_nothing() {
    for one_shot in [false, true] {
        let n = frames_allocations(true, one_shot, 10_000);
        assert_eq!(
            n, 0,
            "10k fresh frames (one-shot {one_shot}) allocated {n} times"
        );
    }
}

fn reset_and_rerecord_every_frame_allocates_nothing() {
    let n = frames_allocations(false, false, 10_000);
    assert_eq!(n, 0, "10k reset frames allocated {n} times");
}

/// Runs frames 1..=1000 to warm up, then counts the allocations of the
/// next 10k, which must be none.
fn warm_then_count(frame: impl Fn(u64), what: &str) {
    for k in 1..=1000 {
        frame(k);
    }
    let before = common::allocations();
    for k in 1001..=11_000 {
        frame(k);
    }
    let n = common::allocations() - before;
    assert_eq!(n, 0, "10k {what} frames allocated {n} times");
}

/// Bound-dispatch frames: a host write of `x`, a dispatch recorded fresh
/// every frame that reads `x` and writes `y` in chunks (its action takes
/// and gives back both buffers' holds), a host read of `y`. Once warm, 10k
/// frames allocate nothing (the bindings live in the recycled recording).
fn bound_frames_allocate_nothing() {
    let device = Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap();
    let queue = device.queue(0).unwrap();
    let (x, y) = (device.buffer(1024).unwrap(), device.buffer(1024).unwrap());
    let done = Semaphore::new(0);
    let frame = |k: u64| {
        let word = (k as u32).to_ne_bytes();
        let mut input = [0u8; 1024];
        for c in input.chunks_exact_mut(4) {
            c.copy_from_slice(&word);
        }
        x.write(0, &input).unwrap();
        let mut cb = device.command_buffer().unwrap();
        cb.dispatch_with(
            [4, 1, 1],
            &[Binding::read(&x), Binding::write_chunks(&y, 256)],
            |t: &Tile, io: &TileIo<'_>| {
                let x: &[u32] = io.read(0)?;
                let y: &mut [u32] = io.chunk(1)?;
                let base = t.linear_id() as usize * 64;
                for (i, out) in y.iter_mut().enumerate() {
                    *out = x[base + i] + 1;
                }
                Ok(())
            },
        )
        .unwrap();
        cb.end().unwrap();
        queue.execute(&[], &[(&done, k)], &[&cb]).unwrap();
        done.wait(k, Duration::from_secs(10)).unwrap();
        let mut out = [0u8; 1024];
        y.read(0, &mut out).unwrap();
        let want = (k as u32 + 1).to_ne_bytes();
        assert!(out.chunks_exact(4).all(|c| c == want), "frame {k}");
    };
    warm_then_count(frame, "bound-dispatch");
}

/// Frames through a binding table: one recording of two bound dispatches
/// over slots (x -> y, then y -> z after a barrier), submitted each frame
/// with one of two buffer triples (`execute_with`), a host write before
/// and a host read after. Once warm, 10k frames allocate nothing (the
/// table is a pooled block).
fn table_frames_allocate_nothing() {
    let device = Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap();
    let queue = device.queue(0).unwrap();
    let sets: Vec<[fenceline::Buffer; 3]> = (0..2)
        .map(|_| std::array::from_fn(|_| device.buffer(256).unwrap()))
        .collect();
    let step = |from: u32, to: u32| {
        move |t: &Tile, io: &TileIo<'_>| {
            let x: &[u32] = io.read(from as usize)?;
            let y: &mut [u32] = io.chunk(to as usize)?;
            let base = t.linear_id() as usize * 16;
            for (i, out) in y.iter_mut().enumerate() {
                *out = x[base + i] + 1;
            }
            Ok(())
        }
    };
    let mut cb = device.command_buffer().unwrap();
    cb.dispatch_with(
        [4, 1, 1],
        &[Binding::slot_read(0), Binding::slot_write_chunks(1, 64)],
        step(0, 1),
    )
    .unwrap();
    cb.barrier().unwrap();
    cb.dispatch_with(
        [4, 1, 1],
        &[Binding::slot_read(1), Binding::slot_write_chunks(2, 64)],
        step(0, 1),
    )
    .unwrap();
    cb.end().unwrap();
    let done = Semaphore::new(0);
    let frame = |k: u64| {
        let [x, y, z] = &sets[(k % 2) as usize];
        let mut input = [0u8; 256];
        for c in input.chunks_exact_mut(4) {
            c.copy_from_slice(&(k as u32).to_ne_bytes());
        }
        x.write(0, &input).unwrap();
        queue
            .execute_with(&[], &[(&done, k)], &[&cb], &[x, y, z])
            .unwrap();
        done.wait(k, Duration::from_secs(10)).unwrap();
        let mut out = [0u8; 256];
        z.read(0, &mut out).unwrap();
        let want = (k as u32 + 2).to_ne_bytes();
        assert!(out.chunks_exact(4).all(|c| c == want), "frame {k}");
    };
    warm_then_count(frame, "binding-table");
}

/// The data plane's frame loop: a host write of `x`, an `alloca` of the
/// intermediate `y`, one recording of two bound dispatches through a
/// binding table (x -> y, barrier, y -> z), a `dealloca` of `y`, a host
/// read of `z`. Once warm, 10k frames allocate nothing (pooled table,
/// pooled transient memory and handles).
fn alloca_frames_allocate_nothing() {
    let device = Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap();
    let queue = device.queue(0).unwrap();
    let (x, z) = (device.buffer(256).unwrap(), device.buffer(256).unwrap());
    let step = |t: &Tile, io: &TileIo<'_>| {
        let x: &[u32] = io.read(0)?;
        let y: &mut [u32] = io.chunk(1)?;
        let base = t.linear_id() as usize * 16;
        for (i, out) in y.iter_mut().enumerate() {
            *out = x[base + i] + 1;
        }
        Ok(())
    };
    let mut cb = device.command_buffer().unwrap();
    cb.dispatch_with(
        [4, 1, 1],
        &[Binding::slot_read(0), Binding::slot_write_chunks(1, 64)],
        step,
    )
    .unwrap();
    cb.barrier().unwrap();
    cb.dispatch_with(
        [4, 1, 1],
        &[Binding::slot_read(1), Binding::slot_write_chunks(2, 64)],
        step,
    )
    .unwrap();
    cb.end().unwrap();
    let s = Semaphore::new(0);
    let frame = |k: u64| {
        let v = 3 * k;
        let mut input = [0u8; 256];
        for c in input.chunks_exact_mut(4) {
            c.copy_from_slice(&(k as u32).to_ne_bytes());
        }
        x.write(0, &input).unwrap();
        let y = queue.alloca(&[(&s, v - 3)], &[(&s, v - 2)], 256).unwrap();
        queue
            .execute_with(&[(&s, v - 2)], &[(&s, v - 1)], &[&cb], &[&x, &y, &z])
            .unwrap();
        queue.dealloca(&[(&s, v - 1)], &[(&s, v)], &y).unwrap();
        drop(y);
        s.wait(v, Duration::from_secs(10)).unwrap();
        let mut out = [0u8; 256];
        z.read(0, &mut out).unwrap();
        let want = (k as u32 + 2).to_ne_bytes();
        assert!(out.chunks_exact(4).all(|c| c == want), "frame {k}");
    };
    warm_then_count(frame, "alloca");
}

/// The checks above, one after another in this binary's only test: the
/// allocation count is process-wide, and a second test's thread, started
/// late on a busy machine, allocates on itself before its body runs
/// (libtest's set-up: 2 allocations measured) inside another test's
/// window.
#[test]
fn one_check_after_another() {
    execute_allocates_nothing(two_workers(1, &[]), 0);
    // With priority levels: the `Low` queue's dispatches claim tiles one at
    // a time and go through the level injectors; the `High` queue's hop.
    execute_allocates_nothing(two_workers(2, &[Priority::High, Priority::Low]), 1);
    execute_allocates_nothing(two_workers(2, &[Priority::High, Priority::Low]), 0);
    host_calls_allocate_only_past_their_documented_room();
    fresh_recordings_every_frame_allocate_nothing();
    reset_and_rerecord_every_frame_allocates_nothing();
    bound_frames_allocate_nothing();
    table_frames_allocate_nothing();
    alloca_frames_allocate_nothing();
}
