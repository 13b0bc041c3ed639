//! Task payloads: nop, call, barrier, fence, wait, dispatch (and its
//! shards). Each kind is a payload type in the task block and a static
//! `VTable`.

use std::marker::PhantomData;
use std::ptr::{addr_of_mut, NonNull};
use std::time::Instant;

use super::counters::TileCounter;
use super::task::{Outcome, Task, VTable, CANCELLED};
use super::worker::{Shared, Worker};
use super::Tile;
use crate::error::{Error, ErrorKind};
use crate::list::DoubleLinks;
use crate::semaphore::{Registration, Semaphore, Timepoint};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::Arc;
use crate::unwind::guarded;

unsafe fn no_skip(_task: NonNull<Task>) {}

unsafe fn drop_payload<T>(task: NonNull<Task>) {
    // SAFETY: the vtable of a `T` payload calls this once, at free.
    unsafe { std::ptr::drop_in_place(Task::payload_ptr::<T>(task)) }
}

// ---------------------------------------------------------------------------
// nop, barrier
// ---------------------------------------------------------------------------

unsafe fn nop_run(_task: NonNull<Task>, _w: &mut Worker) -> Outcome {
    Outcome::Done(Ok(()))
}

pub(crate) static NOP: VTable = VTable {
    run: nop_run,
    drop: drop_payload::<()>,
    skip: no_skip,
    name: "nop",
};

/// A barrier's payload: the head of its dependents, linked by `fork_next`.
pub(crate) struct BarrierPayload {
    pub(crate) head: Option<NonNull<Task>>,
    pub(crate) tail: Option<NonNull<Task>>,
}

pub(crate) static BARRIER: VTable = VTable {
    run: nop_run,
    drop: drop_payload::<BarrierPayload>,
    skip: no_skip,
    name: "barrier",
};

/// The first fork dependent of `task` if it is a barrier.
///
/// # Safety
/// `task` is valid.
pub(crate) unsafe fn fork_head(task: NonNull<Task>) -> Option<NonNull<Task>> {
    // SAFETY: valid per contract.
    let t = unsafe { task.as_ref() };
    if std::ptr::eq(t.vtable, &BARRIER) {
        // SAFETY: a barrier's payload is a `BarrierPayload`.
        unsafe { Task::payload::<BarrierPayload>(task) }.head
    } else {
        None
    }
}

// ---------------------------------------------------------------------------
// call
// ---------------------------------------------------------------------------

/// What a running call can do: add child calls that it joins on. A call
/// that added children runs again once they all finished (unless one
/// failed).
pub struct CallContext<'w> {
    worker: &'w mut Worker,
    task: NonNull<Task>,
    children: u32,
    runs: u8,
}

impl CallContext<'_> {
    /// How many times this call has run before (0 on the first run).
    pub fn reentry(&self) -> u8 {
        self.runs.saturating_sub(1)
    }

    /// Adds a child call; this call runs again after all its children.
    ///
    /// Errors: `ResourceExhausted` if no task block can be had.
    pub fn spawn<F>(&mut self, f: F) -> Result<(), Error>
    where
        F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send + 'static,
    {
        // SAFETY: `self.task` is the running call, alive until it retires,
        // which waits for this child.
        let parent = unsafe { self.task.as_ref() };
        let child = make_call(&mut self.worker.cache, parent.scope, f)?;
        // SAFETY: just created, ours.
        let c = unsafe { child.as_ref() };
        c.completion.set(Some(self.task));
        parent.add_pending();
        // SAFETY: the parent keeps the scope alive and non-idle.
        unsafe { parent.scope.as_ref() }.enter_from_task();
        self.worker.shared.live.fetch_add(1, Ordering::Relaxed);
        self.children += 1;
        self.worker.push(child);
        // The call keeps running (and may block on its child): idle
        // workers must be able to take the child now.
        self.worker.publish();
        Ok(())
    }
}

type CallFn = dyn FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send;

struct CallPayload<F> {
    f: F,
}

