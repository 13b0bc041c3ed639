//! The device layer's one door to the CUDA backend.
//!
//! Generic device code (the device, its queues, buffers, command buffers,
//! recordings, binding tables, statistics) names CUDA only through the
//! types here and calls only their methods. With the `cuda` feature they
//! are the backend's own (`cuda/seam.rs` implements what generic code
//! calls); without it they are types with no values, so every CUDA arm of
//! a generic `match` is compiled and type-checked in both builds, can
//! never run in the CPU-only one, and no generic file carries a `cfg` for
//! the feature. (The same shape as std's `sys/unsupported` modules.)

#[cfg(feature = "cuda")]
pub(crate) use super::cuda::driver::DeviceMem as CudaMem;
#[cfg(feature = "cuda")]
pub(crate) use super::cuda::graph::CudaGraph;
#[cfg(feature = "cuda")]
pub(crate) use super::cuda::mem_ref::CudaRef;
#[cfg(feature = "cuda")]
pub(crate) use super::cuda::{CudaDevice, CudaShared, Launch as CudaLaunch};

#[cfg(not(feature = "cuda"))]
pub(crate) use absent::{CudaDevice, CudaGraph, CudaLaunch, CudaMem, CudaRef, CudaShared};

/// Marks an item of a generic device file that only the CUDA backend
/// uses (an arena helper, a table lookup): without the feature nothing
/// calls it, and it is not reported as dead code.
macro_rules! used_by_cuda {
    ($item:item) => {
        #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
        $item
    };
}
pub(crate) use used_by_cuda;

/// The CUDA backend when the feature is off: the types generic code names,
/// with no values, and the methods it calls, which cannot be reached.
#[cfg(not(feature = "cuda"))]
mod absent {
    use crate::device::command::Command;
    use crate::device::recording::Recording;
    use crate::device::stats::DeviceStats;
    use crate::device::work::Work;
    use crate::device::Buffer;
    use crate::error::Error;
    use crate::semaphore::Semaphore;

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

    // As the real graph: its drop frees driver objects.
    impl Drop for CudaGraph {
        fn drop(&mut self) {
            match *self {}
        }
    }

    impl CudaDevice {
        pub(crate) fn queue_count(&self) -> usize {
            match *self {}
        }
        pub(crate) fn queue_priority(&self, _index: usize) -> crate::task::Priority {
            match *self {}
        }
        pub(crate) fn name(&self) -> &str {
            match *self {}
        }
        pub(crate) fn events_created(&self) -> usize {
            match *self {}
        }
        pub(crate) fn device_waits_issued(&self) -> u64 {
            match *self {}
        }
        pub(crate) fn buffer(&self, _len: usize) -> Result<Buffer, Error> {
            match *self {}
        }
        pub(crate) fn alloca(&self, _len: usize, _queue: usize) -> Result<Buffer, Error> {
            match *self {}
        }
        pub(crate) fn submit(
            &self,
            _queue: usize,
            _waits: &[(&Semaphore, u64)],
            _signals: &[(&Semaphore, u64)],
            _work: Work,
        ) -> Result<(), Error> {
            match *self {}
        }
        pub(crate) fn is(&self, _shared: &CudaShared) -> bool {
            match *self {}
        }
        pub(crate) fn check_transient_use(
            &self,
            _buffer: &Buffer,
            _queue: usize,
            _recorded: bool,
        ) -> Result<(), Error> {
            match *self {}
        }
        pub(crate) fn owns_transient(
            &self,
            _buffer: &Buffer,
            _queue: usize,
        ) -> Result<bool, Error> {
            match *self {}
        }
        pub(crate) fn add_stats(&self, _stats: &mut DeviceStats) {
            match *self {}
        }
        pub(crate) fn tear_down(&mut self) {
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
}
