//! Timeline semaphores: a `u64` that only grows (or fails), host waits that
//! park, and intrusive [`Timepoint`]s for queues and devices.

pub mod event_pool;
mod future;
mod node_pool;
#[allow(clippy::module_inception)]
mod semaphore;
mod timeout;
pub mod timepoint;
mod wait;

pub use event_pool::{AnyEvent, EventHandle, EventPool};
pub use future::WaitFuture;
pub use semaphore::{Registration, Semaphore, DEVICE_SIGNALS};
pub use timeout::Timeout;
pub use timepoint::{Timepoint, TimepointFn, TimepointPool};
pub use wait::{set_wait_yield, wait_all, wait_any, wait_yield, INLINE_WAITS};
