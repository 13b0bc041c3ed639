//! Queue submission: fenceline's pending queue against the seed's design
//! ported faithfully (`pending_queue_actions.c`): one `Box` per action,
//! `Vec` copies of the wait and signal lists, a `Mutex`-guarded list that
//! every issue rescans, and an issue after every completion.
//!
//! Groups (each with both designs, same semaphores, same backend work):
//! - `submit_1thread`: submit + issue + complete of an action with 1 wait
//!   (already reached) and 1 signal, completing inline.
//! - `submit_2threads_completer`: 2 threads submit 2 x 4096 such actions;
//!   a third thread completes them (the backend hands issued work over);
//!   its floor is the same threads and hand-off with no queue at all.
//! - `queue_chain_10k`: 10k actions, each waiting on the previous one's signal,
//!   all submitted behind a gate, then released (per-hop latency).
//! - `chain_backlog`: fenceline's 20k-action chain all submitted before the
//!   first can run, vs the same chain released 64 at a time.
//!
//! Run with `cargo bench --bench submit`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fenceline::queue::{Backend, Completion, PendingQueue};
use fenceline::Semaphore;

// ---------------------------------------------------------------------------
// fenceline backends
// ---------------------------------------------------------------------------

/// Completes every action inside `issue`.
struct Inline;

impl Backend for Inline {
    type Payload = u64;
    fn issue(&self, work: Completion<Self>) {
        work.complete(Ok(()));
    }
}

/// Hands issued actions to a completer thread.
struct Handoff {
    issued: Mutex<VecDeque<Completion<Handoff>>>,
}

impl Backend for Handoff {
    type Payload = u64;
    fn issue(&self, work: Completion<Self>) {
        self.issued.lock().unwrap().push_back(work);
    }
}

// ---------------------------------------------------------------------------
// The seed's design, ported
// ---------------------------------------------------------------------------

struct SeedAction {
    waits: Vec<(Semaphore, u64)>,
    signals: Vec<(Semaphore, u64)>,
    #[allow(dead_code)]
    payload: u64,
}

/// `Mutex`-guarded list of boxed actions; `issue` scans all of it.
struct SeedQueue {
    actions: Mutex<VecDeque<Box<SeedAction>>>,
    /// `None`: complete inline; `Some`: hand to a completer.
    handoff: Option<Mutex<VecDeque<Box<SeedAction>>>>,
}

impl SeedQueue {
    fn new(handoff: bool) -> SeedQueue {
        SeedQueue {
            actions: Mutex::new(VecDeque::new()),
            handoff: handoff.then(|| Mutex::new(VecDeque::new())),
        }
    }

    fn submit(&self, waits: &[(&Semaphore, u64)], signals: &[(&Semaphore, u64)], payload: u64) {
        let action = Box::new(SeedAction {
            waits: waits.iter().map(|(s, v)| ((*s).clone(), *v)).collect(),
            signals: signals.iter().map(|(s, v)| ((*s).clone(), *v)).collect(),
            payload,
        });
        self.actions.lock().unwrap().push_back(action);
        self.issue();
    }

    /// The seed's issue: lock, classify every action, keep the pending
    /// ones, issue the ready ones outside the lock.
    fn issue(&self) {
        let mut ready = Vec::new();
        {
            let mut actions = self.actions.lock().unwrap();
            let mut pending = VecDeque::new();
            while let Some(a) = actions.pop_front() {
                let is_ready = a
                    .waits
                    .iter()
                    .all(|(s, v)| s.query().map_or(true, |c| c >= *v));
                if is_ready {
                    ready.push(a);
                } else {
                    pending.push_back(a);
                }
            }
            *actions = pending;
        }
        for a in ready {
            match &self.handoff {
                None => self.complete(a),
                Some(h) => h.lock().unwrap().push_back(a),
            }
        }
    }

    /// The host callback: signal, free, issue again.
    fn complete(&self, a: Box<SeedAction>) {
        for (s, v) in &a.signals {
            let _ = s.signal(*v);
        }
        drop(a);
        self.issue();
    }
}

// ---------------------------------------------------------------------------
// Groups
// ---------------------------------------------------------------------------

fn one_thread(c: &mut Criterion) {
    let mut group = c.benchmark_group("submit_1thread");
    group.throughput(Throughput::Elements(1));
    let q = PendingQueue::new(Inline).unwrap();
    let (gate, s) = (Semaphore::new(1), Semaphore::new(0));
    let mut i = 0u64;
    group.bench_function("fenceline", |b| {
        b.iter(|| {
            i += 1;
            q.submit(&[(&gate, 1)], &[(&s, i)], i).unwrap();
        })
    });
    assert_eq!(s.query().unwrap(), i);
    let seed = SeedQueue::new(false);
    let (gate, s) = (Semaphore::new(1), Semaphore::new(0));
    let mut i = 0u64;
    group.bench_function("seed_mutex_box", |b| {
        b.iter(|| {
            i += 1;
            seed.submit(&[(&gate, 1)], &[(&s, i)], i);
        })
    });
    assert_eq!(s.query().unwrap(), i);
    group.finish();
}

