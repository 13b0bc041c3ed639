//! Submission: handing a built graph's tasks to the executor (the walk
//! that stops at the last root or barrier, ready chunks for a barrier's
//! sole dependents), and a single `finally` task submitted with no graph.

use super::*;

impl Graph<'_> {
    /// Hands every task to the executor; those without predecessors start.
    #[inline]
    pub fn submit(mut self) {
        self.submit_in_place();
    }

    /// [`submit`](Self::submit) without moving the graph (a few hundred
    /// bytes with its own block cache): the graph is left empty, and its
    /// drop then frees nothing.
    pub(crate) fn submit_in_place(&mut self) {
        if self.count == 0 {
            return;
        }
        // The walk below trusts these counts: check them (debug builds)
        // while a failure still leaves the graph whole (dropped, it frees
        // every task).
        #[cfg(debug_assertions)]
        {
            let (mut roots, mut forks) = (0, 0);
            for t in self.tasks.iter() {
                // SAFETY: tasks of this graph, not handed over yet.
                let t = unsafe { t.as_ref() };
                roots += u32::from(t.unfinished.get() == 0);
                forks += u32::from(t.vtable.forks);
            }
            assert_eq!(
                (roots, forks),
                (self.roots, self.barriers),
                "roots, barriers"
            );
        }
        // Count every task in its scope and in the executor at once, before
        // any can run (and retire).
        // SAFETY: the scope handle we hold keeps it alive.
        unsafe { ScopeInner::enter(self.scope.as_ptr(), &self.scope, self.count as usize) };
        self.exec
            .live
            .fetch_add(self.count as usize, crate::sync::atomic::Ordering::Relaxed);
        // The first `CHUNK` roots, handed over as a list (a completion's
        // hop puts them on its worker's deque); the rest straight into
        // ready chunks as the walk meets them (one walk, not a walk and
        // then a split).
        let mut first = SList::<QueueLink>::new();
        let mut more = ReadyChunks::default();
        // Barriers: their dependents' queue links are free only once the
        // walk is over (they come later in the task list), so they are
        // chunked after it; their queue links, free once out of the task
        // list, link them here for a moment.
        let mut barriers = SList::<QueueLink>::new();
        // The walk stops once it has met every root and every barrier
        // (counted while building): the rest of the list holds only tasks
        // that wait for a predecessor and fork nothing, owned through
        // their predecessors from now on, so a 10k chain's submission is
        // one step, not a walk of 10k cache lines. Their queue links are
        // left as they are: only pushes, which overwrite them, use them
        // again.
        let (mut roots, mut forks) = (self.roots, self.barriers);
        while roots + forks > 0 {
            let Some(task) = self.tasks.pop_front() else {
                break;
            };
            // SAFETY: the graph owns the task until here.
            let t = unsafe { task.as_ptr().as_ref() };
            // Its fork link holds the task made `PREFETCH_AHEAD` places
            // later (or, in a barrier's list, its next dependent): fetched
            // now, a wide graph's walk overlaps its misses instead of
            // taking them one after another.
            // SAFETY: ours; the link is only read.
            if let Some(ahead) = unsafe { crate::list::links_next::<ForkLink>(task.as_ptr()) } {
                Task::prefetch(ahead);
            }
            let root = t.unfinished.get() == 0;
            roots -= u32::from(root);
            if t.vtable.forks {
                forks -= 1;
                barriers.push_back(task);
            } else if root {
                // SAFETY: a root of this graph, out of the task list.
                unsafe { push_ready(&mut first, &mut more, task.into_raw()) };
                // A wide graph's chunks go out as they fill: the workers
                // run the first ones while this walk goes on.
                if let Some(full) = more.take_done() {
                    self.exec.push_chunks(full);
                    self.exec.notify();
                }
            }
        }
        self.tasks = SList::new();
        // The tasks are the executor's now: no later hint may touch them.
        self.recent = [None; PREFETCH_AHEAD];
        // Every queue link is free now but those of the ready tasks and
        // `barriers`: a barrier's dependents that have no other
        // predecessor (and are not barriers, which `barriers` may link) go
        // into ready chunks; a barrier that is a root is ready itself.
        while let Some(b) = barriers.pop_front().map(Handle::into_raw) {
            // SAFETY: a task of this graph, not yet handed over; the queue
            // links of its dependents are free (above).
            unsafe { chunk_sole_dependents(b) };
            // SAFETY: a task of this graph, not yet handed over.
            if unsafe { b.as_ref() }.unfinished.get() == 0 {
                // SAFETY: a task of this graph, not yet handed over, ready.
                unsafe { push_ready(&mut first, &mut more, b) };
            }
        }
        let more = more.finish();
        if !more.is_empty() {
            self.exec.push_chunks(more);
            self.exec.notify();
        }
        if let Err(first) = self.exec.hop(first) {
            self.exec.inject_list(first);
        }
    }
}

