//! Recording a kernel launch into a recording's arena, and issuing it: as
//! a node of the recording's graph, or on a stream (one-shot), its slot
//! arguments resolved per submission.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

use cudarc::driver::sys;

use super::driver::check;
use crate::device::data::binding::MAX_SLOTS;
use crate::device::data::table::SlotTable;
use crate::device::recording::Recording;
use crate::error::{Error, ErrorKind};

use super::kernel::{Kernel, KernelArg, Launch, SlotArg, MAX_SLOT_LAUNCH_PARAMS};

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
        let slot_count = args
            .iter()
            .filter(|a| matches!(a, KernelArg::Slot(..)))
            .count();
        if slot_count > 0 && args.len() > MAX_SLOT_LAUNCH_PARAMS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a launch with slot arguments has {} parameters: at most \
                     {MAX_SLOT_LAUNCH_PARAMS}",
                    args.len()
                ),
            ));
        }
        let values = recording.alloc_slice(args.len(), |i| {
            let mut v = [0u8; 8];
            match args[i] {
                KernelArg::Slot(slot, _) if slot as usize >= MAX_SLOTS => {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        format!("kernel argument slot {slot}: slots are 0..{MAX_SLOTS}"),
                    ));
                }
                // Resolved per submission.
                KernelArg::Slot(..) => {}
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
        let mut slot_args = args.iter().enumerate().filter_map(|(param, a)| match a {
            KernelArg::Slot(slot, offset) => Some(SlotArg {
                param,
                slot: *slot as usize,
                offset: *offset,
            }),
            _ => None,
        });
        let slots = recording.alloc_slice(slot_count, |_| match slot_args.next() {
            Some(s) => Ok(s),
            None => unreachable!("counted above"),
        })?;
        Ok(Launch {
            kernel: kernel.clone(),
            grid,
            block,
            shared_mem,
            params,
            buffers,
            slots,
            node: AtomicPtr::new(std::ptr::null_mut()),
        })
    }

    /// Calls `f` with the parameter pointers, the slot arguments resolved
    /// against `table` (on the stack: nothing allocated).
    fn with_params<R>(
        &self,
        table: Option<&SlotTable>,
        f: impl FnOnce(*mut *mut c_void) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let slots = self.slots();
        if slots.is_empty() {
            return f(self.params());
        }
        let table = table.ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                "a launch with slots submitted without a table",
            )
        })?;
        // SAFETY: written into the arena for this launch, alive while it is.
        let params = unsafe { self.params.as_ref() };
        let n = params.len();
        debug_assert!(n <= MAX_SLOT_LAUNCH_PARAMS, "checked at record");
        let mut values = [[0u8; 8]; MAX_SLOT_LAUNCH_PARAMS];
        for (v, p) in values.iter_mut().zip(params) {
            // SAFETY: each parameter pointer is to its 8 value bytes in the
            // arena (`new`).
            *v = unsafe { p.cast::<[u8; 8]>().read() };
        }
        for s in slots {
            let buffer = table.buffer(s.slot).ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    format!(
                        "slot {} missing from the table (checked at execute_with)",
                        s.slot
                    ),
                )
            })?;
            values[s.param] = (buffer.device_ptr()? + s.offset as u64).to_le_bytes();
        }
        let mut ptrs = [std::ptr::null_mut::<c_void>(); MAX_SLOT_LAUNCH_PARAMS];
        for (p, v) in ptrs.iter_mut().zip(values.iter_mut()).take(n) {
            *p = v.as_mut_ptr().cast();
        }
        f(ptrs.as_mut_ptr())
    }

    /// The node's parameters with `params` as its parameter pointers.
    fn node_params(&self, params: *mut *mut c_void) -> sys::CUDA_KERNEL_NODE_PARAMS_v2 {
        sys::CUDA_KERNEL_NODE_PARAMS_v2 {
            func: self.kernel.function(),
            gridDimX: self.grid[0],
            gridDimY: self.grid[1],
            gridDimZ: self.grid[2],
            blockDimX: self.block[0],
            blockDimY: self.block[1],
            blockDimZ: self.block[2],
            sharedMemBytes: self.shared_mem,
            kernelParams: params,
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        }
    }

    /// Sets its node's parameters in `exec` for the next launch, its slot
    /// arguments resolved against `table` (a launch without slots: nothing
    /// to do). The caller launches `exec` next, with no other update of
    /// it in between.
    pub(crate) fn update_node(
        &self,
        exec: sys::CUgraphExec,
        table: Option<&SlotTable>,
    ) -> Result<(), Error> {
        if self.slots().is_empty() {
            return Ok(());
        }
        // Acquire: pairs with the Release store in `add_node`; sees the
        // node the graph was built with.
        let node = self.node.load(Ordering::Acquire);
        if node.is_null() {
            return Err(Error::new(
                ErrorKind::Internal,
                "a launch without its graph node",
            ));
        }
        self.with_params(table, |params| {
            let p = self.node_params(params);
            // SAFETY: a live exec holding `node` (built from this launch's
            // graph); one pointer per parameter, each to its 8 bytes, live
            // for the call (the driver copies them).
            let r = unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, node, &p) };
            check(r, "cuGraphExecKernelNodeSetParams")
        })
    }

    /// The parameter pointers, for the driver (which copies the values).
    fn params(&self) -> *mut *mut c_void {
        self.params.as_ptr().cast()
    }

    /// Launches the kernel on `stream` (a one-shot submission), its slot
    /// arguments resolved against `table`.
    pub(crate) fn launch_on(
        &self,
        stream: sys::CUstream,
        table: Option<&SlotTable>,
    ) -> Result<(), Error> {
        self.with_params(table, |params| self.launch_with(stream, params))
    }

    fn launch_with(&self, stream: sys::CUstream, params: *mut *mut c_void) -> Result<(), Error> {
        // SAFETY: a live function and stream, the context current; one
        // pointer per parameter, each to its 8 bytes, live for the call
        // (the driver copies them).
        let r = unsafe {
            sys::cuLaunchKernel(
                self.kernel.function(),
                self.grid[0],
                self.grid[1],
                self.grid[2],
                self.block[0],
                self.block[1],
                self.block[2],
                self.shared_mem,
                stream,
                params,
                std::ptr::null_mut(),
            )
        };
        check(r, "cuLaunchKernel")
    }

    /// Adds the launch as a kernel node (the driver copies the values; a
    /// slot argument is 0 until a submission sets it) and remembers the
    /// node.
    pub(crate) fn add_node(
        &self,
        graph: sys::CUgraph,
        deps: &[sys::CUgraphNode],
    ) -> Result<sys::CUgraphNode, Error> {
        let params = self.node_params(self.params());
        let mut node = std::ptr::null_mut();
        // SAFETY: a live graph and function; one pointer per parameter,
        // each to the parameter's bytes, live for the call (the driver
        // copies them).
        let r = unsafe {
            sys::cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &params)
        };
        check(r, "cuGraphAddKernelNode")?;
        // Release: pairs with the Acquire load in `update_node`; publishes
        // the node to the submissions, which read it after the recording
        // ended.
        self.node.store(node, Ordering::Release);
        Ok(node)
    }
}
