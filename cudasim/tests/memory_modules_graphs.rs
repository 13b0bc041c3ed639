//! Memsets and copies produce the right bytes; modules expose their PTX
//! entries; graphs of memset, memcpy and kernel nodes produce the right
//! bytes on every launch.

mod common;

use common::*;
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::CUmemorytype_enum::{CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST};
use cudarc::driver::sys::{
    CUdeviceptr, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUmodule, CUDA_KERNEL_NODE_PARAMS,
    CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS,
};
use fenceline_cudasim::*;
use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

const PTX: &CStr = c".version 8.0
.target sm_80
.address_size 64
.visible .entry add_u32(.param .u64 data, .param .u32 n, .param .u32 add) { ret; }
.visible .entry unregistered_noop() { ret; }
";

fn alloc(bytes: usize) -> CUdeviceptr {
    let mut d = 0;
    // SAFETY: valid out-pointer.
    ok(unsafe { cuMemAlloc_v2(&mut d, bytes) });
    d
}

fn read_back<const N: usize>(d: CUdeviceptr) -> [u8; N] {
    let mut out = [0u8; N];
    // SAFETY: `out` is valid for N bytes.
    ok(unsafe { cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), d, N) });
    out
}

#[test]
fn memsets_write_8_16_and_32_bit_patterns_and_new_memory_is_not_zero() {
    setup();
    let s = new_stream();
    let d = alloc(32);
    ok(cuMemsetD8_v2(d, 0xAB, 3));
    ok(cuMemsetD16Async(d + 4, 0xBEEF, 2, s));
    ok(cuMemsetD32Async(d + 8, 0x0102_0304, 2, s));
    ok(cuMemsetD8Async(d + 16, 0x5A, 1, s));
    ok(sync_stream(s));
    let got: [u8; 32] = read_back(d);
    let mut want = [0xCDu8; 32];
    want[..3].copy_from_slice(&[0xAB; 3]);
    want[4..8].copy_from_slice(&[0xBEEF_u16.to_ne_bytes(), 0xBEEF_u16.to_ne_bytes()].concat());
    want[8..16]
        .copy_from_slice(&[0x0102_0304_u32.to_ne_bytes(), 0x0102_0304_u32.to_ne_bytes()].concat());
    want[16] = 0x5A;
    assert_eq!(got, want);
    ok(cuMemFree_v2(d));
    ok(cuStreamDestroy_v2(s));
}

#[test]
fn copies_move_bytes_between_host_and_device_in_stream_order() {
    setup();
    let s = new_stream();
    let (a, b) = (alloc(8), alloc(8));
    let src = [1u8, 2, 3, 4, 5, 6, 7, 8];
    let mut dst = [0u8; 8];
    // SAFETY: `src` and `dst` outlive the copies (synchronized below).
    unsafe {
        ok(cuMemcpyHtoD_v2(a, src.as_ptr().cast(), 8));
        ok(cuMemcpyHtoDAsync_v2(a + 2, src.as_ptr().cast(), 2, s)); // a = 1 2 1 2 5 6 7 8
        ok(cuMemcpyDtoDAsync_v2(b, a, 8, s));
        ok(cuMemcpyDtoDAsync_v2(b + 1, b, 4, s)); // overlapping: b = 1 1 2 1 2 6 7 8
        ok(cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), b, 8, s));
    }
    ok(sync_stream(s));
    assert_eq!(dst, [1, 1, 2, 1, 2, 6, 7, 8]);

    let mut pinned: *mut c_void = null_mut();
    // SAFETY: valid out-pointer; `pinned` holds 8 bytes once allocated.
    unsafe {
        ok(cuMemAllocHost_v2(&mut pinned, 8));
        ok(cuMemcpyDtoH_v2(pinned, a, 8));
        assert_eq!(
            std::slice::from_raw_parts(pinned.cast::<u8>(), 8),
            [1, 2, 1, 2, 5, 6, 7, 8]
        );
    }
    ok(cuMemFreeHost(pinned));
    ok(cuMemFree_v2(a));
    ok(cuMemFree_v2(b));
    ok(cuStreamDestroy_v2(s));
}

fn load_module() -> CUmodule {
    let mut m: CUmodule = null_mut();
    // SAFETY: valid out-pointer; PTX is NUL-terminated.
    ok(unsafe { cuModuleLoadData(&mut m, PTX.as_ptr().cast()) });
    m
}

fn function(m: CUmodule, name: &CStr) -> (CUfunction, cudarc::driver::sys::CUresult) {
    let mut f: CUfunction = null_mut();
    // SAFETY: valid out-pointer; `name` is NUL-terminated.
    let r = unsafe { cuModuleGetFunction(&mut f, m, name.as_ptr()) };
    (f, r)
}

