//! loom models of `Semaphore::wait_async`'s future on the real code: a
//! drop racing the signal that fires its timepoint, and a poll with a new
//! waker racing that signal. Wakers count their wakes (std's `Wake` over
//! a loom atomic).
#![cfg(fenceline_loom)]

use fenceline::testing::SemaphoreInternals;
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

// Catches: a callback touching a dropped future's node after it was
// given back (the crate's liveness check, under the model checker, panics
// in the callback), a node given back twice (the pool's liveness check),
// and a timepoint left registered after the drop (the second signal would
// fire it). The drop abandons the timepoint unless the firing claimed it;
// then it sets its mark and returns (never waits): the later of the drop
// and the callback gives the node back. Mutations checked: the drop
// giving the node back after a failed abandon without looking at the
// callback's mark ("use after free: a pooled value (released twice)");
// the callback writing its outcome after its mark (loom: a causality
// violation on the outcome's cell, the future having freed the node);
// the callback giving the node back whatever the drop's mark says
// ("released twice").
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

// Catches, with two futures in one batch and the second dropped while
// another thread's signal claims and fires them: a node freed while its
// callback still uses it, or freed twice, or never (the wake counts and a
// node reused afterwards). The dropped future's waker may be woken at most
// once (a drop racing its callback), the kept one exactly once. Mutations
// checked: the drop giving the node back whatever the callback's mark
// says, and the callback giving it back whatever the drop's mark says
// (each: "use after free: a pooled value (released twice)").
#[test]
fn a_drop_racing_the_fire_gives_the_node_back_once() {
    loom::model(|| {
        let s = Semaphore::new(0);
        let (kept, w1) = waker();
        let (dropped, w2) = waker();
        let mut f1 = Box::pin(s.wait_async(1));
        let mut f2 = Box::pin(s.wait_async(1));
        assert!(poll(f1.as_mut(), &w1).is_pending());
        assert!(poll(f2.as_mut(), &w2).is_pending());
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1).unwrap())
        };
        drop(f2);
        signaller.join().unwrap();
        assert!(matches!(poll(f1.as_mut(), &w1), Poll::Ready(Ok(()))));
        assert_eq!(kept.0.load(Ordering::SeqCst), 1);
        assert!(dropped.0.load(Ordering::SeqCst) <= 1);
        drop(f1);
        // The nodes are back in the pool, once each: two new futures get
        // two distinct nodes that work.
        let mut g1 = Box::pin(s.wait_async(2));
        let mut g2 = Box::pin(s.wait_async(2));
        assert!(poll(g1.as_mut(), &w1).is_pending());
        assert!(poll(g2.as_mut(), &w2).is_pending());
        s.signal(2).unwrap();
        assert!(matches!(poll(g1.as_mut(), &w1), Poll::Ready(Ok(()))));
        assert!(matches!(poll(g2.as_mut(), &w2), Poll::Ready(Ok(()))));
        assert_eq!(s.timepoints_registered(), 0);
    });
}
