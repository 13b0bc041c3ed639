//! `Semaphore::wait_async` from a hand-written `block_on` and from tokio
//! (current-thread and multi-thread runtimes, awaiting CPU device work);
//! 10k futures released by one signal; dropped futures; failures; waker
//! replacement.

use fenceline::testing::SemaphoreInternals;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use fenceline::{CpuConfig, Device, Error, ErrorKind, Semaphore};

/// Wakes by unparking the thread that blocks on the future.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// The smallest executor: poll, park until woken, poll again.
fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_secs(10));
    }
}

/// Counts its wakes.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Arc<Count>, Waker) {
    let c = Arc::new(Count::default());
    (c.clone(), Waker::from(c))
}

fn poll_once<F: Future>(f: Pin<&mut F>, w: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(w))
}

fn device() -> Device {
    Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn block_on_resolves_when_another_thread_signals() {
    let s = Semaphore::new(0);
    let producer = s.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        producer.signal(5)
    });
    block_on(s.wait_async(5)).unwrap();
    t.join().unwrap().unwrap();
    // Reached already: ready at the first poll, nothing registered.
    block_on(s.wait_async(3)).unwrap();
    assert_eq!(s.timepoints_registered(), 0);
}

#[test]
fn a_failure_resolves_with_the_semaphores_error() {
    let s = Semaphore::new(0);
    let (_c, w) = counting();
    let mut f = pin!(s.wait_async(1));
    assert!(poll_once(f.as_mut(), &w).is_pending());
    s.fail(Error::new(ErrorKind::Internal, "boom"));
    match poll_once(f.as_mut(), &w) {
        Poll::Ready(Err(e)) => assert_eq!(e.kind(), ErrorKind::Internal),
        other => panic!("expected the failure, got {other:?}"),
    }
    // Failed before the first poll: the same error at once.
    let e = block_on(s.wait_async(9)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal);
}

#[test]
fn ten_thousand_futures_are_released_by_one_signal() {
    const N: usize = 10_000;
    let s = Semaphore::new(0);
    let (count, w) = counting();
    let mut futures: Vec<Pin<Box<_>>> = (0..N).map(|_| Box::pin(s.wait_async(1))).collect();
    for f in futures.iter_mut() {
        assert!(poll_once(f.as_mut(), &w).is_pending());
    }
    assert_eq!(s.timepoints_registered(), N);
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    s.signal(1).unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), N, "every future woken once");
    for f in futures.iter_mut() {
        assert!(matches!(poll_once(f.as_mut(), &w), Poll::Ready(Ok(()))));
    }
    assert_eq!(s.timepoints_registered(), 0);
}

#[test]
fn dropped_futures_leave_nothing_registered_and_are_never_woken() {
    let s = Semaphore::new(0);
    let (dropped, wd) = counting();
    let (kept, wk) = counting();
    let mut keep: Vec<Pin<Box<_>>> = Vec::new();
    for i in 0..100 {
        let mut f = Box::pin(s.wait_async(1 + (i % 3)));
        if i % 2 == 0 {
            assert!(poll_once(f.as_mut(), &wd).is_pending());
            drop(f);
        } else {
            assert!(poll_once(f.as_mut(), &wk).is_pending());
            keep.push(f);
        }
    }
    assert_eq!(s.timepoints_registered(), 50);
    s.signal(3).unwrap();
    assert_eq!(
        dropped.0.load(Ordering::SeqCst),
        0,
        "a dropped future was woken"
    );
    assert_eq!(kept.0.load(Ordering::SeqCst), 50);
    drop(keep);
    assert_eq!(s.timepoints_registered(), 0);
    // A future never polled registers nothing.
    drop(s.wait_async(10));
    assert_eq!(s.timepoints_registered(), 0);
}

