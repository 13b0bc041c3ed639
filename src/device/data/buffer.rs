//! `Buffer`: device memory; for the CPU device, host memory; for the CUDA
//! device, `cuMemAlloc` memory; for the Vulkan device, host-visible memory
//! mapped for the buffer's life (a `HostMem` whose home is the mapping).
//!
//! A CPU-device buffer's bytes are plain memory (aligned to
//! [`BUFFER_ALIGN`]), read and written with `memcpy`/`memset` and through
//! dispatch bindings as typed slices. No data race is reachable from safe
//! code: every user of the bytes holds the buffer's [`Hold`] word for the
//! span of its use (an action from its issue to just before it signals,
//! shared where it only reads; a host `read` or `write` for the copy), and
//! a conflicting user fails instead of touching them.

use std::fmt;

use super::hold::Access;
pub(crate) use super::host_mem::{conflict, HostMem, HostRef};
use crate::device::cuda::memory::{CudaMem, CudaRef};
use crate::error::{Error, ErrorKind};

pub use super::host_mem::BUFFER_ALIGN;

/// A buffer of device memory. Cheap to clone (a handle); `Send + Sync`.
///
/// Command buffers write it on the device's queues; [`read`](Self::read)
/// and [`write`](Self::write) copy it out and in from the host. On the CPU
/// device its bytes are plain memory that dispatches see as typed slices
/// ([`Binding`](crate::Binding)); whoever uses them holds the buffer (an
/// action while it runs, a host copy while it copies), and a use that
/// conflicts with a holder (either one writes) fails with
/// [`FailedPrecondition`](ErrorKind::FailedPrecondition) instead of
/// racing. Order work with semaphores to see a submission's result.
#[derive(Clone)]
pub struct Buffer {
    mem: Mem,
}

#[derive(Clone)]
enum Mem {
    Host(HostRef),
    Cuda(CudaRef),
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer").field("len", &self.len()).finish()
    }
}

