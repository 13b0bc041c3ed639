//! The CUDA backend when the `cuda` feature is off: `device::cuda` is this
//! file then. It has the types generic device code names (the device, its
//! shared state, memory, handles, launches, graphs), with no values, and
//! the methods generic code calls, which cannot be reached. So every CUDA
//! arm of a generic `match` is compiled and type-checked in both builds,
//! can never run in the CPU-only one, and no generic file carries a `cfg`
//! for the feature (the shape of std's `sys/unsupported` modules).

use crate::device::recording::command::Command;
use crate::device::recording::{Recording, Target};
use crate::device::work::Work;
use crate::device::{Buffer, DeviceBackend, DeviceStats};
use crate::error::Error;
use crate::semaphore::Semaphore;
use crate::task::Priority;

/// A CUDA device (none exists without the feature).
pub(crate) enum CudaDevice {}
/// What a CUDA device's queues, buffers and recordings share.
pub(crate) enum CudaShared {}
/// CUDA device memory.
pub(crate) enum CudaMem {}
/// A counted handle to CUDA device memory.
pub(crate) enum CudaRef {}
/// A recorded kernel launch.
pub(crate) enum CudaLaunch {}
/// A recording's instantiated CUDA graph.
pub(crate) enum CudaGraph {}

/// The paths generic code names them by: the real backend's files
/// (`memory.rs`, `kernel.rs`, `graph.rs`, `shared.rs`), which hold only
/// these types (their work on recordings lives in other files), so that no
/// import circle runs through the backend.
pub(crate) mod memory {
    pub(crate) use super::{CudaMem, CudaRef};
}
/// As above.
pub(crate) mod kernel {
    pub(crate) use super::CudaLaunch as Launch;
}
/// As above.
pub(crate) mod graph {
    pub(crate) use super::CudaGraph;
}
/// As above.
pub(crate) mod shared {
    pub(crate) use super::CudaShared;
}

// As the real graph: its drop frees driver objects.
impl Drop for CudaGraph {
    fn drop(&mut self) {
        match *self {}
    }
}

impl DeviceBackend for CudaDevice {
    fn name(&self) -> &str {
        match *self {}
    }
    fn queue_count(&self) -> usize {
        match *self {}
    }
    fn queue_priority(&self, _index: usize) -> Priority {
        match *self {}
    }
    fn buffer(&self, _len: usize) -> Result<Buffer, Error> {
        match *self {}
    }
    fn alloca(&self, _len: usize, _queue: usize) -> Result<Buffer, Error> {
        match *self {}
    }
    fn owns_transient(&self, _buffer: &Buffer, _queue: usize) -> Result<bool, Error> {
        match *self {}
    }
    fn made(&self, _target: &Target) -> bool {
        match *self {}
    }
    fn submit(
        &self,
        _queue: usize,
        _waits: &[(&Semaphore, u64)],
        _signals: &[(&Semaphore, u64)],
        _work: Work,
    ) -> Result<(), Error> {
        match *self {}
    }
    fn add_stats(&self, _stats: &mut DeviceStats) {
        match *self {}
    }
    fn trace_threads(&self) -> usize {
        match *self {}
    }
    fn tear_down(&mut self) {
        match *self {}
    }
}

impl CudaShared {
    pub(crate) fn owns(&self, _buffer: &Buffer) -> bool {
        match *self {}
    }
    pub(crate) fn graph(&self, _recording: &Recording) -> Result<Option<CudaGraph>, Error> {
        match *self {}
    }
}

impl Clone for CudaRef {
    fn clone(&self) -> CudaRef {
        match *self {}
    }
}

impl std::ops::Deref for CudaRef {
    type Target = CudaMem;
    fn deref(&self) -> &CudaMem {
        match *self {}
    }
}

impl CudaRef {
    pub(crate) fn ptr_eq(a: &CudaRef, _b: &CudaRef) -> bool {
        match *a {}
    }
    pub(crate) fn as_ptr(this: &CudaRef) -> *const CudaMem {
        match *this {}
    }
}

impl CudaMem {
    pub(crate) fn len(&self) -> usize {
        match *self {}
    }
    pub(crate) fn read(&self, _offset: usize, _out: &mut [u8]) -> Result<(), Error> {
        match *self {}
    }
    pub(crate) fn write(&self, _offset: usize, _data: &[u8]) -> Result<(), Error> {
        match *self {}
    }
    pub(crate) fn ptr(&self) -> Result<u64, Error> {
        match *self {}
    }
    pub(crate) fn transient_queue(&self) -> Option<usize> {
        match *self {}
    }
}

/// The CUDA variants of the generic enums, made here for the dead-code
/// lint alone (only the backend makes them; without it nothing can).
#[allow(dead_code, unreachable_code)]
fn variants(
    device: CudaDevice,
    shared: std::sync::Arc<CudaShared>,
    launch: CudaLaunch,
) -> (
    crate::device::DeviceInner,
    crate::device::recording::Target,
    Command,
) {
    (
        crate::device::DeviceInner::Cuda(device),
        crate::device::recording::Target::Cuda(shared),
        Command::Launch(launch),
    )
}

/// A kernel's slot argument.
pub(crate) struct SlotArg {
    pub(crate) slot: usize,
    pub(crate) offset: usize,
}

impl CudaLaunch {
    pub(crate) fn buffers(&self) -> &[Buffer] {
        match *self {}
    }
    pub(crate) fn slots(&self) -> &[SlotArg] {
        match *self {}
    }
}
