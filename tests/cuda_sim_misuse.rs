//! The simulated driver reports what the real driver silently accepts: a
//! wait on an event never recorded, a CUDA call from inside a host
//! function, use after destroy. (Its own binary: the misuse counter is
//! process-wide, and every other CUDA test asserts it stays 0.)
#![cfg(feature = "cuda")]

use std::ffi::c_void;
use std::sync::atomic::{AtomicI64, Ordering};

use cudarc::driver::sys::{self, CUresult};

#[path = "common/cuda.rs"]
mod cuda;

static IN_CALLBACK: AtomicI64 = AtomicI64::new(-1);
static EVENT: AtomicI64 = AtomicI64::new(0);

unsafe extern "C" fn calls_cuda(_: *mut c_void) {
    let event = EVENT.load(Ordering::SeqCst) as usize as sys::CUevent;
    // SAFETY: a live event; the call itself is the misuse under test.
    let r = unsafe { sys::cuEventQuery(event) };
    IN_CALLBACK.store(r as i64, Ordering::SeqCst);
}

#[test]
fn misuse_is_reported() {
    if !cuda::is_sim() {
        println!("skipped: misuse reports need the simulated driver");
        return;
    }
    let ok = CUresult::CUDA_SUCCESS;
    // SAFETY: plain driver calls with out-pointers to locals, made in the
    // order the driver API requires; the misuses are deliberate and each
    // is reported by the simulator instead of being acted on.
    unsafe {
        assert_eq!(sys::cuInit(0), ok);
        let mut dev = 0;
        assert_eq!(sys::cuDeviceGet(&mut dev, 0), ok);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev), ok);
        assert_eq!(sys::cuCtxSetCurrent(ctx), ok);
        let mut stream = std::ptr::null_mut();
        assert_eq!(sys::cuStreamCreate(&mut stream, 1), ok);
        let mut event = std::ptr::null_mut();
        assert_eq!(sys::cuEventCreate(&mut event, 2), ok);
        let base = cuda::misuse_count();

        // 1. A device wait on an event that was never recorded.
        assert_ne!(sys::cuStreamWaitEvent(stream, event, 0), ok);
        assert_eq!(cuda::misuse_count(), base + 1);
        assert!(
            cuda::last_misuse().contains("never"),
            "{}",
            cuda::last_misuse()
        );
        // Once recorded, the same wait is fine.
        assert_eq!(sys::cuEventRecord(event, stream), ok);
        assert_eq!(sys::cuStreamWaitEvent(stream, event, 0), ok);
        assert_eq!(cuda::misuse_count(), base + 1);

        // 2. A CUDA call from inside a host function.
        EVENT.store(event as usize as i64, Ordering::SeqCst);
        assert_eq!(
            sys::cuLaunchHostFunc(stream, Some(calls_cuda), std::ptr::null_mut()),
            ok
        );
        assert_eq!(sys::cuStreamSynchronize(stream), ok);
        assert_eq!(
            IN_CALLBACK.load(Ordering::SeqCst),
            CUresult::CUDA_ERROR_NOT_PERMITTED as i64
        );
        assert_eq!(cuda::misuse_count(), base + 2);

        // 3. Use after destroy.
        assert_eq!(sys::cuEventDestroy_v2(event), ok);
        assert_ne!(sys::cuEventRecord(event, stream), ok);
        assert_eq!(cuda::misuse_count(), base + 3);
        assert!(
            cuda::last_misuse().contains("destroy"),
            "{}",
            cuda::last_misuse()
        );

        assert_eq!(sys::cuStreamDestroy_v2(stream), ok);
        assert_eq!(sys::cuDevicePrimaryCtxRelease_v2(dev), ok);
    }
}