/// Adds a ready root to the first `CHUNK` (`first`), or past them to
/// `more`.
///
/// # Safety
/// The caller owns `task`, a ready task of a graph being submitted whose
/// queue link is free and which is in no fork list.
unsafe fn push_ready(first: &mut SList<QueueLink>, more: &mut ReadyChunks, task: NonNull<Task>) {
    if first.len() < CHUNK {
        // SAFETY: per contract.
        first.push_back(unsafe { Handle::from_raw(task) });
    } else {
        // SAFETY: per contract.
        unsafe { more.push(task) };
    }
}

/// Submits one `finally` task alone, with no graph around it: what a
/// submission that is a single task (a one-command execute, a host call)
/// needs, without a graph's identity, task list, counts and submit walk.
/// The task has priority `priority`.
/// `f` gets `Ok(())` (the task has no predecessor). Out of task blocks:
/// `f` is dropped uncalled and the error returned.
///
/// # Safety
/// As for [`Graph::with_cache`]: `cache` gives blocks of `exec`'s pool (a
/// cache of it, or the pool itself), used only on this thread and not
/// borrowed elsewhere during the call; `scope` (a handle the caller keeps,
/// or one `f` owns) stays alive while the task may read it.
pub(crate) unsafe fn submit_finally<F, C>(
    exec: &ExecutorState,
    scope: &Scope,
    cache: NonNull<C>,
    priority: Priority,
    f: F,
) -> Result<(), Error>
where
    F: FnOnce(Result<(), Error>) + Send + 'static,
    C: BlockSource + ?Sized,
{
    // SAFETY: per contract, the cache is ours for this one acquire.
    let cache = unsafe { &mut *cache.as_ptr() };
    let task = new_task(cache, scope.as_ptr(), priority, || FinallyPayload::new(f))?;
    // Counted in its scope before it can run, as `Graph::submit` counts a
    // graph's tasks.
    // SAFETY: the caller's handle keeps the scope alive.
    unsafe { ScopeInner::enter(scope.as_ptr(), scope, 1) };
    // A chain's hop: next on this worker, counted in the executor by the
    // task running here (no RMW). Otherwise counted before anyone can
    // run it.
    let Err(task) = exec.hop_alone(task) else {
        return Ok(());
    };
    exec.live
        .fetch_add(1, crate::sync::atomic::Ordering::Relaxed);
    let mut ready = SList::<QueueLink>::new();
    // SAFETY: just made, ready (no predecessor), in no list.
    ready.push_back(unsafe { Handle::from_raw(task) });
    if let Err(ready) = exec.hop(ready) {
        exec.inject_list(ready);
    }
    Ok(())
}

