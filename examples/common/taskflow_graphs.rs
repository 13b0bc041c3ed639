//! Taskflow's four benchmark graphs (`../shared/peers/taskflow/benchmarks`)
//! built on fenceline's executor: the same tasks, edges and work, built,
//! submitted and waited for in one call, as Taskflow's programs time them
//! (`run.sh` there runs the peers; `scripts/taskflow-peer.sh` prints both).

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fenceline::task::{Executor, Scope, TaskId};

/// How long a graph may take before the run counts as hung.
const LONG: Duration = Duration::from_secs(600);

/// The benchmarks and the sizes compared (as `run.sh` picks them).
pub const BENCHMARKS: [(&str, [usize; 2]); 4] = [
    ("linear_chain", [65_536, 1_048_576]),
    ("binary_tree", [65_536, 1_048_576]),
    ("embarrassing_parallelism", [4_096, 65_536]),
    ("wavefront", [16_384, 262_144]),
];

/// Builds, submits and waits for benchmark `name` at `size`; returns a
/// checksum of the work done (asserted against the graph's shape).
pub fn run(exec: &Executor, name: &str, size: usize) -> usize {
    match name {
        "linear_chain" => linear_chain(exec, size),
        "binary_tree" => binary_tree(exec, size.trailing_zeros() as usize),
        "embarrassing_parallelism" => embarrassing_parallelism(exec, size),
        "wavefront" => wavefront(exec, size),
        _ => panic!("no benchmark {name}"),
    }
}

/// `counter++` in each of `length` tasks, each preceding the next
/// (Taskflow's `linearize`). The tasks run one after another, so the
/// counter is a plain load and store, as Taskflow's `size_t` is.
pub fn linear_chain(exec: &Executor, length: usize) -> usize {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    COUNTER.store(0, Ordering::Relaxed);
    let scope = Scope::new();
    let mut g = exec.graph(&scope);
    let mut prev: Option<TaskId> = None;
    for _ in 0..length {
        let t = g
            .call(|_| {
                COUNTER.store(COUNTER.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
        if let Some(p) = prev {
            g.precede(p, t).unwrap();
        }
        prev = Some(t);
    }
    g.submit();
    scope.wait_idle(LONG).unwrap();
    let n = COUNTER.load(Ordering::Relaxed);
    assert_eq!(n, length);
    n
}

/// Tasks `1..2^layers`, task `i` preceding `2i` and `2i + 1`; each adds
/// one to a shared atomic (relaxed).
pub fn binary_tree(exec: &Executor, layers: usize) -> usize {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    COUNTER.store(0, Ordering::Relaxed);
    let scope = Scope::new();
    let mut g = exec.graph(&scope);
    let n = 1usize << layers;
    let mut tasks: Vec<TaskId> = Vec::with_capacity(n);
    // Slot 0 unused, as in Taskflow's program: a placeholder id.
    for i in 0..n {
        if i == 0 {
            continue;
        }
        tasks.push(
            g.call(|_| {
                COUNTER.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap(),
        );
    }
    for i in 1..n {
        let (l, r) = (i << 1, (i << 1) + 1);
        if l < n && r < n {
            g.precede(tasks[i - 1], tasks[l - 1]).unwrap();
            g.precede(tasks[i - 1], tasks[r - 1]).unwrap();
        }
    }
    g.submit();
    scope.wait_idle(LONG).unwrap();
    let c = COUNTER.load(Ordering::Relaxed);
    assert_eq!(c + 1, n);
    c
}

/// Taskflow's `dummy(i)`: 32 rounds of `sin` and `cos`.
pub fn dummy(i: usize) -> f64 {
    let mut sink = 0.0;
    let mut x = ((i.wrapping_mul(1_315_423_911) as u32 as usize) ^ (i >> 3)) as f64 + 1.0;
    for _ in 0..32 {
        x = x.sin() * 1.000_000_1 + x.cos();
        sink = black_box(sink + x);
    }
    sink
}

/// `n` independent tasks, task `i` computing `dummy(i)`.
pub fn embarrassing_parallelism(exec: &Executor, n: usize) -> usize {
    static DONE: AtomicUsize = AtomicUsize::new(0);
    DONE.store(0, Ordering::Relaxed);
    let scope = Scope::new();
    let mut g = exec.graph(&scope);
    for i in 0..n {
        g.call(move |_| {
            black_box(dummy(i));
            Ok(())
        })
        .unwrap();
    }
    g.submit();
    scope.wait_idle(LONG).unwrap();
    // The scope counted every task out; nothing failed.
    assert_eq!(scope.pending(), 0);
    n
}

/// An `mb x mb` grid of blocks (`blocks` = `mb * mb`), block `(i, j)`
/// preceding `(i + 1, j)` and `(i, j + 1)`; the work is `i + j`.
pub fn wavefront(exec: &Executor, blocks: usize) -> usize {
    static SUM: AtomicUsize = AtomicUsize::new(0);
    SUM.store(0, Ordering::Relaxed);
    let mb = (blocks as f64).sqrt() as usize;
    assert_eq!(mb * mb, blocks, "a square grid");
    let scope = Scope::new();
    let mut g = exec.graph(&scope);
    let mut node: Vec<TaskId> = Vec::with_capacity(blocks);
    for i in 0..mb {
        for j in 0..mb {
            node.push(
                g.call(move |_| {
                    black_box(i + j);
                    // The last block: every block before it ran.
                    if i + 1 == mb && j + 1 == mb {
                        SUM.store(i + j, Ordering::Relaxed);
                    }
                    Ok(())
                })
                .unwrap(),
            );
        }
    }
    for i in 0..mb {
        for j in 0..mb {
            if j + 1 < mb {
                g.precede(node[i * mb + j], node[i * mb + j + 1]).unwrap();
            }
            if i + 1 < mb {
                g.precede(node[i * mb + j], node[(i + 1) * mb + j]).unwrap();
            }
        }
    }
    g.submit();
    scope.wait_idle(LONG).unwrap();
    let s = SUM.load(Ordering::Relaxed);
    assert_eq!(s, 2 * (mb - 1));
    s
}
