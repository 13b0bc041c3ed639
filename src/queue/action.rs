//! `QueueAction`: one submission, in block-pool memory.

use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::{addr_of, addr_of_mut, NonNull};

use crate::error::Error;
use crate::list::{DoubleLink, DoubleLinks, Link, SingleLink, SingleLinks};
use crate::pool::{BlockSource, RawBlock};
use crate::semaphore::{AnyEvent, Semaphore, Timepoint};
use crate::sync::atomic::{AtomicU32, Ordering};
use crate::unwind::FirstPanic;

/// Waits and signals stored in the action itself (waits first, then
/// signals, so 1 wait + 1 signal share a cache line): at least 8 of each.
pub(crate) const INLINE: usize = 16;
/// Device events one action can wait on (more fall back to host waits).
pub(crate) const DEVICE_WAITS: usize = 4;

/// A semaphore and a value.
pub(crate) type Entry = (Semaphore, u64);

/// Entries that may be aliases (`QueueAction::aliases`' bits): the
/// inline ones.
const ALIASED: usize = INLINE;
static_assertions::const_assert!(ALIASED <= u16::BITS as usize);

/// `QueueAction::lent`: whether an action holds references of its own,
/// and so who frees it. `Owned` never changes; a lent action goes `Lent`
/// to `Kept` (its submitter) or to `Done` (its finisher), whichever swaps
/// first, and the other side sees the state the first one left.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lending {
    /// The action holds a reference to each of its semaphores and to its
    /// queue (every action not lent).
    Owned = 0,
    /// Made by a submitter holding the issuer's turn, from the caller's
    /// references, without taking any (bitwise copies of the caller's
    /// semaphore handles): valid while the submitter is inside `submit`.
    /// An action that finishes there is freed with nothing to give back;
    /// one that escapes (issued to a backend that completes it later, or
    /// waiting) is `Kept` before `submit` returns.
    Lent = 1,
    /// Lent, then given its own references by its submitter.
    Kept = 2,
    /// Lent, and finished on another thread before its submitter kept it:
    /// the submitter frees it.
    Done = 3,
}

/// A [`Lending`] in an atomic word.
#[repr(transparent)]
pub(crate) struct LendingCell(AtomicU32);

impl LendingCell {
    pub(crate) fn new(state: Lending) -> LendingCell {
        LendingCell(AtomicU32::new(state as u32))
    }

    #[inline]
    pub(crate) fn load(&self, order: Ordering) -> Lending {
        Lending::from_word(self.0.load(order))
    }

    #[inline]
    pub(crate) fn swap(&self, state: Lending, order: Ordering) -> Lending {
        Lending::from_word(self.0.swap(state as u32, order))
    }
}

impl Lending {
    /// The state a word holds: only `LendingCell` writes it, from a
    /// `Lending`.
    #[inline]
    fn from_word(word: u32) -> Lending {
        debug_assert!(word <= Lending::Done as u32);
        match word {
            0 => Lending::Owned,
            1 => Lending::Lent,
            2 => Lending::Kept,
            _ => Lending::Done,
        }
    }
}

/// Entries past the inline ones, in a chain of pool blocks.
#[repr(C)]
pub(crate) struct Overflow {
    next: Option<NonNull<Overflow>>,
    block: u32,
    entries: [MaybeUninit<Entry>; OVERFLOW],
}

/// Entries per overflow block (fits the smallest action block, 512 bytes;
/// loom's semaphore handles are larger).
pub(crate) const OVERFLOW: usize = if cfg!(fenceline_loom) { 4 } else { 30 };

