//! Kernels loaded from PTX text, and kernel launches recorded into a CUDA
//! command buffer.

use std::ffi::{c_void, CString};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::sys;

use super::driver::{check, Context, Module};
use crate::device::recording::Recording;
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

/// A recorded launch: the kernel, its shape, and its parameter values,
/// in its recording's arena (with the buffers it uses, held so they
/// outlive the recording).
pub(crate) struct Launch {
    kernel: Kernel,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    /// One pointer per parameter, to its value bytes (at most 8), all in
    /// the arena: what the driver takes.
    params: NonNull<[*mut c_void]>,
    /// Owned: dropped with the launch.
    buffers: NonNull<[Buffer]>,
}

impl Drop for Launch {
    fn drop(&mut self) {
        // SAFETY: the buffers were written into the arena for this launch
        // alone, which is dropped once (with its command).
        unsafe { self.buffers.as_ptr().drop_in_place() }
    }
}

impl Launch {
    /// Checks the launch and stores its parameters in `recording`'s
    /// arena.
    pub(crate) fn new(
        recording: &Recording,
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
        let values = recording.alloc_slice(args.len(), |i| {
            let mut v = [0u8; 8];
            match args[i] {
                KernelArg::Buffer(b, offset) => {
                    b.range(offset, 0)?;
                    if !b.on_context(kernel.context()) {
                        return Err(Error::new(
                            ErrorKind::InvalidArgument,
                            "kernel argument: the buffer belongs to another device",
                        ));
                    }
                    v = (b.device_ptr()? + offset as u64).to_le_bytes();
                }
                KernelArg::U32(x) => v[..4].copy_from_slice(&x.to_le_bytes()),
                KernelArg::I32(x) => v[..4].copy_from_slice(&x.to_le_bytes()),
                KernelArg::U64(x) => v = x.to_le_bytes(),
                KernelArg::F32(x) => v[..4].copy_from_slice(&x.to_le_bytes()),
            }
            Ok(v)
        })?;
        let first = values.cast::<[u8; 8]>();
        let params = recording.alloc_slice(args.len(), |i| {
            // SAFETY: `i` is below the values' length.
            Ok(unsafe { first.as_ptr().add(i) }.cast::<c_void>())
        })?;
        let mut buffer_args = args.iter().filter_map(|a| match a {
            KernelArg::Buffer(b, _) => Some(*b),
            _ => None,
        });
        let count = buffer_args.clone().count();
        let buffers = recording.alloc_slice(count, |_| match buffer_args.next() {
            Some(b) => Ok(b.clone()),
            None => unreachable!("counted above"),
        })?;
        Ok(Launch {
            kernel: kernel.clone(),
            grid,
            block,
            shared_mem,
            params,
            buffers,
        })
    }

    /// The buffers its arguments name.
    pub(crate) fn buffers(&self) -> &[Buffer] {
        // SAFETY: written into the arena for this launch, alive while it is.
        unsafe { self.buffers.as_ref() }
    }

    /// The parameter pointers, for the driver (which copies the values).
    fn params(&self) -> *mut *mut c_void {
        self.params.as_ptr().cast()
    }

    /// Launches the kernel on `stream` (a one-shot submission).
    pub(crate) fn launch_on(&self, stream: sys::CUstream) -> Result<(), Error> {
        // SAFETY: a live function and stream, the context current; one
        // pointer per parameter, each to its bytes in the arena, live for
        // the call (the driver copies them).
        check(
            unsafe {
                sys::cuLaunchKernel(
                    self.kernel.inner.function,
                    self.grid[0],
                    self.grid[1],
                    self.grid[2],
                    self.block[0],
                    self.block[1],
                    self.block[2],
                    self.shared_mem,
                    stream,
                    self.params(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
        )
    }

    /// Adds the launch as a kernel node (the driver copies the values).
    pub(crate) fn add_node(
        &self,
        graph: sys::CUgraph,
        deps: &[sys::CUgraphNode],
    ) -> Result<sys::CUgraphNode, Error> {
        let params = sys::CUDA_KERNEL_NODE_PARAMS_v2 {
            func: self.kernel.inner.function,
            gridDimX: self.grid[0],
            gridDimY: self.grid[1],
            gridDimZ: self.grid[2],
            blockDimX: self.block[0],
            blockDimY: self.block[1],
            blockDimZ: self.block[2],
            sharedMemBytes: self.shared_mem,
            kernelParams: self.params(),
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
