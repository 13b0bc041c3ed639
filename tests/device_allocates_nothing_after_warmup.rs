//! With a counting global allocator: after warm-up, 20k `execute` calls
//! (1 wait, 1 signal, one reused command buffer with a 64-tile dispatch)
//! allocate nothing on any thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceline::{CpuConfig, Device, Semaphore, Tile};

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

#[test]
fn execute_allocates_nothing() {
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
