//! What the CUDA backend does with a recording. An ended CUDA command
//! buffer becomes one instantiated CUDA graph:
//! commands between barriers are sibling nodes, a barrier makes every node
//! after it depend on every node before it (through one empty node when
//! both sides have several). Each submission is one `cuGraphLaunch`: no
//! re-recording. `update` data is staged, at record time, in pinned host
//! memory from the device's pool, held by the recording (so until every
//! submission of it completed).
//!
//! A one-shot command buffer builds no graph: `issue_direct` issues its
//! commands on the stream one by one.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::sys;

use super::driver::{check, Context, GraphExec};
use crate::device::data::table::SlotTable;
use crate::device::recording::command::Command;
use crate::device::recording::Recording;
use crate::error::{Error, ErrorKind};

use super::graph::CudaGraph;
use super::pinned::PinnedPool;

/// Clears [`CudaGraph::updating`] when dropped.
struct Updating<'a>(&'a AtomicBool);

impl Drop for Updating<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire CAS in `launch_with_table`; our
        // update and launch happen before the next submission's update.
        self.0.store(false, Ordering::Release);
    }
}

impl CudaGraph {
    /// Launches the graph on `stream`, its slot launches' nodes first set
    /// to `table`'s buffers. An update applies to the launches made after
    /// it, so the update and the launch of one submission must not
    /// interleave with another's: two queues issuing one such graph at the
    /// same moment wait for each other (a flag held across a few driver calls, the
    /// only wait on this path; a queue's own issues never meet it). A graph
    /// without slot arguments launches directly.
    pub(crate) fn launch_with_table(
        &self,
        recording: &Recording,
        table: Option<&SlotTable>,
        stream: sys::CUstream,
    ) -> Result<(), Error> {
        let _turn = if recording.has_slots() {
            // Acquire: pairs with the Release store in `Updating::drop`;
            // the previous holder's update and launch happened.
            while self
                .updating
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                std::hint::spin_loop();
            }
            let turn = Updating(&self.updating);
            for command in recording.stages().flat_map(|stage| stage.commands()) {
                if let Command::Launch(launch) = command {
                    launch.update_node(self.exec.raw, table)?;
                }
            }
            Some(turn)
        } else {
            None
        };
        // SAFETY: a live exec (the submission holds its recording) and
        // stream; the context is current.
        let r = unsafe { sys::cuGraphLaunch(self.exec.raw, stream) };
        check(r, "cuGraphLaunch")
    }
}

/// Destroys the graph template (not the exec) when building ends.
struct Template(sys::CUgraph);

impl Drop for Template {
    fn drop(&mut self) {
        // SAFETY: created by `build`, destroyed once; the exec made from
        // it is independent of it.
        let _ = unsafe { sys::cuGraphDestroy(self.0) };
    }
}

