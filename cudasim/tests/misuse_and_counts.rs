//! Each kind of misuse is counted, described and failed with its error code;
//! live-object counts follow creation and destruction.
//!
//! The counters are process-wide, so every test here holds `SERIAL`.

mod common;

use common::*;
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::{
    CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUmodule, CUresult, CUstream,
};
use fenceline_cudasim::*;
use std::ffi::{c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, PoisonError};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    setup();
    guard
}

fn last_misuse() -> String {
    let mut buf = [0u8; 512];
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { fenceline_sim_last_misuse(buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n < buf.len(), "message longer than the test buffer");
    CStr::from_bytes_until_nul(&buf)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

/// Asserts that `f` returns `code` and reports exactly one misuse whose
/// message contains `words`.
#[track_caller]
fn expect_misuse(code: CUresult, words: &str, f: impl FnOnce() -> CUresult) {
    let before = fenceline_sim_misuse_count();
    assert_eq!(f(), code);
    assert_eq!(
        fenceline_sim_misuse_count(),
        before + 1,
        "one misuse report expected"
    );
    let msg = last_misuse();
    assert!(
        msg.contains(words),
        "misuse message {msg:?} lacks {words:?}"
    );
}

#[track_caller]
fn expect_no_misuse(code: CUresult, f: impl FnOnce() -> CUresult) {
    let before = fenceline_sim_misuse_count();
    assert_eq!(f(), code);
    assert_eq!(
        fenceline_sim_misuse_count(),
        before,
        "no misuse report expected"
    );
}

fn alloc(bytes: usize) -> CUdeviceptr {
    let mut d = 0;
    // SAFETY: valid out-pointer.
    ok(unsafe { cuMemAlloc_v2(&mut d, bytes) });
    d
}

#[test]
fn waiting_on_an_event_never_recorded_is_misuse() {
    let _s = serial();
    let (s, e) = (new_stream(), new_event());
    expect_misuse(CUDA_ERROR_ILLEGAL_STATE, "never recorded", || {
        cuStreamWaitEvent(s, e, 0)
    });
    ok(cuEventRecord(e, s));
    expect_no_misuse(CUDA_SUCCESS, || cuStreamWaitEvent(s, e, 0));
    ok(sync_stream(s));
    ok(cuEventDestroy_v2(e));
    ok(cuStreamDestroy_v2(s));
}

static FROM_KERNEL: AtomicU32 = AtomicU32::new(u32::MAX);

extern "C" fn calls_the_driver(
    _grid: *const u32,
    _block: *const u32,
    _params: *const *const c_void,
) {
    let mut v = 0;
    // SAFETY: valid out-pointer.
    FROM_KERNEL.store(
        unsafe { cuDriverGetVersion(&mut v) } as u32,
        Ordering::SeqCst,
    );
}

#[test]
fn driver_calls_from_a_host_function_are_misuse() {
    let _s = serial();
    let s = new_stream();
    let before = fenceline_sim_misuse_count();
    let (tx, rx) = mpsc::channel();
    let e = new_event();
    let e_id = e as usize;
    ok(host_fn(s, move || {
        let mut v = 0;
        // SAFETY: valid out-pointer.
        let version = unsafe { cuDriverGetVersion(&mut v) };
        let query = cuEventQuery(e_id as CUevent);
        let _ = tx.send((version, query));
    }));
    ok(sync_stream(s));
    assert_eq!(
        rx.try_recv(),
        Ok((CUDA_ERROR_NOT_PERMITTED, CUDA_ERROR_NOT_PERMITTED))
    );
    assert_eq!(fenceline_sim_misuse_count(), before + 2);
    assert!(
        last_misuse().contains("inside a cuLaunchHostFunc host function"),
        "{}",
        last_misuse()
    );

    // The flag is cleared after the host function: a kernel on the same
    // stream thread may call the driver.
    let ptx = c".version 8.0\n.visible .entry calls_the_driver() { ret; }";
    let (mut m, mut f): (CUmodule, CUfunction) = (null_mut(), null_mut());
    // SAFETY: valid out-pointers, NUL-terminated strings, no kernel parameters.
    unsafe {
        ok(fenceline_sim_register_kernel(
            c"calls_the_driver".as_ptr(),
            null_mut(),
            0,
            calls_the_driver,
        ));
        ok(cuModuleLoadData(&mut m, ptx.as_ptr().cast()));
        ok(cuModuleGetFunction(&mut f, m, c"calls_the_driver".as_ptr()));
        ok(cuLaunchKernel(
            f,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s,
            null_mut(),
            null_mut(),
        ));
    }
    ok(sync_stream(s));
    assert_eq!(FROM_KERNEL.load(Ordering::SeqCst), CUDA_SUCCESS as u32);
    assert_eq!(fenceline_sim_misuse_count(), before + 2);
    ok(cuModuleUnload(m));
    ok(cuEventDestroy_v2(e));
    ok(cuStreamDestroy_v2(s));
}

#[test]
fn using_a_destroyed_handle_is_misuse_and_an_unknown_one_is_not() {
    let _s = serial();
    let s = new_stream();
    let e = new_event();
    ok(cuStreamDestroy_v2(s));
    expect_misuse(CUDA_ERROR_INVALID_HANDLE, "used after destroy", || {
        cuStreamSynchronize(s)
    });
    expect_misuse(CUDA_ERROR_INVALID_HANDLE, "stream", || {
        cuStreamDestroy_v2(s)
    });
    ok(cuEventDestroy_v2(e));
    expect_misuse(CUDA_ERROR_INVALID_HANDLE, "event", || {
        cuEventRecord(e, null_mut())
    });
    expect_misuse(CUDA_ERROR_INVALID_HANDLE, "event", || cuEventQuery(e));

    let (mut g, mut exec): (CUgraph, CUgraphExec) = (null_mut(), null_mut());
    // SAFETY: valid out-pointers.
    unsafe {
        ok(cuGraphCreate(&mut g, 0));
        ok(cuGraphInstantiateWithFlags(&mut exec, g, 0));
    }
    ok(cuGraphExecDestroy(exec));
    expect_misuse(CUDA_ERROR_INVALID_HANDLE, "graph exec", || {
        cuGraphLaunch(exec, null_mut())
    });
    ok(cuGraphDestroy(g));
    expect_misuse(CUDA_ERROR_INVALID_HANDLE, "graph", || cuGraphDestroy(g));

    let ptx = c".version 8.0\n.visible .entry k() { ret; }";
    let (mut m, mut f): (CUmodule, CUfunction) = (null_mut(), null_mut());
    // SAFETY: valid out-pointers and NUL-terminated strings.
    unsafe {
        ok(cuModuleLoadData(&mut m, ptx.as_ptr().cast()));
        ok(cuModuleGetFunction(&mut f, m, c"k".as_ptr()));
    }
    ok(cuModuleUnload(m));
    // SAFETY: no kernel parameters are read for an unregistered kernel.
    expect_misuse(CUDA_ERROR_INVALID_HANDLE, "function", || unsafe {
        cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, null_mut(), null_mut(), null_mut())
    });

    let never: CUstream = std::ptr::without_provenance_mut(0xdead_0008);
    expect_no_misuse(CUDA_ERROR_INVALID_HANDLE, || cuStreamSynchronize(never));
}

#[test]
fn double_free_and_freeing_unknown_pointers_are_misuse() {
    let _s = serial();
    let d = alloc(64);
    ok(cuMemFree_v2(d));
    expect_misuse(CUDA_ERROR_INVALID_VALUE, "not a live allocation", || {
        cuMemFree_v2(d)
    });
    let mut local = 0u64;
    expect_misuse(CUDA_ERROR_INVALID_VALUE, "not a live allocation", || {
        cuMemFreeHost((&raw mut local).cast())
    });
    let mut pinned: *mut c_void = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { cuMemAllocHost_v2(&mut pinned, 16) });
    expect_misuse(CUDA_ERROR_INVALID_VALUE, "other kind", || {
        cuMemFree_v2(pinned as CUdeviceptr)
    });
    ok(cuMemFreeHost(pinned));
}

