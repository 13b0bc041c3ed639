//! `Graph::precede`: any earlier task before any later one, any number of
//! successors and predecessors, no barrier built by the user.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fenceline::task::{Executor, ExecutorConfig, Graph, Scope, TaskId};
use fenceline::{Error, ErrorKind, Priority};

const T: Duration = Duration::from_secs(30);

/// The tests' executor, never dropped (a static, shared by the tests): with
/// a defect that strands tasks, the test's timed wait fails it, where the
/// executor's drop (which lets queued work finish) would hang.
fn exec() -> &'static Executor {
    static EXEC: std::sync::OnceLock<Executor> = std::sync::OnceLock::new();
    EXEC.get_or_init(|| {
        Executor::new(ExecutorConfig {
            workers: 2,
            ..Default::default()
        })
        .unwrap()
    })
}

/// When each task started and finished, in one global order.
#[derive(Default)]
struct Clock {
    tick: AtomicU32,
    start: Mutex<Vec<u32>>,
    end: Mutex<Vec<u32>>,
}

impl Clock {
    fn new(n: usize) -> Arc<Clock> {
        Arc::new(Clock {
            tick: AtomicU32::new(1),
            start: Mutex::new(vec![0; n]),
            end: Mutex::new(vec![0; n]),
        })
    }

    /// A call that records task `i`'s start and end, failing if `fail`.
    fn task(self: &Arc<Self>, g: &mut Graph<'_>, i: usize, fail: bool) -> TaskId {
        let clock = self.clone();
        g.call(move |_| {
            let s = clock.tick.fetch_add(1, Ordering::SeqCst);
            clock.start.lock().unwrap()[i] = s;
            std::thread::yield_now();
            let e = clock.tick.fetch_add(1, Ordering::SeqCst);
            clock.end.lock().unwrap()[i] = e;
            if fail {
                Err(Error::new(ErrorKind::Internal, format!("task {i} fails")))
            } else {
                Ok(())
            }
        })
        .unwrap()
    }

    fn start(&self, i: usize) -> u32 {
        self.start.lock().unwrap()[i]
    }

    fn end(&self, i: usize) -> u32 {
        self.end.lock().unwrap()[i]
    }
}

/// A small deterministic generator (no dev-dependency on `rand`).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        ((self.0 >> 33) as usize) % n
    }
}

/// Random DAGs of 300 tasks, each with up to 40 successors (so edge
/// blocks of 30 fill and chain) made by `precede`, some by
/// `set_completion`: every task runs once, after all its predecessors
/// ended. Mutation checked: retiring a task without its edge-block
/// successors (only the inline one) fails the wait (`wait_idle` times
/// out).
#[test]
fn random_dags_run_every_task_after_all_its_predecessors() {
    let exec = exec();
    let mut rng = Lcg(7);
    for round in 0..20 {
        let n = 300;
        let clock = Clock::new(n);
        let scope = Scope::new();
        let mut g = exec.graph(&scope);
        let ids: Vec<TaskId> = (0..n).map(|i| clock.task(&mut g, i, false)).collect();
        let mut edges = Vec::new();
        for a in 0..n - 1 {
            let fan = if rng.below(10) == 0 { 40 } else { rng.below(4) };
            for _ in 0..fan {
                let b = a + 1 + rng.below(n - a - 1);
                if rng.below(5) == 0 && g.set_completion(ids[a], ids[b]).is_ok() {
                    edges.push((a, b));
                    continue;
                }
                g.precede(ids[a], ids[b]).unwrap();
                edges.push((a, b));
            }
        }
        g.submit();
        scope.wait_idle(T).unwrap();
        assert_eq!(
            clock.tick.load(Ordering::SeqCst),
            1 + 2 * n as u32,
            "round {round}"
        );
        for &(a, b) in &edges {
            assert!(
                clock.end(a) < clock.start(b),
                "round {round}: {a} -> {b}: ended {} started {}",
                clock.end(a),
                clock.start(b)
            );
        }
    }
}

/// A task with 100 successors and a task with 100 predecessors (edge
/// blocks on one side, a wide join on the other).
#[test]
fn a_wide_fan_out_and_a_wide_fan_in() {
    let exec = exec();
    let n = 100;
    let clock = Clock::new(n + 2);
    let scope = Scope::new();
    let mut g = exec.graph(&scope);
    let head = clock.task(&mut g, 0, false);
    let mid: Vec<TaskId> = (1..=n).map(|i| clock.task(&mut g, i, false)).collect();
    let tail = clock.task(&mut g, n + 1, false);
    for &m in &mid {
        g.precede(head, m).unwrap();
        g.precede(m, tail).unwrap();
    }
    g.submit();
    scope.wait_idle(T).unwrap();
    for i in 1..=n {
        assert!(clock.end(0) < clock.start(i), "head before {i}");
        assert!(clock.end(i) < clock.start(n + 1), "{i} before tail");
    }
}

