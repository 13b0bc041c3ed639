//! With a counting global allocator: polling, registering, signalling and
//! dropping `wait_async` futures allocates nothing after warm-up (the
//! timepoint is a node from a pool that the first semaphore fills; the
//! waker here is a static one).

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

use fenceline::Semaphore;

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

fn noop_waker() -> Waker {
    const VTABLE: RawWakerVTable = RawWakerVTable::new(
        |_| RawWaker::new(std::ptr::null(), &VTABLE),
        |_| {},
        |_| {},
        |_| {},
    );
    // SAFETY: every vtable function ignores the data pointer.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

fn cycle(s: &Semaphore, v: u64, w: &Waker) {
    let mut cx = Context::from_waker(w);
    // Registered, then released by a signal.
    {
        let mut f = pin!(s.wait_async(v));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        s.signal(v).unwrap();
        assert!(matches!(f.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
    }
    // Registered, then dropped before its value.
    {
        let mut f = pin!(s.wait_async(v + 1));
        assert!(f.as_mut().poll(&mut cx).is_pending());
    }
    // Reached already: ready at once.
    let mut f = pin!(s.wait_async(v));
    assert!(matches!(f.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
}

#[test]
fn wait_async_allocates_nothing_after_warmup() {
    let s = Semaphore::new(0);
    let w = noop_waker();
    for v in 1..=100 {
        cycle(&s, v, &w);
    }
    // Every thread but the harness's counts (its main thread allocated 4
    // times in this window about once in 30 runs on a busy machine, when
    // it first waited for the test).
    let before = common::allocations();
    for v in 101..=100_100 {
        cycle(&s, v, &w);
    }
    let after = common::allocations();
    assert_eq!(
        after - before,
        0,
        "allocations in 100k poll/register/drop cycles"
    );
    assert_eq!(s.timepoints_registered(), 0);
}
