//! Taskflow's four benchmarks on fenceline's executor, timed as Taskflow's
//! programs time them: build + submit + wait, mean of ROUNDS rounds (after
//! one warm round), 2 workers. Prints `fenceline benchmark size ms` lines
//! (the peers' `run.sh` prints `PEER model benchmark size ms`);
//! `scripts/taskflow-peer.sh` runs both and prints the table.
//!
//! ```sh
//! cargo run --release --example taskflow [ROUNDS] [BENCHMARK]   # default 5, all four
//! ```

use std::time::Instant;

use fenceline::task::{Executor, ExecutorConfig};

#[path = "common/taskflow_graphs.rs"]
mod graphs;

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .map(|r| r.parse().expect("ROUNDS: a number"))
        .unwrap_or(5);
    let only = std::env::args().nth(2);
    for (name, sizes) in graphs::BENCHMARKS {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        // An executor per benchmark, as each peer program has its own
        // (a pool that a million-task graph spread out would serve the
        // next benchmark scattered blocks).
        let exec = Executor::new(ExecutorConfig {
            workers: 2,
            spin: true,
        })
        .expect("an executor of 2 workers");
        for size in sizes {
            graphs::run(&exec, name, size);
            let start = Instant::now();
            for _ in 0..rounds {
                graphs::run(&exec, name, size);
            }
            let ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(rounds);
            println!("fenceline {name} {size} {ms:.3}");
        }
    }
}
