//! Opening the CUDA device in tests and benches (feature `cuda`).
//!
//! A real driver is used when one is installed; otherwise the project's
//! simulated driver (`cudasim/`, built as a dev-dependency into
//! `target/*/deps/libfenceline_cudasim.so`) is loaded by path first. Its
//! soname is `libcuda.so`, so cudarc's `dlopen("libcuda.so")` then finds
//! it. `FENCELINE_CUDA=sim` or `=real` forces one, and then a driver that
//! cannot be had fails the test instead of skipping it (a check that
//! cannot run must not pass); `FENCELINE_CUDA_SIM` names the library
//! file.
#![allow(dead_code)]

use std::ffi::{c_char, c_void, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

use fenceline::{CudaConfig, Device};

/// Which driver this process runs against.
pub enum Driver {
    Real,
    Sim(libloading::Library),
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

fn sim_path() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("FENCELINE_CUDA_SIM") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libfenceline_cudasim.so"),
        dir.join("../deps/libfenceline_cudasim.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

fn real_present() -> bool {
    // SAFETY: only tries to dlopen the driver's library names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn load_sim() -> Result<Driver, String> {
    let path = sim_path().ok_or("the simulated driver library was not found")?;
    // SAFETY: the simulated driver's initializers are Rust statics only.
    let lib = unsafe { libloading::Library::new(&path) }
        .map_err(|e| format!("loading {}: {e}", path.display()))?;
    Ok(Driver::Sim(lib))
}

/// The driver, chosen once per process.
pub fn driver() -> Result<&'static Driver, &'static str> {
    let d = DRIVER.get_or_init(|| match std::env::var("FENCELINE_CUDA").as_deref() {
        Ok("real") if real_present() => Ok(Driver::Real),
        Ok("real") => Err("FENCELINE_CUDA=real but no CUDA driver is installed".into()),
        Ok("sim") => load_sim(),
        _ if real_present() => Ok(Driver::Real),
        _ => load_sim(),
    });
    // The variable is read only on failure: reading it allocates, and the
    // zero-allocation tests ask for the driver inside their windows.
    if let Err(reason) = d {
        if let Ok(forced) = std::env::var("FENCELINE_CUDA") {
            panic!("FENCELINE_CUDA={forced}, but {reason}");
        }
    }
    d.as_ref().map_err(|e| e.as_str())
}

/// Whether the simulated driver is in use.
pub fn is_sim() -> bool {
    matches!(driver(), Ok(Driver::Sim(_)))
}

/// The CUDA device shaped by `config`, or `None` (with the reason printed)
/// when neither a driver nor the simulator is present.
pub fn device_with(config: CudaConfig) -> Option<Device> {
    match driver() {
        Ok(_) => Some(Device::cuda_with(0, config).expect("opening CUDA device 0")),
        Err(reason) => {
            println!("skipped: no CUDA driver and no simulated driver ({reason})");
            None
        }
    }
}

fn sim_fn<T: Copy>(name: &str) -> Option<T> {
    match driver() {
        // SAFETY: the symbol has the type the simulator exports.
        Ok(Driver::Sim(lib)) => unsafe { lib.get::<T>(name.as_bytes()).ok().map(|s| *s) },
        _ => None,
    }
}

/// Misuse reports of the simulated driver so far (0 on a real driver).
pub fn misuse_count() -> u64 {
    sim_fn::<unsafe extern "C" fn() -> u64>("fenceline_sim_misuse_count")
        // SAFETY: a plain getter.
        .map_or(0, |f| unsafe { f() })
}

/// The last misuse message of the simulated driver.
pub fn last_misuse() -> String {
    let Some(f) =
        sim_fn::<unsafe extern "C" fn(*mut c_char, usize) -> usize>("fenceline_sim_last_misuse")
    else {
        return String::new();
    };
    let mut buf = vec![0u8; 512];
    // SAFETY: the buffer holds 512 bytes; the sim NUL-terminates.
    let n = unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(n.min(511));
    String::from_utf8_lossy(&buf).into_owned()
}

/// Live events of the simulated driver (`None` on a real driver).
pub fn live_events() -> Option<u64> {
    sim_fn::<unsafe extern "C" fn() -> u64>("fenceline_sim_live_events")
        // SAFETY: a plain getter.
        .map(|f| unsafe { f() })
}

/// Graphs the simulated driver instantiated so far (`None` on a real
/// driver).
pub fn graph_instantiations() -> Option<u64> {
    sim_fn::<unsafe extern "C" fn() -> u64>("fenceline_sim_graph_instantiations")
        // SAFETY: a plain getter.
        .map(|f| unsafe { f() })
}

/// Driver calls the calling thread made so far on the simulated driver
/// (`None` on a real driver).
pub fn thread_driver_calls() -> Option<u64> {
    sim_fn::<unsafe extern "C" fn() -> u64>("fenceline_sim_thread_calls")
        // SAFETY: a plain getter.
        .map(|f| unsafe { f() })
}

/// A 4-byte counter buffer and an ended command buffer holding one launch
/// of `fenceline_count` over `grid` blocks of one thread on it (each
/// launch adds the grid's size), with the test kernels registered.
pub fn counting_launch(
    device: &Device,
    grid: [u32; 3],
) -> (fenceline::Buffer, fenceline::CommandBuffer) {
    register_test_kernels();
    let counter = device.buffer(4).unwrap();
    let kernel = device.load_kernel(COUNT_PTX, "fenceline_count").unwrap();
    let mut cb = device.command_buffer().unwrap();
    cb.launch(
        &kernel,
        grid,
        [1, 1, 1],
        0,
        &[fenceline::KernelArg::Buffer(&counter, 0)],
    )
    .unwrap();
    cb.end().unwrap();
    (counter, cb)
}

/// A host implementation of a kernel on the simulated driver.
pub type SimKernel = extern "C" fn(*const u32, *const u32, *const *const c_void);

/// Registers `f` as kernel `name` on the simulated driver (false on a
/// real driver).
pub fn register_kernel(name: &str, param_sizes: &[usize], f: SimKernel) -> bool {
    type Reg = unsafe extern "C" fn(*const c_char, *const usize, usize, SimKernel) -> i32;
    let Some(reg) = sim_fn::<Reg>("fenceline_sim_register_kernel") else {
        return false;
    };
    let name = CString::new(name).expect("kernel name");
    // SAFETY: valid name and sizes for the call.
    unsafe { reg(name.as_ptr(), param_sizes.as_ptr(), param_sizes.len(), f) == 0 }
}

/// PTX of `fenceline_count(u32* counter)`: every thread adds 1.
pub const COUNT_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry fenceline_count(
    .param .u64 fenceline_count_param_0
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [fenceline_count_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    atom.global.add.u32 %r1, [%rd2], 1;
    ret;
}
"#;

/// The simulator's `fenceline_count`: adds grid x block threads.
extern "C" fn sim_count(grid: *const u32, block: *const u32, params: *const *const c_void) {
    // SAFETY: the simulator passes 3 dims each and one 8-byte parameter,
    // the address of a live u32 in (host-backed) device memory.
    unsafe {
        let g = std::slice::from_raw_parts(grid, 3);
        let b = std::slice::from_raw_parts(block, 3);
        let threads = g.iter().chain(b).product::<u32>();
        let addr = *(*params).cast::<u64>();
        let counter = &*(addr as *const std::sync::atomic::AtomicU32);
        counter.fetch_add(threads, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Registers the simulator's built-in test kernels (idempotent).
pub fn register_test_kernels() {
    register_kernel("fenceline_count", &[8], sim_count);
}

/// Makes the simulated driver fail stickily with `code` from now on, for
/// the rest of the process (false on a real driver).
pub fn inject_fault(code: cudarc::driver::sys::CUresult) -> bool {
    type Inject = unsafe extern "C" fn(cudarc::driver::sys::CUresult) -> i32;
    match sim_fn::<Inject>("fenceline_sim_inject_fault") {
        // SAFETY: a plain setter.
        Some(f) => unsafe { f(code) == 0 },
        None => false,
    }
}