/// A submission. Owned by: the submit stack, then the issuer (pending list
/// or a pass), or the semaphore it waits on (armed timepoint), or the
/// backend (issued, through a `Completion`), exactly one at a time.
// Hot fields first (what every submit and completion touches), then the
// entries, then what only pending or device-waiting actions use.
#[repr(C)]
pub(crate) struct QueueAction<P> {
    /// Submit and woken stacks.
    pub(crate) next: SingleLinks<QueueAction<P>>,
    /// The queue's shared state (type-erased for the timepoint callback).
    pub(crate) owner: *const (),
    pub(crate) block: u32,
    pub(crate) wait_count: u32,
    pub(crate) signal_count: u32,
    /// Waits before this index are satisfied (or waited on the device).
    pub(crate) cursor: u32,
    pub(crate) armed: bool,
    pub(crate) device_wait_count: u8,
    /// Inline entries (bit `i`: entry `i`) that are bitwise copies of an
    /// earlier entry's handle and hold no reference of their own: a signal
    /// on a semaphore the action also waits on (a timeline's usual step,
    /// wait `k` then signal `k + 1`). The earlier entry's reference keeps
    /// the semaphore alive for both; both go in `destroy`.
    aliases: u16,
    /// `Owned`, or the state of a lent action (`Lent`, `Kept`, `Done`).
    pub(crate) lent: LendingCell,
    overflow: Option<NonNull<Overflow>>,
    pub(crate) payload: MaybeUninit<P>,
    entries: [MaybeUninit<Entry>; INLINE],
    /// Links in the issuer's list of actions waiting on a semaphore.
    pub(crate) waiting_links: DoubleLinks<QueueAction<P>>,
    /// Armed on the wait at `cursor` while pending.
    pub(crate) timepoint: Timepoint,
    pub(crate) device_waits: [Option<AnyEvent>; DEVICE_WAITS],
}
/// An action's place on the submit stack, the woken stack, or a
/// backend's completion stack (one at a time).
pub(crate) enum SubmitLink<P> {
    #[allow(dead_code)] // uninhabited: a type-level name only
    Never(std::convert::Infallible, PhantomData<fn() -> P>),
}

impl<P> Link for SubmitLink<P> {
    type Node = QueueAction<P>;
}

// SAFETY: projects to the `next` field.
unsafe impl<P> SingleLink for SubmitLink<P> {
    unsafe fn links(node: NonNull<QueueAction<P>>) -> NonNull<SingleLinks<QueueAction<P>>> {
        // SAFETY: a field projection of a node pointer.
        let links = unsafe { addr_of_mut!((*node.as_ptr()).next) };
        // SAFETY: a field of a non-null node pointer is non-null.
        unsafe { NonNull::new_unchecked(links) }
    }
}

/// An action's place in the issuer's list of actions waiting on a
/// semaphore (while it is also on the woken stack, through `next`, once
/// its timepoint fired).
pub(crate) enum WaitingLink<P> {
    #[allow(dead_code)] // uninhabited: a type-level name only
    Never(std::convert::Infallible, PhantomData<fn() -> P>),
}

impl<P> Link for WaitingLink<P> {
    type Node = QueueAction<P>;
}

// SAFETY: projects to the `waiting_links` field.
unsafe impl<P> DoubleLink for WaitingLink<P> {
    unsafe fn links(node: NonNull<QueueAction<P>>) -> NonNull<DoubleLinks<QueueAction<P>>> {
        // SAFETY: a field projection of a node pointer.
        let links = unsafe { addr_of_mut!((*node.as_ptr()).waiting_links) };
        // SAFETY: a field of a non-null node pointer is non-null.
        unsafe { NonNull::new_unchecked(links) }
    }
}

// SAFETY: an action is owned by one thread at a time (see the type docs);
// its payload must be `Send`.
unsafe impl<P: Send> Send for QueueAction<P> {}

