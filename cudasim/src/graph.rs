//! Graphs of empty, memset, 1-D memcpy and kernel nodes, their executable
//! snapshots, and launches.
//!
//! A node's dependencies must already be nodes of its graph, so insertion
//! order is a topological order: an executable graph simply runs its nodes
//! in that order on the launching stream's thread.

use crate::context::require_context;
use crate::memory::{check_not_freed, Copy1D, Fill, Place, Uses};
use crate::misuse::lock;
use crate::module::KernelCall;
use crate::state::{handle, id_of, state};
use crate::stream::stream;
use crate::{api, Out, SimResult};
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::CUmemorytype_enum::{
    self, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_UNIFIED,
};
use cudarc::driver::sys::{
    CUcontext, CUgraph, CUgraphExec, CUgraphNode, CUresult, CUstream, CUDA_KERNEL_NODE_PARAMS,
    CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS,
};
use std::ffi::{c_uint, c_ulonglong};
use std::ptr::addr_of;
use std::sync::{Arc, Mutex};

/// What a node does when its graph runs.
pub(crate) enum Node {
    Empty,
    Fill(Fill),
    Copy(Copy1D),
    Kernel(KernelCall),
}

impl Node {
    fn run(&self, call: &str) -> SimResult {
        match self {
            Node::Empty => Ok(()),
            Node::Fill(fill) => fill.run(call),
            // SAFETY: host sides of a memcpy node must stay valid while the
            // graph can run (the contract of cuGraphAddMemcpyNode's caller).
            Node::Copy(copy) => unsafe { copy.run(call) },
            Node::Kernel(k) => k.run(call),
        }
    }

    /// The device addresses it names (for [`Uses::take`]).
    fn addrs(&self) -> Vec<u64> {
        match self {
            Node::Empty => Vec::new(),
            Node::Fill(fill) => vec![fill.dst],
            Node::Copy(copy) => copy.device_addrs().collect(),
            Node::Kernel(k) => k.addrs().collect(),
        }
    }
}

/// A graph under construction: node ids and nodes in insertion order.
pub(crate) struct Graph {
    nodes: Vec<(u64, Arc<Node>)>,
}

/// An instantiated graph: a snapshot of its graph's nodes (by the graph's
/// node ids, which `cuGraphExecKernelNodeSetParams_v2` names).
pub(crate) struct Exec {
    nodes: Mutex<Vec<(u64, Arc<Node>)>>,
    /// Held while a launch runs, so launches on different streams never overlap.
    running: Mutex<()>,
}

/// Appends `node` to the graph after checking its dependencies.
///
/// # Safety
/// `deps` must be null or point to `n_deps` node handles.
unsafe fn add_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n_deps: usize,
    call: &str,
    node: impl FnOnce() -> SimResult<Node>,
) -> SimResult {
    let out = Out::new(out, call, "phGraphNode")?;
    let deps = match n_deps {
        0 => &[][..],
        _ if deps.is_null() => {
            return fail!(
                CUDA_ERROR_INVALID_VALUE,
                "{call}: dependencies is null, count {n_deps}"
            );
        }
        // SAFETY: non-null and holding `n_deps` handles by this fn's contract.
        n => unsafe { std::slice::from_raw_parts(deps, n) },
    };
    let node = Arc::new(node()?);
    let gid = id_of(graph);
    let mut st = state();
    let g = st.graphs.get_mut(gid, call)?;
    if let Some(d) = deps
        .iter()
        .find(|d| !g.nodes.iter().any(|(id, _)| *id == id_of(**d)))
    {
        let d = id_of(*d);
        return fail!(
            CUDA_ERROR_INVALID_VALUE,
            "{call}: dependency {d:#x} is not a node of graph {gid:#x}"
        );
    }
    let id = crate::state::new_id();
    g.nodes.push((id, node));
    // SAFETY: `out` is writable (contract of the exported caller).
    unsafe { out.write(handle(id)) };
    Ok(())
}

