//! `Executor`: owns the worker threads and the task pools.

use std::fmt;

use super::deque::Worker as Deque;

use super::graph::Graph;
use super::scope::Scope;
use super::worker::{ExecutorState, TurnRunner, Worker};
#[cfg(doc)]
use super::Priority;
use crate::error::{Error, ErrorKind};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{liveness, started, Arc};

/// How an [`Executor`] is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// Worker threads; 0 means the available parallelism.
    pub workers: usize,
    /// Spin briefly before parking an idle worker: about 4 us polling for
    /// work, then about 50 us of yielding (lower wake latency for work
    /// that comes back soon, more CPU while idle; the yields let other
    /// threads run).
    pub spin: bool,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            workers: 0,
            spin: true,
        }
    }
}

/// A work-stealing task executor. Build task DAGs with
/// [`graph`](Self::graph). Dropping it lets queued work finish, cancels
/// parked waits (their scopes get `Cancelled`), and joins every thread.
/// Dropped from inside one of its own tasks (a closure that captured it),
/// it cannot wait for the task running the drop: it then starts the same
/// shutdown without joining, and the workers exit (freeing everything) on
/// their own once the last task retired.
pub struct Executor {
    pub(crate) shared: Arc<ExecutorState>,
    threads: Vec<JoinHandle<()>>,
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("workers", &self.threads.len())
            .finish()
    }
}

impl Executor {
    /// Starts the workers, and returns once each has started: what a
    /// worker allocates for itself when it starts is done by then, so the
    /// caller's steady state (zero allocations) begins at once, however
    /// late the OS first runs a worker.
    ///
    /// # Errors
    ///
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if a worker
    ///   thread cannot be spawned (the workers already started are stopped
    ///   and joined).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::task::{Executor, ExecutorConfig, Scope};
    ///
    /// let exec = Executor::new(ExecutorConfig { workers: 2, ..Default::default() })?;
    /// assert_eq!(exec.workers(), 2);
    /// let scope = Scope::new();
    /// let mut g = exec.graph(&scope);
    /// g.call(|_| Ok(()))?;
    /// g.submit();
    /// scope.wait_idle(Duration::from_secs(5))?;
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn new(config: ExecutorConfig) -> Result<Executor, Error> {
        Self::start(config, 0, None, false)
    }

    /// An executor with priority levels: the tasks of a graph given a
    /// [`Priority`] ([`Graph::set_priority`]) are taken by idle and
    /// finishing workers before those of lower ones (the rules of
    /// [`Priority`], fairness picks included). [`new`](Self::new)'s
    /// executor ignores priorities, and pays nothing for them.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::task::{Executor, ExecutorConfig, Scope};
    /// use fenceline::Priority;
    ///
    /// let exec = Executor::with_priorities(ExecutorConfig { workers: 1, ..Default::default() })?;
    /// let scope = Scope::new();
    /// let mut g = exec.graph(&scope);
    /// g.set_priority(Priority::High);
    /// g.call(|_| Ok(()))?;
    /// g.submit();
    /// scope.wait_idle(Duration::from_secs(5))?;
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn with_priorities(config: ExecutorConfig) -> Result<Executor, Error> {
        Self::start(config, 0, None, true)
    }

    /// An executor whose workers also run issuer turns offered through
    /// `turns` cells ([`ExecutorState::offer_turn`]) with `run_turn`: a
    /// CPU device's, one cell per queue.
    /// With `levels`, the executor has priority levels (as
    /// [`with_priorities`](Self::with_priorities)'s).
    pub(crate) fn with_turns(
        config: ExecutorConfig,
        turns: usize,
        run_turn: TurnRunner,
        levels: bool,
    ) -> Result<Executor, Error> {
        Self::start(config, turns, Some(run_turn), levels)
    }

