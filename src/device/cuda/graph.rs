//! A recording's instantiated CUDA graph ([`CudaGraph`]), what a
//! recording holds; `issue.rs` builds and launches it.

use std::sync::atomic::AtomicBool;

use super::driver::GraphExec;

use super::pinned::Staging;

/// A recording's graph, ready to launch.
pub(crate) struct CudaGraph {
    pub(crate) exec: GraphExec,
    /// Staged `update` bytes the graph's copies read.
    pub(super) _staging: Option<Staging>,
    /// Set while a submission updates its slot launches' nodes and
    /// launches it (a graph with slot arguments only): see
    /// [`launch_with_table`](Self::launch_with_table).
    pub(super) updating: AtomicBool,
}
