//! Streams (one host thread each, running its queue in order), their
//! priorities, events, and host functions.

use crate::context::require_context;
use crate::misuse::{error, lock, misuse};
use crate::state::{handle, id_of, state};
use crate::{api, fault, guarded, InHostFn, Out, SimResult};
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::{CUevent, CUhostFn, CUresult, CUstream};
use std::collections::BTreeSet;
use std::ffi::{c_int, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};

/// Work queued on a stream. It reports its own failure (misuse or error)
/// before returning the code, which the stream keeps for its next sync.
pub(crate) type Op = Box<dyn FnOnce() -> SimResult + Send>;

/// The submitting side of a stream. Dropping the last `Arc` closes the queue:
/// the thread finishes what was queued and exits.
pub(crate) struct Stream {
    queue: mpsc::Sender<Op>,
    progress: Arc<Progress>,
    /// As created (clamped to the range), for `cuStreamGetPriority` only:
    /// every stream runs on a thread of its own, so there is no point
    /// where the simulator picks one stream's work over another's and a
    /// priority could change what runs first.
    priority: c_int,
}

/// Shared between a stream's submitters and its thread.
struct Progress {
    counts: Mutex<Counts>,
    changed: Condvar,
}

struct Counts {
    submitted: u64,
    done: u64,
    /// First failure of a queued op since the last sync or query.
    error: Option<CUresult>,
}

/// Waits on `cv`, waking at least every few milliseconds so that callers
/// notice an injected fault.
fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait_timeout(guard, std::time::Duration::from_millis(5))
        .map(|(g, _)| g)
        .unwrap_or_else(|p| p.into_inner().0)
}

impl Stream {
    fn spawn(call: &str, priority: c_int) -> SimResult<Arc<Stream>> {
        let (queue, ops) = mpsc::channel::<Op>();
        let progress = Arc::new(Progress {
            counts: Mutex::new(Counts {
                submitted: 0,
                done: 0,
                error: None,
            }),
            changed: Condvar::new(),
        });
        let p = progress.clone();
        std::thread::Builder::new()
            .name("fenceline-sim-stream".into())
            .spawn(move || run(ops, &p))
            .map_err(|e| {
                error(
                    CUDA_ERROR_OUT_OF_MEMORY,
                    format_args!("{call}: cannot start a stream thread: {e}"),
                )
            })?;
        Ok(Arc::new(Stream {
            queue,
            progress,
            priority,
        }))
    }

    /// Queues `op` behind everything submitted before.
    pub(crate) fn enqueue(&self, op: Op) -> SimResult {
        lock(&self.progress.counts).submitted += 1;
        self.queue.send(op).map_err(|_| {
            lock(&self.progress.counts).submitted -= 1;
            error(CUDA_ERROR_UNKNOWN, "stream thread is gone")
        })
    }

    /// Waits for everything submitted so far; returns a queued op's failure.
    fn synchronize(&self) -> SimResult {
        let mut c = lock(&self.progress.counts);
        let target = c.submitted;
        while c.done < target && fault().is_none() {
            c = wait(&self.progress.changed, c);
        }
        if let Some(code) = fault() {
            return Err(code);
        }
        c.error.take().map_or(Ok(()), Err)
    }

    fn query(&self) -> SimResult {
        let mut c = lock(&self.progress.counts);
        match c.error.take() {
            Some(e) => Err(e),
            None if c.done < c.submitted => Err(CUDA_ERROR_NOT_READY),
            None => Ok(()),
        }
    }
}

/// A stream thread: runs ops in order until the queue is closed and drained.
fn run(ops: mpsc::Receiver<Op>, progress: &Progress) {
    for op in ops {
        // After a sticky fault, queued work never runs.
        let result = match fault() {
            Some(code) => Err(code),
            None => catch_unwind(AssertUnwindSafe(op))
                .unwrap_or_else(|_| fail!(CUDA_ERROR_LAUNCH_FAILED, "a stream operation panicked")),
        };
        let mut c = lock(&progress.counts);
        c.done += 1;
        if let Err(e) = result {
            c.error.get_or_insert(e);
        }
        drop(c);
        progress.changed.notify_all();
    }
}

/// The stream behind a handle; null, `CU_STREAM_LEGACY` (0x1) and
/// `CU_STREAM_PER_THREAD` (0x2) all name the shared null stream.
pub(crate) fn stream(h: CUstream, call: &str) -> SimResult<Arc<Stream>> {
    let id = id_of(h);
    let mut st = state();
    if id > 2 {
        return st.streams.get(id, call).cloned();
    }
    if let Some(s) = &st.null_stream {
        return Ok(s.clone());
    }
    let s = Stream::spawn(call, LEAST_PRIORITY)?;
    st.null_stream = Some(s.clone());
    Ok(s)
}

/// An event: each record is a new epoch, pending until its stream reaches it.
pub(crate) struct Event {
    epochs: Mutex<Epochs>,
    changed: Condvar,
}

struct Epochs {
    /// The latest record (0: never recorded).
    latest: u64,
    pending: BTreeSet<u64>,
}

