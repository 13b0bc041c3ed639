//! loom models that run the real scheduler code end to end: two workers
//! of a real `Executor` (find, execute, retire, idle, wake: the injector,
//! the local deques, the sleep protocol) running a fork/join while the
//! submitter waits on its `Scope`; a wait task suspended and
//! woken from another thread; an `EventPool` acquire racing the last
//! release; and `wait_all` over two semaphores signalled from two threads.
//! (The deques themselves are crossbeam's, checked by crossbeam's own loom
//! tests; here they run on std atomics, not explored.)
#![cfg(fenceline_loom)]

use fenceline::semaphore::EventPool;
use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::{wait_all, ErrorKind, Semaphore, Timeout};
use fenceline_loom_tests::big_model;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

fn exec(workers: usize) -> Executor {
    Executor::new(ExecutorConfig {
        workers,
        spin: false,
    })
    .unwrap()
}

// Catches: a task run twice or never (a lost wake-up parks both workers
// with work queued: the model deadlocks); a scope that reports idle before
// its last retirement is published (the count below is then short).
// Mutation tried: `notify` never unparking a sleeper. The model fails, but
// with a loom causality violation rather than the deadlock expected; why
// is not understood yet. The spill path
// for a worker that blocks is checked by `a_blocked_worker_strands_no_
// queued_task` in tests/hardening.rs (a model of it with a spinning task
// exceeds loom's step budget).
#[test]
fn two_workers_run_a_fork_join_once_each_and_the_scope_goes_idle() {
    big_model().check(|| {
        let exec = exec(2);
        let scope = Scope::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let mut g = exec.graph(&scope);
        let fork = g.barrier().unwrap();
        // Two dependents: the barrier's worker runs the first at once and
        // puts the second on its deque, where the other worker may steal it.
        let ids: Vec<_> = (0..2)
            .map(|_| {
                let runs = runs.clone();
                g.call(move |_| {
                    runs.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
                .unwrap()
            })
            .collect();
        let join = g.nop().unwrap();
        for id in ids {
            g.fork(fork, id).unwrap();
            g.set_completion(id, join).unwrap();
        }
        g.submit();
        scope.wait_idle(Timeout::Never).unwrap();
        assert_eq!(scope.pending(), 0);
        assert_eq!(runs.load(Ordering::Relaxed), 2, "every dependent ran once");
        drop(exec);
    });
}

// Catches: a wake-up of a suspended wait task lost between its
// registration and the signal (the fence never signals: deadlock; mutation
// checked: `wait_wake` pushing the task without notifying a worker), or a
// task requeued twice.
#[test]
fn a_wait_task_is_woken_by_a_signal_from_another_thread() {
    big_model().check(|| {
        let exec = exec(1);
        let (gate, out) = (Semaphore::new(0), Semaphore::new(0));
        let scope = Scope::new();
        let mut g = exec.graph(&scope);
        let w = g.wait(&gate, 1, Timeout::Never).unwrap();
        let f = g.fence(Some((&out, 1))).unwrap();
        g.set_completion(w, f).unwrap();
        g.submit();
        let signaller = {
            let gate = gate.clone();
            thread::spawn(move || gate.signal(1).unwrap())
        };
        out.wait(1, Timeout::Never).unwrap();
        signaller.join().unwrap();
        scope.wait_idle(Timeout::Never).unwrap();
        drop(exec);
    });
}

// Checks: an acquire racing the release of the last reference gets the
// slot back with its event (created once), or `ResourceExhausted`, never a
// half-released slot. Mutation tried: `release_slot` clearing the slot's
// pool reference after returning the block. It was NOT caught: loom does
// not preempt between the block's return and the plain cell write that
// follows it, so the race window never opens in a model; the model guards
// the protocol as written, not that mutation.
#[test]
fn event_pool_acquire_racing_the_last_release_reuses_the_event() {
    loom::model(|| {
        let created = Arc::new(AtomicUsize::new(0));
        let c = created.clone();
        let pool = EventPool::new(
            move || Ok(c.fetch_add(1, Ordering::Relaxed) as u32 + 7),
            |_e: u32| {},
            0,
            1,
        )
        .unwrap();
        let first = pool.acquire().unwrap();
        assert_eq!(*first.event(), 7);
        let dropper = thread::spawn(move || drop(first));
        match pool.acquire() {
            // Released in time: the same event, reused.
            Ok(h) => assert_eq!(*h.event(), 7),
            Err(e) => assert_eq!(e.kind(), ErrorKind::ResourceExhausted),
        }
        dropper.join().unwrap();
        let again = pool.acquire().unwrap();
        assert_eq!(*again.event(), 7);
        assert_eq!(created.load(Ordering::Relaxed), 1, "created once");
    });
}

// Catches: a host wait that misses one of two signals (registration racing
// the signal on either semaphore: the waiter parks forever, a deadlock;
// mutation checked: `register` reading the value with a load instead of a
// read-modify-write), or that returns before both values are reached.
#[test]
fn wait_all_over_two_semaphores_loses_no_wake_up() {
    loom::model(|| {
        let (a, b) = (Semaphore::new(0), Semaphore::new(0));
        let ta = {
            let a = a.clone();
            thread::spawn(move || a.signal(1).unwrap())
        };
        let tb = {
            let b = b.clone();
            thread::spawn(move || b.signal(1).unwrap())
        };
        wait_all(&[(&a, 1), (&b, 1)], Timeout::Never).unwrap();
        assert_eq!((a.query().unwrap(), b.query().unwrap()), (1, 1));
        ta.join().unwrap();
        tb.join().unwrap();
    });
}
