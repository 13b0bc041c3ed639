//! With a counting global allocator: once warm, the Vulkan device's
//! submissions allocate nothing in fenceline, on any thread: 20k chained
//! `execute` calls alternating between two queues (one reused command
//! buffer dispatching a kernel; most waits met on the GPU, on pooled
//! points), fresh one-shot recordings every frame (fill, update at odd
//! offsets, dispatch: staged bytes kept with the recycled recordings),
//! submissions through a binding table, and frames of alloca, fill and
//! dealloca across two queues (buffers recycled by the device's pool). The driver (lavapipe) and the
//! validation layer are C libraries with their own allocator: not counted.
//!
//! Mutation checked: the ring of command buffers never reused (a new one
//! for every submission: `ash` returns each in a `Vec`): 20,002
//! allocations in the 20k executes; alloca buffers never taken back by
//! the pool (`recycle: None`): 4,000 allocations in the 2k alloca frames.
#![cfg(feature = "vulkan")]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use fenceline::{Semaphore, SpirvBinding};

mod common;
#[path = "common/vulkan.rs"]
mod vulkan;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

const LONG: Duration = Duration::from_secs(30);

#[test]
fn submissions_allocate_nothing_once_warm() {
    // No validation layer: it is not what is measured, and it slows the
    // 60k submissions down tenfold.
    let Some(device) = vulkan::device_with(fenceline::VulkanConfig {
        queues: 2,
        points: 128,
        ..Default::default()
    }) else {
        return;
    };
    let counter = device.buffer(4).unwrap();
    let kernel = vulkan::count_kernel(&device);
    let mut cb = device.command_buffer().unwrap();
    cb.dispatch_spirv(&kernel, [2, 1, 1], &[SpirvBinding::Buffer(&counter)], &[])
        .unwrap();
    cb.end().unwrap();
    let queues = [device.queue(0).unwrap(), device.queue(1).unwrap()];
    let chain = Semaphore::new(0);
    // Each queue also counts its own completions (see the CUDA twin of
    // this test): waiting on both bounds the backlog, to 16 executes (8 a
    // queue, below the ring of command buffers a queue starts with, so
    // the count does not depend on how far ahead of the GPU the loop runs).
    let done = [Semaphore::new(0), Semaphore::new(0)];
    let run = |from: u64, to: u64| {
        for i in from..to {
            let q = (i % 2) as usize;
            queues[q]
                .execute(
                    &[(&chain, i)],
                    &[(&chain, i + 1), (&done[q], i / 2 + 1)],
                    &[&cb],
                )
                .unwrap();
            if i % 16 == 15 || i + 1 == to {
                fenceline::wait_all(&[(&done[0], i / 2 + 1), (&done[1], i.div_ceil(2))], LONG)
                    .unwrap();
            }
        }
        chain.wait(to, LONG).unwrap();
    };
    run(0, 20_000);
    let device_waits = device.stats().device_waits;
    let before = common::allocations();
    run(20_000, 40_000);
    let allocations = common::allocations() - before;
    assert_eq!(allocations, 0, "20k executes allocated {allocations} times");
    let device_waits = device.stats().device_waits - device_waits;
    assert!(device_waits > 1_000, "only {device_waits} GPU waits");
    assert!(device.stats().events_created <= 128);
    let mut v = [0u8; 4];
    counter.read(0, &mut v).unwrap();
    assert_eq!(u32::from_le_bytes(v), 80_000, "two workgroups a run");

    // Fresh one-shot recordings every frame, and a binding table.
    let (a, b) = (device.buffer(64).unwrap(), device.buffer(64).unwrap());
    let frames = Semaphore::new(0);
    // At most two frames in flight (frame `f - 2` done before frame `f`
    // records): the recordings a frame loop needs is bounded, and the
    // warm-up reaches it whatever the timing (under AddressSanitizer too).
    let frame = |f: u64| {
        frames.wait(f.saturating_sub(2), LONG).unwrap();
        let mut cb = device.command_buffer_one_shot().unwrap();
        cb.fill(&a, 1, 13, &[f as u8]).unwrap();
        cb.barrier().unwrap();
        cb.update(&[1, 2, 3], &a, 21).unwrap();
        cb.dispatch_spirv(&kernel, [1, 1, 1], &[SpirvBinding::Slot(0)], &[])
            .unwrap();
        cb.end().unwrap();
        // The table's buffer counts the frames (a buffer written directly
        // may not also be bound through the table).
        let table = [&b];
        queues[0]
            .execute_with(&[(&frames, f - 1)], &[(&frames, f)], &[&cb], &table)
            .unwrap();
    };
    for f in 1..=2_000 {
        frame(f);
    }
    frames.wait(2_000, LONG).unwrap();
    let before = common::allocations();
    for f in 2_001..=4_000 {
        frame(f);
    }
    frames.wait(4_000, LONG).unwrap();
    let allocations = common::allocations() - before;
    assert_eq!(
        allocations, 0,
        "2k fresh frames allocated {allocations} times"
    );
    let mut got = [0u8; 24];
    a.read(0, &mut got).unwrap();
    assert_eq!(got[1..14], [(4_000 % 256) as u8; 13]);
    assert_eq!(got[21..24], [1, 2, 3]);
    let mut v = [0u8; 4];
    b.read(0, &mut v).unwrap();
    assert_eq!(u32::from_le_bytes(v), 4_000, "one workgroup a frame");

    // Frames of alloca (queue 0), a fill of it (queue 1), dealloca (queue
    // 0), at most three frames alive: before frame `f`'s alloca, frame
    // `f - 2`'s dealloca was seen, and its last handle is dropped.
    let [alloc, filled, freed] = [0; 3].map(Semaphore::new);
    let mut fill = device.command_buffer_one_shot().unwrap();
    let mut frame = |f: u64| {
        freed.wait(f.saturating_sub(2), LONG).unwrap();
        let tmp = queues[0]
            .alloca(
                &[(&alloc, f - 1)],
                &[(&alloc, f)],
                1000 + (f as usize % 3) * 300,
            )
            .unwrap();
        fill.reset().unwrap();
        fill.fill(&tmp, 0, 1000, &[f as u8]).unwrap();
        fill.end().unwrap();
        queues[1]
            .execute(&[(&alloc, f), (&filled, f - 1)], &[(&filled, f)], &[&fill])
            .unwrap();
        queues[0]
            .dealloca(&[(&filled, f), (&freed, f - 1)], &[(&freed, f)], &tmp)
            .unwrap();
        tmp
    };
    for f in 1..=2_000 {
        frame(f);
    }
    freed.wait(2_000, LONG).unwrap();
    let before = common::allocations();
    for f in 2_001..4_000 {
        frame(f);
    }
    let last = frame(4_000);
    freed.wait(4_000, LONG).unwrap();
    let allocations = common::allocations() - before;
    assert_eq!(
        allocations, 0,
        "2k alloca frames allocated {allocations} times"
    );
    let e = last.read(0, &mut [0u8; 4]).unwrap_err();
    assert_eq!(e.kind(), fenceline::ErrorKind::FailedPrecondition);

    // A dealloca's buffer is back in the pool when its signal is seen and
    // the last handle dropped: seen here by a waker, which runs on the
    // completion thread inside the signal, drops the last handle and
    // allocas again at once (one buffer of this size in the pool).
    // Mutation checked: `work::release_held` leaving an alloca's or
    // dealloca's handle in the action (dropped after its signals): the
    // alloca in the waker allocates, every run.
    struct Again {
        tmp: Mutex<Option<fenceline::Buffer>>,
        next: Mutex<Option<fenceline::Buffer>>,
        queue: fenceline::Queue,
    }
    impl Wake for Again {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            drop(self.tmp.lock().unwrap().take());
            let next = self.queue.alloca(&[], &[], 70_000).unwrap();
            *self.next.lock().unwrap() = Some(next);
        }
    }
    let s = Semaphore::new(0);
    let warm = queues[0].alloca(&[], &[(&s, 1)], 70_000).unwrap();
    queues[0].dealloca(&[(&s, 1)], &[(&s, 2)], &warm).unwrap();
    s.wait(2, LONG).unwrap();
    drop(warm);
    let again = Arc::new(Again {
        tmp: Mutex::new(None),
        next: Mutex::new(None),
        queue: queues[1].clone(),
    });
    let waker = Waker::from(again.clone());
    let gate = Semaphore::new(0);
    let tmp = queues[0].alloca(&[], &[(&s, 3)], 70_000).unwrap();
    s.wait(3, LONG).unwrap();
    queues[0].dealloca(&[(&gate, 1)], &[(&s, 4)], &tmp).unwrap();
    *again.tmp.lock().unwrap() = Some(tmp);
    let mut wait = std::pin::pin!(s.wait_async(4));
    assert!(wait
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    let before = common::allocations();
    gate.signal(1).unwrap();
    s.wait(4, LONG).unwrap();
    while again.next.lock().unwrap().is_none() {
        std::thread::yield_now();
    }
    let allocations = common::allocations() - before;
    assert_eq!(
        allocations, 0,
        "an alloca on the dealloca's signal allocated {allocations} times"
    );
}
