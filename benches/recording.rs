//! Recording per frame on the CPU device (2 workers), each figure against
//! its peer in the same run.
//!
//! - `frame`: record + end + execute + wait of a 5-command buffer (a
//!   64-byte fill, a 16-byte update, a barrier, a 32-byte copy, a 16-tile
//!   dispatch): `fresh` (a new command buffer every frame), `reset` (one
//!   command buffer reset and re-recorded), `reused` (recorded once,
//!   executed every frame), against `boxed_closures`, the usual Rust way:
//!   the same work built every frame as boxed closures over the same kind
//!   of buffers and run on a rayon pool of 2 threads (the first stage in
//!   a `rayon::scope`, then the copy, then a `par_iter` over the tiles).
//! - `dispatch_per_tile`: 1M tiles (each a few arithmetic operations), as
//!   a device command buffer's dispatch against the executor's own
//!   `Graph::dispatch` of the same closure (both on 2 workers).
//!
//! Run with `cargo bench --bench recording`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::{Buffer, CommandBuffer, CpuConfig, Device, Semaphore, Tile};
use rayon::prelude::*;

const T: Duration = Duration::from_secs(10);

fn device() -> Device {
    Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        spin: true,
    })
    .unwrap()
}

fn record(cb: &mut CommandBuffer, a: &Buffer, b: &Buffer, sum: &Arc<AtomicU64>) {
    cb.fill(a, 0, 64, &[7]).unwrap();
    cb.update(&[1; 16], b, 48).unwrap();
    cb.barrier().unwrap();
    cb.copy(a, 0, b, 0, 32).unwrap();
    let s = sum.clone();
    cb.dispatch([16, 1, 1], move |t: &Tile| {
        s.fetch_add(u64::from(t.workgroup_id[0]), Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
}

fn frame(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame");
    let device = device();
    let queue = device.queue(0).unwrap();
    let (a, b) = (device.buffer(64).unwrap(), device.buffer(64).unwrap());
    let sum = Arc::new(AtomicU64::new(0));
    let done = Semaphore::new(0);
    let mut value = 0;
    let mut submit = |cb: &CommandBuffer| {
        value += 1;
        queue.execute(&[], &[(&done, value)], &[cb]).unwrap();
        done.wait(value, T).unwrap();
    };
    g.bench_function("fresh", |bench| {
        bench.iter(|| {
            let mut cb = device.command_buffer().unwrap();
            record(&mut cb, &a, &b, &sum);
            submit(&cb);
        })
    });
    let mut cb = device.command_buffer().unwrap();
    g.bench_function("reset", |bench| {
        bench.iter(|| {
            cb.reset().unwrap();
            record(&mut cb, &a, &b, &sum);
            submit(&cb);
        })
    });
    let mut once = device.command_buffer().unwrap();
    record(&mut once, &a, &b, &sum);
    g.bench_function("reused", |bench| bench.iter(|| submit(&once)));

    // The peer: the same work as boxed closures on rayon.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    type Bytes = Arc<Mutex<Vec<u8>>>;
    let (pa, pb): (Bytes, Bytes) = (
        Arc::new(Mutex::new(vec![0; 64])),
        Arc::new(Mutex::new(vec![0; 64])),
    );
    g.bench_function("boxed_closures", |bench| {
        bench.iter(|| {
            type Job = Box<dyn FnOnce() + Send>;
            let (a1, b1, a2, b2) = (pa.clone(), pb.clone(), pa.clone(), pb.clone());
            let data: Vec<u8> = vec![1; 16];
            let first: Vec<Job> = vec![
                Box::new(move || a1.lock().unwrap().fill(7)),
                Box::new(move || b1.lock().unwrap()[48..].copy_from_slice(&data)),
            ];
            let copy: Job = Box::new(move || {
                let src: [u8; 32] = a2.lock().unwrap()[..32].try_into().unwrap();
                b2.lock().unwrap()[..32].copy_from_slice(&src);
            });
            let s = sum.clone();
            let tile: Box<dyn Fn(u32) + Send + Sync> = Box::new(move |x| {
                s.fetch_add(u64::from(x), Ordering::Relaxed);
            });
            pool.install(|| {
                rayon::scope(|scope| {
                    for job in first {
                        scope.spawn(move |_| job());
                    }
                });
                copy();
                (0..16u32).into_par_iter().for_each(&tile);
            });
        })
    });
    g.finish();
}

/// A tile's work: a few arithmetic operations on its index.
fn tile_work(t: &Tile) -> u64 {
    let x = u64::from(t.workgroup_id[0]);
    black_box(x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7)
}

fn dispatch_per_tile(c: &mut Criterion) {
    const TILES: u32 = 1 << 20;
    let mut g = c.benchmark_group("dispatch_per_tile");
    g.throughput(Throughput::Elements(u64::from(TILES)));
    g.sample_size(20);
    let device = device();
    let queue = device.queue(0).unwrap();
    let mut cb = device.command_buffer().unwrap();
    cb.dispatch([TILES, 1, 1], |t: &Tile| {
        tile_work(t);
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    let done = Semaphore::new(0);
    let mut value = 0;
    g.bench_function("device_command_buffer", |bench| {
        bench.iter(|| {
            value += 1;
            queue.execute(&[], &[(&done, value)], &[&cb]).unwrap();
            done.wait(value, T).unwrap();
        })
    });
    // One pool of workers at a time on these 2 cores.
    drop((cb, queue, device));
    let exec = Executor::new(ExecutorConfig {
        workers: 2,
        spin: true,
    })
    .unwrap();
    let scope = Scope::new();
    g.bench_function("executor_graph", |bench| {
        bench.iter(|| {
            let mut graph = exec.graph(&scope);
            graph
                .dispatch([TILES, 1, 1], |t: &Tile| {
                    tile_work(t);
                    Ok(())
                })
                .unwrap();
            graph.submit();
            scope.wait_idle(T).unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, frame, dispatch_per_tile);
criterion_main!(benches);
