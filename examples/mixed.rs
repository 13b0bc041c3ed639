//! Latency-critical work beside batch work: an interactive stream of small
//! dispatches (one request every millisecond, 8 tiles of about 5 us) on
//! one queue of the CPU device, alone and then while a batch stream on a
//! second queue keeps both workers busy (4 dispatches of 64 tiles of about
//! 50 us always in flight). The same mix on rayon: a `spawn` per request
//! into a 2-thread pool that a batch thread keeps busy.
//!
//! Prints the interactive requests' latency (from the submission to the
//! end of the request's last tile, as the tile's thread reads the clock:
//! what the scheduler adds, not the OS's wake-up of the submitting thread,
//! which on a machine whose cores the workers keep busy runs to
//! milliseconds whatever the scheduler does) at p50 and p99 for each mode: unloaded, loaded with
//! both queues at one priority (a request waits behind the batch backlog),
//! and loaded with the interactive queue `High` and the batch queue `Low`
//! (`Device::cpu_with_priorities`: the request's tasks are taken first, and the
//! batch dispatches yield between tiles). The target: loaded p99 with
//! priorities at most 2x the unloaded p99.
//!
//! Run: `cargo run --release --example mixed` (`-- <requests per mode>`,
//! default 2000).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use fenceline::{CpuConfig, Device, Error, Priority, Semaphore, Timeout};

/// Tiles of one interactive request, and of one batch dispatch.
const REQUEST_TILES: u32 = 8;
const BATCH_TILES: u32 = 64;
/// Batch dispatches kept in flight.
const BATCH_IN_FLIGHT: u64 = 4;
/// Time between two interactive requests.
const PERIOD: Duration = Duration::from_millis(1);

/// Nanoseconds since the first call (one clock for every thread).
fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Spins for about `us` microseconds of arithmetic (calibrated once).
fn work(iterations: u64) -> u64 {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..iterations {
        x = black_box(x.rotate_left(7) ^ i).wrapping_mul(0x2545_F491_4F6C_DD1D);
    }
    x
}

/// Iterations of `work` that take about one microsecond.
fn iterations_per_us() -> u64 {
    let n = 1_000_000;
    let t = Instant::now();
    black_box(work(n));
    (n as f64 / t.elapsed().as_secs_f64() / 1e6).max(1.0) as u64
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize] as f64 / 1e3
}

fn report(name: &str, mut latencies: Vec<u64>) -> f64 {
    latencies.sort_unstable();
    let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    println!("{name:>34}: p50 {p50:8.1} us  p99 {p99:8.1} us");
    p99
}

/// Interactive requests on fenceline, with or without the batch stream,
/// with the interactive queue `High` and the batch one `Low` or both
/// `Normal`.
fn fenceline(
    requests: usize,
    per_us: u64,
    loaded: bool,
    prioritized: bool,
) -> Result<Vec<u64>, Error> {
    let priorities: &[Priority] = if prioritized {
        &[Priority::High, Priority::Low]
    } else {
        &[]
    };
    let device = Device::cpu_with_priorities(
        CpuConfig {
            workers: 2,
            queues: 2,
            ..Default::default()
        },
        priorities,
    )?;
    let (interactive, batch) = (device.queue(0)?, device.queue(1)?);
    // The end of the latest request tile.
    let end = Arc::new(AtomicU64::new(0));
    let mut request = device.command_buffer()?;
    let tile_end = end.clone();
    request.dispatch([REQUEST_TILES, 1, 1], move |_| {
        black_box(work(5 * per_us));
        tile_end.fetch_max(now_ns(), Ordering::AcqRel);
        Ok(())
    })?;
    request.end()?;
    let mut big = device.command_buffer()?;
    big.dispatch([BATCH_TILES, 1, 1], move |_| {
        black_box(work(50 * per_us));
        Ok(())
    })?;
    big.end()?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let batcher = loaded.then(|| {
            sc.spawn(|| -> Result<(), Error> {
                let done = Semaphore::new(0);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    if n >= BATCH_IN_FLIGHT {
                        done.wait(n - BATCH_IN_FLIGHT + 1, Timeout::Never)?;
                    }
                    // Chained: unordered actions may finish out of order,
                    // and a semaphore's value only grows.
                    n += 1;
                    batch.execute(&[(&done, n - 1)], &[(&done, n)], &[&big])?;
                }
                done.wait(n, Timeout::Never)
            })
        });
        // Let the batch stream fill the workers first.
        std::thread::sleep(Duration::from_millis(20));
        let done = Semaphore::new(0);
        let mut latencies = Vec::with_capacity(requests);
        let mut next = Instant::now();
        for i in 1..=requests as u64 {
            next += PERIOD;
            let t = now_ns();
            interactive.execute(&[], &[(&done, i)], &[&request])?;
            done.wait(i, Timeout::Never)?;
            latencies.push(end.load(Ordering::Acquire) - t);
            if let Some(rest) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(rest);
            }
        }
        stop.store(true, Ordering::Relaxed);
        if let Some(b) = batcher {
            b.join().expect("the batch thread panicked")?;
        }
        Ok(latencies)
    })
}