impl Event {
    fn new() -> Self {
        Event {
            epochs: Mutex::new(Epochs {
                latest: 0,
                pending: BTreeSet::new(),
            }),
            changed: Condvar::new(),
        }
    }

    fn latest(&self) -> u64 {
        lock(&self.epochs).latest
    }

    fn begin_record(&self) -> u64 {
        let mut e = lock(&self.epochs);
        e.latest += 1;
        let epoch = e.latest;
        e.pending.insert(epoch);
        epoch
    }

    fn complete(&self, epoch: u64) {
        lock(&self.epochs).pending.remove(&epoch);
        self.changed.notify_all();
    }

    fn is_complete(&self, epoch: u64) -> bool {
        !lock(&self.epochs).pending.contains(&epoch)
    }

    /// Waits until `epoch` completes; the injected fault, if any.
    fn wait(&self, epoch: u64) -> SimResult {
        let mut e = lock(&self.epochs);
        while e.pending.contains(&epoch) && fault().is_none() {
            e = wait(&self.changed, e);
        }
        fault().map_or(Ok(()), Err)
    }
}

fn event(h: CUevent, call: &str) -> SimResult<Arc<Event>> {
    state().events.get(id_of(h), call).cloned()
}

/// Starts a stream thread (flags are ignored) at the default priority,
/// [`LEAST_PRIORITY`].
///
/// # Safety
/// `phStream` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(phStream: *mut CUstream, _flags: c_uint) -> CUresult {
    api("cuStreamCreate", || {
        // SAFETY: `phStream` is null or writable by this fn's contract.
        unsafe { create("cuStreamCreate", phStream, LEAST_PRIORITY) }
    })
}

/// Starts a stream thread (flags are ignored) with `priority`, clamped to
/// [`GREATEST_PRIORITY`]`..=`[`LEAST_PRIORITY`] as the real driver clamps
/// it. The priority is only recorded, for `cuStreamGetPriority`: each
/// stream runs on a thread of its own, so nothing here picks between
/// streams' work for a priority to decide.
///
/// # Safety
/// `phStream` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    phStream: *mut CUstream,
    _flags: c_uint,
    priority: c_int,
) -> CUresult {
    const CALL: &str = "cuStreamCreateWithPriority";
    api(CALL, || {
        let priority = priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY);
        // SAFETY: `phStream` is null or writable by this fn's contract.
        unsafe { create(CALL, phStream, priority) }
    })
}

/// The body of both stream creations: a stream of `priority` (already in
/// range) under a new handle written to `phStream`.
///
/// # Safety
/// `phStream` must be null or valid for a write.
unsafe fn create(call: &str, phStream: *mut CUstream, priority: c_int) -> SimResult {
    let out = Out::new(phStream, call, "phStream")?;
    require_context(call)?;
    let s = Stream::spawn(call, priority)?;
    let id = state().streams.insert(s);
    // SAFETY: writable by this fn's contract.
    unsafe { out.write(handle(id)) };
    Ok(())
}

/// Destroys the handle at once; queued work still runs, then the thread exits.
#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(hStream: CUstream) -> CUresult {
    api("cuStreamDestroy_v2", || {
        state()
            .streams
            .remove(id_of(hStream), "cuStreamDestroy_v2")
            .map(drop)
    })
}

/// Waits until the stream has run everything queued so far.
#[no_mangle]
pub extern "C" fn cuStreamSynchronize(hStream: CUstream) -> CUresult {
    api("cuStreamSynchronize", || {
        stream(hStream, "cuStreamSynchronize")?.synchronize()
    })
}

/// `CUDA_ERROR_NOT_READY` while queued work remains.
#[no_mangle]
pub extern "C" fn cuStreamQuery(hStream: CUstream) -> CUresult {
    api("cuStreamQuery", || {
        stream(hStream, "cuStreamQuery")?.query()
    })
}

/// The least stream priority `cuCtxGetStreamPriorityRange` reports: the
/// default, what `cuStreamCreate` and the null stream get (as on the real
/// driver, where it is 0).
pub const LEAST_PRIORITY: c_int = 0;

/// The greatest stream priority `cuCtxGetStreamPriorityRange` reports
/// (numerically the lowest: -5, as current GPUs report).
pub const GREATEST_PRIORITY: c_int = -5;

/// Writes the stream priority range, [`LEAST_PRIORITY`] and
/// [`GREATEST_PRIORITY`]; either pointer may be null (not wanted), as on
/// the real driver. Needs a current context.
///
/// # Safety
/// Each pointer must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    leastPriority: *mut c_int,
    greatestPriority: *mut c_int,
) -> CUresult {
    const CALL: &str = "cuCtxGetStreamPriorityRange";
    api(CALL, || {
        require_context(CALL)?;
        for (out, value) in [
            (leastPriority, LEAST_PRIORITY),
            (greatestPriority, GREATEST_PRIORITY),
        ] {
            if !out.is_null() {
                // SAFETY: non-null, so writable by this fn's contract.
                unsafe { out.write(value) };
            }
        }
        Ok(())
    })
}

