//! The CPU task system: a work-stealing [`Executor`] running task DAGs
//! whose every node lives in a block pool, so running a DAG allocates
//! nothing.
//!
//! Kinds: nop, call (a closure; may spawn children it joins on), barrier
//! (releases many), fence (signals a semaphore on completion), wait (until
//! a semaphore reaches a value, on a timepoint, with a timeout), dispatch
//! (a closure over a 3-D tile grid, split into shards that claim tiles with
//! an atomic counter). Any earlier task may precede any later one
//! (`Graph::precede`). A failed task's dependents do not run; tasks that do
//! not depend on it still do. A panic in user code becomes an error.

mod context;
mod deque;
mod edges;
mod executor;
mod graph;
#[allow(clippy::module_inception)]
mod header;
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod join_count;
mod kind;
pub(crate) mod priority;
mod scope;
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod sleep;
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod tile_counter;
mod worker;

pub(crate) use kind::{run_tiles, Tiles};
pub(crate) use worker::{ExecutorState, Hop, TaskPool};

pub use executor::{Executor, ExecutorConfig};
pub use priority::Priority;

pub(crate) use graph::submit_finally;
pub use graph::{Graph, TaskId};
pub use kind::{CallContext, CALL_INLINE_BYTES, DISPATCH_INLINE_BYTES, FINALLY_INLINE_BYTES};
pub use scope::Scope;
pub(crate) use scope::ScopeLink;

/// One workgroup of a dispatch: its id in the grid and the grid's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tile {
    /// This tile's `[x, y, z]`.
    pub workgroup_id: [u32; 3],
    /// The grid's `[x, y, z]` extent.
    pub workgroup_count: [u32; 3],
}

impl Tile {
    /// The tile's index in its grid, x fastest:
    /// `x + X * (y + Y * z)` for id `[x, y, z]` and count `[X, Y, Z]`
    /// (a bound dispatch's chunk index).
    ///
    /// ```
    /// use fenceline::Tile;
    /// let t = Tile { workgroup_id: [1, 2, 3], workgroup_count: [4, 5, 6] };
    /// assert_eq!(t.linear_id(), 1 + 4 * (2 + 5 * 3));
    /// ```
    #[inline]
    pub fn linear_id(&self) -> u64 {
        let [x, y, z] = self.workgroup_id.map(u64::from);
        let [cx, cy, _] = self.workgroup_count.map(u64::from);
        x + cx * (y + cy * z)
    }
}

/// Tiles in `grid`: the product of its extents.
///
/// Errors: `InvalidArgument` when the product overflows `u64` (such a grid
/// could never run: the tile counter would wrap).
pub(crate) fn tile_count(grid: [u32; 3]) -> Result<u64, crate::error::Error> {
    u64::from(grid[0])
        .checked_mul(u64::from(grid[1]))
        .and_then(|xy| xy.checked_mul(u64::from(grid[2])))
        .ok_or_else(|| {
            crate::error::Error::new(
                crate::error::ErrorKind::InvalidArgument,
                format!("dispatch grid {grid:?}: its tile count overflows u64"),
            )
        })
}
