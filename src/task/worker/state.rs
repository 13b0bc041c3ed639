//! The executor's shared state: the injector, the workers' seats and
//! counters, waking and shutdown.

use super::*;

/// One worker's seat in the shared state.
pub(crate) struct Seat {
    /// The worker's flag and handle: set before it parks, taken by whoever
    /// wakes it (waking takes no lock: see [`Sleeper`]).
    pub(super) sleeper: Sleeper,
    /// What this worker did, for `Device::stats` (its own cache line: the
    /// worker writes it, wakers touch `sleeping`).
    pub(crate) counters: CachePadded<WorkerCounters>,
}

/// A worker's event counts and its `running` flag, written only by that
/// worker (loads and stores, no read-modify-write), read by anyone.
#[derive(Default)]
pub(crate) struct WorkerCounters {
    /// Times it parked.
    pub(crate) parks: AtomicU64,
    /// Times it was woken from a park to new work.
    pub(crate) wakeups: AtomicU64,
    /// Tasks it took from another worker's deque (a batch counts once).
    pub(crate) steals: AtomicU64,
    /// Busy: set when the worker starts a task after being idle, cleared
    /// when it next finds no task (enters `Worker::idle`). While it is
    /// clear, the worker looks at the executor's turn cells before it runs
    /// any task (user code that may block): see
    /// [`ExecutorState::offer_turn`], the protocol it is half of.
    pub(super) running: AtomicBool,
}

impl WorkerCounters {
    /// Adds one to a counter of the calling worker's own seat.
    pub(super) fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

impl Seat {
    fn new() -> Seat {
        Seat {
            sleeper: Sleeper::new(),
            counters: CachePadded::new(WorkerCounters::default()),
        }
    }

    /// Records the calling thread as this seat's worker.
    ///
    /// # Safety
    /// Called once, by the seat's worker thread, before it first parks.
    pub(crate) unsafe fn register_current(&self) {
        // SAFETY: the caller's contract is `Sleeper::register_current`'s.
        unsafe { self.sleeper.register_current() }
    }

