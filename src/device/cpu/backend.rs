//! The CPU backend: queue actions run as task DAGs on the device's
//! executor.

use crate::device::recording::command::{Command, RunTiles};
use crate::device::teardown::QueueToken;
use crate::device::Work;
use crate::error::Error;
use crate::list::{SList, TransferStack};
use crate::pool::BlockCache;
use crate::queue::issuer::Issuer;
use crate::queue::{Backend, Completion, IssueTurn};
use crate::sync::{Arc, UnsafeCell};
use crate::task::{
    submit_finally, ExecutorState, Graph, Priority, Scope, ScopeLink, TaskId, TaskPool,
};

/// Command buffers one `execute` keeps without allocating.
pub const EXECUTE_INLINE_COMMAND_BUFFERS: usize = 4;

/// A command of a recording, or a dispatch's closure, handed to a task
/// (valid while the submission holds the recording, which outlives its
/// tasks: the `finally` task that completes the submission holds it and
/// runs last).
struct Recorded<T: ?Sized>(*const T);
impl<T: ?Sized> Clone for Recorded<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for Recorded<T> {}
// SAFETY: commands are immutable once recorded and `Sync` in content
// (buffers are atomics, closures are `Send + Sync`).
unsafe impl<T: ?Sized + Sync> Send for Recorded<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Sync> Sync for Recorded<T> {}

/// The backend, reached from a submission's `finally` task.
#[derive(Clone, Copy)]
struct BackendRef(*const CpuBackend);
// SAFETY: `CpuBackend` is `Sync`; the pointer is valid while the action
// that carries it is live (see its use).
unsafe impl Send for BackendRef {}

pub(crate) struct CpuBackend {
    /// The device's executor's state (its workers run until the device
    /// shuts the executor down, after every queue state is freed).
    exec: Arc<ExecutorState>,
    /// Scopes of finished submissions, pushed lock-free where a
    /// submission completes (one scope per in-flight `execute`).
    free_scopes: TransferStack<ScopeLink>,
    /// Scopes taken from `free_scopes`, for the next submissions: touched
    /// only by `issue`, which the pending queue never runs twice at once
    /// for one queue (its issuer is exclusive).
    spare_scopes: UnsafeCell<SList<ScopeLink>>,
    /// Task blocks for the graphs `issue` builds off the executor's
    /// workers (a submitting thread's direct issue): touched only by
    /// `issue`, like `spare_scopes`. On a worker, `issue` takes the
    /// worker's cache instead.
    issue_blocks: std::cell::UnsafeCell<BlockCache<TaskPool>>,
    /// The scope host calls run in (their errors go to their signals).
    host_scope: Scope,
    /// The uncounted scope of one-task executes (`issue_alone`), which
    /// need none of their own.
    lone_scope: Scope,
    /// This queue's cell among the executor's issuer-turn cells (and the
    /// issuer thread's).
    turn_cell: usize,
    /// The device's issuer thread, which takes the turn when every worker
    /// is busy (`None` under the model checker: its device models would
    /// grow by a thread none of them is about; `loom-tests/tests/issuer.rs`
    /// models the thread).
    issuer: Option<Issuer>,
    /// The queue's priority, given to every task its actions make.
    priority: Priority,
    /// Tells the device's drop when this queue's state is freed.
    _token: QueueToken,
}

// SAFETY: `spare_scopes` and `issue_blocks` are the only fields that are
// not `Sync`; they are touched only by `issue`, which only the queue's
// issuer calls, one thread at a time (its turn is exclusive: the drain
// protocol), and by `Drop` (exclusive).
unsafe impl Sync for CpuBackend {}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        // The scopes' references, kept by the lists.
        let mut all = self.free_scopes.take_all();
        // SAFETY: `&mut self`: nothing else touches the spare list.
        self.spare_scopes
            .with_mut(|spare| all.append(unsafe { &mut *spare }));
        while let Some(handle) = all.pop_front() {
            drop(Scope::from_handle(handle));
        }
    }
}

