//! `Buffer`: device memory; for the CPU device, host memory.

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
    pub(crate) bytes: Arc<[AtomicU8]>,
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
            bytes: (0..len).map(|_| AtomicU8::new(0)).collect(),
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Never true: a buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Copies `out.len()` bytes starting at `offset` into `out`.
    ///
    /// Errors: `OutOfRange` if the range does not fit in the buffer.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        let range = self.range(offset, out.len())?;
        for (o, b) in out.iter_mut().zip(&self.bytes[range]) {
            *o = b.load(Ordering::Relaxed);
        }
        Ok(())
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
        Arc::ptr_eq(&self.bytes, &other.bytes)
    }

    pub(crate) fn write(&self, offset: usize, data: &[u8]) {
        for (b, d) in self.bytes[offset..offset + data.len()].iter().zip(data) {
            b.store(*d, Ordering::Relaxed);
        }
    }

    pub(crate) fn fill(&self, offset: usize, len: usize, pattern: &[u8]) {
        for (i, b) in self.bytes[offset..offset + len].iter().enumerate() {
            b.store(pattern[i % pattern.len()], Ordering::Relaxed);
        }
    }

    pub(crate) fn copy_to(&self, src_offset: usize, dst: &Buffer, dst_offset: usize, len: usize) {
        let src = &self.bytes[src_offset..src_offset + len];
        let dst = &dst.bytes[dst_offset..dst_offset + len];
        for (s, d) in src.iter().zip(dst) {
            d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

static_assertions::assert_impl_all!(Buffer: Send, Sync, Clone);
