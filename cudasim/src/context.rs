//! Initialization, devices, primary contexts, the per-thread context stack,
//! and error strings.

use crate::misuse::{error, lock, misuse};
use crate::state::{handle, id_of, state, State};
use crate::{api, api_no_init, Out, SimResult};
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::{CUcontext, CUdevice, CUresult};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Version reported by `cuDriverGetVersion` (CUDA 12.8, cudarc's `cuda-12080`).
const DRIVER_VERSION: c_int = 12080;
const DEVICE_NAME: &str = "fenceline simulated GPU";

/// A device's primary context.
pub(crate) struct Context {
    refcount: u32,
}

/// Set once `cuInit` succeeded. Release/Acquire: publishes the device count
/// written under the state lock before it (belt and braces; the lock orders it too).
static INITIALIZED: AtomicBool = AtomicBool::new(false);

pub(crate) fn initialized() -> bool {
    INITIALIZED.load(Ordering::Acquire)
}

thread_local! {
    /// This thread's context stack; the top is the current context.
    static CTX_STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Fails unless this thread has a current context that is still alive.
pub(crate) fn require_context(call: &str) -> SimResult {
    let top = CTX_STACK.with(|s| s.borrow().last().copied());
    let Some(ctx) = top else {
        return fail!(
            CUDA_ERROR_INVALID_CONTEXT,
            "{call}: no current context (cuCtxSetCurrent or cuCtxPushCurrent_v2 first)"
        );
    };
    state().contexts.get(ctx, call).map(|_| ())
}

fn check_device(st: &State, dev: CUdevice, call: &str) -> SimResult {
    if dev < 0 || dev >= st.device_count {
        let n = st.device_count;
        return fail!(
            CUDA_ERROR_INVALID_DEVICE,
            "{call}: device {dev} out of range ({n} devices)"
        );
    }
    Ok(())
}

/// Reads the environment and marks the driver initialized.
#[no_mangle]
pub extern "C" fn cuInit(_flags: c_uint) -> CUresult {
    api_no_init("cuInit", || {
        if std::env::var("FENCELINE_SIM_INIT_ERROR").is_ok_and(|v| v == "1") {
            return fail!(
                CUDA_ERROR_NO_DEVICE,
                "cuInit: failing as FENCELINE_SIM_INIT_ERROR=1 asks"
            );
        }
        let count = match std::env::var("FENCELINE_SIM_DEVICES") {
            Err(_) => 1,
            Ok(v) => v
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    error(
                        CUDA_ERROR_INVALID_VALUE,
                        format_args!("cuInit: FENCELINE_SIM_DEVICES={v:?}: must be a count >= 0"),
                    )
                })?,
        };
        if count == 0 {
            return fail!(CUDA_ERROR_NO_DEVICE, "cuInit: FENCELINE_SIM_DEVICES=0");
        }
        state().device_count = count;
        INITIALIZED.store(true, Ordering::Release);
        Ok(())
    })
}

/// Writes 12080 (CUDA 12.8).
///
/// # Safety
/// `driverVersion` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(driverVersion: *mut c_int) -> CUresult {
    api_no_init("cuDriverGetVersion", || {
        let out = Out::new(driverVersion, "cuDriverGetVersion", "driverVersion")?;
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(DRIVER_VERSION) };
        Ok(())
    })
}

/// Writes the number of simulated devices.
///
/// # Safety
/// `count` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    api("cuDeviceGetCount", || {
        let out = Out::new(count, "cuDeviceGetCount", "count")?;
        let n = state().device_count;
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// Writes the device of `ordinal`; `CUDA_ERROR_INVALID_DEVICE` if out of range.
///
/// # Safety
/// `device` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    api("cuDeviceGet", || {
        let out = Out::new(device, "cuDeviceGet", "device")?;
        check_device(&state(), ordinal, "cuDeviceGet")?;
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(ordinal) };
        Ok(())
    })
}

/// Writes "fenceline simulated GPU", truncated to `len - 1` bytes and NUL-terminated.
///
/// # Safety
/// `name` must be null or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    api("cuDeviceGetName", || {
        check_device(&state(), dev, "cuDeviceGetName")?;
        let len = usize::try_from(len).ok().filter(|l| *l > 0);
        let (Some(len), false) = (len, name.is_null()) else {
            return fail!(
                CUDA_ERROR_INVALID_VALUE,
                "cuDeviceGetName: name is null or len < 1"
            );
        };
        let n = DEVICE_NAME.len().min(len - 1);
        // SAFETY: `name` is valid for `len` bytes (contract) and `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(DEVICE_NAME.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

