//! The main job: a frame pipeline that computes on the device's memory.
//! Each frame, the host writes a 512x256 grey image into a device buffer
//! (`Buffer::write`); a 3x3 box blur runs as a bound dispatch of 64 tiles
//! (one per 4 rows) into a buffer taken with `Queue::alloca`; a second
//! bound dispatch computes each tile's 16-bin histogram and a hash of its
//! blurred rows; `Queue::dealloca` gives the blurred buffer back; the host
//! reads the statistics (`Buffer::read`). Both dispatches are recorded
//! once and run on new buffers every frame through binding tables
//! (`Queue::execute_with`). Stages run on two queues of the CPU device,
//! chained by timeline semaphores, 3 frames in flight.
//!
//! The same frames are then computed by a peer built from rayon and std
//! channels (a thread per stage, `par_chunks_mut` over the same kernels,
//! `Vec`s recycled through the channels). The demo checks that both
//! produced identical statistics for every frame both ran, and prints
//! frames/s, per-frame latency (p50 / p99 / max) and heap allocations
//! per frame (every thread counted; 0 in steady state) for each.
//!
//! Run: `cargo run --release --example pipeline` (`-- <seconds>` to change
//! the run time, default 3). With the `trace` feature, `-- --trace
//! pipeline.json` also records the fenceline run's timeline (after its
//! warm-up) and writes it in the Chrome trace format: open it in
//! <https://ui.perfetto.dev> or chrome://tracing.
//!
//! With the `vulkan` feature, `-- --vulkan` then computes the same frames
//! on a Vulkan device, with the same stages (alloca, blur, statistics,
//! dealloca), queues and semaphores (the kernels the WGSL shaders of
//! `examples/common/shaders/`, compiled by naga), first a few under the
//! validation layer, then a timed run, and checks that their statistics
//! are the CPU device's (`examples/common/vulkan_pipeline.rs`):
//! `cargo run --release --example pipeline --features vulkan -- --vulkan`.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::time::{Duration, Instant};

use fenceline::{bytemuck, Binding, CpuConfig, Device, Error, Semaphore, Tile, TileIo, Timeout};

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "common/image.rs"]
mod image;
use image::{
    blur_rows, fold_digest, source_image, tile_stats, IMAGE_BYTES, ROWS_PER_TILE, STATS_BYTES,
    STATS_PER_TILE, TILES, TILE_BYTES,
};

#[cfg(feature = "vulkan")]
#[path = "common/vulkan_pipeline.rs"]
mod vulkan_pipeline;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

const WARMUP_FRAMES: u64 = 200;
/// Frames in flight.
const IN_FLIGHT: u64 = 3;
/// Buffers per ring (sources, statistics): one more than frames in flight.
const RING: usize = IN_FLIGHT as usize + 1;
/// Distinct source images (frame `f` gets image `f % IMAGES`).
const IMAGES: u64 = 8;

/// Allocations so far on every thread, the main one included.
fn allocations() -> usize {
    common::allocations() + common::thread_allocations()
}

struct Figures {
    frames: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    allocations: usize,
    /// Frame `f`'s statistics digest at `f - 1`, every frame from the first.
    digests: Vec<u64>,
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

/// Counts the measured frames: warm-up first, then from frame
/// `WARMUP_FRAMES` on.
struct Measure {
    latencies: Vec<Duration>,
    from: Option<(Instant, usize, u64)>,
}

impl Measure {
    fn new() -> Measure {
        Measure {
            latencies: Vec::with_capacity(1 << 20),
            from: None,
        }
    }

    /// Frame `done` finished `latency` after it started.
    fn finished(&mut self, done: u64, latency: Duration) {
        if done == WARMUP_FRAMES {
            self.from = Some((Instant::now(), allocations(), done));
        } else if done > WARMUP_FRAMES {
            self.latencies.push(latency);
        }
    }

