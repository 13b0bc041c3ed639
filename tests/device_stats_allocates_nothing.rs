//! With a counting global allocator: `Device::stats` allocates nothing.

use std::time::Duration;

use fenceline::Semaphore;

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

const T: Duration = Duration::from_secs(10);

#[path = "common/workload.rs"]
mod workload;
use workload::device;

#[test]
fn a_snapshot_allocates_nothing() {
    // The count leaves the harness out (`common::allocations`): before
    // this test starts any thread, every allocation counted is this
    // thread's own, although the harness's main thread has made many
    // (its setup, this thread's spawn). Mutation checked: without the
    // main thread's mark (`MARK_MAIN_THREAD`) it read 608 against this
    // thread's 2.
    #[cfg(target_os = "linux")]
    assert_eq!(common::allocations(), common::thread_allocations());
    let d = device(2);
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    q.barrier(&[], &[(&s, 1)]).unwrap();
    s.wait(1, T).unwrap();
    // Let the workers settle into their idle park (their first park sets
    // up thread-local state, which allocates once).
    std::thread::sleep(Duration::from_millis(50));
    let _ = d.stats();
    let before = common::allocations();
    let mut total = 0;
    for _ in 0..10_000 {
        total += d.stats().completed;
    }
    assert_eq!(common::allocations() - before, 0);
    assert_eq!(total, 10_000);
}