#[test]
fn memory_ranges_outside_one_live_allocation_are_misuse() {
    let _s = serial();
    let s = new_stream();
    let (a, b) = (alloc(16), alloc(16));
    let buf = [0u8; 32];
    // SAFETY: `buf` is valid for 32 bytes; the calls fail before copying.
    expect_misuse(
        CUDA_ERROR_INVALID_VALUE,
        "not inside one live device allocation",
        || unsafe { cuMemcpyHtoD_v2(a + 8, buf.as_ptr().cast(), 9) },
    );
    expect_misuse(CUDA_ERROR_INVALID_VALUE, "destination", || {
        cuMemsetD32Async(a + 4, 0, 4, s)
    });
    expect_misuse(CUDA_ERROR_INVALID_VALUE, "not inside", || {
        cuMemsetD8_v2(a - 1, 0, 2)
    });
    ok(cuMemFree_v2(b));
    expect_misuse(CUDA_ERROR_INVALID_VALUE, "source", || {
        cuMemcpyDtoDAsync_v2(a, b, 16, s)
    });
    expect_no_misuse(CUDA_SUCCESS, || cuMemsetD32Async(a + 4, 0, 3, s));

    // Freed after queueing, before running: reported when the memset runs,
    // and returned by the stream's next synchronize.
    let c = alloc(16);
    let open = gate(s);
    ok(cuMemsetD8Async(c, 1, 16, s));
    ok(cuMemFree_v2(c));
    let before = fenceline_sim_misuse_count();
    drop(open);
    assert_eq!(sync_stream(s), CUDA_ERROR_INVALID_VALUE);
    assert_eq!(fenceline_sim_misuse_count(), before + 1);
    assert!(
        last_misuse().contains("cuMemsetD8Async"),
        "{}",
        last_misuse()
    );
    ok(sync_stream(s));
    ok(cuMemFree_v2(a));
    ok(cuStreamDestroy_v2(s));
}