/// The same mix on rayon: each request a `spawn` of its tiles into a busy
/// 2-thread pool, answered through a channel.
fn rayon(requests: usize, per_us: u64, loaded: bool) -> Vec<u64> {
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a rayon pool"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let batcher = loaded.then(|| {
        let (pool, stop) = (pool.clone(), stop.clone());
        std::thread::spawn(move || {
            let (tx, rx) = mpsc::channel::<()>();
            let mut in_flight = 0;
            while !stop.load(Ordering::Relaxed) {
                if in_flight >= BATCH_IN_FLIGHT {
                    rx.recv().expect("a batch job answers");
                    in_flight -= 1;
                }
                in_flight += 1;
                let tx = tx.clone();
                pool.spawn(move || {
                    rayon::scope(|s| {
                        for _ in 0..BATCH_TILES {
                            s.spawn(|_| {
                                black_box(work(50 * per_us));
                            });
                        }
                    });
                    let _ = tx.send(());
                });
            }
            for _ in 0..in_flight {
                rx.recv().expect("a batch job answers");
            }
        })
    });
    std::thread::sleep(Duration::from_millis(20));
    let (tx, rx) = mpsc::channel::<u64>();
    let mut latencies = Vec::with_capacity(requests);
    let mut next = Instant::now();
    for _ in 0..requests {
        next += PERIOD;
        let t = now_ns();
        let tx = tx.clone();
        pool.spawn(move || {
            rayon::scope(|s| {
                for _ in 0..REQUEST_TILES {
                    s.spawn(|_| {
                        black_box(work(5 * per_us));
                    });
                }
            });
            let _ = tx.send(now_ns());
        });
        let end = rx.recv().expect("a request answers");
        latencies.push(end - t);
        if let Some(rest) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(rest);
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(b) = batcher {
        b.join().expect("the batch thread panicked");
    }
    latencies
}

fn main() -> Result<(), Error> {
    let requests = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<usize>().ok())
        .unwrap_or(2000)
        .max(1);
    let per_us = iterations_per_us();
    println!(
        "interactive: {REQUEST_TILES} tiles of ~5 us every {PERIOD:?}; batch: {BATCH_IN_FLIGHT} \
         dispatches of {BATCH_TILES} tiles of ~50 us in flight; 2 workers; {requests} requests a mode"
    );
    let unloaded = report(
        "fenceline, unloaded",
        fenceline(requests, per_us, false, false)?,
    );
    let one = report(
        "fenceline, loaded, one priority",
        fenceline(requests, per_us, true, false)?,
    );
    let prioritized = report(
        "fenceline, loaded, High over Low",
        fenceline(requests, per_us, true, true)?,
    );
    let rayon_unloaded = report("rayon, unloaded", rayon(requests, per_us, false));
    let rayon_loaded = report("rayon, loaded", rayon(requests, per_us, true));
    println!(
        "loaded p99 / unloaded p99: fenceline with priorities {:.1} (target 2.0 or less), \
         one priority {:.1}, rayon {:.1}",
        prioritized / unloaded,
        one / unloaded,
        rayon_loaded / rayon_unloaded
    );
    Ok(())
}
