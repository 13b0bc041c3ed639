//! Looking for work (own deque, steals, the injector), idling, parking
//! and timed waits.

use super::*;

impl Worker {
    /// The next task to run: a hop's, own deque, injector, steal (with
    /// levels: see [`find_leveled`](Self::find_leveled)).
    pub(super) fn find(&mut self) -> Option<NonNull<Task>> {
        if self.levels {
            return self.find_leveled();
        }
        self.find_normal()
    }

    /// The next task to run on an executor with levels: `High` first
    /// (a hop's, if it is one, then the `High` injector), then `Normal`
    /// (as [`find_normal`](Self::find_normal)), then `Low`. A fairness
    /// turn, after every `FAIRNESS_PERIOD` tasks started, looks below the
    /// top first: `Low` then `Normal`, or `Normal` then `Low`, in turn.
    /// Looks at every level before it says none (the idle re-check before
    /// parking relies on that: a task of any level published before the
    /// worker's epoch read is found).
    fn find_leveled(&mut self) -> Option<NonNull<Task>> {
        if self.ticks >= Priority::FAIRNESS_PERIOD {
            self.ticks = 0;
            self.low_first = !self.low_first;
            let below = if self.low_first {
                match self.take_level(Priority::Low) {
                    Some(t) => Some(t),
                    None => self.find_normal(),
                }
            } else {
                match self.find_normal() {
                    Some(t) => Some(t),
                    None => self.take_level(Priority::Low),
                }
            };
            return below.or_else(|| self.take_level(Priority::High));
        }
        if let Some(t) = self.take_next() {
            if Task::priority(t) == Priority::High || !self.shared.high_waiting() {
                return Some(t);
            }
            // A `Normal` task (a `Low` one never hops) outranked: back on
            // the deque, where it is announced before anything runs.
            self.push(t);
        }
        // Issuer turns first: what they issue may outrank everything here.
        self.run_turns();
        if let Some(t) = self.take_high() {
            return Some(t);
        }
        if let Some(t) = self.find_normal() {
            return Some(t);
        }
        // Turns taken by `find_normal` may have issued `High` work.
        if let Some(t) = self.take_high() {
            return Some(t);
        }
        self.take_level(Priority::Low)
    }

    /// A `High` task, if any is counted. While `High` chunks are counted,
    /// one is in the injector or in another worker's hands for a moment
    /// (taken with the rest of the injector, given back but one task):
    /// this waits for it rather than let the caller take a lower task.
    fn take_high(&mut self) -> Option<NonNull<Task>> {
        while self.shared.high_waiting() {
            if let Some(t) = self.take_level(Priority::High) {
                return Some(t);
            }
            crate::sync::hint::spin_loop();
        }
        None
    }

    /// One task from the injector of `level` (`High` or `Low`), if any:
    /// the oldest chunk's first task; the chunk's rest stays first in line
    /// as a chunk of its own (no walk: its second task heads it).
    fn take_level(&mut self, level: Priority) -> Option<NonNull<Task>> {
        let taken = self.shared.injector_for(level).take(|chunk, front| {
            let first = chunk.into_raw();
            // SAFETY: the chunk's chain (through queue links) was given up
            // to the injector and is ours now that the take gave us its
            // head.
            match unsafe { crate::list::links_next::<QueueLink>(first) } {
                Some(second) => {
                    // SAFETY: `second` is ours (the chunk's chain is); a
                    // chunk's tasks but its head have a free fork link (a
                    // hint or nothing), which the injector's list may take.
                    front.push_front(unsafe { Handle::from_raw(second) });
                    (first, false)
                }
                None => (first, true),
            }
        });
        let Take::Taken {
            value: (first, gone),
            left,
        } = taken
        else {
            return None;
        };
        // The chunk is gone: counted out (after the take, so the count
        // never reads zero while the chunk is out of sight).
        // AcqRel: pairs with the Acquire load in `high_waiting` and the
        // increments in `push_chunks` (state.rs); only the count is read
        // through it (the tasks come through the injector's ordering).
        if gone && level == Priority::High {
            self.shared.high_chunks.fetch_sub(1, Ordering::AcqRel);
        }
        if left {
            // Workers that found it empty while we held it may be parking.
            self.shared.notify();
        }
        Some(first)
    }

    /// Whether a ready task of a higher priority than `priority` waits
    /// (with levels): a `Normal` or `Low` task that would run next yields
    /// to it.
    /// `Normal` work counts wherever it is: an injector or any deque.
    pub(in crate::task) fn outranked(&self, priority: Priority) -> bool {
        match priority {
            Priority::High => false,
            Priority::Normal => self.shared.high_waiting(),
            Priority::Low => {
                self.shared.high_waiting()
                    || !self.shared.injector.is_empty()
                    || self.shared.stealers.iter().any(|s| !s.is_empty())
            }
        }
    }

