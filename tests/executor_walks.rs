//! The executor's cost per ready task does not grow with the number of
//! ready tasks, counted, not timed: every link the crate's intrusive lists
//! follow (a take's reversal, a chunk's walk, a pop, a submit's walk) is
//! counted by the counting build (`--cfg fenceline_count_rmw`), and a
//! graph of n independent calls must follow O(1) links per task from
//! 4,096 to 262,144 ready tasks, with and without priority levels.
//!
//! `RUSTFLAGS="--cfg fenceline_count_rmw" cargo test --test executor_walks -- --nocapture`
//!
//! Mutation checked (fails): the injector of before, a take-all stack whose
//! taker kept the oldest chunk and pushed the others back in order (a
//! reversal on each side: every chunk left walked twice at every take).
//! Links per task then went from 7.8 at 4,096 to 20.3 at 65,536 and 62.9
//! at 262,144 (no levels; the test stops at the first failed check).
#![cfg(fenceline_count_rmw)]

use std::time::Duration;

use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::testing::link_reads;
use fenceline::Priority;

const SIZES: [usize; 3] = [4_096, 65_536, 262_144];

/// Links followed per task to build, submit and run `n` independent
/// empty calls (the second of two rounds: the pool warm).
fn links_per_task(exec: &Executor, n: usize, priority: Priority) -> f64 {
    let mut per = 0.0;
    for _ in 0..2 {
        let scope = Scope::new();
        let before = link_reads();
        let mut g = exec.graph(&scope);
        g.set_priority(priority);
        for _ in 0..n {
            g.call(|_| Ok(())).unwrap();
        }
        g.submit();
        scope.wait_idle(Duration::from_secs(120)).unwrap();
        per = (link_reads() - before) as f64 / n as f64;
    }
    per
}

fn check(exec: &Executor, priority: Priority) {
    let per: Vec<f64> = SIZES
        .iter()
        .map(|&n| links_per_task(exec, n, priority))
        .collect();
    for (n, p) in SIZES.iter().zip(&per) {
        println!("{priority:?}: {n} tasks: {p:.2} links a task");
    }
    // O(1) a task: a bounded number (7 today: the submit walk, the
    // chunk walk with its prefetch hints, pops, retirement), and the same
    // at every size (2 links a task of slack for the executor's other
    // lists: waits, spills).
    for (n, p) in SIZES.iter().zip(&per) {
        assert!(*p < 12.0, "{n} tasks: {p:.2} links a task");
        assert!(
            *p <= per[0] * 1.3 + 2.0,
            "{n} tasks: {p:.2} links a task, {:.2} at {}",
            per[0],
            SIZES[0]
        );
    }
}

/// One test (the count is every thread's: a second test running beside it
/// would add its links).
#[test]
fn independent_calls_follow_a_constant_number_of_links_per_task() {
    let exec = Executor::new(ExecutorConfig {
        workers: 2,
        ..Default::default()
    })
    .unwrap();
    check(&exec, Priority::Normal);
    drop(exec);
    // With priority levels: `High` and `Low` tasks wait in injectors of
    // their own, taken one task at a time; `Normal` ones as without
    // levels.
    let exec = Executor::with_priorities(ExecutorConfig {
        workers: 2,
        ..Default::default()
    })
    .unwrap();
    for p in [Priority::Normal, Priority::Low, Priority::High] {
        check(&exec, p);
    }
}
