//! loom models of teardown racing a wake-up, on the real code: a queue, a
//! device queue and an executor are dropped while a semaphore signal's
//! wake-up is handing them work. The crate tracks its hand-freed states
//! under the model checker (`sync::liveness`): a thread that touches one
//! after it was freed panics, so each model fails if the waking thread does
//! not hold a reference across the hand-off (the mutation named on each).
#![cfg(fenceline_loom)]

use fenceline::queue::PendingQueue;
use fenceline::task::{Executor, ExecutorConfig};
use fenceline::testing::TestingBackend;
use fenceline::{CpuConfig, Device, ErrorKind, Semaphore};
use fenceline_loom_tests::{big_model, submit_wait_then_fence};
use loom::thread;

// Mutation caught: `queue_wake` (src/queue/pending.rs) pushing the woken
// action and requesting an issue without holding its own reference to the
// queue's state (the shutdown pass of a concurrent drop finishes the
// action, the state is freed, the waking thread then requests an issue on
// freed memory: "use after free: a queue's state").
#[test]
fn queue_dropped_while_a_signal_wakes_its_action() {
    loom::model(|| {
        let q = PendingQueue::new(TestingBackend::new(true)).unwrap();
        let (gate, out) = (Semaphore::new(0), Semaphore::new(0));
        q.submit(&[(&gate, 1)], &[(&out, 1)], 1).unwrap();
        let signaller = {
            let gate = gate.clone();
            thread::spawn(move || gate.signal(1).unwrap())
        };
        drop(q);
        signaller.join().unwrap();
        // Issued (and completed by the auto-completing backend) before the
        // drop, or cancelled by it: exactly one of the two.
        match out.query() {
            Ok(v) => assert_eq!(v, 1),
            Err(e) => assert_eq!(e.kind(), ErrorKind::Cancelled),
        }
    });
}

// Mutation caught: `wait_wake` (src/task/kind/wait.rs) injecting the woken
// task and then notifying a worker through the executor's state without
// holding a reference to it (the task runs and retires, the executor's
// drop finishes and frees the state before the notify: "use after free:
// the executor's state"). Also: the shutdown flag stored and loaded
// Relaxed (`begin_shutdown`, `Worker::idle`): the worker reads it set and
// `live` still 0 (its fence first in the SeqCst order), exits, and the
// graph is never run nor cancelled (`out` stays 0).
#[test]
fn executor_dropped_while_a_signal_wakes_a_wait_task() {
    big_model().check(|| {
        let exec = Executor::new(ExecutorConfig {
            workers: 1,
            spin: false,
        })
        .unwrap();
        let (gate, out) = (Semaphore::new(0), Semaphore::new(0));
        let _scope = submit_wait_then_fence(&exec, &gate, &out);
        let signaller = {
            let gate = gate.clone();
            thread::spawn(move || gate.signal(1).unwrap())
        };
        drop(exec);
        signaller.join().unwrap();
        // Woken before the drop cancelled it, or cancelled by the drop.
        match out.query() {
            Ok(v) => assert_eq!(v, 1),
            Err(e) => assert_eq!(e.kind(), ErrorKind::Cancelled),
        }
    });
}

// Mutation caught: as the queue model, through a CPU device: the device
// dropped (its queue shut down, its executor joined) while a signal wakes
// a pending barrier of its queue. Also (checked): `queue_wake`
// taking no reference when it handles the action directly: the barrier
// finishes in that pass, the drop gives up the last handle, and the
// waking thread gives the issuer's turn back on a freed state ("use after
// free: a queue's state (turn given back)", the liveness check there).
#[test]
fn device_dropped_while_a_signal_wakes_its_queue() {
    big_model().check(|| {
        let device = Device::cpu_with(CpuConfig {
            workers: 1,
            queues: 1,
            spin: false,
        })
        .unwrap();
        let (gate, out) = (Semaphore::new(0), Semaphore::new(0));
        device
            .queue(0)
            .unwrap()
            .barrier(&[(&gate, 1)], &[(&out, 1)])
            .unwrap();
        let signaller = {
            let gate = gate.clone();
            thread::spawn(move || gate.signal(1).unwrap())
        };
        drop(device);
        signaller.join().unwrap();
        match out.query() {
            Ok(v) => assert_eq!(v, 1),
            Err(e) => assert_eq!(e.kind(), ErrorKind::Cancelled),
        }
    });
}

// An executor dropped while one of its two workers parks a wait task: the
// other worker, idle at shutdown, expires the parked waits. The wait ends
// cancelled, once, and the drop returns. Mutation caught: the wait task
// listing itself and releasing the list's lock before it registers its
// timepoint (as the old protocol did): an expiry in between abandons a
// timepoint that is not registered yet, which the registration then links
// ("Concurrent write accesses to `UnsafeCell`"; the old protocol's cancel
// found nothing to cancel there and the task stayed parked for good).
// Before this model the worker read its nearest deadline (under the list's
// lock) between announcing its sleep and parking: loom drops an unpark
// that reaches a thread blocked on a lock, so the model deadlocked there
// (std keeps the token); the read now comes before the announce.
#[test]
fn executor_dropped_while_a_worker_parks_a_wait_task() {
    big_model().check(|| {
        let exec = Executor::new(ExecutorConfig {
            workers: 2,
            spin: false,
        })
        .unwrap();
        let (gate, out) = (Semaphore::new(0), Semaphore::new(0));
        let _scope = submit_wait_then_fence(&exec, &gate, &out);
        drop(exec);
        assert_eq!(out.query().unwrap_err().kind(), ErrorKind::Cancelled);
    });
}
