//! `TileCounter`: how a dispatch's shards share out its tiles (its own
//! file so the loom models check exactly the code the executor runs).

use crate::sync::atomic::{AtomicU64, Ordering};

/// A dispatch's tile counter: shards claim `[start, end)` ranges of
/// `chunk` tiles until `total` are claimed; every tile once. A guided
/// counter ([`guided`](Self::guided)) shrinks its ranges near the end so
/// that shards finish together.
#[derive(Debug)]
pub struct TileCounter {
    next: AtomicU64,
    total: u64,
    chunk: u64,
    /// Guided: ranges of at most `remaining / (2 * parts)`; 0: fixed.
    parts: u64,
}

impl TileCounter {
    /// `total` tiles claimed `chunk` (>= 1) at a time.
    pub fn new(total: u64, chunk: u64) -> TileCounter {
        TileCounter {
            next: AtomicU64::new(0),
            total,
            chunk: chunk.max(1),
            parts: 0,
        }
    }

    /// `total` tiles claimed at most `max_chunk` at a time, and at most
    /// `remaining / (2 * parts)` (at least 1): guided self-scheduling for
    /// `parts` claimers, so the last ranges are single tiles and no shard
    /// is left running a whole chunk while the others are done (one CAS
    /// per claim, like the fixed counter's one `fetch_add`, when claims do
    /// not collide).
    pub fn guided(total: u64, parts: u64, max_chunk: u64) -> TileCounter {
        TileCounter {
            next: AtomicU64::new(0),
            total,
            chunk: max_chunk.max(1),
            parts: parts.max(1),
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
        if self.parts == 0 {
            let start = self.next.fetch_add(self.chunk, Ordering::Relaxed);
            return (start < self.total).then(|| (start, (start + self.chunk).min(self.total)));
        }
        let mut start = self.next.load(Ordering::Relaxed);
        loop {
            if start >= self.total {
                return None;
            }
            let n = ((self.total - start) / (2 * self.parts)).clamp(1, self.chunk);
            match self.next.compare_exchange_weak(
                start,
                start + n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some((start, start + n)),
                Err(now) => start = now,
            }
        }
    }
}
