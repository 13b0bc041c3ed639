//! `Buffer`: device memory; for the CPU device, host memory; for the CUDA
//! device, `cuMemAlloc` memory.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::error::{Error, ErrorKind};

/// A buffer of device memory. Cheap to clone (a handle); `Send + Sync`.
///
/// Command buffers write it on the device's queues; [`read`](Self::read)
/// copies it out. Bytes are stored as relaxed atomics, so a read that races
/// with a write is not undefined behaviour (it sees old or new bytes); order
/// them with semaphores to see a submission's result.
#[derive(Clone)]
pub struct Buffer {
    mem: Mem,
}

#[derive(Clone)]
enum Mem {
    Host(Arc<[AtomicU8]>),
    #[cfg(feature = "cuda")]
    Cuda(Arc<super::cuda::driver::DeviceMem>),
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer").field("len", &self.len()).finish()
    }
}

impl Buffer {
    pub(crate) fn new(len: usize) -> Result<Buffer, Error> {
        if len == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "buffer length 0: must be at least 1",
            ));
        }
        Ok(Buffer {
            mem: Mem::Host((0..len).map(|_| AtomicU8::new(0)).collect()),
        })
    }

    /// A zeroed buffer of device memory.
    #[cfg(feature = "cuda")]
    pub(crate) fn new_cuda(
        ctx: &Arc<super::cuda::driver::Context>,
        len: usize,
    ) -> Result<Buffer, Error> {
        if len == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "buffer length 0: must be at least 1",
            ));
        }
        let mem = super::cuda::driver::DeviceMem::zeroed(ctx, len)?;
        Ok(Buffer {
            mem: Mem::Cuda(Arc::new(mem)),
        })
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
            Mem::Host(b) => b.len(),
            #[cfg(feature = "cuda")]
            Mem::Cuda(m) => m.len,
        }
    }

    /// Never true: a buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `out.len()` bytes starting at `offset` into `out` (for a
    /// CUDA buffer, a synchronous device-to-host copy).
    ///
    /// # Errors
    ///
    /// - [`OutOfRange`](ErrorKind::OutOfRange) if
    ///   `offset..offset + out.len()` does not fit in the buffer.
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
            Mem::Host(bytes) => {
                for (o, b) in out.iter_mut().zip(&bytes[range]) {
                    *o = b.load(Ordering::Relaxed);
                }
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Mem::Cuda(m) => m.read(offset, out),
        }
    }

    /// Host bytes of a CPU-device buffer (`None` for device memory).
    pub(crate) fn host(&self) -> Option<&[AtomicU8]> {
        match &self.mem {
            Mem::Host(b) => Some(b),
            #[cfg(feature = "cuda")]
            Mem::Cuda(_) => None,
        }
    }

    /// The device address of a CUDA buffer.
    #[cfg(feature = "cuda")]
    pub(crate) fn device_ptr(&self) -> Result<u64, Error> {
        match &self.mem {
            Mem::Cuda(m) => Ok(m.ptr),
            Mem::Host(_) => Err(Error::new(
                ErrorKind::InvalidArgument,
                "a CPU-device buffer used in CUDA work",
            )),
        }
    }

    /// Whether this is device memory of context `ctx`.
    #[cfg(feature = "cuda")]
    pub(crate) fn on_context(&self, ctx: &Arc<super::cuda::driver::Context>) -> bool {
        matches!(&self.mem, Mem::Cuda(m) if Arc::ptr_eq(&m.ctx, ctx))
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
            (Mem::Host(a), Mem::Host(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "cuda")]
            (Mem::Cuda(a), Mem::Cuda(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "cuda")]
            _ => false,
        }
    }

    fn host_bytes(&self) -> Result<&[AtomicU8], Error> {
        self.host()
            .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "a CUDA buffer used in CPU work"))
    }

    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        for (b, d) in self.host_bytes()?[offset..offset + data.len()]
            .iter()
            .zip(data)
        {
            b.store(*d, Ordering::Relaxed);
        }
        Ok(())
    }

    pub(crate) fn fill(&self, offset: usize, len: usize, pattern: &[u8]) -> Result<(), Error> {
        for (i, b) in self.host_bytes()?[offset..offset + len].iter().enumerate() {
            b.store(pattern[i % pattern.len()], Ordering::Relaxed);
        }
        Ok(())
    }

    pub(crate) fn copy_to(
        &self,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), Error> {
        let src = &self.host_bytes()?[src_offset..src_offset + len];
        let dst = &dst.host_bytes()?[dst_offset..dst_offset + len];
        for (s, d) in src.iter().zip(dst) {
            d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        Ok(())
    }
}

static_assertions::assert_impl_all!(Buffer: Send, Sync, Clone);