/// Builds and instantiates the graph of `recording`'s stages; `None` when
/// there is no command to run. Node lists are kept in the recording's
/// arena (no allocation once warm).
pub(crate) fn build(
    ctx: &Arc<Context>,
    pinned: &Arc<PinnedPool>,
    recording: &Recording,
) -> Result<Option<CudaGraph>, Error> {
    let staged: usize = recording
        .stages()
        .flat_map(|stage| stage.commands())
        .map(|c| match c {
            Command::Update { data, .. } => data.len(),
            _ => 0,
        })
        .sum();
    let staging = if staged > 0 {
        Some(pinned.take(ctx, staged)?)
    } else {
        None
    };
    let _cur = ctx.enter()?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; the context is current.
    check(unsafe { sys::cuGraphCreate(&mut raw, 0) }, "cuGraphCreate")?;
    let template = Template(raw);
    let mut before: &[sys::CUgraphNode] = &[];
    let mut join = [std::ptr::null_mut(); 1];
    let mut staged_at = 0usize;
    let mut nodes = 0usize;
    for stage in recording.stages() {
        let mut deps = before;
        if deps.len() > 1 && stage.len() > 1 {
            // One join node instead of |before| x |stage| edges.
            join[0] = add_empty(template.0, deps)?;
            deps = &join;
        }
        let this_stage = recording.alloc_slice(stage.len(), |_| Ok(std::ptr::null_mut()))?;
        // SAFETY: fresh in the arena, which outlives this call; ours alone.
        let this_stage: &mut [sys::CUgraphNode] = unsafe { &mut *this_stage.as_ptr() };
        let mut added = 0;
        for command in stage.commands() {
            if command.is_empty_op() {
                continue;
            }
            let node = match DeviceOp::of(command)? {
                DeviceOp::HostToDevice { dst, data } => {
                    let Some(st) = staging.as_ref().and_then(|s| s.mem.as_ref()) else {
                        return Err(internal("update without staging"));
                    };
                    // SAFETY: `staged_at + len <= staged <= st.len`, and the
                    // recording owns the block.
                    let src = unsafe { st.ptr.add(staged_at) };
                    // SAFETY: `data.len()` bytes fit at `src` (above).
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), src, data.len()) };
                    staged_at += data.len();
                    add_copy(
                        template.0,
                        deps,
                        Side::Host(src),
                        Side::Device(dst),
                        data.len(),
                        ctx,
                    )?
                }
                DeviceOp::Memset {
                    dst,
                    value,
                    element_size,
                    count,
                } => {
                    let params = sys::CUDA_MEMSET_NODE_PARAMS {
                        dst,
                        pitch: 0,
                        value,
                        elementSize: element_size,
                        width: count,
                        height: 1,
                    };
                    let mut node = std::ptr::null_mut();
                    // SAFETY: a live graph, dependencies are its nodes, the
                    // range was checked at record time.
                    let r = unsafe {
                        sys::cuGraphAddMemsetNode(
                            &mut node,
                            template.0,
                            deps.as_ptr(),
                            deps.len(),
                            &params,
                            ctx.raw,
                        )
                    };
                    check(r, "cuGraphAddMemsetNode")?;
                    node
                }
                DeviceOp::DeviceToDevice { src, dst, len } => add_copy(
                    template.0,
                    deps,
                    Side::Device(src),
                    Side::Device(dst),
                    len,
                    ctx,
                )?,
                DeviceOp::Launch(launch) => launch.add_node(template.0, deps)?,
            };
            nodes += 1;
            this_stage[added] = node;
            added += 1;
        }
        if added > 0 {
            before = &this_stage[..added];
        }
    }
    if nodes == 0 {
        return Ok(None);
    }
    let mut exec = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; a complete graph.
    let r = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, template.0, 0) };
    check(r, "cuGraphInstantiateWithFlags")?;
    Ok(Some(CudaGraph {
        exec: GraphExec {
            raw: exec,
            ctx: ctx.clone(),
        },
        _staging: staging,
        updating: AtomicBool::new(false),
    }))
}

fn internal(what: &'static str) -> Error {
    Error::new(ErrorKind::Internal, what)
}

fn add_empty(graph: sys::CUgraph, deps: &[sys::CUgraphNode]) -> Result<sys::CUgraphNode, Error> {
    let mut node = std::ptr::null_mut();
    // SAFETY: a live graph; dependencies are its nodes.
    let r = unsafe { sys::cuGraphAddEmptyNode(&mut node, graph, deps.as_ptr(), deps.len()) };
    check(r, "cuGraphAddEmptyNode")?;
    Ok(node)
}

enum Side {
    Host(*mut u8),
    Device(sys::CUdeviceptr),
}

/// A 1-D copy node.
fn add_copy(
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    src: Side,
    dst: Side,
    len: usize,
    ctx: &Context,
) -> Result<sys::CUgraphNode, Error> {
    let (src_type, src_host, src_device) = match src {
        Side::Host(p) => (sys::CUmemorytype::CU_MEMORYTYPE_HOST, p as *const c_void, 0),
        Side::Device(d) => (sys::CUmemorytype::CU_MEMORYTYPE_DEVICE, std::ptr::null(), d),
    };
    let (dst_type, dst_host, dst_device) = match dst {
        Side::Host(p) => (sys::CUmemorytype::CU_MEMORYTYPE_HOST, p.cast::<c_void>(), 0),
        Side::Device(d) => (
            sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            std::ptr::null_mut(),
            d,
        ),
    };
    let params = sys::CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: src_type,
        srcHost: src_host,
        srcDevice: src_device,
        srcArray: std::ptr::null_mut(),
        reserved0: std::ptr::null_mut(),
        srcPitch: 0,
        srcHeight: 0,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: dst_type,
        dstHost: dst_host,
        dstDevice: dst_device,
        dstArray: std::ptr::null_mut(),
        reserved1: std::ptr::null_mut(),
        dstPitch: 0,
        dstHeight: 0,
        WidthInBytes: len,
        Height: 1,
        Depth: 1,
    };
    let mut node = std::ptr::null_mut();
    // SAFETY: a live graph; dependencies are its nodes; both ranges were
    // checked at record time (host staging is owned by the recording).
    let r = unsafe {
        sys::cuGraphAddMemcpyNode(
            &mut node,
            graph,
            deps.as_ptr(),
            deps.len(),
            &params,
            ctx.raw,
        )
    };
    check(r, "cuGraphAddMemcpyNode")?;
    Ok(node)
}

