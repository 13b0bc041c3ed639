//! loom model of the CUDA device's completion hand-off
//! (`src/device/cuda/completer.rs`), on the testing backend: a "driver
//! callback" thread pushes issued actions on a `CompletionStack` and
//! unparks the completion thread, which drains the stack, completes, and
//! parks when it finds it empty. Every action completes exactly once, in
//! order, and no wake-up is lost (a lost one deadlocks the model).
#![cfg(loom)]

use fenceline::queue::testing::TestingBackend;
use fenceline::queue::{CompletionStack, PendingQueue};
use fenceline::Semaphore;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

#[test]
fn callback_to_completion_thread_hand_off_loses_nothing() {
    loom::model(|| {
        let q = Arc::new(PendingQueue::new(TestingBackend::new(false)).unwrap());
        let stack = Arc::new(CompletionStack::<TestingBackend>::default());
        let completed = Arc::new(AtomicUsize::new(0));
        let s = Semaphore::new(0);
        // The chain: 1 signals s=1, 2 waits on it and signals s=2.
        q.submit(&[], &[(&s, 1)], 1).unwrap();
        q.submit(&[(&s, 1)], &[(&s, 2)], 2).unwrap();

        let completer = {
            let (stack, completed) = (stack.clone(), completed.clone());
            thread::spawn(move || {
                while completed.load(Ordering::Acquire) < 2 {
                    let mut any = false;
                    for work in stack.take_all() {
                        any = true;
                        work.complete(Ok(()));
                        completed.fetch_add(1, Ordering::Release);
                    }
                    if !any {
                        thread::park();
                    }
                }
            })
        };
        let wake = completer.thread().clone();
        // The "callback": hands each issued action over as the stream
        // reaches it. Action 2 is issued only when action 1 completed.
        let mut handed = 0;
        while handed < 2 {
            match q.backend().take_next() {
                Some(work) => {
                    stack.push(work);
                    wake.unpark();
                    handed += 1;
                }
                None => thread::yield_now(),
            }
        }
        completer.join().unwrap();
        assert_eq!(s.query().unwrap(), 2);
        assert_eq!(q.backend().issued_log(), [1, 2]);
        assert!(stack.is_empty());
    });
}
