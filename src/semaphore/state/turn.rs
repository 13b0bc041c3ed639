//! The turn protocol (see the module above): who works on the list of
//! registered timepoints, how a pass merges the inbox, unlinks what is
//! reached, and fires it with the turn given back.

use super::*;

impl Inner {
    /// The list.
    ///
    /// # Safety
    /// The caller holds the turn, and makes no other reference to the list
    /// while this one lives.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn list_mut(&self) -> &mut DList<TimepointLink> {
        // SAFETY: per contract, the turn makes this access exclusive.
        self.list.with_mut(|l| unsafe { &mut *l })
    }

    /// Asks for a pass over the list, and runs it (with any asked for
    /// meanwhile) if no other thread holds the turn; otherwise the holder
    /// runs it before giving the turn back. Never waits.
    /// `signalled`: the value this thread's signal wrote, which a first
    /// round on a turn taken from 0 may use instead of reading the value
    /// with a read-modify-write (see `round`); `None` for the others.
    pub(super) fn request_pass(&self, signalled: Option<u64>) {
        // The usual case, no holder and no request: take the turn with no
        // request bit (one CAS), so the first round has none to clear.
        // Acquire pairs with the last holder's Release CAS in `finish_turn`
        // (it takes the list as left). A request made after this CAS finds
        // `LOCKED`, sets `REQUEST`, and fails our release, so its round
        // comes (with the clearing RMW).
        if self
            .turn
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            self.pass(false, signalled);
            return;
        }
        // AcqRel: the Release pairs with the holder's Acquire `fetch_and`
        // in `round` (what we did before: an inbox push, a new value); the
        // Acquire with `finish_turn`'s Release CAS (the list) if ours.
        if self.turn.fetch_or(LOCKED | REQUEST, Ordering::AcqRel) & LOCKED == 0 {
            self.pass(true, None);
        }
    }

    /// Takes the turn, waiting while another thread holds it: only for its
    /// list work (passes fire callbacks after giving the turn back). For
    /// `cancel`, which must unlink before returning.
    pub(super) fn take_turn(&self) {
        #[cfg(not(fenceline_loom))]
        let mut spins = 0u32;
        loop {
            let now = self.turn.load(Ordering::Relaxed);
            // Acquire: pairs with the last holder's Release CAS in
            // `finish_turn`: takes the list as it left it.
            if now & LOCKED == 0
                && self
                    .turn
                    .compare_exchange_weak(now, now | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            #[cfg(not(fenceline_loom))]
            {
                if spins < 64 {
                    crate::sync::hint::spin_loop();
                } else {
                    crate::sync::thread::yield_now();
                }
                spins = spins.saturating_add(1);
            }
            #[cfg(fenceline_loom)]
            crate::sync::hint::spin_loop();
        }
    }

    /// Moves the inbox into the list, each at its place by value, or into
    /// `reached` if `current` reaches it (unless it was abandoned: then
    /// it only leaves the inbox). O(1) per timepoint when values are
    /// registered in increasing order (the common chain), O(n) at worst.
    /// Returns how many were not linked.
    pub(super) fn merge_inbox(
        &self,
        list: &mut DList<TimepointLink>,
        current: u64,
        reached: &mut DList<TimepointLink>,
    ) -> usize {
        let mut new = self.inbox.take_all();
        let (mut examined, mut fired) = (0, 0);
        while let Some(handle) = new.pop_front() {
            let tp = handle.into_raw();
            // SAFETY: registered timepoints are valid until fired.
            let target = unsafe { tp.as_ref() }.value();
            examined += 1;
            if target <= current {
                // SAFETY: registered timepoints are valid until fired.
                if unsafe { tp.as_ref() }.claim_fire() {
                    // SAFETY: off the inbox, so in no list through these
                    // links.
                    reached.push_back(unsafe { Handle::from_raw(tp) });
                }
                // (Abandoned: its removal hands it back.)
                fired += 1;
                continue;
            }
            // Insert after the last timepoint with a value <= target.
            let mut at = list.back();
            while let Some(node) = at {
                // SAFETY: linked nodes are valid (their owners' contract).
                if unsafe { node.as_ref() }.value() <= target {
                    break;
                }
                examined += 1;
                // SAFETY: `node` is linked in this list.
                at = unsafe { list.prev(node) };
            }
            // SAFETY: `tp` came off the inbox, so it is in no list through
            // these links.
            let handle = unsafe { Handle::from_raw(tp) };
            // SAFETY: `at` is linked here.
            unsafe { list.insert_after(at, handle) };
            // SAFETY: `tp` is linked here now, so valid (its owner's
            // contract); the flag is the turn holder's.
            unsafe { tp.as_ref() }
                .linked
                .with_mut(|l| unsafe { *l = true });
        }
        self.add_examined(examined);
        fired
    }

    /// Whether a timepoint may still wait: read by a signal after its CAS
    /// on `value`. `unlinked` first, with acquire (it pairs with the Release
    /// store in `count_unlinked`): every registration whose
    /// unlinking it counts happened before, so `registered` (read after)
    /// counts them too, and the difference is never below the timepoints
    /// still waiting (see the module docs).
    pub(super) fn has_waiting(&self) -> bool {
        let unlinked = self.unlinked.load(Ordering::Acquire);
        self.registered.load(Ordering::Relaxed) != unlinked
    }

    /// Counts `n` unlinked timepoints: the turn's holder is the only
    /// writer (the turn orders holders), so a load and a store. Release:
    /// pairs with the Acquire load in `has_waiting` (and mod.rs's
    /// `timepoints_registered`): the reader sees the registrations it covers.
    pub(super) fn count_unlinked(&self, n: usize) {
        if n > 0 {
            let now = self.unlinked.load(Ordering::Relaxed);
            self.unlinked.store(now.wrapping_add(n), Ordering::Release);
        }
    }

    /// Counts list work (the turn's holder is the only writer).
    pub(super) fn add_examined(&self, n: u64) {
        if n > 0 {
            let now = self.examined.load(Ordering::Relaxed);
            self.examined.store(now + n, Ordering::Relaxed);
        }
    }

    /// Run by the turn's holder: passes until no request is left, gives
    /// the turn back, then fires what the passes unlinked.
    /// `requested`: the turn was taken with `REQUEST` set, which the
    /// first round clears.
    /// `signalled`: see `request_pass` (only with `!requested`).
    pub(super) fn pass(&self, requested: bool, signalled: Option<u64>) {
        let mut out = Unlinked::default();
        self.round(requested, signalled, &mut out);
        self.finish_turn(out);
    }

    /// One pass, by the turn's holder: serves every request made so far.
    /// Reads the value, unlinks what it reaches (only if it moved since the
    /// last scan: O(k + 1) for k unlinked), merges the inbox; everything
    /// if the semaphore failed. Then unlinks the abandoned timepoints
    /// (O(1) each) into `out.released`.
    /// `requested`: `REQUEST` may be set (it is cleared first); without
    /// it, the turn was taken from 0 and no request is pending.
    /// `signalled`: the value the calling signal wrote, used instead of
    /// reading the value (the latest may be higher; see below).
    pub(super) fn round(&self, requested: bool, signalled: Option<u64>, out: &mut Unlinked) {
        if requested {
            // Acquire: pairs with the requesters' AcqRel `fetch_or` in
            // `request_pass`: what they did before asking is visible.
            self.turn.fetch_and(!REQUEST, Ordering::Acquire);
        }
        // Taken before the inbox: an abandoned timepoint was registered
        // (pushed on the inbox) before it was pushed here, so taking this
        // push (acquire) makes that one visible to the inbox's `take_all`
        // below: every timepoint taken here is in the list by the end of
        // the merge, or was unlinked before.
        let mut removals = self.removals.take_all();
        let Unlinked {
            reached,
            failed,
            released,
        } = out;
        // SAFETY: we hold the turn.
        let list = unsafe { self.list_mut() };
        // A read-modify-write: the latest value, ordered with signals'
        // CASes (see the module docs). Except in the first round of a
        // signal that took a free, unrequested turn: its own value, which
        // its CAS already ordered with every registration and pass before
        // it, saves that RMW. Only timepoints it reaches are unlinked, so a
        // lower value than the latest never fires anything early; what it
        // leaves is served by a round that reads: a later signal's CAS
        // either sees the timepoint counted (and requests a pass, which
        // finds the turn held and fails our release, or takes it after us)
        // or came after such a round's read; and a registration this round
        // merges requested (or will request) its pass after our turn was
        // taken, so that request fails our release or finds the turn free,
        // and its round reads (a re-round never uses `signalled`).
        // loom: `two_signals_racing_a_registration_fire_it_once` fails with
        // every round using the signalled value.
        // AcqRel: pairs with the signals' AcqRel CAS in `advance_inner` and
        // `fail`'s swap (mod.rs), both ways (see the module docs).
        let current = match signalled {
            Some(value) if !requested => value,
            _ => self.value.fetch_add(0, Ordering::AcqRel),
        };
        let mut unlinked = 0;
        if current == FAILED_VALUE {
            let mut none = DList::new();
            unlinked += self.merge_inbox(list, FAILED_VALUE, &mut none);
            failed.append(&mut none);
            let all = &mut list.take_all();
            unlinked += all.len();
            mark_unlinked(all);
            keep_claimed(all);
            failed.append(all);
        } else {
            if current != self.scanned.load(Ordering::Relaxed) {
                let mut examined = 0;
                while let Some(node) = list.front() {
                    examined += 1;
                    // SAFETY: linked nodes are valid.
                    if unsafe { node.as_ref() }.value() > current {
                        break;
                    }
                    // SAFETY: valid until fired; the flag is the turn
                    // holder's.
                    unsafe { node.as_ref() }
                        .linked
                        .with_mut(|l| unsafe { *l = false });
                    let taken = list.pop_front();
                    // SAFETY: as above.
                    if unsafe { node.as_ref() }.claim_fire() {
                        reached.extend(taken);
                    }
                    // (Abandoned: its removal hands it back.)
                    unlinked += 1;
                }
                self.add_examined(examined);
                self.scanned.store(current, Ordering::Relaxed);
            }
            unlinked += self.merge_inbox(list, current, reached);
        }
        while let Some(handle) = removals.pop_front() {
            let tp = handle.into_raw();
            // SAFETY: an abandoned timepoint stays valid until its callback
            // runs, which only we make happen (below, from `released`);
            // the flag is the turn holder's.
            let linked = unsafe { tp.as_ref() }.linked.with(|l| unsafe { *l });
            if linked {
                // SAFETY: linked in this list (the flag says so).
                let _ = unsafe { list.remove(tp) };
                // SAFETY: an abandoned timepoint stays valid until its
                // callback runs (below); the flag is the turn holder's.
                unsafe { tp.as_ref() }
                    .linked
                    .with_mut(|l| unsafe { *l = false });
                unlinked += 1;
            }
            // SAFETY: in no list through these links now: unlinked above,
            // or earlier by a scan or merge that found it abandoned.
            released.push_back(unsafe { Handle::from_raw(tp) });
        }
        self.count_unlinked(unlinked);
    }

    /// Gives the turn back, passing again while requests came in since the
    /// last pass, then fires `reached` and `failed` with no turn held.
    pub(super) fn finish_turn(&self, mut out: Unlinked) {
        // Release: pairs with the Acquire CASes and `fetch_or` of
        // `request_pass` and `take_turn`: the next holder takes the list as
        // we leave it. Fails while a request came in since the last pass:
        // pass again.
        while self
            .turn
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.round(true, None, &mut out);
        }
        let mut panicked = FirstPanic::default();
        panicked.run(|| fire_all(out.reached, Ok(())));
        if !out.failed.is_empty() {
            panicked.run(|| fire_all(out.failed, Err(self.failure())));
        }
        if !out.released.is_empty() {
            panicked.run(|| fire_all(out.released, Err(abandoned())));
        }
        panicked.resume();
    }

    /// The stored failure. Only called once `value == FAILED_VALUE` was seen,
    /// which happens after the failure was published.
    pub(super) fn failure(&self) -> Error {
        // Acquire: pairs with the Release of `fail`'s CAS (mod.rs): the error.
        let p = self.failure.load(Ordering::Acquire);
        if p.is_null() {
            return Error::new(ErrorKind::Internal, "semaphore failed without an error");
        }
        // SAFETY: set once, freed only when the last handle drops.
        unsafe { (*p).clone() }
    }

    /// `Some` answer when `target` is reached or the semaphore failed.
    pub(super) fn check(&self, target: u64) -> Option<Registration> {
        // Acquire: pairs with the signals' CAS in `advance_inner` and
        // `fail`'s swap (mod.rs): `Reached` sees what the signaller wrote.
        match self.value.load(Ordering::Acquire) {
            FAILED_VALUE => Some(Registration::Failed(self.failure())),
            v if v >= target => Some(Registration::Reached),
            _ => None,
        }
    }
}

