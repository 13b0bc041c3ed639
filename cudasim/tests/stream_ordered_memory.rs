//! Stream-ordered memory (`cuMemAllocAsync` / `cuMemFreeAsync`) is usable
//! only between its stream reaching the allocation and reaching the free;
//! a free reached while other stream work naming the memory still runs is
//! misuse; `cuGraphExecKernelNodeSetParams_v2` changes later launches only.
//!
//! The misuse counter is process-wide, so every test here holds `SERIAL`.

mod common;

use common::*;
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::{
    CUdeviceptr, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUmodule, CUresult, CUstream,
    CUDA_KERNEL_NODE_PARAMS,
};
use fenceline_cudasim::*;
use std::ffi::{c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

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
    let n = n.min(buf.len() - 1);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn alloc_async(bytes: usize, s: CUstream) -> CUdeviceptr {
    let mut d = 0;
    // SAFETY: valid out-pointer.
    ok(unsafe { cuMemAllocAsync(&mut d, bytes, s) });
    assert_ne!(d, 0);
    d
}

fn sync(s: CUstream) -> CUresult {
    sync_stream(s)
}

const PTX: &CStr = c".version 8.0
.target sm_80
.address_size 64
.visible .entry som_store(.param .u64 data, .param .u32 value) { ret; }
";

/// Set while `som_store` should wait before storing (a kernel still
/// running on its stream).
static HOLD: AtomicBool = AtomicBool::new(false);
static STORES: AtomicU64 = AtomicU64::new(0);
/// `som_store` runs begun (past the simulator's checks).
static STARTED: AtomicU64 = AtomicU64::new(0);

/// Sets `HOLD` until dropped (also when the test fails, so later tests'
/// kernels do not wait).
struct Held;

impl Held {
    fn new() -> Held {
        HOLD.store(true, Ordering::SeqCst);
        Held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HOLD.store(false, Ordering::SeqCst);
    }
}

/// Host implementation of `som_store(data: *mut u32, value: u32)`: waits
/// while `HOLD` is set (bounded), then stores `value` at `data`.
extern "C" fn som_store(_grid: *const u32, _block: *const u32, params: *const *const c_void) {
    STARTED.fetch_add(1, Ordering::SeqCst);
    let start = Instant::now();
    while HOLD.load(Ordering::SeqCst) && start.elapsed() < TIMEOUT {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    // SAFETY: the sim passes pointers to copies of the two registered
    // parameters (8 and 4 bytes), and runs the kernel only when `data` is
    // inside memory that is allocated (the checks under test).
    unsafe {
        let data = *(*params).cast::<u64>() as usize as *mut u32;
        data.write(*(*params.add(1)).cast::<u32>());
    }
    STORES.fetch_add(1, Ordering::SeqCst);
}

fn kernel() -> (CUmodule, CUfunction) {
    let sizes = [8usize, 4];
    // SAFETY: NUL-terminated name, `sizes` holds 2 entries.
    ok(unsafe {
        fenceline_sim_register_kernel(c"som_store".as_ptr(), sizes.as_ptr(), 2, som_store)
    });
    let mut m: CUmodule = null_mut();
    let mut f: CUfunction = null_mut();
    // SAFETY: NUL-terminated image and name; valid out-pointers.
    unsafe {
        ok(cuModuleLoadData(&mut m, PTX.as_ptr().cast()));
        ok(cuModuleGetFunction(&mut f, m, c"som_store".as_ptr()));
    }
    (m, f)
}

fn launch(f: CUfunction, s: CUstream, data: CUdeviceptr, value: u32) -> CUresult {
    let (mut d, mut v) = (data, value);
    let mut params = [(&raw mut d).cast::<c_void>(), (&raw mut v).cast::<c_void>()];
    // SAFETY: two parameter pointers, to 8 and 4 readable bytes.
    unsafe { cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params.as_mut_ptr(), null_mut()) }
}

fn read_u32(d: CUdeviceptr) -> u32 {
    let mut out = 0u32;
    // SAFETY: `out` is valid for 4 bytes.
    ok(unsafe { cuMemcpyDtoH_v2((&raw mut out).cast(), d, 4) });
    out
}

#[test]
fn memory_is_usable_in_stream_order_between_its_alloc_and_its_free() {
    let _g = serial();
    let (m, f) = kernel();
    let s = new_stream();
    let before = fenceline_sim_misuse_count();
    let live = fenceline_sim_live_allocations();
    let d = alloc_async(64, s);
    ok(cuMemsetD32Async(d, 7, 16, s));
    ok(launch(f, s, d + 4, 9));
    ok(sync(s));
    assert_eq!(read_u32(d), 7);
    assert_eq!(read_u32(d + 4), 9);
    // Work queued before the free on its stream is fine.
    ok(launch(f, s, d, 11));
    ok(cuMemFreeAsync(d, s));
    ok(sync(s));
    assert_eq!(fenceline_sim_misuse_count(), before, "{}", last_misuse());
    assert_eq!(fenceline_sim_live_allocations(), live);
    ok(cuStreamDestroy_v2(s));
    ok(cuModuleUnload(m));
}

#[test]
fn use_before_the_alloc_is_reached_is_misuse() {
    let _g = serial();
    let (a, b) = (new_stream(), new_stream());
    let open = gate(a);
    let d = alloc_async(64, a);
    let before = fenceline_sim_misuse_count();
    // Another stream, not ordered after the allocation: it runs first.
    ok(cuMemsetD8Async(d, 1, 64, b));
    assert_eq!(sync(b), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_eq!(fenceline_sim_misuse_count(), before + 1);
    assert!(last_misuse().contains("not reached"), "{}", last_misuse());
    drop(open);
    ok(sync(a));
    ok(cuMemFreeAsync(d, a));
    ok(sync(a));
    ok(cuStreamDestroy_v2(a));
    ok(cuStreamDestroy_v2(b));
}

#[test]
fn use_after_the_free_is_misuse() {
    let _g = serial();
    let (m, f) = kernel();
    let s = new_stream();
    let d = alloc_async(64, s);
    ok(cuMemFreeAsync(d, s));
    let before = fenceline_sim_misuse_count();
    let stores = STORES.load(Ordering::SeqCst);
    ok(launch(f, s, d, 5));
    assert_eq!(sync(s), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_eq!(fenceline_sim_misuse_count(), before + 1);
    assert!(last_misuse().contains("freed"), "{}", last_misuse());
    assert_eq!(
        STORES.load(Ordering::SeqCst),
        stores,
        "the kernel must not run"
    );
    // A second free of it is misuse too.
    assert_eq!(cuMemFreeAsync(d, s), CUDA_ERROR_INVALID_VALUE);
    assert_eq!(fenceline_sim_misuse_count(), before + 2);
    ok(cuStreamDestroy_v2(s));
    ok(cuModuleUnload(m));
}

/// The defect a stream-ordered free must not have: freeing memory that
/// another stream's work still uses.
#[test]
fn a_free_reached_while_other_stream_work_uses_the_memory_is_misuse() {
    let _g = serial();
    let (m, f) = kernel();
    let (a, b) = (new_stream(), new_stream());
    let d = alloc_async(64, a);
    ok(sync(a));
    let held = Held::new();
    let started = STARTED.load(Ordering::SeqCst);
    ok(launch(f, b, d, 3)); // runs on b, held
                            // Running (its checks passed), not just queued.
    let t0 = Instant::now();
    while STARTED.load(Ordering::SeqCst) == started && t0.elapsed() < TIMEOUT {
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    let before = fenceline_sim_misuse_count();
    ok(cuMemFreeAsync(d, a)); // not ordered after b's kernel
    assert_eq!(sync(a), CUDA_ERROR_ILLEGAL_STATE);
    assert_eq!(fenceline_sim_misuse_count(), before + 1);
    assert!(
        last_misuse().contains("queued or running"),
        "{}",
        last_misuse()
    );
    drop(held);
    // The kernel still finds its memory (leaked, not freed under it).
    let _ = sync(b);
    ok(cuStreamDestroy_v2(a));
    ok(cuStreamDestroy_v2(b));
    ok(cuModuleUnload(m));
}

#[test]
fn a_free_ordered_after_the_other_streams_work_is_fine() {
    let _g = serial();
    let (m, f) = kernel();
    let (a, b) = (new_stream(), new_stream());
    let ev = new_event();
    let d = alloc_async(64, a);
    ok(cuEventRecord(ev, a));
    ok(cuStreamWaitEvent(b, ev, 0));
    ok(launch(f, b, d, 3));
    ok(cuEventRecord(ev, b));
    ok(cuStreamWaitEvent(a, ev, 0));
    let before = fenceline_sim_misuse_count();
    ok(cuMemFreeAsync(d, a));
    ok(sync(a));
    ok(sync(b));
    assert_eq!(fenceline_sim_misuse_count(), before, "{}", last_misuse());
    ok(cuEventDestroy_v2(ev));
    ok(cuStreamDestroy_v2(a));
    ok(cuStreamDestroy_v2(b));
    ok(cuModuleUnload(m));
}

#[test]
fn kernel_node_parameters_change_for_later_launches_only() {
    let _g = serial();
    let (m, f) = kernel();
    let s = new_stream();
    let (x, y) = (alloc_async(4, s), alloc_async(4, s));
    ok(sync(s));
    let node_params = |data: &mut CUdeviceptr, value: &mut u32, ps: &mut [*mut c_void; 2]| {
        *ps = [
            (data as *mut CUdeviceptr).cast(),
            (value as *mut u32).cast(),
        ];
        CUDA_KERNEL_NODE_PARAMS {
            func: f,
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 1,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            kernelParams: ps.as_mut_ptr(),
            extra: null_mut(),
            kern: null_mut(),
            ctx: null_mut(),
        }
    };
    let (mut d, mut v, mut ps) = (x, 1u32, [null_mut(); 2]);
    let p = node_params(&mut d, &mut v, &mut ps);
    let mut g: CUgraph = null_mut();
    let mut node: CUgraphNode = null_mut();
    let mut exec: CUgraphExec = null_mut();
    // SAFETY: valid out-pointers; `p` names two live parameters.
    unsafe {
        ok(cuGraphCreate(&mut g, 0));
        ok(cuGraphAddKernelNode_v2(&mut node, g, null_mut(), 0, &p));
        ok(cuGraphInstantiateWithFlags(&mut exec, g, 0));
    }
    let open = gate(s);
    ok(cuGraphLaunch(exec, s)); // queued with x, 1
    let (mut d2, mut v2, mut ps2) = (y, 2u32, [null_mut(); 2]);
    let p2 = node_params(&mut d2, &mut v2, &mut ps2);
    // SAFETY: `p2` names two live parameters.
    ok(unsafe { cuGraphExecKernelNodeSetParams_v2(exec, node, &p2) });
    ok(cuGraphLaunch(exec, s)); // y, 2
    drop(open);
    ok(sync(s));
    assert_eq!((read_u32(x), read_u32(y)), (1, 2));
    // A node the exec does not have is an error; a freed pointer misuse.
    // SAFETY: as above.
    let r = unsafe { cuGraphExecKernelNodeSetParams_v2(exec, null_mut(), &p2) };
    assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
    ok(cuMemFreeAsync(y, s));
    ok(sync(s));
    let before = fenceline_sim_misuse_count();
    // SAFETY: as above (the pointer value is what is checked).
    let r = unsafe { cuGraphExecKernelNodeSetParams_v2(exec, node, &p2) };
    assert_eq!(r, CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_eq!(fenceline_sim_misuse_count(), before + 1);
    ok(cuMemFreeAsync(x, s));
    ok(sync(s));
    ok(cuGraphExecDestroy(exec));
    ok(cuGraphDestroy(g));
    ok(cuStreamDestroy_v2(s));
    ok(cuModuleUnload(m));
}
