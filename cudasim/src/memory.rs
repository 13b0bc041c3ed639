//! Simulated memory: device and page-locked host allocations are both host
//! allocations, tracked in one table by address (a `CUdeviceptr` is the host
//! address). Every device-side range of a memset or memcpy must lie inside
//! one live device allocation; it is checked when the call is made and again,
//! with the table locked so nothing can be freed meanwhile, when it runs.
//!
//! Stream-ordered allocations (`cuMemAllocAsync` / `cuMemFreeAsync`) get
//! their address when the call is made but are usable only from when their
//! stream reaches the allocation until it reaches the free: a queued
//! operation that runs outside that window is misuse. Every queued
//! operation (memset, memcpy, kernel, graph launch) counts itself as a use
//! of each device allocation it names, from its enqueue until it finished;
//! a free (either kind) that finds uses outstanding is misuse (the memory
//! is then leaked, never handed back under a running user). A kernel's
//! 8-byte parameters are taken as addresses: one inside a live device
//! allocation is a use of it, and one inside a stream-ordered allocation
//! that is not reached yet or already freed fails the launch when it runs.

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

/// Where a device allocation is in its (stream-ordered) life.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Life {
    /// `cuMemAllocAsync` was called; its stream has not reached it.
    Pending,
    /// Usable.
    Ready,
    /// `cuMemFreeAsync` was called; its stream has not reached it (still
    /// usable by work ordered before the free).
    Freeing,
}

struct Alloc {
    layout: Layout,
    kind: Kind,
    life: Life,
    /// Never reused: tells this allocation from a later one at the same
    /// address.
    id: u64,
    /// Queued or running operations that name it.
    uses: u64,
}

/// Every allocation the simulator knows of.
struct Table {
    /// Live allocations by base address.
    live: BTreeMap<usize, Alloc>,
    /// Stream-ordered allocations freed since, by base address, with their
    /// size (forgotten once the address is allocated again): what a
    /// kernel parameter is checked against.
    freed: BTreeMap<usize, usize>,
    next_id: u64,
}

static ALLOCS: Mutex<Table> = Mutex::new(Table {
    live: BTreeMap::new(),
    freed: BTreeMap::new(),
    next_id: 1,
});

/// The live device allocation containing `addr`: its base.
fn containing(allocs: &BTreeMap<usize, Alloc>, addr: u64) -> Option<(usize, &Alloc)> {
    let a = usize::try_from(addr).ok()?;
    let (base, al) = allocs.range(..=a).next_back()?;
    (al.kind == Kind::Device && a < base + al.layout.size()).then_some((*base, al))
}

/// The uses an operation holds, from its enqueue until it is dropped
/// (after it ran, or unrun when its stream goes away).
pub(crate) struct Uses(Vec<(usize, u64)>);

impl Uses {
    /// Counts a use of each live device allocation one of `addrs` is in
    /// (one whose free was queued already is not counted: the use is after
    /// the free, which the checks when it runs report).
    pub(crate) fn take(addrs: impl IntoIterator<Item = CUdeviceptr>) -> Uses {
        let mut t = lock(&ALLOCS);
        let mut taken = Vec::new();
        for addr in addrs {
            let Some((base, al)) = containing(&t.live, addr) else {
                continue;
            };
            if al.life == Life::Freeing {
                continue;
            }
            let id = al.id;
            if taken.contains(&(base, id)) {
                continue;
            }
            if let Some(al) = t.live.get_mut(&base) {
                al.uses += 1;
            }
            taken.push((base, id));
        }
        Uses(taken)
    }
}

impl Drop for Uses {
    fn drop(&mut self) {
        let mut t = lock(&ALLOCS);
        for (base, id) in &self.0 {
            if let Some(al) = t.live.get_mut(base).filter(|al| al.id == *id) {
                al.uses -= 1;
            }
        }
    }
}

/// Fails (as misuse) if `addr` points into a stream-ordered allocation
/// that was freed (and not allocated again since).
pub(crate) fn check_not_freed(addr: u64, call: &str) -> SimResult {
    let t = lock(&ALLOCS);
    if containing(&t.live, addr).is_some() {
        return Ok(());
    }
    in_freed(&t, addr, call)
}

fn in_freed(t: &Table, addr: u64, call: &str) -> SimResult {
    let Ok(a) = usize::try_from(addr) else {
        return Ok(());
    };
    if let Some((base, size)) = t.freed.range(..=a).next_back() {
        if a < base + size {
            return Err(misuse(
                CUDA_ERROR_ILLEGAL_ADDRESS,
                format!("{call}: kernel parameter {addr:#x} is in an allocation freed by cuMemFreeAsync"),
            ));
        }
    }
    Ok(())
}

