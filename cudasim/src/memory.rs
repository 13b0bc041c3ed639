//! Simulated memory: device and page-locked host allocations are both host
//! allocations, tracked in one table by address (a `CUdeviceptr` is the host
//! address). Every device-side range of a memset or memcpy must lie inside
//! one live device allocation; it is checked when the call is made and again,
//! with the table locked so nothing can be freed meanwhile, when it runs.

use crate::context::require_context;
use crate::misuse::{error, lock, misuse};
use crate::stream::stream;
use crate::{api, guarded, Out, SimResult};
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};
use std::alloc::{alloc, dealloc, Layout};
use std::collections::BTreeMap;
use std::ffi::{c_uchar, c_uint, c_ushort, c_void};
use std::ptr;
use std::sync::Mutex;

/// Alignment of every allocation, as `cuMemAlloc` guarantees.
const ALIGN: usize = 256;
/// Fresh memory is filled with this, so code that relies on zeroes fails.
const FRESH: u8 = 0xCD;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Device,
    Host,
}

struct Alloc {
    layout: Layout,
    kind: Kind,
}

/// Live allocations by base address.
static ALLOCS: Mutex<BTreeMap<usize, Alloc>> = Mutex::new(BTreeMap::new());

/// One side of a copy: user host memory (trusted, as the real driver must)
/// or a device address (checked against the table).
#[derive(Clone, Copy)]
pub(crate) enum Place {
    Host(usize),
    Device(CUdeviceptr),
}

impl Place {
    pub(crate) fn host(p: *const c_void) -> Self {
        Place::Host(p.expose_provenance())
    }

    fn ptr(self) -> *mut u8 {
        let addr = match self {
            Place::Host(a) => a,
            Place::Device(d) => d as usize,
        };
        ptr::with_exposed_provenance_mut(addr)
    }
}

/// Fails (as misuse) unless `[addr, addr + len)` is inside one live device allocation.
fn check_device(
    allocs: &BTreeMap<usize, Alloc>,
    addr: CUdeviceptr,
    len: usize,
    call: &str,
    what: &str,
) -> SimResult {
    let inside = usize::try_from(addr).ok().is_some_and(|a| {
        allocs.range(..=a).next_back().is_some_and(|(base, al)| {
            al.kind == Kind::Device
                && a.checked_add(len)
                    .is_some_and(|end| end <= base + al.layout.size())
        })
    });
    if inside {
        return Ok(());
    }
    Err(misuse(
        CUDA_ERROR_INVALID_VALUE,
        format!("{call}: {what} range {addr:#x}..{addr:#x}+{len} is not inside one live device allocation"),
    ))
}

/// A 1-D copy of `len` bytes; the ranges may overlap.
#[derive(Clone, Copy)]
pub(crate) struct Copy1D {
    pub(crate) dst: Place,
    pub(crate) src: Place,
    pub(crate) len: usize,
}

impl Copy1D {
    fn check(&self, allocs: &BTreeMap<usize, Alloc>, call: &str) -> SimResult {
        if self.len == 0 {
            return Ok(());
        }
        for (place, what) in [(self.dst, "destination"), (self.src, "source")] {
            match place {
                Place::Device(d) => check_device(allocs, d, self.len, call, what)?,
                Place::Host(0) => {
                    return fail!(CUDA_ERROR_INVALID_VALUE, "{call}: host {what} is null");
                }
                Place::Host(_) => {}
            }
        }
        Ok(())
    }

    /// Checks the copy now, before it is queued or recorded.
    pub(crate) fn validate(&self, call: &str) -> SimResult {
        self.check(&lock(&ALLOCS), call)
    }

    /// Checks and performs the copy.
    ///
    /// # Safety
    /// Host sides must be valid for `len` bytes (reads of the source, writes
    /// of the destination) for the duration of the call.
    pub(crate) unsafe fn run(&self, call: &str) -> SimResult {
        let allocs = lock(&ALLOCS);
        self.check(&allocs, call)?;
        if self.len > 0 {
            // SAFETY: device sides lie inside live allocations, which cannot
            // be freed while `allocs` is held; host sides are valid for `len`
            // bytes (this fn's contract). `ptr::copy` allows overlap.
            unsafe { ptr::copy(self.src.ptr(), self.dst.ptr(), self.len) };
        }
        Ok(())
    }
}