unsafe fn call_run<F>(task: NonNull<Task>, worker: &mut Worker) -> Outcome
where
    F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send,
{
    // SAFETY: the running worker owns the task.
    let t = unsafe { task.as_ref() };
    // Hold the task while it runs, so children finishing early cannot make
    // it ready before the closure returned.
    t.pending.set(1);
    let mut cx = CallContext {
        worker,
        task,
        children: 0,
        runs: t.runs.get(),
    };
    // SAFETY: the payload is a `CallPayload<F>`, touched only by the worker
    // running the task.
    let payload = unsafe { &mut *Task::payload_ptr::<CallPayload<F>>(task) };
    let result = guarded(|| (payload.f)(&mut cx));
    if cx.children == 0 {
        return Outcome::Done(result);
    }
    if let Err(e) = result {
        // SAFETY: the task keeps its scope alive.
        unsafe { t.scope.as_ref() }.record(e);
        t.mark_failed();
    }
    if t.finish_one() {
        // Every child already finished: ready again, run it again (or skip
        // it, if one failed) from the queue.
        cx.worker.push(task);
    }
    Outcome::Suspended
}

fn call_vtable<F>() -> &'static VTable
where
    F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send + 'static,
{
    struct Table<F>(PhantomData<F>);
    impl<F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send + 'static> Table<F> {
        const VTABLE: VTable = VTable {
            run: call_run::<F>,
            drop: drop_payload::<CallPayload<F>>,
            skip: no_skip,
            name: "call",
        };
    }
    &Table::<F>::VTABLE
}

/// Creates a call task (not yet ready: `pending` 0, no links).
pub(crate) fn make_call<F, P: std::ops::Deref<Target = crate::pool::BlockPool>>(
    cache: &mut crate::pool::BlockCache<P>,
    scope: NonNull<super::scope::ScopeInner>,
    f: F,
) -> Result<NonNull<Task>, Error>
where
    F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send + 'static,
{
    if Task::fits::<CallPayload<F>>() {
        new_task(cache, scope, call_vtable::<F>(), CallPayload { f })
    } else {
        let boxed: Box<CallFn> = Box::new(f);
        new_task(
            cache,
            scope,
            call_vtable::<Box<CallFn>>(),
            CallPayload { f: boxed },
        )
    }
}

/// Writes a task with payload `payload` into a fresh block.
pub(crate) fn new_task<T, P: std::ops::Deref<Target = crate::pool::BlockPool>>(
    cache: &mut crate::pool::BlockCache<P>,
    scope: NonNull<super::scope::ScopeInner>,
    vtable: &'static VTable,
    payload: T,
) -> Result<NonNull<Task>, Error> {
    const { assert!(Task::fits::<T>(), "payload too large for a task block") };
    let block = cache.acquire()?;
    let task = block.as_ptr().cast::<Task>();
    // SAFETY: the block is ours, `TASK_BLOCK` bytes aligned to 64.
    // Field by field: writing a whole `Task` value would copy its 192
    // uninitialized payload bytes too.
    unsafe {
        let t = task.as_ptr();
        addr_of_mut!((*t).next).write(crate::list::SingleLinks::new());
        addr_of_mut!((*t).fork_next).write(crate::sync::Cell::new(None));
        addr_of_mut!((*t).completion).write(crate::sync::Cell::new(None));
        addr_of_mut!((*t).pending).write(super::counters::JoinCount::new(0));
        addr_of_mut!((*t).flags).write(crate::sync::atomic::AtomicU32::new(0));
        addr_of_mut!((*t).scope).write(scope);
        addr_of_mut!((*t).vtable).write(vtable);
        addr_of_mut!((*t).block).write(block.index());
        addr_of_mut!((*t).forked).write(crate::sync::Cell::new(false));
        addr_of_mut!((*t).runs).write(crate::sync::Cell::new(0));
        addr_of_mut!((*t).seq).write(crate::sync::Cell::new(0));
        Task::payload_ptr::<T>(task).write(payload);
    }
    Ok(task)
}

// ---------------------------------------------------------------------------
// finally
// ---------------------------------------------------------------------------

/// Runs whether or not its predecessors failed, and is told which.
pub(crate) struct FinallyPayload<F> {
    pub(crate) f: Option<F>,
}

unsafe fn finally_run<F>(task: NonNull<Task>, _w: &mut Worker) -> Outcome
where
    F: FnOnce(Result<(), Error>) + Send + 'static,
{
    // SAFETY: the payload is a `FinallyPayload<F>`, ours while running.
    let p = unsafe { &mut *Task::payload_ptr::<FinallyPayload<F>>(task) };
    if let Some(f) = p.f.take() {
        Outcome::Done(guarded(|| {
            f(Ok(()));
            Ok(())
        }))
    } else {
        Outcome::Done(Ok(()))
    }
}

