//! A frame pipeline of synthetic stages as a criterion group: 100 frames
//! (3 stages of 64-tile dispatches of a little arithmetic, 3 frames in
//! flight) through fenceline's CPU device over two queues, vs the same
//! built from a rayon pool and std channels between persistent stage
//! threads. Scheduling-bound: the tiles are tiny. (The demo,
//! `examples/pipeline.rs`, computes on device memory; its blur alone is
//! `benches/blur.rs`.)
//!
//! Run with `cargo bench --bench pipeline`; `cargo bench --features trace
//! --bench pipeline` adds `fenceline_tracing`, the same frames while a
//! trace records (its overhead, in the same run).

use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fenceline::{CpuConfig, Device, Semaphore, Timeout};

#[path = "../examples/common/pipeline_stages.rs"]
mod stages;
use stages::{stage_cb, tile_work, IN_FLIGHT, TILES};

const FRAMES: u64 = 100;

fn pipeline(c: &mut Criterion) {
    let mut group = c.benchmark_group("pipeline_100_frames");
    group.throughput(Throughput::Elements(FRAMES));
    group.sample_size(20);
    let sink = Arc::new(AtomicU64::new(0));

    let device = Device::cpu_with(CpuConfig {
        workers: 0,
        queues: 2,
        spin: true,
    })
    .unwrap();
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let cbs = [1, 2, 3].map(|s| stage_cb(&device, s, &sink).unwrap());
    let run = || {
        let (a, bb, c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
        for f in 1..=FRAMES {
            let older = f.saturating_sub(IN_FLIGHT);
            q0.execute(&[(&c, older), (&a, f - 1)], &[(&a, f)], &[&cbs[0]])
                .unwrap();
            q1.execute(&[(&a, f), (&bb, f - 1)], &[(&bb, f)], &[&cbs[1]])
                .unwrap();
            q0.execute(&[(&bb, f), (&c, f - 1)], &[(&c, f)], &[&cbs[2]])
                .unwrap();
            if f >= IN_FLIGHT {
                c.wait(f + 1 - IN_FLIGHT, Timeout::Never).unwrap();
            }
        }
        c.wait(FRAMES, Timeout::Never).unwrap();
    };
    group.bench_function("fenceline", |b| b.iter(run));
    // The same with a trace recording (feature `trace`): its overhead in
    // the same run. The rings fill and then overwrite their oldest events,
    // as a long recording does.
    #[cfg(feature = "trace")]
    group.bench_function("fenceline_tracing", |b| {
        device.start_trace(1 << 16).unwrap();
        b.iter(run);
        let _ = device.stop_trace().unwrap();
    });

    use rayon::prelude::*;
    let workers = thread::available_parallelism().map_or(1, |n| n.get());
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .build()
            .unwrap(),
    );
    let (to_a, a_rx) = sync_channel::<u64>(IN_FLIGHT as usize);
    let (to_b, b_rx) = sync_channel::<u64>(IN_FLIGHT as usize);
    let (to_c, c_rx) = sync_channel::<u64>(IN_FLIGHT as usize);
    let (done_tx, done_rx) = sync_channel::<u64>(IN_FLIGHT as usize);
    let stage = |stage: u64, rx: Receiver<u64>, tx: SyncSender<u64>| {
        let (pool, sink) = (pool.clone(), sink.clone());
        thread::spawn(move || {
            while let Ok(frame) = rx.recv() {
                pool.install(|| {
                    (0..u64::from(TILES))
                        .into_par_iter()
                        .for_each(|t| tile_work(stage, t, &sink))
                });
                if tx.send(frame).is_err() {
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
    group.bench_function("rayon_channels", |b| {
        b.iter(|| {
            let mut received = 0;
            for f in 1..=FRAMES {
                to_a.send(f).unwrap();
                if f >= IN_FLIGHT {
                    done_rx.recv().unwrap();
                    received += 1;
                }
            }
            while received < FRAMES {
                done_rx.recv().unwrap();
                received += 1;
            }
        })
    });
    drop(to_a);
    for t in threads {
        t.join().unwrap();
    }
    group.finish();
}

criterion_group! {
    name = pipeline_benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = pipeline
}
criterion_main!(pipeline_benches);
