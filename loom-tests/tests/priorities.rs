//! loom models of the priority levels, on a real `Executor` with levels
//! (`Executor::with_priorities`): the `High` and `Low` injectors, the
//! `High` chunk count that keeps a lower task from being taken while a
//! `High` chunk is out of sight, the leveled look for work (and its idle
//! re-check before parking), and a dispatch's phases when its shards
//! yield to higher-priority work.
#![cfg(fenceline_loom)]

use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::{Priority, Timeout};
use fenceline_loom_tests::big_model;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;

/// A worker with levels, racing the submitting thread, explores many
/// schedules: one worker and one preemption (two workers ran past 20
/// minutes), under which each model catches its mutations.
fn one_preemption() -> loom::model::Builder {
    let mut builder = big_model();
    builder.preemption_bound = Some(1);
    builder
}

fn exec(workers: usize) -> Executor {
    Executor::with_priorities(ExecutorConfig {
        workers,
        spin: false,
    })
    .unwrap()
}

/// Submits `n` independent calls at `priority`, each counting in `runs`.
fn submit_calls(
    exec: &Executor,
    scope: &Scope,
    priority: Priority,
    n: usize,
    runs: &Arc<AtomicUsize>,
) {
    let mut g = exec.graph(scope);
    g.set_priority(priority);
    for _ in 0..n {
        let runs = runs.clone();
        g.call(move |_| {
            runs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    }
    g.submit();
}

// Catches: a `High` or `Low` task stranded (a lost wake-up: an idle
// worker's last look before parking skips a level), lost or run twice (a
// `High` chunk's rest not given back), or a `High` count that never
// returns to zero (a worker spinning for a chunk that is gone). `High` is
// a chunk of two tasks, so the worker gives its rest back; the submitter
// races the worker's idle re-check and parking. Mutations checked: `find`
// looking only at `Normal` work (`find_normal`): deadlock, the worker
// parked next to the `Low` and `High` tasks; `take_level` dropping a
// chunk's rest, or not counting a chunk out when its last task is taken:
// the worker spins for the counted chunk forever (loom's branch limit).
#[test]
fn high_and_low_tasks_run_once_and_none_is_stranded() {
    one_preemption().check(|| {
        let exec = exec(1);
        let scope = Scope::new();
        let runs = Arc::new(AtomicUsize::new(0));
        submit_calls(&exec, &scope, Priority::Low, 1, &runs);
        submit_calls(&exec, &scope, Priority::High, 2, &runs);
        scope.wait_idle(Timeout::Never).unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 3, "every task ran once");
        drop(exec);
    });
}

// Catches: a dispatch that completes with tiles left when its shards
// yielded to a `High` task (their phase ended early), or a tile run
// twice. A `Low` dispatch of three tiles (claimed one at a time, with the
// `High` injector watched between them) races a `High` call submitted
// from outside; the task after the dispatch checks that
// every tile ran once. Mutation checked: the dispatch done when its
// shards finish whatever tiles are left (`tiles.left()` not checked on
// its later run): the successor's check fails.
#[test]
fn a_yielding_dispatch_runs_every_tile_once_in_later_phases() {
    one_preemption().check(|| {
        let exec = exec(1);
        let scope = Scope::new();
        let tiles: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
        let mut g = exec.graph(&scope);
        g.set_priority(Priority::Low);
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
                        "tile {i} once, before the successor"
                    );
                }
                Ok(())
            })
            .unwrap();
        g.set_completion(dispatch, after).unwrap();
        g.submit();
        let runs = Arc::new(AtomicUsize::new(0));
        submit_calls(&exec, &scope, Priority::High, 1, &runs);
        scope.wait_idle(Timeout::Never).unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        drop(exec);
    });
}
