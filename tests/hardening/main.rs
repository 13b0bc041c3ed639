//! Teardown, reentrancy, panics and bad input: each test here reproduces a
//! defect a review found through the public API, and fails (or hangs into
//! its time limit) with that defect put back. The mutation each catches is
//! named in its comment. One file per subsystem; the rigs are here.

mod bad_input;
mod panics;
mod teardown;
mod workers;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use fenceline::queue::{Backend, Completion, PendingQueue};
use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::testing::timepoint::{Registration, Timepoint};
use fenceline::{CpuConfig, Device, Error, ErrorKind, Semaphore, Tile, Timeout};

// Under Miri (about a thousand times slower) a hang limit of 10 s fails
// healthy runs.
const LIMIT: Duration = Duration::from_secs(if cfg!(miri) { 900 } else { 10 });

/// Runs `f` on its own thread; fails the test if it has not returned
/// within `LIMIT` (a hang becomes a failure, not a stuck CI run).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after {LIMIT:?} (hang)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

/// Signals its semaphore when dropped: placed after a handle in a tuple,
/// it reports that the handle's drop returned.
struct SignalOnDrop(Semaphore);
impl Drop for SignalOnDrop {
    fn drop(&mut self) {
        let _ = self.0.signal(1);
    }
}

fn cpu(workers: usize, queues: usize) -> Device {
    Device::cpu_with(CpuConfig {
        workers,
        queues,
        ..Default::default()
    })
    .unwrap()
}