impl CpuBackend {
    /// Queue `turn_cell`'s backend (its cell among the executor's
    /// issuer-turn cells, which run `IssueTurn::run_raw`).
    pub(crate) fn new(
        exec: Arc<ExecutorState>,
        turn_cell: usize,
        priority: Priority,
        issuer: Option<Issuer>,
        token: QueueToken,
    ) -> CpuBackend {
        CpuBackend {
            issue_blocks: std::cell::UnsafeCell::new(BlockCache::new(TaskPool(exec.clone()))),
            exec,
            free_scopes: TransferStack::new(),
            spare_scopes: UnsafeCell::new(SList::new()),
            host_scope: Scope::new(),
            lone_scope: Scope::uncounted(),
            turn_cell,
            priority,
            issuer,
            _token: token,
        }
    }

    /// The queue's priority.
    pub(crate) fn priority(&self) -> Priority {
        self.priority
    }

    /// The task blocks for a submission: this worker's cache (a hop: the
    /// blocks the last submission's tasks just gave back) or, off the
    /// workers, the issuer's. Called only from `issue`.
    ///
    /// Either cache is of the executor's pool and outlives the submission's
    /// graph (the worker runs the calling task; the backend outlives
    /// `issue`), and is used on this thread only: the worker's by its own
    /// thread, the issuer's by `issue` alone, which the pending queue never
    /// runs twice at once for one queue. Each is borrowed only for one
    /// acquire or release at a time.
    fn task_cache(&self) -> std::ptr::NonNull<BlockCache<TaskPool>> {
        self.exec.worker_cache().unwrap_or_else(|| {
            // SAFETY: `UnsafeCell::get` is never null.
            unsafe { std::ptr::NonNull::new_unchecked(self.issue_blocks.get()) }
        })
    }