    fn start(
        config: ExecutorConfig,
        turns: usize,
        run_turn: Option<TurnRunner>,
        levels: bool,
    ) -> Result<Executor, Error> {
        let workers = match config.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let deques: Vec<Deque<_>> = (0..workers).map(|_| Deque::new_lifo()).collect();
        let stealers = deques.iter().map(|d| d.stealer()).collect();
        let shared = Arc::new(ExecutorState::new(
            workers,
            config.spin,
            levels,
            stealers,
            turns,
            run_turn,
        )?);
        liveness::born(Arc::as_ptr(&shared));
        let mut exec = Executor {
            shared: shared.clone(),
            threads: Vec::with_capacity(workers),
        };
        let started = std::sync::Arc::new(started::Latch::new(workers));
        for (index, deque) in deques.into_iter().enumerate() {
            let shared = shared.clone();
            let arrival = started.arrival();
            let spawned = thread::Builder::new()
                .name(format!("fenceline-worker-{index}"))
                .spawn(move || {
                    // SAFETY: this is the seat's worker thread, once,
                    // before it can park.
                    unsafe { shared.seats[index].register_current() };
                    let mut worker = Worker::new(index, shared, deque);
                    worker.start_up();
                    drop(arrival);
                    worker.run();
                });
            match spawned {
                Ok(handle) => exec.threads.push(handle),
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::ResourceExhausted,
                        format!("spawning worker {index}: {e}"),
                    ))
                }
            }
        }
        // Each worker's own allocations happen before this returns, not
        // in the caller's first frames if the OS runs a worker late.
        started.wait();
        Ok(exec)
    }

    /// Worker threads.
    pub fn workers(&self) -> usize {
        self.shared.seats.len()
    }

    /// A new task graph whose tasks count in `scope`.
    pub fn graph(&self, scope: &Scope) -> Graph<'_> {
        Graph::new(&self.shared, scope)
    }

    /// A reference to the executor's state, for owners that build graphs
    /// on it (a device's queues): it keeps the memory alive, not the
    /// workers running (that is the `Executor`'s job).
    pub(crate) fn state(&self) -> Arc<ExecutorState> {
        self.shared.clone()
    }
}

/// The issuer-turn cells alone, for the models of their protocol
/// (`loom-tests`, through `fenceline::testing`): a device's queues use
/// them through its backend.
#[cfg(feature = "testing")]
impl Executor {
    /// [`Executor::new`], with `turns` issuer-turn cells whose turns
    /// `run_turn` runs.
    ///
    /// # Errors
    /// As [`Executor::new`].
    pub(crate) fn with_turn_cells(
        config: ExecutorConfig,
        turns: usize,
        run_turn: unsafe fn(std::ptr::NonNull<()>),
    ) -> Result<Executor, Error> {
        Self::with_turns(config, turns, run_turn, false)
    }

    /// Offers a turn through cell `cell` (empty; not from a worker):
    /// `Ok` if a worker will run it, `Err(turn)` if every worker is busy
    /// and the caller keeps it.
    pub(crate) fn offer_turn(
        &self,
        cell: usize,
        turn: std::ptr::NonNull<()>,
    ) -> Result<(), std::ptr::NonNull<()>> {
        self.shared.offer_turn(cell, turn)
    }
}

impl Executor {
    /// Whether the calling thread is one of this executor's workers.
    pub(crate) fn on_worker_thread(&self) -> bool {
        let me = thread::current().id();
        self.threads.iter().any(|t| t.thread().id() == me)
    }

    /// Starts the shutdown and returns without joining: the workers exit
    /// once the last task retired (for an owner that may be on any
    /// thread, including one that work it waits for depends on).
    pub(crate) fn shut_down_detached(mut self) {
        self.shared.begin_shutdown();
        self.threads.clear();
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.shared.begin_shutdown();
        if self.on_worker_thread() {
            // Joining would wait for the task running this drop: detach;
            // the workers exit once the last task retired, and the last of
            // them frees the state.
            self.threads.clear();
            return;
        }
        for t in self.threads.drain(..) {
            // A worker only panics on a fenceline bug; nothing to add here.
            let _ = t.join();
        }
    }
}

static_assertions::assert_impl_all!(Executor: Send, Sync);
