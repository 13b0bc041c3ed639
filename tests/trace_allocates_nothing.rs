//! Feature `trace`, with a counting global allocator: once a trace's rings
//! exist (allocated by `start_trace`) and every thread has its slot,
//! recording allocates nothing.
#![cfg(feature = "trace")]

use std::time::Duration;

use fenceline::{CpuConfig, Device, Semaphore};

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

const T: Duration = Duration::from_secs(10);

#[test]
fn recording_allocates_nothing_after_warmup() {
    let d = Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        spin: false,
    })
    .unwrap();
    let q = d.queue(0).unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch([16, 1, 1], |_| Ok(())).unwrap();
    cb.end().unwrap();
    let s = Semaphore::new(0);
    let mut v = 0;
    let mut frames = |n: u64| {
        for _ in 0..n {
            q.execute(&[(&s, v)], &[(&s, v + 1)], &[&cb]).unwrap();
            q.host_call(&[(&s, v + 1)], &[(&s, v + 2)], || Ok(()))
                .unwrap();
            v += 2;
        }
        s.wait(v, T).unwrap();
    };
    // Warm: the pools hold the 4000 actions a run of 2000 frames queues.
    frames(2000);
    d.start_trace(1 << 12).unwrap();
    // Warm-up under the trace: every thread claims its slot, every task
    // kind gets its name index.
    frames(2000);
    std::thread::sleep(Duration::from_millis(20));
    let before = common::keep_sizes();
    // Fewer frames than the warm-ups queued: no pool needs to grow.
    frames(1000);
    std::thread::sleep(Duration::from_millis(20));
    let during = common::allocations() - before;
    let trace = d.stop_trace().unwrap();
    assert!(trace.events() > 0);
    assert_eq!(
        during,
        0,
        "allocations while recording 1000 frames (sizes {:?})",
        common::sizes_since(before)
    );
}
