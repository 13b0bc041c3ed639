//! With a counting global allocator: after warm-up, 20k `execute` calls
//! (1 wait, 1 signal, one reused command buffer with a 64-tile dispatch)
//! allocate nothing on any thread; a host call allocates (one box) exactly
//! when its closure is larger than `HOST_CALL_INLINE_BYTES`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceline::{CpuConfig, Device, Semaphore, Tile};

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

/// The allocation counter is process-wide: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn execute_allocates_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let device = Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap();
    let queue = device.queue(0).unwrap();
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

#[test]
fn host_calls_allocate_only_past_their_documented_room() {
    use fenceline::device::HOST_CALL_INLINE_BYTES as ROOM;
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
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