    /// Takes the seat's flag; if the worker was asleep, unparks it. `true`
    /// if it was.
    fn wake(&self) -> bool {
        self.sleeper.wake()
    }
}

/// State shared by the executor handle, its workers and its tasks.
pub(crate) struct ExecutorState {
    pub(crate) pool: BlockPool,
    /// Ready tasks in chunks of at most [`CHUNK`]: the injector links the
    /// chunks' first tasks through [`ForkLink`] (free once a task is ready:
    /// a barrier unlinks its dependents before releasing them), and each
    /// chunk chains its tasks through [`QueueLink`]. A taker gets the
    /// oldest chunk and leaves the others where they are (no walk: see
    /// [`Injector`]), so a million ready tasks cost a taker what a
    /// hundred do.
    pub(crate) injector: Injector<ForkLink>,
    /// Whether the executor has priority levels (a device with queues of
    /// more than one [`Priority`](crate::Priority)): only then are `high`
    /// and `low` used, and `injector` holds only `Normal` tasks.
    pub(crate) levels: bool,
    /// Ready `High` tasks (with levels), in chunks like `injector`'s. Never
    /// on a worker's deque: a worker takes one task at a time from here,
    /// before anything else (see `Worker::find_leveled`).
    pub(crate) high: Injector<ForkLink>,
    /// Chunks of `high` not yet taken whole: counted before they are
    /// pushed, and after their last task is taken, so it reads above zero
    /// while a taker holds them out of the injector (see
    /// `Worker::find_leveled`).
    pub(crate) high_chunks: AtomicUsize,
    /// Ready `Low` tasks (with levels), likewise: taken after everything
    /// else, and on fairness picks.
    pub(crate) low: Injector<ForkLink>,
    pub(crate) stealers: Box<[Stealer<TaskPtr>]>,
    pub(crate) seats: Box<[Seat]>,
    pub(super) sleep: CachePadded<SleepState>,
    pub(crate) shutdown: AtomicBool,
    /// Tasks created and not yet retired (graphs not submitted included).
    pub(crate) live: AtomicUsize,
    /// Wait tasks parked on a timepoint, for timeouts and shutdown.
    pub(crate) waits: Mutex<DList<WaitLink>>,
    /// `waits.len()`, readable without the lock.
    pub(crate) suspended_waits: AtomicUsize,
    #[cfg_attr(fenceline_loom, allow(dead_code))]
    pub(crate) spin: bool,
    /// Issuer turns offered to the workers ([`offer_turn`](Self::offer_turn)):
    /// one cell per queue of a CPU device, none for a bare executor.
    /// (Each on its own line: a worker reads them when it leaves idle and
    /// when it runs out of local work, an offer writes one.)
    pub(super) turns: Box<[CachePadded<AtomicPtr<()>>]>,
    /// Runs a turn taken from `turns` (given with them).
    pub(super) run_turn: Option<TurnRunner>,
}

/// Runs an issuer turn offered through [`ExecutorState::offer_turn`]
/// (type-erased: the executor does not know the queue's backend).
///
/// # Safety
/// The argument is a turn offered through `offer_turn` and taken from its
/// cell by the caller, run once.
pub(crate) type TurnRunner = unsafe fn(NonNull<()>);

// SAFETY: the raw task pointers inside (injector, waits) are owned by the
// structures holding them and only moved between threads with ownership.
unsafe impl Send for ExecutorState {}
// SAFETY: as above; shared access goes through atomics and mutexes.
unsafe impl Sync for ExecutorState {}

impl ExecutorState {
    pub(crate) fn new(
        workers: usize,
        spin: bool,
        levels: bool,
        stealers: Box<[Stealer<TaskPtr>]>,
        turns: usize,
        run_turn: Option<TurnRunner>,
    ) -> Result<ExecutorState, Error> {
        Ok(ExecutorState {
            pool: BlockPool::with_config(crate::pool::BlockPoolConfig {
                block_size: crate::task::header::TASK_BLOCK,
                align: crate::prefetch::CACHE_LINE,
                first_chunk_blocks: 256,
                max_blocks: None,
            })?,
            injector: Injector::new(),
            levels,
            high: Injector::new(),
            high_chunks: AtomicUsize::new(0),
            low: Injector::new(),
            stealers,
            seats: (0..workers).map(|_| Seat::new()).collect(),
            sleep: CachePadded::new(SleepState::new()),
            shutdown: AtomicBool::new(false),
            live: AtomicUsize::new(0),
            waits: Mutex::new(DList::new()),
            suspended_waits: AtomicUsize::new(0),
            spin,
            turns: (0..turns)
                .map(|_| CachePadded::new(AtomicPtr::new(std::ptr::null_mut())))
                .collect(),
            run_turn,
        })
    }

    pub(crate) fn lock_waits(&self) -> MutexGuard<'_, DList<WaitLink>> {
        self.waits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pushes a ready task from any thread and wakes a worker.
    pub(crate) fn inject(&self, task: NonNull<Task>) {
        let mut chunk = SList::<QueueLink>::new();
        // SAFETY: the task is ready and ours to hand over, in no queue; it
        // stays allocated until it runs.
        chunk.push_back(unsafe { Handle::from_raw(task) });
        self.push_chunks(Self::chunk(chunk));
        self.notify();
    }

    /// Pushes a whole ready list, of tasks of one priority, from any
    /// thread and wakes a worker.
    pub(crate) fn inject_list(&self, mut list: SList<QueueLink>) {
        if list.is_empty() {
            return;
        }
        let mut chunks = SList::<ForkLink>::new();
        while !list.is_empty() {
            chunks.append(&mut Self::chunk(list.split_front(CHUNK)));
        }
        self.push_chunks(chunks);
        self.notify();
    }

    /// Whether `High` tasks wait (with levels): some chunk of them is
    /// counted (in the injector, or held by a taker for a moment).
    #[inline]
    pub(crate) fn high_waiting(&self) -> bool {
        // Acquire: pairs with the AcqRel count RMWs in `push_chunks` and
        // `Worker::take_level` (idle.rs); only the count is used.
        self.high_chunks.load(Ordering::Acquire) != 0
    }

