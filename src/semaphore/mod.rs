//! Timeline semaphores: a `u64` that only grows (or fails), host waits that
//! park, `wait_async` futures, and the device [`EventPool`]. Underneath,
//! queues, devices and waits register intrusive timepoints (`timepoint`,
//! public only with the `testing` feature).

pub mod event_pool;
mod future;
mod node_pool;
#[allow(clippy::module_inception)]
mod semaphore;
mod timeout;
// Timepoints are the raw registration under waits, queues and devices:
// public for fenceline's own tests and models (feature `testing`) only.
#[cfg(feature = "testing")]
pub mod timepoint;
#[cfg(not(feature = "testing"))]
pub(crate) mod timepoint;
mod wait;

pub use event_pool::{AnyEvent, EventHandle, EventPool};
pub use future::WaitFuture;
#[cfg(not(feature = "testing"))]
pub(crate) use semaphore::Registration;
pub use semaphore::Semaphore;
#[cfg(feature = "testing")]
pub use semaphore::{Registration, DEVICE_SIGNALS};
pub use timeout::Timeout;
#[cfg(not(feature = "testing"))]
pub(crate) use timepoint::{Timepoint, TimepointFn};
#[cfg(feature = "testing")]
pub use timepoint::{Timepoint, TimepointFn, TimepointPool};
pub use wait::{set_wait_yield, wait_all, wait_any, wait_yield, INLINE_WAITS};