/// A memset of `height` rows of `width` elements of `elem` bytes, rows
/// `pitch` bytes apart, in device memory.
#[derive(Clone, Copy)]
pub(crate) struct Fill {
    pub(crate) dst: CUdeviceptr,
    pub(crate) value: u32,
    pub(crate) elem: usize,
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) pitch: usize,
}

impl Fill {
    /// `n` elements of `elem` bytes from `dst`, each set to `value`.
    pub(crate) fn linear(dst: CUdeviceptr, elem: usize, value: u32, n: usize) -> Self {
        Fill {
            dst,
            value,
            elem,
            width: n,
            height: 1,
            pitch: 0,
        }
    }

    fn check(&self, allocs: &BTreeMap<usize, Alloc>, call: &str) -> SimResult {
        let Fill {
            dst,
            elem,
            width,
            height,
            pitch,
            ..
        } = *self;
        if !matches!(elem, 1 | 2 | 4) {
            return fail!(
                CUDA_ERROR_INVALID_VALUE,
                "{call}: element size {elem}: must be 1, 2 or 4"
            );
        }
        if dst % elem as u64 != 0 || (height > 1 && pitch % elem != 0) {
            return fail!(CUDA_ERROR_INVALID_VALUE, "{call}: destination {dst:#x} or pitch {pitch} not aligned to the element size {elem}");
        }
        let row = width.checked_mul(elem);
        let span = match row {
            _ if width == 0 || height == 0 => Some(0),
            Some(row) if height == 1 => Some(row),
            Some(row) if pitch >= row => pitch
                .checked_mul(height - 1)
                .and_then(|s| s.checked_add(row)),
            _ => None,
        };
        let Some(span) = span else {
            return fail!(
                CUDA_ERROR_INVALID_VALUE,
                "{call}: {height} rows of {width} x {elem} bytes do not fit pitch {pitch}"
            );
        };
        if span == 0 {
            return Ok(());
        }
        check_device(allocs, dst, span, call, "destination")
    }

    /// Checks the memset now, before it is queued or recorded.
    pub(crate) fn validate(&self, call: &str) -> SimResult {
        self.check(&lock(&ALLOCS), call)
    }

    /// Checks and performs the memset.
    pub(crate) fn run(&self, call: &str) -> SimResult {
        let allocs = lock(&ALLOCS);
        self.check(&allocs, call)?;
        let v = self.value;
        let pattern: &[u8] = match self.elem {
            1 => &[v as u8],
            2 => &(v as u16).to_ne_bytes(),
            _ => &v.to_ne_bytes(),
        };
        let base = Place::Device(self.dst).ptr();
        for r in 0..self.height {
            for i in 0..self.width {
                // SAFETY: check() proved every row (r * pitch + width * elem
                // bytes from dst) inside one live device allocation, which
                // cannot be freed while `allocs` is held.
                unsafe {
                    let at = base.add(r * self.pitch + i * self.elem);
                    ptr::copy_nonoverlapping(pattern.as_ptr(), at, self.elem);
                }
            }
        }
        Ok(())
    }
}

fn allocate(kind: Kind, bytesize: usize, call: &str) -> SimResult<usize> {
    require_context(call)?;
    let layout = Layout::from_size_align(bytesize, ALIGN)
        .ok()
        .filter(|l| l.size() > 0)
        .ok_or_else(|| {
            error(
                CUDA_ERROR_INVALID_VALUE,
                format_args!("{call}: bytesize {bytesize}: must be 1..isize::MAX"),
            )
        })?;
    // SAFETY: `layout` has a non-zero size.
    let p = unsafe { alloc(layout) };
    if p.is_null() {
        return fail!(CUDA_ERROR_OUT_OF_MEMORY, "{call}: {bytesize} bytes");
    }
    // SAFETY: `p` is a fresh allocation of `bytesize` bytes.
    unsafe { p.write_bytes(FRESH, bytesize) };
    let addr = p.expose_provenance();
    lock(&ALLOCS).insert(addr, Alloc { layout, kind });
    Ok(addr)
}