#[test]
fn modules_expose_their_entries_and_reject_text_without_entry() {
    setup();
    let m = load_module();
    let (f1, r1) = function(m, c"add_u32");
    let (f2, r2) = function(m, c"add_u32");
    assert_eq!((r1, r2), (CUDA_SUCCESS, CUDA_SUCCESS));
    assert_eq!(f1, f2, "one handle per entry");
    assert_eq!(function(m, c"unregistered_noop").1, CUDA_SUCCESS);
    assert_eq!(function(m, c"no_such_kernel").1, CUDA_ERROR_NOT_FOUND);

    let mut bad: CUmodule = null_mut();
    for text in [
        c".version 8.0\n.func helper() { ret; }",
        c".visible .entry k() { ret; }",
    ] {
        // SAFETY: valid out-pointer; `text` is NUL-terminated.
        assert_eq!(
            unsafe { cuModuleLoadData(&mut bad, text.as_ptr().cast()) },
            CUDA_ERROR_INVALID_PTX
        );
    }
    ok(cuModuleUnload(m));
}

/// Host implementation of `add_u32(data: *mut u32, n: u32, add: u32)`.
extern "C" fn add_u32(_grid: *const u32, _block: *const u32, params: *const *const c_void) {
    // SAFETY: the sim passes pointers to copies of the three registered
    // parameters (8, 4, 4 bytes); `data` is a device (= host) allocation of
    // at least `n` u32 that the test keeps alive while the kernel can run.
    unsafe {
        let data = *(*params).cast::<u64>() as usize as *mut u32;
        let n = *(*params.add(1)).cast::<u32>();
        let add = *(*params.add(2)).cast::<u32>();
        for i in 0..n as usize {
            *data.add(i) += add;
        }
    }
}

fn register_add_u32() {
    let sizes = [8usize, 4, 4];
    // SAFETY: NUL-terminated name, `sizes` holds 3 entries.
    ok(unsafe { fenceline_sim_register_kernel(c"add_u32".as_ptr(), sizes.as_ptr(), 3, add_u32) });
}

