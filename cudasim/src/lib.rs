//! A simulated CUDA driver: a `libcuda.so` that `cudarc` can load in CI where
//! there is no GPU, and that reports mistakes a real driver silently accepts.
//!
//! # What is simulated
//! - **Devices and contexts.** `FENCELINE_SIM_DEVICES` devices (default 1),
//!   each with one refcounted primary context; the current context is a
//!   per-thread stack (`cuCtxSetCurrent` replaces its top). Calls that create
//!   something (streams, events, memory, modules, graphs) need a current
//!   context and return `CUDA_ERROR_INVALID_CONTEXT` without one.
//! - **Streams** are host threads that run their work in submission order.
//!   The null stream (and `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`) is one
//!   shared extra stream; it does not synchronize with the other streams.
//!   A stream's priority (`cuStreamCreateWithPriority`, clamped to the range
//!   `cuCtxGetStreamPriorityRange` reports: least 0, greatest -5, as current
//!   GPUs do) is recorded and read back by `cuStreamGetPriority`, and
//!   changes nothing else: with a thread per stream there is no point where
//!   one stream's pending work is picked over another's.
//! - **Events.** Each `cuEventRecord` starts a new epoch, completed when the
//!   stream reaches it. `cuStreamWaitEvent` captures the latest epoch at call
//!   time and the waiting stream's thread blocks until that epoch completes, so
//!   ordering across streams is real.
//! - **Memory.** Device memory is host memory (a `CUdeviceptr` is a host
//!   address), filled with `0xCD` when allocated so code that relies on zeroed
//!   memory fails. Every device-side range of a memset or memcpy is checked
//!   against the live allocations, again when a queued operation runs.
//!   `cuMemAllocAsync` / `cuMemFreeAsync` are stream-ordered: the memory is
//!   usable from when its stream reaches the allocation until it reaches
//!   the free. Queued operations count as uses of the allocations they
//!   name (a kernel's 8-byte parameters are taken as addresses) until they
//!   finished.
//! - **Modules.** PTX text is scanned for `.version` and `.entry NAME`.
//!   Kernels do nothing unless a host implementation was registered under
//!   their name with [`fenceline_sim_register_kernel`].
//! - **Graphs** of empty, memset, 1-D memcpy and kernel nodes. An instantiated
//!   graph runs its nodes in insertion order (a valid topological order, as
//!   dependencies must already exist) on the launching stream's thread;
//!   launches of one executable graph never overlap.
//!   `cuGraphExecKernelNodeSetParams_v2` changes a kernel node's parameters
//!   for the launches made after it.
//!
//! # Counters
//! `fenceline_sim_thread_calls()` is the number of driver calls the calling
//! thread has made (tests count the calls of one operation with it);
//! `fenceline_sim_graph_instantiations()`, `fenceline_sim_live_events()`,
//! `fenceline_sim_live_streams()` and `fenceline_sim_live_allocations()`
//! count process-wide.
//!
//! # Misuse reported
//! Each case below increments a global counter, becomes the last misuse
//! message, is printed as `fenceline-cudasim: misuse: MESSAGE` on stderr, and
//! makes the call return the error shown:
//!
//! | misuse | error |
//! |---|---|
//! | `cuStreamWaitEvent` on an event never recorded (the real driver waits for nothing) | `CUDA_ERROR_ILLEGAL_STATE` |
//! | any driver call from inside a `cuLaunchHostFunc` callback | `CUDA_ERROR_NOT_PERMITTED` |
//! | a handle used after it was destroyed (destroying twice included) | `CUDA_ERROR_INVALID_HANDLE` |
//! | `cuMemFree_v2`/`cuMemFreeHost` of a pointer that is not a live allocation of that kind | `CUDA_ERROR_INVALID_VALUE` |
//! | `cuDevicePrimaryCtxRelease_v2` with no retain outstanding | `CUDA_ERROR_INVALID_CONTEXT` |
//! | a memset/memcpy device range not inside one live device allocation | `CUDA_ERROR_INVALID_VALUE` |
//! | a queued memset/memcpy/kernel that runs on stream-ordered memory its stream has not reached the allocation of, or that was freed | `CUDA_ERROR_ILLEGAL_ADDRESS` |
//! | a `cuMemFreeAsync` reached while other stream work naming the memory is queued or running (the memory is leaked, not freed) | `CUDA_ERROR_ILLEGAL_STATE` |
//! | `cuMemFree_v2` of a `cuMemAllocAsync` allocation its stream has not reached | `CUDA_ERROR_INVALID_VALUE` |
//! | `cuGraphExecKernelNodeSetParams_v2` with a parameter in stream-ordered memory already freed | `CUDA_ERROR_ILLEGAL_ADDRESS` |
//!
//! A queued operation that finds its memory freed by the time it runs is
//! reported the same way; its error is returned by the next
//! `cuStreamSynchronize` or `cuStreamQuery` of that stream.
//!
//! Handles are never-reused ids, so "destroyed" and "never created" (plain
//! `CUDA_ERROR_INVALID_HANDLE`, not counted) are told apart. Other errors (bad
//! arguments, unsupported cases) print `fenceline-cudasim: error: MESSAGE`.
//!
//! # Injected faults
//! `fenceline_sim_inject_fault(code)` simulates a sticky error (a faulting
//! kernel): from then on every driver call returns `code`, streams run no
//! more queued work (host functions included; work already running
//! finishes), and waits on streams and events return `code`. It lasts for
//! the life of the process.
//!
//! # Environment
//! `FENCELINE_SIM_INIT_ERROR=1` makes `cuInit` fail with
//! `CUDA_ERROR_NO_DEVICE`; `FENCELINE_SIM_DEVICES=n` sets the device count.
//!
//! # Loading it
//! The cdylib's soname is `libcuda.so` (see `build.rs`): preload it by absolute
//! path (`LD_PRELOAD`, or `dlopen` before cudarc's first call) and cudarc's
//! `dlopen("libcuda.so")` returns it. The ABI types are cudarc's own
//! (`cudarc::driver::sys`), so the two cannot drift apart.
//!
//! Every exported function runs under `catch_unwind`: a panic returns
//! `CUDA_ERROR_UNKNOWN` and never unwinds into the caller.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// The exports keep the CUDA driver API's names for functions and parameters.
#![allow(non_snake_case)]

