//! Misuse and error reporting, and the sim-only functions that read it back.

use crate::guarded;
use cudarc::driver::sys::CUresult;
use std::ffi::c_char;
use std::fmt::Display;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Misuse reports since start or the last reset. Relaxed: a statistic read
/// after the misusing call returned (or after a synchronize that waited for
/// the stream thread that reported it), which already orders the increment.
static COUNT: AtomicU64 = AtomicU64::new(0);
static LAST: Mutex<String> = Mutex::new(String::new());

/// Locks `m`, ignoring poison: a panic caught by `guarded` must not turn every
/// later call into another panic, and no state here is left half-written
/// across a panic point that matters to a test driver.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Prints `fenceline-cudasim: LINE` on stderr. Unlike `eprintln!`, never
/// panics (stderr may be closed), so it is safe on every path.
pub(crate) fn report(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "fenceline-cudasim: {line}");
}

/// Reports a use of the API that the real driver would accept silently (or
/// crash on later) and returns `code` for the call to fail with.
pub(crate) fn misuse(code: CUresult, msg: String) -> CUresult {
    report(format_args!("misuse: {msg}"));
    *lock(&LAST) = msg;
    COUNT.fetch_add(1, Ordering::Relaxed);
    code
}

/// Reports an ordinary error (bad argument, unsupported case) and returns
/// `code`; not counted as misuse.
pub(crate) fn error(code: CUresult, msg: impl Display) -> CUresult {
    report(format_args!("error: {msg}"));
    code
}

/// Number of misuse reports since start or the last [`fenceline_sim_reset_misuse`].
#[no_mangle]
pub extern "C" fn fenceline_sim_misuse_count() -> u64 {
    guarded("fenceline_sim_misuse_count", 0, || {
        COUNT.load(Ordering::Relaxed)
    })
}

/// Copies the last misuse message, NUL-terminated and truncated to fit, into
/// `buf` (nothing is copied when `buf` is null or `len` is 0). Returns the
/// message's full length in bytes, so a result `>= len` means it was cut.
///
/// # Safety
/// `buf` must be null or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fenceline_sim_last_misuse(buf: *mut c_char, len: usize) -> usize {
    guarded("fenceline_sim_last_misuse", 0, || {
        let msg = lock(&LAST);
        if !buf.is_null() && len > 0 {
            let n = msg.len().min(len - 1);
            // SAFETY: `buf` is valid for `len` bytes (caller contract) and
            // `n + 1 <= len`; `msg` is a distinct Rust allocation.
            unsafe {
                std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
                buf.add(n).write(0);
            }
        }
        msg.len()
    })
}

/// Sets the misuse count to 0 and forgets the last message.
#[no_mangle]
pub extern "C" fn fenceline_sim_reset_misuse() {
    guarded("fenceline_sim_reset_misuse", (), || {
        lock(&LAST).clear();
        COUNT.store(0, Ordering::Relaxed);
    })
}