    /// A graph for a submission, its blocks from [`task_cache`](Self::task_cache).
    fn graph<'a>(&'a self, scope: &Scope) -> Graph<'a> {
        // SAFETY: the cache as `task_cache` says. The scope's state is
        // alive whenever the graph reads it: an execute's scope handle
        // moves into the graph's `finally` task, which the graph owns
        // until it is submitted (if that task cannot be made, the handle
        // goes with it and the graph is only dropped, which does not read
        // the scope).
        let mut g = unsafe { Graph::with_cache(&self.exec, scope, self.task_cache()) };
        g.set_priority(self.priority());
        g
    }

    /// A scope for a submission: a finished one, else a new one (until
    /// there are as many as submissions in flight). Lock-free. Called only
    /// from `issue`.
    fn take_scope(&self) -> Scope {
        let reused = self.spare_scopes.with_mut(|spare| {
            // SAFETY: only `issue` touches the spare list, and the pending
            // queue runs one `issue` of this queue at a time.
            let spare = unsafe { &mut *spare };
            if spare.is_empty() {
                *spare = self.free_scopes.take_all();
            }
            spare.pop_front()
        });
        // Uncounted: the submission's final task joins all of its tasks.
        let scope = reused
            .map(Scope::from_handle)
            .unwrap_or_else(Scope::uncounted);
        // A scope is recycled before its submission completes; a panic out
        // of that completion may have failed it since.
        if scope.error().is_some() {
            let _ = scope.take_error();
        }
        scope
    }

    fn issue_host_call(&self, mut work: Completion<Self>) {
        let f = match std::mem::replace(work.payload_mut(), Work::Barrier) {
            Work::HostCall(f) => f,
            _ => unreachable!("checked by the caller"),
        };
        let finally = move |_| {
            let result = crate::unwind::guarded(|| f.call());
            // As an execute's completion: the next action hops here.
            let _hop = crate::task::Hop::enter();
            work.complete(result);
        };
        // One task, no graph. With no task block, the closure (with the
        // completion) is dropped, which fails the action's signals.
        // SAFETY: the cache as `task_cache` says; `host_scope` lives in
        // the backend, which outlives the queue's submissions.
        let _ = unsafe {
            submit_finally(
                &self.exec,
                &self.host_scope,
                self.task_cache(),
                self.priority,
                finally,
            )
        };
    }

    /// An execute of one command that runs whole on one worker (see
    /// [`alone`]): one `finally` task, submitted with no graph, that runs
    /// the command, then completes. No scope of its own either: the task
    /// has no predecessor to fail it and no other task to join, so it
    /// counts in the backend's uncounted `lone_scope`.
    fn issue_alone(&self, work: Finishing, command: Recorded<Command>) {
        let finally = move |_| {
            let slots = Recorded(work.get().payload().slot_views());
            // SAFETY: the command lives in a recording that `work` holds
            // until `release_held` below, and the action holds its
            // buffers until then (`take_holds`).
            let result = crate::unwind::guarded(|| unsafe { run_alone(command, slots) });
            let mut work = work.into_inner();
            let released = crate::device::work::release_held(work.payload_mut());
            // The completion signals, and a queue it readies issues here:
            // that action's first task hops onto this worker.
            let _hop = crate::task::Hop::enter();
            work.complete(result.and(released));
        };
        // SAFETY: the cache as `task_cache` says; `lone_scope` lives in the
        // backend, which outlives the queue's submissions (and, uncounted,
        // is not read once the task has run).
        let _ = unsafe {
            submit_finally(
                &self.exec,
                &self.lone_scope,
                self.task_cache(),
                self.priority,
                finally,
            )
        };
    }

    fn issue_execute(&self, mut work: Completion<Self>) {
        // The buffers the action touches, held until just before it
        // signals; a conflict with a running action fails this one.
        if let Err(e) = crate::device::work::take_holds(work.payload_mut()) {
            // No hold is held here: nothing to give back can fail.
            let _ = crate::device::work::release_held(work.payload_mut());
            return work.complete(Err(e));
        }
        // From here every way out gives the holds back before the signals.
        let work = Finishing(Some(work));
        if let Some(command) = alone(work.get()) {
            return self.issue_alone(work, command);
        }
        let scope = self.take_scope();
        let mut g = self.graph(&scope);
        let built = build(&mut g, work.get());
        let backend = BackendRef(self);
        // The graph holds its own handle: this one moves into the closure
        // (no clone and drop, two read-modify-writes, per execute).
        let finish_scope = scope;
        let finally = g.finally(move |result: Result<(), Error>| {
            let backend = backend;
            // SAFETY: the backend outlives the submissions of its queue
            // (the queue's state, which owns it, is freed only after the
            // last action completes: below, last).
            let backend = unsafe { &*backend.0 };
            // Reset and recycle the scope before completing, so the next
            // submission can reuse it.
            let _ = finish_scope.take_error();
            backend.free_scopes.push(finish_scope.into_handle());
            let mut work = work.into_inner();
            let released = crate::device::work::release_held(work.payload_mut());
            // The completion signals, and a queue it readies issues here:
            // that action's first tasks hop onto this worker (no injector,
            // no wake-up). Completing runs no user code and never waits.
            let _hop = crate::task::Hop::enter();
            work.complete(result.and(released));
        });
        match (built, finally) {
            (Ok(last), Ok(f)) => {
                if let Some(first) = last {
                    if join_fault() || g.join_from(first, f).is_err() {
                        // Fail closed: a finish that does not wait for
                        // every task would give the holds and recordings
                        // back while tiles still run. The graph's drop
                        // drops the finish unrun: the holds go back and
                        // the signals fail (`Internal`).
                        return drop(g);
                    }
                }
                g.submit_in_place();
            }
            // Building failed (out of task blocks): dropping the graph
            // drops the finally closure and its completion, which fails
            // the signals.
            _ => drop(g),
        }
    }
}