    /// The next `Normal` task (every task, with no levels): a hop's, own
    /// deque, injector, steal.
    fn find_normal(&mut self) -> Option<NonNull<Task>> {
        if let Some(t) = self.take_next() {
            return Some(t);
        }
        self.take_hopped();
        if self.spill.is_empty() {
            if let Some(t) = self.local().pop() {
                if self.local().is_empty() {
                    // We run the only task there was: nobody else needs to
                    // hear of it (a hop's next action stays on this worker
                    // with no wake-up).
                    self.unannounced = false;
                } else {
                    self.publish();
                }
                return Some(t.0);
            }
        }
        // Nothing left here: held decrements go out before looking
        // elsewhere (or parking); the join they complete runs here.
        if let Some(ready) = self.release_join() {
            self.publish();
            return Some(ready);
        }
        self.publish();
        if let Some(t) = self.local().pop() {
            return Some(t.0);
        }
        // Issuer turns offered to the workers: drained here, the tasks
        // they issue land on our deque.
        if self.run_turns() {
            if let Some(t) = self.local().pop() {
                self.unannounced |= !self.local().is_empty();
                return Some(t.0);
            }
        }
        // The oldest chunk: its first task runs here, the rest goes on our
        // deque (stealable there); the other chunks stay in the injector.
        if let Take::Taken { value: head, left } =
            self.shared.injector.take(|head, _| head.into_raw())
        {
            // SAFETY: the chunk's chain was given up to the injector by
            // `chunk` and is ours now that the take gave us its head.
            let mut taken = unsafe { walk_chunk(head) };
            let first = taken.pop_front().map(Handle::into_raw);
            let Some(first) = first else {
                unreachable!("a chunk holds a task");
            };
            while self.local().len() < LOCAL_CAP {
                match taken.pop_front() {
                    Some(t) => self.local().push(TaskPtr(t.into_raw())),
                    None => break,
                }
            }
            // A chunk fits an empty deque and the task run: a rest is only
            // possible if the deque was not empty, and goes back whole.
            let rest = !taken.is_empty();
            if rest {
                self.shared.push_chunks(ExecutorState::chunk(taken));
            }
            if left || rest {
                // Workers that found the injector empty while we held its
                // token may be parking; this covers the tasks kept too.
                self.shared.notify();
            } else {
                // Workers woken for these may have found the injector
                // empty: tell them before running `first`.
                self.unannounced |= !self.local().is_empty();
            }
            return Some(first);
        }
        let n = self.shared.stealers.len();
        for k in 1..n {
            let victim = (self.index + k) % n;
            loop {
                match self.shared.stealers[victim].steal_batch_and_pop(self.local()) {
                    Steal::Success(t) => {
                        WorkerCounters::bump(&self.shared.seats[self.index].counters.steals);
                        crate::trace::instant(crate::trace::Kind::Steal, 0, victim as u64, 0);
                        // The rest of the batch sits on our deque now.
                        self.unannounced |= !self.local().is_empty();
                        return Some(t.0);
                    }
                    Steal::Empty => break,
                    Steal::Retry => continue,
                }
            }
        }
        None
    }

