//! `Graph`: builds a task DAG in pool memory, then submits it.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::time::Instant;

use super::header::ForkLink;
use super::header::{QueueLink, Task, TaskPtr, FORKED, PRECEDED};
use super::kind::{
    make_call, new_task, take_sole, BarrierPayload, CallContext, DispatchPayload, FencePayload,
    FinallyPayload, Nop, Tiles, WaitState,
};
use super::scope::{Scope, ScopeInner};
use super::worker::{
    drop_payload, release_block, set_prefetch_hint, ExecutorState, TaskPool, CHUNK, PREFETCH_AHEAD,
};
use super::{Priority, Tile};
use crate::error::{Error, ErrorKind};
use crate::list::{Handle, SList};
use crate::pool::{BlockCache, BlockPool, BlockSource, RawBlock};
use crate::semaphore::{Semaphore, Timeout};

mod blocks;
mod submit;

use blocks::{free_chunks, free_unsubmitted, GraphBlocks, LentCache};
pub(crate) use submit::submit_finally;
use submit::ReadyChunks;

crate::sync::thread_local! {
    /// Graph identities, so a `TaskId` is only accepted by its own graph:
    /// `(thread << 40) | n`, the thread's number taken once from a global
    /// counter and `n` counted per thread, so making a graph costs no shared
    /// read-modify-write (2^40 graphs per thread before `n` would wrap into
    /// the thread bits; a wrapped id only weakens the wrong-graph check).
    static GRAPH_IDS: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

fn next_graph_id() -> u64 {
    GRAPH_IDS.with(|ids| {
        let mut id = ids.get();
        if id == 0 {
            id = crate::sync::unique_number() << 40;
        }
        ids.set(id + 1);
        id
    })
}

/// A task of a [`Graph`] being built. `Copy`; only its graph accepts it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TaskId {
    task: NonNull<Task>,
    graph: u64,
    seq: u32,
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId(#{})", self.seq)
    }
}

/// A task DAG under construction: tasks in the executor's pools, edges
/// added with [`precede`](Graph::precede) (any earlier task before any
/// later one, any number each way), [`set_completion`](Graph::set_completion)
/// (join: the task counts toward its completion task) and
/// [`barrier`](Graph::barrier) + [`fork`](Graph::fork) (one task releasing
/// many). Edges always go from a task created earlier to one created later,
/// so a graph cannot have a cycle. [`submit`](Graph::submit) hands the tasks to the workers; dropping
/// an unsubmitted graph frees them without running any.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use fenceline::task::{Executor, ExecutorConfig, Scope};
///
/// let exec = Executor::new(ExecutorConfig { workers: 2, ..Default::default() })?;
/// let scope = Scope::new();
/// let count = Arc::new(AtomicU32::new(0));
/// let mut g = exec.graph(&scope);
/// // {a | b, c | d}: a, then b and c in parallel, then d.
/// let a = g.call(|_| Ok(()))?;
/// let fork = g.barrier()?;
/// let (c1, c2) = (count.clone(), count.clone());
/// let b = g.call(move |_| { c1.fetch_add(1, Ordering::Relaxed); Ok(()) })?;
/// let c = g.call(move |_| { c2.fetch_add(1, Ordering::Relaxed); Ok(()) })?;
/// let d = g.nop()?;
/// g.set_completion(a, fork)?;
/// g.fork(fork, b)?;
/// g.fork(fork, c)?;
/// g.set_completion(b, d)?;
/// g.set_completion(c, d)?;
/// g.submit();
/// scope.wait_idle(Duration::from_secs(5))?;
/// assert_eq!(count.load(Ordering::Relaxed), 2);
/// # Ok::<(), fenceline::Error>(())
/// ```
pub struct Graph<'e> {
    exec: &'e ExecutorState,
    /// The scope's handle: the graph's own clone (`owns_scope`), or, for
    /// a graph a device builds (`with_cache`), a bitwise copy of its
    /// caller's handle, which outlives the graph: never dropped, so no
    /// reference is counted for it.
    scope: ManuallyDrop<Scope>,
    owns_scope: bool,
    id: u64,
    /// Every task created, through their `next` links, in creation order.
    tasks: SList<QueueLink>,
    count: u32,
    /// Tasks without a predecessor so far (they start at submission).
    roots: u32,
    /// Barriers (submission chunks their dependents).
    barriers: u32,
    /// The last `PREFETCH_AHEAD` tasks created (slot `seq %
    /// PREFETCH_AHEAD`): each new task becomes the prefetch hint of the
    /// one made that many places before it (see `adopt`).
    recent: [Option<TaskPtr>; PREFETCH_AHEAD],
    /// Task blocks for this graph.
    cache: GraphBlocks<'e>,
    /// The priority of the tasks made from here on.
    priority: Priority,
}

