//! `TileCounter`: how a dispatch's shards share out its tiles (its own
//! file so the loom models check exactly the code the executor runs).

use crate::sync::atomic::{AtomicU64, Ordering};

/// A dispatch's tile counter: shards claim `[start, end)` ranges of
/// `chunk` tiles until `total` are claimed; every tile once.
#[derive(Debug)]
pub struct TileCounter {
    next: AtomicU64,
    total: u64,
    chunk: u64,
}

impl TileCounter {
    /// `total` tiles claimed `chunk` (>= 1) at a time.
    pub fn new(total: u64, chunk: u64) -> TileCounter {
        TileCounter {
            next: AtomicU64::new(0),
            total,
            chunk: chunk.max(1),
        }
    }

    /// Tiles in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Claims the next range, or `None` when every tile is claimed.
    /// Relaxed: the counter only partitions the range; the tiles' effects
    /// are ordered by the shards' completion (a `JoinCount`).
    pub fn claim(&self) -> Option<(u64, u64)> {
        let start = self.next.fetch_add(self.chunk, Ordering::Relaxed);
        (start < self.total).then(|| (start, (start + self.chunk).min(self.total)))
    }
}
