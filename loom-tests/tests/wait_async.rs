//! loom models of `Semaphore::wait_async`'s future on the real code: a
//! drop racing the signal that fires its timepoint, and a poll with a new
//! waker racing that signal. Wakers count their wakes (std's `Wake` over
//! a loom atomic).
#![cfg(fenceline_loom)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};

use fenceline::Semaphore;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn waker() -> (std::sync::Arc<Count>, Waker) {
    let c = std::sync::Arc::new(Count(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}

fn poll<F: Future>(f: Pin<&mut F>, w: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(w))
}

// Catches: a callback touching a dropped future (the drop returned while
// the signaller's callback still used the node: the crate's liveness
// check, under the model checker, panics in the callback), and a
// timepoint left registered after the drop (the second signal would fire
// it). The drop abandons the timepoint (never waits for the signaller)
// unless it fired. Mutation checked: the drop's wait for `done` after a
// failed abandon removed: the callback's liveness check panics ("use
// after free: a wait_async future's node ...").
#[test]
fn a_dropped_wait_future_is_never_touched_by_the_signal() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1).unwrap())
        };
        let (_count, w) = waker();
        {
            let mut f = Box::pin(s.wait_async(1));
            let _ = poll(f.as_mut(), &w);
            drop(f);
        }
        signaller.join().unwrap();
        // Nothing left registered: a second signal fires nothing.
        s.signal(2).unwrap();
    });
}

// Catches: a lost wake-up when the task's waker is replaced while the
// signal fires (the callback takes the old waker; the new one must be
// woken, or the second poll must see the outcome). Mutation checked: the
// callback's mark cleared after it takes the waker (`futures`' reusable
// `AtomicWaker`): a poll with the new waker stores it after the take,
// sees no outcome yet and returns `Pending`, and nobody wakes it.
#[test]
fn a_new_waker_racing_the_signal_is_woken_or_sees_the_outcome() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let (first, w1) = waker();
        let mut f = Box::pin(s.wait_async(1));
        assert!(poll(f.as_mut(), &w1).is_pending());
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1).unwrap())
        };
        let (second, w2) = waker();
        let polled = poll(f.as_mut(), &w2);
        signaller.join().unwrap();
        match polled {
            Poll::Ready(r) => r.unwrap(),
            Poll::Pending => {
                // Pending with the new waker: it must have been woken, and
                // the next poll sees the outcome.
                assert!(
                    second.0.load(Ordering::SeqCst) >= 1,
                    "the new waker was not woken (old one: {})",
                    first.0.load(Ordering::SeqCst)
                );
                assert!(matches!(poll(f.as_mut(), &w2), Poll::Ready(Ok(()))));
            }
        }
    });
}
