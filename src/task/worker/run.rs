//! Running tasks: one task's execution, the run loop over a chain of
//! tasks, issuer turns, held join decrements.

use super::*;

impl Worker {
    /// Runs `task`, then whatever it makes ready next, on this worker.
    pub(crate) fn execute(&mut self, task: NonNull<Task>) {
        if !self.busy {
            // Leaving idle: the worker's half of `offer_turn`'s protocol.
            // A turn offered while this worker read as idle runs before
            // `task`, which may block.
            self.busy = true;
            self.set_running(true);
            // SeqCst: pairs with the fence in `ExecutorState::offer_turn`
            // (hop.rs): flag store then cell loads here, cell store then
            // flag loads there, so at least one sees the other.
            fence(Ordering::SeqCst);
            self.run_turns();
        }
        self.run_tasks(task);
    }

    /// This worker's `running` flag: a store, not an RMW (its alone).
    pub(super) fn set_running(&self, running: bool) {
        self.shared.seats[self.index]
            .counters
            .running
            .store(running, Ordering::Relaxed);
    }

    /// Runs the issuer turns offered in the executor's turn cells
    /// ([`ExecutorState::offer_turn`]); `true` if there were any. Called
    /// when the worker leaves idle (flag already set) and from
    /// [`find`](Self::find) once out of local work (before the injector:
    /// a turn waits for no queued task). An idle
    /// worker's flag reads busy while it drains, so a turn offered
    /// meanwhile (the other workers busy too) is taken back by its
    /// offerer, who drains it at once, rather than queued behind this
    /// drain; it is cleared again after (a drain runs no task, and an idle
    /// worker still looks at the cells before its next task).
    pub(super) fn run_turns(&self) -> bool {
        let Some(run) = self.shared.run_turn else {
            return false;
        };
        let mut any = false;
        for cell in self.shared.turns.iter() {
            // A load first: the cells' line stays shared while empty.
            if cell.load(Ordering::Relaxed).is_null() {
                continue;
            }
            // Acquire: pairs with the offer's release store.
            if let Some(turn) = NonNull::new(cell.swap(std::ptr::null_mut(), Ordering::Acquire)) {
                if !any && !self.busy {
                    self.set_running(true);
                }
                any = true;
                // A turn issues work and runs no task; a panic out of it
                // (a backend's) must not end the worker: the queue's drain
                // gave the turn back before rethrowing it.
                // SAFETY: offered through `offer_turn` (the runner's
                // contract) and taken from its cell by the swap above,
                // once.
                let _ =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { run(turn) }));
            }
        }
        if any && !self.busy {
            self.set_running(false);
        }
        any
    }

    /// Runs `task`, then the tasks it makes ready here, until none.
    fn run_tasks(&mut self, mut task: NonNull<Task>) {
        loop {
            // SAFETY: a ready task is owned by the worker running it.
            let t = unsafe { task.as_ref() };
            if self.levels {
                self.ticks += 1;
            }
            // Its fork link holds a prefetch hint or nothing: a barrier's
            // dependent leaves the barrier's list, a chunk's head the
            // chunk list, before either can run (see `set_prefetch_hint`).
            // SAFETY: ours, and no list links it through that field.
            if let Some(ahead) = unsafe { crate::list::links_next::<ForkLink>(task) } {
                Task::prefetch(ahead);
            }
            // Decrements held for another join go out first: this task may
            // run long (or block), and the join does not wait for it.
            if let Some((held, _)) = self.held_join {
                if t.completion_task.get() != Some(held) {
                    if let Some(ready) = self.release_join() {
                        self.push(ready);
                    }
                }
            }
            // Before running anything (it may block): every other ready
            // task reachable by other workers, and retirements of another
            // scope published.
            self.publish();
            if self
                .retired_scope
                .is_some_and(|(scope, _)| scope != t.scope)
            {
                self.flush();
            }
            // Acquire: pairs with no Release (the flags are set Relaxed): a
            // predecessor's mark comes before its AcqRel decrement of
            // `unfinished` (a cancel before the injector's push), which
            // orders it before this run.
            let flags = t.flags.load(Ordering::Acquire);
            let outcome = if flags & FLAG_FAILED != 0 {
                // A predecessor failed: skip the payload (its failure is
                // already the scope's), but pass it on.
                // SAFETY: the vtable matches the payload.
                unsafe { (t.vtable.skip)(task) };
                Outcome::Done(Err(Error::new(ErrorKind::Aborted, "a predecessor failed")))
            } else {
                t.runs.set(t.runs.get().saturating_add(1));
                // Read before the run: a task that suspends may be
                // finished, freed and its block reused by another worker
                // before `run` returns here (Miri caught the trace reading
                // them after).
                let (start, scope, kind) = (crate::trace::now(), t.scope, t.vtable.name);
                // SAFETY: the vtable matches the payload (set at creation).
                let outcome = unsafe { (t.vtable.run)(task, TaskContext::of(self)) };
                crate::trace::span(
                    crate::trace::Kind::Task,
                    start,
                    task.as_ptr() as u64,
                    scope.as_ptr() as u64,
                    crate::trace::task_kind(kind),
                );
                outcome
            };
            // The error alone is moved out, only when there is one (moving
            // the whole 32-byte result was 15 of a chain hop's 175 worker
            // instructions).
            let mut error = match outcome {
                Outcome::Suspended => return,
                Outcome::Done(Ok(())) => None,
                Outcome::Done(Err(e)) => Some(e),
            };
            // Drop the payload now, under the guard: a panic in its
            // captures' `Drop` fails the task like a panic of its body
            // (the body's own error, if any, is the one kept).
            // SAFETY: done; the payload is dropped once, here.
            if let Err(e) = unsafe { drop_payload(task) } {
                error.get_or_insert(e);
            }
            let failed = match error {
                None => false,
                Some(e) => {
                    if flags & FLAG_FAILED == 0 || flags & FLAG_CANCELLED != 0 {
                        // SAFETY: the task keeps its scope alive.
                        unsafe { t.scope.as_ref() }.record(e);
                    }
                    true
                }
            };
            // A hop during the run (its completion readied the next
            // action) left that action's only task: run it next, after
            // anything the retirement makes ready here is pushed.
            let hopped = self.take_next();
            let next = self.retire(task, failed);
            match (next, hopped) {
                (Some(n), Some(h)) => {
                    self.push(h);
                    task = n;
                }
                (Some(n), None) | (None, Some(n)) => task = n,
                (None, None) => return,
            }
            // With levels, the task to continue with yields to a higher
            // level's waiting task, and to a fairness pick: back where it
            // waits, and the worker looks for work in order.
            if self.levels
                && (self.ticks >= Priority::FAIRNESS_PERIOD || self.outranked(Task::priority(task)))
            {
                self.push(task);
                return;
            }
        }
    }

    /// Releases the decrements held back in `held_join`: the completion
    /// task, if that made it ready (the caller runs or pushes it).
    pub(super) fn release_join(&mut self) -> Option<NonNull<Task>> {
        let (c, n) = self.held_join.take()?;
        // SAFETY: a completion task outlives its predecessors; the held
        // decrements keep it from running (and being freed) until here.
        unsafe { c.as_ref() }.finish(n).then_some(c)
    }
}
