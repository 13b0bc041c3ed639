//! Thin wrappers over the CUDA driver API (through `cudarc::driver::sys`,
//! dynamically loaded): error mapping, the symbol probe, the primary
//! context and the handles fenceline owns (streams, events, memory,
//! modules, graph execs). Every other CUDA file calls the driver through
//! these: one file per driver object.

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUresult};

use crate::error::{Error, ErrorKind};

mod context;
mod event;
mod graph_exec;
mod memory;
mod module;
mod stream;

pub use context::forget_current_context;
pub(crate) use context::Context;
pub(crate) use event::Event;
pub(crate) use graph_exec::GraphExec;
pub(crate) use memory::{DeviceMem, PinnedMem};
pub(crate) use module::Module;
pub(crate) use stream::Stream;

/// Every driver symbol fenceline calls: probed when a device opens, so a
/// driver missing one is `Unavailable` instead of a panic later.
pub(crate) const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxGetStreamPriorityRange",
    "cuStreamCreateWithPriority",
    "cuStreamGetPriority",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuLaunchHostFunc",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocHost_v2",
    "cuMemFreeHost",
    "cuMemsetD8_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuGraphCreate",
    "cuGraphDestroy",
    "cuGraphAddEmptyNode",
    "cuGraphAddMemsetNode",
    "cuGraphAddMemcpyNode",
    "cuGraphAddKernelNode_v2",
    "cuGraphInstantiateWithFlags",
    "cuGraphExecDestroy",
    "cuGraphLaunch",
    "cuLaunchKernel",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuGraphExecKernelNodeSetParams_v2",
];

/// `Ok` for `CUDA_SUCCESS`, else an `Internal` error naming the call.
/// Allocates only on the error path.
pub(crate) fn check(result: CUresult, call: &'static str) -> Result<(), Error> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Internal,
            format!("{call} failed: {result:?}"),
        ))
    }
}

fn unavailable(reason: String) -> Error {
    Error::new(ErrorKind::Unavailable, reason)
}

/// Loads the driver, checks every symbol fenceline uses, and runs
/// `cuInit`. Never panics: no library, a missing symbol, or a failing
/// `cuInit` is `Unavailable` with the reason.
pub(crate) fn load() -> Result<(), Error> {
    // SAFETY: only tries to dlopen the candidate library names.
    if !unsafe { sys::is_culib_present() } {
        return Err(unavailable(
            "no CUDA driver library (libcuda.so) could be loaded".into(),
        ));
    }
    // cudarc panics inside if loading fails after all; contain that.
    let probe = std::panic::catch_unwind(|| {
        // SAFETY: the library is present (checked above); `get` only
        // resolves a symbol.
        let lib = unsafe { sys::culib() };
        SYMBOLS
            .iter()
            // SAFETY: resolving a symbol address does not call it.
            .find(|name| unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err())
            .copied()
    });
    match probe {
        Ok(None) => {}
        Ok(Some(missing)) => {
            return Err(unavailable(format!(
                "the CUDA driver library has no symbol {missing}"
            )))
        }
        Err(_) => {
            return Err(unavailable(
                "loading the CUDA driver library panicked".into(),
            ))
        }
    }
    // SAFETY: every symbol is present; cuInit(0) is always valid to call.
    let r = unsafe { sys::cuInit(0) };
    if r != CUresult::CUDA_SUCCESS {
        return Err(unavailable(format!("cuInit failed: {r:?}")));
    }
    Ok(())
}
