//! loom model of the CUDA device's `HostFunction` completion path
//! (`src/device/cuda/completer.rs`), on the testing backend: the issuer
//! enqueues a callback for each issued action ("launch") and then pushes
//! the action on a `CompletionStack`; the "driver" runs callbacks in order,
//! each only counting and unparking the completion thread; the completion
//! thread moves pushed actions to its FIFO and completes as many as were
//! counted, treating a count that arrives before its push as credit.
//! Every action completes exactly once, in order, and no wake-up is lost
//! (a lost one deadlocks the model).
#![cfg(fenceline_loom)]

use fenceline::queue::PendingQueue;
use fenceline::testing::CompletionStack;
use fenceline::testing::TestingBackend;
use fenceline::Semaphore;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Notify};
use loom::thread;

#[test]
fn counted_callbacks_complete_pushed_actions_in_order() {
    loom::model(|| {
        let q = Arc::new(PendingQueue::new(TestingBackend::new(false)).unwrap());
        let stack = Arc::new(CompletionStack::<TestingBackend>::default());
        let launched = Arc::new(AtomicU64::new(0));
        let reached = Arc::new(AtomicU64::new(0));
        let launch = Arc::new(Notify::new());
        let (a, b) = (Semaphore::new(0), Semaphore::new(0));
        // Both issued at once (the testing backend holds them).
        q.submit(&[], &[(&a, 1)], 1).unwrap();
        q.submit(&[], &[(&b, 1)], 2).unwrap();

        let completer = {
            let (stack, reached) = (stack.clone(), reached.clone());
            thread::spawn(move || {
                let mut fifo = stack.take_all();
                let mut counted = 0;
                while counted < 2 {
                    fifo.append(stack.take_all());
                    let r = reached.load(Ordering::Acquire);
                    let mut progressed = false;
                    while counted < r {
                        let Some(work) = fifo.next() else { break };
                        work.complete(Ok(()));
                        counted += 1;
                        progressed = true;
                    }
                    if progressed || counted == 2 {
                        continue;
                    }
                    if fifo.is_empty() && r > counted {
                        // Counted before pushed: the push is imminent.
                        thread::yield_now();
                        continue;
                    }
                    thread::park();
                }
            })
        };
        let wake = completer.thread().clone();
        // The "driver": runs each launched callback, in order.
        let driver = {
            let (launched, reached, launch) = (launched.clone(), reached.clone(), launch.clone());
            thread::spawn(move || {
                let mut ran = 0;
                while ran < 2 {
                    if launched.load(Ordering::Acquire) > ran {
                        reached.fetch_add(1, Ordering::Release);
                        wake.unpark();
                        ran += 1;
                    } else {
                        launch.wait();
                    }
                }
            })
        };
        // The issuer: launch the callback, then push (no wake of its own).
        while let Some(work) = q.backend().take_next() {
            launched.fetch_add(1, Ordering::Release);
            launch.notify();
            stack.push(work);
        }
        driver.join().unwrap();
        completer.join().unwrap();
        assert_eq!((a.query().unwrap(), b.query().unwrap()), (1, 1));
        assert_eq!(q.backend().issued_log(), [1, 2]);
        assert!(stack.is_empty());
    });
}
