//! Kernels loaded from PTX text, and the launches a CUDA command buffer
//! records (`launch.rs` records and issues them).

use std::ffi::{c_void, CString};
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::AtomicPtr;
use std::sync::Arc;

use cudarc::driver::sys;

use super::driver::{check, Context, Module};
use crate::device::data::buffer::Buffer;
use crate::error::{Error, ErrorKind};

/// A kernel entry point of a loaded PTX module. Cheap to clone; keeps its
/// module loaded.
#[derive(Clone)]
pub struct Kernel {
    inner: Arc<KernelInner>,
}

struct KernelInner {
    function: sys::CUfunction,
    name: String,
    module: Arc<Module>,
}

// SAFETY: function handles may be used from any thread with the context
// current; the module outlives the handle.
unsafe impl Send for KernelInner {}
// SAFETY: as above.
unsafe impl Sync for KernelInner {}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.inner.name)
            .finish()
    }
}

impl Kernel {
    /// Loads `ptx` (PTX text) and finds entry `name`.
    pub(crate) fn load(ctx: &Arc<Context>, ptx: &str, name: &str) -> Result<Kernel, Error> {
        let text = CString::new(ptx)
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, "PTX text contains a NUL byte"))?;
        let cname = CString::new(name).map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("kernel name {name:?} contains a NUL byte"),
            )
        })?;
        let _cur = ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: a NUL-terminated image; out-pointer to a local.
        let r = unsafe { sys::cuModuleLoadData(&mut raw, text.as_ptr().cast()) };
        check(r, "cuModuleLoadData").map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("loading PTX: {}", e.message()),
            )
        })?;
        let module = Arc::new(Module {
            raw,
            ctx: ctx.clone(),
        });
        let mut function = std::ptr::null_mut();
        // SAFETY: a live module; NUL-terminated name; out-pointer.
        let r = unsafe { sys::cuModuleGetFunction(&mut function, module.raw, cname.as_ptr()) };
        check(r, "cuModuleGetFunction").map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("kernel {name:?}: {}", e.message()),
            )
        })?;
        Ok(Kernel {
            inner: Arc::new(KernelInner {
                function,
                name: name.to_string(),
                module,
            }),
        })
    }

    /// The entry point's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The entry point, for the driver.
    pub(crate) fn function(&self) -> sys::CUfunction {
        self.inner.function
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.inner.module.ctx
    }
}

/// One kernel parameter, passed by value as the kernel declares it.
#[derive(Clone, Copy, Debug)]
pub enum KernelArg<'a> {
    /// A buffer's device address (`.param .u64`), plus a byte offset.
    Buffer(&'a Buffer, usize),
    /// The device address (`.param .u64`), plus a byte offset, of the
    /// buffer in slot `slot` of each submission's binding table
    /// ([`Queue::execute_with`](crate::Queue::execute_with)): resolved per
    /// submission, so one recording runs on new buffers every time. The
    /// table's buffer must be at least `offset` bytes long. What a kernel
    /// reads or writes is not known, so, as for
    /// [`Buffer`](KernelArg::Buffer) arguments, nothing checks how kernels
    /// share the buffers: order them with barriers and semaphores.
    Slot(u32, usize),
    /// `.param .u32`.
    U32(u32),
    /// `.param .s32`.
    I32(i32),
    /// `.param .u64`.
    U64(u64),
    /// `.param .f32`.
    F32(f32),
}

/// A recorded launch: the kernel, its shape, and its parameter values,
/// in its recording's arena (with the buffers it uses, held so they
/// outlive the recording).
pub(crate) struct Launch {
    pub(super) kernel: Kernel,
    pub(super) grid: [u32; 3],
    pub(super) block: [u32; 3],
    pub(super) shared_mem: u32,
    /// One pointer per parameter, to its value bytes (at most 8), all in
    /// the arena: what the driver takes.
    pub(super) params: NonNull<[*mut c_void]>,
    /// Owned: dropped with the launch.
    pub(super) buffers: NonNull<[Buffer]>,
    /// Its slot arguments, resolved per submission.
    pub(super) slots: NonNull<[SlotArg]>,
    /// Its node in its recording's graph (null: none), set once when the
    /// graph is built (`end`, the recording's only user then) and read by
    /// submissions after.
    pub(super) node: AtomicPtr<sys::CUgraphNode_st>,
}

/// A slot argument of a launch: parameter `param` is slot `slot`'s
/// address plus `offset`.
#[derive(Clone, Copy)]
pub(crate) struct SlotArg {
    pub(super) param: usize,
    pub(crate) slot: usize,
    pub(crate) offset: usize,
}

/// Most parameters a launch with slot arguments may have: its resolved
/// values are built on the stack at each submission.
pub(crate) const MAX_SLOT_LAUNCH_PARAMS: usize = 64;

impl Drop for Launch {
    fn drop(&mut self) {
        // SAFETY: the buffers were written into the arena for this launch
        // alone, which is dropped once (with its command).
        unsafe { self.buffers.as_ptr().drop_in_place() }
    }
}

impl Launch {
    /// Its slot arguments.
    pub(crate) fn slots(&self) -> &[SlotArg] {
        // SAFETY: written into the arena for this launch, alive while it is.
        unsafe { self.slots.as_ref() }
    }

    /// The buffers its arguments name.
    pub(crate) fn buffers(&self) -> &[Buffer] {
        // SAFETY: written into the arena for this launch, alive while it is.
        unsafe { self.buffers.as_ref() }
    }
}
