//! Modules (PTX text scanned for its entry names), functions, kernel
//! launches, and the host implementations tests register for kernels.

use crate::context::require_context;
use crate::misuse::error;
use crate::state::{handle, id_of, state};
use crate::stream::stream;
use crate::{api, guarded, Out, SimResult};
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::{CUfunction, CUmodule, CUresult, CUstream};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_uint, c_void, CStr};
use std::sync::Arc;

/// A host implementation of a kernel: called with `grid[3]`, `block[3]` and
/// one pointer per parameter, to a copy of the value passed at launch.
pub type KernelFn =
    extern "C" fn(grid: *const u32, block: *const u32, params: *const *const c_void);

/// A registered kernel implementation.
pub(crate) struct HostKernel {
    param_sizes: Vec<usize>,
    f: KernelFn,
}

/// A loaded module: its entry names and the function handles handed out.
pub(crate) struct Module {
    entries: Vec<String>,
    functions: BTreeMap<String, u64>,
}

/// A function handle: a kernel entry of a module.
pub(crate) struct Function {
    name: String,
}

/// The entry names of PTX `text`, or `None` if it has no `.version`
/// directive or no `.entry`. `//` comments are ignored.
pub(crate) fn parse_ptx(text: &str) -> Option<Vec<String>> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut tokens = code.split_whitespace();
    let (mut version, mut entries) = (false, Vec::new());
    while let Some(t) = tokens.next() {
        version |= t == ".version";
        if t == ".entry" {
            let next = tokens.next().unwrap_or("");
            let name: String = next
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$'))
                .collect();
            if !name.is_empty() {
                entries.push(name);
            }
        }
    }
    (version && !entries.is_empty()).then_some(entries)
}

/// A kernel launch captured for later: the implementation (if registered)
/// and copies of its parameter values, 16-byte aligned.
pub(crate) struct KernelCall {
    f: Option<KernelFn>,
    grid: [u32; 3],
    block: [u32; 3],
    params: Vec<Box<[u128]>>,
    /// The values of its 8-byte parameters: maybe device addresses.
    addrs: Vec<u64>,
}

impl KernelCall {
    /// Captures a launch of `func` now (parameter values are copied).
    ///
    /// # Safety
    /// If the kernel is registered with `n` parameters, `kernel_params` must
    /// point to `n` pointers, each valid for reads of its registered size.
    pub(crate) unsafe fn capture(
        func: CUfunction,
        grid: [u32; 3],
        block: [u32; 3],
        kernel_params: *mut *mut c_void,
        call: &str,
    ) -> SimResult<KernelCall> {
        if grid.contains(&0) || block.contains(&0) {
            return fail!(
                CUDA_ERROR_INVALID_VALUE,
                "{call}: grid {grid:?} and block {block:?} must be > 0 in every dimension"
            );
        }
        let kernel = {
            let st = state();
            let name = &st.functions.get(id_of(func), call)?.name;
            st.kernels.get(name).cloned()
        };
        let Some(kernel) = kernel else {
            return Ok(KernelCall {
                f: None,
                grid,
                block,
                params: Vec::new(),
                addrs: Vec::new(),
            });
        };
        let n = kernel.param_sizes.len();
        if n > 0 && kernel_params.is_null() {
            return fail!(
                CUDA_ERROR_INVALID_VALUE,
                "{call}: kernelParams is null but the registered kernel takes {n} parameters"
            );
        }
        let mut params = Vec::with_capacity(n);
        let mut addrs = Vec::new();
        for (i, &size) in kernel.param_sizes.iter().enumerate() {
            let mut copy = vec![0u128; size.div_ceil(16)].into_boxed_slice();
            // SAFETY: `kernel_params` holds `n` pointers, each readable for
            // its registered size (this fn's contract); `copy` has room for
            // `size` bytes and is a fresh allocation.
            unsafe {
                let src = kernel_params.add(i).read().cast::<u8>();
                std::ptr::copy_nonoverlapping(src, copy.as_mut_ptr().cast::<u8>(), size);
            }
            if size == 8 {
                addrs.push(copy[0] as u64);
            }
            params.push(copy);
        }
        Ok(KernelCall {
            f: Some(kernel.f),
            grid,
            block,
            params,
            addrs,
        })
    }

    /// The values of its 8-byte parameters, taken as device addresses.
    pub(crate) fn addrs(&self) -> impl Iterator<Item = u64> + '_ {
        self.addrs.iter().copied()
    }

    /// Runs the host implementation, if any; not if a parameter points
    /// into stream-ordered memory that is not (or no longer) allocated.
    pub(crate) fn run(&self, call: &str) -> SimResult {
        for &a in &self.addrs {
            crate::memory::check_kernel_param(a, call)?;
        }
        if let Some(f) = self.f {
            let ptrs: Vec<*const c_void> = self.params.iter().map(|p| p.as_ptr().cast()).collect();
            f(self.grid.as_ptr(), self.block.as_ptr(), ptrs.as_ptr());
        }
        Ok(())
    }
}

/// Loads NUL-terminated PTX text; `CUDA_ERROR_INVALID_PTX` without
/// `.version` or `.entry`.
///
/// # Safety
/// `module` must be null or valid for a write; `image` must be null or point
/// to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CUresult {
    const CALL: &str = "cuModuleLoadData";
    api(CALL, || {
        let out = Out::new(module, CALL, "module")?;
        require_context(CALL)?;
        if image.is_null() {
            return fail!(CUDA_ERROR_INVALID_VALUE, "{CALL}: image is null");
        }
        // SAFETY: non-null and NUL-terminated by this fn's contract.
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_string_lossy();
        let Some(entries) = parse_ptx(&text) else {
            return fail!(
                CUDA_ERROR_INVALID_PTX,
                "{CALL}: image has no .version or no .entry directive"
            );
        };
        let id = state().modules.insert(Module {
            entries,
            functions: BTreeMap::new(),
        });
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(handle(id)) };
        Ok(())
    })
}