unsafe fn finally_skip<F>(task: NonNull<Task>)
where
    F: FnOnce(Result<(), Error>) + Send + 'static,
{
    // SAFETY: as in `finally_run`; the task keeps its scope alive.
    let (p, t) = unsafe {
        (
            &mut *Task::payload_ptr::<FinallyPayload<F>>(task),
            task.as_ref(),
        )
    };
    if let Some(f) = p.f.take() {
        // SAFETY: as above.
        let error = unsafe { t.scope.as_ref() }
            .first_error()
            .unwrap_or_else(|| Error::new(ErrorKind::Aborted, "a task before it failed"));
        let _ = guarded(|| {
            f(Err(error));
            Ok(())
        });
    }
}

pub(crate) fn finally_vtable<F>() -> &'static VTable
where
    F: FnOnce(Result<(), Error>) + Send + 'static,
{
    struct Table<F>(PhantomData<F>);
    impl<F: FnOnce(Result<(), Error>) + Send + 'static> Table<F> {
        const VTABLE: VTable = VTable {
            run: finally_run::<F>,
            drop: drop_payload::<FinallyPayload<F>>,
            skip: finally_skip::<F>,
            name: "finally",
        };
    }
    &Table::<F>::VTABLE
}

// ---------------------------------------------------------------------------
// fence
// ---------------------------------------------------------------------------

pub(crate) struct FencePayload {
    pub(crate) signal: Option<(Semaphore, u64)>,
}

unsafe fn fence_run(task: NonNull<Task>, _w: &mut Worker) -> Outcome {
    // SAFETY: the payload is a `FencePayload`.
    let p = unsafe { Task::payload::<FencePayload>(task) };
    Outcome::Done(match &p.signal {
        Some((sem, v)) => sem.signal(*v),
        None => Ok(()),
    })
}

unsafe fn fence_skip(task: NonNull<Task>) {
    // SAFETY: the payload is a `FencePayload`; the task keeps its scope.
    let (p, t) = unsafe { (Task::payload::<FencePayload>(task), task.as_ref()) };
    if let Some((sem, _)) = &p.signal {
        // SAFETY: as above.
        let error = unsafe { t.scope.as_ref() }
            .first_error()
            .unwrap_or_else(|| Error::new(ErrorKind::Aborted, "a task before the fence failed"));
        sem.fail(error);
    }
}

pub(crate) static FENCE: VTable = VTable {
    run: fence_run,
    drop: drop_payload::<FencePayload>,
    skip: fence_skip,
    name: "fence",
};

// ---------------------------------------------------------------------------
// wait
// ---------------------------------------------------------------------------

/// A wait task's payload: what it waits for, its timepoint, and its place
/// in the executor's list of parked waits (for timeouts and shutdown).
pub(crate) struct WaitState {
    links: DoubleLinks<WaitState>,
    task: NonNull<Task>,
    /// The executor, held while the task is suspended: the wake hands the
    /// task over and then notifies a worker, and the executor may be
    /// dropped between the two.
    shared: Option<Arc<Shared>>,
    sem: Semaphore,
    value: u64,
    pub(crate) deadline: Option<Instant>,
    timepoint: Timepoint,
    /// In `shared.waits`; guarded by that lock.
    listed: crate::sync::Cell<bool>,
}
crate::impl_linked!(WaitState, links: DoubleLinks<WaitState>);

impl WaitState {
    pub(crate) fn new(sem: Semaphore, value: u64, deadline: Option<Instant>) -> WaitState {
        WaitState {
            links: DoubleLinks::new(),
            task: NonNull::dangling(),
            shared: None,
            sem,
            value,
            deadline,
            timepoint: Timepoint::new(value, wait_wake, std::ptr::null()),
            listed: crate::sync::Cell::new(false),
        }
    }

    /// Cancels a parked wait whose deadline passed (or at shutdown):
    /// returns its task to requeue, or `None` if its timepoint already
    /// fired (the callback requeues it).
    ///
    /// # Safety
    /// `w` is linked in `waits` (the executor's list, locked).
    pub(crate) unsafe fn expire(
        w: NonNull<WaitState>,
        waits: &mut crate::list::DList<WaitState>,
        shutdown: bool,
    ) -> Option<NonNull<Task>> {
        // SAFETY: listed, hence alive.
        let state = unsafe { w.as_ref() };
        // SAFETY: the timepoint was registered on `sem` (it is listed).
        if !unsafe { state.sem.cancel(NonNull::from(&state.timepoint)) } {
            return None;
        }
        // SAFETY: linked in `waits`.
        unsafe { waits.erase(w) };
        state.listed.set(false);
        if shutdown {
            // SAFETY: the task is suspended and now ours.
            unsafe { state.task.as_ref() }
                .flags
                .fetch_or(CANCELLED, Ordering::Relaxed);
        }
        Some(state.task)
    }
}

