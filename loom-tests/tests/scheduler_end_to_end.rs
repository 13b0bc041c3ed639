//! loom models that run the real scheduler code end to end: two workers
//! of a real `Executor` (find, execute, retire, idle, wake: the injector,
//! the local deques, the spill, the sleep protocol) running a fork/join
//! while the submitter waits on its `Scope`, and running work while one of
//! them blocks inside a task; a wait task suspended and woken from another
//! thread; an `EventPool` acquire racing the last release; `wait_all`
//! over two semaphores signalled from two threads; and an issuer turn
//! offered to the workers racing a worker that takes a blocking task.
//! (Under the model checker the local deques are a stand-in on loom's
//! `Mutex` with crossbeam's interface, see `src/task/deque.rs`;
//! crossbeam's lock-free deque itself is checked by crossbeam's own
//! tests.)
#![cfg(fenceline_loom)]

use fenceline::semaphore::EventPool;
use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::testing::ExecutorInternals;
use fenceline::{wait_all, CpuConfig, Device, ErrorKind, Semaphore, Timeout};
use fenceline_loom_tests::{big_model, submit_wait_then_fence};
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
// Mutation checked: `wake_one` clearing a sleeper's flag without
// unparking it: deadlock (the submitter in `wait_idle`, both workers
// parked). Also: a parked worker that goes back to sleep without arming
// its `sleeping` flag again (`Worker::idle`) after a waker whose epoch
// bump it had already seen took the flag: the shutdown's last wake-up
// then finds no flag set and the worker never exits (deadlock in `drop`).
// The unpark of every worker that `wake_all` once made, flag or not, hid
// this; it also reached `wake_one` (a later submission left unrun). And:
// `Worker::find` not releasing the decrements it holds back for the join
// (`held_join`) before it looks beyond its deque: deadlock, the join
// never ready.
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

