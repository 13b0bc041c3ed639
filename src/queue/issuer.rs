//! `IssuerThread`: a thread a device owns that runs the issuer turns its
//! queues hand off ([`Backend::hand_off_turn`](super::Backend::hand_off_turn)),
//! so a `submit` or `signal` returns after a bounded number of passes
//! however long other threads keep submitting. It runs no user code
//! (issue passes only), so it never waits on the actions of a turn it
//! holds, which a thread that runs host calls might.
//!
//! One cell per queue (a queue has one turn). The thread exits once no
//! [`Issuer`] handle is left: every queue's backend holds one, and no turn
//! can be offered once they are all gone.

use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use crate::error::{Error, ErrorKind};
use crate::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::sync::sleeper::Sleeper;
use crate::sync::thread;
use crate::sync::Arc;

/// Runs a turn taken from a cell (type-erased: the issuer does not know
/// the queue's backend).
///
/// # Safety
/// The argument is a turn offered through [`Issuer::offer`] and taken from
/// its cell by the caller, run once.
pub type TurnRunner = unsafe fn(NonNull<()>);

struct Shared {
    /// Offered turns, one cell per queue.
    cells: Box<[CachePadded<AtomicPtr<()>>]>,
    run: TurnRunner,
    /// `Issuer` handles alive (the thread exits at 0).
    handles: AtomicUsize,
    /// The thread's flag and handle: set before it parks, taken by
    /// whoever wakes it.
    sleeper: Sleeper,
}

crate::sync::thread_local! {
    /// The state of the issuer thread running on this thread (null
    /// elsewhere).
    static HERE: std::cell::Cell<*const Shared> = std::cell::Cell::new(std::ptr::null());
}

/// A queue's handle to its device's issuer thread (cheap to clone).
pub struct Issuer {
    shared: Arc<Shared>,
}

/// The device's hold on its issuer thread: joins it when dropped (from
/// outside the thread), after every queue's [`Issuer`] is gone.
pub struct IssuerThread {
    handle: Option<thread::JoinHandle<()>>,
}

impl IssuerThread {
    /// Starts a thread for `queues` queues that runs their offered turns
    /// with `run`; returns it and the queues' handle.
    pub fn start(
        name: &str,
        queues: usize,
        run: TurnRunner,
    ) -> Result<(IssuerThread, Issuer), Error> {
        let shared = Arc::new(Shared {
            cells: (0..queues)
                .map(|_| CachePadded::new(AtomicPtr::new(std::ptr::null_mut())))
                .collect(),
            run,
            handles: AtomicUsize::new(1),
            sleeper: Sleeper::new(),
        });
        let mine = shared.clone();
        let handle = thread::Builder::new()
            .name(name.into())
            .spawn(move || run_thread(mine))
            .map_err(|e| {
                Error::new(
                    ErrorKind::ResourceExhausted,
                    format!("spawning the issuer thread: {e}"),
                )
            })?;
        Ok((
            IssuerThread {
                handle: Some(handle),
            },
            Issuer { shared },
        ))
    }

    /// Leaves the thread running: it exits on its own once the last
    /// queue handle goes (a device dropped inside its own work, whose
    /// queues may outlive the drop).
    pub fn detach(mut self) {
        self.handle = None;
    }
}

impl Drop for IssuerThread {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        // On the thread itself (a device dropped inside an issue pass):
        // it exits on its own once the last queue handle goes.
        if handle.thread().id() != thread::current().id() {
            // It only panics on a fenceline bug; nothing to add here.
            let _ = handle.join();
        }
    }
}

impl Clone for Issuer {
    fn clone(&self) -> Issuer {
        // Relaxed: a clone is made from a live handle, which keeps the
        // count above zero.
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        Issuer {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        // AcqRel: pairs with the Acquire loads of `handles` in `run_thread`
        // (this handle's offers come before) and with the other drops'
        // decrements. Then the flag: the thread's arm reads the flag's swap
        // (and sees the count) or this wakes it (see `offer`). The state
        // stays alive through our `Arc` until after the wake.
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            wake(&self.shared);
        }
    }
}