fn free(kind: Kind, addr: usize, call: &str) -> SimResult {
    let mut allocs = lock(&ALLOCS);
    let why = match allocs.get(&addr) {
        Some(a) if a.kind == kind => None,
        Some(_) => Some("an allocation of the other kind (cuMemFree_v2 is for cuMemAlloc_v2, cuMemFreeHost for cuMemAllocHost_v2)"),
        None => Some("not a live allocation (freed twice, or never allocated)"),
    };
    if let Some(why) = why {
        return Err(misuse(
            CUDA_ERROR_INVALID_VALUE,
            format!("{call}: {addr:#x} is {why}"),
        ));
    }
    let Some(a) = allocs.remove(&addr) else {
        return Err(CUDA_ERROR_UNKNOWN);
    };
    // SAFETY: allocated by `allocate` with this layout and just removed from
    // the table, so it is freed exactly once and no checked access can follow.
    unsafe { dealloc(ptr::with_exposed_provenance_mut(addr), a.layout) };
    Ok(())
}

/// Allocates `bytesize` bytes of device memory filled with 0xCD.
///
/// # Safety
/// `dptr` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    api("cuMemAlloc_v2", || {
        let out = Out::new(dptr, "cuMemAlloc_v2", "dptr")?;
        let addr = allocate(Kind::Device, bytesize, "cuMemAlloc_v2")?;
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(addr as CUdeviceptr) };
        Ok(())
    })
}

/// Frees device memory; anything but a live device allocation is misuse.
#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    api("cuMemFree_v2", || {
        free(Kind::Device, dptr as usize, "cuMemFree_v2")
    })
}

/// Allocates `bytesize` bytes of "page-locked" host memory filled with 0xCD.
///
/// # Safety
/// `pp` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    api("cuMemAllocHost_v2", || {
        let out = Out::new(pp, "cuMemAllocHost_v2", "pp")?;
        let addr = allocate(Kind::Host, bytesize, "cuMemAllocHost_v2")?;
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(ptr::with_exposed_provenance_mut(addr)) };
        Ok(())
    })
}

/// Frees host memory; anything but a live `cuMemAllocHost_v2` block is misuse.
#[no_mangle]
pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    api("cuMemFreeHost", || {
        free(Kind::Host, p.addr(), "cuMemFreeHost")
    })
}

/// Sets `N` bytes at once (not stream-ordered).
#[no_mangle]
pub extern "C" fn cuMemsetD8_v2(dstDevice: CUdeviceptr, uc: c_uchar, N: usize) -> CUresult {
    let fill = Fill::linear(dstDevice, 1, uc.into(), N);
    api("cuMemsetD8_v2", || fill.run("cuMemsetD8_v2"))
}

fn memset_async(call: &'static str, fill: Fill, hStream: CUstream) -> CUresult {
    api(call, || {
        let s = stream(hStream, call)?;
        fill.validate(call)?;
        s.enqueue(Box::new(move || fill.run(call)))
    })
}

/// Queues a memset of `N` bytes.
#[no_mangle]
pub extern "C" fn cuMemsetD8Async(
    dstDevice: CUdeviceptr,
    uc: c_uchar,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    let fill = Fill::linear(dstDevice, 1, uc.into(), N);
    memset_async("cuMemsetD8Async", fill, hStream)
}

/// Queues a memset of `N` 16-bit elements.
#[no_mangle]
pub extern "C" fn cuMemsetD16Async(
    dstDevice: CUdeviceptr,
    us: c_ushort,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    let fill = Fill::linear(dstDevice, 2, us.into(), N);
    memset_async("cuMemsetD16Async", fill, hStream)
}