/// Fails (as misuse) if an 8-byte kernel parameter `addr` points into a
/// stream-ordered allocation its stream has not reached or has freed.
pub(crate) fn check_kernel_param(addr: u64, call: &str) -> SimResult {
    let t = lock(&ALLOCS);
    if let Some((_, al)) = containing(&t.live, addr) {
        if al.life == Life::Pending {
            return Err(misuse(
                CUDA_ERROR_ILLEGAL_ADDRESS,
                format!("{call}: kernel parameter {addr:#x} is in an allocation whose cuMemAllocAsync its stream has not reached"),
            ));
        }
        return Ok(());
    }
    in_freed(&t, addr, call)
}

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
///
/// When the operation runs (`at_run`), the allocation must also have been
/// reached by its `cuMemAllocAsync`; when it is queued, a pending one is
/// fine (its stream order decides).
fn check_device(
    allocs: &BTreeMap<usize, Alloc>,
    addr: CUdeviceptr,
    len: usize,
    call: &str,
    what: &str,
    at_run: bool,
) -> SimResult {
    let found = usize::try_from(addr).ok().and_then(|a| {
        allocs.range(..=a).next_back().filter(|(base, al)| {
            al.kind == Kind::Device
                && a.checked_add(len)
                    .is_some_and(|end| end <= *base + al.layout.size())
        })
    });
    if let Some((_, al)) = found {
        if at_run && al.life == Life::Pending {
            return Err(misuse(
                CUDA_ERROR_ILLEGAL_ADDRESS,
                format!("{call}: {what} range {addr:#x}..{addr:#x}+{len} is in an allocation whose cuMemAllocAsync its stream has not reached"),
            ));
        }
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
    fn check(&self, allocs: &BTreeMap<usize, Alloc>, call: &str, at_run: bool) -> SimResult {
        if self.len == 0 {
            return Ok(());
        }
        for (place, what) in [(self.dst, "destination"), (self.src, "source")] {
            match place {
                Place::Device(d) => check_device(allocs, d, self.len, call, what, at_run)?,
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
        self.check(&lock(&ALLOCS).live, call, false)
    }

    /// The device addresses it names (for [`Uses::take`]).
    pub(crate) fn device_addrs(&self) -> impl Iterator<Item = CUdeviceptr> {
        [self.dst, self.src].into_iter().filter_map(|p| match p {
            Place::Device(d) => Some(d),
            Place::Host(_) => None,
        })
    }

    /// Checks and performs the copy.
    ///
    /// # Safety
    /// Host sides must be valid for `len` bytes (reads of the source, writes
    /// of the destination) for the duration of the call.
    pub(crate) unsafe fn run(&self, call: &str) -> SimResult {
        let allocs = lock(&ALLOCS);
        self.check(&allocs.live, call, true)?;
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

    fn check(&self, allocs: &BTreeMap<usize, Alloc>, call: &str, at_run: bool) -> SimResult {
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
        check_device(allocs, dst, span, call, "destination", at_run)
    }

    /// Checks the memset now, before it is queued or recorded.
    pub(crate) fn validate(&self, call: &str) -> SimResult {
        self.check(&lock(&ALLOCS).live, call, false)
    }

    /// Checks and performs the memset.
    pub(crate) fn run(&self, call: &str) -> SimResult {
        let allocs = lock(&ALLOCS);
        self.check(&allocs.live, call, true)?;
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

fn allocate(kind: Kind, bytesize: usize, call: &str, life: Life) -> SimResult<usize> {
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
    let mut t = lock(&ALLOCS);
    let stale: Vec<usize> = t
        .freed
        .range(..addr + bytesize)
        .filter(|(b, size)| *b + *size > addr)
        .map(|(b, _)| *b)
        .collect();
    for b in stale {
        t.freed.remove(&b);
    }
    let id = t.next_id;
    t.next_id += 1;
    t.live.insert(
        addr,
        Alloc {
            layout,
            kind,
            life,
            id,
            uses: 0,
        },
    );
    Ok(addr)
}

fn free(kind: Kind, addr: usize, call: &str) -> SimResult {
    let mut t = lock(&ALLOCS);
    let allocs = &mut t.live;
    let why = match allocs.get(&addr) {
        Some(a) if a.kind == kind && a.life == Life::Pending => {
            Some("a cuMemAllocAsync allocation its stream has not reached yet")
        }
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

/// Allocates `bytesize` bytes of device memory in stream order: the
/// address is returned now, the memory is usable once `hStream` reaches
/// the allocation.
///
/// # Safety
/// `dptr` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    hStream: CUstream,
) -> CUresult {
    const CALL: &str = "cuMemAllocAsync";
    api(CALL, || {
        let out = Out::new(dptr, CALL, "dptr")?;
        let s = stream(hStream, CALL)?;
        let addr = allocate(Kind::Device, bytesize, CALL, Life::Pending)?;
        let id = lock(&ALLOCS).live.get(&addr).map_or(0, |a| a.id);
        let reached = move || {
            if let Some(a) = lock(&ALLOCS).live.get_mut(&addr).filter(|a| a.id == id) {
                if a.life == Life::Pending {
                    a.life = Life::Ready;
                }
            }
            Ok(())
        };
        if let Err(e) = s.enqueue(Box::new(reached)) {
            let _ = free_now(addr, id);
            return Err(e);
        }
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(addr as CUdeviceptr) };
        Ok(())
    })
}

/// Removes and frees allocation `addr` (if it is still allocation `id`).
fn free_now(addr: usize, id: u64) -> Option<usize> {
    let mut t = lock(&ALLOCS);
    if t.live.get(&addr).is_none_or(|a| a.id != id) {
        return None;
    }
    let a = t.live.remove(&addr)?;
    // SAFETY: allocated by `allocate` with this layout and just removed
    // from the table, so it is freed exactly once.
    unsafe { dealloc(ptr::with_exposed_provenance_mut(addr), a.layout) };
    Some(a.layout.size())
}

/// Frees device memory in stream order: uses ordered before the free on
/// `hStream` are fine, anything after it is misuse, and so is a free that
/// its stream reaches while other stream work naming the memory is still
/// queued or running (the memory is then leaked instead of freed).
#[no_mangle]
pub extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, hStream: CUstream) -> CUresult {
    const CALL: &str = "cuMemFreeAsync";
    api(CALL, || {
        let s = stream(hStream, CALL)?;
        let addr = dptr as usize;
        let id = {
            let mut t = lock(&ALLOCS);
            let why = match t.live.get_mut(&addr) {
                Some(a) if a.kind == Kind::Device && a.life != Life::Freeing => {
                    a.life = Life::Freeing;
                    Ok(a.id)
                }
                Some(a) if a.kind == Kind::Device => {
                    Err("freed twice (a cuMemFreeAsync is queued)")
                }
                Some(_) => Err("host memory (cuMemAllocHost_v2)"),
                None => Err("not a live allocation (freed twice, or never allocated)"),
            };
            why.map_err(|why| {
                misuse(
                    CUDA_ERROR_INVALID_VALUE,
                    format!("{CALL}: {addr:#x} is {why}"),
                )
            })?
        };
        s.enqueue(Box::new(move || {
            let busy = lock(&ALLOCS)
                .live
                .get(&addr)
                .filter(|a| a.id == id)
                .map(|a| a.uses)
                .unwrap_or(0);
            if busy > 0 {
                // Leaked, never freed under its users: forget it.
                let mut t = lock(&ALLOCS);
                if let Some(a) = t.live.remove(&addr) {
                    t.freed.insert(addr, a.layout.size());
                }
                return Err(misuse(
                    CUDA_ERROR_ILLEGAL_STATE,
                    format!("{CALL}: {addr:#x} reached while {busy} stream operation(s) naming it are queued or running"),
                ));
            }
            if let Some(size) = free_now(addr, id) {
                lock(&ALLOCS).freed.insert(addr, size);
            }
            Ok(())
        }))
    })
}

/// Allocates `bytesize` bytes of device memory filled with 0xCD.
///
/// # Safety
/// `dptr` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    api("cuMemAlloc_v2", || {
        let out = Out::new(dptr, "cuMemAlloc_v2", "dptr")?;
        let addr = allocate(Kind::Device, bytesize, "cuMemAlloc_v2", Life::Ready)?;
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
        let addr = allocate(Kind::Host, bytesize, "cuMemAllocHost_v2", Life::Ready)?;
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
        let uses = Uses::take([fill.dst]);
        s.enqueue(Box::new(move || {
            let r = fill.run(call);
            drop(uses);
            r
        }))
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
        let uses = Uses::take(copy.device_addrs());
        s.enqueue(Box::new(move || {
            // SAFETY: host sides stay valid until the copy has run (this fn's contract).
            let r = unsafe { copy.run(call) };
            drop(uses);
            r
        }))
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
        let uses = Uses::take(copy.device_addrs());
        s.enqueue(Box::new(move || {
            // SAFETY: both sides are device memory, so there is no host side
            // to keep valid; they are checked against live allocations when
            // it runs.
            let r = unsafe { copy.run(CALL) };
            drop(uses);
            r
        }))
    })
}

/// Device and host allocations not yet freed.
#[no_mangle]
pub extern "C" fn fenceline_sim_live_allocations() -> u64 {
    guarded("fenceline_sim_live_allocations", 0, || {
        lock(&ALLOCS).live.len() as u64
    })
}