/// Writes the stream's priority as created (clamped); the null stream's is
/// [`LEAST_PRIORITY`].
///
/// # Safety
/// `priority` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority(hStream: CUstream, priority: *mut c_int) -> CUresult {
    const CALL: &str = "cuStreamGetPriority";
    api(CALL, || {
        let out = Out::new(priority, CALL, "priority")?;
        let p = stream(hStream, CALL)?.priority;
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(p) };
        Ok(())
    })
}

/// Makes the stream wait for the event's latest record at call time.
#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(
    hStream: CUstream,
    hEvent: CUevent,
    _flags: c_uint,
) -> CUresult {
    const CALL: &str = "cuStreamWaitEvent";
    api(CALL, || {
        let s = stream(hStream, CALL)?;
        let ev = event(hEvent, CALL)?;
        let epoch = ev.latest();
        if epoch == 0 {
            let id = id_of(hEvent);
            return Err(misuse(
                CUDA_ERROR_ILLEGAL_STATE,
                format!("{CALL}: event {id:#x} was never recorded (the real driver would not wait at all)"),
            ));
        }
        s.enqueue(Box::new(move || ev.wait(epoch)))
    })
}

/// Creates an event (flags are ignored; there is no timing).
///
/// # Safety
/// `phEvent` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(phEvent: *mut CUevent, _flags: c_uint) -> CUresult {
    const CALL: &str = "cuEventCreate";
    api(CALL, || {
        let out = Out::new(phEvent, CALL, "phEvent")?;
        require_context(CALL)?;
        let id = state().events.insert(Arc::new(Event::new()));
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(handle(id)) };
        Ok(())
    })
}

/// Destroys the event; pending records still complete for their waiters.
#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(hEvent: CUevent) -> CUresult {
    api("cuEventDestroy_v2", || {
        state()
            .events
            .remove(id_of(hEvent), "cuEventDestroy_v2")
            .map(drop)
    })
}

/// Starts a new epoch of the event, completed when the stream reaches it.
#[no_mangle]
pub extern "C" fn cuEventRecord(hEvent: CUevent, hStream: CUstream) -> CUresult {
    const CALL: &str = "cuEventRecord";
    api(CALL, || {
        let ev = event(hEvent, CALL)?;
        let s = stream(hStream, CALL)?;
        let epoch = ev.begin_record();
        let done = ev.clone();
        s.enqueue(Box::new(move || {
            done.complete(epoch);
            Ok(())
        }))
        .inspect_err(|_| ev.complete(epoch))
    })
}

/// `CUDA_SUCCESS` if the latest record completed (or there was none), else
/// `CUDA_ERROR_NOT_READY`.
#[no_mangle]
pub extern "C" fn cuEventQuery(hEvent: CUevent) -> CUresult {
    api("cuEventQuery", || {
        let ev = event(hEvent, "cuEventQuery")?;
        if ev.is_complete(ev.latest()) {
            Ok(())
        } else {
            Err(CUDA_ERROR_NOT_READY)
        }
    })
}

/// Waits until the latest record at call time completes.
#[no_mangle]
pub extern "C" fn cuEventSynchronize(hEvent: CUevent) -> CUresult {
    api("cuEventSynchronize", || {
        let ev = event(hEvent, "cuEventSynchronize")?;
        ev.wait(ev.latest())
    })
}

/// A host function and its argument, to be called on a stream thread.
struct HostCall {
    f: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
}

// SAFETY: cuLaunchHostFunc's contract is that `f(data)` may be called from
// another thread (the driver's own callback thread); `data` is only passed on.
unsafe impl Send for HostCall {}

impl HostCall {
    fn run(self) -> SimResult {
        let _flag = InHostFn::enter();
        // SAFETY: `f` and `data` were handed to cuLaunchHostFunc, whose
        // caller guarantees that calling `f(data)` once is sound.
        unsafe { (self.f)(self.data) };
        Ok(())
    }
}

/// Queues `fn_(userData)`; while it runs, any driver call from it is misuse.
///
/// # Safety
/// Calling `fn_(userData)` once, on another thread, must be sound.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(
    hStream: CUstream,
    fn_: CUhostFn,
    userData: *mut c_void,
) -> CUresult {
    const CALL: &str = "cuLaunchHostFunc";
    api(CALL, || {
        let Some(f) = fn_ else {
            return fail!(CUDA_ERROR_INVALID_VALUE, "{CALL}: fn is null");
        };
        let host = HostCall { f, data: userData };
        stream(hStream, CALL)?.enqueue(Box::new(move || host.run()))
    })
}

/// Events created and not yet destroyed.
#[no_mangle]
pub extern "C" fn fenceline_sim_live_events() -> u64 {
    guarded("fenceline_sim_live_events", 0, || {
        state().events.live_count()
    })
}

/// Streams created and not yet destroyed (the null stream is not counted).
#[no_mangle]
pub extern "C" fn fenceline_sim_live_streams() -> u64 {
    guarded("fenceline_sim_live_streams", 0, || {
        state().streams.live_count()
    })
}
