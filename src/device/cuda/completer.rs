//! How a CUDA queue learns that issued work finished, without any CUDA
//! call inside a CUDA callback (IREE deadlocked on this). One small type,
//! [`Completer`], two designs behind [`CompletionMode`].
//!
//! Either way the issuer pushes each issued action, in stream order, on a
//! lock-free [`CompletionStack`]; the queue's completion thread moves them
//! to its own FIFO and completes them (signals, frees, runs host calls)
//! once the stream is past them:
//!
//! - `HostFunction`: each action is followed on the stream by a
//!   `cuLaunchHostFunc` of [`on_stream_reached`], which only counts and
//!   unparks the completion thread (atomics and a futex wake). The callback never sees
//!   an action: the n-th callback completes the n-th action of the FIFO (a
//!   stream runs its host functions in order). The thread also wakes every
//!   [`HEALTH_CHECK`] (idle or not) and, with actions outstanding and no
//!   callback since, queries the stream: after a sticky error (a faulting
//!   kernel) the driver runs no more callbacks, and the outstanding actions
//!   fail with that error instead of waiting forever.
//! - `EventThread`: the completion thread `cuEventSynchronize`s the event
//!   recorded after each action's work, in FIFO order.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use crossbeam_utils::sync::{Parker, Unparker};
use cudarc::driver::sys::{self, CUresult};

use super::backend::CudaBackend;
use super::driver::{check, Context, Stream};
use crate::device::Work;
use crate::error::{Error, ErrorKind};
use crate::queue::{Completion, CompletionStack, Completions};

/// Which completion path a CUDA queue uses. Neither makes a CUDA call
/// inside a CUDA callback; both complete actions (signals, frees, host
/// calls) on the queue's own completion thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompletionMode {
    /// After each action's work, `cuLaunchHostFunc` enqueues a callback
    /// that only counts and unparks the completion thread (atomics and a
    /// futex wake). One more driver call per action, and the host callback
    /// sits in the stream (on real hardware a host function costs tens of
    /// microseconds and holds the stream meanwhile); the completion thread
    /// sleeps while nothing completes (waking every 100 ms to check its
    /// stream for a sticky error).
    HostFunction,
    /// The default. The completion thread takes actions in issue order and
    /// `cuEventSynchronize`s the event recorded after each one's work (how
    /// it waits, spin or block, follows the context's scheduling flags).
    /// An execute costs two driver calls on the issuing thread
    /// (`cuGraphLaunch`, `cuEventRecord`) and nothing is added to the
    /// stream: IREE moved to this design from host functions for latency.
    #[default]
    EventThread,
}

/// How often a completion thread with outstanding `HostFunction` work
/// checks its stream for a sticky error.
pub(crate) const HEALTH_CHECK: Duration = Duration::from_millis(100);

/// State the completion thread, the issuer and the stream callbacks share.
pub(crate) struct CompleterShared {
    /// Issued actions, in stream order (issuer to completion thread).
    issued: CompletionStack<CudaBackend>,
    /// `HostFunction`: callbacks run so far.
    reached: AtomicU64,
    unparker: Unparker,
    stop: AtomicBool,
    pub(crate) mode: CompletionMode,
}

/// One queue's completion path and its thread.
pub(crate) struct Completer {
    pub(crate) shared: Arc<CompleterShared>,
    thread: Option<JoinHandle<()>>,
    pub(crate) thread_id: ThreadId,
}

impl Completer {
    pub(crate) fn start(
        mode: CompletionMode,
        ctx: Arc<Context>,
        stream: Arc<Stream>,
        index: usize,
    ) -> Result<Completer, Error> {
        let parker = Parker::new();
        let shared = Arc::new(CompleterShared {
            issued: CompletionStack::default(),
            reached: AtomicU64::new(0),
            unparker: parker.unparker().clone(),
            stop: AtomicBool::new(false),
            mode,
        });
        let s = shared.clone();
        let started = std::sync::Arc::new(crate::sync::started::Latch::new(1));
        let arrival = started.arrival();
        let thread = std::thread::Builder::new()
            .name(format!("fenceline-cuda-q{index}"))
            .spawn(move || run(&s, &ctx, &stream, &parker, arrival))
            .map_err(|e| {
                Error::new(
                    ErrorKind::ResourceExhausted,
                    format!("spawning a CUDA completion thread: {e}"),
                )
            })?;
        let thread_id = thread.thread().id();
        // Its start-up allocations (the driver's entry points) happen
        // before this returns, not in the caller's first frames.
        started.wait();
        Ok(Completer {
            shared,
            thread: Some(thread),
            thread_id,
        })
    }

