//! Helpers shared by the scenario tests: set-up, checked calls, host
//! functions from closures, and bounded blocking waits.

#![allow(dead_code)] // each test binary uses a different subset

use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::{CUcontext, CUdevice, CUevent, CUresult, CUstream};
use fenceline_cudasim::*;
use std::ffi::c_void;
use std::sync::mpsc;
use std::time::Duration;

/// Long enough for any correct wait here; a hang fails the test instead.
pub const TIMEOUT: Duration = Duration::from_secs(10);

#[track_caller]
pub fn ok(r: CUresult) {
    assert_eq!(r, CUDA_SUCCESS);
}

/// Initializes the driver and makes device 0's primary context current on
/// this thread (the context stack is per thread).
pub fn setup() {
    ok(cuInit(0));
    let mut dev: CUdevice = -1;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: both out-pointers are valid locals.
    unsafe {
        ok(cuDeviceGet(&mut dev, 0));
        ok(cuDevicePrimaryCtxRetain(&mut ctx, dev));
    }
    ok(cuCtxSetCurrent(ctx));
}

pub fn new_stream() -> CUstream {
    let mut s: CUstream = std::ptr::null_mut();
    // SAFETY: `s` is a valid out-pointer.
    ok(unsafe { cuStreamCreate(&mut s, 0) });
    s
}

pub fn new_event() -> CUevent {
    let mut e: CUevent = std::ptr::null_mut();
    // SAFETY: `e` is a valid out-pointer.
    ok(unsafe { cuEventCreate(&mut e, 0) });
    e
}

type Job = Box<dyn FnOnce() + Send>;

unsafe extern "C" fn run_job(data: *mut c_void) {
    // SAFETY: `data` is the Box<Job> leaked by `host_fn`, passed to exactly one call.
    let job = unsafe { Box::from_raw(data.cast::<Job>()) };
    job();
}

/// Queues `f` on `stream` with cuLaunchHostFunc. `f` must not panic (it runs
/// inside an `extern "C"` callback): record results and assert afterwards.
pub fn host_fn(stream: CUstream, f: impl FnOnce() + Send + 'static) -> CUresult {
    let job: Box<Job> = Box::new(Box::new(f));
    // SAFETY: run_job takes back ownership of the leaked box exactly once.
    unsafe { cuLaunchHostFunc(stream, Some(run_job), Box::into_raw(job).cast()) }
}

/// Queues a host function that blocks `stream` until the returned sender is
/// used or dropped (or TIMEOUT passes, so a failing test cannot hang).
pub fn gate(stream: CUstream) -> mpsc::Sender<()> {
    let (open, wait) = mpsc::channel::<()>();
    ok(host_fn(stream, move || {
        let _ = wait.recv_timeout(TIMEOUT);
    }));
    open
}

/// Runs a blocking call on a helper thread; panics if it takes over TIMEOUT.
pub fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(TIMEOUT)
        .unwrap_or_else(|_| panic!("{what} did not finish within {TIMEOUT:?}"))
}

/// cuStreamSynchronize, bounded.
pub fn sync_stream(s: CUstream) -> CUresult {
    let id = s as usize;
    within("cuStreamSynchronize", move || {
        cuStreamSynchronize(id as CUstream)
    })
}

/// cuEventSynchronize, bounded.
pub fn sync_event(e: CUevent) -> CUresult {
    let id = e as usize;
    within("cuEventSynchronize", move || {
        cuEventSynchronize(id as CUevent)
    })
}
