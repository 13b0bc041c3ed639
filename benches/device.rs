//! The CPU device's latencies:
//!
//! - `execute_first_tile`: from `Queue::execute` to the first tile of its
//!   dispatch starting, with every worker parked (idle 2 ms before each
//!   sample: `parked`) or right after the previous submission finished
//!   (workers still spinning: `spinning`); the floor, `floor_unpark`: from
//!   `Thread::unpark` of a thread parked (idle 2 ms) until it runs.
//! - `chain_2queues`: per-hop latency of a semaphore chain whose links
//!   alternate between two queues: barriers (the queue path alone) and
//!   1-tile executes (queue + executor; `_hops_only` times from the
//!   gate's signal on, without the submissions); the floor,
//!   `floor_cacheline_hop`: two threads spinning on one atomic, each hop
//!   one hand-off of its cache line; `floor_cacheline_round_trip`: the
//!   same, each element a round trip (the floor as issue 14 states it).
//! - `chained_dispatches_200`: 200 executes of a 1024-tile dispatch (each
//!   tile sums 256 floats and stores the sum), each waiting on the one
//!   before through a semaphore, one host wait at the end; the peer, 200
//!   rayon `par_iter`s over the same tiles, one after another, on a
//!   2-thread pool; the work alone, `sequential_one_thread` (half of it
//!   is the two-worker ideal).
//!
//! - `bound_dispatch_16k_tiles`: one execute of a 16384-tile dispatch
//!   whose tiles each read 2 `u64`s and write 2: `dispatch_with` (the
//!   data through a read binding and a write-chunks binding: the
//!   `TileIo` per tile, a buffer hold per binding per execute) against
//!   `dispatch` with the same data reached through captured `Arc`s (the
//!   per-tile overhead target: within 5%).
//!
//! Frame pipelines against rayon + std channels are in `benches/pipeline.rs`
//! (synthetic stages), `benches/blur.rs` (the demo's blur) and `cargo run
//! --release --example pipeline` (the demo).
//! Run with `cargo bench --bench device`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fenceline::{Binding, CpuConfig, Device, Semaphore, Tile, TileIo, Timeout};

fn device() -> Device {
    Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 2,
        spin: true,
    })
    .unwrap()
}

fn first_tile(c: &mut Criterion) {
    let mut group = c.benchmark_group("execute_first_tile");
    group.sample_size(10);
    let d = device();
    let q = d.queue(0).unwrap();
    let base = Arc::new(Instant::now());
    let started = Arc::new(AtomicU64::new(0));
    let mut cb = d.command_buffer().unwrap();
    let (b, s) = (base.clone(), started.clone());
    cb.dispatch([1, 1, 1], move |_| {
        s.store(b.elapsed().as_nanos() as u64, Ordering::Release);
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    let done = Semaphore::new(0);
    let mut n = 0u64;
    for (name, idle) in [
        ("parked", Some(Duration::from_millis(2))),
        ("spinning", None),
    ] {
        group.bench_function(name, |bench| {
            bench.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    if let Some(idle) = idle {
                        std::thread::sleep(idle);
                    }
                    n += 1;
                    let t0 = base.elapsed().as_nanos() as u64;
                    q.execute(&[], &[(&done, n)], &[&cb]).unwrap();
                    done.wait(n, Timeout::Never).unwrap();
                    total += Duration::from_nanos(started.load(Ordering::Acquire) - t0);
                }
                total
            })
        });
    }
    // The floor: one unpark of a parked thread until it runs.
    let (t0s, ran) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let parked = {
        let (base, ran, stop) = (base.clone(), ran.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::thread::park();
                ran.store(base.elapsed().as_nanos() as u64, Ordering::Release);
            }
        })
    };
    group.bench_function("floor_unpark", |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                std::thread::sleep(Duration::from_millis(2));
                let before = ran.load(Ordering::Acquire);
                let t0 = base.elapsed().as_nanos() as u64;
                t0s.store(t0, Ordering::Relaxed);
                parked.thread().unpark();
                let mut now = ran.load(Ordering::Acquire);
                while now == before {
                    std::hint::spin_loop();
                    now = ran.load(Ordering::Acquire);
                }
                total += Duration::from_nanos(now - t0);
            }
            total
        })
    });
    stop.store(true, Ordering::Release);
    parked.thread().unpark();
    parked.join().unwrap();
    group.finish();
}