/// What the turn's holder unlinked, to run with the turn given back.
#[derive(Default)]
pub(super) struct Unlinked {
    /// Reached: fire with `Ok`.
    pub(super) reached: DList<TimepointLink>,
    /// The semaphore failed: fire with its failure.
    pub(super) failed: DList<TimepointLink>,
    /// Abandoned: run to hand their memory back.
    pub(super) released: DList<TimepointLink>,
}

/// The result an abandoned timepoint's callback gets (it ignores it).
pub(super) fn abandoned() -> Error {
    Error::new(ErrorKind::Cancelled, "timepoint abandoned")
}

/// Drops from `taken` (just unlinked, flags cleared) every timepoint that
/// was abandoned: its removal hands it back, it never fires.
pub(super) fn keep_claimed(taken: &mut DList<TimepointLink>) {
    let mut at = taken.front();
    while let Some(node) = at {
        // SAFETY: `node` is linked in `taken`.
        at = unsafe { taken.next(node) };
        // SAFETY: valid until fired or handed back.
        if !unsafe { node.as_ref() }.claim_fire() {
            // SAFETY: linked in `taken`.
            let _ = unsafe { taken.remove(node) };
        }
    }
}

/// Clears the `linked` flag of every node of `taken` (just unlinked from a
/// semaphore's list). Run by the turn's holder, so a `cancel` never sees a
/// stale `true`.
pub(super) fn mark_unlinked(taken: &DList<TimepointLink>) {
    for node in taken.iter() {
        // SAFETY: the nodes are valid until fired; the flag is the turn
        // holder's.
        unsafe { node.as_ref() }
            .linked
            .with_mut(|l| unsafe { *l = false });
    }
}

/// Fires each timepoint of `fired` (unlinked, flags cleared), with no turn
/// held. A panicking callback does not keep the others from firing (a
/// host waiter would wait forever for its node); the first panic goes on
/// unwinding once every one has fired.
pub(super) fn fire_all(mut fired: DList<TimepointLink>, result: Result<(), Error>) {
    let mut panicked = FirstPanic::default();
    while let Some(node) = fired.pop_front().map(Handle::into_raw) {
        // SAFETY: unlinked by the turn's holder and now owned by us; popped
        // from our local list before the callback may free it.
        panicked.run(|| unsafe { Timepoint::fire(node, result.clone()) });
    }
    panicked.resume();
}
