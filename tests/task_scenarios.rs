//! Scenario tests of the task executor: calls, barriers, joins, forks,
//! fences, waits, dispatches, failure, nesting and executor lifetime.

use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::{Error, ErrorKind, Semaphore, Tile, Timeout};

// Under Miri (about a thousand times slower) a hang limit of 10 s fails
// healthy runs.
const LONG: Duration = Duration::from_secs(if cfg!(miri) { 900 } else { 10 });

fn exec() -> Executor {
    Executor::new(ExecutorConfig {
        workers: 2,
        spin: true,
    })
    .unwrap()
}

fn boom(msg: &'static str) -> Error {
    Error::new(ErrorKind::Internal, msg)
}

/// A log of task names in completion order.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<&'static str>>>);

impl Log {
    fn push(&self, s: &'static str) {
        self.0.lock().unwrap().push(s);
    }
    fn get(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().clone()
    }
}

#[test]
fn nop_and_call() {
    let e = exec();
    let scope = Scope::new();
    let hits = Arc::new(AtomicU32::new(0));
    let mut g = e.graph(&scope);
    g.nop().unwrap();
    let h = hits.clone();
    g.call(move |_| {
        h.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    assert_eq!(scope.pending(), 0, "tasks count once submitted");
    g.submit();
    scope.wait_idle(LONG).unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(scope.pending(), 0);
}

static CALL_FN_SUM: AtomicUsize = AtomicUsize::new(0);

fn add_context(context: usize) -> Result<(), Error> {
    CALL_FN_SUM.fetch_add(context, Ordering::SeqCst);
    Ok(())
}

#[test]
fn call_fn_with_context() {
    let e = exec();
    let scope = Scope::new();
    let mut g = e.graph(&scope);
    g.call_fn(add_context, 40).unwrap();
    g.call_fn(add_context, 2).unwrap();
    g.submit();
    scope.wait_idle(LONG).unwrap();
    assert_eq!(CALL_FN_SUM.load(Ordering::SeqCst), 42);
}

#[test]
fn call_failure_is_kept_by_the_scope() {
    let e = exec();
    let scope = Scope::new();
    let mut g = e.graph(&scope);
    g.call(|_| Err(boom("first"))).unwrap();
    g.submit();
    let err = scope.wait_idle(LONG).unwrap_err();
    assert_eq!(err.message(), "first");
    assert_eq!(scope.error().unwrap().message(), "first");
}

#[test]
fn chained_call_failure_skips_the_second() {
    let e = exec();
    let scope = Scope::new();
    let ran = Arc::new(AtomicU32::new(0));
    let mut g = e.graph(&scope);
    let a = g.call(|_| Err(boom("a failed"))).unwrap();
    let r = ran.clone();
    let b = g
        .call(move |_| {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    g.set_completion(a, b).unwrap();
    g.submit();
    assert_eq!(scope.wait_idle(LONG).unwrap_err().message(), "a failed");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "dependent of a failed task ran"
    );
}

#[test]
fn nested_call_runs_parent_again_after_child() {
    let e = exec();
    let scope = Scope::new();
    let log = Log::default();
    let mut g = e.graph(&scope);
    let l = log.clone();
    g.call(move |cx| {
        if cx.reentry() == 0 {
            l.push("parent");
            let l2 = l.clone();
            cx.spawn(move |_| {
                std::thread::sleep(Duration::from_millis(5));
                l2.push("child");
                Ok(())
            })?;
        } else {
            l.push("parent again");
        }
        Ok(())
    })
    .unwrap();
    g.submit();
    scope.wait_idle(LONG).unwrap();
    assert_eq!(log.get(), ["parent", "child", "parent again"]);
}

#[test]
fn nested_child_failure_skips_the_rerun() {
    let e = exec();
    let scope = Scope::new();
    let reruns = Arc::new(AtomicU32::new(0));
    let mut g = e.graph(&scope);
    let r = reruns.clone();
    g.call(move |cx| {
        if cx.reentry() == 0 {
            cx.spawn(|_| Err(boom("child")))?;
        } else {
            r.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    })
    .unwrap();
    g.submit();
    assert_eq!(scope.wait_idle(LONG).unwrap_err().message(), "child");
    assert_eq!(reruns.load(Ordering::SeqCst), 0);
}

#[test]
fn barrier_standalone() {
    let e = exec();
    let scope = Scope::new();
    let mut g = e.graph(&scope);
    g.barrier().unwrap();
    g.submit();
    scope.wait_idle(LONG).unwrap();
}

fn logger(
    g: &mut fenceline::task::Graph<'_>,
    log: &Log,
    name: &'static str,
) -> fenceline::task::TaskId {
    let l = log.clone();
    g.call(move |_| {
        l.push(name);
        Ok(())
    })
    .unwrap()
}

#[test]
fn sequence_runs_in_order() {
    let e = exec();
    let scope = Scope::new();
    let log = Log::default();
    let mut g = e.graph(&scope);
    let a = logger(&mut g, &log, "a");
    let b = logger(&mut g, &log, "b");
    let c = logger(&mut g, &log, "c");
    g.set_completion(a, b).unwrap();
    g.set_completion(b, c).unwrap();
    g.submit();
    scope.wait_idle(LONG).unwrap();
    assert_eq!(log.get(), ["a", "b", "c"]);
}

#[test]
fn sequence_failure_stops_the_rest() {
    let e = exec();
    let scope = Scope::new();
    let log = Log::default();
    let mut g = e.graph(&scope);
    let a = logger(&mut g, &log, "a");
    let b = g.call(|_| Err(boom("b"))).unwrap();
    let c = logger(&mut g, &log, "c");
    g.set_completion(a, b).unwrap();
    g.set_completion(b, c).unwrap();
    g.submit();
    assert_eq!(scope.wait_idle(LONG).unwrap_err().message(), "b");
    assert_eq!(log.get(), ["a"]);
}

#[test]
fn join_waits_for_all() {
    let e = exec();
    let scope = Scope::new();
    let log = Log::default();
    let mut g = e.graph(&scope);
    let ids: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| logger(&mut g, &log, n))
        .collect();
    let d = logger(&mut g, &log, "d");
    for id in ids {
        g.set_completion(id, d).unwrap();
    }
    g.submit();
    scope.wait_idle(LONG).unwrap();
    let got = log.get();
    assert_eq!(got.len(), 4);
    assert_eq!(got[3], "d");
}

#[test]
fn join_failure_runs_the_others_but_not_the_join() {
    let e = exec();
    let scope = Scope::new();
    let log = Log::default();
    let mut g = e.graph(&scope);
    let a = logger(&mut g, &log, "a");
    let b = g.call(|_| Err(boom("b"))).unwrap();
    let c = logger(&mut g, &log, "c");
    let d = logger(&mut g, &log, "d");
    for id in [a, b, c] {
        g.set_completion(id, d).unwrap();
    }
    g.submit();
    assert_eq!(scope.wait_idle(LONG).unwrap_err().message(), "b");
    let mut got = log.get();
    got.sort();
    assert_eq!(got, ["a", "c"], "independent tasks ran, the join did not");
}

#[test]
fn fork_releases_every_dependent() {
    let e = exec();
    let scope = Scope::new();
    let log = Log::default();
    let mut g = e.graph(&scope);
    let a = logger(&mut g, &log, "a");
    let fork = g.barrier().unwrap();
    let deps: Vec<_> = ["b", "c", "d"]
        .iter()
        .map(|n| logger(&mut g, &log, n))
        .collect();
    g.set_completion(a, fork).unwrap();
    for d in deps {
        g.fork(fork, d).unwrap();
    }
    g.submit();
    scope.wait_idle(LONG).unwrap();
    let got = log.get();
    assert_eq!(got[0], "a");
    let mut rest = got[1..].to_vec();
    rest.sort();
    assert_eq!(rest, ["b", "c", "d"]);
}

#[test]
fn fork_failure_skips_every_dependent() {
    let e = exec();
    let scope = Scope::new();
    let log = Log::default();
    let mut g = e.graph(&scope);
    let a = g.call(|_| Err(boom("a"))).unwrap();
    let fork = g.barrier().unwrap();
    let deps: Vec<_> = ["b", "c", "d"]
        .iter()
        .map(|n| logger(&mut g, &log, n))
        .collect();
    g.set_completion(a, fork).unwrap();
    for d in deps {
        g.fork(fork, d).unwrap();
    }
    g.submit();
    assert_eq!(scope.wait_idle(LONG).unwrap_err().message(), "a");
    assert!(log.get().is_empty());
}

#[test]
fn fence_chains_signal_in_order() {
    let e = exec();
    let scope = Scope::new();
    let s = Semaphore::new(0);
    let mut g = e.graph(&scope);
    let f1 = g.fence(Some((&s, 1))).unwrap();
    let f2 = g.fence(Some((&s, 2))).unwrap();
    let f3 = g.fence(Some((&s, 3))).unwrap();
    g.set_completion(f1, f2).unwrap();
    g.set_completion(f2, f3).unwrap();
    g.submit();
    s.wait(3, LONG).unwrap();
    scope.wait_idle(LONG).unwrap();
}

#[test]
fn fence_after_failure_fails_its_semaphore() {
    let e = exec();
    let scope = Scope::new();
    let s = Semaphore::new(0);
    let mut g = e.graph(&scope);
    let a = g
        .call(|_| Err(Error::new(ErrorKind::Aborted, "upstream")))
        .unwrap();
    let f = g.fence(Some((&s, 1))).unwrap();
    g.set_completion(a, f).unwrap();
    g.submit();
    let err = s.wait(1, LONG).unwrap_err();
    assert_eq!(
        (err.kind(), err.message()),
        (ErrorKind::Aborted, "upstream")
    );
    assert!(scope.wait_idle(LONG).is_err());
}

fn dispatch_counts(grid: [u32; 3]) -> Vec<u8> {
    let e = exec();
    let scope = Scope::new();
    let n = (grid[0] * grid[1] * grid[2]) as usize;
    let counts: Arc<Vec<AtomicU8>> = Arc::new((0..n).map(|_| AtomicU8::new(0)).collect());
    let c = counts.clone();
    let mut g = e.graph(&scope);
    g.dispatch(grid, move |t: &Tile| {
        assert_eq!(t.workgroup_count, grid);
        let [x, y, z] = t.workgroup_id;
        assert!(x < grid[0] && y < grid[1] && z < grid[2]);
        let i = (x + grid[0] * (y + grid[1] * z)) as usize;
        c[i].fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    g.submit();
    scope.wait_idle(LONG).unwrap();
    counts.iter().map(|c| c.load(Ordering::SeqCst)).collect()
}

#[test]
fn dispatch_grids_run_each_tile_exactly_once() {
    for grid in [[0, 0, 0], [1, 2, 0], [1, 1, 1], [3, 4, 5], [100, 70, 3]] {
        let counts = dispatch_counts(grid);
        assert!(
            counts.iter().all(|&c| c == 1),
            "grid {grid:?}: {:?}",
            &counts[..counts.len().min(20)]
        );
    }
}

#[test]
fn dispatch_failure_at_one_tile() {
    let e = exec();
    let scope = Scope::new();
    let after = Arc::new(AtomicU32::new(0));
    let mut g = e.graph(&scope);
    let d = g
        .dispatch([10, 10, 1], |t: &Tile| {
            if t.workgroup_id == [3, 7, 0] {
                Err(boom("tile 3,7"))
            } else {
                Ok(())
            }
        })
        .unwrap();
    let a = after.clone();
    let next = g
        .call(move |_| {
            a.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    g.set_completion(d, next).unwrap();
    g.submit();
    assert_eq!(scope.wait_idle(LONG).unwrap_err().message(), "tile 3,7");
    assert_eq!(after.load(Ordering::SeqCst), 0);
}

#[test]
fn panic_becomes_an_error_and_the_worker_keeps_working() {
    let e = exec();
    for _ in 0..3 {
        let scope = Scope::new();
        let mut g = e.graph(&scope);
        g.call(|_| panic!("kaboom")).unwrap();
        g.submit();
        let err = scope.wait_idle(LONG).unwrap_err();
        assert!(err.message().contains("kaboom"), "{err}");
    }
    let scope = Scope::new();
    let mut g = e.graph(&scope);
    let hits = Arc::new(AtomicU32::new(0));
    for _ in 0..10 {
        let h = hits.clone();
        g.call(move |_| {
            h.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    }
    g.submit();
    scope.wait_idle(LONG).unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 10);
}

#[test]
fn wait_on_signalled_semaphore() {
    let e = exec();
    let scope = Scope::new();
    let s = Semaphore::new(5);
    let mut g = e.graph(&scope);
    g.wait(&s, 3, Timeout::Never).unwrap();
    g.submit();
    scope.wait_idle(LONG).unwrap();
}

#[test]
fn wait_on_unsignalled_semaphore_runs_after_signal() {
    let e = exec();
    let scope = Scope::new();
    let s = Semaphore::new(0);
    let ran = Arc::new(AtomicU32::new(0));
    let mut g = e.graph(&scope);
    let w = g.wait(&s, 2, Timeout::Never).unwrap();
    let r = ran.clone();
    let after = g
        .call(move |_| {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    g.set_completion(w, after).unwrap();
    g.submit();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(ran.load(Ordering::SeqCst), 0, "ran before the signal");
    assert_eq!(scope.pending(), 2);
    s.signal(2).unwrap();
    scope.wait_idle(LONG).unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn wait_on_failing_semaphore_fails() {
    let e = exec();
    let scope = Scope::new();
    let s = Semaphore::new(0);
    let mut g = e.graph(&scope);
    g.wait(&s, 1, Timeout::Never).unwrap();
    g.submit();
    std::thread::sleep(Duration::from_millis(5));
    s.fail(Error::new(ErrorKind::Aborted, "upstream died"));
    assert_eq!(
        scope.wait_idle(LONG).unwrap_err().kind(),
        ErrorKind::Aborted
    );
}

#[test]
fn wait_times_out() {
    let e = exec();
    let scope = Scope::new();
    let s = Semaphore::new(0);
    let mut g = e.graph(&scope);
    g.wait(&s, 1, Duration::from_millis(20)).unwrap();
    g.submit();
    let start = std::time::Instant::now();
    let err = scope.wait_idle(LONG).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn dropping_the_executor_cancels_parked_waits() {
    let scope = Scope::new();
    let s = Semaphore::new(0);
    {
        let e = exec();
        let mut g = e.graph(&scope);
        g.wait(&s, 1, Timeout::Never).unwrap();
        g.submit();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(scope.pending(), 0);
    assert_eq!(scope.error().unwrap().kind(), ErrorKind::Cancelled);
}

#[test]
fn edges_must_go_forward_and_stay_in_their_graph() {
    let e = exec();
    let scope = Scope::new();
    let mut g = e.graph(&scope);
    let a = g.nop().unwrap();
    let b = g.nop().unwrap();
    assert_eq!(
        g.set_completion(b, a).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        g.set_completion(a, a).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    g.set_completion(a, b).unwrap();
    let c = g.nop().unwrap();
    assert_eq!(
        g.set_completion(a, c).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        g.fork(a, c).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "not a barrier"
    );
    let mut other = e.graph(&scope);
    let x = other.nop().unwrap();
    assert_eq!(
        g.set_completion(a, x).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    drop(other);
    drop(g); // unsubmitted: freed, nothing runs
    assert_eq!(scope.pending(), 0);
    scope.wait_idle(Timeout::Immediate).unwrap();
}

#[test]
fn executor_lifetime_stress() {
    for i in 0..100u32 {
        let e = Executor::new(ExecutorConfig {
            workers: 1 + (i % 3) as usize,
            spin: i % 2 == 0,
        })
        .unwrap();
        let scope = Scope::new();
        let hits = Arc::new(AtomicU32::new(0));
        let mut g = e.graph(&scope);
        for _ in 0..8 {
            let h = hits.clone();
            g.call(move |_| {
                h.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        }
        g.submit();
        scope.wait_idle(LONG).unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 8);
    }
}

#[test]
fn thousand_serial_submissions_each_checked() {
    let e = exec();
    let scope = Scope::new();
    let value = Arc::new(AtomicUsize::new(0));
    for i in 0..1000usize {
        let mut g = e.graph(&scope);
        let v = value.clone();
        g.call(move |_| {
            v.store(i, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        g.submit();
        scope.wait_idle(LONG).unwrap();
        assert_eq!(value.load(Ordering::SeqCst), i);
    }
}

// A wait task whose deadline passes while a signal reaches its value: a
// worker expiring it cancels its timepoint with no lock held, and the
// callback, if the signal fired it first, leaves the requeue to that
// worker (or does it itself, when the worker found it not yet run). Each
// wait must run its successor exactly once, with `Ok` or
// `DeadlineExceeded`. (Mutation checked: an expiring worker that ignores
// a callback's report strands the task: `wait_idle` times out, the
// pending check fails, and the executor's drop then hangs on the stranded
// task, so CI's time limit reports it too.)
#[test]
fn a_wait_expiring_while_a_signal_fires_it_completes_once() {
    let exec = exec();
    let scope = Scope::new();
    let ran = Arc::new(AtomicUsize::new(0));
    for round in 0..300u64 {
        let sem = Semaphore::new(0);
        let mut g = exec.graph(&scope);
        let w = g
            .wait(&sem, 1, Duration::from_micros(200 + (round % 7) * 50))
            .unwrap();
        let r = ran.clone();
        let f = g
            .finally(move |_| {
                r.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        g.set_completion(w, f).unwrap();
        g.submit();
        let signaller = {
            let sem = sem.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(150 + (round % 5) * 40));
                sem.signal(1).unwrap();
            })
        };
        match scope.wait_idle(LONG) {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "round {round}: {e}");
                assert_eq!(scope.pending(), 0, "round {round}: stranded");
                let _ = scope.take_error();
            }
        }
        signaller.join().unwrap();
        assert_eq!(
            ran.load(Ordering::Relaxed),
            round as usize + 1,
            "round {round}"
        );
    }
}

/// A call that counts its runs in `runs`.
fn counting_call(
    g: &mut fenceline::task::Graph<'_>,
    runs: &Arc<AtomicUsize>,
) -> fenceline::task::TaskId {
    let r = runs.clone();
    g.call(move |_| {
        r.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
    .unwrap()
}

// A fork wider than a chunk of the injector: the dependents whose only
// predecessor is the barrier go out in ready chunks (`Graph::submit`),
// the others (a second predecessor, or a barrier themselves) through
// their counts. Every one runs once, the join after all of them.
#[test]
fn a_wide_fork_runs_every_dependent_once_and_the_join_last() {
    let e = exec();
    let scope = Scope::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let mut g = e.graph(&scope);
    let start = g.call(|_| Ok(())).unwrap();
    let fork = g.barrier().unwrap();
    g.set_completion(start, fork).unwrap();
    let other = g.call(|_| Ok(())).unwrap();
    let inner = g.barrier().unwrap();
    g.fork(fork, inner).unwrap();
    let first = g.nop().unwrap();
    for i in 0..1000 {
        let d = counting_call(&mut g, &runs);
        if i % 100 == 7 {
            // A second predecessor: released by its count, not a chunk.
            g.fork(inner, d).unwrap();
        } else {
            g.fork(fork, d).unwrap();
        }
    }
    let r = runs.clone();
    let join = g
        .call(move |_| {
            assert_eq!(r.load(Ordering::Relaxed), 1000, "the join runs last");
            Ok(())
        })
        .unwrap();
    g.join_from(first, join).unwrap();
    g.set_completion(other, inner).unwrap();
    g.submit();
    scope.wait_idle(LONG).unwrap();
    assert_eq!(runs.load(Ordering::Relaxed), 1000);
}

#[test]
fn a_wide_fork_after_a_failure_skips_every_dependent() {
    let e = exec();
    let scope = Scope::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let mut g = e.graph(&scope);
    let a = g.call(|_| Err(boom("a"))).unwrap();
    let fork = g.barrier().unwrap();
    g.set_completion(a, fork).unwrap();
    for _ in 0..300 {
        let d = counting_call(&mut g, &runs);
        g.fork(fork, d).unwrap();
    }
    g.submit();
    assert_eq!(scope.wait_idle(LONG).unwrap_err().message(), "a");
    assert_eq!(runs.load(Ordering::Relaxed), 0);
}

/// Random graphs: tasks without a predecessor, and barriers, at any place
/// in creation order, edges added by `set_completion`, `fork` and
/// `join_from` (which turn roots into dependents); every call runs exactly
/// once, after each call it depends on directly, and the scope goes idle.
/// `submit` stops walking the graph once it met every root and barrier it
/// counted while building, so a miscount strands tasks (the scope never
/// goes idle) or a walk checks in vain (debug builds check the counts).
/// Mutation checked: `set_completion` uncounting a root also when its
/// task had a predecessor: the scope times out (release build); `fork`
/// not uncounting a root, or `adopt` not counting a barrier: the debug
/// check fails.
#[test]
fn random_graphs_run_every_task_once_after_its_predecessors() {
    // Not dropped on a failure: dropping it waits for stranded tasks.
    let e = std::mem::ManuallyDrop::new(exec());
    let scope = Scope::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for round in 0..300 {
        let n = 1 + next(40) as usize;
        // Per task: its run's place in a global order (0: not run), and
        // how many times it ran.
        let order: Arc<Vec<AtomicUsize>> = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
        let runs: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
        let clock = Arc::new(AtomicUsize::new(0));
        let mut g = e.graph(&scope);
        let (mut ids, mut is_call, mut barriers) = (Vec::new(), Vec::new(), Vec::new());
        let mut has_completion = vec![false; n];
        let mut forked = vec![false; n];
        // (predecessor, dependent) between two calls, checked after.
        let mut edges = Vec::new();
        for j in 0..n {
            let kind = next(4);
            let id = match kind {
                0 => g.barrier().unwrap(),
                1 => g.nop().unwrap(),
                _ => {
                    let (order, runs, clock) = (order.clone(), runs.clone(), clock.clone());
                    g.call(move |_| {
                        order[j].store(clock.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                        runs[j].fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap()
                }
            };
            ids.push(id);
            is_call.push(kind >= 2);
            if kind == 0 {
                barriers.push(j);
            }
            // A few edges between any two tasks made so far (so a task may
            // gain predecessors long after it was made, or several).
            for _ in 0..next(3) {
                let k = next(j as u64 + 1) as usize;
                if k == 0 {
                    continue;
                }
                match next(3) {
                    0 => {
                        let i = next(k as u64) as usize;
                        if !has_completion[i] {
                            g.set_completion(ids[i], ids[k]).unwrap();
                            has_completion[i] = true;
                            edges.push((i, k));
                        }
                    }
                    1 => {
                        let earlier: Vec<usize> =
                            barriers.iter().copied().filter(|&b| b < k).collect();
                        if !earlier.is_empty() && !forked[k] {
                            let b = earlier[next(earlier.len() as u64) as usize];
                            g.fork(ids[b], ids[k]).unwrap();
                            forked[k] = true;
                        }
                    }
                    _ => {
                        let first = next(k as u64) as usize;
                        if (first..k).all(|i| !has_completion[i]) {
                            g.join_from(ids[first], ids[k]).unwrap();
                            has_completion[first..k].fill(true);
                            edges.extend((first..k).map(|i| (i, k)));
                        }
                    }
                }
            }
        }
        g.submit();
        scope
            .wait_idle(LONG)
            .unwrap_or_else(|e| panic!("round {round}, {n} tasks: {e}"));
        for j in (0..n).filter(|&j| is_call[j]) {
            assert_eq!(runs[j].load(Ordering::SeqCst), 1, "round {round}: task {j}");
        }
        for &(i, j) in edges.iter().filter(|&&(i, j)| is_call[i] && is_call[j]) {
            let (a, b) = (
                order[i].load(Ordering::SeqCst),
                order[j].load(Ordering::SeqCst),
            );
            assert!(
                a < b,
                "round {round}: task {i} ran after its completion task {j}"
            );
        }
    }
    drop(std::mem::ManuallyDrop::into_inner(e));
}

/// Wait tasks whose deadlines pass while they park, on two workers: one
/// registers a wait while the other, idle, expires the waits it finds due,
/// and signals fire some of them meanwhile. Each wait ends exactly once
/// (its `finally` runs once) and the scope goes idle. A stress companion
/// of the loom model `executor_dropped_while_a_worker_parks_a_wait_task`,
/// which guards the registration's race with an expiry: this test did not
/// hit that race's window (a few instructions) with the old protocol in
/// five runs; the model does.
#[test]
fn waits_expiring_as_they_park_each_end_once() {
    let e = std::mem::ManuallyDrop::new(exec());
    let scope = Scope::new();
    let gate = Semaphore::new(0);
    let ended = Arc::new(AtomicUsize::new(0));
    const GRAPHS: usize = 3000;
    for i in 0..GRAPHS {
        let mut g = e.graph(&scope);
        let w = g
            .wait(
                &gate,
                (i / 500 + 1) as u64,
                Duration::from_micros((i % 8) as u64 * 5),
            )
            .unwrap();
        let ended = ended.clone();
        let f = g
            .finally(move |_| {
                ended.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        g.set_completion(w, f).unwrap();
        g.submit();
        if i % 500 == 499 {
            // Fires the waits of this batch that did not expire yet.
            gate.signal((i / 500 + 1) as u64).unwrap();
        }
    }
    let r = scope.wait_idle(Duration::from_secs(20));
    assert!(
        !matches!(&r, Err(e) if e.kind() == ErrorKind::DeadlineExceeded && ended.load(Ordering::Relaxed) < GRAPHS),
        "stranded: {} of {GRAPHS} waits ended",
        ended.load(Ordering::Relaxed)
    );
    assert_eq!(ended.load(Ordering::Relaxed), GRAPHS);
    drop(std::mem::ManuallyDrop::into_inner(e));
}

/// `Graph::fork_join`: every call runs once, after the barrier's
/// predecessor, and the join only after all of them (1000 calls: several
/// ready chunks). Mutations checked: a call given no completion task (the
/// join never runs: the wait times out); the calls' chunks not handed to
/// the barrier (they never run).
#[test]
fn fork_join_runs_each_call_once_after_the_barrier_then_the_join() {
    const N: usize = 1000;
    let e = exec();
    let scope = Scope::new();
    let ran: Arc<Vec<AtomicU8>> = Arc::new((0..N).map(|_| AtomicU8::new(0)).collect());
    let started = Arc::new(AtomicU32::new(0));
    let early = Arc::new(AtomicU32::new(0));
    let mut g = e.graph(&scope);
    let s = started.clone();
    let a = g
        .call(move |_| {
            std::thread::sleep(Duration::from_millis(5));
            s.store(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    let fork = g.barrier().unwrap();
    g.set_completion(a, fork).unwrap();
    let join = g
        .fork_join(fork, N as u32, |i| {
            let (ran, started, early) = (ran.clone(), started.clone(), early.clone());
            move |_| {
                if started.load(Ordering::SeqCst) == 0 {
                    early.fetch_add(1, Ordering::SeqCst);
                }
                ran[i as usize].fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .unwrap();
    let (r, seen) = (ran.clone(), Arc::new(Mutex::new(None)));
    let s2 = seen.clone();
    let after = g
        .finally(move |res| {
            let done = r.iter().filter(|c| c.load(Ordering::SeqCst) == 1).count();
            *s2.lock().unwrap() = Some((res.is_ok(), done));
        })
        .unwrap();
    g.set_completion(join, after).unwrap();
    g.submit();
    if let Err(err) = scope.wait_idle(LONG) {
        // Dropping the executor would wait for the stuck tasks: fail now.
        std::mem::forget(e);
        panic!("the fork/join never finished: {err}");
    }
    assert_eq!(
        early.load(Ordering::SeqCst),
        0,
        "a call ran before the barrier"
    );
    assert!(ran.iter().all(|c| c.load(Ordering::SeqCst) == 1));
    assert_eq!(
        *seen.lock().unwrap(),
        Some((true, N)),
        "the join ran after every call"
    );
    assert_eq!(scope.pending(), 0);
    assert_eq!(Arc::strong_count(&ran), 1, "every closure dropped");
}

/// A failure before the barrier skips every call of the fork/join, and
/// the join's follower sees the error.
#[test]
fn fork_join_after_a_failure_skips_every_call() {
    let e = exec();
    let scope = Scope::new();
    let ran = Arc::new(AtomicU32::new(0));
    let mut g = e.graph(&scope);
    let a = g.call(|_| Err(boom("a"))).unwrap();
    let fork = g.barrier().unwrap();
    g.set_completion(a, fork).unwrap();
    let join = g
        .fork_join(fork, 300, |_| {
            let ran = ran.clone();
            move |_| {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .unwrap();
    let failed = Arc::new(AtomicU32::new(0));
    let f = failed.clone();
    let after = g
        .finally(move |r| {
            if r.is_err() {
                f.store(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    g.set_completion(join, after).unwrap();
    g.submit();
    assert_eq!(scope.wait_idle(LONG).unwrap_err().message(), "a");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(failed.load(Ordering::SeqCst), 1);
    assert_eq!(scope.pending(), 0);
}

/// A fork/join of no call: its join still follows the barrier.
#[test]
fn fork_join_of_no_call_follows_the_barrier() {
    let e = exec();
    let scope = Scope::new();
    let log = Log::default();
    let mut g = e.graph(&scope);
    let l = log.clone();
    let a = g
        .call(move |_| {
            std::thread::sleep(Duration::from_millis(5));
            l.push("a");
            Ok(())
        })
        .unwrap();
    let fork = g.barrier().unwrap();
    g.set_completion(a, fork).unwrap();
    let join = g
        .fork_join(fork, 0, |_| {
            |_: &mut fenceline::task::CallContext<'_>| Ok(())
        })
        .unwrap();
    let b = logger(&mut g, &log, "b");
    g.set_completion(join, b).unwrap();
    g.submit();
    scope.wait_idle(LONG).unwrap();
    assert_eq!(log.get(), ["a", "b"]);
}

/// `fork_join` refuses a task that is not a barrier of its graph, before
/// making any closure.
#[test]
fn fork_join_checks_its_barrier() {
    let e = exec();
    let scope = Scope::new();
    let made = AtomicU32::new(0);
    let make = |_| {
        made.fetch_add(1, Ordering::SeqCst);
        |_: &mut fenceline::task::CallContext<'_>| Ok(())
    };
    let mut g = e.graph(&scope);
    let a = g.nop().unwrap();
    assert_eq!(
        g.fork_join(a, 4, make).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "not a barrier"
    );
    let mut other = e.graph(&scope);
    let foreign = other.barrier().unwrap();
    assert_eq!(
        g.fork_join(foreign, 4, make).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "another graph's barrier"
    );
    assert_eq!(made.load(Ordering::SeqCst), 0);
    drop(other);
    g.submit();
    scope.wait_idle(LONG).unwrap();
}

/// An unsubmitted graph frees its fork/join's calls (they sit in the
/// barrier's ready chunks, not in the task list) without running them.
/// Mutation checked: `Graph::drop` not freeing a barrier's chunks (the
/// 300 captured handles stay: strong count 301).
#[test]
fn an_unsubmitted_fork_join_frees_every_call() {
    let e = exec();
    let scope = Scope::new();
    let ran = Arc::new(AtomicU32::new(0));
    let mut g = e.graph(&scope);
    let fork = g.barrier().unwrap();
    g.fork_join(fork, 300, |_| {
        let ran = ran.clone();
        move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    })
    .unwrap();
    assert_eq!(Arc::strong_count(&ran), 301);
    drop(g);
    assert_eq!(Arc::strong_count(&ran), 1, "every closure dropped");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(scope.pending(), 0);
}

/// A panic in `fork_join`'s `make` frees the calls made so far and leaves
/// the graph as it was (still usable). Mutation checked: the batch's
/// guard freeing nothing (150 captured handles stay).
#[test]
fn a_panic_while_making_a_fork_join_frees_the_calls_made() {
    let e = exec();
    let scope = Scope::new();
    let held = Arc::new(());
    let mut g = e.graph(&scope);
    let fork = g.barrier().unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        g.fork_join(fork, 300, |i| {
            assert!(i < 150, "make fails at 150");
            let held = held.clone();
            move |_| {
                let _ = &held;
                Ok(())
            }
        })
    }));
    assert!(r.is_err());
    assert_eq!(Arc::strong_count(&held), 1, "the 150 calls made were freed");
    let hits = Arc::new(AtomicU32::new(0));
    let h = hits.clone();
    let c = g
        .call(move |_| {
            h.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    g.fork(fork, c).unwrap();
    g.submit();
    scope.wait_idle(LONG).unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(scope.pending(), 0);
}
