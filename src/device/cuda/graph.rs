//! An ended CUDA command buffer becomes one instantiated CUDA graph:
//! commands between barriers are sibling nodes, a barrier makes every node
//! after it depend on every node before it (through one empty node when
//! both sides have several). Each submission is one `cuGraphLaunch`: no
//! re-recording. `update` data is staged, at record time, in pinned host
//! memory from the device's pool, held by the recording (so until every
//! submission of it completed).

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use super::driver::{check, Context, GraphExec, PinnedMem};
use crate::device::command_buffer::Command;
use crate::error::{Error, ErrorKind};

/// Pinned staging blocks, by power-of-two size, reused across recordings.
#[derive(Default)]
pub(crate) struct PinnedPool {
    free: Mutex<Vec<PinnedMem>>,
}

impl PinnedPool {
    fn take(self: &Arc<Self>, ctx: &Arc<Context>, len: usize) -> Result<Staging, Error> {
        let size = len.next_power_of_two().max(256);
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            free.iter()
                .position(|m| m.len == size)
                .map(|i| free.swap_remove(i))
        };
        let mem = match reused {
            Some(m) => m,
            None => PinnedMem::new(ctx, size)?,
        };
        Ok(Staging {
            mem: Some(mem),
            pool: self.clone(),
        })
    }
}

/// A pinned block lent to one recording; back to the pool on drop.
pub(crate) struct Staging {
    mem: Option<PinnedMem>,
    pool: Arc<PinnedPool>,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(m) = self.mem.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(m);
        }
    }
}

/// A recording's graph, ready to launch.
pub(crate) struct CudaGraph {
    pub(crate) exec: GraphExec,
    /// Staged `update` bytes the graph's copies read.
    _staging: Option<Staging>,
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

/// Builds and instantiates the graph of `stages`; `None` when there is no
/// command to run.
pub(crate) fn build(
    ctx: &Arc<Context>,
    pinned: &Arc<PinnedPool>,
    stages: &[Vec<Command>],
) -> Result<Option<CudaGraph>, Error> {
    let staged: usize = stages
        .iter()
        .flatten()
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
    let mut before: Vec<sys::CUgraphNode> = Vec::new();
    let mut staged_at = 0usize;
    let mut nodes = 0usize;
    for stage in stages {
        let mut deps = before.clone();
        if deps.len() > 1 && stage.len() > 1 {
            // One join node instead of |before| x |stage| edges.
            deps = vec![add_empty(template.0, &deps)?];
        }
        let mut this_stage = Vec::with_capacity(stage.len());
        for command in stage {
            if command.is_empty_op() {
                continue;
            }
            let node = match command {
                Command::Update {
                    buffer,
                    offset,
                    data,
                } => {
                    let Some(st) = staging.as_ref().and_then(|s| s.mem.as_ref()) else {
                        return Err(internal("update without staging"));
                    };
                    // SAFETY: `staged_at + len <= staged <= st.len`, and the
                    // recording owns the block.
                    let src = unsafe { st.ptr.add(staged_at) };
                    // SAFETY: `data.len()` bytes fit at `src` (above).
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), src, data.len()) };
                    staged_at += data.len();
                    let dst = buffer.device_ptr()? + *offset as u64;
                    add_copy(
                        template.0,
                        &deps,
                        Side::Host(src),
                        Side::Device(dst),
                        data.len(),
                        ctx,
                    )?
                }
                Command::Fill {
                    buffer,
                    offset,
                    len,
                    pattern,
                    pattern_len,
                } => {
                    let value = match *pattern_len {
                        1 => u32::from(pattern[0]),
                        2 => u32::from(u16::from_le_bytes([pattern[0], pattern[1]])),
                        _ => u32::from_le_bytes(*pattern),
                    };
                    let params = sys::CUDA_MEMSET_NODE_PARAMS {
                        dst: buffer.device_ptr()? + *offset as u64,
                        pitch: 0,
                        value,
                        elementSize: *pattern_len as u32,
                        width: len / pattern_len,
                        height: 1,
                    };
                    let mut node = std::ptr::null_mut();
                    // SAFETY: a live graph, dependencies are its nodes, the
                    // range was checked at record time.
                    check(
                        unsafe {
                            sys::cuGraphAddMemsetNode(
                                &mut node,
                                template.0,
                                deps.as_ptr(),
                                deps.len(),
                                &params,
                                ctx.raw,
                            )
                        },
                        "cuGraphAddMemsetNode",
                    )?;
                    node
                }
                Command::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    len,
                } => {
                    let s = src.device_ptr()? + *src_offset as u64;
                    let d = dst.device_ptr()? + *dst_offset as u64;
                    add_copy(
                        template.0,
                        &deps,
                        Side::Device(s),
                        Side::Device(d),
                        *len,
                        ctx,
                    )?
                }
                Command::Launch(launch) => launch.add_node(template.0, &deps)?,
                Command::Dispatch { .. } => {
                    return Err(Error::new(
                        ErrorKind::FailedPrecondition,
                        "a CPU dispatch cannot run on a CUDA device",
                    ))
                }
            };
            nodes += 1;
            this_stage.push(node);
        }
        if !this_stage.is_empty() {
            before = this_stage;
        }
    }
    if nodes == 0 {
        return Ok(None);
    }
    let mut exec = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; a complete graph.
    check(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, template.0, 0) },
        "cuGraphInstantiateWithFlags",
    )?;
    Ok(Some(CudaGraph {
        exec: GraphExec {
            raw: exec,
            ctx: ctx.clone(),
        },
        _staging: staging,
    }))
}

fn internal(what: &'static str) -> Error {
    Error::new(ErrorKind::Internal, what)
}

fn add_empty(graph: sys::CUgraph, deps: &[sys::CUgraphNode]) -> Result<sys::CUgraphNode, Error> {
    let mut node = std::ptr::null_mut();
    // SAFETY: a live graph; dependencies are its nodes.
    check(
        unsafe { sys::cuGraphAddEmptyNode(&mut node, graph, deps.as_ptr(), deps.len()) },
        "cuGraphAddEmptyNode",
    )?;
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
    check(
        unsafe {
            sys::cuGraphAddMemcpyNode(
                &mut node,
                graph,
                deps.as_ptr(),
                deps.len(),
                &params,
                ctx.raw,
            )
        },
        "cuGraphAddMemcpyNode",
    )?;
    Ok(node)
}
