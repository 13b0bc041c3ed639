//! Memory that crosses threads without the global allocator: a lock-free
//! [`BlockPool`] of fixed-size blocks, a per-owner [`BlockCache`] in front of
//! it.

mod block_cache;
mod block_pool;

pub use block_cache::BlockCache;
pub(crate) use block_cache::BlockSource;
#[cfg(any(test, feature = "testing"))]
pub use block_pool::Block;
pub use block_pool::{BlockPool, BlockPoolConfig, RawBlock};