/// A failed predecessor keeps every dependent from running: inline, in the
/// completion slot and in edge blocks, and transitively; tasks that do not
/// depend on it run. Mutation checked: not marking `precede` successors
/// failed runs them (the `ran` check fails).
#[test]
fn a_failed_predecessor_keeps_every_dependent_from_running() {
    let exec = exec();
    let scope = Scope::new();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let mut g = exec.graph(&scope);
    let task = |g: &mut Graph<'_>, i: usize, fail: bool| {
        let ran = ran.clone();
        g.call(move |_| {
            ran.lock().unwrap().push(i);
            if fail {
                Err(Error::new(ErrorKind::Internal, "boom"))
            } else {
                Ok(())
            }
        })
        .unwrap()
    };
    let bad = task(&mut g, 0, true);
    let good = task(&mut g, 1, false);
    // 40 dependents of `bad` (completion slot, inline, edge blocks), each
    // also after `good`; then one more level.
    let deps: Vec<TaskId> = (0..40).map(|i| task(&mut g, 10 + i, false)).collect();
    for &d in &deps {
        g.precede(bad, d).unwrap();
        g.precede(good, d).unwrap();
    }
    let grand = task(&mut g, 100, false);
    g.precede(deps[39], grand).unwrap();
    let independent = task(&mut g, 200, false);
    g.precede(good, independent).unwrap();
    g.submit();
    let err = scope.wait_idle(T).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    let mut ran = ran.lock().unwrap().clone();
    ran.sort_unstable();
    assert_eq!(ran, [0, 1, 200]);
}

/// Edges go forward and stay in their graph; `set_completion` still
/// refuses a second completion task but may follow `precede` edges;
/// `join_from` over tasks with `precede` edges.
#[test]
fn edge_rules() {
    let exec = exec();
    let scope = Scope::new();
    let mut g = exec.graph(&scope);
    let (a, b, c) = (g.nop().unwrap(), g.nop().unwrap(), g.nop().unwrap());
    for (x, y) in [(b, a), (a, a)] {
        let e = g.precede(x, y).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{x:?} -> {y:?}");
    }
    let mut other = exec.graph(&scope);
    let foreign = other.nop().unwrap();
    assert_eq!(
        g.precede(a, foreign).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    // `precede` first, then a completion task of its own: both edges hold.
    g.precede(a, b).unwrap();
    g.set_completion(a, c).unwrap();
    assert_eq!(
        g.set_completion(a, b).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "a second completion task"
    );
    // A join over a run whose tasks have `precede` edges.
    let d = g.nop().unwrap();
    let e = g.nop().unwrap();
    let join = g.nop().unwrap();
    g.precede(d, e).unwrap();
    g.join_from(d, join).unwrap();
    let counter = Arc::new(AtomicUsize::new(0));
    let seen = counter.clone();
    let last = g
        .call(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    g.precede(join, last).unwrap();
    g.precede(c, last).unwrap();
    g.submit();
    scope.wait_idle(T).unwrap();
    assert_eq!(counter.load(Ordering::SeqCst), 1);
    drop(other);
}

/// Unsubmitted graphs with edge blocks free everything (pool blocks come
/// back: a second graph of the same shape, built and dropped 200 times,
/// needs no more of them); submitted ones free them as tasks retire.
#[test]
fn edge_blocks_are_freed_submitted_or_not() {
    let exec = exec();
    let scope = Scope::new();
    let build = |g: &mut Graph<'_>| {
        let head = g.nop().unwrap();
        for _ in 0..100 {
            let t = g.nop().unwrap();
            g.precede(head, t).unwrap();
        }
    };
    for round in 0..200 {
        let mut g = exec.graph(&scope);
        build(&mut g);
        if round % 2 == 0 {
            drop(g);
        } else {
            g.submit();
            scope.wait_idle(T).unwrap();
        }
    }
}

/// With priority levels, edges work the same at every level.
#[test]
fn edges_on_an_executor_with_levels() {
    static LEVELS: std::sync::OnceLock<Executor> = std::sync::OnceLock::new();
    let exec = LEVELS.get_or_init(|| {
        Executor::with_priorities(ExecutorConfig {
            workers: 2,
            ..Default::default()
        })
        .unwrap()
    });
    for p in [Priority::High, Priority::Normal, Priority::Low] {
        let n = 64;
        let clock = Clock::new(n);
        let scope = Scope::new();
        let mut g = exec.graph(&scope);
        g.set_priority(p);
        let ids: Vec<TaskId> = (0..n).map(|i| clock.task(&mut g, i, false)).collect();
        // A wavefront of 8 x 8.
        for i in 0..8 {
            for j in 0..8 {
                if j + 1 < 8 {
                    g.precede(ids[i * 8 + j], ids[i * 8 + j + 1]).unwrap();
                }
                if i + 1 < 8 {
                    g.precede(ids[i * 8 + j], ids[(i + 1) * 8 + j]).unwrap();
                }
            }
        }
        g.submit();
        scope.wait_idle(T).unwrap();
        for i in 0..8 {
            for j in 0..8 {
                if j + 1 < 8 {
                    assert!(clock.end(i * 8 + j) < clock.start(i * 8 + j + 1), "{p:?}");
                }
                if i + 1 < 8 {
                    assert!(clock.end(i * 8 + j) < clock.start((i + 1) * 8 + j), "{p:?}");
                }
            }
        }
    }
}