fn chain(c: &mut Criterion) {
    const N: u64 = 1000;
    let mut group = c.benchmark_group("chain_2queues");
    group.throughput(Throughput::Elements(N));
    let d = device();
    let qs = [d.queue(0).unwrap(), d.queue(1).unwrap()];
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch([1, 1, 1], |_| Ok(())).unwrap();
    cb.end().unwrap();
    group.bench_function("barrier", |b| {
        b.iter(|| {
            let s = Semaphore::new(0);
            let gate = Semaphore::new(0);
            qs[0].barrier(&[(&gate, 1)], &[(&s, 1)]).unwrap();
            for i in 1..N {
                qs[(i % 2) as usize]
                    .barrier(&[(&s, i)], &[(&s, i + 1)])
                    .unwrap();
            }
            gate.signal(1).unwrap();
            s.wait(N, Timeout::Never).unwrap();
        })
    });
    // N chained 1-tile executes alternating between the queues, behind a
    // gate: (the chain's semaphore, the gate).
    let submit_chain = || {
        let s = Semaphore::new(0);
        let gate = Semaphore::new(0);
        qs[0].execute(&[(&gate, 1)], &[(&s, 1)], &[&cb]).unwrap();
        for i in 1..N {
            qs[(i % 2) as usize]
                .execute(&[(&s, i)], &[(&s, i + 1)], &[&cb])
                .unwrap();
        }
        (s, gate)
    };
    group.bench_function("execute_1_tile", |b| {
        b.iter(|| {
            let (s, gate) = submit_chain();
            gate.signal(1).unwrap();
            s.wait(N, Timeout::Never).unwrap();
        })
    });
    // The same chain, timed from the gate's signal to the host wait's
    // return: the hops alone, without the N submissions before the gate
    // (which `execute_1_tile` counts too).
    group.bench_function("execute_1_tile_hops_only", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (s, gate) = submit_chain();
                let start = Instant::now();
                gate.signal(1).unwrap();
                s.wait(N, Timeout::Never).unwrap();
                total += start.elapsed();
            }
            total
        })
    });
    // The floor: N one-way hand-offs of one cache line between two
    // spinning threads (a partner that lives across samples, so no thread
    // start is counted): it turns every odd value even, we every even one
    // odd.
    let turn = Arc::new(AtomicU64::new(0));
    let partner = {
        let turn = turn.clone();
        std::thread::spawn(move || loop {
            let v = turn.load(Ordering::Acquire);
            if v == u64::MAX {
                return;
            }
            if v % 2 == 1 {
                turn.store(v + 1, Ordering::Release);
            }
            std::hint::spin_loop();
        })
    };
    // `trips` round trips of the line: we hand it over, the partner hands
    // it back.
    let round_trips = |trips: u64| {
        let start = turn.load(Ordering::Acquire);
        for k in 0..trips {
            turn.store(start + 2 * k + 1, Ordering::Release);
            while turn.load(Ordering::Acquire) != start + 2 * k + 2 {
                std::hint::spin_loop();
            }
        }
    };
    // N one-way hand-offs per iteration.
    group.bench_function("floor_cacheline_hop", |b| b.iter(|| round_trips(N / 2)));
    // The floor as the issue states it: N round trips per iteration.
    group.bench_function("floor_cacheline_round_trip", |b| b.iter(|| round_trips(N)));
    turn.store(u64::MAX, Ordering::Release);
    partner.join().unwrap();
    group.finish();
}