/// Creates an empty graph.
///
/// # Safety
/// `phGraph` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuGraphCreate(phGraph: *mut CUgraph, _flags: c_uint) -> CUresult {
    api("cuGraphCreate", || {
        let out = Out::new(phGraph, "cuGraphCreate", "phGraph")?;
        require_context("cuGraphCreate")?;
        let id = state().graphs.insert(Graph { nodes: Vec::new() });
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(handle(id)) };
        Ok(())
    })
}

/// Destroys a graph and its nodes (executable graphs made from it live on).
#[no_mangle]
pub extern "C" fn cuGraphDestroy(hGraph: CUgraph) -> CUresult {
    api("cuGraphDestroy", || {
        state()
            .graphs
            .remove(id_of(hGraph), "cuGraphDestroy")
            .map(drop)
    })
}

/// Adds a node that does nothing.
///
/// # Safety
/// `phGraphNode` must be null or valid for a write; `dependencies` must be
/// null or point to `numDependencies` handles.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEmptyNode(
    phGraphNode: *mut CUgraphNode,
    hGraph: CUgraph,
    dependencies: *const CUgraphNode,
    numDependencies: usize,
) -> CUresult {
    const CALL: &str = "cuGraphAddEmptyNode";
    // SAFETY: forwarded from this fn's contract.
    api(CALL, || unsafe {
        add_node(
            phGraphNode,
            hGraph,
            dependencies,
            numDependencies,
            CALL,
            || Ok(Node::Empty),
        )
    })
}

/// Adds a memset node (`elementSize` 1, 2 or 4; `width` in elements).
///
/// # Safety
/// As [`cuGraphAddEmptyNode`]; `memsetParams` must be null or valid for a read.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemsetNode(
    phGraphNode: *mut CUgraphNode,
    hGraph: CUgraph,
    dependencies: *const CUgraphNode,
    numDependencies: usize,
    memsetParams: *const CUDA_MEMSET_NODE_PARAMS,
    _ctx: CUcontext,
) -> CUresult {
    const CALL: &str = "cuGraphAddMemsetNode";
    let node = || {
        if memsetParams.is_null() {
            return fail!(CUDA_ERROR_INVALID_VALUE, "{CALL}: memsetParams is null");
        }
        // SAFETY: non-null and readable by this fn's contract.
        let p = unsafe { memsetParams.read() };
        let fill = Fill {
            dst: p.dst,
            value: p.value,
            elem: p.elementSize as usize,
            width: p.width,
            height: p.height,
            pitch: p.pitch,
        };
        fill.validate(CALL)?;
        Ok(Node::Fill(fill))
    };
    // SAFETY: forwarded from this fn's contract.
    api(CALL, || unsafe {
        add_node(
            phGraphNode,
            hGraph,
            dependencies,
            numDependencies,
            CALL,
            node,
        )
    })
}

