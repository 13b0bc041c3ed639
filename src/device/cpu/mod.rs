//! The CPU device: each queue's actions run as task DAGs on the device's
//! work-stealing executor (`backend.rs`: the queues' [`Backend`]).
//!
//! [`Backend`]: crate::queue::Backend

mod backend;

use std::sync::Arc;

#[cfg(feature = "testing")]
pub use backend::fail_next_execute_join;
pub use backend::EXECUTE_INLINE_COMMAND_BUFFERS;

use super::data::host_mem::TransientPool;
use super::recording::Target;
use super::teardown::Teardown;
use super::work::{self, Work};
use super::{Buffer, DeviceBackend, DeviceStats};
use crate::error::{Error, ErrorKind};
use crate::queue::issuer::IssuerThread;
use crate::queue::{IssueTurn, PendingQueue};
use crate::semaphore::Semaphore;
use crate::sync::atomic::Ordering;
use crate::task::priority as priorities;
use crate::task::{Executor, ExecutorConfig, Priority};
use backend::CpuBackend;

/// How the CPU device is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuConfig {
    /// Worker threads; 0 means the available parallelism.
    pub workers: usize,
    /// Queues (at least 1).
    pub queues: usize,
    /// Idle workers spin briefly before parking: about 4 us polling for
    /// work, then about 50 us of yielding (lower latency for work that
    /// comes back soon, more CPU while idle). See [`ExecutorConfig::spin`](crate::task::ExecutorConfig::spin).
    pub spin: bool,
}

impl Default for CpuConfig {
    fn default() -> Self {
        CpuConfig {
            workers: 0,
            queues: 1,
            spin: true,
        }
    }
}

/// The CPU side of a `Device`.
pub(crate) struct CpuDevice {
    queues: Vec<PendingQueue<CpuBackend>>,
    /// Shut down once every queue state is freed (see `tear_down`).
    executor: Option<Executor>,
    /// Runs the issuer turns handed off while every worker is busy
    /// (joined, or left to exit on its own, in `tear_down`).
    issuer: Option<IssuerThread>,
    teardown: crate::sync::Arc<Teardown>,
    /// Memory for `Queue::alloca`.
    transient: Arc<TransientPool>,
    /// The device's identity for its buffers and recordings (never
    /// another device's, also after this one is dropped).
    id: u64,
}

impl CpuDevice {
    /// A CPU device shaped by `config`, queue `i` at `priorities[i]`.
    pub(crate) fn new(config: CpuConfig, priorities: &[Priority]) -> Result<CpuDevice, Error> {
        if config.queues == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "CpuConfig::queues 0: need at least one queue",
            ));
        }
        priorities::check(priorities, config.queues)?;
        let executor = Executor::with_turns(
            ExecutorConfig {
                workers: config.workers,
                spin: config.spin,
            },
            config.queues,
            IssueTurn::<CpuBackend>::run_raw,
            priorities::several(priorities, config.queues),
        )?;
        let teardown = Teardown::new(config.queues);
        // The thread that takes a queue's issuer turn when every worker is
        // busy (not under the model checker: see `CpuBackend::issuer`).
        let (issuer_thread, issuer) = if cfg!(fenceline_loom) {
            (None, None)
        } else {
            let (t, i) = IssuerThread::start(
                "fenceline-cpu-issuer",
                config.queues,
                IssueTurn::<CpuBackend>::run_raw,
            )?;
            (Some(t), Some(i))
        };
        let queues = (0..config.queues)
            .map(|index| {
                PendingQueue::new(CpuBackend::new(
                    executor.state(),
                    index,
                    priorities::of_queue(priorities, index),
                    issuer.clone(),
                    Teardown::token(&teardown),
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The queues hold the only handles now: the thread exits once they
        // are all freed.
        drop(issuer);
        Ok(CpuDevice {
            queues,
            executor: Some(executor),
            issuer: issuer_thread,
            teardown,
            transient: Arc::new(TransientPool::new()),
            // An identity no other device of the process ever has (an
            // address could be a dropped device's again).
            id: crate::sync::unique_number(),
        })
    }

    /// The identity its recordings and buffers carry.
    pub(crate) fn target(&self) -> Target {
        Target::Cpu(self.id)
    }
}

impl DeviceBackend for CpuDevice {
    fn name(&self) -> &str {
        "cpu"
    }

    fn queue_count(&self) -> usize {
        self.queues.len()
    }

    fn queue_priority(&self, index: usize) -> Priority {
        self.queues[index].backend().priority()
    }

    fn buffer(&self, len: usize) -> Result<Buffer, Error> {
        Buffer::new(len, self.id)
    }

    fn alloca(&self, len: usize, _queue: usize) -> Result<Buffer, Error> {
        Ok(Buffer::transient(TransientPool::alloca(
            &self.transient,
            len,
            self.id,
        )?))
    }

    fn owns_transient(&self, buffer: &Buffer, _queue: usize) -> Result<bool, Error> {
        Ok(buffer
            .host()
            .is_some_and(|m| m.is_transient() && m.device() == self.id))
    }

    fn made(&self, target: &Target) -> bool {
        matches!(target, Target::Cpu(id) if *id == self.id)
    }

    fn check_execute(&self, work: &Work) -> Result<(), Error> {
        // Issue checks again; refusing at the call reports it where the
        // mistake was made.
        work::check_not_gone(work)
    }

    fn submit(
        &self,
        queue: usize,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        work: Work,
    ) -> Result<(), Error> {
        self.queues[queue].submit(waits, signals, work)
    }

    fn add_stats(&self, st: &mut DeviceStats) {
        for q in &self.queues {
            st.add_queue(q);
        }
        if let Some(exec) = &self.executor {
            let shared = &exec.shared;
            // Acquire: pairs with the AcqRel `fetch_sub` that retires
            // tasks (src/task/worker/mod.rs), so a snapshot taken after an
            // action's signal counts its tasks as gone.
            st.pool_blocks_in_use += shared.live.load(Ordering::Acquire) as u64;
            st.pool_blocks_high_water += shared.pool.capacity() as u64;
            for slot in shared.seats.iter() {
                let c = &slot.counters;
                st.worker_parks += c.parks.load(Ordering::Relaxed);
                st.worker_wakeups += c.wakeups.load(Ordering::Relaxed);
                st.steals += c.steals.load(Ordering::Relaxed);
            }
        }
    }

    fn trace_threads(&self) -> usize {
        self.executor.as_ref().map_or(0, |e| e.shared.seats.len())
    }

    fn tear_down(&mut self) {
        // Inside its own work: on one of its workers, or inside an issue
        // pass (the drop of a cancelled or finished action's captures, on
        // whatever thread ran the pass, the issuer thread included).
        let inside = crate::queue::in_issue_pass()
            || self.executor.as_ref().is_some_and(|e| e.on_worker_thread());
        // Dropping a queue handle cancels its pending actions; its state
        // is freed once its issued actions finished (see `teardown`).
        self.queues.clear();
        let issuer = self.issuer.take();
        let Some(executor) = self.executor.take() else {
            return;
        };
        if inside {
            // The issuer thread exits once the last queue state is freed.
            if let Some(t) = issuer {
                t.detach();
            }
            self.teardown.defer(executor);
        } else {
            self.teardown.wait_drained();
            drop(issuer); // every queue freed: it exits; joined
            drop(executor); // joins the workers
        }
    }
}