#[test]
fn a_poll_with_a_new_waker_replaces_the_old_one() {
    let s = Semaphore::new(0);
    let (first, w1) = counting();
    let (second, w2) = counting();
    let mut f = pin!(s.wait_async(1));
    assert!(poll_once(f.as_mut(), &w1).is_pending());
    assert!(poll_once(f.as_mut(), &w2).is_pending());
    s.signal(1).unwrap();
    assert_eq!(
        first.0.load(Ordering::SeqCst),
        0,
        "the replaced waker was woken"
    );
    assert_eq!(second.0.load(Ordering::SeqCst), 1);
    assert!(matches!(poll_once(f.as_mut(), &w2), Poll::Ready(Ok(()))));
}

#[test]
fn drops_racing_signals_on_threads_never_touch_a_dropped_future() {
    // Many short races of a drop against the signal that fires it (the
    // loom model checks every interleaving of one; this runs the real
    // thing on two cores).
    for round in 0..2000u64 {
        let s = Semaphore::new(0);
        let (_c, w) = counting();
        let mut f = Box::pin(s.wait_async(1));
        assert!(poll_once(f.as_mut(), &w).is_pending());
        let t = {
            let s = s.clone();
            std::thread::spawn(move || s.signal(1).unwrap())
        };
        if round % 2 == 0 {
            std::thread::yield_now();
        }
        drop(f);
        t.join().unwrap();
        assert_eq!(s.timepoints_registered(), 0);
    }
}

#[test]
fn tokio_current_thread_awaits_device_work() {
    let d = device();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        for frame in 1..=50u64 {
            let r = ran.clone();
            q.host_call(&[], &[(&s, frame)], move || {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
            s.wait_async(frame).await.unwrap();
            assert_eq!(ran.load(Ordering::SeqCst) as u64, frame);
        }
    });
}

#[test]
fn tokio_multi_thread_tasks_await_device_work() {
    let d = device();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        // 64 tasks, each awaiting its own value; the device's chain of
        // executes reaches them one after another.
        let tasks: Vec<_> = (1..=64u64)
            .map(|v| {
                let s = s.clone();
                tokio::spawn(async move { s.wait_async(v).await })
            })
            .collect();
        let mut cb = d.command_buffer().unwrap();
        cb.dispatch([4, 1, 1], |_| Ok(())).unwrap();
        cb.end().unwrap();
        q.execute(&[], &[(&s, 1)], &[&cb]).unwrap();
        for v in 1..64u64 {
            q.execute(&[(&s, v)], &[(&s, v + 1)], &[&cb]).unwrap();
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    });
    assert_eq!(s.query().unwrap(), 64);
    assert_eq!(s.timepoints_registered(), 0);
}

#[test]
fn tokio_select_drops_the_losing_wait() {
    let s = Semaphore::new(0);
    let other = Semaphore::new(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let signaller = {
            let s = s.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                s.signal(1).unwrap();
            })
        };
        tokio::select! {
            r = s.wait_async(1) => r.unwrap(),
            _ = other.wait_async(1) => panic!("never signalled"),
        }
        signaller.join().unwrap();
    });
    // The losing future was dropped: nothing left on `other`.
    assert_eq!(other.timepoints_registered(), 0);
}

/// The future's timepoint is a pooled node, not inline, so the future is
/// `Unpin`: polled (registered), moved, and polled again, it resolves;
/// moved and dropped while registered, it is never woken and leaves
/// nothing registered.
#[test]
fn a_registered_future_can_be_moved() {
    fn assert_unpin<T: Unpin>(_: &T) {}
    let s = Semaphore::new(0);
    let (count, w) = counting();
    let mut f = s.wait_async(1);
    assert_unpin(&f);
    assert!(poll_once(Pin::new(&mut f), &w).is_pending());
    let mut moved = Box::new(f);
    let (dropped_count, wd) = counting();
    let mut g = s.wait_async(2);
    assert!(poll_once(Pin::new(&mut g), &wd).is_pending());
    let g = Box::new(g);
    assert_eq!(s.timepoints_registered(), 2);
    drop(g);
    assert_eq!(s.timepoints_registered(), 1);
    s.signal(2).unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert_eq!(dropped_count.0.load(Ordering::SeqCst), 0);
    assert!(matches!(
        poll_once(Pin::new(&mut *moved), &w),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(s.timepoints_registered(), 0);
}
