//! The 3x3 box blur of `examples/pipeline.rs` alone, on one 512x256 grey
//! image (64 tiles of 4 rows):
//!
//! - `fenceline_bound_dispatch`: one execute of a bound dispatch (the
//!   source through a read binding, the output through a write-chunks
//!   binding) on the CPU device's 2 workers, and the host's wait for it;
//! - `rayon_par_chunks_mut`: the same kernel over `par_chunks_mut` of the
//!   output on a 2-thread rayon pool (`install`);
//! - `one_thread`: the kernel over the whole image on the bench's thread
//!   (half of it is the two-thread ideal).
//!
//! Every variant calls `blur_rows` with the same rows and checks its output
//! against `one_thread`'s before it is timed. Run with `cargo bench --bench
//! blur`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fenceline::{Binding, CpuConfig, Device, Semaphore, Tile, TileIo, Timeout};

#[path = "../examples/common/image.rs"]
#[allow(dead_code)] // the demo's other stages
mod image;
use image::{blur_rows, source_image, IMAGE_BYTES, ROWS_PER_TILE, TILES, TILE_BYTES};

const THREADS: usize = 2;

fn blur(c: &mut Criterion) {
    let mut group = c.benchmark_group("blur_512x256");
    group.throughput(Throughput::Bytes(IMAGE_BYTES as u64));
    let src = source_image(3);
    let mut expected = vec![0u8; IMAGE_BYTES];
    blur_rows(&src, 0, &mut expected);

    let device = Device::cpu_with(CpuConfig {
        workers: THREADS,
        queues: 1,
        spin: true,
    })
    .unwrap();
    let q = device.queue(0).unwrap();
    let (x, y) = (
        device.buffer(IMAGE_BYTES).unwrap(),
        device.buffer(IMAGE_BYTES).unwrap(),
    );
    x.write(0, &src).unwrap();
    let mut cb = device.command_buffer().unwrap();
    cb.dispatch_with(
        [TILES, 1, 1],
        &[Binding::read(&x), Binding::write_chunks(&y, TILE_BYTES)],
        |t: &Tile, io: &TileIo<'_>| {
            blur_rows(
                io.read(0)?,
                t.linear_id() as usize * ROWS_PER_TILE,
                io.chunk(1)?,
            );
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    let s = Semaphore::new(0);
    let mut n = 0u64;
    let mut run = || {
        n += 1;
        q.execute(&[], &[(&s, n)], &[&cb]).unwrap();
        s.wait(n, Timeout::Never).unwrap();
    };
    run();
    let mut out = vec![0u8; IMAGE_BYTES];
    y.read(0, &mut out).unwrap();
    assert!(out == expected, "the bound dispatch's blur differs");
    group.bench_function("fenceline_bound_dispatch", |b| b.iter(&mut run));

    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(THREADS)
        .build()
        .unwrap();
    let mut out = vec![0u8; IMAGE_BYTES];
    let run = |out: &mut [u8]| {
        pool.install(|| {
            out.par_chunks_mut(TILE_BYTES)
                .enumerate()
                .for_each(|(i, rows)| blur_rows(&src, i * ROWS_PER_TILE, rows))
        })
    };
    run(&mut out);
    assert!(out == expected, "rayon's blur differs");
    group.bench_function("rayon_par_chunks_mut", |b| b.iter(|| run(&mut out)));

    let mut out = vec![0u8; IMAGE_BYTES];
    group.bench_function("one_thread", |b| {
        b.iter(|| blur_rows(&src, 0, std::hint::black_box(&mut out)))
    });
    group.finish();
}

criterion_group! {
    name = blur_benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = blur
}
criterion_main!(blur_benches);
