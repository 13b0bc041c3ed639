//! Three synthetic pipeline stages (64 tiles of a little arithmetic each):
//! scheduling-bound work, shared by `benches/pipeline.rs` and
//! `examples/async_await.rs`. (The demo, `examples/pipeline.rs`, computes
//! on device memory instead: `image.rs`.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fenceline::{CommandBuffer, Device, Error, Tile};

/// Tiles of each stage's dispatch.
pub const TILES: u32 = 64;
/// Rounds of arithmetic per tile.
pub const WORK: u64 = 300;
/// Frames in flight.
pub const IN_FLIGHT: u64 = 3;

/// One tile's work: a little arithmetic folded into a shared checksum.
pub fn tile_work(stage: u64, tile: u64, sink: &AtomicU64) {
    let mut x = stage.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ tile;
    for _ in 0..WORK {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    sink.fetch_add(x & 0xFF, Ordering::Relaxed);
}

/// A command buffer running `stage` over `TILES` tiles.
pub fn stage_cb(
    device: &Device,
    stage: u64,
    sink: &Arc<AtomicU64>,
) -> Result<CommandBuffer, Error> {
    let mut cb = device.command_buffer()?;
    let sink = sink.clone();
    cb.dispatch([TILES, 1, 1], move |t: &Tile| {
        tile_work(stage, u64::from(t.workgroup_id[0]), &sink);
        Ok(())
    })?;
    cb.end()?;
    Ok(cb)
}
