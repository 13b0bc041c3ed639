//! With a counting global allocator: 100k submit/complete cycles with 2
//! waits and 2 signals on the testing backend allocate nothing after
//! warm-up.

use fenceline::queue::PendingQueue;
use fenceline::testing::TestingBackend;
use fenceline::Semaphore;

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

#[test]
fn submit_complete_cycles_allocate_nothing() {
    let q = PendingQueue::new(TestingBackend::new(false)).unwrap();
    let (w1, w2) = (Semaphore::new(0), Semaphore::new(0));
    let (s1, s2) = (Semaphore::new(0), Semaphore::new(0));
    let cycle = |i: u64| {
        // Two waits: one already reached, one reached only by the previous
        // cycle's signal; two signals.
        q.submit(&[(&w1, 0), (&s1, i)], &[(&s1, i + 1), (&s2, i + 1)], i)
            .unwrap();
        w2.signal(i + 1).unwrap();
        assert_eq!(q.backend().complete_next(Ok(())), Some(i));
    };
    for i in 0..1000 {
        cycle(i);
    }
    q.backend().clear_log();
    // Every thread but the harness's counts (the harness's main thread
    // records the running test, 4 allocations, at a moment a busy machine
    // may put inside the window).
    let before = common::allocations();
    for i in 1000..101_000 {
        cycle(i);
        if i % 500 == 0 {
            q.backend().clear_log();
        }
    }
    let allocations = common::allocations() - before;
    assert_eq!(
        allocations, 0,
        "100k submissions allocated {allocations} times"
    );
    assert_eq!(s2.query().unwrap(), 101_000);
    let _ = w2;
}