/// Queues a memset of `N` 32-bit elements.
#[no_mangle]
pub extern "C" fn cuMemsetD32Async(
    dstDevice: CUdeviceptr,
    ui: c_uint,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    let fill = Fill::linear(dstDevice, 4, ui, N);
    memset_async("cuMemsetD32Async", fill, hStream)
}

/// Copies host to device at once.
///
/// # Safety
/// `srcHost` must be valid for reads of `ByteCount` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dstDevice: CUdeviceptr,
    srcHost: *const c_void,
    ByteCount: usize,
) -> CUresult {
    let copy = Copy1D {
        dst: Place::Device(dstDevice),
        src: Place::host(srcHost),
        len: ByteCount,
    };
    // SAFETY: the host side is valid for ByteCount bytes (this fn's contract).
    api("cuMemcpyHtoD_v2", || unsafe { copy.run("cuMemcpyHtoD_v2") })
}

/// Copies device to host at once.
///
/// # Safety
/// `dstHost` must be valid for writes of `ByteCount` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dstHost: *mut c_void,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
) -> CUresult {
    let copy = Copy1D {
        dst: Place::host(dstHost),
        src: Place::Device(srcDevice),
        len: ByteCount,
    };
    // SAFETY: the host side is valid for ByteCount bytes (this fn's contract).
    api("cuMemcpyDtoH_v2", || unsafe { copy.run("cuMemcpyDtoH_v2") })
}

/// Queues `copy` on the stream.
///
/// # Safety
/// Host sides of `copy` must stay valid for `copy.len` bytes until it has run.
unsafe fn memcpy_async(call: &'static str, copy: Copy1D, hStream: CUstream) -> CUresult {
    api(call, || {
        let s = stream(hStream, call)?;
        copy.validate(call)?;
        // SAFETY: host sides stay valid until the copy has run (this fn's contract).
        s.enqueue(Box::new(move || unsafe { copy.run(call) }))
    })
}

/// Queues a host-to-device copy.
///
/// # Safety
/// `srcHost` must stay valid for reads of `ByteCount` bytes until the copy has run.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dstDevice: CUdeviceptr,
    srcHost: *const c_void,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    let copy = Copy1D {
        dst: Place::Device(dstDevice),
        src: Place::host(srcHost),
        len: ByteCount,
    };
    // SAFETY: forwarded from this fn's contract.
    unsafe { memcpy_async("cuMemcpyHtoDAsync_v2", copy, hStream) }
}

/// Queues a device-to-host copy.
///
/// # Safety
/// `dstHost` must stay valid for writes of `ByteCount` bytes until the copy has run.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dstHost: *mut c_void,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    let copy = Copy1D {
        dst: Place::host(dstHost),
        src: Place::Device(srcDevice),
        len: ByteCount,
    };
    // SAFETY: forwarded from this fn's contract.
    unsafe { memcpy_async("cuMemcpyDtoHAsync_v2", copy, hStream) }
}

/// Queues a device-to-device copy.
#[no_mangle]
pub extern "C" fn cuMemcpyDtoDAsync_v2(
    dstDevice: CUdeviceptr,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    let copy = Copy1D {
        dst: Place::Device(dstDevice),
        src: Place::Device(srcDevice),
        len: ByteCount,
    };
    const CALL: &str = "cuMemcpyDtoDAsync_v2";
    api(CALL, || {
        let s = stream(hStream, CALL)?;
        copy.validate(CALL)?;
        // SAFETY: both sides are device memory, so there is no host side to
        // keep valid; they are checked against live allocations when it runs.
        s.enqueue(Box::new(move || unsafe { copy.run(CALL) }))
    })
}

/// Device and host allocations not yet freed.
#[no_mangle]
pub extern "C" fn fenceline_sim_live_allocations() -> u64 {
    guarded("fenceline_sim_live_allocations", 0, || {
        lock(&ALLOCS).len() as u64
    })
}