/// Retains the device's primary context, creating it on the first retain.
///
/// # Safety
/// `pctx` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    const CALL: &str = "cuDevicePrimaryCtxRetain";
    api(CALL, || {
        let out = Out::new(pctx, CALL, "pctx")?;
        let mut st = state();
        check_device(&st, dev, CALL)?;
        let id = match st.primary.get(&dev).copied() {
            Some(id) => {
                st.contexts.get_mut(id, CALL)?.refcount += 1;
                id
            }
            None => {
                let id = st.contexts.insert(Context { refcount: 1 });
                st.primary.insert(dev, id);
                id
            }
        };
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(handle(id)) };
        Ok(())
    })
}

/// Releases one retain; the last one destroys the context (a later retain
/// creates a new one with a new handle).
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    const CALL: &str = "cuDevicePrimaryCtxRelease_v2";
    api(CALL, || {
        let mut st = state();
        check_device(&st, dev, CALL)?;
        let Some(id) = st.primary.get(&dev).copied() else {
            return Err(misuse(
                CUDA_ERROR_INVALID_CONTEXT,
                format!("{CALL}: device {dev}'s primary context released more often than retained"),
            ));
        };
        let ctx = st.contexts.get_mut(id, CALL)?;
        ctx.refcount -= 1;
        if ctx.refcount == 0 {
            st.contexts.remove(id, CALL)?;
            st.primary.remove(&dev);
        }
        Ok(())
    })
}

/// Replaces the top of this thread's context stack (null pops it).
#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    api("cuCtxSetCurrent", || {
        let id = id_of(ctx);
        if id != 0 {
            state().contexts.get(id, "cuCtxSetCurrent")?;
        }
        CTX_STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            if id != 0 {
                s.push(id);
            }
        });
        Ok(())
    })
}

/// Writes the current context, or null.
///
/// # Safety
/// `pctx` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    api("cuCtxGetCurrent", || {
        let out = Out::new(pctx, "cuCtxGetCurrent", "pctx")?;
        let top = CTX_STACK.with(|s| s.borrow().last().copied()).unwrap_or(0);
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(handle(top)) };
        Ok(())
    })
}

/// Pushes `ctx` on this thread's context stack.
#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    api("cuCtxPushCurrent_v2", || {
        let id = id_of(ctx);
        state().contexts.get(id, "cuCtxPushCurrent_v2")?;
        CTX_STACK.with(|s| s.borrow_mut().push(id));
        Ok(())
    })
}

/// Pops this thread's current context and writes it to `pctx` if non-null.
///
/// # Safety
/// `pctx` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    api("cuCtxPopCurrent_v2", || {
        let Some(id) = CTX_STACK.with(|s| s.borrow_mut().pop()) else {
            return fail!(
                CUDA_ERROR_INVALID_CONTEXT,
                "cuCtxPopCurrent_v2: context stack is empty"
            );
        };
        if !pctx.is_null() {
            // SAFETY: non-null, so writable by this fn's contract.
            unsafe { pctx.write(handle(id)) };
        }
        Ok(())
    })
}

/// Name and description of each error code asked for, kept for the process's
/// life because the driver hands out `'static` C strings.
static STRINGS: Mutex<BTreeMap<u32, (&'static CStr, &'static CStr)>> = Mutex::new(BTreeMap::new());

fn error_strings(code: CUresult) -> SimResult<(&'static CStr, &'static CStr)> {
    let mut strings = lock(&STRINGS);
    if let Some(s) = strings.get(&(code as u32)) {
        return Ok(*s);
    }
    let name = format!("{code:?}");
    let text = match name.strip_prefix("CUDA_ERROR_") {
        Some(rest) => rest.to_lowercase().replace('_', " "),
        None => "no error".to_owned(),
    };
    let leak = |s: String| CString::new(s).map(|c| &*Box::leak(c.into_boxed_c_str()));
    let pair = (
        leak(name).map_err(|_| CUDA_ERROR_UNKNOWN)?,
        leak(text).map_err(|_| CUDA_ERROR_UNKNOWN)?,
    );
    strings.insert(code as u32, pair);
    Ok(pair)
}

/// Writes a static description of `error` ("invalid value").
///
/// # Safety
/// `pStr` must be null or valid for a write; `error` must be a `CUresult` value.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, pStr: *mut *const c_char) -> CUresult {
    api_no_init("cuGetErrorString", || {
        let out = Out::new(pStr, "cuGetErrorString", "pStr")?;
        let text = error_strings(error)?.1;
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(text.as_ptr()) };
        Ok(())
    })
}

/// Writes the static name of `error` ("CUDA_ERROR_INVALID_VALUE").
///
/// # Safety
/// `pStr` must be null or valid for a write; `error` must be a `CUresult` value.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, pStr: *mut *const c_char) -> CUresult {
    api_no_init("cuGetErrorName", || {
        let out = Out::new(pStr, "cuGetErrorName", "pStr")?;
        let name = error_strings(error)?.0;
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(name.as_ptr()) };
        Ok(())
    })
}