/// Moves the dependents of `task`, if it is a barrier, whose only
/// predecessor it is into ready chunks (`BarrierPayload::sole`): the
/// barrier's worker then releases them with no count to decrement and
/// hands all chunks but one to the other workers without walking them (a
/// 1024-way fork's release was a walk of 1024 tasks on one worker, a
/// cache miss each, on blocks the building thread wrote).
///
/// # Safety
/// `task` is a task of a graph being submitted, not yet handed to the
/// executor, whose dependents' queue links are free (not in the graph's
/// task list any more, nor in a ready or barrier list: a barrier
/// dependent is left in the fork list).
unsafe fn chunk_sole_dependents(task: NonNull<Task>) {
    // SAFETY: a task of the graph, per contract.
    if !unsafe { task.as_ref() }.vtable.forks {
        return;
    }
    // SAFETY: a barrier's payload is a `BarrierPayload`; the submitting
    // graph is the only one touching it.
    let p = unsafe { &mut *Task::payload_ptr::<BarrierPayload>(task) };
    let mut shared = SList::<ForkLink>::new();
    let mut chunks = ReadyChunks::default();
    while let Some(d) = p.dependents.pop_front() {
        // SAFETY: a dependent outlives its barrier; the graph owns it.
        let dt = unsafe { d.as_ptr().as_ref() };
        if dt.unfinished.get() == 1 && !dt.vtable.forks {
            // Made ready by the barrier's finish alone: the count is
            // spent now (nobody else will decrement it).
            dt.unfinished.set(0);
            // SAFETY: out of the fork list (just popped) and its queue
            // link is free per contract.
            unsafe { chunks.push(d.into_raw()) };
        } else {
            shared.push_back(d);
        }
    }
    p.sole.append(&mut chunks.finish());
    p.dependents = shared;
}

/// Ready tasks gathered into chunks in the injector's form (see
/// `BarrierPayload::sole`), each task but a chunk's first carrying a
/// prefetch hint `PREFETCH_AHEAD` places on in its chunk.
#[derive(Default)]
pub(super) struct ReadyChunks {
    done: SList<ForkLink>,
    chunk: SList<QueueLink>,
    /// The chunk's last `PREFETCH_AHEAD` tasks, for the hints.
    recent: [Option<NonNull<Task>>; PREFETCH_AHEAD],
}

impl ReadyChunks {
    /// Appends `task` to the current chunk.
    ///
    /// # Safety
    /// The caller owns `task`, which is in no list (its queue and fork
    /// links are free), and hands it over to the chunks.
    pub(super) unsafe fn push(&mut self, task: NonNull<Task>) {
        // The task `PREFETCH_AHEAD` places back (not the chunk's first,
        // whose fork link the chunk list takes) points here.
        #[allow(clippy::modulo_one)] // `PREFETCH_AHEAD` is 1 under loom
        let slot = &mut self.recent[self.chunk.len() % PREFETCH_AHEAD];
        if let Some(back) = slot.take().filter(|_| self.chunk.len() > PREFETCH_AHEAD) {
            // SAFETY: a task of this chunk, in no fork list.
            unsafe { set_prefetch_hint(back, task) };
        }
        *slot = Some(task);
        // SAFETY: per contract.
        self.chunk.push_back(unsafe { Handle::from_raw(task) });
        if self.chunk.len() == CHUNK {
            self.done
                .append(&mut ExecutorState::chunk(std::mem::take(&mut self.chunk)));
        }
    }

    /// The chunks filled so far, if any (the current one stays open).
    pub(super) fn take_done(&mut self) -> Option<SList<ForkLink>> {
        (!self.done.is_empty()).then(|| std::mem::take(&mut self.done))
    }