// Catches: a dispatch that completes before every tile ran. The dispatch
// runs tiles itself (it is its first shard) next to one shard task that
// the other worker may steal; the task after it checks that every tile
// ran, once. Mutation checked: the dispatch done after its own tiles
// whatever its count says (`finish_one`'s answer ignored): the model
// fails (the dispatch retires while its shard still uses it: loom's
// object checks panic, then a deadlock).
#[test]
fn a_dispatch_completes_after_every_tile_of_every_shard() {
    // One preemption (two took 9 minutes, and pass).
    blocking_model().check(|| {
        let exec = exec(2);
        let scope = Scope::new();
        let tiles: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
        let mut g = exec.graph(&scope);
        let t = tiles.clone();
        let dispatch = g
            .dispatch([3, 1, 1], move |tile| {
                t[tile.workgroup_id[0] as usize].fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
        let t = tiles.clone();
        let after = g
            .call(move |_| {
                for (i, c) in t.iter().enumerate() {
                    assert_eq!(
                        c.load(Ordering::Relaxed),
                        1,
                        "tile {i} before the successor"
                    );
                }
                Ok(())
            })
            .unwrap();
        g.set_completion(dispatch, after).unwrap();
        g.submit();
        scope.wait_idle(Timeout::Never).unwrap();
        drop(exec);
    });
}

// Catches: a task of an injector chunk lost or run twice. Three ready
// roots submitted from outside go into the injector as one chunk (3 tasks
// under the model checker, where a worker's deque holds 1): the worker
// that takes it runs one, keeps one on its deque and gives the third back
// as a chunk of its own, while the other worker takes or steals.
// Mutation checked: the chunk's rest not given back (`Worker::find`
// forgetting it): deadlock (the submitter in `wait_idle`, both workers
// parked).
#[test]
fn a_chunk_taken_from_the_injector_gives_back_what_its_taker_cannot_hold() {
    // One preemption: 3 s (two took about 5 minutes, and pass).
    blocking_model().check(|| {
        let exec = exec(2);
        let scope = Scope::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let mut g = exec.graph(&scope);
        for _ in 0..3 {
            let runs = runs.clone();
            g.call(move |_| {
                runs.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
        }
        g.submit();
        scope.wait_idle(Timeout::Never).unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 3, "every root ran once");
        drop(exec);
    });
}

/// Models in which a worker blocks inside a task explore far more
/// schedules (a host wait's registration, parking and wake-up on top of
/// the worker loop): with two preemptions neither finished in 15 minutes,
/// so they run with one, under which each still catches its mutation.
fn blocking_model() -> loom::model::Builder {
    let mut builder = big_model();
    builder.preemption_bound = Some(1);
    builder
}

// Catches: a ready task left unannounced on a worker's deque while the
// other worker goes to sleep, then the worker blocking on it: the fence
// behind the blocked call never runs, a deadlock. Mutation checked: the
// cheap hint this scheduler used to take for local pushes (notify only if
// a relaxed load saw a sleeper; nothing before running the next task):
// deadlock, the other worker parked next to the fence, which it had
// looked for just before it was pushed. (Found first with three
// dependents and two preemptions: the other worker had stolen one
// dependent while the barrier's worker pushed the next.) Also: a task run
// twice or never, a scope idle before its last retirement is published.
#[test]
fn a_blocked_worker_strands_nothing_and_the_scope_goes_idle() {
    blocking_model().check(|| {
        let exec = exec(2);
        let scope = Scope::new();
        let fence = Semaphore::new(0);
        let runs = Arc::new(AtomicUsize::new(0));
        let mut g = exec.graph(&scope);
        let fork = g.barrier().unwrap();
        // The barrier's worker runs its first dependent at once: a call
        // that blocks until the fence signals. The fence, its second
        // dependent, goes to that worker's deque: the other worker must
        // be told, and run it.
        let f = fence.clone();
        let r = runs.clone();
        let blocked = g
            .call(move |_| {
                f.wait(1, Timeout::Never)?;
                r.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
        let signal = g.fence(Some((&fence, 1))).unwrap();
        for id in [blocked, signal] {
            g.fork(fork, id).unwrap();
        }
        g.submit();
        scope.wait_idle(Timeout::Never).unwrap();
        assert_eq!(scope.pending(), 0);
        assert_eq!(runs.load(Ordering::Relaxed), 1, "the call ran once");
        drop(exec);
    });
}

// Catches: a worker that holds back its decrement of a join (`held_join`)
// while it runs a task that is not one of that join's predecessors. Two
// calls join a fence; a third call, forked with them, blocks until the
// fence signals. A worker that ran one joined call and then the blocking
// one while still holding its decrement leaves the fence short of it for
// good: the other worker finishes the second joined call and finds the
// fence not ready. Mutation checked: `execute` not releasing the held
// decrements before a task of another join: deadlock.
#[test]
fn a_held_join_decrement_is_released_before_an_unrelated_task_runs() {
    blocking_model().check(|| {
        let exec = exec(2);
        let scope = Scope::new();
        let fence = Semaphore::new(0);
        let mut g = exec.graph(&scope);
        let fork = g.barrier().unwrap();
        let first = g.call(|_| Ok(())).unwrap();
        let f = fence.clone();
        let blocked = g.call(move |_| f.wait(1, Timeout::Never)).unwrap();
        let second = g.call(|_| Ok(())).unwrap();
        let signal = g.fence(Some((&fence, 1))).unwrap();
        for id in [first, blocked, second] {
            g.fork(fork, id).unwrap();
        }
        g.set_completion(first, signal).unwrap();
        g.set_completion(second, signal).unwrap();
        g.submit();
        scope.wait_idle(Timeout::Never).unwrap();
        assert_eq!(fence.query().unwrap(), 1);
        drop(exec);
    });
}

// Catches: a barrier's dependents that have no other predecessor,
// chunked at submit (3 to a chunk under the model checker), left
// unreleased or run twice: four of them make two chunks; the barrier's
// worker keeps the first and hands the second to the injector, where the
// other worker may take it. Mutation checked: the chunks after the first
// not pushed to the injector: deadlock (the scope never idle). The first
// chunk's middle task carries a prefetch hint (`PREFETCH_AHEAD` is 1 under
// loom), written by the submitting thread and read by the walker: the
// model checks that access too.
#[test]
fn a_barriers_chunked_dependents_each_run_once() {
    blocking_model().check(|| {
        let exec = exec(2);
        let scope = Scope::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let mut g = exec.graph(&scope);
        let fork = g.barrier().unwrap();
        for _ in 0..4 {
            let runs = runs.clone();
            let d = g
                .call(move |_| {
                    runs.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
                .unwrap();
            g.fork(fork, d).unwrap();
        }
        g.submit();
        scope.wait_idle(Timeout::Never).unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 4, "every dependent ran once");
        drop(exec);
    });
}

// Catches: a child spawned by a running call left on that worker's deque
// while the other worker sleeps. The call then blocks until its child has
// run: with the child unannounced, a worker that was about to park when
// it was pushed sleeps for good next to it. Mutation checked: `spawn`
// without `publish`: deadlock.
#[test]
fn a_call_blocked_on_its_spawned_child_is_helped_by_the_idle_worker() {
    blocking_model().check(|| {
        let exec = exec(2);
        let scope = Scope::new();
        let fence = Semaphore::new(0);
        let mut g = exec.graph(&scope);
        let f = fence.clone();
        g.call(move |cx| {
            if cx.reentry() > 0 {
                return Ok(());
            }
            let child = f.clone();
            cx.spawn(move |_| child.signal(1))?;
            f.wait(1, Timeout::Never)
        })
        .unwrap();
        g.submit();
        scope.wait_idle(Timeout::Never).unwrap();
        assert_eq!(fence.query().unwrap(), 1);
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
        let scope = submit_wait_then_fence(&exec, &gate, &out);
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
// half-released slot. Both sides run on spawned threads: with the acquire
// on the model's main thread, loom explored a single schedule (the acquire
// first) and caught nothing. Mutations checked, each a causality
// violation (concurrent writes to the slot's pool cell): `release_slot`
// clearing the slot's pool reference after returning the block, and the
// block pool's free-list push with a `Relaxed` CAS instead of `Release`.
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
        let acquirer = {
            let pool = pool.clone();
            thread::spawn(move || match pool.acquire() {
                // Released in time: the same event, reused.
                Ok(h) => assert_eq!(*h.event(), 7),
                Err(e) => assert_eq!(e.kind(), ErrorKind::ResourceExhausted),
            })
        };
        dropper.join().unwrap();
        acquirer.join().unwrap();
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

// Catches: the next action of a chain, issued by its predecessor's
// completion on a worker and hopped onto that worker's own deque
// (`ExecutorState::hop`, `Worker::find`), lost, run twice, or stranded
// unannounced while the device is dropped. Mutations checked: `hop` taking
// the first ready task off the list without pushing it: deadlock (the
// host waits for the second signal for ever); the worker never taking
// the task a hop left in its `next` slot (`Worker::take_next` answering
// `None`): deadlock; `Worker::flush` not netting the tasks `hop_alone`
// left uncounted in the executor's live count (it then subtracts one
// retirement too many, and the workers never see it reach zero at the
// device's drop): deadlock.
#[test]
fn a_chained_action_hops_onto_the_worker_that_completed_the_one_before() {
    // One preemption, as the blocking models: with two it ran past 6
    // minutes (a device's threads on top of the worker loop).
    blocking_model().check(|| {
        let device = Device::cpu_with(CpuConfig {
            workers: 2,
            queues: 1,
            spin: false,
        })
        .unwrap();
        let q = device.queue(0).unwrap();
        let s = Semaphore::new(0);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        q.host_call(&[], &[(&s, 1)], move || {
            r.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        let r = runs.clone();
        q.host_call(&[(&s, 1)], &[(&s, 2)], move || {
            r.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        s.wait(2, Timeout::Never).unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 2);
        drop(device);
    });
}

// Catches: `Scope::wait_idle` returning before the scope's tasks ran. A
// scope reused for a second submission, on one worker: the worker's
// retirement of the first task takes the count to zero and then bumps the
// count of idle transitions and signals it; the submitter, having seen
// the count at zero (first `wait_idle`), submits again, reads the idle
// transitions before that bump, and waits for one more: the late bump of
// the first transition ended that wait while the second task had not run.
// Found by Miri (seed 2) in `a_wait_expiring_while_a_signal_fires_it_
// completes_once`. Mutation checked: `wait_idle` waiting once, without
// looking at the pending count again: the assertion below fails.
#[test]
fn a_reused_scope_is_idle_only_after_its_second_submission_ran() {
    big_model().check(|| {
        let exec = exec(1);
        let scope = Scope::new();
        let runs = Arc::new(AtomicUsize::new(0));
        for round in 1..=2 {
            let mut g = exec.graph(&scope);
            let r = runs.clone();
            g.call(move |_| {
                r.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
            g.submit();
            scope.wait_idle(Timeout::Never).unwrap();
            assert_eq!(runs.load(Ordering::Relaxed), round, "round {round}");
        }
        drop(exec);
    });
}

/// The turn of `an_offered_turn_runs_before_a_task_that_may_block_on_it`:
/// signals the semaphore it points to.
///
/// # Safety
/// `turn` points to a live `Semaphore`.
unsafe fn signal_turn(turn: std::ptr::NonNull<()>) {
    // SAFETY: the caller's contract.
    unsafe { turn.cast::<Semaphore>().as_ref() }
        .signal(1)
        .unwrap();
}

// Catches: an issuer turn offered to the workers (`offer_turn`, the CPU
// device's hand-off) while the only worker, seen idle, takes a task that
// blocks until the turn's work is done: the turn waits in its slot behind
// the blocked task for good, a deadlock. The protocol (Dekker's: the
// offer stores its slot, fences, reads the workers' `running` flags; a
// worker leaving idle stores its flag, fences, reads the slots) runs the
// turn first or gives it back to the offering thread, which runs it
// itself. Mutations checked: `Worker::execute` not looking at the slots
// when it leaves idle: deadlock; either fence taken out (the offer's or
// the worker's): deadlock.
#[test]
fn an_offered_turn_runs_before_a_task_that_may_block_on_it() {
    big_model().check(|| {
        let exec = Arc::new(
            fenceline::testing::executor::with_turn_cells(
                ExecutorConfig {
                    workers: 1,
                    spin: false,
                },
                1,
                signal_turn,
            )
            .unwrap(),
        );
        let scope = Scope::new();
        let gate = Arc::new(Semaphore::new(0));
        let mut g = exec.graph(&scope);
        let g_gate = gate.clone();
        g.call(move |_| g_gate.wait(1, Timeout::Never)).unwrap();
        let offerer = {
            let (exec, gate) = (exec.clone(), gate.clone());
            thread::spawn(move || {
                let turn = std::ptr::NonNull::from(&*gate).cast();
                if let Err(back) = exec.offer_turn(0, turn) {
                    // SAFETY: `gate`, alive here.
                    unsafe { signal_turn(back) };
                }
            })
        };
        g.submit();
        scope.wait_idle(Timeout::Never).unwrap();
        offerer.join().unwrap();
        assert_eq!(gate.query().unwrap(), 1, "the turn ran once");
        drop(exec);
    });
}
