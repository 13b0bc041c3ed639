//! `TileCounter`: how a dispatch's shards share out its tiles (its own
//! file so the loom models check exactly the code the executor runs).

use crate::sync::atomic::{AtomicU64, Ordering};

/// A dispatch's tile counter: shards claim `[start, end)` ranges until
/// `total` are claimed; every tile once. Guided self-scheduling: a claim
/// takes the tiles left divided by `shares`, at least 1 and at most `max`,
/// so the first claims are large (few trips to the counter's line) and the
/// last ones small (the shards finish together: a fixed claim of 32 tiles
/// left one shard running up to 32 tiles alone at every dispatch's end).
#[derive(Debug)]
pub struct TileCounter {
    next: AtomicU64,
    total: u64,
    max: u64,
    shares: u64,
}

impl TileCounter {
    /// `total` tiles, claimed `left / shares` at a time (`shares` >= 1),
    /// between 1 and `max` (>= 1).
    pub fn new(total: u64, max: u64, shares: u64) -> TileCounter {
        TileCounter {
            next: AtomicU64::new(0),
            total,
            max: max.max(1),
            shares: shares.max(1),
        }
    }

    /// Tiles in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Tiles not claimed yet (exact once the claimers are done: the
    /// dispatch reads it after its shards finished).
    pub fn left(&self) -> u64 {
        self.total.saturating_sub(self.next.load(Ordering::Relaxed))
    }

    /// Claims the next range, or `None` when every tile is claimed. A CAS
    /// loop (the claim's size depends on where the counter stands; the
    /// counter never passes `total`). Relaxed: the counter only partitions
    /// the range; the tiles' effects are ordered by the shards' completion
    /// (a `JoinCount`).
    pub fn claim(&self) -> Option<(u64, u64)> {
        let mut start = self.next.load(Ordering::Relaxed);
        loop {
            let left = self.total.checked_sub(start).filter(|&l| l > 0)?;
            let end = start + (left / self.shares).clamp(1, self.max);
            match self
                .next
                .compare_exchange_weak(start, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some((start, end)),
                Err(now) => start = now,
            }
        }
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::TileCounter;

    /// One shard's claims of a 1024-tile grid in 4 shares, at most 100:
    /// contiguous, covering every tile once, never above the cap, shrinking
    /// to single tiles at the end (the guided schedule). Fails with a fixed
    /// claim size (mutation checked: `clamp(self.max, self.max)`).
    #[test]
    fn guided_claims_cover_the_grid_and_shrink_to_single_tiles() {
        let tiles = TileCounter::new(1024, 100, 4);
        let mut sizes = Vec::new();
        let mut next = 0;
        while let Some((start, end)) = tiles.claim() {
            assert_eq!(start, next, "claims are contiguous");
            sizes.push(end - start);
            next = end;
        }
        assert_eq!(next, 1024);
        assert!(sizes.iter().all(|&s| (1..=100).contains(&s)), "{sizes:?}");
        assert_eq!(sizes[0], 100, "the cap");
        assert!(sizes.windows(2).all(|w| w[1] <= w[0]), "{sizes:?}");
        assert_eq!(sizes[sizes.len() - 4..], [1, 1, 1, 1], "{sizes:?}");
        assert_eq!(tiles.claim(), None, "done stays done");
    }
}
