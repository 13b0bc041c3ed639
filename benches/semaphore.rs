//! Timeline semaphore costs against their peers, in the same groups:
//!
//! - `semaphore_ping_pong`: a round trip between two threads — this thread
//!   signals `ping` and waits for `pong`, the partner waits for `ping` and
//!   signals `pong`. Peers: `fenceline` (`Semaphore::signal` + `wait` with
//!   default settings: spin briefly, then park) and `mutex_condvar` (a
//!   `Mutex<u64>` + `Condvar` per direction doing the same). One iteration
//!   is one round trip.
//! - `semaphore_signal_query`: uncontended `signal(v)` + `query()` on one
//!   thread vs the floor, a bare `AtomicU64` `fetch_max` + `load`.
//!
//! Run with `cargo bench --bench semaphore`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use fenceline::{Semaphore, Timeout};

/// A value that only grows, signalled and awaited through a condvar.
struct CondvarTimeline {
    value: Mutex<u64>,
    changed: Condvar,
}

impl CondvarTimeline {
    fn new() -> Self {
        CondvarTimeline {
            value: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    fn signal(&self, v: u64) {
        *self.value.lock().unwrap() = v;
        self.changed.notify_all();
    }

    fn wait(&self, v: u64) {
        let mut value = self.value.lock().unwrap();
        while *value < v {
            value = self.changed.wait(value).unwrap();
        }
    }
}

/// Runs `iters` round trips with a partner thread; returns their time.
fn ping_pong(
    iters: u64,
    start_value: u64,
    signal_ping: impl Fn(u64) + Sync,
    wait_ping: impl Fn(u64) + Sync,
    signal_pong: impl Fn(u64) + Sync,
    wait_pong: impl Fn(u64) + Sync,
) -> Duration {
    thread::scope(|s| {
        s.spawn(|| {
            for i in start_value + 1..=start_value + iters {
                wait_ping(i);
                signal_pong(i);
            }
        });
        let start = Instant::now();
        for i in start_value + 1..=start_value + iters {
            signal_ping(i);
            wait_pong(i);
        }
        start.elapsed()
    })
}

fn semaphore_ping_pong(c: &mut Criterion) {
    let mut group = c.benchmark_group("semaphore_ping_pong");
    let (ping, pong) = (Semaphore::new(0), Semaphore::new(0));
    let mut next = 0;
    group.bench_function("fenceline", |b| {
        b.iter_custom(|iters| {
            let base = next;
            next += iters;
            ping_pong(
                iters,
                base,
                |v| ping.signal(v).unwrap(),
                |v| ping.wait(v, Timeout::Never).unwrap(),
                |v| pong.signal(v).unwrap(),
                |v| pong.wait(v, Timeout::Never).unwrap(),
            )
        })
    });
    let (ping, pong) = (CondvarTimeline::new(), CondvarTimeline::new());
    let mut next = 0;
    group.bench_function("mutex_condvar", |b| {
        b.iter_custom(|iters| {
            let base = next;
            next += iters;
            ping_pong(
                iters,
                base,
                |v| ping.signal(v),
                |v| ping.wait(v),
                |v| pong.signal(v),
                |v| pong.wait(v),
            )
        })
    });
    group.finish();
}

fn semaphore_signal_query(c: &mut Criterion) {
    let mut group = c.benchmark_group("semaphore_signal_query");
    let s = Semaphore::new(0);
    let mut v = 0u64;
    group.bench_function("fenceline", |b| {
        b.iter(|| {
            v += 1;
            s.signal(black_box(v)).unwrap();
            black_box(s.query().unwrap())
        })
    });
    let a = AtomicU64::new(0);
    let mut v = 0u64;
    group.bench_function("floor_atomic_fetch_max_load", |b| {
        b.iter(|| {
            v += 1;
            a.fetch_max(black_box(v), Ordering::AcqRel);
            black_box(a.load(Ordering::Acquire))
        })
    });
    group.finish();
}

criterion_group! {
    name = semaphore;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = semaphore_ping_pong, semaphore_signal_query
}
criterion_main!(semaphore);