impl fmt::Debug for Graph<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph").field("tasks", &self.count).finish()
    }
}

impl<'e> Graph<'e> {
    /// A graph on the executor whose state is `exec`.
    pub(crate) fn new(exec: &'e ExecutorState, scope: &Scope) -> Graph<'e> {
        Graph::with_blocks(
            exec,
            ManuallyDrop::new(scope.clone()),
            true,
            GraphBlocks::Own(BlockCache::new(&exec.pool)),
        )
    }

    fn with_blocks(
        exec: &'e ExecutorState,
        scope: ManuallyDrop<Scope>,
        owns_scope: bool,
        cache: GraphBlocks<'e>,
    ) -> Graph<'e> {
        Graph {
            exec,
            scope,
            owns_scope,
            id: next_graph_id(),
            tasks: SList::new(),
            count: 0,
            roots: 0,
            barriers: 0,
            recent: [None; PREFETCH_AHEAD],
            cache,
            priority: Priority::Normal,
        }
    }

    /// The priority of the tasks made from here on (`Normal` until set):
    /// on an executor with levels ([`Executor::with_priorities`](super::Executor::with_priorities),
    /// a device with queues of several priorities) they are taken before
    /// lower-priority tasks, as [`Priority`] says; elsewhere it is
    /// ignored. A task a running task makes (a call's child, a dispatch's
    /// shard) has its maker's priority.
    pub fn set_priority(&mut self, priority: Priority) {
        self.priority = priority;
    }