const PER_THREAD: u64 = 4096;

/// 2 submitters and this thread completing; returns the elapsed time.
fn two_submitters(submit: impl Fn(usize, u64) + Sync, complete_one: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    thread::scope(|sc| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let submit = &submit;
                sc.spawn(move || {
                    for i in 0..PER_THREAD {
                        submit(t, i);
                    }
                })
            })
            .collect();
        let mut completed = 0;
        while completed < 2 * PER_THREAD {
            if complete_one() {
                completed += 1;
            } else {
                thread::yield_now();
            }
        }
        for h in handles {
            h.join().unwrap();
        }
    });
    start.elapsed()
}

fn two_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("submit_2threads_completer");
    group.throughput(Throughput::Elements(2 * PER_THREAD));
    let q = PendingQueue::new(Handoff {
        issued: Mutex::new(VecDeque::new()),
    })
    .unwrap();
    let gate = Semaphore::new(1);
    let sems = [Semaphore::new(0), Semaphore::new(0)];
    let base = AtomicU64::new(0);
    group.bench_function("fenceline", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let off = base.fetch_add(PER_THREAD, Ordering::Relaxed);
                total += two_submitters(
                    |t, i| {
                        q.submit(&[(&gate, 1)], &[(&sems[t], off + i + 1)], i)
                            .unwrap()
                    },
                    || {
                        let w = q.backend().issued.lock().unwrap().pop_front();
                        w.map(|w| w.complete(Ok(()))).is_some()
                    },
                );
            }
            total
        })
    });
    let seed = SeedQueue::new(true);
    let gate = Semaphore::new(1);
    let sems = [Semaphore::new(0), Semaphore::new(0)];
    let base = AtomicU64::new(0);
    group.bench_function("seed_mutex_box", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let off = base.fetch_add(PER_THREAD, Ordering::Relaxed);
                total += two_submitters(
                    |t, i| seed.submit(&[(&gate, 1)], &[(&sems[t], off + i + 1)], i),
                    || {
                        let a = seed.handoff.as_ref().unwrap().lock().unwrap().pop_front();
                        a.map(|a| seed.complete(a)).is_some()
                    },
                );
            }
            total
        })
    });
    // The floor: the same threads and the same hand-off (a `Mutex`ed
    // `VecDeque`, pushed by the submitters, popped by this thread), with no
    // queue, no action and no semaphore: what the bench itself costs. A
    // design's best ratio against the seed is seed / floor.
    let handoff: Mutex<VecDeque<u64>> = Mutex::new(VecDeque::new());
    group.bench_function("floor_handoff_only", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += two_submitters(
                    |_, i| handoff.lock().unwrap().push_back(i),
                    || handoff.lock().unwrap().pop_front().is_some(),
                );
            }
            total
        })
    });
    group.finish();
}

/// A chain of `n` actions, each waiting on the previous one's signal, all
/// submitted behind a gate, then released.
fn fenceline_chain(q: &PendingQueue<Inline>, n: u64, window: u64) {
    let s = Semaphore::new(0);
    let gate = Semaphore::new(0);
    let mut i = 0;
    let mut w = 0;
    while i < n {
        w += 1;
        let end = (i + window).min(n);
        // The window's first action waits on the gate too.
        q.submit(&[(&gate, w), (&s, i)], &[(&s, i + 1)], i).unwrap();
        for k in i + 1..end {
            q.submit(&[(&s, k)], &[(&s, k + 1)], k).unwrap();
        }
        gate.signal(w).unwrap();
        i = end;
    }
    assert_eq!(s.query().unwrap(), n);
}

fn chain(c: &mut Criterion) {
    const N: u64 = 10_000;
    let mut group = c.benchmark_group("queue_chain_10k");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    let q = PendingQueue::new(Inline).unwrap();
    group.bench_function("fenceline", |b| b.iter(|| fenceline_chain(&q, N, N)));
    let seed = SeedQueue::new(false);
    group.bench_function("seed_mutex_box", |b| {
        b.iter(|| {
            let s = Semaphore::new(0);
            let gate = Semaphore::new(0);
            seed.submit(&[(&gate, 1), (&s, 0)], &[(&s, 1)], 0);
            for k in 1..N {
                seed.submit(&[(&s, k)], &[(&s, k + 1)], k);
            }
            gate.signal(1).unwrap();
            seed.issue();
            assert_eq!(s.query().unwrap(), N);
        })
    });
    group.finish();
}

fn backlog(c: &mut Criterion) {
    const N: u64 = 20_000;
    let mut group = c.benchmark_group("chain_backlog");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    let q = PendingQueue::new(Inline).unwrap();
    group.bench_function("fenceline_backlog_20k", |b| {
        b.iter(|| fenceline_chain(&q, N, N))
    });
    group.bench_function("fenceline_backlog_64", |b| {
        b.iter(|| fenceline_chain(&q, N, 64))
    });
    group.finish();
}

criterion_group! {
    name = submit;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = one_thread, two_threads, chain, backlog
}
criterion_main!(submit);
