//! Timeline semaphores: a `u64` that only grows (or fails), host waits that
//! park, `wait_async` futures, and the device [`EventPool`]. Underneath,
//! queues, devices and waits register intrusive timepoints (`timepoint`,
//! public only with the `testing` feature).

mod event_pool;
mod future;
mod node_pool;
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod state;
mod timeout;
// Timepoints are the raw registration under waits, queues and devices.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod timepoint;
mod wait;

pub use event_pool::{AnyEvent, EventHandle, EventPool};
pub use future::WaitFuture;
pub(crate) use state::Registration;
pub use state::Semaphore;
pub use timeout::Timeout;
pub(crate) use timepoint::{Timepoint, TimepointFn};
pub use wait::{set_wait_yield, wait_all, wait_any, wait_yield, INLINE_WAITS};