/// A command as the device runs it: addresses resolved, the fill's value
/// widened.
enum DeviceOp<'a> {
    Memset {
        dst: sys::CUdeviceptr,
        value: u32,
        element_size: u32,
        count: usize,
    },
    HostToDevice {
        dst: sys::CUdeviceptr,
        data: &'a [u8],
    },
    DeviceToDevice {
        src: sys::CUdeviceptr,
        dst: sys::CUdeviceptr,
        len: usize,
    },
    Launch(&'a super::kernel::Launch),
}

impl<'a> DeviceOp<'a> {
    /// The operation of `command` (a CPU dispatch has none: an error).
    fn of(command: &'a Command) -> Result<DeviceOp<'a>, Error> {
        Ok(match command {
            Command::Fill {
                buffer,
                offset,
                len,
                pattern,
                pattern_len,
            } => DeviceOp::Memset {
                dst: buffer.device_ptr()? + *offset as u64,
                value: match *pattern_len {
                    1 => u32::from(pattern[0]),
                    2 => u32::from(u16::from_le_bytes([pattern[0], pattern[1]])),
                    _ => u32::from_le_bytes(*pattern),
                },
                element_size: *pattern_len as u32,
                count: len / pattern_len,
            },
            Command::Update {
                buffer,
                offset,
                data,
            } => DeviceOp::HostToDevice {
                dst: buffer.device_ptr()? + *offset as u64,
                data: Command::update_data(data),
            },
            Command::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                len,
            } => DeviceOp::DeviceToDevice {
                src: src.device_ptr()? + *src_offset as u64,
                dst: dst.device_ptr()? + *dst_offset as u64,
                len: *len,
            },
            Command::Launch(launch) => DeviceOp::Launch(launch),
            Command::Dispatch { .. } | Command::Spirv(_) => {
                return Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    "a CPU or Vulkan dispatch cannot run on a CUDA device",
                ))
            }
        })
    }
}

/// Issues `recording`'s commands on `stream` one by one, in order (a
/// one-shot command buffer: no graph), kernel slot arguments resolved
/// against `table`. The stream runs them in order, so every barrier
/// holds. `update` bytes are copied from the recording's arena, which the
/// submission holds until the stream is past them.
pub(crate) fn issue_direct(
    recording: &Recording,
    table: Option<&SlotTable>,
    stream: sys::CUstream,
) -> Result<(), Error> {
    for command in recording.stages().flat_map(|stage| stage.commands()) {
        if command.is_empty_op() {
            continue;
        }
        let (result, call) = match DeviceOp::of(command)? {
            DeviceOp::Memset {
                dst,
                value,
                element_size,
                count,
            } => match element_size {
                1 => (
                    // SAFETY: a live stream, the context current; the range
                    // was checked at record time and the submission holds
                    // the buffer.
                    unsafe { sys::cuMemsetD8Async(dst, value as u8, count, stream) },
                    "cuMemsetD8Async",
                ),
                2 => (
                    // SAFETY: a live stream, the context current; the range
                    // was checked at record time and the submission holds
                    // the buffer.
                    unsafe { sys::cuMemsetD16Async(dst, value as u16, count, stream) },
                    "cuMemsetD16Async",
                ),
                _ => (
                    // SAFETY: a live stream, the context current; the range
                    // was checked at record time and the submission holds
                    // the buffer.
                    unsafe { sys::cuMemsetD32Async(dst, value, count, stream) },
                    "cuMemsetD32Async",
                ),
            },
            DeviceOp::HostToDevice { dst, data } => (
                // SAFETY: a live stream, the context current; the range was
                // checked at record time and the submission holds the buffer
                // and the recording (whose arena has the update bytes).
                unsafe { sys::cuMemcpyHtoDAsync_v2(dst, data.as_ptr().cast(), data.len(), stream) },
                "cuMemcpyHtoDAsync",
            ),
            DeviceOp::DeviceToDevice { src, dst, len } => (
                // SAFETY: a live stream, the context current; both ranges
                // were checked at record time and the submission holds both
                // buffers.
                unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream) },
                "cuMemcpyDtoDAsync",
            ),
            DeviceOp::Launch(launch) => {
                launch.launch_on(stream, table)?;
                continue;
            }
        };
        check(result, call)?;
    }
    Ok(())
}