/// Timepoint callback of a wait task: unlist it and make it ready.
unsafe fn wait_wake(tp: NonNull<Timepoint>, _result: Result<(), Error>) {
    // SAFETY: the context is the `WaitState` holding this timepoint, alive
    // while the task is suspended (it is, until we requeue it).
    let state = unsafe { &*tp.as_ref().context().cast::<WaitState>() };
    // Our own reference to the executor: once the task is injected it may
    // run, retire (dropping the state's reference) and be the executor's
    // last task, and the executor may be freed before `notify` below.
    let Some(shared) = state.shared.clone() else {
        unreachable!("a suspended wait task holds its executor");
    };
    {
        let mut waits = shared.lock_waits();
        if state.listed.get() {
            // SAFETY: listed means linked in `waits`.
            unsafe { waits.erase(NonNull::from(state)) };
            state.listed.set(false);
        }
        shared.suspended_waits.store(waits.len(), Ordering::Release);
    }
    shared.inject(state.task);
}

unsafe fn wait_run(task: NonNull<Task>, worker: &mut Worker) -> Outcome {
    // SAFETY: the payload is a `WaitState`, owned by the running worker.
    let state = unsafe { &mut *Task::payload_ptr::<WaitState>(task) };
    // SAFETY: ours while running.
    if unsafe { task.as_ref() }.flags.load(Ordering::Acquire) & CANCELLED != 0 {
        return Outcome::Done(Err(Error::new(
            ErrorKind::Cancelled,
            "wait task cancelled: the executor was dropped",
        )));
    }
    loop {
        match state.sem.query() {
            Err(e) => return Outcome::Done(Err(e)),
            Ok(v) if v >= state.value => return Outcome::Done(Ok(())),
            Ok(_) => {}
        }
        if state.deadline.is_some_and(|d| Instant::now() >= d) {
            return Outcome::Done(Err(Error::new(
                ErrorKind::DeadlineExceeded,
                format!("wait task: semaphore did not reach {} in time", state.value),
            )));
        }
        state.task = task;
        if state.shared.is_none() {
            state.shared = Some(worker.shared.clone());
        }
        let ctx = (state as *const WaitState).cast::<()>();
        state.timepoint = Timepoint::new(state.value, wait_wake, ctx);
        {
            let mut waits = worker.shared.lock_waits();
            // SAFETY: the state lives in the suspended task's payload until
            // the task is requeued, which unlists it first.
            unsafe { waits.push_back(NonNull::from(&*state)) };
            state.listed.set(true);
            worker
                .shared
                .suspended_waits
                .store(waits.len(), Ordering::Release);
        }
        // Read before registering: once registered, the timepoint may fire
        // and the task run (and be freed) on another worker.
        let timed = state.deadline.is_some();
        // SAFETY: the timepoint stays in place until it fires or is
        // cancelled (the task is suspended, its block not freed).
        match unsafe { state.sem.register(NonNull::from(&state.timepoint)) } {
            Registration::Pending => {
                if timed {
                    // A parked worker armed its timer before this deadline
                    // existed: wake one, so it re-arms (this worker may
                    // stay busy with other tasks for long).
                    worker.shared.notify();
                }
                return Outcome::Suspended;
            }
            Registration::Reached | Registration::Failed(_) => {
                let mut waits = worker.shared.lock_waits();
                if state.listed.get() {
                    // SAFETY: listed means linked.
                    unsafe { waits.erase(NonNull::from(&*state)) };
                    state.listed.set(false);
                }
                worker
                    .shared
                    .suspended_waits
                    .store(waits.len(), Ordering::Release);
                // Loop: the query above now answers.
            }
        }
    }
}

pub(crate) static WAIT: VTable = VTable {
    run: wait_run,
    drop: drop_payload::<WaitState>,
    skip: no_skip,
    name: "wait",
};

// ---------------------------------------------------------------------------
// dispatch
// ---------------------------------------------------------------------------

pub(crate) struct DispatchPayload<F> {
    f: F,
    grid: [u32; 3],
    tiles: TileCounter,
    stop: AtomicBool,
}

impl<F> DispatchPayload<F> {
    /// A dispatch of `f` over `grid`, of `total` tiles (`tile_count`).
    pub(crate) fn new(grid: [u32; 3], total: u64, f: F) -> Self {
        DispatchPayload {
            f,
            grid,
            tiles: TileCounter::new(total, 1),
            stop: AtomicBool::new(false),
        }
    }
}