/// `Err(code)`, after printing the formatted message as an ordinary error
/// (not misuse): `return fail!(CUDA_ERROR_INVALID_VALUE, "{call}: x is null")`.
macro_rules! fail {
    ($code:expr, $($msg:tt)+) => {
        Err($crate::misuse::error($code, format_args!($($msg)+)))
    };
}

mod context;
mod graph;
mod memory;
mod misuse;
mod module;
mod state;
mod stream;

pub use context::*;
pub use graph::*;
pub use memory::*;
pub use misuse::*;
pub use module::*;
pub use stream::*;

use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::CUresult;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

/// Result of a simulated driver operation; the error is the code to return.
pub(crate) type SimResult<T = ()> = Result<T, CUresult>;

thread_local! {
    /// Set while a `cuLaunchHostFunc` callback runs on this thread.
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
    /// Driver calls made by this thread so far.
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

/// How many driver calls the calling thread made so far (this one not
/// counted): lets a test count the calls one operation makes.
#[no_mangle]
pub extern "C" fn fenceline_sim_thread_calls() -> u64 {
    CALLS.with(Cell::get)
}

/// Marks the current thread as running a host function until dropped.
pub(crate) struct InHostFn(());

impl InHostFn {
    pub(crate) fn enter() -> Self {
        IN_HOST_FN.with(|f| f.set(true));
        InHostFn(())
    }
}

impl Drop for InHostFn {
    fn drop(&mut self) {
        IN_HOST_FN.with(|f| f.set(false));
    }
}

/// Runs `body` so that no panic crosses the FFI boundary; `on_panic` is
/// returned instead. Every exported function goes through here.
pub(crate) fn guarded<T>(name: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        misuse::report(format_args!(
            "error: {name} panicked (reported as its failure value)"
        ));
        on_panic
    })
}

/// The body of a driver call `name` that needs `cuInit` first.
pub(crate) fn api(name: &str, body: impl FnOnce() -> SimResult) -> CUresult {
    call(name, true, body)
}

/// The body of a driver call that works before `cuInit`.
pub(crate) fn api_no_init(name: &str, body: impl FnOnce() -> SimResult) -> CUresult {
    call(name, false, body)
}

fn call(name: &str, needs_init: bool, body: impl FnOnce() -> SimResult) -> CUresult {
    CALLS.with(|c| c.set(c.get() + 1));
    let checked = || {
        if IN_HOST_FN.with(Cell::get) {
            let msg = format!("{name} called from inside a cuLaunchHostFunc host function");
            return Err(misuse::misuse(CUDA_ERROR_NOT_PERMITTED, msg));
        }
        if let Some(code) = fault() {
            return Err(code);
        }
        if needs_init && !context::initialized() {
            return fail!(
                CUDA_ERROR_NOT_INITIALIZED,
                "{name}: cuInit has not succeeded yet"
            );
        }
        body()
    };
    match guarded(name, Err(CUDA_ERROR_UNKNOWN), checked) {
        Ok(()) => CUDA_SUCCESS,
        Err(code) => code,
    }
}

/// The sticky error injected by [`fenceline_sim_inject_fault`], if any.
static FAULT: std::sync::OnceLock<CUresult> = std::sync::OnceLock::new();

/// The injected sticky error, if any.
pub(crate) fn fault() -> Option<CUresult> {
    FAULT.get().copied()
}

/// Simulates a sticky error with `code` (see the crate docs); returns
/// `CUDA_SUCCESS`, or the code already injected.
#[no_mangle]
pub extern "C" fn fenceline_sim_inject_fault(code: CUresult) -> CUresult {
    guarded("fenceline_sim_inject_fault", CUDA_ERROR_UNKNOWN, || {
        misuse::report(format_args!("error: injected sticky fault {code:?}"));
        match FAULT.set(code) {
            Ok(()) => CUDA_SUCCESS,
            Err(_) => fault().unwrap_or(CUDA_ERROR_UNKNOWN),
        }
    })
}

/// An out-parameter of a driver call, checked non-null before anything is
/// created so that a bad pointer leaks nothing.
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    pub(crate) fn new(p: *mut T, call: &str, what: &str) -> SimResult<Self> {
        NonNull::new(p).map(Out).ok_or_else(|| {
            misuse::error(
                CUDA_ERROR_INVALID_VALUE,
                format_args!("{call}: {what} is null"),
            )
        })
    }

    /// Stores the call's result.
    ///
    /// # Safety
    /// The pointer given to [`Out::new`] must be valid for a write of `T`
    /// (the driver API's contract for its out-parameters).
    pub(crate) unsafe fn write(self, value: T) {
        // SAFETY: non-null by construction and writable by this fn's contract.
        unsafe { self.0.as_ptr().write(value) }
    }
}