    /// No work found: spin a little, then park. `false`: time to exit.
    pub(super) fn idle(&mut self) -> bool {
        self.flush();
        if self.busy {
            self.busy = false;
            self.set_running(false);
        }
        // SAFETY: `self.shared` is never reassigned, and the `Arc` keeps
        // the state alive for as long as this worker (a borrow through a
        // pointer, not a clone: two read-modify-writes per idle cycle).
        let shared: &ExecutorState = unsafe { &*Arc::as_ptr(&self.shared) };
        let epoch = shared.sleep.epoch();
        #[cfg(not(fenceline_loom))]
        if shared.spin {
            // Poll the epoch with one `pause` between reads (see
            // `SPIN_POLLING`), then yield.
            let since = Instant::now();
            loop {
                for _ in 0..32 {
                    if shared.sleep.epoch() != epoch {
                        return true;
                    }
                    crate::sync::hint::spin_loop();
                }
                // The clock is read once a batch (about 0.8 us).
                if since.elapsed() >= SPIN_POLLING {
                    break;
                }
            }
            let since = Instant::now();
            while since.elapsed() < SPIN_YIELDING {
                std::thread::yield_now();
                if shared.sleep.epoch() != epoch {
                    return true;
                }
            }
        }
        if let Some(task) = self.find() {
            self.execute(task);
            return true;
        }
        if self.expire_waits() {
            return true; // requeued waits on our own deque: run them
        }
        // The fence pairs with those of `flush` and `begin_shutdown`.
        fence(Ordering::SeqCst);
        if shared.shutdown.load(Ordering::Acquire) && shared.live.load(Ordering::Acquire) == 0 {
            return false;
        }
        // Park, also at shutdown while some task still runs elsewhere: the
        // worker that retires the last one wakes everyone (`flush`), and
        // its epoch bump stops us from parking past it (`announce`).
        let seat = &shared.seats[self.index];
        // Read before the flag is armed: nothing between the announce and
        // the park takes a lock (a lock there held the worker while a
        // waker unparked it; under loom, whose blocked lock drops a
        // pending unpark, that worker then parked for good). A deadline
        // listed after this read comes with a `notify`, which this worker
        // sees in its announce or is woken by.
        let deadline = self.nearest_deadline();
        // Release: pairs with the Acquire of the swap in `Sleeper::wake`
        // (src/sync/sleeper.rs), which then reads our thread handle.
        seat.sleeper.arm(Ordering::Release);
        if shared.sleep.announce(epoch) {
            let counters = &seat.counters;
            WorkerCounters::bump(&counters.parks);
            let parked = crate::trace::now();
            // Sleep until the epoch moves: every wake (`notify`, `wake_all`)
            // bumps it before unparking, so a wake-up is never missed and a
            // stale unpark token only costs one more look. (No look before
            // the first park: `announce` just read the epoch unchanged, and
            // a waker after it finds our flag set.)
            loop {
                match deadline {
                    None => crate::sync::thread::park(),
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            break;
                        }
                        crate::sync::park_timeout(d - now);
                    }
                }
                if shared.sleep.epoch_now() != epoch {
                    WorkerCounters::bump(&counters.wakeups);
                    break; // the usual wake-up: one RMW
                }
                // Woken to an unchanged epoch: a waker whose bump we had
                // already seen (it came before our epoch read) may have
                // taken our flag, and we are about to park again. Arm it
                // again before looking once more: without this a later
                // waker counts us as a sleeper, finds no flag set and wakes
                // nobody, a lost wake-up. The epoch read after it is an
                // AcqRel RMW, so either that waker's bump comes after it
                // (and the waker's flag swap then sees this `true`) or we
                // see the bump and stay up. AcqRel: pairs with the swap in
                // `Sleeper::wake` (src/sync/sleeper.rs) like the first arm.
                seat.sleeper.arm(Ordering::AcqRel);
                if shared.sleep.epoch_now() != epoch {
                    WorkerCounters::bump(&counters.wakeups);
                    break;
                }
            }
            crate::trace::span(crate::trace::Kind::Park, parked, 0, self.index as u64, 0);
        }
        // Release: pairs with `Sleeper::wake`'s swap, which, reading
        // `false`, reads nothing more: not needed.
        seat.sleeper.disarm(Ordering::Release);
        shared.sleep.leave();
        true
    }

    fn nearest_deadline(&self) -> Option<Instant> {
        // Acquire: pairs with the Release stores of the count (wait.rs,
        // `expire_waits`); a hint: the list is read under its lock.
        if self.shared.suspended_waits.load(Ordering::Acquire) == 0 {
            return None;
        }
        let waits = self.shared.lock_waits();
        waits
            .iter()
            // SAFETY: listed wait states are alive (their tasks are
            // suspended, owned by the list until removed).
            .filter_map(|w| unsafe { w.as_ref() }.deadline)
            .min()
    }

    /// Times out (or, at shutdown, cancels) parked waits: abandons their
    /// timepoints, whose callbacks requeue the tasks (see `WaitState`);
    /// `true` if it abandoned any.
    fn expire_waits(&mut self) -> bool {
        // Acquire: pairs with the count's Release stores, as above; the
        // `shutdown` load, with the Release store in `begin_shutdown`.
        if self.shared.suspended_waits.load(Ordering::Acquire) == 0 {
            return false;
        }
        let shutdown = self.shared.shutdown.load(Ordering::Acquire);
        let now = Instant::now();
        let mut claimed = DList::<WaitLink>::new();
        {
            let mut waits = self.shared.lock_waits();
            let mut cursor = waits.front();
            while let Some(w) = cursor {
                // SAFETY: `w` is linked in `waits`.
                cursor = unsafe { waits.next(w) };
                // SAFETY: listed, hence alive.
                let due = shutdown || unsafe { w.as_ref() }.deadline.is_some_and(|d| d <= now);
                if due {
                    // SAFETY: listed, hence linked here; we hold the lock.
                    unsafe { WaitState::expire(w, &mut waits, &mut claimed) };
                }
            }
            // Release: pairs with the Acquire loads of the count above and
            // in `nearest_deadline` (a hint; the list is under the lock).
            self.shared
                .suspended_waits
                .store(waits.len(), Ordering::Release);
        }
        // Handed over with the lock released (a hand-over may run
        // semaphore callbacks here).
        let any = !claimed.is_empty();
        while let Some(w) = claimed.pop_front() {
            // SAFETY: put there by `expire`, taken off just now.
            unsafe { WaitState::abandon_claimed(w.into_raw()) };
        }
        any
    }
}
