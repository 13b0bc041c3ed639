//! The issue drain: requests, the issuer turn, passes over the submit
//! stack and the woken actions, hand-off of the turn to the backend.

use super::*;

#[cfg(feature = "testing")]
crate::sync::thread_local! {
    /// Issue passes this thread ran (the crate's tests: a bounded submit).
    static PASSES: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

/// Issue passes the calling thread has run, on any queue (feature
/// `testing`: the crate's tests count them around a `submit` to show it
/// returns after a bounded number while other threads keep submitting).
#[cfg(feature = "testing")]
pub fn issue_passes_on_this_thread() -> u64 {
    PASSES.with(std::cell::Cell::get)
}

/// Timepoint callback of a pending action: hand it back to the issuer.
///
/// # Safety
/// `tp` is the timepoint of a live `Action<B>` whose owner is a `QueueState<B>`.
pub(super) unsafe fn queue_wake<B: Backend>(tp: NonNull<Timepoint>, _result: Result<(), Error>) {
    // SAFETY: `tp` is the timepoint of a live action (contract).
    let context = unsafe { tp.as_ref() }.context();
    // SAFETY: the context is the action, non-null.
    let action = unsafe { NonNull::new_unchecked(context.cast_mut().cast::<Action<B>>()) };
    // SAFETY: the action is live (contract).
    let owner = unsafe { (*action.as_ptr()).owner };
    // SAFETY: the owner is its live queue (the action holds a reference to
    // it), non-null.
    let this = unsafe { NonNull::new_unchecked(owner.cast_mut().cast::<QueueState<B>>()) };
    // SAFETY: the action's reference keeps the state alive until the push.
    let shared = unsafe { this.as_ref() };
    // Hold our own reference across the hand-off and the issue request:
    // once the action is on the woken stack, a pass (a shutdown's, on
    // another thread) may finish it, and with it the last reference. The
    // guard gives it up even if the pass panics out of `request_issue`.
    // Not needed when this wake-up comes from the signals of a `finish`
    // of this same queue on this thread (a chain on one queue): that
    // finish gives its action's reference up only after its signals,
    // hence after this call returns.
    let mine = HELD.with(|h| h.get()) == this.as_ptr().cast_const().cast::<()>();
    let _held = (!mine).then(|| Reference::take(this));
    trace::flow_out(action.as_ptr() as u64 ^ READIED);
    // No pass running and this thread may issue: take the turn and handle
    // the action at once, as a direct submission does (no push on the
    // woken stack, no `take_all`s unless a request comes in meanwhile).
    if shared.take_turn() {
        liveness::check(shared, "a queue's state (woken directly)");
        shared.drain(1, Some(First::Woken(action)));
        return;
    }
    // SAFETY: the fired timepoint gave us the action (its submit link is
    // free: an armed action is on no stack); the stack takes it.
    shared.woken.push(unsafe { Handle::from_raw(action) });
    shared.request_issue();
}

/// What a drain handles before its first pass: an action its caller
/// already holds, with no round trip through a stack.
pub(super) enum First<B: Backend> {
    /// A submitter's new action (`true`: made lent).
    New(NonNull<Action<B>>, bool),
    /// An armed action whose waits were just met (its timepoint fired on
    /// this thread).
    Woken(NonNull<Action<B>>),
}

/// One counted reference to a queue's state, given up when dropped (also
/// while unwinding).
pub(super) struct Reference<B: Backend>(NonNull<QueueState<B>>);

impl<B: Backend> Reference<B> {
    /// Takes a new reference to `this`, which the caller keeps alive until
    /// this returns (it holds a reference itself).
    pub(super) fn take(this: NonNull<QueueState<B>>) -> Reference<B> {
        // SAFETY: alive per contract.
        unsafe { this.as_ref() }
            .refs
            .fetch_add(1, Ordering::Relaxed);
        Reference(this)
    }
}

impl<B: Backend> Drop for Reference<B> {
    fn drop(&mut self) {
        // SAFETY: the reference taken in `take`, given up once.
        unsafe { QueueState::release(self.0) };
    }
}

pub(super) enum Class {
    Ready,
    Waiting,
    Failed(Error),
}

impl<B: Backend> QueueState<B> {
    /// Drops one reference; the last frees the state.
    ///
    /// # Safety
    /// The caller owns one reference.
    pub(super) unsafe fn release(this: NonNull<QueueState<B>>) {
        // SAFETY: our reference keeps it alive until here.
        // AcqRel: pairs with the other releases here and with the Release
        // credit return in `return_credit_if_closed`: every use of the
        // state happens before the last reference frees it.
        if unsafe { this.as_ref() }.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            liveness::died(this.as_ptr());
            // SAFETY: the last reference: nothing else can reach it.
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }

    /// Asks for an issue pass: runs it here if this thread may, else wakes
    /// the backend's issuer. The caller holds a reference (a handle, an
    /// action it owns, or one taken for the call).
    pub(super) fn request_issue(&self) {
        if self.backend.can_issue_inline() {
            self.issue();
        } else {
            self.backend.wake_issuer();
        }
    }

    /// The drain protocol. The caller holds a reference across the call
    /// (the last action may finish during a pass after the handle is gone).
    ///
    /// Unwind-safe: a panic out of a pass (a timepoint callback that
    /// panicked while an action signalled) is caught; the issuer finishes
    /// the drain (so later requests are served) and then resumes the first
    /// panic on this thread.
    pub(super) fn issue(&self) {
        // AcqRel: the Acquire pairs with the previous issuer's CAS back to
        // 0 in `drain_turn` (its issuer state, if we become the issuer);
        // the Release with that CAS's failure and `resume_turn`'s load, so
        // the issuer that counts this request sees our push.
        let seen = self.requests.fetch_add(1, Ordering::AcqRel) + 1;
        // After the first access: the model checker may run another thread
        // (one that frees the state) just before it.
        liveness::check(self, "a queue's state (issue requested)");
        if seen == 1 {
            self.drain(seen, None);
        }
    }

    /// A submission's shortcut: when no pass is running and this thread
    /// may issue, take the issuer's turn (0 to 1); the submitter then makes
    /// its action from the issuer's stash and hands it to `drain` as its
    /// first, without the round trip through the submit stack (its push
    /// and the pass's `take_all`). `false`: the turn is taken (or issuing
    /// here is not allowed); the caller pushes the action and requests an
    /// issue instead. New actions have no order among themselves (a queue
    /// orders only through semaphores), so handling this one before older
    /// ones still on the stack is allowed.
    pub(super) fn take_turn(&self) -> bool {
        if !self.backend.can_issue_inline() || self.requests.load(Ordering::Relaxed) != 0 {
            return false;
        }
        // AcqRel: the Acquire pairs with the previous issuer's CAS back to
        // 0 in `drain_turn` (its writes to the issuer state); release is
        // for symmetry with `issue`'s bump.
        self.requests
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// After a direct submission's first handling: learns whether it
    /// finished inside (the next one is made lent) or escaped; a lent one
    /// that escaped gets references of its own now (`Kept`), before its
    /// submitter returns and its caller's handles may go, unless a finish
    /// on another thread got there first (`Done`): then it is freed here.
    ///
    /// # Safety
    /// The caller is the issuer, inside the `submit` that made `action`
    /// (`lent`: made `Lent`); `escaped`: it did not finish on this thread.
    #[inline(always)]
    pub(super) unsafe fn settle(
        &self,
        issuer: &mut IssuerState<B::Payload>,
        action: NonNull<Action<B>>,
        lent: bool,
        escaped: bool,
    ) {
        issuer.lend = !escaped;
        // Otherwise finished and freed here, or owned (then it may be
        // finished and freed on another thread by now: not touched).
        if escaped && lent {
            // SAFETY: forwarded contract.
            unsafe { self.keep_escaped(issuer, action) };
        }
    }

    /// `settle` for a lent action that escaped (out of line: the common
    /// direct submission finishes inside).
    ///
    /// # Safety
    /// As `settle`, for a lent action that escaped.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn keep_escaped(
        &self,
        issuer: &mut IssuerState<B::Payload>,
        action: NonNull<Action<B>>,
    ) {
        // SAFETY: a lent action is freed by its submitter unless it was
        // kept first, so it is alive until below. (Its state alone: the
        // backend may be using the rest of it on another thread.)
        let state = unsafe { QueueAction::lent_state(action) };
        // Acquire: pairs with the finisher's AcqRel swap to `Done` in
        // `finish` (finish.rs): its signals happen before our free.
        if state.load(Ordering::Acquire) == Lending::Done {
            // Finished elsewhere (its signals made, counted) with our
            // handles: nothing was taken, nothing to give back.
            // SAFETY: the issuer's stash, this thread's alone.
            let mut stash = unsafe { Stash::new(&self.issuer_blocks) };
            // SAFETY: ours now.
            unsafe { QueueAction::destroy(action, &mut stash, false) };
            return;
        }
        // SAFETY: `Lent`, and we are inside its `submit`.
        unsafe { QueueAction::keep_entries(action) };
        self.take_refs(issuer, 1);
        // AcqRel: pairs with the finisher's load and swap of `lent` in
        // `finish` (finish.rs): a finisher that reads `Kept` sees the
        // references; reading `Done` acquires its signals before the free.
        if state.swap(Lending::Kept, Ordering::AcqRel) == Lending::Done {
            // Finished meanwhile: free it with the references just taken.
            // SAFETY: the issuer's stash, this thread's alone.
            let mut stash = unsafe { Stash::new(&self.issuer_blocks) };
            // SAFETY: ours now (finished elsewhere, then kept by us).
            unsafe { QueueAction::destroy(action, &mut stash, true) };
            // SAFETY: we own the reference just taken for the action; the
            // caller's handle keeps the state alive past the release.
            unsafe { QueueState::release(self.this) };
        }
    }

    /// Continues a drain whose turn was handed off ([`IssueTurn`]), then
    /// gives up the turn's reference.
    ///
    /// # Safety
    /// The caller holds `this`'s issuer turn (handed over to it, ordered
    /// after the previous holder's last pass) and one reference, which
    /// this gives up.
    pub(crate) unsafe fn resume_turn(this: NonNull<QueueState<B>>) {
        // SAFETY: the turn's reference keeps the state alive until the
        // release.
        let shared = unsafe { this.as_ref() };
        // The release makes the reference go even if a pass unwinds.
        let _reference = Reference(this);
        // The turn is held (the counter was never swung back), so this is
        // at least 1. Acquire: pairs with the requesters' `fetch_add` in
        // `issue` (in the counter's release sequence): every request
        // counted here published its push before, so the first pass sees it.
        let seen = shared.requests.load(Ordering::Acquire);
        // Counted by the turn's new holder (the issuer writes it alone).
        Self::add(&shared.hand_offs, 1);
        shared.drain_turn(seen, None, false);
    }

    /// Runs passes as the issuer until the turn is given back with no
    /// request left; `first`, an action the caller holds (a new one, or one
    /// just woken), is handled before the first pass. Not inlined: its
    /// callers share this copy (a direct submission inlines `drain_turn`).
    #[inline(never)]
    pub(super) fn drain(&self, seen: usize, first: Option<First<B>>) {
        self.drain_turn(seen, first, true);
    }

    /// `drain`; `may_hand_off`: after its own action and
    /// [`ISSUE_PASSES_BEFORE_HAND_OFF`] passes with requests still coming,
    /// the turn is offered to the backend (once, if it wants it here), and
    /// if it takes it this returns without giving the turn back: the
    /// backend's thread drains on.
    ///
    /// Inlined into a direct submission (see [`PendingQueue::submit`]):
    /// the call and the loop's prologue were a measurable part of it.
    #[inline(always)]
    pub(super) fn drain_turn(
        &self,
        mut seen: usize,
        mut first: Option<First<B>>,
        mut may_hand_off: bool,
    ) {
        let _pass = PassDepth::enter(self.this.as_ptr().cast_const().cast());
        let mut panicked = FirstPanic::default();
        let mut passes = 0;
        loop {
            // SAFETY: the counter went from 0 to 1 under us: we are the only
            // issuer until we swing it back to 0.
            let issuer = unsafe { self.issuer_state() };
            match first.take() {
                None => {
                    panicked.run(|| self.pass(issuer));
                    #[cfg(feature = "testing")]
                    PASSES.with(|p| p.set(p.get() + 1));
                    passes += 1;
                }
                Some(First::Woken(action)) => {
                    // Acquire: pairs with the Release store in `shutdown`
                    // (handle.rs); the flag carries nothing else.
                    let closed = self.closed.load(Ordering::Acquire);
                    // SAFETY: its timepoint fired on this thread, which
                    // handed it here: armed, in `waiting`, on no stack.
                    panicked.run(|| unsafe { self.handle_woken(issuer, action, closed) });
                    self.add_examined(1);
                }
                Some(First::New(action, lent)) => {
                    // Acquire: pairs with `shutdown`'s store, as above.
                    let closed = self.closed.load(Ordering::Acquire);
                    if !lent {
                        // Before its handling, which may finish it.
                        self.take_refs(issuer, 1);
                    }
                    Self::add(&self.taken_in, 1);
                    let id = action.as_ptr().cast_const().cast::<()>();
                    let outer = DIRECT.with(|d| d.replace(id));
                    panicked.run(|| self.handle(issuer, action, closed));
                    // A finish on this thread meanwhile cleared it.
                    let escaped = DIRECT.with(|d| d.replace(outer)) == id;
                    // SAFETY: the submitter's action, handled just above;
                    // the caller (its `submit`) is still inside.
                    unsafe { self.settle(issuer, action, lent, escaped) };
                    self.add_examined(1);
                }
            }
            // The caller's reference keeps the state alive to here (a
            // use after free fails a loom model).
            liveness::check(self, "a queue's state (turn given back)");
            // SAFETY: the turn is still ours; the borrow ends here.
            self.return_credit_if_closed(unsafe { self.issuer_state() });
            // AcqRel on success: gives the turn back; pairs with the next
            // issuer's Acquire in `issue` or `take_turn`. Acquire on failure:
            // pairs with the requesters' `fetch_add` in `issue` (their pushes).
            match self
                .requests
                .compare_exchange(seen, 0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => seen = now,
            }
            if may_hand_off && passes >= ISSUE_PASSES_BEFORE_HAND_OFF {
                may_hand_off = false;
                if !self.backend.wants_turn() {
                    continue;
                }
                // The token's reference: the caller's may go as soon as we
                // return, and the new holder drains after that.
                self.refs.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the turn is ours (the counter is not 0, and only
                // we swing it back); the token takes it and the reference.
                let turn = unsafe { IssueTurn::new(self.this) };
                match self.backend.hand_off_turn(turn) {
                    // The turn is the backend's now: no pass of ours after
                    // this, and the counter stays up for its holder.
                    Ok(()) => break,
                    Err(turn) => {
                        let this = turn.into_raw();
                        // SAFETY: the token's reference, taken above (ours
                        // keeps the state alive: not the last).
                        unsafe { QueueState::release(this) };
                    }
                }
            }
        }
        panicked.resume();
    }

    /// Takes a woken action out of `waiting` and handles it.
    ///
    /// # Safety
    /// The caller is the issuer; `action` was armed (so it is in
    /// `waiting`), its timepoint fired, and it is on no stack.
    pub(super) unsafe fn handle_woken(
        &self,
        issuer: &mut IssuerState<B::Payload>,
        action: NonNull<Action<B>>,
        closed: bool,
    ) {
        // The next actions waiting on this queue are likely the next
        // ones woken (a chain wakes its actions in order); their lines
        // were written by their submitter, maybe on another core: start
        // fetching the next two now, so that their own hops do not wait
        // for them (see ARCHITECTURE.md, A hop's lines fetched ahead).
        // The last one's link is not read: it was not fetched yet, and
        // a load of it would wait for the whole miss (a fifth of
        // `drain_turn`'s samples when it did).
        // SAFETY: per contract, `action` is in `waiting`; the issuer's alone.
        let mut ahead = unsafe { issuer.waiting.next(action) };
        for i in 1..=PREFETCH_WAITING {
            let Some(next) = ahead else { break };
            QueueAction::prefetch(next);
            if i < PREFETCH_WAITING {
                // SAFETY: a successor of a linked node is linked in the
                // same list.
                ahead = unsafe { issuer.waiting.next(next) };
            }
        }
        // SAFETY: per contract, `action` is in `waiting`; the issuer's alone.
        let _ = unsafe { issuer.waiting.remove(action) };
        // SAFETY: the action is live (it was in `waiting`) and the issuer's
        // alone.
        unsafe { (*action.as_ptr()).armed = false };
        self.waiting_left();
        trace::flow_in(action.as_ptr() as u64 ^ READIED);
        trace::instant(
            trace::Kind::Ready,
            action.as_ptr() as u64,
            self.this.as_ptr() as u64,
            0,
        );
        self.handle(issuer, action, closed);
    }

    /// # Safety
    /// The caller is the issuer (drain protocol).
    #[allow(clippy::mut_from_ref)] // exclusive by the protocol, not by borrow
    pub(super) unsafe fn issuer_state(&self) -> &mut IssuerState<B::Payload> {
        // SAFETY: forwarded contract: only the issuer gets here.
        self.issuer.with_mut(|p| unsafe { &mut *p })
    }

    /// One pass: woken actions (older), then new ones, in order.
    ///
    /// Each action is handled under its own unwind guard: a panic while
    /// handling one (its completion firing a panicking timepoint callback)
    /// never strands the others taken with it; the first panic is resumed
    /// once every taken action was handled.
    pub(super) fn pass(&self, issuer: &mut IssuerState<B::Payload>) {
        // Acquire: pairs with the Release store in `shutdown` (handle.rs);
        // the flag carries nothing else. The pass after a shutdown sees it
        // through the shutdown's request (`issue`'s bump).
        let closed = self.closed.load(Ordering::Acquire);
        let mut examined = 0;
        let mut panicked = FirstPanic::default();
        let mut woken = self.woken.take_all();
        while let Some(action) = woken.pop_front().map(Handle::into_raw) {
            examined += 1;
            // SAFETY: a woken action was armed, hence in `waiting`, and is
            // off the stack now.
            panicked.run(|| unsafe { self.handle_woken(issuer, action, closed) });
        }
        let mut new = self.incoming.take_all();
        if !new.is_empty() {
            // Before any is handled (and may finish).
            self.take_refs(issuer, new.len());
            Self::add(&self.taken_in, new.len() as u64);
        }
        while let Some(action) = new.pop_front().map(Handle::into_raw) {
            examined += 1;
            panicked.run(|| self.handle(issuer, action, closed));
        }
        if closed {
            panicked.run(|| self.cancel_waiting(issuer));
        }
        if examined > 0 {
            self.add_examined(examined);
        }
        panicked.resume();
    }

    /// Hands out `n` references to the state, for actions the issuer takes
    /// in, from its credit, taking [`REF_CREDIT`] more ahead (one RMW) when
    /// it runs out; once the queue is closed, only what is missing.
    pub(super) fn take_refs(&self, issuer: &mut IssuerState<B::Payload>, n: usize) {
        if issuer.credit < n {
            // Acquire: pairs with `shutdown`'s Release store (handle.rs).
            let ahead = if self.closed.load(Ordering::Acquire) {
                0
            } else {
                REF_CREDIT
            };
            let more = n - issuer.credit + ahead;
            self.refs.fetch_add(more, Ordering::Relaxed);
            issuer.credit += more;
        }
        issuer.credit -= n;
    }

    /// Gives the issuer's credit back once the queue is closed: the drain
    /// that ends after `shutdown` (a handle's drop runs one) leaves only
    /// the actions' own references, so the last one frees the state.
    /// Called under the turn before each attempt to give it back; the
    /// drain's caller holds a reference, so this is never the last.
    pub(super) fn return_credit_if_closed(&self, issuer: &mut IssuerState<B::Payload>) {
        // Acquire: pairs with `shutdown`'s Release store (handle.rs).
        // Release: pairs with the last reference's AcqRel in `release`:
        // the issuer's uses of the state happen before the free.
        if issuer.credit > 0 && self.closed.load(Ordering::Acquire) {
            let credit = std::mem::take(&mut issuer.credit);
            let before = self.refs.fetch_sub(credit, Ordering::Release);
            debug_assert!(before > credit, "the drain's caller holds a reference");
        }
    }

    /// Counts actions examined; called by the issuer only.
    pub(super) fn add_examined(&self, n: u64) {
        Self::add(&self.examined, n);
    }

    /// Adds to a counter only the issuer writes (one pass at a time): a
    /// load and a store, no RMW. Release: pairs with the Acquire loads in
    /// `PendingQueue::stats` (handle.rs): a reader sees what came before.
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        let before = counter.load(Ordering::Relaxed);
        counter.store(before.wrapping_add(n), Ordering::Release);
    }

    /// Lowers the issuer's waiting count (the issuer only).
    pub(super) fn waiting_left(&self) {
        Self::add(&self.waiting_now, u64::MAX);
    }
}