impl<P> QueueAction<P> {
    /// Builds an action in a fresh block from `pool` (the queue's pool, or
    /// its issuer's cache of it). `lent`: its entries borrow the caller's
    /// semaphore handles (`Lent`) instead of cloning them.
    ///
    /// # Safety
    /// If `lent`, the caller's semaphores outlive the action, or the
    /// action is kept (`keep`) before they may go.
    // Inlined into `submit` (its two call sites): the call was a
    // measurable part of a direct submission (BENCHMARKS.md).
    #[inline(always)]
    pub(crate) unsafe fn create<C: BlockSource>(
        pool: &mut C,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        payload: P,
        wake: crate::semaphore::TimepointFn,
        owner: *const (),
        lent: bool,
    ) -> Result<NonNull<QueueAction<P>>, Error> {
        let block = pool.acquire()?;
        let action = block.as_ptr().cast::<QueueAction<P>>();
        let a = action.as_ptr();
        // The block is ours and sized/aligned for an action (the pool was
        // made for `QueueAction<P>`); fields are written in place, each
        // through a projection of `a` and a write to it.
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).next) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(SingleLinks::new()) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).waiting_links) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(DoubleLinks::new()) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).timepoint) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(Timepoint::new(0, wake, a.cast_const().cast())) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).owner) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(owner) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).block) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(block.index()) };
        // An upper bound while the waits are written (see `Built`).
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).wait_count) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(waits.len() as u32) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).signal_count) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(signals.len() as u32) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).cursor) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(0) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).armed) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(false) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).device_wait_count) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(0) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).aliases) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(0) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).lent) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe {
            field.write(LendingCell::new(if lent {
                Lending::Lent
            } else {
                Lending::Owned
            }))
        };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).device_waits) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(Default::default()) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).overflow) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(None) };
        // SAFETY: a projection of `a`, in bounds of our action-sized block.
        let field = unsafe { addr_of_mut!((*a).payload) };
        // SAFETY: the field is in our block, aligned for an action.
        unsafe { field.write(MaybeUninit::new(payload)) };
        let mut built = Built {
            action,
            pool,
            written: 0,
            lent,
        };
        // A wait already reached is met for good (a timeline only goes
        // up): it is not stored, so the action neither retains its
        // semaphore nor looks at it again. A failed semaphore is kept, and
        // fails the action when it is classified.
        let unmet = waits
            .iter()
            .filter(|(sem, value)| !matches!(sem.query(), Ok(v) if v >= *value));
        for (sem, value) in unmet {
            built.write(sem, *value, false)?;
        }
        // SAFETY: we own the action being built; the waits are written.
        let stored = unsafe {
            (*a).wait_count = built.written as u32;
            built.written
        };
        for (sem, value) in signals {
            // A signal on a semaphore a stored wait holds shares its
            // reference: the inline waits (`ALIASED == INLINE`), usually
            // one to compare. The slice is made again for each signal,
            // from the action's pointer, after the last write.
            // SAFETY: a field projection of the action we own.
            let entries = unsafe { addr_of!((*a).entries) };
            // SAFETY: the first `stored` entries (inline up to `INLINE`)
            // were written above and are not written again.
            let waits =
                unsafe { std::slice::from_raw_parts(entries.cast::<Entry>(), stored.min(ALIASED)) };
            let alias = built.written < ALIASED && waits.iter().any(|(w, _)| w.same(sem));
            built.write(sem, *value, alias)?;
        }
        std::mem::forget(built);
        Ok(action)
    }

    fn total(&self) -> usize {
        (self.wait_count + self.signal_count) as usize
    }

    /// The overflow block holding overflow position `p`, and `p`'s index
    /// in it. The pointer carries the pool block's own permission.
    fn overflow_slot(&self, p: usize) -> (NonNull<Overflow>, usize) {
        let mut block = self.overflow;
        for _ in 0..p / OVERFLOW {
            // SAFETY: the chain holds every overflow entry written.
            block = block.and_then(|b| unsafe { b.as_ref() }.next);
        }
        let Some(b) = block else {
            unreachable!("overflow entry {p} was written at creation");
        };
        (b, p % OVERFLOW)
    }

    /// Entry `i` of waits (`i < wait_count`) then signals.
    fn entry(&self, i: usize) -> &Entry {
        debug_assert!(i < self.total());
        // SAFETY: the action is alive (`&self`) and every entry below
        // `total` was written at creation.
        let entry = unsafe { Self::entry_ptr(NonNull::from(self), i) };
        // SAFETY: the entry was written at creation; the action owns its
        // overflow chain, whose blocks outlive `&self`.
        unsafe { &*entry }
    }

    /// Entry `i`'s slot, mutably (for dropping it).
    fn entry_mut(&mut self, i: usize) -> &mut MaybeUninit<Entry> {
        if i < INLINE {
            return &mut self.entries[i];
        }
        let (b, k) = self.overflow_slot(i - INLINE);
        // SAFETY: the block is owned through `&mut self` (the action owns
        // its overflow chain).
        unsafe { &mut (*b.as_ptr()).entries[k] }
    }

    /// Wait `i`.
    pub(crate) fn wait(&self, i: usize) -> &Entry {
        debug_assert!(i < self.wait_count as usize);
        self.entry(i)
    }

    /// Signal `i`.
    pub(crate) fn signal(&self, i: usize) -> &Entry {
        debug_assert!(i < self.signal_count as usize);
        self.entry(self.wait_count as usize + i)
    }

    /// Gives a lent action references of its own: a clone of each entry's
    /// semaphore handle (the entries stay the same bitwise copies, now
    /// counted). The caller then publishes `Kept`.
    ///
    /// # Safety
    /// The action is `Lent` and its submitter, the caller, is still inside
    /// `submit` (the caller's handles keep the semaphores alive).
    pub(crate) unsafe fn keep_entries(action: NonNull<QueueAction<P>>) {
        // No reference to the whole action: its backend may be writing its
        // payload on another thread now. The counts and entries are
        // written at creation and never changed; other threads (a backend
        // reading the signals) only read them too.
        let a = action.as_ptr();
        // SAFETY: a field projection of a live action (see above).
        let wait_count = unsafe { addr_of!((*a).wait_count) };
        // SAFETY: a field read of a live action (see above).
        let wait_count = unsafe { wait_count.read() };
        // SAFETY: a field projection of a live action (see above).
        let signal_count = unsafe { addr_of!((*a).signal_count) };
        // SAFETY: a field read of a live action (see above).
        let total = wait_count + unsafe { signal_count.read() };
        // SAFETY: a field projection of a live action (see above).
        let aliases = unsafe { addr_of!((*a).aliases) };
        // SAFETY: a field read of a live action (see above).
        let aliases = unsafe { aliases.read() };
        for i in 0..total as usize {
            if is_alias(aliases, i) {
                continue; // shares an earlier entry's reference
            }
            // SAFETY: the action is alive and entry `i < total` was written
            // at creation.
            let entry = unsafe { Self::entry_ptr(action, i) };
            // SAFETY: entry `i` was written at creation and is only read
            // now (see above).
            let (sem, _) = unsafe { &*entry };
            std::mem::forget(sem.clone());
        }
    }

    /// Starts fetching, for writing, the lines a woken action's handling
    /// touches: its header, payload and first two entries (a chain step's
    /// wait and signal), its waiting-list links and its timepoint. A hint
    /// (no access): `action` need not be live, only line-aligned (checked
    /// in debug builds).
    pub(crate) fn prefetch(action: NonNull<QueueAction<P>>) {
        // Actions are at least line-aligned (the queue's pool aligns its
        // blocks to 64 bytes or more), so the lines are known offsets and
        // the loops below unroll into one hint per line.
        debug_assert_eq!(action.as_ptr() as usize % crate::prefetch::CACHE_LINE, 0);
        let a = action.as_ptr().cast::<u8>().cast_const();
        crate::prefetch::write_lines_at(a, 0, Self::PREFETCH_HOT_END);
        crate::prefetch::write_lines_at(a, Self::PREFETCH_WAIT.0, Self::PREFETCH_WAIT.1);
    }

    /// What `prefetch` fetches: the header, payload and first two entries
    /// (`0 .. PREFETCH_HOT_END`), the waiting links and the timepoint
    /// (`PREFETCH_WAIT`), as offsets in the action.
    const PREFETCH_HOT_END: usize =
        std::mem::offset_of!(QueueAction<P>, entries) + 2 * std::mem::size_of::<Entry>();
    const PREFETCH_WAIT: (usize, usize) = (
        std::mem::offset_of!(QueueAction<P>, waiting_links),
        std::mem::offset_of!(QueueAction<P>, timepoint) + std::mem::size_of::<Timepoint>(),
    );

    /// The lent state, borrowed alone:
    /// no reference to the rest of the action, which its backend may be
    /// using on another thread.
    ///
    /// # Safety
    /// The action is alive while the reference is.
    pub(crate) unsafe fn lent_state<'a>(action: NonNull<QueueAction<P>>) -> &'a LendingCell {
        // SAFETY: a field projection of a live action, per contract.
        let lent = unsafe { addr_of!((*action.as_ptr()).lent) };
        // SAFETY: a field of a live action, per contract.
        unsafe { &*lent }
    }

    /// Entry `i`, reached through raw field projections (see
    /// `keep_entries`).
    ///
    /// # Safety
    /// The action is alive and entry `i` was written at creation.
    unsafe fn entry_ptr(action: NonNull<QueueAction<P>>, i: usize) -> *const Entry {
        let a = action.as_ptr();
        if i < INLINE {
            // SAFETY: a field projection of the live action (contract).
            let entries = unsafe { addr_of!((*a).entries) };
            // SAFETY: in bounds of the inline array.
            return unsafe { entries.cast::<Entry>().add(i) };
        }
        let p = i - INLINE;
        // SAFETY: a field projection of the live action (contract).
        let overflow = unsafe { addr_of!((*a).overflow) };
        // SAFETY: the overflow chain holds every entry written past the
        // inline ones; its blocks are the action's and not written now.
        let mut block = unsafe { overflow.read() };
        for _ in 0..p / OVERFLOW {
            block = block.and_then(|b| {
                // SAFETY: `b` is a block of the overflow chain, the action's.
                let next = unsafe { addr_of!((*b.as_ptr()).next) };
                // SAFETY: the chain's blocks are the action's and not
                // written now.
                unsafe { next.read() }
            });
        }
        let Some(b) = block else {
            unreachable!("overflow entry {p} was written at creation");
        };
        // SAFETY: `b` is a block of the overflow chain, the action's.
        let entries = unsafe { addr_of!((*b.as_ptr()).entries) };
        // SAFETY: `p % OVERFLOW` is in bounds of the block's entries.
        unsafe { entries.cast::<Entry>().add(p % OVERFLOW) }
    }

    /// Drops the entries, events and payload and returns every block.
    ///
    /// A panic dropping the payload (user captures: a host call that never
    /// ran, a recording's dispatch closures) is contained here: the
    /// action's outcome is already decided and published, so there is
    /// nothing left to fail, and the blocks are returned all the same.
    ///
    /// `owned`: the entries hold references (not a lent action that was
    /// never kept), dropped here; a lent action's copies are left alone.
    ///
    /// # Safety
    /// The caller owns the action; nothing will touch it again; `pool`
    /// gives blocks of the pool the action's came from.
    // Inlined: on a direct submission its call and prologue were a
    // measurable part of the path (BENCHMARKS.md).
    #[inline(always)]
    pub(crate) unsafe fn destroy<C: BlockSource + ?Sized>(
        action: NonNull<QueueAction<P>>,
        pool: &mut C,
        owned: bool,
    ) {
        // SAFETY: owned per contract.
        let a = unsafe { &mut *action.as_ptr() };
        let total = a.total();
        if owned {
            let aliases = a.aliases;
            // An alias is a copy of an earlier entry's handle, whose drop
            // gives back the one reference both stand for.
            for i in 0..total {
                if !is_alias(aliases, i) {
                    // SAFETY: written at creation, dropped once here.
                    unsafe { a.entry_mut(i).assume_init_drop() };
                }
            }
        }
        if a.device_wait_count > 0 {
            a.device_waits = Default::default();
        }
        // SAFETY: the payload was written at creation and not taken; it is
        // dropped once (a panicking `Drop` still counts as dropped).
        let _ = FirstPanic::default().run(|| unsafe { a.payload.assume_init_drop() });
        let mut next = a.overflow.take();
        while let Some(b) = next {
            // SAFETY: overflow blocks are the action's, owned per contract
            // until released below.
            next = unsafe { b.as_ref() }.next;
            // SAFETY: as just above: `b` is not released yet.
            let index = unsafe { b.as_ref() }.block;
            // SAFETY: `b` is the start of block `index` of `pool` (overflow
            // blocks came from `pool`).
            let raw = unsafe { RawBlock::from_parts(b.cast(), index) };
            // SAFETY: overflow blocks came from `pool`, released once.
            unsafe { pool.release(raw) };
        }
        let block = a.block;
        // SAFETY: the action is the start of block `block` of `pool`.
        let raw = unsafe { RawBlock::from_parts(action.cast(), block) };
        // SAFETY: the caller owns the action and nothing touches it again,
        // so its block is released once.
        unsafe { pool.release(raw) };
    }
}

