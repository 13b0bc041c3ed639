//! `Device::stats`: what a device has done, read without a lock; and
//! `Device::start_trace` / `stop_trace` (feature `trace`).

use super::{Device, DeviceInner};
use crate::queue::{Backend, PendingQueue, QueueStats};
use crate::sync::atomic::Ordering;

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
    /// requests on (CPU device; see
    /// [`ISSUE_PASSES_BEFORE_HAND_OFF`](crate::queue::ISSUE_PASSES_BEFORE_HAND_OFF)).
    pub issuer_hand_offs: u64,
}

impl DeviceStats {
    pub(super) fn add_queue<B: Backend>(&mut self, q: &PendingQueue<B>) {
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
        match &*self.inner {
            DeviceInner::Cpu {
                queues, executor, ..
            } => {
                for q in queues {
                    st.add_queue(q);
                }
                if let Some(exec) = executor {
                    let shared = &exec.shared;
                    st.pool_blocks_in_use += shared.live.load(Ordering::Acquire) as u64;
                    st.pool_blocks_high_water += shared.pool.capacity() as u64;
                    for slot in shared.slots.iter() {
                        let c = &slot.counters;
                        st.worker_parks += c.parks.load(Ordering::Relaxed);
                        st.worker_wakeups += c.wakeups.load(Ordering::Relaxed);
                        st.steals += c.steals.load(Ordering::Relaxed);
                    }
                }
            }
            DeviceInner::Cuda(d) => d.add_stats(&mut st),
        }
        st
    }
}

#[cfg(feature = "trace")]
impl Device {
    /// Starts recording a timeline (feature `trace`): every thread that
    /// works for fenceline (this device's workers and completion threads,
    /// threads that submit or signal) writes its events into a ring of
    /// `events_per_thread` events allocated here, without locks or
    /// allocation while recording; a full ring drops its oldest events.
    /// One trace records at a time in a process, and it records the work
    /// of every device.
    ///
    /// # Errors
    ///
    /// - [`InvalidArgument`](crate::ErrorKind::InvalidArgument) if
    ///   `events_per_thread` is 0.
    /// - [`FailedPrecondition`](crate::ErrorKind::FailedPrecondition) if a
    ///   trace is already recording.
    pub fn start_trace(&self, events_per_thread: usize) -> Result<(), crate::Error> {
        let threads = match &*self.inner {
            DeviceInner::Cpu { executor, .. } => {
                executor.as_ref().map_or(0, |e| e.shared.slots.len())
            }
            DeviceInner::Cuda(d) => 2 * d.queue_count(),
        };
        // Room for the threads that submit, signal and wait besides.
        crate::trace::start(events_per_thread, threads + 16)
    }

    /// Stops recording and returns the timeline
    /// ([`Trace::write_chrome_json`](crate::Trace::write_chrome_json)
    /// writes it for Perfetto or chrome://tracing).
    ///
    /// # Errors
    ///
    /// [`FailedPrecondition`](crate::ErrorKind::FailedPrecondition) if no
    /// trace is recording.
    pub fn stop_trace(&self) -> Result<crate::Trace, crate::Error> {
        crate::trace::stop()
    }
}