#[test]
fn launched_kernels_run_their_registered_host_code_in_stream_order() {
    setup();
    register_add_u32();
    let m = load_module();
    let (f, _) = function(m, c"add_u32");
    let (noop, _) = function(m, c"unregistered_noop");
    let s = new_stream();
    let d = alloc(8);
    ok(cuMemsetD32Async(d, 10, 2, s));
    let (mut data, mut n, mut add) = (d, 2u32, 5u32);
    let mut params = [
        (&raw mut data).cast::<c_void>(),
        (&raw mut n).cast(),
        (&raw mut add).cast(),
    ];
    // SAFETY: `params` points to three values of the registered sizes.
    unsafe {
        ok(cuLaunchKernel(
            f,
            1,
            1,
            1,
            2,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            null_mut(),
        ));
        add = 1000; // parameters were copied at launch
        ok(cuLaunchKernel(
            noop,
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
        assert_eq!(
            cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, s, params.as_mut_ptr(), null_mut()),
            CUDA_ERROR_INVALID_VALUE
        );
    }
    ok(sync_stream(s));
    let got: [u8; 8] = read_back(d);
    assert_eq!(got, [15u32.to_ne_bytes(), 15u32.to_ne_bytes()].concat()[..]);
    let _ = add;
    ok(cuMemFree_v2(d));
    ok(cuModuleUnload(m));
    ok(cuStreamDestroy_v2(s));
}

/// Runs one cuGraphAdd*Node call and returns the node it wrote.
fn node(add: impl FnOnce(*mut CUgraphNode) -> cudarc::driver::sys::CUresult) -> CUgraphNode {
    let mut node: CUgraphNode = null_mut();
    ok(add(&mut node));
    node
}

/// One side of a 1-D graph copy.
#[derive(Clone, Copy)]
enum Side {
    Host(*const c_void),
    Device(CUdeviceptr),
}

/// A CUDA_MEMCPY3D for `width` bytes from `src + src_x` to `dst + dst_x`.
fn copy_params(
    src: Side,
    src_x: usize,
    dst: Side,
    dst_x: usize,
    width: usize,
    height: usize,
) -> CUDA_MEMCPY3D {
    let split = |side| match side {
        Side::Host(p) => (CU_MEMORYTYPE_HOST, p, 0),
        Side::Device(d) => (CU_MEMORYTYPE_DEVICE, null_mut::<c_void>().cast_const(), d),
    };
    let ((src_type, src_host, src_dev), (dst_type, dst_host, dst_dev)) = (split(src), split(dst));
    CUDA_MEMCPY3D {
        srcXInBytes: src_x,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: src_type,
        srcHost: src_host,
        srcDevice: src_dev,
        srcArray: null_mut(),
        reserved0: null_mut(),
        srcPitch: 0,
        srcHeight: 0,
        dstXInBytes: dst_x,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: dst_type,
        dstHost: dst_host.cast_mut(),
        dstDevice: dst_dev,
        dstArray: null_mut(),
        reserved1: null_mut(),
        dstPitch: 0,
        dstHeight: 0,
        WidthInBytes: width,
        Height: height,
        Depth: 1,
    }
}

#[test]
fn graph_of_memset_memcpy_and_kernel_nodes_gives_the_right_bytes_on_every_launch() {
    setup();
    register_add_u32();
    let m = load_module();
    let (f, _) = function(m, c"add_u32");
    let s = new_stream();
    let d = alloc(16);
    let mut src = Box::new([1u32, 2, 3, 4]); // on the heap: the graph reads it via a raw pointer
    let mut out = [0u32; 4];
    let mut g: CUgraph = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { cuGraphCreate(&mut g, 0) });

    let memset = CUDA_MEMSET_NODE_PARAMS {
        dst: d,
        pitch: 0,
        value: 0x100,
        elementSize: 4,
        width: 4,
        height: 1,
    };
    // SAFETY (this and the nodes below): valid out-pointers, dependency
    // arrays and parameter structs; `src`, `out` and `d` outlive every launch.
    let n_set = node(|o| unsafe { cuGraphAddMemsetNode(o, g, null_mut(), 0, &memset, null_mut()) });

    // src[1..3] -> d[1..3]
    let h2d = copy_params(Side::Host(src.as_ptr().cast()), 4, Side::Device(d), 4, 8, 1);
    // SAFETY: as for `n_set`.
    let n_h2d = node(|o| unsafe { cuGraphAddMemcpyNode(o, g, &n_set, 1, &h2d, null_mut()) });

    let (mut data, mut n, mut add) = (d, 4u32, 7u32);
    let mut params = [
        (&raw mut data).cast::<c_void>(),
        (&raw mut n).cast(),
        (&raw mut add).cast(),
    ];
    // SAFETY: CUDA_KERNEL_NODE_PARAMS is plain data; all-zero is a valid start.
    let mut kp: CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    kp.func = f;
    (kp.gridDimX, kp.gridDimY, kp.gridDimZ) = (1, 1, 1);
    (kp.blockDimX, kp.blockDimY, kp.blockDimZ) = (4, 1, 1);
    kp.kernelParams = params.as_mut_ptr();
    // SAFETY: as for `n_set`.
    let n_kernel = node(|o| unsafe { cuGraphAddKernelNode_v2(o, g, &n_h2d, 1, &kp) });
    add = 1000; // copied at node creation: the graph keeps adding 7
    let _ = add;

    let d2h = copy_params(
        Side::Device(d),
        0,
        Side::Host(out.as_mut_ptr().cast()),
        0,
        16,
        1,
    );
    // SAFETY: as for `n_set`.
    let n_end = node(|o| unsafe { cuGraphAddMemcpyNode(o, g, &n_kernel, 1, &d2h, null_mut()) });
    let deps = [n_end, n_set];
    // SAFETY: as for `n_set`.
    let _empty = node(|o| unsafe { cuGraphAddEmptyNode(o, g, deps.as_ptr(), 2) });

    let mut exec: CUgraphExec = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { cuGraphInstantiateWithFlags(&mut exec, g, 0) });
    ok(cuGraphDestroy(g)); // the executable graph is a snapshot

    ok(cuGraphLaunch(exec, s));
    ok(sync_stream(s));
    // SAFETY: the launch finished, nothing else writes `out`.
    assert_eq!(
        unsafe { std::ptr::read_volatile(&out) },
        [0x107, 9, 10, 0x107]
    );

    src[1] = 20; // read again by the second launch
    out = [0; 4];
    ok(cuGraphLaunch(exec, s));
    ok(sync_stream(s));
    // SAFETY: as above.
    assert_eq!(
        unsafe { std::ptr::read_volatile(&out) },
        [0x107, 27, 10, 0x107]
    );

    ok(cuGraphExecDestroy(exec));
    ok(cuMemFree_v2(d));
    ok(cuModuleUnload(m));
    ok(cuStreamDestroy_v2(s));
}

#[test]
fn graph_nodes_reject_foreign_dependencies_and_unsupported_copies() {
    setup();
    let (mut g1, mut g2): (CUgraph, CUgraph) = (null_mut(), null_mut());
    let (mut a, mut b): (CUgraphNode, CUgraphNode) = (null_mut(), null_mut());
    // SAFETY: valid out-pointers and dependency arrays.
    unsafe {
        ok(cuGraphCreate(&mut g1, 0));
        ok(cuGraphCreate(&mut g2, 0));
        ok(cuGraphAddEmptyNode(&mut a, g1, null_mut(), 0));
        assert_eq!(
            cuGraphAddEmptyNode(&mut b, g2, &a, 1),
            CUDA_ERROR_INVALID_VALUE
        );
        let (x, y) = (0u32, 0u32);
        let c3d = copy_params(
            Side::Host((&raw const x).cast()),
            0,
            Side::Host((&raw const y).cast()),
            0,
            4,
            2,
        );
        assert_eq!(
            cuGraphAddMemcpyNode(&mut b, g1, null_mut(), 0, &c3d, null_mut()),
            CUDA_ERROR_NOT_SUPPORTED
        );
    }
    ok(cuGraphDestroy(g1));
    ok(cuGraphDestroy(g2));
}