/// Adds a 1-D memcpy node: `Height` and `Depth` 1, Y and Z offsets 0, host or
/// device memory on each side; anything else is `CUDA_ERROR_NOT_SUPPORTED`.
///
/// # Safety
/// As [`cuGraphAddEmptyNode`]; `copyParams` must be null or valid for a read,
/// and its host sides must stay valid for `WidthInBytes` bytes while an
/// executable graph made from this one can run.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemcpyNode(
    phGraphNode: *mut CUgraphNode,
    hGraph: CUgraph,
    dependencies: *const CUgraphNode,
    numDependencies: usize,
    copyParams: *const CUDA_MEMCPY3D,
    _ctx: CUcontext,
) -> CUresult {
    const CALL: &str = "cuGraphAddMemcpyNode";
    let node = || {
        if copyParams.is_null() {
            return fail!(CUDA_ERROR_INVALID_VALUE, "{CALL}: copyParams is null");
        }
        // The memory types are read as u32 first: a value outside the
        // `repr(u32)` enum is reported instead of becoming an invalid enum.
        // SAFETY: non-null and readable by this fn's contract.
        let types = unsafe {
            let c = copyParams;
            [addr_of!((*c).srcMemoryType), addr_of!((*c).dstMemoryType)]
                .map(|t| t.cast::<u32>().read())
        };
        let known = CU_MEMORYTYPE_HOST as u32..=CU_MEMORYTYPE_UNIFIED as u32;
        if !types.iter().all(|t| known.contains(t)) {
            return fail!(
                CUDA_ERROR_INVALID_VALUE,
                "{CALL}: memory types {types:?} out of range"
            );
        }
        // SAFETY: readable as above, and both enum fields hold valid values.
        let p = unsafe { copyParams.read() };
        let side = |kind: CUmemorytype_enum, host: usize, dev: u64, x: usize| match kind {
            CU_MEMORYTYPE_HOST => host.checked_add(x).map(Place::Host),
            CU_MEMORYTYPE_DEVICE => dev.checked_add(x as u64).map(Place::Device),
            _ => None,
        };
        let src = side(
            p.srcMemoryType,
            p.srcHost.expose_provenance(),
            p.srcDevice,
            p.srcXInBytes,
        );
        let dst = side(
            p.dstMemoryType,
            p.dstHost.expose_provenance(),
            p.dstDevice,
            p.dstXInBytes,
        );
        let one_d = (p.Height, p.Depth) == (1, 1) && [p.srcY, p.srcZ, p.dstY, p.dstZ] == [0; 4];
        let (Some(src), Some(dst), true) = (src, dst, one_d) else {
            return fail!(
                CUDA_ERROR_NOT_SUPPORTED,
                "{CALL}: only 1-D copies (Height and Depth 1, Y and Z 0) between host and device memory are simulated"
            );
        };
        let copy = Copy1D {
            dst,
            src,
            len: p.WidthInBytes,
        };
        copy.validate(CALL)?;
        Ok(Node::Copy(copy))
    };
    // SAFETY: forwarded from this fn's contract.
    api(CALL, || unsafe {
        add_node(
            phGraphNode,
            hGraph,
            dependencies,
            numDependencies,
            CALL,
            node,
        )
    })
}

/// Adds a kernel node; parameter values are copied now.
///
/// # Safety
/// As [`cuGraphAddEmptyNode`]; `nodeParams` must be null or valid for a read,
/// with `kernelParams` as [`crate::cuLaunchKernel`] requires.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode_v2(
    phGraphNode: *mut CUgraphNode,
    hGraph: CUgraph,
    dependencies: *const CUgraphNode,
    numDependencies: usize,
    nodeParams: *const CUDA_KERNEL_NODE_PARAMS,
) -> CUresult {
    const CALL: &str = "cuGraphAddKernelNode_v2";
    let node = || {
        if nodeParams.is_null() {
            return fail!(CUDA_ERROR_INVALID_VALUE, "{CALL}: nodeParams is null");
        }
        // SAFETY: non-null and readable by this fn's contract.
        let p = unsafe { nodeParams.read() };
        let grid = [p.gridDimX, p.gridDimY, p.gridDimZ];
        let block = [p.blockDimX, p.blockDimY, p.blockDimZ];
        // SAFETY: `kernelParams` as cuLaunchKernel requires (this fn's contract).
        let call = unsafe { KernelCall::capture(p.func, grid, block, p.kernelParams, CALL) }?;
        Ok(Node::Kernel(call))
    };
    // SAFETY: forwarded from this fn's contract.
    api(CALL, || unsafe {
        add_node(
            phGraphNode,
            hGraph,
            dependencies,
            numDependencies,
            CALL,
            node,
        )
    })
}

/// Snapshots the graph's nodes into an executable graph.
///
/// # Safety
/// `phGraphExec` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    phGraphExec: *mut CUgraphExec,
    hGraph: CUgraph,
    _flags: c_ulonglong,
) -> CUresult {
    const CALL: &str = "cuGraphInstantiateWithFlags";
    api(CALL, || {
        let out = Out::new(phGraphExec, CALL, "phGraphExec")?;
        let mut st = state();
        let nodes = st.graphs.get(id_of(hGraph), CALL)?.nodes.clone();
        let id = st.execs.insert(Arc::new(Exec {
            nodes: Mutex::new(nodes),
            running: Mutex::new(()),
        }));
        INSTANTIATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(handle(id)) };
        Ok(())
    })
}