/// Whether entry `i` is an alias (see `QueueAction::aliases`).
fn is_alias(aliases: u16, i: usize) -> bool {
    i < ALIASED && aliases & (1 << i) != 0
}

/// An action being filled; frees what was written if filling fails.
struct Built<'p, P, C: BlockSource> {
    action: NonNull<QueueAction<P>>,
    pool: &'p mut C,
    written: usize,
    /// Entries are bitwise copies of the caller's handles (`Lent`).
    lent: bool,
}

impl<P, C: BlockSource> Built<'_, P, C> {
    /// Writes the next entry. `alias`: an earlier entry holds `sem`
    /// (the same semaphore), and this one shares its reference.
    #[inline(always)]
    fn write(&mut self, sem: &Semaphore, value: u64, alias: bool) -> Result<(), Error> {
        let (lent, i) = (self.lent, self.written);
        // SAFETY: entries are written in order, `written` is the next.
        let slot = unsafe { self.slot_for_write(i) }?;
        let sem = if lent || alias {
            // SAFETY: a copy of the caller's handle (lent: never dropped
            // unless `keep_entries` counted it, and `create`'s contract
            // keeps the semaphore alive meanwhile) or of the earlier
            // entry's (alias: marked below, so never dropped or counted;
            // the earlier entry's reference lives as long as it).
            unsafe { std::ptr::read(sem) }
        } else {
            sem.clone()
        };
        slot.write((sem, value));
        if alias {
            debug_assert!(i < ALIASED);
            // SAFETY: we own the action being built.
            unsafe { (*self.action.as_ptr()).aliases |= 1 << i };
        }
        self.written += 1;
        Ok(())
    }

    /// The slot for entry `i`, chaining an overflow block when needed.
    ///
    /// # Safety
    /// `i == self.written` (entries are filled in order).
    #[inline(always)]
    unsafe fn slot_for_write(&mut self, i: usize) -> Result<&mut MaybeUninit<Entry>, Error> {
        if i < INLINE {
            // SAFETY: we own the action being built.
            return Ok(unsafe { &mut (*self.action.as_ptr()).entries[i] });
        }
        // SAFETY: forwarded contract.
        unsafe { self.overflow_slot_for_write(i) }
    }

    /// [`slot_for_write`](Self::slot_for_write) past the inline entries:
    /// out of line, the rare case.
    ///
    /// # Safety
    /// As `slot_for_write`, and `i >= INLINE`.
    #[cold]
    #[inline(never)]
    unsafe fn overflow_slot_for_write(
        &mut self,
        i: usize,
    ) -> Result<&mut MaybeUninit<Entry>, Error> {
        // SAFETY: we own the action being built.
        let a = unsafe { &mut *self.action.as_ptr() };
        let p = i - INLINE;
        // Walk to (or grow) block p / OVERFLOW.
        let mut link: &mut Option<NonNull<Overflow>> = &mut a.overflow;
        for _ in 0..p / OVERFLOW {
            let Some(b) = link else {
                unreachable!("blocks are chained in order");
            };
            // SAFETY: blocks in the chain are ours.
            link = unsafe { &mut (*b.as_ptr()).next };
        }
        if link.is_none() {
            let block = self.pool.acquire()?;
            let b = block.as_ptr().cast::<Overflow>();
            // SAFETY: a fresh block, large enough for an `Overflow` (the
            // pool's blocks are at least 512 bytes): the field is in bounds.
            let next = unsafe { addr_of_mut!((*b.as_ptr()).next) };
            // SAFETY: a fresh block of ours, aligned for an `Overflow`.
            unsafe { next.write(None) };
            // SAFETY: as for `next`: the field is in bounds of the block.
            let index = unsafe { addr_of_mut!((*b.as_ptr()).block) };
            // SAFETY: a fresh block of ours, aligned for an `Overflow`.
            unsafe { index.write(block.index()) };
            *link = Some(b);
        }
        let Some(b) = *link else {
            unreachable!("just chained");
        };
        // SAFETY: the block is ours; its entries array is in bounds.
        Ok(unsafe { &mut (*b.as_ptr()).entries[p % OVERFLOW] })
    }
}

