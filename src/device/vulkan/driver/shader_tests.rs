//! The frame demo's kernels as WGSL (`examples/common/shaders/`) on a real
//! driver under validation: byte for byte the CPU reference of
//! `examples/common/image.rs`.

use super::tests::{assert_no_messages, gpu, spirv, SECOND};
use super::*;

#[path = "../../../../examples/common/image.rs"]
#[allow(dead_code, unreachable_pub)]
mod image;

use image::{
    blur_rows, source_image, tile_stats, IMAGE_BYTES, ROWS_PER_TILE, STATS_BYTES, STATS_PER_TILE,
    TILES, TILE_BYTES, WIDTH,
};

const BLUR: &str = include_str!("../../../../examples/common/shaders/blur.wgsl");
const STATS: &str = include_str!("../../../../examples/common/shaders/stats.wgsl");

/// What `blur_rows` and `tile_stats` compute for `src`, as the demo's CPU
/// peers call them (one call per tile).
fn cpu_reference(src: &[u8]) -> (Vec<u8>, Vec<u32>) {
    let mut blurred = vec![0u8; IMAGE_BYTES];
    for (t, rows) in blurred.chunks_exact_mut(TILE_BYTES).enumerate() {
        blur_rows(src, t * ROWS_PER_TILE, rows);
    }
    let mut stats = vec![0u32; STATS_BYTES / 4];
    for (rows, out) in blurred
        .chunks_exact(TILE_BYTES)
        .zip(stats.chunks_exact_mut(STATS_PER_TILE))
    {
        tile_stats(rows, out);
    }
    (blurred, stats)
}

/// Catches: a WGSL kernel that differs from the CPU reference by one byte
/// (edge rows or columns, the division's rounding, byte packing, the
/// hash's order, a bin, the padding), or one that leaves output words
/// unwritten: three source images, each blurred then counted in one
/// submission (a barrier between the dispatches) into outputs poisoned
/// first, compared whole with `blur_rows` and `tile_stats`; and any
/// validation message.
///
/// Mutation checked: blur.wgsl's top edge taking row 1 for the row above
/// row 0 (`select(y - 1u, 1u, y == 0u)` for `select(y - 1u, 0u, y ==
/// 0u)`): fails on frame 0's blurred pixel (0, 0), 12 for the CPU's 6.
/// Also checked: the blur rounding to nearest (`(sum + 4u) / 9u`) fails
/// (pixel (0, 0) 7, not 6), and stats.wgsl hashing each word's bytes high
/// to low fails on tile 0's hash. Not caught here: the barrier between the
/// two dispatches removed (lavapipe runs them in order, and the
/// validation layer installed here, 1.3.239, reports no hazard for it).
#[test]
fn wgsl_blur_and_stats_match_the_cpu_reference() {
    let Some((_one, gpu)) = gpu() else { return };
    {
        let blur = Pipeline::new(&gpu, &spirv(BLUR), c"main", 2, 0).unwrap();
        let stats = Pipeline::new(&gpu, &spirv(STATS), c"main", 2, 0).unwrap();
        let src = MappedBuffer::new(&gpu, IMAGE_BYTES).unwrap();
        let blurred = MappedBuffer::new(&gpu, IMAGE_BYTES).unwrap();
        let counted = MappedBuffer::new(&gpu, STATS_BYTES).unwrap();
        let done = Timeline::new(&gpu, 0).unwrap();
        let mut rec = Recorder::new(&gpu).unwrap();
        let poison = vec![0xA5u8; IMAGE_BYTES];
        for (round, frame) in [(1u64, 0u64), (2, 3), (3, 7)] {
            let image = source_image(frame);
            let (want_blurred, want_stats) = cpu_reference(&image);
            // SAFETY: nothing is in flight (the previous round was waited
            // for).
            unsafe { src.write(0, &image) };
            // SAFETY: as above.
            unsafe { blurred.write(0, &poison) };
            // SAFETY: as above.
            unsafe { counted.write(0, &poison[..STATS_BYTES]) };
            rec.begin().unwrap();
            rec.dispatch(&blur, [TILES, 1, 1], &[&src, &blurred], &[])
                .unwrap();
            rec.barrier();
            rec.dispatch(&stats, [TILES, 1, 1], &[&blurred, &counted], &[])
                .unwrap();
            rec.submit(gpu.queues[0], (&done, round)).unwrap();
            assert!(done.wait(round, 30 * SECOND).unwrap(), "frame {frame}");
            let mut got_blurred = vec![0u8; IMAGE_BYTES];
            // SAFETY: the submission that wrote it completed (waited for
            // above); nothing else is in flight.
            unsafe { blurred.read(0, &mut got_blurred) };
            let mut bytes = vec![0u8; STATS_BYTES];
            // SAFETY: as above.
            unsafe { counted.read(0, &mut bytes) };
            let got_stats: Vec<u32> = bytes
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
                .collect();
            if let Some(i) = (0..IMAGE_BYTES).find(|&i| got_blurred[i] != want_blurred[i]) {
                panic!(
                    "frame {frame}: blurred pixel (x {}, y {}) is {}, the CPU's {}",
                    i % WIDTH,
                    i / WIDTH,
                    got_blurred[i],
                    want_blurred[i]
                );
            }
            for (t, (got, want)) in got_stats
                .chunks_exact(STATS_PER_TILE)
                .zip(want_stats.chunks_exact(STATS_PER_TILE))
                .enumerate()
            {
                assert_eq!(got, want, "frame {frame}: tile {t}'s statistics");
            }
        }
    }
    drop(gpu);
    assert_no_messages();
}