    /// Hands an action whose work is on the stream to the completion path.
    /// The caller is the queue's issuer (one at a time, in stream order)
    /// with the context current.
    pub(crate) fn submit(&self, stream: &Stream, work: Completion<CudaBackend>) {
        if self.shared.mode == CompletionMode::HostFunction {
            // Each callback owns a reference, so the state it counts in
            // outlives it whatever the driver does.
            let user = Arc::into_raw(self.shared.clone())
                .cast_mut()
                .cast::<c_void>();
            // SAFETY: a live stream, the context is current; `user` is
            // taken back once, by the callback (or below).
            let r = unsafe { sys::cuLaunchHostFunc(stream.raw, Some(on_stream_reached), user) };
            if let Err(e) = check(r, "cuLaunchHostFunc") {
                // SAFETY: not enqueued: the reference is still ours.
                drop(unsafe { Arc::from_raw(user.cast_const().cast::<CompleterShared>()) });
                // No callback will count this action: it is not pushed.
                return work.complete(Err(e));
            }
            // Pushed after its callback was enqueued: a callback may count
            // before the push; the completion thread treats the count as
            // credit for the next actions to arrive.
        }
        self.shared.issued.push(work);
        if self.shared.mode == CompletionMode::EventThread {
            self.shared.unparker.unpark();
        }
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load of `stop` in `run`; the
        // actions pushed before are seen there in `issued`.
        self.shared.stop.store(true, Ordering::Release);
        self.shared.unparker.unpark();
        if let Some(t) = self.thread.take() {
            // A queue dropped from a host call runs on this very thread:
            // it finishes its loop on its own instead.
            if std::thread::current().id() != self.thread_id {
                let _ = t.join();
            }
        }
    }
}

/// The `cuLaunchHostFunc` callback: counts, wakes, and drops its
/// reference (atomics and a futex wake; never a CUDA call).
///
/// # Safety
/// `user` is a reference to a `CompleterShared` from `Arc::into_raw`, owned
/// by this callback (see `Completer::submit`).
unsafe extern "C" fn on_stream_reached(user: *mut c_void) {
    // SAFETY: per contract.
    let shared = unsafe { Arc::from_raw(user.cast_const().cast::<CompleterShared>()) };
    // Release: pairs with the Acquire loads of `reached` in `run`; the
    // completion thread that reads the count sees the stream's work as done.
    shared.reached.fetch_add(1, Ordering::Release);
    shared.unparker.unpark();
    // If this is the last reference (device gone), dropping frees plain
    // memory only: every action was completed before the device dropped.
    drop(shared);
}

/// The completion thread.
fn run(
    shared: &CompleterShared,
    ctx: &Context,
    stream: &Stream,
    parker: &Parker,
    started: crate::sync::started::Arrival,
) {
    // Our own thread: the context stays current for its life.
    let _ = ctx.set_current();
    let mut fifo: Completions<CudaBackend> = shared.issued.take_all();
    // The driver binding loads each entry point on its first call (and
    // allocates doing so): make the first calls of the rarely taken ones
    // here, so that a health check or a fallback never allocates later.
    // Both are harmless on a fresh stream.
    fail_if_faulted(stream, &mut fifo);
    let _ = stream.synchronize();
    drop(started);
    // `HostFunction`: callbacks already matched to completed actions.
    let mut counted = 0u64;
    loop {
        fifo.append(shared.issued.take_all());
        let mut progressed = false;
        match shared.mode {
            CompletionMode::HostFunction => {
                // Acquire: pairs with the Release `fetch_add` in
                // `on_stream_reached`; the counted actions' work is done.
                let reached = shared.reached.load(Ordering::Acquire);
                while counted < reached {
                    let Some(work) = fifo.next() else { break };
                    counted += 1;
                    progressed = true;
                    finish_guarded(shared, stream, work);
                }
            }
            CompletionMode::EventThread => {
                for work in fifo.by_ref() {
                    progressed = true;
                    finish_guarded(shared, stream, work);
                }
            }
        }
        if progressed {
            continue;
        }
        // Acquire: pairs with the Release `fetch_add` in
        // `on_stream_reached`; only decides to look again (nothing is
        // completed on this load).
        if shared.mode == CompletionMode::HostFunction
            && fifo.is_empty()
            && shared.reached.load(Ordering::Acquire) > counted
        {
            // Counted before its action was pushed: the issuer pushes right
            // after enqueueing the callback, without a wake. Look again soon.
            parker.park_timeout(Duration::from_micros(20));
            continue;
        }
        if fifo.is_empty() {
            // Acquire: pairs with the Release store in `Completer::drop`;
            // sees the actions pushed before it in `issued`.
            if shared.stop.load(Ordering::Acquire) && shared.issued.is_empty() {
                return;
            }
            match shared.mode {
                CompletionMode::EventThread => parker.park(),
                // An action pushed after our look is woken for by its
                // callback, which never comes after a sticky error: never
                // sleep for good here.
                CompletionMode::HostFunction => parker.park_timeout(HEALTH_CHECK),
            }
        } else {
            parker.park_timeout(HEALTH_CHECK);
            // Acquire: pairs with the Release `fetch_add` in
            // `on_stream_reached`; only decides the health check (nothing
            // is completed on this load).
            if shared.reached.load(Ordering::Acquire) == counted {
                fail_if_faulted(stream, &mut fifo);
            }
        }
    }
}