struct ShardPayload {
    dispatch: NonNull<Task>,
}

unsafe fn dispatch_run<F>(task: NonNull<Task>, worker: &mut Worker) -> Outcome
where
    F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static,
{
    // SAFETY: ours while running.
    let t = unsafe { task.as_ref() };
    // SAFETY: the payload is a `DispatchPayload<F>`.
    let p = unsafe { &mut *Task::payload_ptr::<DispatchPayload<F>>(task) };
    let total = p.tiles.total();
    if t.runs.get() > 1 || total == 0 {
        // Second run: every shard finished (a failed one marks us FAILED
        // and we are skipped instead). Or nothing to do.
        return Outcome::Done(Ok(()));
    }
    let workers = worker.shared.slots.len() as u64;
    let shards = workers.min(total).max(1);
    p.tiles = TileCounter::new(total, (total / (shards * 16)).clamp(1, 1024));
    t.pending.set(1); // hold while adding shards
    for _ in 0..shards {
        let shard = match new_task(
            &mut worker.cache,
            t.scope,
            shard_vtable::<F>(),
            ShardPayload { dispatch: task },
        ) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: the task keeps its scope alive.
                unsafe { t.scope.as_ref() }.record(e);
                t.mark_failed();
                p.stop.store(true, Ordering::Relaxed);
                break;
            }
        };
        // SAFETY: just created, ours.
        unsafe { shard.as_ref() }.completion.set(Some(task));
        t.add_pending();
        // SAFETY: the dispatch keeps its scope alive and non-idle.
        unsafe { t.scope.as_ref() }.enter_from_task();
        worker.shared.live.fetch_add(1, Ordering::Relaxed);
        worker.push(shard);
    }
    if t.finish_one() {
        // Thieves ran every shard already: ready again for the second run.
        worker.push(task);
    }
    Outcome::Suspended
}

unsafe fn shard_run<F>(task: NonNull<Task>, _worker: &mut Worker) -> Outcome
where
    F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static,
{
    // SAFETY: the payload is a `ShardPayload` whose dispatch is suspended
    // (alive) until every shard retired.
    let dispatch = unsafe { Task::payload::<ShardPayload>(task) }.dispatch;
    // SAFETY: as above; shards only read it and use its atomics.
    let p = unsafe { Task::payload::<DispatchPayload<F>>(dispatch) };
    let [x, y, _] = p.grid;
    let (x, y) = (u64::from(x), u64::from(y));
    loop {
        if p.stop.load(Ordering::Relaxed) {
            return Outcome::Done(Ok(()));
        }
        let Some((start, end)) = p.tiles.claim() else {
            return Outcome::Done(Ok(()));
        };
        let r = guarded(|| {
            // One division per claimed range; then count x, y, z up.
            let mut tile = Tile {
                workgroup_id: [
                    (start % x) as u32,
                    (start / x % y) as u32,
                    (start / (x * y)) as u32,
                ],
                workgroup_count: p.grid,
            };
            for _ in start..end {
                (p.f)(&tile)?;
                let id = &mut tile.workgroup_id;
                id[0] += 1;
                if id[0] == p.grid[0] {
                    id[0] = 0;
                    id[1] += 1;
                    if id[1] == p.grid[1] {
                        id[1] = 0;
                        id[2] += 1;
                    }
                }
            }
            Ok(())
        });
        if let Err(e) = r {
            p.stop.store(true, Ordering::Relaxed);
            return Outcome::Done(Err(e));
        }
    }
}

fn shard_vtable<F>() -> &'static VTable
where
    F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static,
{
    struct Table<F>(PhantomData<F>);
    impl<F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static> Table<F> {
        const VTABLE: VTable = VTable {
            run: shard_run::<F>,
            drop: drop_payload::<ShardPayload>,
            skip: no_skip,
            name: "dispatch shard",
        };
    }
    &Table::<F>::VTABLE
}

pub(crate) fn dispatch_vtable<F>() -> &'static VTable
where
    F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static,
{
    struct Table<F>(PhantomData<F>);
    impl<F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static> Table<F> {
        const VTABLE: VTable = VTable {
            run: dispatch_run::<F>,
            drop: drop_payload::<DispatchPayload<F>>,
            skip: no_skip,
            name: "dispatch",
        };
    }
    &Table::<F>::VTABLE
}

/// Dispatch closures too large for a task block are boxed.
pub(crate) type BoxedTileFn = Box<dyn Fn(&Tile) -> Result<(), Error> + Send + Sync>;
