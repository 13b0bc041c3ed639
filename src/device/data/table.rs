//! A submission's binding table ([`Queue::execute_with`](crate::Queue::execute_with)):
//! the buffers its slots name for this submission only, checked against
//! how the command buffers use each slot, kept alive while the action
//! lives, and resolved (address and length) for the tiles.
//!
//! A table is a block of a process-wide block pool (lock-free; it grows
//! only when more tables are in flight at once than ever before), so a
//! submission with a table allocates nothing once warm.

use std::ptr::NonNull;

use super::binding::{SlotView, SlotViews, MAX_SLOTS};
use super::buffer::Buffer;
use super::buffer::HostMem;
use super::hold::Access;
use crate::device::recording::Recording;
use crate::error::Error;
use crate::pool::{BlockPool, BlockPoolConfig};

/// A table's block.
struct TableBlock {
    buffers: [Option<Buffer>; MAX_SLOTS],
    /// The strongest access the submission's command buffers make to each
    /// slot (`None`: unused): what its action holds.
    uses: [Option<Access>; MAX_SLOTS],
    views: SlotViews,
    index: u32,
}

/// A submission's binding table. See the [module docs](self).
pub(crate) struct SlotTable(NonNull<TableBlock>);

// SAFETY: the block holds buffer handles (`Send + Sync`) and views of
// their memory, reached only under the hold protocol; the pool is `Sync`.
unsafe impl Send for SlotTable {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for SlotTable {}

fn make_pool() -> BlockPool {
    BlockPool::with_config(BlockPoolConfig {
        block_size: std::mem::size_of::<TableBlock>(),
        align: std::mem::align_of::<TableBlock>().max(64),
        first_chunk_blocks: if cfg!(fenceline_loom) { 2 } else { 16 },
        max_blocks: None,
    })
    .expect("a valid pool shape")
}

#[cfg(not(fenceline_loom))]
fn pool() -> &'static BlockPool {
    static POOL: std::sync::OnceLock<BlockPool> = std::sync::OnceLock::new();
    POOL.get_or_init(make_pool)
}

#[cfg(fenceline_loom)]
fn pool() -> &'static BlockPool {
    loom::lazy_static! {
        static ref POOL: BlockPool = make_pool();
    }
    &POOL
}

impl SlotTable {
    /// Checks `table` against how `recordings` (ended, of one device) use
    /// its slots and makes the submission's table.
    ///
    /// # Errors
    /// `InvalidArgument`: more than [`MAX_SLOTS`] buffers; a slot a command
    /// buffer binds past the table's end; a buffer shorter than its
    /// slot's chunks; a buffer of another device; one buffer in two slots
    /// where either is written, or in a slot and bound directly by a
    /// command buffer of the submission where either writes it.
    /// `ResourceExhausted` if the table pool cannot grow.
    pub(crate) fn new<'r>(
        table: &[&Buffer],
        recordings: impl Iterator<Item = &'r Recording> + Clone,
    ) -> Result<SlotTable, Error> {
        let uses = crate::device::validate::table(table, recordings)?;
        let mut views = SlotViews {
            views: [SlotView {
                base: std::ptr::null_mut(),
                len: 0,
            }; MAX_SLOTS],
            len: table.len(),
        };
        for (v, b) in views.views.iter_mut().zip(table) {
            if let Some(mem) = b.host() {
                *v = SlotView {
                    base: mem.base(),
                    len: b.len(),
                };
            }
        }
        let block = pool().acquire_value(|index| TableBlock {
            buffers: std::array::from_fn(|i| table.get(i).map(|b| (*b).clone())),
            uses,
            views,
            index,
        })?;
        Ok(SlotTable(block))
    }

    /// The resolved table, for the submission's tiles.
    pub(crate) fn views(&self) -> *const SlotViews {
        // SAFETY: the block lives while `self` does.
        unsafe { &raw const (*self.0.as_ptr()).views }
    }

    used_by_cuda! {
    /// The buffer in slot `slot`.
    pub(crate) fn buffer(&self, slot: usize) -> Option<&Buffer> {
        // SAFETY: the block lives while `self` does.
        let block = unsafe { self.0.as_ref() };
        block.buffers.get(slot)?.as_ref()
    }
    }

    /// Calls `f` with the buffer of each slot the submission uses, until
    /// it fails.
    pub(crate) fn each_used(
        &self,
        mut f: impl FnMut(&Buffer) -> Result<(), Error>,
    ) -> Result<(), Error> {
        // SAFETY: the block lives while `self` does.
        let block = unsafe { self.0.as_ref() };
        for (buffer, access) in block.buffers.iter().zip(block.uses) {
            if let (Some(buffer), Some(_)) = (buffer, access) {
                f(buffer)?;
            }
        }
        Ok(())
    }

    /// Calls `f` with each used slot's memory and access, until it returns
    /// `false`; returns whether it never did.
    pub(crate) fn each_hold(&self, mut f: impl FnMut(&HostMem, Access) -> bool) -> bool {
        // SAFETY: the block lives while `self` does.
        let block = unsafe { self.0.as_ref() };
        for (buffer, access) in block.buffers.iter().zip(block.uses) {
            let (Some(buffer), Some(access)) = (buffer, access) else {
                continue;
            };
            let Some(mem) = buffer.host() else { continue };
            if !f(mem, access) {
                return false;
            }
        }
        true
    }
}

impl Drop for SlotTable {
    fn drop(&mut self) {
        // SAFETY: the block lives until here; its index read before.
        let index = unsafe { self.0.as_ref() }.index;
        // SAFETY: from this pool's `acquire_value` with `index`, released
        // once (here).
        unsafe { pool().release_value(self.0, index) };
    }
}
