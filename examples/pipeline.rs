//! The main job: a three-stage frame pipeline on fenceline's CPU device,
//! over two queues, stages chained by timeline semaphores, each stage a
//! dispatch of 64 tiles. It runs for a few seconds, then prints frames/s,
//! per-frame latency (p50 / p99 / max) and heap allocations per frame
//! (counted by this binary's allocator; 0 in steady state), and the same
//! figures for an equivalent built from rayon and std channels, run in the
//! same process for comparison.
//!
//! Run: `cargo run --release --example pipeline` (`-- <seconds>` to change
//! the run time, default 3). With the `trace` feature, `-- --trace
//! pipeline.json` also records the fenceline run's timeline (after its
//! warm-up) and writes it in the Chrome trace format: open it in
//! <https://ui.perfetto.dev> or chrome://tracing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fenceline::{CpuConfig, Device, Error, Semaphore};

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "common/pipeline_stages.rs"]
mod stages;
use stages::{stage_cb, tile_work, IN_FLIGHT, TILES};

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

const WARMUP_FRAMES: u64 = 200;

struct Figures {
    frames: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    allocations: usize,
}

impl Figures {
    fn print(&mut self, name: &str) {
        self.latencies.sort_unstable();
        let n = self.latencies.len();
        let pct = |p: f64| self.latencies[((n - 1) as f64 * p) as usize];
        println!(
            "{name:>16}: {:>8.0} frames/s  frame time {:>7.1} us  latency p50 {:>7.1} us  p99 {:>7.1} us  max {:>8.1} us  allocations/frame {:.3}",
            self.frames as f64 / self.elapsed.as_secs_f64(),
            self.elapsed.as_secs_f64() * 1e6 / self.frames as f64,
            pct(0.5).as_secs_f64() * 1e6,
            pct(0.99).as_secs_f64() * 1e6,
            self.latencies[n - 1].as_secs_f64() * 1e6,
            self.allocations as f64 / self.frames as f64,
        );
    }
}

/// Starts recording a trace on `device` if asked to (feature `trace`).
fn start_trace(device: &Device, path: Option<&str>) -> Result<(), Error> {
    let Some(_path) = path else { return Ok(()) };
    #[cfg(feature = "trace")]
    return device.start_trace(1 << 16);
    #[cfg(not(feature = "trace"))]
    {
        let _ = device;
        Err(Error::new(
            fenceline::ErrorKind::FailedPrecondition,
            "--trace needs the trace feature: cargo run --release --features trace --example pipeline -- --trace pipeline.json",
        ))
    }
}

/// Stops the trace and writes it to `path` (feature `trace`).
fn finish_trace(device: &Device, path: Option<&str>) -> Result<(), Error> {
    let Some(path) = path else { return Ok(()) };
    #[cfg(feature = "trace")]
    {
        let trace = device.stop_trace()?;
        let mut file = std::fs::File::create(path)
            .map_err(|e| Error::new(fenceline::ErrorKind::Unavailable, format!("{path}: {e}")))?;
        trace
            .write_chrome_json(&mut file)
            .map_err(|e| Error::new(fenceline::ErrorKind::Unavailable, format!("{path}: {e}")))?;
        println!(
            "trace: {} events ({} dropped) written to {path}; open it in https://ui.perfetto.dev or chrome://tracing",
            trace.events(),
            trace.dropped()
        );
    }
    let _ = (device, path);
    Ok(())
}

