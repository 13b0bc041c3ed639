//! `Device::stats`: what a device has done, read without a lock.

use super::{on_backend, Device, DeviceBackend};
use crate::queue::{Backend, PendingQueue, QueueStats};

/// A device's counters at one moment ([`Device::stats`]). Cheap to take
/// (atomic loads, no lock, no allocation). Action counts are exact once
/// the device is idle, and a thread that saw an action's signal sees that
/// action counted as finished; while work runs, a snapshot may miss
/// submissions still on their way into a queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceStats {
    /// Actions (executes, barriers, host calls) the queues took in.
    pub submitted: u64,
    /// Actions finished successfully (their signals made).
    pub completed: u64,
    /// Actions finished with an error (their signals failed), other than
    /// `Cancelled`.
    pub failed: u64,
    /// Actions cancelled (the device shut down before they could run).
    pub cancelled: u64,
    /// Actions taken in and not finished yet.
    pub in_flight: u64,
    /// Of those, actions waiting on a semaphore (not yet issued).
    pub pending: u64,
    /// Pool blocks held by live work: the executor's tasks and the queues'
    /// in-flight actions (one block each).
    pub pool_blocks_in_use: u64,
    /// Blocks the device's pools hold, in use or free: the high-water mark
    /// of blocks in use (a pool grows only when every block is taken, and
    /// never shrinks), rounded up to the pools' growth steps.
    pub pool_blocks_high_water: u64,
    /// Times a worker parked (CPU device).
    pub worker_parks: u64,
    /// Times a parked worker was woken to new work (CPU device).
    pub worker_wakeups: u64,
    /// Times a worker stole from another worker's deque (CPU device).
    pub steals: u64,
    /// Times a thread that took a queue's issuer turn (a submitter, a
    /// signaller) handed it to a worker instead of serving other threads'
    /// requests on (CPU device: after one pass of its own; see
    /// [`Backend::wants_turn`](crate::queue::Backend::wants_turn)).
    pub issuer_hand_offs: u64,
    /// Events the device created (CUDA device: each created once, then
    /// reused; Vulkan device: the timeline points it publishes, pooled the
    /// same way; 0 on the CPU device).
    pub events_created: u64,
    /// Waits met on the GPU (CUDA device: the device-wait shortcut; Vulkan
    /// device: timeline waits in a submission; 0 on the CPU device).
    pub device_waits: u64,
}

impl DeviceStats {
    pub(crate) fn add_queue<B: Backend>(&mut self, q: &PendingQueue<B>) {
        let QueueStats {
            submitted,
            completed,
            failed,
            cancelled,
            in_flight,
            pending,
            issuer_hand_offs,
            ..
        } = q.stats();
        self.submitted += submitted;
        self.completed += completed;
        self.failed += failed;
        self.cancelled += cancelled;
        self.in_flight += in_flight;
        self.pending += pending;
        self.issuer_hand_offs += issuer_hand_offs;
        self.pool_blocks_in_use += in_flight;
        self.pool_blocks_high_water += q.pool_capacity() as u64;
    }
}

impl Device {
    /// The device's counters: actions submitted, completed, failed,
    /// cancelled, in flight and pending, pool blocks in use and their
    /// high-water mark, worker parks, wake-ups and steals. Lock-free and
    /// allocation-free (a few atomic loads per queue and worker).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{CpuConfig, Device, Semaphore};
    ///
    /// let device = Device::cpu_with(CpuConfig { workers: 2, ..Default::default() })?;
    /// let q = device.queue(0)?;
    /// let done = Semaphore::new(0);
    /// q.host_call(&[], &[(&done, 1)], || Ok(()))?;
    /// done.wait(1, Duration::from_secs(5))?;
    /// let st = device.stats();
    /// assert_eq!((st.submitted, st.completed, st.in_flight), (1, 1, 0));
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn stats(&self) -> DeviceStats {
        let mut st = DeviceStats::default();
        on_backend!(&*self.inner, |d| d.add_stats(&mut st));
        st
    }
}