    /// A graph on `exec` that takes its task blocks from `cache` (and
    /// gives back there the blocks of tasks it frees unsubmitted), and
    /// borrows `scope`'s handle without counting a reference.
    ///
    /// # Safety
    /// `cache` is a cache of `exec`'s pool that stays valid for the
    /// graph's life, is used only on this thread, and is not borrowed
    /// across any call of the graph (every other user borrows it only for
    /// one acquire or release, as the graph does). The graph is submitted
    /// or dropped on this thread (it is `Send` only for users' graphs).
    /// Some handle to `scope`'s state (the caller's, or one it moves into
    /// a task of the graph) keeps it alive whenever the graph reads it:
    /// while it makes tasks and in `submit`. (Dropping
    /// the graph does not read it.)
    pub(crate) unsafe fn with_cache(
        exec: &'e ExecutorState,
        scope: &Scope,
        cache: NonNull<BlockCache<TaskPool>>,
    ) -> Graph<'e> {
        // SAFETY: a bitwise copy of the handle, never dropped (`owns_scope`
        // false): it counts no reference, and the contract keeps the state
        // alive while the graph may use it.
        let borrowed = ManuallyDrop::new(unsafe { std::ptr::read(scope) });
        Graph::with_blocks(exec, borrowed, false, GraphBlocks::Lent(LentCache(cache)))
    }

    fn adopt(&mut self, task: Result<NonNull<Task>, Error>) -> Result<TaskId, Error> {
        let task = task?;
        let seq = self.count;
        self.count += 1;
        self.roots += 1;
        // SAFETY: just created, ours.
        self.barriers += u32::from(unsafe { task.as_ref() }.vtable.forks);
        // SAFETY: just created, ours, in no list; it stays allocated until
        // the graph submits or frees it.
        self.tasks.push_back(unsafe { Handle::from_raw(task) });
        // Creation order is most often run order (a chain, a pipeline's
        // stages): the task made `PREFETCH_AHEAD` places before this one
        // hints at it, so the worker that runs that one starts fetching
        // this one's header (`Worker::run_tasks`), written on the building
        // thread's core; a chain's hops then overlap their misses. Not on
        // a task already in a barrier's list, whose fork link that is (a
        // later `fork` of a hinted task overwrites the hint).
        #[allow(clippy::modulo_one)] // `PREFETCH_AHEAD` is 1 under loom
        let slot = &mut self.recent[seq as usize % PREFETCH_AHEAD];
        if let Some(TaskPtr(back)) = slot.replace(TaskPtr(task)) {
            // SAFETY: a task of this graph (not submitted while the graph
            // can adopt).
            if unsafe { back.as_ref() }.build.get() & FORKED == 0 {
                // SAFETY: a task of this graph (not submitted while the
                // graph can adopt), in no fork list (`FORKED` is clear).
                unsafe { set_prefetch_hint(back, task) };
            }
        }
        Ok(TaskId {
            task,
            graph: self.id,
            seq,
        })
    }

    fn check(&self, id: TaskId) -> Result<&Task, Error> {
        if id.graph != self.id {
            return Err(invalid_id(id, "belongs to another graph"));
        }
        // SAFETY: a task of this graph lives until the graph is submitted
        // or dropped, both of which consume or outlive every `&self`.
        Ok(unsafe { id.task.as_ref() })
    }

    /// A task that does nothing (a join point).
    pub fn nop(&mut self) -> Result<TaskId, Error> {
        let t = new_task(&mut self.cache, self.scope.as_ptr(), self.priority, || Nop);
        self.adopt(t)
    }

    /// A call of `f`. `f` may [`spawn`](CallContext::spawn) child calls;
    /// then it runs again after all of them (check
    /// [`reentry`](CallContext::reentry)). A closure of up to
    /// [`CALL_INLINE_BYTES`](super::CALL_INLINE_BYTES) bytes (192) and
    /// alignment up to 16 is stored in the task block; a larger one is
    /// boxed (one allocation).
    pub fn call<F>(&mut self, f: F) -> Result<TaskId, Error>
    where
        F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send + 'static,
    {
        let t = make_call(&mut self.cache, self.scope.as_ptr(), self.priority, f);
        self.adopt(t)
    }

    /// A call of a plain function with a context value (the C-style form
    /// of [`call`](Self::call)).
    pub fn call_fn(
        &mut self,
        f: fn(usize) -> Result<(), Error>,
        context: usize,
    ) -> Result<TaskId, Error> {
        self.call(move |_| f(context))
    }

    /// A task that runs `f` once its predecessors are done, **even if one
    /// failed**: `f` gets `Ok(())`, or the scope's first error. (How a
    /// device learns a submission's outcome.) A closure of up to
    /// [`FINALLY_INLINE_BYTES`](super::FINALLY_INLINE_BYTES) bytes (176)
    /// and alignment up to 16 is stored in the task block; a larger one is
    /// boxed (one allocation).
    pub fn finally<F>(&mut self, f: F) -> Result<TaskId, Error>
    where
        F: FnOnce(Result<(), Error>) + Send + 'static,
    {
        let t = new_task(&mut self.cache, self.scope.as_ptr(), self.priority, || {
            FinallyPayload::new(f)
        });
        self.adopt(t)
    }

    /// Makes every task created from `first` up to (not including) `join`
    /// count toward `join`: a join of a contiguous run of tasks, without
    /// the caller keeping their ids. Tasks of the run that already have a
    /// completion task are `InvalidArgument` (nothing is changed then for
    /// them and the rest).
    pub fn join_from(&mut self, first: TaskId, join: TaskId) -> Result<(), Error> {
        self.check(first)?;
        self.check(join)?;
        if join.seq <= first.seq {
            return Err(backward(first, join));
        }
        // Two walks: check everything first, so an error changes nothing
        // (but running out of memory for a moved `precede` edge).
        for pass in 0..2 {
            let mut cursor = Some(first.task);
            let mut k = 0;
            while let Some(t) = cursor {
                if t == join.task {
                    break;
                }
                // SAFETY: tasks of this graph, linked in creation order
                // through `next` until submission.
                let task = unsafe { t.as_ref() };
                if pass == 0 && has_own_completion(task) {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        format!(
                            "the task {k} places after {first:?} already has a completion task"
                        ),
                    ));
                }
                if pass == 1 {
                    self.set_completion_of(task, join.task)?;
                }
                k += 1;
                // SAFETY: as above.
                cursor = unsafe { crate::list::links_next::<QueueLink>(t) };
            }
        }
        Ok(())
    }

    /// A barrier: completes at once and releases every task added with
    /// [`fork`](Self::fork).
    pub fn barrier(&mut self) -> Result<TaskId, Error> {
        let t = new_task(
            &mut self.cache,
            self.scope.as_ptr(),
            self.priority,
            BarrierPayload::default,
        );
        self.adopt(t)
    }

    /// A fence: notifies on completion by signalling `signal` (if given);
    /// if a task before it failed, fails that semaphore with the scope's
    /// first error instead.
    pub fn fence(&mut self, signal: Option<(&Semaphore, u64)>) -> Result<TaskId, Error> {
        let payload = FencePayload {
            signal: signal.map(|(s, v)| (s.clone(), v)),
        };
        let t = new_task(&mut self.cache, self.scope.as_ptr(), self.priority, || {
            payload
        });
        self.adopt(t)
    }

    /// A wait until `semaphore` reaches `value`: it parks on a timepoint
    /// (no thread polls) and fails with the semaphore's failure, or with
    /// `DeadlineExceeded` once `timeout` (counted from submission... from
    /// creation) elapsed.
    pub fn wait(
        &mut self,
        semaphore: &Semaphore,
        value: u64,
        timeout: impl Into<Timeout>,
    ) -> Result<TaskId, Error> {
        let timeout = timeout.into();
        let deadline = match timeout {
            Timeout::Never => None,
            t => t.deadline_from(Instant::now()),
        };
        let state = WaitState::new(semaphore.clone(), value, deadline);
        let t = new_task(&mut self.cache, self.scope.as_ptr(), self.priority, || {
            state
        });
        self.adopt(t)
    }

    /// A dispatch of `f` over every tile of `grid` (x fastest), run by
    /// shards on all workers that claim tiles through an atomic counter.
    /// A zero-sized grid completes at once. The first tile error stops the
    /// dispatch (tiles already claimed finish) and becomes the scope's.
    /// A closure of up to
    /// [`DISPATCH_INLINE_BYTES`](super::DISPATCH_INLINE_BYTES) bytes (144)
    /// and alignment up to 16 is stored in the task block; a larger one is
    /// boxed (one allocation). Either way each tile is one direct call.
    ///
    /// Errors: `InvalidArgument` if the grid's tile count overflows `u64`
    /// (nothing is added then); `ResourceExhausted` without task memory.
    pub fn dispatch<F>(&mut self, grid: [u32; 3], f: F) -> Result<TaskId, Error>
    where
        F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static,
    {
        self.dispatch_tiles(grid, f)
    }

    /// [`dispatch`](Self::dispatch) of anything that runs ranges of tiles
    /// (a device's recorded dispatch: one indirect call per range).
    pub(crate) fn dispatch_tiles<T: Tiles>(
        &mut self,
        grid: [u32; 3],
        tiles: T,
    ) -> Result<TaskId, Error> {
        let total = super::tile_count(grid)?;
        let t = new_task(&mut self.cache, self.scope.as_ptr(), self.priority, || {
            DispatchPayload::new(grid, total, tiles)
        });
        self.adopt(t)
    }

    /// `task` counts toward `completion`: `completion` runs only after
    /// `task` (and its other predecessors) finished. Raises
    /// `completion`'s pending count.
    ///
    /// A task has one completion task; [`precede`](Self::precede) adds any
    /// number of other successors (edges it added before this call stay).
    ///
    /// Errors: `InvalidArgument` if `task` already has a completion task
    /// (set here, by `join_from` or by `fork_join`), if `completion` was
    /// created before `task` (edges go forward), or if either belongs to
    /// another graph; `ResourceExhausted` without task memory for the
    /// `precede` edge it moves aside.
    pub fn set_completion(&mut self, task: TaskId, completion: TaskId) -> Result<(), Error> {
        let (t, _) = (self.check(task)?, self.check(completion)?);
        if completion.seq <= task.seq {
            return Err(backward(task, completion));
        }
        if has_own_completion(t) {
            return Err(invalid_id(
                task,
                "already has a completion task; add more successors with `precede`",
            ));
        }
        // SAFETY: a task of this graph (checked), not submitted.
        self.set_completion_of(unsafe { task.task.as_ref() }, completion.task)
    }

    /// Makes `completion` `task`'s completion task, moving a `precede`
    /// edge that held the place to the task's other successors.
    fn set_completion_of(&mut self, t: &Task, completion: NonNull<Task>) -> Result<(), Error> {
        // `t` is a task of this graph (not borrowed from `self`: the
        // caller got it from a checked id or the task list).
        if let Some(edge) = t.completion_task.get() {
            // A `precede` edge (callers checked `has_own_completion`).
            t.successors
                .set(t.successors.get().add(&mut self.cache, edge)?);
        }
        t.completion_task.set(Some(completion));
        t.build.set(t.build.get() & !PRECEDED);
        // SAFETY: a task of this graph, not submitted.
        let was_root = add_predecessor(unsafe { completion.as_ref() });
        self.roots -= u32::from(was_root);
        Ok(())
    }

    /// `before` precedes `after`: `after` runs only once `before` (and its
    /// other predecessors) finished, and not at all if `before` failed.
    /// Any task may precede any number of later tasks, and follow any
    /// number of earlier ones (Taskflow's `a.precede(b)`); with
    /// [`set_completion`](Self::set_completion) and [`fork`](Self::fork)
    /// it builds any DAG. The first two successors of a task are kept in
    /// its header, more in edge blocks from the executor's task pool
    /// (allocation-free once warm, freed as the task retires). The same
    /// edge given twice counts twice (`after` waits for both, which
    /// `before` meets at once).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use fenceline::task::{Executor, ExecutorConfig, Scope};
    ///
    /// let exec = Executor::new(ExecutorConfig { workers: 2, ..Default::default() })?;
    /// let scope = Scope::new();
    /// let order = Arc::new(AtomicU32::new(0));
    /// let mut g = exec.graph(&scope);
    /// // A diamond: a before b and c, both before d.
    /// let step = |g: &mut fenceline::task::Graph<'_>, want: std::ops::RangeInclusive<u32>| {
    ///     let order = order.clone();
    ///     g.call(move |_| {
    ///         let seen = order.fetch_add(1, Ordering::SeqCst);
    ///         assert!(want.contains(&seen), "ran {seen}th");
    ///         Ok(())
    ///     })
    /// };
    /// let a = step(&mut g, 0..=0)?;
    /// let b = step(&mut g, 1..=2)?;
    /// let c = step(&mut g, 1..=2)?;
    /// let d = step(&mut g, 3..=3)?;
    /// g.precede(a, b)?;
    /// g.precede(a, c)?;
    /// g.precede(b, d)?;
    /// g.precede(c, d)?;
    /// g.submit();
    /// scope.wait_idle(Duration::from_secs(5))?;
    /// assert_eq!(order.load(Ordering::SeqCst), 4);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    ///
    /// Errors (nothing is changed then): `InvalidArgument` if `after` was
    /// created before `before`, or is `before` (edges go forward, so no
    /// graph has a cycle), or if either belongs to another graph;
    /// `ResourceExhausted` without task memory for an edge block.
    pub fn precede(&mut self, before: TaskId, after: TaskId) -> Result<(), Error> {
        self.check(before)?;
        self.check(after)?;
        if after.seq <= before.seq {
            return Err(backward(before, after));
        }
        // SAFETY: a task of this graph (checked), not submitted; only this
        // graph touches it.
        let b = unsafe { before.task.as_ref() };
        // SAFETY: a task of this graph (checked), not submitted; only this
        // graph touches it.
        let a = unsafe { after.task.as_ref() };
        if b.completion_task.get().is_none() {
            // The first successor takes the completion task's place (the
            // retiring worker's fast path); `set_completion` may still
            // claim it.
            b.completion_task.set(Some(after.task));
            b.build.set(b.build.get() | PRECEDED);
        } else {
            b.successors
                .set(b.successors.get().add(&mut self.cache, after.task)?);
        }
        let was_root = add_predecessor(a);
        self.roots -= u32::from(was_root);
        Ok(())
    }

    /// `dependent` runs only after `barrier` (and its other predecessors).
    ///
    /// Errors: `InvalidArgument` if `barrier` is not a barrier, if
    /// `dependent` was created before it or already follows a barrier, or
    /// if either belongs to another graph.
    pub fn fork(&mut self, barrier: TaskId, dependent: TaskId) -> Result<(), Error> {
        let (b, d) = (self.check(barrier)?, self.check(dependent)?);
        if !b.vtable.forks {
            return Err(not_a_barrier(barrier, b.vtable.name));
        }
        if dependent.seq <= barrier.seq {
            return Err(backward(barrier, dependent));
        }
        if d.build.get() & FORKED != 0 {
            return Err(invalid_id(dependent, "already follows a barrier"));
        }
        // SAFETY: a barrier's payload is a `BarrierPayload`; the graph owns
        // the task and nothing else touches it before submission.
        let p = unsafe { &mut *Task::payload_ptr::<BarrierPayload>(barrier.task) };
        // SAFETY: the graph owns the task, and `FORKED` says it is in no
        // barrier's list yet; it stays allocated until the barrier retires
        // (it cannot run before: the barrier counts toward it).
        p.dependents
            .push_back(unsafe { Handle::from_raw(dependent.task) });
        d.build.set(d.build.get() | FORKED);
        let was_root = add_predecessor(d);
        self.roots -= u32::from(was_root);
        Ok(())
    }

    /// A fork/join in one step: `n` calls after `barrier`, the `i`th
    /// running the closure `make(i)` returns, all counting toward a new
    /// join task (a nop) whose id is returned. The same graph as `n`
    /// [`call`](Self::call)s each [`fork`](Self::fork)ed from `barrier`
    /// and [`set_completion`](Self::set_completion)ed to a [`nop`](Self::nop)
    /// made after them, built in one pass: each call's block is written
    /// once, already in the ready chunks the barrier releases (the calls
    /// get no ids, so no other edge can reach them). With `n` zero the
    /// join is simply forked from `barrier`. Closures are stored as in
    /// `call`. (The calls are not in the graph's task list either: a
    /// [`join_from`](Self::join_from) over a run that holds them joins
    /// their join task, which follows them.)
    ///
    /// Errors (nothing is added then, and the closures made so far are
    /// dropped): `InvalidArgument` if `barrier` is not a barrier of this
    /// graph or the graph would pass `u32::MAX` tasks;
    /// `ResourceExhausted` without task memory. If `make` panics, the
    /// calls made so far are freed and the graph is left as it was.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use fenceline::task::{Executor, ExecutorConfig, Scope};
    ///
    /// let exec = Executor::new(ExecutorConfig { workers: 2, ..Default::default() })?;
    /// let scope = Scope::new();
    /// let sum = Arc::new(AtomicU64::new(0));
    /// let mut g = exec.graph(&scope);
    /// let fork = g.barrier()?;
    /// let join = g.fork_join(fork, 100, |i| {
    ///     let sum = sum.clone();
    ///     move |_| { sum.fetch_add(u64::from(i), Ordering::Relaxed); Ok(()) }
    /// })?;
    /// let seen = sum.clone();
    /// let after = g.finally(move |r| { r.unwrap(); assert_eq!(seen.load(Ordering::Relaxed), 4950) })?;
    /// g.set_completion(join, after)?;
    /// g.submit();
    /// scope.wait_idle(Duration::from_secs(5))?;
    /// assert_eq!(sum.load(Ordering::Relaxed), 4950);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn fork_join<M, F>(&mut self, barrier: TaskId, n: u32, mut make: M) -> Result<TaskId, Error>
    where
        M: FnMut(u32) -> F,
        F: FnMut(&mut CallContext<'_>) -> Result<(), Error> + Send + 'static,
    {
        let b = self.check(barrier)?;
        if !b.vtable.forks {
            return Err(not_a_barrier(barrier, b.vtable.name));
        }
        // The calls and the join.
        if self
            .count
            .checked_add(n)
            .and_then(|c| c.checked_add(1))
            .is_none()
        {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a fork/join of {n} calls: more than u32::MAX tasks in one graph"),
            ));
        }
        if n == 0 {
            let join = self.nop()?;
            self.fork(barrier, join)?;
            return Ok(join);
        }
        // The join's block first, so each call points at it as it is made;
        // it joins the task list (and takes its sequence number) last.
        let join = new_task(&mut self.cache, self.scope.as_ptr(), self.priority, || Nop)?;
        let (scope, priority) = (self.scope.as_ptr(), self.priority);
        let mut batch = Batch {
            graph: self,
            join,
            chunks: ReadyChunks::default(),
            done: false,
        };
        for i in 0..n {
            let task = make_call(&mut batch.graph.cache, scope, priority, make(i))?;
            // SAFETY: just made, ours alone.
            let t = unsafe { task.as_ref() };
            t.completion_task.set(Some(join));
            // Its only predecessor is the barrier, whose finish releases
            // the chunk: no count to decrement (`unfinished` stays 0).
            // SAFETY: in no list yet; the chunks own it from here.
            unsafe { batch.chunks.push(task) };
        }
        batch.done = true;
        let sole = std::mem::take(&mut batch.chunks).finish();
        drop(batch);
        // SAFETY: a barrier's payload is a `BarrierPayload`; the graph owns
        // the task and nothing else touches it before submission.
        unsafe { &mut *Task::payload_ptr::<BarrierPayload>(barrier.task) }
            .sole
            .append(&mut { sole });
        self.count += n;
        // SAFETY: the join is ours, not submitted; the calls count toward it.
        unsafe { join.as_ref() }.unfinished.set(n);
        let id = self.adopt(Ok(join))?;
        self.roots -= 1;
        Ok(id)
    }
}

