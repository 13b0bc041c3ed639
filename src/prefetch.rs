//! Cache prefetch hints: start fetching memory this thread is about to
//! write, so that a line another core wrote last comes over while the
//! thread works on something else. Hints only: they change no memory the
//! program sees and never fault, whatever the address. (A no-op off
//! x86-64, under Miri and under loom.)

/// Bytes per cache line on the targets fenceline tunes for: the alignment
/// of task and action blocks, so each block's header starts a line of its
/// own and no two blocks share one (`#[repr(align)]` cannot name a
/// constant: `Task` spells it and asserts it equals this).
pub(crate) const CACHE_LINE: usize = 64;

use CACHE_LINE as LINE;

/// Starts fetching the cache line holding `p` for writing.
#[inline(always)]
pub(crate) fn write_line(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri), not(fenceline_loom)))]
    // SAFETY: a prefetch is only a hint to the cache: it reads nothing the
    // program sees and does not fault on any address.
    // (`prefetchw` by hand: `_MM_HINT_ET0` compiles to a read prefetch
    // without the `prfchw` target feature; CPUs without the instruction
    // run it as a no-op.)
    unsafe {
        std::arch::asm!(
            "prefetchw [{p}]",
            p = in(reg) p,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri), not(fenceline_loom))))]
    let _ = p;
}

/// Starts fetching, for writing, every cache line that holds a byte of
/// `base + from .. base + to`, where `base` is line-aligned: with constant
/// offsets, a fixed number of hints and no loop.
#[inline(always)]
pub(crate) fn write_lines_at(base: *const u8, from: usize, to: usize) {
    let mut off = from & !(LINE - 1);
    while off < to {
        // An address only (`wrapping_add`), never dereferenced.
        write_line(base.wrapping_add(off));
        off += LINE;
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    /// The hints accept any address, mapped or not, and touch nothing.
    #[test]
    fn hints_never_fault_and_change_nothing() {
        let bytes = [7u8; 200];
        super::write_line(std::ptr::without_provenance(usize::MAX));
        super::write_lines_at(bytes.as_ptr(), 0, 200);
        super::write_lines_at(std::ptr::null(), 64, 256);
        assert!(bytes.iter().all(|&b| b == 7));
    }
}