impl Issuer {
    /// Whether the calling thread is this issuer thread (which keeps the
    /// turns it meets: issuing is its job).
    pub fn is_current(&self) -> bool {
        HERE.with(|h| std::ptr::eq(h.get(), Arc::as_ptr(&self.shared)))
    }

    /// Hands queue `queue`'s turn to the thread, which runs it soon. The
    /// cell is empty (a queue has one turn). The caller holds this handle,
    /// so the thread is running.
    ///
    /// # Safety
    /// `turn` is what the thread's runner expects, given up here: the
    /// runner takes it over once.
    ///
    /// No lost turn: the thread arms its `sleeping` flag (an AcqRel swap)
    /// and looks at the cells again before it parks; this stores the cell
    /// (Release), then takes the flag (an AcqRel swap). Both swaps hit one
    /// word: this one comes after the arm (it reads `true` and unparks the
    /// thread), or before (the arm reads it, and the look after it sees the
    /// cell).
    pub unsafe fn offer(&self, queue: usize, turn: NonNull<()>) {
        let cell = &self.shared.cells[queue];
        debug_assert!(cell.load(Ordering::Relaxed).is_null(), "one turn a queue");
        // Release: pairs with the Acquire swap in `run_offered`: the old
        // holder's passes happen before the thread's.
        cell.store(turn.as_ptr(), Ordering::Release);
        wake(&self.shared);
    }
}

/// Takes the thread's flag; unparks it if it was set. (`Sleeper::wake`'s
/// AcqRel swap pairs with the arm's in `run_thread`, both ways: it acquires
/// the thread's handle and releases the cell store, or count, made before
/// it to the thread's look after the arm.)
fn wake(shared: &Shared) {
    shared.sleeper.wake();
}

/// Runs every offered turn; `true` if there was any.
fn run_offered(shared: &Shared) -> bool {
    let mut any = false;
    for cell in shared.cells.iter() {
        if cell.load(Ordering::Relaxed).is_null() {
            continue;
        }
        // Acquire: pairs with the offer's release store.
        if let Some(turn) = NonNull::new(cell.swap(std::ptr::null_mut(), Ordering::Acquire)) {
            any = true;
            // A panic out of a turn (a backend's) must not end the thread:
            // the queue's drain gave the turn back before rethrowing it.
            // SAFETY: offered through `offer` (the runner's contract) and
            // taken from its cell by the swap above, once.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
                (shared.run)(turn)
            }));
        }
    }
    any
}

/// The thread: runs offered turns, parks when there are none, exits once
/// no `Issuer` handle is left (no queue can offer a turn any more).
fn run_thread(shared: Arc<Shared>) {
    // SAFETY: this thread's only registration, before it first arms.
    unsafe { shared.sleeper.register_current() };
    HERE.with(|h| h.set(Arc::as_ptr(&shared)));
    loop {
        if run_offered(&shared) {
            continue;
        }
        // Every offer comes from a handle, before its drop: once the count
        // reads 0 (Acquire: pairs with the drops' AcqRel), one more look
        // finds every turn offered.
        if shared.handles.load(Ordering::Acquire) == 0 {
            if run_offered(&shared) {
                continue;
            }
            return;
        }
        // AcqRel: pairs with the swap in `wake`, both ways (see there).
        shared.sleeper.arm(Ordering::AcqRel);
        // Looked at after the arm: an offer (or a last handle's drop)
        // before it is seen here, one after it finds the flag set. The
        // Acquire loads pair with `offer`'s Release store and the drops'
        // AcqRel decrement (the cell's turn is acquired again by its swap).
        let offered = shared
            .cells
            .iter()
            .any(|c| !c.load(Ordering::Acquire).is_null());
        if !offered && shared.handles.load(Ordering::Acquire) > 0 {
            thread::park();
        }
        // AcqRel: pairs with the swaps in `wake` like the arm, but nothing
        // relies on it: the next round's looks and arm synchronize again.
        shared.sleeper.disarm(Ordering::AcqRel);
    }
}
