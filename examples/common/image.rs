//! The image kernels of `examples/pipeline.rs` and `benches/blur.rs`: one
//! function per stage, called with the same arguments by fenceline's bound
//! dispatches (one call per tile) and by the rayon peer (one call per
//! `par_chunks_mut` chunk), so both compute the same bytes.

/// Image width in pixels (one byte each: grey levels).
pub const WIDTH: usize = 512;
/// Image height in pixels.
pub const HEIGHT: usize = 256;
/// Bytes of one image.
pub const IMAGE_BYTES: usize = WIDTH * HEIGHT;
/// Tiles of each dispatch: tile `i` computes rows
/// `[i * ROWS_PER_TILE, (i + 1) * ROWS_PER_TILE)`.
pub const TILES: u32 = 64;
/// Rows of one tile.
pub const ROWS_PER_TILE: usize = HEIGHT / TILES as usize;
/// Bytes of one tile's rows (a write binding's chunk).
pub const TILE_BYTES: usize = ROWS_PER_TILE * WIDTH;
/// Histogram bins per tile (grey level / 16).
pub const BINS: usize = 16;
/// `u32`s each tile writes to the statistics buffer: its `BINS` bins, a
/// hash of its blurred pixels, and padding to 128 bytes.
pub const STATS_PER_TILE: usize = 32;
/// Bytes of the statistics buffer (every tile's).
pub const STATS_BYTES: usize = TILES as usize * STATS_PER_TILE * 4;

/// Rows `[first_row, first_row + out.len() / WIDTH)` of the 3x3 box blur of
/// `src` (a whole image), written to `out`. Edges repeat the nearest pixel.
/// Integer arithmetic: every peer gets the same bytes.
pub fn blur_rows(src: &[u8], first_row: usize, out: &mut [u8]) {
    debug_assert_eq!(src.len(), IMAGE_BYTES);
    let mut column = [0u16; WIDTH];
    for (r, out_row) in out.chunks_exact_mut(WIDTH).enumerate() {
        let y = first_row + r;
        let above = &src[y.saturating_sub(1) * WIDTH..][..WIDTH];
        let row = &src[y * WIDTH..][..WIDTH];
        let below = &src[(y + 1).min(HEIGHT - 1) * WIDTH..][..WIDTH];
        // Vertical sums first (vectorizes), then three of them across.
        for (((c, a), m), b) in column.iter_mut().zip(above).zip(row).zip(below) {
            *c = u16::from(*a) + u16::from(*m) + u16::from(*b);
        }
        for (x, o) in out_row.iter_mut().enumerate() {
            let left = column[x.saturating_sub(1)];
            let right = column[(x + 1).min(WIDTH - 1)];
            *o = ((left + column[x] + right) / 9) as u8;
        }
    }
}

/// One tile's statistics of `rows` (its blurred rows): a 16-bin histogram
/// of grey levels and a hash of the pixels in order, into `out`
/// (`STATS_PER_TILE` values).
pub fn tile_stats(rows: &[u8], out: &mut [u32]) {
    out.fill(0);
    let mut hash = 0x811C_9DC5u32;
    for &p in rows {
        out[usize::from(p >> 4)] += 1;
        hash = (hash ^ u32::from(p)).wrapping_mul(0x0100_0193);
    }
    out[BINS] = hash;
}

/// The source image of frame `f`: one of eight noisy gradients (so a
/// frame's output depends on which image it got).
pub fn source_image(f: u64) -> Vec<u8> {
    let mut x = (f % 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..IMAGE_BYTES)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let gradient = (i % WIDTH + i / WIDTH) as u64 * (f % 8 + 1) / 4;
            (gradient + (x & 0x3F)) as u8
        })
        .collect()
}

/// Folds one frame's statistics into a digest of the whole run, in frame
/// order: two runs that computed the same bytes for the same frames end
/// with the same digest.
pub fn fold_digest(digest: u64, stats: &[u32]) -> u64 {
    stats.iter().fold(digest, |d, &s| {
        (d ^ u64::from(s)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}