    /// The injector where ready tasks of `priority` wait: the one injector
    /// when the executor has no levels.
    #[inline]
    pub(crate) fn injector_for(&self, priority: Priority) -> &Injector<ForkLink> {
        if !self.levels {
            return &self.injector;
        }
        match priority {
            Priority::High => &self.high,
            Priority::Normal => &self.injector,
            Priority::Low => &self.low,
        }
    }

    /// A non-empty list of ready tasks as one chunk (a one-chunk list).
    pub(crate) fn chunk(list: SList<QueueLink>) -> SList<ForkLink> {
        let mut one = SList::new();
        if let Some(first) = list.into_chain() {
            // SAFETY: the chain's first task stands for the chunk; it is
            // ready, so its fork link is free (see `injector`).
            one.push_back(unsafe { Handle::from_raw(first) });
        }
        one
    }

    /// Pushes ready chunks, of tasks of one priority (one graph's, or one
    /// task's), to their injector.
    pub(crate) fn push_chunks(&self, chunks: SList<ForkLink>) {
        let injector = match chunks.front() {
            Some(first) if self.levels => {
                let priority = Task::priority(first);
                if priority == Priority::High {
                    // AcqRel: pairs with `high_waiting`'s Acquire load and
                    // the decrement in `Worker::take_level` (idle.rs).
                    self.high_chunks.fetch_add(chunks.len(), Ordering::AcqRel);
                }
                self.injector_for(priority)
            }
            _ => &self.injector,
        };
        // Ready tasks are independent: the order of chunks means nothing,
        // so no walk to keep it.
        injector.push_list_unordered(chunks);
    }

    /// New work was published: bump the epoch; wake one sleeper if any.
    /// The caller holds a reference to the executor (a worker, a graph, a
    /// handle, or one taken for the call).
    pub(crate) fn notify(&self) {
        let sleepers = self.sleep.notify();
        // After the first access: the model checker may run another thread
        // (one that frees the state) just before it.
        liveness::check(self, "the executor's state (worker notified)");
        if sleepers {
            self.wake_one();
        }
    }

    fn wake_one(&self) {
        for seat in self.seats.iter() {
            // Load first: most workers are awake, and a swap would take their
            // cache line from them.
            if seat.sleeper.may_sleep() && seat.wake() {
                return;
            }
        }
    }

    /// Starts the shutdown: workers exit once no task is left.
    pub(crate) fn begin_shutdown(&self) {
        // Release: pairs with the Acquire loads of the flag in `idle` (and
        // `expire_waits`, `wait_wake`): a worker that sees the flag also
        // sees the tasks this thread counted in `live` before (a graph made
        // and submitted just before its executor is dropped). With Relaxed
        // on both sides the fences below do not order them when the
        // worker's fence comes first: the teardown model then saw a worker
        // read the flag set and `live` still 0, exit, and strand the graph.
        self.shutdown.store(true, Ordering::Release);
        // Pairs with the fences of `Worker::flush` and `Worker::idle`.
        fence(Ordering::SeqCst);
        self.wake_all();
    }

    /// Wakes every worker (shutdown, or the last task retired under it).
    pub(crate) fn wake_all(&self) {
        self.sleep.notify();
        for seat in self.seats.iter() {
            // Only a worker whose flag the swap takes from `true` is
            // unparked. One that sets it later read its epoch either before
            // the bump above (its `announce` then sees the epoch moved and
            // it does not park) or after (it then sees what was published
            // before the bump, the shutdown flag included).
            seat.wake();
        }
    }
}

impl Drop for ExecutorState {
    fn drop(&mut self) {
        liveness::died(self as *const ExecutorState);
    }
}

/// The executor's task pool, owned through the executor's state: a
/// worker's block cache holds one, so the pool outlives every cached block
/// however the worker and the executor are dropped.
#[derive(Clone)]
pub(crate) struct TaskPool(pub(crate) Arc<ExecutorState>);

impl std::ops::Deref for TaskPool {
    type Target = BlockPool;

    fn deref(&self) -> &BlockPool {
        &self.0.pool
    }
}