/// A fault the crate's tests inject: the next execute of several stages
/// finds its finish impossible to join (no input reaches that path).
#[cfg(feature = "testing")]
static JOIN_FAULT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the next CPU execute of more than one stage fail to join its
/// finish, as if `join_from` had failed (tests of the fail-closed path).
#[cfg(feature = "testing")]
pub fn fail_next_execute_join() {
    JOIN_FAULT.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a test injected a join failure (taken once).
fn join_fault() -> bool {
    #[cfg(feature = "testing")]
    {
        JOIN_FAULT.swap(false, std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(feature = "testing"))]
    {
        false
    }
}

/// An issued execute's completion, which gives the action's buffer holds
/// and command buffers back before the action signals: when it completes
/// ([`into_inner`](Self::into_inner), then `release_held`), or, if
/// it is dropped unrun (its graph could not be built), here, before the
/// completion's drop fails the signals.
struct Finishing(Option<Completion<CpuBackend>>);

impl Finishing {
    fn get(&self) -> &Completion<CpuBackend> {
        match &self.0 {
            Some(w) => w,
            None => unreachable!("taken only by `into_inner`, which consumes it"),
        }
    }

    fn into_inner(mut self) -> Completion<CpuBackend> {
        match self.0.take() {
            Some(w) => w,
            None => unreachable!("taken only here"),
        }
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        if let Some(mut work) = self.0.take() {
            // The completion's drop fails the signals (`Internal`) anyway.
            let _ = crate::device::work::release_held(work.payload_mut());
        }
    }
}

/// Builds every stage of every command buffer of `work` into `g`, in
/// order; returns the first task of the last stage (whose run must join
/// the finish).
fn build(
    g: &mut crate::task::Graph<'_>,
    work: &Completion<CpuBackend>,
) -> Result<Option<TaskId>, Error> {
    let Work::Execute { inline, more, .. } = work.payload() else {
        return Ok(None);
    };
    let slots = Recorded(work.payload().slot_views());
    let recordings = inline
        .iter()
        .flatten()
        .chain(more.iter().flat_map(|m| m.iter()));
    // First task of the stage built last: every task from it on joins the
    // next stage's entry.
    let mut open: Option<TaskId> = None;
    for recording in recordings {
        for stage in recording.stages() {
            if stage.len() == 1 {
                let Some(only) = stage.commands().next() else {
                    unreachable!("a stage has a command");
                };
                let t = command_task(g, only, slots)?;
                if let Some(first) = open {
                    g.join_from(first, t)?;
                }
                open = Some(t);
            } else {
                let gate = match open {
                    Some(first) => {
                        let b = g.barrier()?;
                        g.join_from(first, b)?;
                        Some(b)
                    }
                    None => None,
                };
                let mut first_of_stage = None;
                for command in stage.commands() {
                    let t = command_task(g, command, slots)?;
                    if let Some(b) = gate {
                        g.fork(b, t)?;
                    }
                    first_of_stage.get_or_insert(t);
                }
                open = first_of_stage;
            }
        }
    }
    Ok(open)
}

/// The command of `work` if it is its only one and runs whole on one
/// worker anyway: one command buffer of one stage of one command, which
/// is not a dispatch of more than one tile (those split across workers).
fn alone(work: &Completion<CpuBackend>) -> Option<Recorded<Command>> {
    let Work::Execute {
        inline, more: None, ..
    } = work.payload()
    else {
        return None;
    };
    let mut recordings = inline.iter().flatten();
    let recording = recordings.next()?;
    if recordings.next().is_some() {
        return None;
    }
    let mut stages = recording.stages();
    let stage = stages.next()?;
    if stages.next().is_some() || stage.len() != 1 {
        return None;
    }
    let command = stage.commands().next()?;
    match command {
        Command::Dispatch { grid, .. } if crate::task::tile_count(*grid).ok()? > 1 => None,
        _ => Some(Recorded(command)),
    }
}

/// Runs a command that [`alone`] picked, whole, on this thread: as its
/// task would (a dispatch's one tile through its tile loop, a panic an
/// `Internal` error through the caller's `guarded`).
///
/// # Safety
///
/// The command's recording is held for the call, and its action holds the
/// buffers it touches.
unsafe fn run_alone(
    command: Recorded<Command>,
    slots: Recorded<crate::device::data::binding::SlotViews>,
) -> Result<(), Error> {
    // SAFETY: per contract.
    match unsafe { &*command.0 } {
        Command::Dispatch { grid, f, run, .. } => match crate::task::tile_count(*grid)? {
            0 => Ok(()),
            // SAFETY: `run` was made for the value `f` (see `RunTiles`),
            // which the held recording keeps alive; the buffers it binds,
            // and the table's, are held (contract), the table alive with
            // the action.
            total => unsafe { run(f.as_ptr().cast::<()>(), slots.0, *grid, 0, total) },
        },
        // SAFETY: the action holds its buffers (contract), and the command
        // is alone in its action.
        other => unsafe { other.run() },
    }
}

/// A recorded dispatch's closure and its tile loop, as the executor runs
/// it: one indirect call per claimed range of tiles, none per tile; and
/// the submission's binding table (null: none).
struct RecordedTiles {
    f: Recorded<()>,
    slots: Recorded<crate::device::data::binding::SlotViews>,
    run: RunTiles,
}

impl crate::task::Tiles for RecordedTiles {
    fn run(&self, grid: [u32; 3], start: u64, end: u64) -> Result<(), Error> {
        // SAFETY: `run` was made for the value `f` points to, which the
        // submission keeps alive (see `Recorded`), as it keeps its table.
        unsafe { (self.run)(self.f.0, self.slots.0, grid, start, end) }
    }
}

/// The task of one command; `slots`: the submission's binding table.
fn command_task(
    g: &mut crate::task::Graph<'_>,
    command: &Command,
    slots: Recorded<crate::device::data::binding::SlotViews>,
) -> Result<TaskId, Error> {
    match command {
        Command::Dispatch { grid, f, run, .. } => g.dispatch_tiles(
            *grid,
            RecordedTiles {
                f: Recorded(f.as_ptr().cast::<()>()),
                slots,
                run: *run,
            },
        ),
        _ => {
            let c = Recorded::<Command>(command);
            g.call(move |_| {
                let c = c;
                // SAFETY: see `Recorded`: the submission holds the
                // command's recording, which outlives its tasks.
                let command = unsafe { &*c.0 };
                // SAFETY: the action holds the command's buffers while its
                // tasks run (`take_holds`), and the graph runs it in its
                // stage's place.
                unsafe { command.run() }
            })
        }
    }
}

impl Backend for CpuBackend {
    type Payload = Work;

    fn issue(&self, work: Completion<Self>) {
        match work.payload() {
            Work::Barrier => work.complete(Ok(())),
            Work::HostCall(_) => self.issue_host_call(work),
            Work::Alloca(_) | Work::Dealloca(_) => {
                let mut work = work;
                let r = match work.payload() {
                    Work::Alloca(buffer) => super::work::alloca_ran(buffer),
                    Work::Dealloca(buffer) => super::work::dealloca_ran(buffer),
                    _ => unreachable!("matched above"),
                };
                // The handle goes before the signal (no hold to give back).
                let _ = super::work::release_held(work.payload_mut());
                work.complete(r)
            }
            Work::Execute { .. } => self.issue_execute(work),
        }
    }

    /// Off the device's threads: a submitting or signalling user thread
    /// that has served its own action and a pass of others' requests gives
    /// the turn to the device, so its call returns after a bounded number
    /// of passes. A worker or the issuer thread keeps it (issuing is its
    /// job).
    fn wants_turn(&self) -> bool {
        self.exec.worker_index().is_none() && !self.issuer.as_ref().is_some_and(Issuer::is_current)
    }

    /// The turn goes through this queue's cell to an idle worker, which
    /// runs it before any task ([`ExecutorState::offer_turn`] has the
    /// protocol), or, every worker busy, to the device's issuer thread
    /// (not to a busy worker: every worker may be blocked in user code
    /// until an action of this very turn signals, a barrier another thread
    /// submitted meanwhile). The caller returns.
    fn hand_off_turn(&self, turn: IssueTurn<Self>) -> Result<(), IssueTurn<Self>> {
        match self.exec.offer_turn(self.turn_cell, turn.into_raw().cast()) {
            Ok(()) => Ok(()),
            Err(back) => match &self.issuer {
                Some(issuer) => {
                    // SAFETY: a turn of this queue, given up; the thread's
                    // runner (`IssueTurn::run_raw`) takes it back once.
                    unsafe { issuer.offer(self.turn_cell, back) };
                    Ok(())
                }
                // SAFETY: the pointer `into_raw` made just above, given back.
                None => Err(unsafe { IssueTurn::from_raw(back.cast()) }),
            },
        }
    }

    /// One per worker of the device's executor, where completions run.
    fn finish_lanes(&self, _: crate::queue::Internal) -> usize {
        self.exec.workers()
    }

    /// The worker's index, on a worker of this device's executor: each is
    /// one thread for the executor's life.
    fn finish_lane(&self, _: crate::queue::Internal) -> Option<usize> {
        self.exec.worker_index()
    }
}
