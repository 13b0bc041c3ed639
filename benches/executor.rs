//! The task executor against rayon, in the same groups and runs:
//!
//! - `fork_join_1024`: a nop, a barrier releasing 1024 empty calls, a join;
//!   built, submitted and waited for, per iteration (`fenceline`), or built
//!   outside the timed part (`fenceline_prebuilt`: submission and running
//!   only), or built in one step with `Graph::fork_join`
//!   (`fenceline_fork_join`, built and run). Peer: `rayon::scope` with
//!   1024 empty `spawn`s.
//! - `join_tree`: a binary tree of 1024 leaves: fenceline calls `spawn`
//!   two children and run again after them; peer: recursive `rayon::join`.
//! - `dispatch_1m`: a trivial closure over 1M tiles (1024 x 1024 x 1);
//!   peer: rayon `into_par_iter().for_each` over `0..1M`.
//! - `chain_10k`: 10k tasks, each the completion of the one before, built
//!   and run per iteration (`fenceline`) or prebuilt (`fenceline_prebuilt`:
//!   the hops alone); peer: a rayon scope where each task spawns the next.
//! - `wake_latency`: from submitting one call to its start, with every
//!   worker parked (idle 2 ms before each sample); peer: `rayon::spawn` on
//!   an idle pool.
//!
//! Both run 2 worker threads. Run with `cargo bench --bench executor`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fenceline::task::{CallContext, Executor, ExecutorConfig, Graph, Scope};
use fenceline::{Error, Tile};

const WORKERS: usize = 2;
const LONG: Duration = Duration::from_secs(30);

fn executor() -> Executor {
    Executor::new(ExecutorConfig {
        workers: WORKERS,
        spin: true,
    })
    .unwrap()
}

fn pool() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(WORKERS)
        .build()
        .unwrap()
}

/// A nop, a barrier releasing 1024 empty calls, and a join.
fn fork_join_graph<'e>(exec: &'e Executor, scope: &Scope) -> Graph<'e> {
    let mut g = exec.graph(scope);
    let start = g.nop().unwrap();
    let fork = g.barrier().unwrap();
    g.set_completion(start, fork).unwrap();
    let mut ids = [None; 1024];
    for slot in ids.iter_mut() {
        let id = g.call(|_| Ok(())).unwrap();
        g.fork(fork, id).unwrap();
        *slot = Some(id);
    }
    let join = g.nop().unwrap();
    // By reference: `into_iter().flatten()` moved the 24 KiB array three
    // times, 8-9 us of a 40 us build that was the bench's, not fenceline's.
    for id in ids.iter().flatten() {
        g.set_completion(*id, join).unwrap();
    }
    g
}

/// The same graph as `fork_join_graph`, its calls and join made by one
/// `Graph::fork_join`.
fn fork_join_batched<'e>(exec: &'e Executor, scope: &Scope) -> Graph<'e> {
    let mut g = exec.graph(scope);
    let start = g.nop().unwrap();
    let fork = g.barrier().unwrap();
    g.set_completion(start, fork).unwrap();
    g.fork_join(fork, 1024, |_| |_: &mut CallContext<'_>| Ok(()))
        .unwrap();
    g
}

/// `n` nops, each the completion of the one before.
fn chain_graph<'e>(exec: &'e Executor, scope: &Scope, n: u32) -> Graph<'e> {
    let mut g = exec.graph(scope);
    let mut prev = g.nop().unwrap();
    for _ in 1..n {
        let next = g.nop().unwrap();
        g.set_completion(prev, next).unwrap();
        prev = next;
    }
    g
}