impl<P, C: BlockSource> Drop for Built<'_, P, C> {
    fn drop(&mut self) {
        // Creation failed part way: drop the entries written so far, the
        // payload, and return the blocks.
        // SAFETY: we own the partly built action.
        let a = unsafe { &mut *self.action.as_ptr() };
        let waits = a.wait_count as usize;
        a.wait_count = (self.written.min(waits)) as u32;
        a.signal_count = self.written.saturating_sub(waits) as u32;
        // SAFETY: the counts now cover exactly the written entries.
        unsafe { QueueAction::destroy(self.action, &mut *self.pool, !self.lent) };
    }
}

#[cfg(not(fenceline_loom))]
static_assertions::const_assert!(std::mem::size_of::<Overflow>() <= 512);

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::*;
    use crate::pool::BlockPool;

    unsafe fn ignore(_: NonNull<Timepoint>, _: Result<(), Error>) {}

    fn pool() -> BlockPool {
        let size = std::mem::size_of::<QueueAction<()>>().max(512);
        BlockPool::new(size.next_power_of_two(), crate::prefetch::CACHE_LINE).unwrap()
    }

    /// A signal on a semaphore the action also waits on shares the wait's
    /// reference: one taken, one given back, the caller's handle alone
    /// left. Mutation checked: never aliasing (`alias` false in `create`)
    /// holds 3 handles here, not 2.
    #[test]
    fn a_signal_on_a_waited_semaphore_shares_its_reference() {
        let (s, other) = (Semaphore::new(0), Semaphore::new(0));
        let pool = pool();
        for lent in [false, true] {
            let waits = [(&s, 1)];
            let signals = [(&other, 1), (&s, 2)];
            // SAFETY: the caller's handles outlive the action (freed below).
            let a = unsafe {
                QueueAction::create(
                    &mut &pool,
                    &waits,
                    &signals,
                    (),
                    ignore,
                    std::ptr::null(),
                    lent,
                )
            }
            .unwrap();
            if lent {
                assert_eq!((s.handles(), other.handles()), (1, 1), "lent: copies only");
                // SAFETY: lent, and we are its submitter.
                unsafe { QueueAction::keep_entries(a) };
            }
            assert_eq!(s.handles(), 2, "one reference for the wait and signal");
            assert_eq!(other.handles(), 2);
            // SAFETY: ours, alive until destroyed below.
            let a_ref = unsafe { a.as_ref() };
            assert!(a_ref.wait(0).0.same(&s) && a_ref.signal(1).0.same(&s));
            assert_eq!((a_ref.wait(0).1, a_ref.signal(1).1), (1, 2));
            // SAFETY: ours, and the entries hold references (kept or owned).
            unsafe { QueueAction::destroy(a, &mut &pool, true) };
            assert_eq!(
                (s.handles(), other.handles()),
                (1, 1),
                "each given back once"
            );
        }
    }

    /// A wait already reached is not stored: a signal on its semaphore has
    /// nothing to share and takes its own reference.
    #[test]
    fn a_signal_on_a_reached_wait_takes_its_own_reference() {
        let s = Semaphore::new(1);
        let pool = pool();
        // SAFETY: as above.
        let a = unsafe {
            QueueAction::create(
                &mut &pool,
                &[(&s, 1)],
                &[(&s, 2)],
                (),
                ignore,
                std::ptr::null(),
                false,
            )
        }
        .unwrap();
        assert_eq!(s.handles(), 2);
        // SAFETY: ours, alive until destroyed below.
        assert_eq!(unsafe { a.as_ref() }.wait_count, 0);
        // SAFETY: ours, owned.
        unsafe { QueueAction::destroy(a, &mut &pool, true) };
        assert_eq!(s.handles(), 1);
    }
}
