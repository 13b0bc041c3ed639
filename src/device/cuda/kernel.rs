//! Kernels loaded from PTX text, and kernel launches recorded into a CUDA
//! command buffer.

use std::ffi::{c_void, CString};
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys;

use super::driver::{check, Context, Module};
use crate::device::Buffer;
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
        check(
            unsafe { sys::cuModuleLoadData(&mut raw, text.as_ptr().cast()) },
            "cuModuleLoadData",
        )
        .map_err(|e| {
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
        check(
            unsafe { sys::cuModuleGetFunction(&mut function, module.raw, cname.as_ptr()) },
            "cuModuleGetFunction",
        )
        .map_err(|e| {
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

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.inner.module.ctx
    }
}

/// One kernel parameter, passed by value as the kernel declares it.
#[derive(Clone, Copy, Debug)]
pub enum KernelArg<'a> {
    /// A buffer's device address (`.param .u64`), plus a byte offset.
    Buffer(&'a Buffer, usize),
    /// `.param .u32`.
    U32(u32),
    /// `.param .s32`.
    I32(i32),
    /// `.param .u64`.
    U64(u64),
    /// `.param .f32`.
    F32(f32),
}

/// A recorded launch: the kernel, its shape, and its parameter values
/// (buffers held so they outlive the recording).
pub(crate) struct Launch {
    kernel: Kernel,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    /// Each parameter's value bytes (at most 8).
    values: Box<[[u8; 8]]>,
    _buffers: Box<[Buffer]>,
}

impl Launch {
    pub(crate) fn new(
        kernel: &Kernel,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        args: &[KernelArg<'_>],
    ) -> Result<Launch, Error> {
        if grid.contains(&0) || block.contains(&0) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("launch grid {grid:?} block {block:?}: every dimension must be at least 1"),
            ));
        }
        let mut values = Vec::with_capacity(args.len());
        let mut buffers = Vec::new();
        for arg in args {
            let mut v = [0u8; 8];
            match *arg {
                KernelArg::Buffer(b, offset) => {
                    b.range(offset, 0)?;
                    if !b.on_context(kernel.context()) {
                        return Err(Error::new(
                            ErrorKind::InvalidArgument,
                            "kernel argument: the buffer belongs to another device",
                        ));
                    }
                    v = (b.device_ptr()? + offset as u64).to_le_bytes();
                    buffers.push(b.clone());
                }
                KernelArg::U32(x) => v[..4].copy_from_slice(&x.to_le_bytes()),
                KernelArg::I32(x) => v[..4].copy_from_slice(&x.to_le_bytes()),
                KernelArg::U64(x) => v = x.to_le_bytes(),
                KernelArg::F32(x) => v[..4].copy_from_slice(&x.to_le_bytes()),
            }
            values.push(v);
        }
        Ok(Launch {
            kernel: kernel.clone(),
            grid,
            block,
            shared_mem,
            values: values.into_boxed_slice(),
            _buffers: buffers.into_boxed_slice(),
        })
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        self.kernel.context()
    }

    /// Adds the launch as a kernel node (the driver copies the values).
    pub(crate) fn add_node(
        &self,
        graph: sys::CUgraph,
        deps: &[sys::CUgraphNode],
    ) -> Result<sys::CUgraphNode, Error> {
        let mut pointers: Vec<*mut c_void> = self
            .values
            .iter()
            .map(|v| v.as_ptr().cast_mut().cast())
            .collect();
        let params = sys::CUDA_KERNEL_NODE_PARAMS_v2 {
            func: self.kernel.inner.function,
            gridDimX: self.grid[0],
            gridDimY: self.grid[1],
            gridDimZ: self.grid[2],
            blockDimX: self.block[0],
            blockDimY: self.block[1],
            blockDimZ: self.block[2],
            sharedMemBytes: self.shared_mem,
            kernelParams: pointers.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        let mut node = std::ptr::null_mut();
        // SAFETY: a live graph and function; one pointer per parameter,
        // each to the parameter's bytes, live for the call (the driver
        // copies them).
        check(
            unsafe {
                sys::cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &params)
            },
            "cuGraphAddKernelNode",
        )?;
        Ok(node)
    }
}