impl Buffer {
    /// A zeroed CPU-device buffer of `device` (see `HostMem::device`).
    pub(crate) fn new(len: usize, device: u64) -> Result<Buffer, Error> {
        if len == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "buffer length 0: must be at least 1",
            ));
        }
        Ok(Buffer {
            mem: Mem::Host(HostRef::zeroed(len, device)?),
        })
    }

    /// A CPU buffer from `Queue::alloca`.
    pub(crate) fn transient(mem: HostRef) -> Buffer {
        Buffer {
            mem: Mem::Host(mem),
        }
    }

    /// A buffer over memory a device mapped (`HostRef::mapped`).
    #[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
    pub(crate) fn mapped(mem: HostRef) -> Buffer {
        Buffer {
            mem: Mem::Host(mem),
        }
    }

    used_by_cuda! {
    /// A CUDA buffer over `mem` (zeroed memory, or an alloca's, which
    /// has none until its action is issued).
    pub(crate) fn cuda_mem(mem: CudaRef) -> Buffer {
        Buffer {
            mem: Mem::Cuda(mem),
        }
    }
    }

    /// Length in bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::Device;
    ///
    /// let buf = Device::cpu()?.buffer(4096)?;
    /// assert_eq!(buf.len(), 4096);
    /// assert_eq!(buf.clone().len(), 4096); // a clone is the same memory
    /// assert!(!buf.is_empty());
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        match &self.mem {
            Mem::Host(m) => m.len(),
            Mem::Cuda(m) => m.len(),
        }
    }

    /// Never true: a buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `out.len()` bytes starting at `offset` into `out` (for a
    /// CUDA buffer, a synchronous device-to-host copy; for a Vulkan one, a
    /// copy from its mapping).
    ///
    /// # Errors
    ///
    /// - [`OutOfRange`](ErrorKind::OutOfRange) if
    ///   `offset..offset + out.len()` does not fit in the buffer.
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) for a CPU
    ///   buffer that a running action writes, a Vulkan buffer that a
    ///   submitted action not yet completed uses (or another host copy is
    ///   copying: host copies of a Vulkan buffer are exclusive), nothing
    ///   copied; or a buffer from [`Queue::alloca`](crate::Queue::alloca)
    ///   before its alloca ran (on a CUDA device: completed; on a Vulkan
    ///   device: issued) or after its dealloca ran.
    /// - [`Internal`](ErrorKind::Internal) for a CUDA buffer, if the driver
    ///   fails to make the context current or to copy.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{Device, ErrorKind};
    ///
    /// let buf = Device::cpu()?.buffer(16)?;
    /// let mut out = [0xFF; 4];
    /// buf.read(12, &mut out)?; // the last 4 bytes
    /// assert_eq!(out, [0; 4]); // a new buffer is zeroed
    /// assert_eq!(buf.read(14, &mut out).unwrap_err().kind(), ErrorKind::OutOfRange);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        let range = self.range(offset, out.len())?;
        match &self.mem {
            Mem::Host(m) => m.held(Access::Read, || {
                // SAFETY: held for reading; in bounds (checked above).
                out.copy_from_slice(unsafe { m.bytes(range) })
            }),
            Mem::Cuda(m) => m.read(offset, out),
        }
    }

    /// Copies `data` into the buffer at `offset` (host side, synchronous;
    /// for a CUDA buffer, a synchronous host-to-device copy; for a Vulkan
    /// one, a copy into its mapping, visible to work submitted after it).
    ///
    /// # Errors
    ///
    /// Nothing is written when this returns an error:
    ///
    /// - [`OutOfRange`](ErrorKind::OutOfRange) if
    ///   `offset..offset + data.len()` does not fit in the buffer.
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) for a CPU
    ///   buffer that a running action reads or writes, a Vulkan buffer that
    ///   a submitted action not yet completed uses (or another host copy
    ///   is copying), or a buffer from
    ///   [`Queue::alloca`](crate::Queue::alloca) before its alloca ran (on a
    ///   CUDA device: completed; on a Vulkan device: issued) or after its
    ///   dealloca ran.
    /// - [`Internal`](ErrorKind::Internal) for a CUDA buffer, if the driver
    ///   fails to make the context current or to copy.
    ///
    /// # Examples
    ///
    /// ```
    /// use fenceline::{Device, ErrorKind};
    ///
    /// let buf = Device::cpu()?.buffer(8)?;
    /// buf.write(4, &[1, 2, 3, 4])?;
    /// let mut out = [0; 8];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [0, 0, 0, 0, 1, 2, 3, 4]);
    /// assert_eq!(buf.write(6, &[9; 4]).unwrap_err().kind(), ErrorKind::OutOfRange);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        let range = self.range(offset, data.len())?;
        match &self.mem {
            Mem::Host(m) => m.held(Access::Write, || {
                // SAFETY: held for writing (no other user); in bounds.
                unsafe { m.bytes_mut(range) }.copy_from_slice(data)
            }),
            Mem::Cuda(m) => m.write(offset, data),
        }
    }

    /// Whether an action or a host copy holds the buffer right now (a CPU
    /// buffer; `false` for device memory): for tests proving that holds
    /// are given back.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn is_held(&self) -> bool {
        self.host().is_some_and(|m| m.hold().is_held())
    }

    /// The CPU device that made the buffer (`None` for device memory).
    pub(crate) fn host_device(&self) -> Option<u64> {
        self.host().map(|m| m.device())
    }

    /// A CPU-device buffer's memory (`None` for device memory).
    pub(crate) fn host(&self) -> Option<&HostRef> {
        match &self.mem {
            Mem::Host(m) => Some(m),
            Mem::Cuda(_) => None,
        }
    }

    /// The device address of a CUDA buffer (`FailedPrecondition` for one
    /// from `Queue::alloca` before its alloca ran or after its dealloca
    /// ran).
    pub(crate) fn device_ptr(&self) -> Result<u64, Error> {
        match &self.mem {
            Mem::Cuda(m) => m.ptr(),
            Mem::Host(_) => Err(Error::new(
                ErrorKind::InvalidArgument,
                "a CPU-device buffer used in CUDA work",
            )),
        }
    }

    /// A CUDA buffer's memory (`None` for a CPU-device buffer).
    pub(crate) fn cuda(&self) -> Option<&CudaMem> {
        match &self.mem {
            Mem::Cuda(m) => Some(m),
            Mem::Host(_) => None,
        }
    }

    /// The queue of a CUDA buffer from `Queue::alloca` (`None` for any
    /// other buffer).
    pub(crate) fn cuda_transient_queue(&self) -> Option<usize> {
        self.cuda()?.transient_queue()
    }

    /// Checks `offset..offset + len` against the buffer.
    pub(crate) fn range(&self, offset: usize, len: usize) -> Result<std::ops::Range<usize>, Error> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(offset..end),
            _ => Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "range offset {offset} length {len} does not fit a buffer of {} bytes",
                    self.len()
                ),
            )),
        }
    }

    pub(crate) fn same(&self, other: &Buffer) -> bool {
        match (&self.mem, &other.mem) {
            (Mem::Host(a), Mem::Host(b)) => HostRef::ptr_eq(a, b),
            (Mem::Cuda(a), Mem::Cuda(b)) => CudaRef::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Identity of the buffer's memory (the same for every handle).
    pub(crate) fn id(&self) -> *const () {
        match &self.mem {
            Mem::Host(m) => HostRef::as_ptr(m).cast(),
            Mem::Cuda(m) => CudaRef::as_ptr(m).cast(),
        }
    }

    fn host_mem(&self) -> Result<&HostMem, Error> {
        self.host()
            .map(|m| &**m)
            .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "a CUDA buffer used in CPU work"))
    }

    /// Writes `data` at `offset`, inside an action.
    ///
    /// # Safety
    /// The caller's action holds the buffer for writing, and no other
    /// command of its stage touches it (the recording's checks); the range
    /// was checked at record time.
    pub(crate) unsafe fn write_held(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        let m = self.host_mem()?;
        // SAFETY: per contract.
        unsafe { m.bytes_mut(offset..offset + data.len()) }.copy_from_slice(data);
        Ok(())
    }

    /// Fills `len` bytes at `offset` with `pattern`, inside an action.
    ///
    /// # Safety
    /// As for [`write_held`](Self::write_held).
    pub(crate) unsafe fn fill_held(
        &self,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<(), Error> {
        let m = self.host_mem()?;
        // SAFETY: per contract.
        let bytes = unsafe { m.bytes_mut(offset..offset + len) };
        match pattern {
            [b] => bytes.fill(*b),
            _ => {
                for chunk in bytes.chunks_exact_mut(pattern.len()) {
                    chunk.copy_from_slice(pattern);
                }
            }
        }
        Ok(())
    }

    /// Copies `len` bytes to `dst`, inside an action (the ranges may
    /// overlap when `dst` is this buffer).
    ///
    /// # Safety
    /// The caller's action holds this buffer (for reading at least) and
    /// `dst` for writing, and no other command of its stage writes this
    /// one or touches `dst`; the ranges were checked at record time.
    pub(crate) unsafe fn copy_held(
        &self,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), Error> {
        let (src, dst) = (self.host_mem()?, dst.host_mem()?);
        debug_assert!(src_offset + len <= src.len() && dst_offset + len <= dst.len());
        // SAFETY: `src_offset..src_offset + len` is in bounds of `src`
        // (contract).
        let from = unsafe { src.base().add(src_offset) };
        // SAFETY: `dst_offset..dst_offset + len` is in bounds of `dst`
        // (contract).
        let to = unsafe { dst.base().add(dst_offset) };
        // SAFETY: both ranges in bounds (contract); `copy` allows overlap;
        // no other user of `dst`'s range or writer of `src`'s (contract).
        unsafe { std::ptr::copy(from, to, len) };
        Ok(())
    }
}

static_assertions::assert_impl_all!(Buffer: Send, Sync, Clone);