    fn figures(
        self,
        last: u64,
        end: Instant,
        allocations_at_end: usize,
        digests: Vec<u64>,
    ) -> Figures {
        let (start, allocs, first) = self.from.unwrap_or((end, allocations_at_end, last));
        Figures {
            frames: last - first,
            elapsed: end.duration_since(start),
            latencies: self.latencies,
            allocations: allocations_at_end - allocs,
            digests,
        }
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

/// The semaphores that chain a frame's stages: `alloc` orders the allocas,
/// `blurred` and `counted` the dispatches, `freed` the deallocas (a frame
/// is done when its dealloca ran).
struct Chain {
    alloc: Semaphore,
    blurred: Semaphore,
    counted: Semaphore,
    freed: Semaphore,
}

impl Chain {
    fn new() -> Chain {
        let [alloc, blurred, counted, freed] = [0; 4].map(Semaphore::new);
        Chain {
            alloc,
            blurred,
            counted,
            freed,
        }
    }
}

/// Frame `f`'s four submissions, the same on every device: an alloca on
/// `q0`, the blur into it on `q1`, the statistics on `q0`, the dealloca on
/// `q0`, each dispatch recorded once and given the frame's buffers through
/// its binding table.
fn submit_frame(
    f: u64,
    [q0, q1]: [&fenceline::Queue; 2],
    c: &Chain,
    [blur, statistics]: [&fenceline::CommandBuffer; 2],
    source: &fenceline::Buffer,
    stats: &fenceline::Buffer,
) -> Result<(), Error> {
    let tmp = q0.alloca(&[(&c.alloc, f - 1)], &[(&c.alloc, f)], IMAGE_BYTES)?;
    q1.execute_with(
        &[(&c.alloc, f), (&c.blurred, f - 1)],
        &[(&c.blurred, f)],
        &[blur],
        &[source, &tmp],
    )?;
    q0.execute_with(
        &[(&c.blurred, f), (&c.counted, f - 1)],
        &[(&c.counted, f)],
        &[statistics],
        &[&tmp, stats],
    )?;
    q0.dealloca(
        &[(&c.counted, f), (&c.freed, f - 1)],
        &[(&c.freed, f)],
        &tmp,
    )
}

fn run_fenceline(seconds: f64, images: &[Vec<u8>], trace: Option<&str>) -> Result<Figures, Error> {
    let device = Device::cpu_with(CpuConfig {
        workers: 0,
        queues: 2,
        spin: true,
    })?;
    let (q0, q1) = (device.queue(0)?, device.queue(1)?);
    // Frame `f` uses ring entry `f % RING`: its previous user, frame
    // `f - RING`, has finished when frame `f` starts (the loop waits for
    // frame `f - IN_FLIGHT` before it starts frame `f`).
    let sources = (0..RING)
        .map(|_| device.buffer(IMAGE_BYTES))
        .collect::<Result<Vec<_>, _>>()?;
    let stats = (0..RING)
        .map(|_| device.buffer(STATS_BYTES))
        .collect::<Result<Vec<_>, _>>()?;
    // Each dispatch recorded once: slots 0 and 1 are the frame's buffers.
    let mut blur = device.command_buffer()?;
    blur.dispatch_with(
        [TILES, 1, 1],
        &[
            Binding::slot_read(0),
            Binding::slot_write_chunks(1, TILE_BYTES),
        ],
        |t: &Tile, io: &TileIo<'_>| {
            let src: &[u8] = io.read(0)?;
            blur_rows(src, t.linear_id() as usize * ROWS_PER_TILE, io.chunk(1)?);
            Ok(())
        },
    )?;
    blur.end()?;
    let mut statistics = device.command_buffer()?;
    statistics.dispatch_with(
        [TILES, 1, 1],
        &[
            Binding::slot_read(0),
            Binding::slot_write_chunks(1, STATS_PER_TILE * 4),
        ],
        |t: &Tile, io: &TileIo<'_>| {
            let blurred: &[u8] = io.read(0)?;
            let rows = &blurred[t.linear_id() as usize * TILE_BYTES..][..TILE_BYTES];
            tile_stats(rows, io.chunk(1)?);
            Ok(())
        },
    )?;
    statistics.end()?;
    let chain = Chain::new();
    let freed = &chain.freed;
    let mut host_stats = vec![0u32; STATS_BYTES / 4];
    let mut digests = Vec::with_capacity(1 << 20);
    let mut started = [Instant::now(); RING];
    let mut measure = Measure::new();
    let mut frame = 0u64;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut collect = |done: u64, started: &[Instant; RING], measure: &mut Measure| {
        freed.wait(done, Timeout::Never)?;
        let latency = started[done as usize % RING].elapsed();
        stats[done as usize % RING].read(0, bytemuck::cast_slice_mut(&mut host_stats))?;
        digests.push(fold_digest(0, &host_stats));
        if done == WARMUP_FRAMES {
            // Before the measured window: the trace's rings are allocated here.
            start_trace(&device, trace)?;
        }
        measure.finished(done, latency);
        Ok::<(), Error>(())
    };
    while Instant::now() < deadline || frame < WARMUP_FRAMES * 2 {
        frame += 1;
        let f = frame;
        let at = f as usize % RING;
        started[at] = Instant::now();
        let source = &sources[at];
        source.write(0, &images[(f % IMAGES) as usize])?;
        submit_frame(
            f,
            [&q0, &q1],
            &chain,
            [&blur, &statistics],
            source,
            &stats[at],
        )?;
        if f >= IN_FLIGHT {
            collect(f + 1 - IN_FLIGHT, &started, &mut measure)?;
        }
    }
    for done in frame + 2 - IN_FLIGHT..=frame {
        collect(done, &started, &mut measure)?;
    }
    let (end, allocations_at_end) = (Instant::now(), allocations());
    finish_trace(&device, trace)?;
    Ok(measure.figures(frame, end, allocations_at_end, digests))
}

/// One frame's memory in the rayon peer, recycled through the channels.
struct Frame {
    number: u64,
    started: Instant,
    source: Vec<u8>,
    blurred: Vec<u8>,
    stats: Vec<u32>,
}

/// The same frames with std threads per stage, std channels between them,
/// and each stage's tiles run by a rayon pool over the same kernels.
fn run_rayon(seconds: f64, images: &[Vec<u8>]) -> Figures {
    use rayon::prelude::*;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .expect("rayon pool");
    let (to_blur, blur_rx) = sync_channel::<Frame>(RING);
    let (to_stats, stats_rx) = sync_channel::<Frame>(RING);
    let (done_tx, done_rx) = sync_channel::<Frame>(RING);
    let blur = |rx: Receiver<Frame>, tx: SyncSender<Frame>| {
        while let Ok(mut f) = rx.recv() {
            let src = &f.source;
            pool.install(|| {
                f.blurred
                    .par_chunks_mut(TILE_BYTES)
                    .enumerate()
                    .for_each(|(i, rows)| blur_rows(src, i * ROWS_PER_TILE, rows));
            });
            if tx.send(f).is_err() {
                break;
            }
        }
    };
    let count = |rx: Receiver<Frame>, tx: SyncSender<Frame>| {
        while let Ok(mut f) = rx.recv() {
            let blurred = &f.blurred;
            pool.install(|| {
                f.stats
                    .par_chunks_mut(STATS_PER_TILE)
                    .zip(blurred.par_chunks(TILE_BYTES))
                    .for_each(|(out, rows)| tile_stats(rows, out));
            });
            if tx.send(f).is_err() {
                break;
            }
        }
    };
    std::thread::scope(|scope| {
        scope.spawn(|| blur(blur_rx, to_stats));
        scope.spawn(|| count(stats_rx, done_tx));
        let mut free: Vec<Frame> = (0..RING)
            .map(|_| Frame {
                number: 0,
                started: Instant::now(),
                source: vec![0; IMAGE_BYTES],
                blurred: vec![0; IMAGE_BYTES],
                stats: vec![0; STATS_BYTES / 4],
            })
            .collect();
        let mut digests = Vec::with_capacity(1 << 20);
        let mut measure = Measure::new();
        let mut collect = |free: &mut Vec<Frame>, measure: &mut Measure| {
            let f = done_rx.recv().expect("stage alive");
            digests.push(fold_digest(0, &f.stats));
            measure.finished(f.number, f.started.elapsed());
            free.push(f);
        };
        let mut frame = 0u64;
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        while Instant::now() < deadline || frame < WARMUP_FRAMES * 2 {
            frame += 1;
            let mut f = free
                .pop()
                .expect("a free frame: at most IN_FLIGHT in flight");
            f.number = frame;
            f.started = Instant::now();
            f.source.copy_from_slice(&images[(frame % IMAGES) as usize]);
            to_blur.send(f).expect("stage alive");
            if frame >= IN_FLIGHT {
                collect(&mut free, &mut measure);
            }
        }
        for _ in frame + 2 - IN_FLIGHT..=frame {
            collect(&mut free, &mut measure);
        }
        let (end, allocations_at_end) = (Instant::now(), allocations());
        drop(to_blur);
        measure.figures(frame, end, allocations_at_end, digests)
    })
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let trace = args
        .iter()
        .position(|a| a == "--trace")
        .map(|i| args.get(i + 1).map_or("pipeline.json", String::as_str));
    let seconds: f64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(3.0);
    let vulkan = args.iter().any(|a| a == "--vulkan");
    let images: Vec<Vec<u8>> = (0..IMAGES).map(source_image).collect();
    println!(
        "frames of a {}x{} image: write, 3x3 blur into an alloca'd buffer, per-tile histograms, \
         dealloca, read back; {TILES} tiles a dispatch, {IN_FLIGHT} frames in flight, {seconds} s \
         each, {} cores",
        image::WIDTH,
        image::HEIGHT,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let mut ours = run_fenceline(seconds, &images, trace)?;
    ours.print("fenceline");
    let mut theirs = run_rayon(seconds, &images);
    theirs.print("rayon+channels");
    let common = ours.digests.len().min(theirs.digests.len());
    let same = ours.digests[..common] == theirs.digests[..common];
    let ratio = (ours.elapsed.as_secs_f64() / ours.frames as f64)
        / (theirs.elapsed.as_secs_f64() / theirs.frames as f64);
    println!(
        "frame time fenceline / rayon+channels: {ratio:.2}; statistics of the {common} frames both ran: {}",
        if same { "identical" } else { "DIFFERENT" }
    );
    if !same {
        return Err(Error::new(
            fenceline::ErrorKind::Internal,
            "fenceline's and rayon's frames differ",
        ));
    }
    if vulkan {
        #[cfg(feature = "vulkan")]
        vulkan_pipeline::run(seconds, &images, &ours)?;
        #[cfg(not(feature = "vulkan"))]
        println!(
            "vulkan: skipped, --vulkan needs the vulkan feature: \
             cargo run --release --example pipeline --features vulkan -- --vulkan"
        );
    }
    Ok(())
}
