//! With a counting global allocator: after warm-up, 1000 rounds of a fork
//! of 256 calls + join and a 4096-tile dispatch allocate nothing on any
//! thread (the executor's workers included).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::Tile;

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

fn round(exec: &Executor, scope: &Scope, sum: &Arc<AtomicU64>) {
    let mut g = exec.graph(scope);
    let start = g.nop().unwrap();
    let fork = g.barrier().unwrap();
    g.set_completion(start, fork).unwrap();
    let mut calls = [None; 256];
    for (i, slot) in calls.iter_mut().enumerate() {
        let s = sum.clone();
        let id = g
            .call(move |_| {
                s.fetch_add(i as u64, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
        g.fork(fork, id).unwrap();
        *slot = Some(id);
    }
    let join = g.nop().unwrap();
    for id in calls.into_iter().flatten() {
        g.set_completion(id, join).unwrap();
    }
    let s = sum.clone();
    let d = g
        .dispatch([64, 64, 1], move |t: &Tile| {
            s.fetch_add(
                u64::from(t.workgroup_id[0] + t.workgroup_id[1]),
                Ordering::Relaxed,
            );
            Ok(())
        })
        .unwrap();
    g.set_completion(join, d).unwrap();
    g.submit();
    scope.wait_idle(Duration::from_secs(10)).unwrap();
}

#[test]
fn fork_join_and_dispatch_allocate_nothing() {
    let exec = Executor::new(ExecutorConfig {
        workers: 2,
        spin: true,
    })
    .unwrap();
    let scope = Scope::new();
    let sum = Arc::new(AtomicU64::new(0));
    let per_round = (0..256u64).sum::<u64>() + 2 * 64 * (0..64u64).sum::<u64>();
    for _ in 0..50 {
        round(&exec, &scope, &sum); // warm-up: pools, deques, epoch pins
    }
    assert_eq!(sum.load(Ordering::Relaxed), 50 * per_round);
    let before = common::allocations();
    for _ in 0..1000 {
        round(&exec, &scope, &sum);
    }
    let allocations = common::allocations() - before;
    assert_eq!(
        sum.load(Ordering::Relaxed),
        1050 * per_round,
        "every task ran"
    );
    assert_eq!(allocations, 0, "1000 rounds allocated {allocations} times");
}