fn chained_dispatches(c: &mut Criterion) {
    use rayon::prelude::*;
    use std::sync::atomic::AtomicU32;
    const FRAMES: u64 = 200;
    const TILES: usize = 1024;
    const PER_TILE: usize = 256;
    let mut group = c.benchmark_group("chained_dispatches_200");
    group.throughput(Throughput::Elements(FRAMES));
    let input: Arc<Vec<f32>> = Arc::new((0..TILES * PER_TILE).map(|i| (i % 7) as f32).collect());
    // `UNSET` until a tile writes its sum (no group function may run, under
    // a filter).
    const UNSET: u32 = u32::MAX;
    let out: Arc<Vec<AtomicU32>> = Arc::new((0..TILES).map(|_| AtomicU32::new(UNSET)).collect());
    let tile = {
        let (input, out) = (input.clone(), out.clone());
        move |i: usize| {
            let sum: f32 = input[i * PER_TILE..(i + 1) * PER_TILE].iter().sum();
            out[i].store(sum.to_bits(), Ordering::Relaxed);
        }
    };
    let d = device();
    let q = d.queue(0).unwrap();
    let mut cb = d.command_buffer().unwrap();
    let t = tile.clone();
    cb.dispatch([TILES as u32, 1, 1], move |tile| {
        t(tile.workgroup_id[0] as usize);
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    let s = Semaphore::new(0);
    group.bench_function("fenceline", |b| {
        b.iter(|| {
            let base = s.query().unwrap();
            q.execute(&[], &[(&s, base + 1)], &[&cb]).unwrap();
            for k in 1..FRAMES {
                q.execute(&[(&s, base + k)], &[(&s, base + k + 1)], &[&cb])
                    .unwrap();
            }
            s.wait(base + FRAMES, Timeout::Never).unwrap();
        })
    });
    drop(d);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    group.bench_function("rayon_par_iter", |b| {
        b.iter(|| {
            pool.install(|| {
                for _ in 0..FRAMES {
                    (0..TILES).into_par_iter().for_each(&tile);
                }
            })
        })
    });
    // The work itself: the same tiles on this one thread. Half of it is
    // what two perfectly shared workers would take, so each design's time
    // over (this / 2) is its scheduling overhead plus imbalance.
    group.bench_function("sequential_one_thread", |b| {
        b.iter(|| {
            for _ in 0..FRAMES {
                for i in 0..TILES {
                    tile(std::hint::black_box(i));
                }
            }
        })
    });
    let (expected, got): (f32, u32) = (
        input[..PER_TILE].iter().sum(),
        out[0].load(Ordering::Relaxed),
    );
    assert!(
        got == UNSET || f32::from_bits(got) == expected,
        "tile 0 summed to {}",
        f32::from_bits(got)
    );
    group.finish();
}

fn bound_dispatch(c: &mut Criterion) {
    const TILES: usize = 16384;
    let mut group = c.benchmark_group("bound_dispatch_16k_tiles");
    group.throughput(Throughput::Elements(TILES as u64));
    let d = device();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let run = |cb: &fenceline::CommandBuffer| {
        let v = s.query().unwrap() + 1;
        q.execute(&[], &[(&s, v)], &[cb]).unwrap();
        s.wait(v, Timeout::Never).unwrap();
    };
    // Bound: x read whole, y written in 16-byte chunks.
    let (x, y) = (d.buffer(TILES * 16).unwrap(), d.buffer(TILES * 16).unwrap());
    let input: Vec<u8> = (0..TILES * 2)
        .flat_map(|i| (i as u64).to_ne_bytes())
        .collect();
    x.write(0, &input).unwrap();
    let mut bound = d.command_buffer().unwrap();
    bound
        .dispatch_with(
            [TILES as u32, 1, 1],
            &[Binding::read(&x), Binding::write_chunks(&y, 16)],
            |t: &Tile, io: &TileIo<'_>| {
                let x: &[u64] = io.read(0)?;
                let y: &mut [u64] = io.chunk(1)?;
                let i = t.linear_id() as usize * 2;
                y[0] = x[i] + 1;
                y[1] = x[i + 1] + 1;
                Ok(())
            },
        )
        .unwrap();
    bound.end().unwrap();
    // Unbound: the same data through captured `Arc`s (atomics for the
    // output: a plain closure cannot hand out disjoint `&mut`).
    let xs: Arc<Vec<u64>> = Arc::new((0..TILES as u64 * 2).collect());
    let ys: Arc<Vec<AtomicU64>> = Arc::new((0..TILES * 2).map(|_| AtomicU64::new(0)).collect());
    let mut plain = d.command_buffer().unwrap();
    {
        let (xs, ys) = (xs.clone(), ys.clone());
        plain
            .dispatch([TILES as u32, 1, 1], move |t: &Tile| {
                let i = t.linear_id() as usize * 2;
                ys[i].store(xs[i] + 1, Ordering::Relaxed);
                ys[i + 1].store(xs[i + 1] + 1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
    }
    plain.end().unwrap();
    group.bench_function("dispatch_with", |b| b.iter(|| run(&bound)));
    group.bench_function("dispatch", |b| b.iter(|| run(&plain)));
    let mut out = [0u8; 16];
    y.read(16 * 100, &mut out).unwrap();
    assert_eq!(out[..8], 201u64.to_ne_bytes(), "the bound tiles ran");
    assert_eq!(ys[201].load(Ordering::Relaxed), 202, "the plain tiles ran");
    group.finish();
}

criterion_group! {
    name = device_benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = first_tile, chain, chained_dispatches, bound_dispatch
}
criterion_main!(device_benches);