fn fork_join(c: &mut Criterion) {
    let mut group = c.benchmark_group("fork_join_1024");
    group.throughput(Throughput::Elements(1024));
    let exec = executor();
    let scope = Scope::new();
    group.bench_function("fenceline", |b| {
        b.iter(|| {
            fork_join_graph(&exec, &scope).submit();
            scope.wait_idle(LONG).unwrap();
        })
    });
    group.bench_function("fenceline_prebuilt", |b| {
        b.iter_batched(
            || fork_join_graph(&exec, &scope),
            |g| {
                g.submit();
                scope.wait_idle(LONG).unwrap();
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("fenceline_fork_join", |b| {
        b.iter(|| {
            fork_join_batched(&exec, &scope).submit();
            scope.wait_idle(LONG).unwrap();
        })
    });
    let rayon = pool();
    group.bench_function("rayon_scope_spawn", |b| {
        b.iter(|| {
            rayon.scope(|s| {
                for _ in 0..1024 {
                    s.spawn(|_| {});
                }
            })
        })
    });
    group.finish();
}

fn tree(cx: &mut CallContext<'_>, depth: u32) -> Result<(), Error> {
    if depth > 0 && cx.reentry() == 0 {
        cx.spawn(move |cx| tree(cx, depth - 1))?;
        cx.spawn(move |cx| tree(cx, depth - 1))?;
    }
    Ok(())
}

fn rayon_tree(depth: u32) {
    if depth > 0 {
        rayon::join(|| rayon_tree(depth - 1), || rayon_tree(depth - 1));
    }
}

fn join_tree(c: &mut Criterion) {
    let mut group = c.benchmark_group("join_tree");
    group.throughput(Throughput::Elements(2047)); // nodes of a 1024-leaf tree
    let exec = executor();
    let scope = Scope::new();
    group.bench_function("fenceline", |b| {
        b.iter(|| {
            let mut g = exec.graph(&scope);
            g.call(|cx| tree(cx, 10)).unwrap();
            g.submit();
            scope.wait_idle(LONG).unwrap();
        })
    });
    let rayon = pool();
    group.bench_function("rayon_join", |b| {
        b.iter(|| rayon.install(|| rayon_tree(10)))
    });
    group.finish();
}

fn dispatch(c: &mut Criterion) {
    use rayon::prelude::*;
    let mut group = c.benchmark_group("dispatch_1m");
    group.throughput(Throughput::Elements(1 << 20));
    let exec = executor();
    let scope = Scope::new();
    group.bench_function("fenceline", |b| {
        b.iter(|| {
            let mut g = exec.graph(&scope);
            g.dispatch([1024, 1024, 1], |t: &Tile| {
                black_box(t.workgroup_id);
                Ok(())
            })
            .unwrap();
            g.submit();
            scope.wait_idle(LONG).unwrap();
        })
    });
    let rayon = pool();
    group.bench_function("rayon_par_iter", |b| {
        b.iter(|| {
            rayon.install(|| {
                (0u32..1 << 20).into_par_iter().for_each(|i| {
                    black_box([i % 1024, i / 1024, 0]);
                })
            })
        })
    });
    group.finish();
}

fn rayon_chain<'s>(s: &rayon::Scope<'s>, left: u32) {
    if left > 0 {
        s.spawn(move |s| rayon_chain(s, left - 1));
    }
}

fn chain(c: &mut Criterion) {
    const N: u32 = 10_000;
    let mut group = c.benchmark_group("chain_10k");
    group.throughput(Throughput::Elements(u64::from(N)));
    let exec = executor();
    let scope = Scope::new();
    group.bench_function("fenceline", |b| {
        b.iter(|| {
            chain_graph(&exec, &scope, N).submit();
            scope.wait_idle(LONG).unwrap();
        })
    });
    // The same chain built outside the timed part: submission and the
    // hops alone (a ready dependent continues on the same worker).
    group.bench_function("fenceline_prebuilt", |b| {
        b.iter_batched(
            || chain_graph(&exec, &scope, N),
            |g| {
                g.submit();
                scope.wait_idle(LONG).unwrap();
            },
            BatchSize::PerIteration,
        )
    });
    let rayon = pool();
    group.bench_function("rayon_spawn_chain", |b| {
        b.iter(|| rayon.scope(|s| rayon_chain(s, N)))
    });
    group.finish();
}

fn wake_latency(c: &mut Criterion) {
    let mut group = c.benchmark_group("wake_latency");
    group.sample_size(10);
    let exec = executor();
    let scope = Scope::new();
    group.bench_function("fenceline", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                std::thread::sleep(Duration::from_millis(2)); // let workers park
                let started = Arc::new(AtomicU64::new(0));
                let base = Instant::now();
                let s = started.clone();
                let mut g = exec.graph(&scope);
                g.call(move |_| {
                    s.store(base.elapsed().as_nanos() as u64, Ordering::Release);
                    Ok(())
                })
                .unwrap();
                g.submit();
                scope.wait_idle(LONG).unwrap();
                total += Duration::from_nanos(started.load(Ordering::Acquire));
            }
            total
        })
    });
    let rayon = pool();
    group.bench_function("rayon_spawn", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                std::thread::sleep(Duration::from_millis(2));
                let started = Arc::new(AtomicU64::new(0));
                let done = Arc::new(AtomicBool::new(false));
                let base = Instant::now();
                let (s, d) = (started.clone(), done.clone());
                rayon.spawn(move || {
                    s.store(base.elapsed().as_nanos() as u64, Ordering::Release);
                    d.store(true, Ordering::Release);
                });
                while !done.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                total += Duration::from_nanos(started.load(Ordering::Acquire));
            }
            total
        })
    });
    group.finish();
}

criterion_group! {
    name = executor_benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = fork_join, join_tree, dispatch, chain, wake_latency
}
criterion_main!(executor_benches);
