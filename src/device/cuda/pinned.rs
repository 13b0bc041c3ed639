//! Pinned host memory for `update` data, staged at record time: blocks by
//! power-of-two size, reused across recordings.

use std::sync::{Arc, Mutex};

use super::driver::{Context, PinnedMem};
use crate::error::Error;

/// Pinned staging blocks, by power-of-two size, reused across recordings.
#[derive(Default)]
pub(crate) struct PinnedPool {
    free: Mutex<Vec<PinnedMem>>,
    /// Blocks made so far: the free list's capacity is kept at least this,
    /// so giving a block back never allocates.
    made: std::sync::atomic::AtomicUsize,
}

impl PinnedPool {
    pub(super) fn take(self: &Arc<Self>, ctx: &Arc<Context>, len: usize) -> Result<Staging, Error> {
        let size = len.next_power_of_two().max(256);
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            free.iter()
                .position(|m| m.len == size)
                .map(|i| free.swap_remove(i))
        };
        let mem = match reused {
            Some(m) => m,
            None => {
                let m = PinnedMem::new(ctx, size)?;
                // Room for it in the free list now (this is the recording
                // path, which allocates anyway): giving it back, where a
                // submission completes, then never allocates.
                let made = self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
                let len = free.len();
                free.reserve(made.saturating_sub(len));
                m
            }
        };
        Ok(Staging {
            mem: Some(mem),
            pool: self.clone(),
        })
    }
}

/// A pinned block lent to one recording; back to the pool on drop.
pub(crate) struct Staging {
    pub(super) mem: Option<PinnedMem>,
    pool: Arc<PinnedPool>,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(m) = self.mem.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(m);
        }
    }
}