    /// Every chunk, the last one closed.
    pub(super) fn finish(mut self) -> SList<ForkLink> {
        if !self.chunk.is_empty() {
            self.done
                .append(&mut ExecutorState::chunk(std::mem::take(&mut self.chunk)));
        }
        std::mem::take(&mut self.done)
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::*;
    use crate::task::{Executor, ExecutorConfig};

    /// Creation-order prefetch hints (`Graph::adopt`): each task points
    /// at the task made `PREFETCH_AHEAD` places after it, but a task
    /// already in a barrier's list keeps that list's link, and a task
    /// forked after its hint was set has the list's link instead. Mutation
    /// checked: without `adopt`'s `forked` check, the first dependent's
    /// link points at a later task; that fails the link check (with the
    /// link checks taken out, the run hangs: the barrier's list runs on
    /// into the chain).
    #[test]
    fn tasks_hint_the_task_made_prefetch_ahead_places_later() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let exec = Executor::new(ExecutorConfig {
            workers: 2,
            ..Default::default()
        })
        .unwrap();
        let scope = Scope::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let mut g = exec.graph(&scope);
        let count = |g: &mut Graph<'_>| {
            let runs = runs.clone();
            g.call(move |_| {
                runs.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap()
        };
        let (fork, other) = (g.barrier().unwrap(), g.barrier().unwrap());
        // In the barrier's list (its last) before its hint would be set.
        let early = count(&mut g);
        g.fork(fork, early).unwrap();
        // Hinted first, forked once the hint is set.
        let late = count(&mut g);
        let n = 2 * PREFETCH_AHEAD + 3;
        let rest: Vec<TaskId> = (0..n).map(|_| count(&mut g)).collect();
        let all: Vec<NonNull<Task>> = g.tasks.iter().collect();
        for (i, &t) in all.iter().enumerate() {
            // SAFETY: a task of the graph, not submitted.
            let hint = unsafe { crate::list::links_next::<ForkLink>(t) };
            if t == early.task {
                assert_eq!(hint, None, "the forked task's link is its list's");
            } else {
                assert_eq!(hint, all.get(i + PREFETCH_AHEAD).copied(), "task {i}");
            }
        }
        g.fork(other, late).unwrap();
        // SAFETY: as above.
        let late_link = unsafe { crate::list::links_next::<ForkLink>(late.task) };
        assert_eq!(late_link, None, "a fork takes the hinted task's link");
        // Every task runs once: the hints are never followed as links.
        for w in rest.windows(2) {
            g.set_completion(w[0], w[1]).unwrap();
        }
        g.submit();
        scope.wait_idle(std::time::Duration::from_secs(10)).unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), n + 2);
    }

    /// The prefetch hints of a barrier's ready chunks: each task but a
    /// chunk's first points `PREFETCH_AHEAD` places on in its own chunk, and
    /// no hint crosses a chunk or points at a chunk's first task (whose
    /// fork link the chunk list takes). Fails if the hints are off by one,
    /// start at the first task, or run on across chunks (mutation checked:
    /// hints from the second task on, `> PREFETCH_AHEAD + 1`: fails).
    #[test]
    fn ready_chunks_carry_prefetch_hints_ahead_within_each_chunk() {
        let exec = Executor::new(ExecutorConfig {
            workers: 1,
            ..Default::default()
        })
        .unwrap();
        let scope = Scope::new();
        let mut g = exec.graph(&scope);
        let fork = g.barrier().unwrap();
        let n = CHUNK + PREFETCH_AHEAD + 3;
        for _ in 0..n {
            let d = g.nop().unwrap();
            g.fork(fork, d).unwrap();
        }
        // Take the tasks out of the graph's list (as `submit` does) and
        // chunk the barrier's dependents.
        let mut all = Vec::new();
        while let Some(t) = g.tasks.pop_front() {
            all.push(t.into_raw());
        }
        // SAFETY: the graph's tasks, out of its list, not handed over.
        unsafe { chunk_sole_dependents(fork.task) };
        // SAFETY: the graph's tasks, out of its list, not handed over.
        let mut sole = unsafe { crate::task::kind::take_sole(fork.task) };
        let mut lens = Vec::new();
        while let Some(head) = sole.pop_front().map(Handle::into_raw) {
            // SAFETY: a chunk's chain of this graph's tasks.
            let mut chunk = unsafe { SList::<QueueLink>::from_chain(head) };
            let mut tasks = Vec::new();
            while let Some(t) = chunk.pop_front() {
                tasks.push(t.into_raw());
            }
            for (i, &t) in tasks.iter().enumerate() {
                // SAFETY: ours; its fork link holds a hint or nothing.
                let hint = unsafe { crate::list::links_next::<ForkLink>(t) };
                let want = (i >= 1).then(|| tasks.get(i + PREFETCH_AHEAD).copied());
                assert_eq!(
                    hint,
                    want.flatten(),
                    "task {i} of a chunk of {}",
                    tasks.len()
                );
                // SAFETY: as above; cleared before the graph frees it.
                unsafe { crate::list::set_links_next::<ForkLink>(t, None) };
            }
            lens.push(tasks.len());
        }
        assert_eq!(lens, [CHUNK, n - CHUNK]);
        // Give the tasks back for the graph to free.
        for t in all {
            // SAFETY: ours, in no list now.
            g.tasks.push_back(unsafe { Handle::from_raw(t) });
        }
    }
}