/// After a sticky error no callback runs again: fail what is outstanding.
fn fail_if_faulted(stream: &Stream, fifo: &mut Completions<CudaBackend>) {
    // SAFETY: a live stream (the context is current on this thread).
    let r = unsafe { sys::cuStreamQuery(stream.raw) };
    if r == CUresult::CUDA_SUCCESS || r == CUresult::CUDA_ERROR_NOT_READY {
        return;
    }
    let e = Error::new(
        ErrorKind::Aborted,
        format!("the CUDA stream failed before this work completed: {r:?}"),
    );
    for work in fifo.by_ref() {
        // See `finish_guarded`.
        let _ = catch_unwind(AssertUnwindSafe(|| work.complete(Err(e.clone()))));
    }
}

/// [`finish`], on a thread nobody else would notice die: a panic out of a
/// completion (a timepoint callback that panicked while the action
/// signalled; the action itself was finished) is dropped, and the thread
/// goes on completing the queue's work.
fn finish_guarded(shared: &CompleterShared, stream: &Stream, work: Completion<CudaBackend>) {
    let _ = catch_unwind(AssertUnwindSafe(|| finish(shared, stream, work)));
}

/// Waits (event-thread mode), runs a host call, then completes.
fn finish(shared: &CompleterShared, stream: &Stream, mut work: Completion<CudaBackend>) {
    let mut result = Ok(());
    if shared.mode == CompletionMode::EventThread {
        result = match &work.payload().event {
            // SAFETY: a live pooled event, recorded after the work.
            Some(ev) => check(
                unsafe { sys::cuEventSynchronize(ev.event().raw) },
                "cuEventSynchronize",
            ),
            // No event could be had: wait for the whole stream.
            None => stream.synchronize(),
        };
    }
    if result.is_ok() {
        if let Work::HostCall(_) = &work.payload().work {
            if let Work::HostCall(f) =
                std::mem::replace(&mut work.payload_mut().work, Work::Barrier)
            {
                result = crate::unwind::guarded(|| f.call());
            }
        }
    }
    if result.is_ok() {
        if let Work::Alloca(buffer) = &work.payload().work {
            // The stream is past the allocation: host copies may use it
            // from now on (before the signals, so whoever sees them can).
            if let Some(mem) = buffer.cuda() {
                mem.reached();
            }
        }
    }
    if result.is_ok() && work.device_waits().next().is_some() {
        // Waits met on the device: this action's work ran after its
        // producers' on the GPU, but their completions may not have reached
        // the host yet (another queue's thread). Their device records
        // promise those values, so reach them now: whoever waits on this
        // action's signals then sees its waits reached too. A producer
        // that failed on the host since fails this action.
        result = work
            .waits()
            .find_map(|(s, v)| s.signal_at_least(v).err())
            .map_or(Ok(()), Err);
    }
    if let Err(e) = crate::device::work::release_held(&mut work.payload_mut().work) {
        result = result.and(Err(e));
    }
    // A dependent that waited on this action on the GPU may have completed
    // first and reached our values: that is not an error here.
    // The payload's event goes back to the pool with the action.
    if work.payload().published {
        work.complete_reached_ok(result);
    } else {
        work.complete(result);
    }
}
