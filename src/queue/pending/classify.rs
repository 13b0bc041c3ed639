//! Handling a submitted or woken action: classify it (ready, waiting,
//! failed), register its waits, cancel the waiting ones at shutdown.

use super::*;

impl<B: Backend> QueueState<B> {
    pub(super) fn handle(
        &self,
        issuer: &mut IssuerState<B::Payload>,
        action: NonNull<Action<B>>,
        closed: bool,
    ) {
        if closed {
            // SAFETY: the issuer owns the action; the caller of the pass
            // holds a reference, so the state outlives this call.
            unsafe { QueueState::finish(self.this, action, Err(cancelled()), false) };
            return;
        }
        // The backend and `device_wait` are user code (a custom `Backend`):
        // a panic there fails this action only.
        match catch_unwind(AssertUnwindSafe(|| self.classify(action))) {
            Ok(Class::Ready) => {
                let (t, id) = (trace::now(), action.as_ptr() as u64);
                trace::flow_in(id);
                // SAFETY: a ready action of this queue, taken out of the
                // waiting list; it holds a reference to `self`.
                let work = unsafe { Completion::new(action, self.this) };
                // A panicking `issue` drops the token while unwinding,
                // which fails the action (see `Completion`'s `Drop`).
                let _ = catch_unwind(AssertUnwindSafe(|| self.backend.issue(work)));
                trace::span(trace::Kind::Issue, t, id, self.this.as_ptr() as u64, 0);
            }
            Ok(Class::Waiting) => {
                // SAFETY: armed and ours to list, in no waiting list (taken
                // out when woken, or new).
                let handle = unsafe { Handle::from_raw(action) };
                issuer.waiting.push_back(handle);
                Self::add(&self.waiting_now, 1);
            }
            // SAFETY: the issuer owns the action; the caller of the pass
            // holds a reference, so the state outlives this call.
            Ok(Class::Failed(e)) => unsafe { QueueState::finish(self.this, action, Err(e), false) },
            Err(panic) => {
                // Not armed anywhere: `classify` arms last, and a
                // registration does not run user code.
                let e = panic_error("the backend's device_wait", &*panic);
                // SAFETY: as above.
                unsafe { QueueState::finish(self.this, action, Err(e), false) };
            }
        }
    }

    /// Advances the action's wait cursor; arms its timepoint on the first
    /// wait that is neither reached nor satisfiable on the device.
    pub(super) fn classify(&self, action: NonNull<Action<B>>) -> Class {
        // SAFETY: the issuer owns the action during the pass.
        let a = unsafe { &mut *action.as_ptr() };
        while a.cursor < a.wait_count {
            let (sem, value) = a.wait(a.cursor as usize);
            let (sem, value) = (NonNull::from(sem), *value);
            // SAFETY: the entry stays in place and unchanged while the
            // action lives (only the fields written below change), and the
            // action outlives this call: no clone (two RMWs) needed.
            let sem = unsafe { sem.as_ref() };
            match sem.query() {
                Err(e) => return Class::Failed(e),
                Ok(v) if v >= value => {
                    a.cursor += 1;
                    continue;
                }
                Ok(_) => {}
            }
            if usize::from(a.device_wait_count) < DEVICE_WAITS {
                if let Some(event) = self.backend.device_wait(sem, value) {
                    a.device_waits[usize::from(a.device_wait_count)] = Some(event);
                    a.device_wait_count += 1;
                    a.cursor += 1;
                    continue;
                }
            }
            a.timepoint =
                Timepoint::new(value, queue_wake::<B>, action.as_ptr().cast_const().cast());
            a.armed = true;
            // SAFETY: the timepoint lives in the action, which stays put
            // until the callback hands it back (or `cancel` succeeds).
            match unsafe { sem.register(NonNull::from(&a.timepoint)) } {
                Registration::Pending => return Class::Waiting,
                Registration::Reached => {
                    a.armed = false;
                    a.cursor += 1;
                }
                Registration::Failed(e) => {
                    a.armed = false;
                    return Class::Failed(e);
                }
            }
        }
        Class::Ready
    }

    /// Cancels every pending action whose timepoint can still be cancelled
    /// (the others are being woken and will be cancelled by the next pass).
    pub(super) fn cancel_waiting(&self, issuer: &mut IssuerState<B::Payload>) {
        let mut cursor = issuer.waiting.front();
        while let Some(action) = cursor {
            // SAFETY: linked in `waiting`.
            cursor = unsafe { issuer.waiting.next(action) };
            // SAFETY: the issuer owns listed actions' bookkeeping.
            let a = unsafe { &*action.as_ptr() };
            let (sem, _) = a.wait(a.cursor as usize);
            // SAFETY: armed on `sem` (the wait at the cursor).
            if unsafe { sem.cancel(NonNull::from(&a.timepoint)) } {
                // SAFETY: linked in `waiting`; now ours.
                let _ = unsafe { issuer.waiting.remove(action) };
                self.waiting_left();
                // SAFETY: as in `handle`.
                unsafe { QueueState::finish(self.this, action, Err(cancelled()), false) };
            }
        }
    }
}