#[test]
fn releasing_a_primary_context_too_often_or_using_it_afterwards_is_misuse() {
    let _s = serial();
    // Device 1 exists only here, so no other test holds a retain on it.
    // Safe to change the environment: every test of this binary holds SERIAL.
    std::env::set_var("FENCELINE_SIM_DEVICES", "2");
    ok(cuInit(0));
    let mut ctx = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { cuDevicePrimaryCtxRetain(&mut ctx, 1) });
    ok(cuCtxPushCurrent_v2(ctx));
    ok(cuDevicePrimaryCtxRelease_v2(1));
    expect_misuse(
        CUDA_ERROR_INVALID_CONTEXT,
        "released more often than retained",
        || cuDevicePrimaryCtxRelease_v2(1),
    );
    let mut s: CUstream = null_mut();
    // SAFETY: valid out-pointer.
    expect_misuse(CUDA_ERROR_INVALID_HANDLE, "context", || unsafe {
        cuStreamCreate(&mut s, 0)
    });
    let mut popped = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { cuCtxPopCurrent_v2(&mut popped) });
    assert_eq!(popped, ctx);
    expect_misuse(CUDA_ERROR_INVALID_HANDLE, "used after destroy", || {
        cuCtxSetCurrent(ctx)
    });
    std::env::remove_var("FENCELINE_SIM_DEVICES");
    ok(cuInit(0));
}

#[test]
fn reset_clears_count_and_message() {
    let _s = serial();
    let e = new_event();
    expect_misuse(CUDA_ERROR_ILLEGAL_STATE, "never recorded", || {
        cuStreamWaitEvent(null_mut(), e, 0)
    });
    fenceline_sim_reset_misuse();
    assert_eq!(fenceline_sim_misuse_count(), 0);
    assert_eq!(last_misuse(), "");
    ok(cuEventDestroy_v2(e));
}

#[test]
fn live_counts_follow_creation_and_destruction() {
    let _s = serial();
    let (streams, events, allocs) = (
        fenceline_sim_live_streams(),
        fenceline_sim_live_events(),
        fenceline_sim_live_allocations(),
    );
    let s = new_stream();
    let e = new_event();
    let d = alloc(8);
    assert_eq!(
        (
            fenceline_sim_live_streams(),
            fenceline_sim_live_events(),
            fenceline_sim_live_allocations()
        ),
        (streams + 1, events + 1, allocs + 1)
    );
    ok(cuMemFree_v2(d));
    ok(cuEventDestroy_v2(e));
    ok(cuStreamDestroy_v2(s));
    assert_eq!(
        (
            fenceline_sim_live_streams(),
            fenceline_sim_live_events(),
            fenceline_sim_live_allocations()
        ),
        (streams, events, allocs)
    );
}

#[test]
fn environment_sets_init_failure_and_device_count() {
    let _s = serial();
    // Safe to change the environment: every test of this binary holds SERIAL.
    std::env::set_var("FENCELINE_SIM_INIT_ERROR", "1");
    assert_eq!(cuInit(0), CUDA_ERROR_NO_DEVICE);
    std::env::remove_var("FENCELINE_SIM_INIT_ERROR");
    std::env::set_var("FENCELINE_SIM_DEVICES", "2");
    ok(cuInit(0));
    let (mut n, mut dev) = (0, -1);
    // SAFETY: valid out-pointers.
    unsafe {
        ok(cuDeviceGetCount(&mut n));
        ok(cuDeviceGet(&mut dev, 1));
        assert_eq!(cuDeviceGet(&mut dev, 2), CUDA_ERROR_INVALID_DEVICE);
    }
    assert_eq!((n, dev), (2, 1));
    std::env::remove_var("FENCELINE_SIM_DEVICES");
    ok(cuInit(0));
}