/// Graphs instantiated so far (a test checks that a one-shot command
/// buffer instantiates none).
static INSTANTIATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many graphs were instantiated since the library was loaded.
#[no_mangle]
pub extern "C" fn fenceline_sim_graph_instantiations() -> u64 {
    INSTANTIATIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Destroys an executable graph (launches already queued still run).
#[no_mangle]
pub extern "C" fn cuGraphExecDestroy(hGraphExec: CUgraphExec) -> CUresult {
    api("cuGraphExecDestroy", || {
        state()
            .execs
            .remove(id_of(hGraphExec), "cuGraphExecDestroy")
            .map(drop)
    })
}

/// Queues a run of the executable graph's nodes, in order, on the stream.
#[no_mangle]
pub extern "C" fn cuGraphLaunch(hGraphExec: CUgraphExec, hStream: CUstream) -> CUresult {
    const CALL: &str = "cuGraphLaunch";
    api(CALL, || {
        let exec = state().execs.get(id_of(hGraphExec), CALL)?.clone();
        let s = stream(hStream, CALL)?;
        // The nodes as they are now: a later parameter update is for later
        // launches.
        let nodes: Vec<Arc<Node>> = lock(&exec.nodes).iter().map(|(_, n)| n.clone()).collect();
        let uses = Uses::take(nodes.iter().flat_map(|n| n.addrs()));
        s.enqueue(Box::new(move || {
            let r = {
                let _one_at_a_time = lock(&exec.running);
                nodes.iter().try_for_each(|n| n.run(CALL))
            };
            drop(uses);
            r
        }))
    })
}

/// Sets a kernel node's parameters in an executable graph, for launches
/// made from now on (launches already queued keep the old ones). The node
/// must be a kernel node of the graph it was instantiated from; an 8-byte
/// parameter pointing into stream-ordered memory already freed is misuse.
///
/// # Safety
/// `nodeParams` must be null or valid for a read, with `kernelParams` as
/// [`crate::cuLaunchKernel`] requires.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams_v2(
    hGraphExec: CUgraphExec,
    hNode: CUgraphNode,
    nodeParams: *const CUDA_KERNEL_NODE_PARAMS,
) -> CUresult {
    const CALL: &str = "cuGraphExecKernelNodeSetParams_v2";
    api(CALL, || {
        if nodeParams.is_null() {
            return fail!(CUDA_ERROR_INVALID_VALUE, "{CALL}: nodeParams is null");
        }
        let exec = state().execs.get(id_of(hGraphExec), CALL)?.clone();
        // SAFETY: non-null and readable by this fn's contract.
        let p = unsafe { nodeParams.read() };
        let grid = [p.gridDimX, p.gridDimY, p.gridDimZ];
        let block = [p.blockDimX, p.blockDimY, p.blockDimZ];
        // SAFETY: `kernelParams` as cuLaunchKernel requires (this fn's contract).
        let call = unsafe { KernelCall::capture(p.func, grid, block, p.kernelParams, CALL) }?;
        for a in call.addrs() {
            check_not_freed(a, CALL)?;
        }
        let node = id_of(hNode);
        let mut nodes = lock(&exec.nodes);
        match nodes.iter_mut().find(|(id, _)| *id == node) {
            Some((_, n)) if matches!(**n, Node::Kernel(_)) => {
                *n = Arc::new(Node::Kernel(call));
                Ok(())
            }
            Some(_) => fail!(
                CUDA_ERROR_INVALID_VALUE,
                "{CALL}: node {node:#x} is not a kernel node"
            ),
            None => fail!(
                CUDA_ERROR_INVALID_VALUE,
                "{CALL}: node {node:#x} is not a node of graph exec {:#x}",
                id_of(hGraphExec)
            ),
        }
    })
}