/// Whether `task` has a completion task set by `set_completion`,
/// `join_from` or `fork_join` (not a `precede` edge in its place).
fn has_own_completion(task: &Task) -> bool {
    task.completion_task.get().is_some() && task.build.get() & PRECEDED == 0
}

/// Counts one more predecessor of `task`, a task of a graph being built:
/// `true` if it had none (it was a root).
fn add_predecessor(task: &Task) -> bool {
    let was_root = task.unfinished.get() == 0;
    // Not submitted yet: only this thread sees the task.
    task.unfinished.add_unshared();
    was_root
}

/// A fork/join's calls while [`Graph::fork_join`] makes them: freed with
/// the join's block if it returns early (out of blocks) or `make` panics.
struct Batch<'g, 'e> {
    graph: &'g mut Graph<'e>,
    join: NonNull<Task>,
    chunks: ReadyChunks,
    /// Handed over to the barrier (nothing left to free).
    done: bool,
}

impl Drop for Batch<'_, '_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let chunks = std::mem::take(&mut self.chunks).finish();
        // SAFETY: the batch's calls, made from the graph's cache and never
        // handed out: ours alone.
        unsafe { free_chunks(&mut self.graph.cache, chunks) };
        // SAFETY: the batch's join, made from the graph's cache and never
        // handed out: ours alone.
        unsafe { free_unsubmitted(&mut self.graph.cache, self.join) };
    }
}

