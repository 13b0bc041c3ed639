//! Finishing an action: its holds and payload, its signals, giving its
//! block back; the last reference frees the queue's state.

use super::*;

impl<B: Backend> QueueState<B> {
    /// Signals (or fails) the action's semaphores and frees it.
    /// `reached_ok`: a signal value already reached is not an error (see
    /// [`Completion::complete_reached_ok`]).
    ///
    /// # Safety
    /// `this` is a live queue state and the caller owns `action`, one of
    /// its actions, whose reference this gives up: the state may be freed
    /// before this returns (so it takes a pointer, not `&self`).
    pub(crate) unsafe fn finish(
        this: NonNull<QueueState<B>>,
        action: NonNull<Action<B>>,
        result: Result<(), Error>,
        reached_ok: bool,
    ) {
        // SAFETY: the action's reference keeps the state alive until the
        // release below (a lent action's submitter, inside `submit`, does);
        // this borrow is not used after it.
        let shared = unsafe { this.as_ref() };
        // SAFETY: the caller owns the finished action.
        let a = unsafe { &*action.as_ptr() };
        // Finished inside its own direct submission, on this thread: its
        // submitter (and the caller's handles) outlive this call.
        let id = action.as_ptr().cast_const().cast::<()>();
        let inline = DIRECT.with(|d| {
            let mine = d.get() == id;
            if mine {
                d.set(std::ptr::null());
            }
            mine
        });
        // Signals fire timepoints, whose callbacks may panic: every signal
        // is still made, the action still freed and its reference given
        // up; then the first panic goes on unwinding.
        // Counted before any signal: whoever sees a signal of this action
        // sees it finished (the signal's release publishes the count).
        // Inside our own pass: the issuer's counts (no RMW).
        // On a thread with a lane of its own (a CPU worker): its counts,
        // with no RMW either (one thread per lane).
        let in_pass = issuing(this.as_ptr().cast_const().cast());
        let (counts, alone) = if in_pass {
            (&shared.finished_in_pass, true)
        } else {
            match shared.backend.finish_lane(Internal(())) {
                Some(i) if i < shared.finished_by_lane.len() => {
                    (&*shared.finished_by_lane[i], true)
                }
                _ => (&*shared.finished, false),
            }
        };
        let counter = match &result {
            Ok(()) => &counts.completed,
            Err(e) if e.kind() == ErrorKind::Cancelled => &counts.cancelled,
            Err(_) => &counts.failed,
        };
        if alone {
            Self::add(counter, 1);
        } else {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let t = trace::now();
        let mut panicked = FirstPanic::default();
        // The state lives until the release below, after the signals.
        let signalling = Signalling::enter(this.as_ptr().cast_const().cast());
        for i in 0..a.signal_count as usize {
            let (sem, value) = a.signal(i);
            panicked.run(|| match &result {
                Ok(()) => {
                    let signalled = if reached_ok {
                        sem.signal_at_least(*value)
                    } else {
                        sem.signal(*value)
                    };
                    if let Err(e) = signalled {
                        // A failed semaphore keeps its first error; a value
                        // that does not advance is the submitter's bug,
                        // surfaced to every waiter.
                        sem.fail(e);
                    }
                }
                Err(e) => sem.fail(e.clone()),
            });
        }
        drop(signalling);
        trace::span(
            trace::Kind::Complete,
            t,
            action.as_ptr() as u64,
            this.as_ptr() as u64,
            u64::from(result.is_err()),
        );
        // A lent action holds no references: finished inline it has none to
        // give back; finished elsewhere, its submitter either kept it
        // (`Kept`: freed here as owned) or will free it (`Lent`: left).
        // Acquire: pairs with the submitter's AcqRel swap to `Kept` in
        // `keep_escaped` (drain.rs): its references happen before.
        let owned = match a.lent.load(Ordering::Acquire) {
            Lending::Owned => true,
            Lending::Lent if inline => false,
            _ => {
                // AcqRel: pairs with the swap and load of `lent` in
                // `keep_escaped` (drain.rs). Acquire: a `Kept` action's
                // references; release: our signals, before a submitter
                // that frees it.
                if a.lent.swap(Lending::Done, Ordering::AcqRel) == Lending::Lent {
                    panicked.resume();
                    return;
                }
                true
            }
        };
        // Its blocks go back to our pool: through the issuer's stash when
        // this thread runs our pass (a backend completing inside `issue`, a
        // cancel or failure in a pass), borrowed one release at a time
        // (`Stash`).
        if in_pass {
            // SAFETY: this thread runs our pass: the issuer's stash is this
            // thread's, borrowed one release at a time.
            let mut stash = unsafe { Stash::new(&shared.issuer_blocks) };
            // SAFETY: owned and done; its blocks go back to our pool (a
            // panic dropping the payload is contained inside).
            unsafe { QueueAction::destroy(action, &mut stash, owned) };
        } else {
            // SAFETY: owned and done; its blocks go back to our pool (a
            // panic dropping the payload is contained inside).
            unsafe { QueueAction::destroy(action, &mut &shared.pool, owned) };
        }
        if owned {
            // SAFETY: the action's reference, given up once.
            unsafe { QueueState::release(this) };
        }
        panicked.resume();
    }
}

impl<B: Backend> Drop for QueueState<B> {
    fn drop(&mut self) {
        // The issuer's stash goes back before the pool drops, through this
        // `&mut self` (not the stash's own pointer into it, which this
        // exclusive borrow forbids writing through now).
        let pool = &self.pool;
        self.issuer_blocks.with_mut(|c| {
            // SAFETY: `&mut self`: nothing else borrows the stash.
            let cache = unsafe { &mut *c };
            // SAFETY: its pool is this state's.
            unsafe { cache.flush_to(pool) }
        });
        // The issuer's credit counts in `refs`: given back before the last
        // reference could go.
        debug_assert_eq!(
            // SAFETY: `&mut self`: nothing else borrows the issuer state.
            self.issuer.with_mut(|i| unsafe { (*i).credit }),
            0,
            "the issuer's reference credit outlived the queue"
        );
        // The last reference: every action finished. Anything still on the
        // submit stack would be a bug: debug builds stop here; a release
        // build frees those actions' blocks with the pool, without running
        // them or dropping their payloads.
        let stray = self.incoming.take_all();
        debug_assert!(stray.is_empty(), "actions left on the submit stack");
        let _ = stray;
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::{Signalling, HELD};

    /// A `finish`'s mark that it holds its queue's state is the innermost
    /// one's, and gone once that finish is done signalling, also when a
    /// signal unwinds: a stale mark would let a later wake-up on this
    /// thread skip the reference it needs (mutation checked: `Drop` not
    /// restoring the outer mark fails this).
    #[test]
    pub(super) fn a_finishs_mark_is_the_innermost_and_gone_after_its_signals() {
        let held = || HELD.with(|h| h.get());
        // Two distinct addresses (never dereferenced).
        let (x, y) = (0u8, 0u8);
        let (a, b) = (
            std::ptr::from_ref(&x).cast::<()>(),
            std::ptr::from_ref(&y).cast::<()>(),
        );
        {
            let _outer = Signalling::enter(a);
            assert_eq!(held(), a);
            {
                let _inner = Signalling::enter(b);
                assert_eq!(held(), b);
            }
            assert_eq!(held(), a);
            let unwound = std::panic::catch_unwind(|| {
                let _inner = Signalling::enter(b);
                panic!("a signal's callback panics");
            });
            assert!(unwound.is_err());
            assert_eq!(held(), a);
        }
        assert!(held().is_null());
    }
}