fn run_fenceline(
    seconds: f64,
    sink: &Arc<AtomicU64>,
    trace: Option<&str>,
) -> Result<Figures, Error> {
    let device = Device::cpu_with(CpuConfig {
        workers: 0,
        queues: 2,
        spin: true,
    })?;
    let (q0, q1) = (device.queue(0)?, device.queue(1)?);
    let cbs = [
        stage_cb(&device, 1, sink)?,
        stage_cb(&device, 2, sink)?,
        stage_cb(&device, 3, sink)?,
    ];
    let (a, b, c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let mut submitted = [Instant::now(); IN_FLIGHT as usize + 1];
    let mut latencies = Vec::with_capacity(1 << 20);
    let mut frame = 0u64;
    let mut measured_from = None;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline || frame < WARMUP_FRAMES * 2 {
        frame += 1;
        // Frame `frame`: decode (q0) -> process (q1) -> encode (q0). At most
        // IN_FLIGHT frames in flight: decode waits for encode of frame - 3.
        submitted[(frame % (IN_FLIGHT + 1)) as usize] = Instant::now();
        let older = frame.saturating_sub(IN_FLIGHT);
        // Each stage also waits for its own previous frame: a timeline
        // value is signalled once, in order.
        q0.execute(&[(&c, older), (&a, frame - 1)], &[(&a, frame)], &[&cbs[0]])?;
        q1.execute(&[(&a, frame), (&b, frame - 1)], &[(&b, frame)], &[&cbs[1]])?;
        q0.execute(&[(&b, frame), (&c, frame - 1)], &[(&c, frame)], &[&cbs[2]])?;
        if frame > IN_FLIGHT - 1 {
            let done = frame + 1 - IN_FLIGHT;
            c.wait(done, Duration::from_secs(10))?;
            let latency = submitted[(done % (IN_FLIGHT + 1)) as usize].elapsed();
            if done == WARMUP_FRAMES {
                start_trace(&device, trace)?;
                measured_from = Some((Instant::now(), common::allocations(), done));
            } else if done > WARMUP_FRAMES {
                latencies.push(latency);
            }
        }
    }
    c.wait(frame, Duration::from_secs(10))?;
    let elapsed_at_end = Instant::now();
    let allocations_at_end = common::allocations();
    finish_trace(&device, trace)?;
    let (start, allocs, first) = measured_from.unwrap_or((Instant::now(), 0, frame));
    let frames = frame - first;
    let allocations = allocations_at_end - allocs;
    Ok(Figures {
        frames,
        elapsed: elapsed_at_end.duration_since(start),
        latencies,
        allocations,
    })
}

/// The same pipeline with std threads per stage, std channels between them,
/// and each stage's 64 tiles run by a rayon pool.
fn run_rayon(seconds: f64, sink: &Arc<AtomicU64>) -> Figures {
    use rayon::prelude::*;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .build()
            .expect("rayon pool"),
    );
    let (to_a, a_rx) = sync_channel::<(u64, Instant)>(IN_FLIGHT as usize);
    let (to_b, b_rx) = sync_channel::<(u64, Instant)>(IN_FLIGHT as usize);
    let (to_c, c_rx) = sync_channel::<(u64, Instant)>(IN_FLIGHT as usize);
    let (done_tx, done_rx) = sync_channel::<(u64, Instant)>(IN_FLIGHT as usize);
    let stage = |stage: u64,
                 rx: std::sync::mpsc::Receiver<(u64, Instant)>,
                 tx: std::sync::mpsc::SyncSender<(u64, Instant)>| {
        let (pool, sink) = (pool.clone(), sink.clone());
        std::thread::spawn(move || {
            while let Ok(msg) = rx.recv() {
                pool.install(|| {
                    (0..u64::from(TILES))
                        .into_par_iter()
                        .for_each(|t| tile_work(stage, t, &sink));
                });
                if tx.send(msg).is_err() {
                    break;
                }
            }
        })
    };
    let threads = [
        stage(1, a_rx, to_b),
        stage(2, b_rx, to_c),
        stage(3, c_rx, done_tx),
    ];
    let mut latencies = Vec::with_capacity(1 << 20);
    let mut frame = 0u64;
    let mut measured_from = None;
    let mut finished = 0u64;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline || frame < WARMUP_FRAMES * 2 {
        frame += 1;
        to_a.send((frame, Instant::now())).expect("stage alive");
        if frame > IN_FLIGHT - 1 {
            let (done, t) = done_rx.recv().expect("stage alive");
            finished = done;
            if done == WARMUP_FRAMES {
                measured_from = Some((Instant::now(), common::allocations(), done));
            } else if done > WARMUP_FRAMES {
                latencies.push(t.elapsed());
            }
        }
    }
    drop(to_a);
    while finished < frame {
        finished = done_rx.recv().expect("stage alive").0;
    }
    for t in threads {
        t.join().expect("stage thread");
    }
    let (start, allocs, first) = measured_from.unwrap_or((Instant::now(), 0, frame));
    Figures {
        frames: frame - first,
        elapsed: start.elapsed(),
        latencies,
        allocations: common::allocations() - allocs,
    }
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let trace = args
        .iter()
        .position(|a| a == "--trace")
        .map(|i| args.get(i + 1).map_or("pipeline.json", String::as_str));
    let seconds: f64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(3.0);
    let sink = Arc::new(AtomicU64::new(0));
    println!(
        "3-stage pipeline, {TILES} tiles a stage, {IN_FLIGHT} frames in flight, {seconds} s each, {} cores",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let mut ours = run_fenceline(seconds, &sink, trace)?;
    ours.print("fenceline");
    let mut theirs = run_rayon(seconds, &sink);
    theirs.print("rayon+channels");
    let ratio = (ours.elapsed.as_secs_f64() / ours.frames as f64)
        / (theirs.elapsed.as_secs_f64() / theirs.frames as f64);
    println!(
        "frame time fenceline / rayon+channels: {ratio:.2} (checksum {})",
        sink.load(Ordering::Relaxed)
    );
    Ok(())
}