// The graph's errors, out of line: building a graph calls `check`,
// `fork` and `set_completion` per task, whose checks almost never fail.

#[cold]
#[inline(never)]
fn invalid_id(id: TaskId, what: &str) -> Error {
    Error::new(ErrorKind::InvalidArgument, format!("{id:?} {what}"))
}

#[cold]
#[inline(never)]
fn not_a_barrier(id: TaskId, kind: &str) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("{id:?} is a {kind}, not a barrier"),
    )
}

#[cold]
#[inline(never)]
fn backward(from: TaskId, to: TaskId) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!(
            "edge from {from:?} to {to:?}: edges go from an earlier task to a later one (no cycles)"
        ),
    )
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        // Not submitted (or already emptied by `submit`): free every task
        // without running it. They were never counted.
        while let Some(task) = self.tasks.pop_front() {
            let task = task.into_raw();
            // A barrier's fork/join calls (`fork_join`) are in its ready
            // chunks, not in the task list.
            // SAFETY: the graph owns its unsubmitted tasks (`take_sole`
            // allows one never submitted).
            let sole = unsafe { take_sole(task) };
            // SAFETY: the graph owns its unsubmitted tasks and their
            // chunks; no borrow of the cache is held.
            unsafe { free_chunks(&mut self.cache, sole) };
            // SAFETY: the graph owns its unsubmitted tasks; no borrow of the
            // cache is held.
            unsafe { free_unsubmitted(&mut self.cache, task) };
        }
        if self.owns_scope {
            // SAFETY: the graph's own clone, dropped once, here.
            unsafe { ManuallyDrop::drop(&mut self.scope) };
        }
    }
}

// A user's graph may be built on one thread and submitted on another.
static_assertions::assert_impl_all!(Graph<'static>: Send);
