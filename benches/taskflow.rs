//! Taskflow's four benchmarks (`../shared/peers/taskflow/benchmarks`) on
//! fenceline's executor, each at the two sizes fenceline is compared at:
//! the same graphs, edges and work as the peer programs
//! (`examples/common/taskflow_graphs.rs`), built, submitted and waited for
//! per iteration, 2 workers, a fresh executor per group.
//!
//! The peers are C++ programs: `scripts/taskflow-peer.sh` runs them and
//! `examples/taskflow.rs` (the same graphs, timed the peers' way) in one
//! run and prints the table BENCHMARKS.md carries. Per-task cost at each
//! size is what these groups show (`Throughput::Elements`: tasks).
//!
//! `independent_calls`: the per-task cost of n independent empty calls
//! (build + submit + run) at 4,096, 65,536, 262,144 and 1,048,576 ready
//! tasks, without and with priority levels (a `Low` graph on
//! `Executor::with_priorities`): flat is the goal.
//!
//! `cargo bench --bench taskflow`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::Priority;

#[path = "../examples/common/taskflow_graphs.rs"]
mod graphs;

fn taskflow(c: &mut Criterion) {
    for (name, sizes) in graphs::BENCHMARKS {
        let exec = Executor::new(ExecutorConfig {
            workers: 2,
            spin: true,
        })
        .unwrap();
        let mut group = c.benchmark_group(name);
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        for size in sizes {
            group.throughput(Throughput::Elements(size as u64));
            group.bench_function(format!("fenceline_{size}"), |b| {
                b.iter(|| graphs::run(&exec, name, size))
            });
        }
        group.finish();
    }
}

fn independent_calls(c: &mut Criterion) {
    for levels in [false, true] {
        let config = ExecutorConfig {
            workers: 2,
            spin: true,
        };
        let exec = if levels {
            Executor::with_priorities(config)
        } else {
            Executor::new(config)
        }
        .unwrap();
        let mut group = c.benchmark_group(if levels {
            "independent_calls_low_priority"
        } else {
            "independent_calls"
        });
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        for n in [4_096usize, 65_536, 262_144, 1_048_576] {
            group.throughput(Throughput::Elements(n as u64));
            group.bench_function(format!("fenceline_{n}"), |b| {
                b.iter(|| {
                    let scope = Scope::new();
                    let mut g = exec.graph(&scope);
                    if levels {
                        g.set_priority(Priority::Low);
                    }
                    for _ in 0..n {
                        g.call(|_| Ok(())).unwrap();
                    }
                    g.submit();
                    scope.wait_idle(Duration::from_secs(600)).unwrap();
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, taskflow, independent_calls);
criterion_main!(benches);