/// Unloads a module; its function handles are destroyed with it.
#[no_mangle]
pub extern "C" fn cuModuleUnload(hmod: CUmodule) -> CUresult {
    api("cuModuleUnload", || {
        let mut st = state();
        let m = st.modules.remove(id_of(hmod), "cuModuleUnload")?;
        for f in m.functions.into_values() {
            st.functions.remove(f, "cuModuleUnload")?;
        }
        Ok(())
    })
}

/// Writes the handle of the entry `name`; `CUDA_ERROR_NOT_FOUND` if the
/// module has no such entry.
///
/// # Safety
/// `hfunc` must be null or valid for a write; `name` must be null or
/// NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    hfunc: *mut CUfunction,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult {
    const CALL: &str = "cuModuleGetFunction";
    api(CALL, || {
        let out = Out::new(hfunc, CALL, "hfunc")?;
        if name.is_null() {
            return fail!(CUDA_ERROR_INVALID_VALUE, "{CALL}: name is null");
        }
        // SAFETY: non-null and NUL-terminated by this fn's contract.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let mut st = state();
        let m = st.modules.get(id_of(hmod), CALL)?;
        if !m.entries.contains(&name) {
            return fail!(
                CUDA_ERROR_NOT_FOUND,
                "{CALL}: no entry {name:?} in module {:#x}",
                id_of(hmod)
            );
        }
        let id = match m.functions.get(&name) {
            Some(&id) => id,
            None => {
                let id = st.functions.insert(Function { name: name.clone() });
                st.modules
                    .get_mut(id_of(hmod), CALL)?
                    .functions
                    .insert(name, id);
                id
            }
        };
        // SAFETY: writable by this fn's contract.
        unsafe { out.write(handle(id)) };
        Ok(())
    })
}

/// Queues a kernel: its registered host implementation runs in stream
/// order; an unregistered kernel does nothing.
///
/// # Safety
/// If the kernel's name is registered with `n` parameters, `kernelParams`
/// must point to `n` pointers, each readable for that parameter's size.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    gridDimX: c_uint,
    gridDimY: c_uint,
    gridDimZ: c_uint,
    blockDimX: c_uint,
    blockDimY: c_uint,
    blockDimZ: c_uint,
    _sharedMemBytes: c_uint,
    hStream: CUstream,
    kernelParams: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> CUresult {
    const CALL: &str = "cuLaunchKernel";
    api(CALL, || {
        let s = stream(hStream, CALL)?;
        let (grid, block) = (
            [gridDimX, gridDimY, gridDimZ],
            [blockDimX, blockDimY, blockDimZ],
        );
        // SAFETY: forwarded from this fn's contract.
        let launch = unsafe { KernelCall::capture(f, grid, block, kernelParams, CALL) }?;
        let uses = crate::memory::Uses::take(launch.addrs());
        s.enqueue(Box::new(move || {
            let r = launch.run(CALL);
            drop(uses);
            r
        }))
    })
}

/// Registers `f` as the host implementation of kernels named `name`, taking
/// `n_params` parameters of the given sizes (replacing any earlier one).
///
/// # Safety
/// `name` must be NUL-terminated; `param_sizes` must point to `n_params`
/// sizes (or may be null when `n_params` is 0).
#[no_mangle]
pub unsafe extern "C" fn fenceline_sim_register_kernel(
    name: *const c_char,
    param_sizes: *const usize,
    n_params: usize,
    f: KernelFn,
) -> CUresult {
    const CALL: &str = "fenceline_sim_register_kernel";
    let body = || {
        if name.is_null() || (param_sizes.is_null() && n_params > 0) {
            return error(
                CUDA_ERROR_INVALID_VALUE,
                format_args!("{CALL}: name or param_sizes is null"),
            );
        }
        // SAFETY: non-null and NUL-terminated by this fn's contract.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let param_sizes = match n_params {
            0 => Vec::new(),
            // SAFETY: non-null and valid for `n_params` reads by this fn's contract.
            n => unsafe { std::slice::from_raw_parts(param_sizes, n) }.to_vec(),
        };
        state()
            .kernels
            .insert(name, Arc::new(HostKernel { param_sizes, f }));
        CUDA_SUCCESS
    };
    guarded(CALL, CUDA_ERROR_UNKNOWN, body)
}

#[cfg(test)]
mod tests {
    use super::parse_ptx;

    #[test]
    fn entries_are_collected_in_order() {
        let ptx =
            ".version 8.0\n.target sm_80\n.visible .entry fill_u32(\n .param .u64 p)\n{ ret; }\n\
                   // .entry commented_out(\n.entry $odd_name_1 (){}";
        assert_eq!(
            parse_ptx(ptx),
            Some(vec!["fill_u32".to_owned(), "$odd_name_1".to_owned()])
        );
    }

    #[test]
    fn text_without_version_or_entry_is_rejected() {
        assert_eq!(parse_ptx(".version 8.0\n.func f() {}"), None);
        assert_eq!(parse_ptx(".entry k() {}"), None);
        assert_eq!(parse_ptx("not ptx at all"), None);
    }
}
