//! `Command`: one recorded command (fill, update, copy, a dispatch's
//! closure and bindings, a CUDA kernel launch), what it touches, and how
//! the CPU device runs the ones that are not dispatches.

use std::ptr::NonNull;

use crate::device::cuda::kernel::Launch as CudaLaunch;
use crate::device::data::binding::Bound;
use crate::device::data::hold::Access;
use crate::device::vulkan::kernel::SpirvDispatch;
use crate::device::Buffer;
use crate::error::{Error, ErrorKind};
use crate::task::Tile;

/// What a dispatch command owns in the arena (a closure, or a bound
/// dispatch's closure and bindings): anything `Send + Sync`, dropped
/// through this trait object's vtable.
pub(crate) trait Recorded: Send + Sync {}
impl<T: Send + Sync> Recorded for T {}

/// Runs tiles `start..end` of `grid` with the recorded value at the first
/// pointer and the submission's binding table at the second (null: none):
/// the tile loop compiled for that value's type (see [`run_tiles_of`],
/// [`run_bound_tiles_of`](crate::device::data::binding::run_bound_tiles_of)).
pub(crate) type RunTiles = unsafe fn(
    *const (),
    *const crate::device::data::binding::SlotViews,
    [u32; 3],
    u64,
    u64,
) -> Result<(), Error>;

/// The [`RunTiles`] of closures of type `F` (the table is not used).
///
/// # Safety
/// `f` points to a live `F`.
pub(crate) unsafe fn run_tiles_of<F>(
    f: *const (),
    _slots: *const crate::device::data::binding::SlotViews,
    grid: [u32; 3],
    start: u64,
    end: u64,
) -> Result<(), Error>
where
    F: Fn(&Tile) -> Result<(), Error>,
{
    // SAFETY: per contract.
    crate::task::run_tiles(unsafe { &*f.cast::<F>() }, grid, start, end)
}

/// One recorded command. Its pointers are into its recording's arena,
/// which outlives it: a command is dropped in place, once, by
/// [`Recording::reset`], and never moved out.
pub(crate) enum Command {
    Fill {
        buffer: Buffer,
        offset: usize,
        len: usize,
        pattern: [u8; 4],
        pattern_len: usize,
    },
    Update {
        buffer: Buffer,
        offset: usize,
        data: NonNull<[u8]>,
    },
    Copy {
        src: Buffer,
        src_offset: usize,
        dst: Buffer,
        dst_offset: usize,
        len: usize,
    },
    Dispatch {
        grid: [u32; 3],
        /// Owned: dropped with the command.
        f: NonNull<dyn Recorded>,
        /// Its tile loop (one indirect call per range of tiles).
        run: RunTiles,
        /// A bound dispatch's bindings (owned: dropped with the command,
        /// after `f`, which points to them).
        bindings: Option<NonNull<[Bound]>>,
    },
    Launch(CudaLaunch),
    /// A Vulkan dispatch of a SPIR-V kernel.
    Spirv(SpirvDispatch),
}

// SAFETY: the pointers are owned data in the recording's arena (update
// bytes, a `Send + Sync` closure), only read through `&Command`.
unsafe impl Send for Command {}
// SAFETY: as above.
unsafe impl Sync for Command {}

impl Drop for Command {
    fn drop(&mut self) {
        if let Command::Dispatch { f, bindings, .. } = self {
            /// Drops the bindings when it goes: after the closure, also
            /// when a capture's `Drop` panics (the bindings' buffer handles
            /// would leak otherwise).
            struct Bindings(Option<NonNull<[Bound]>>);
            impl Drop for Bindings {
                fn drop(&mut self) {
                    if let Some(b) = self.0 {
                        // SAFETY: moved into the arena for this command
                        // alone, dropped once (here).
                        unsafe { b.as_ptr().drop_in_place() }
                    }
                }
            }
            let _bindings = Bindings(*bindings);
            // SAFETY: the closure was moved into the arena for this command
            // alone, and a command is dropped once (type docs); it goes
            // before the bindings it points to.
            unsafe { f.as_ptr().drop_in_place() };
        }
    }
}

impl Command {
    /// The bytes of an `Update`.
    pub(crate) fn update_data(data: &NonNull<[u8]>) -> &[u8] {
        // SAFETY: copied into the arena of the recording holding the
        // command, alive and unchanged while the command is.
        unsafe { data.as_ref() }
    }

    /// Runs a non-dispatch command on the host.
    ///
    /// # Safety
    /// The action running it holds every buffer it touches
    /// ([`Recording::holds`]), and it runs in its stage's place (no other
    /// command of its stage touches what it writes: the recording's check).
    pub(crate) unsafe fn run(&self) -> Result<(), Error> {
        match self {
            Command::Fill {
                buffer,
                offset,
                len,
                pattern,
                pattern_len,
            } => {
                // SAFETY: per contract, the action holds `buffer` and no
                // other command of its stage touches it; the range was
                // checked at record.
                unsafe { buffer.fill_held(*offset, *len, &pattern[..*pattern_len]) }
            }
            Command::Update {
                buffer,
                offset,
                data,
            } => {
                // SAFETY: per contract, the action holds `buffer` and no
                // other command of its stage touches it; the range was
                // checked at record.
                unsafe { buffer.write_held(*offset, Command::update_data(data)) }
            }
            Command::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                len,
            } => {
                // SAFETY: per contract, the action holds `src` and `dst`, and
                // no other command of its stage writes `src` or touches
                // `dst`; the ranges were checked at record.
                unsafe { src.copy_held(*src_offset, dst, *dst_offset, *len) }
            }
            Command::Dispatch { .. } => Err(Error::new(
                ErrorKind::Internal,
                "a dispatch runs as a dispatch task",
            )),
            Command::Launch(_) => Err(Error::new(
                ErrorKind::FailedPrecondition,
                "a CUDA kernel cannot run on the CPU device",
            )),
            Command::Spirv(_) => Err(Error::new(
                ErrorKind::FailedPrecondition,
                "a SPIR-V kernel cannot run on the CPU device",
            )),
        }
    }

    /// Calls `f` with each buffer the command touches and how (a copy
    /// within one buffer: once, writing). A CUDA kernel launch reports
    /// none: what a kernel reads or writes is not known.
    pub(crate) fn accesses(&self, mut f: impl FnMut(&Buffer, Access)) {
        match self {
            Command::Fill { buffer, .. } | Command::Update { buffer, .. } => {
                f(buffer, Access::Write)
            }
            Command::Copy { src, dst, .. } => {
                if !src.same(dst) {
                    f(src, Access::Read);
                }
                f(dst, Access::Write);
            }
            Command::Dispatch {
                bindings: Some(b), ..
            } => {
                // SAFETY: owned by the command, alive while it is.
                for bound in unsafe { b.as_ref() } {
                    if let Some(buffer) = bound.buffer() {
                        f(buffer, bound.access());
                    }
                }
            }
            Command::Dispatch { bindings: None, .. } => {}
            Command::Launch(_) => {}
            // What a kernel does is not known: each buffer counts as
            // written (the stage rules then keep it from another command
            // of its stage).
            Command::Spirv(d) => d.buffers().for_each(|b| f(b, Access::Write)),
        }
    }

    /// Calls `f` with each buffer the command names (a kernel launch's
    /// buffer arguments included).
    pub(crate) fn buffers(&self, mut f: impl FnMut(&Buffer)) {
        match self {
            Command::Launch(launch) => launch.buffers().iter().for_each(f),
            _ => self.accesses(|b, _| f(b)),
        }
    }

    /// Calls `f` with each binding-table slot the command binds and how
    /// (a bound dispatch's slot bindings), with the bytes its chunks span
    /// over `tiles`.
    ///
    /// A kernel launch's slot arguments are reported as reads needing
    /// `offset` bytes: what a kernel does with its memory is not known,
    /// and, as for its buffer arguments, nothing is checked about it.
    pub(crate) fn slot_accesses(&self, mut f: impl FnMut(usize, Access, usize)) {
        if let Command::Spirv(d) = self {
            // As its buffers: written, for all that is known.
            d.slots().for_each(|s| f(s, Access::Write, 0));
        }
        if let Command::Launch(launch) = self {
            for s in launch.slots() {
                f(s.slot, Access::Read, s.offset);
            }
        }
        if let Command::Dispatch {
            bindings: Some(b),
            grid,
            ..
        } = self
        {
            let tiles = crate::task::tile_count(*grid).unwrap_or(0);
            // SAFETY: owned by the command, alive while it is.
            for bound in unsafe { b.as_ref() } {
                if let Some(slot) = bound.slot() {
                    let need = bound
                        .chunk
                        .and_then(|c| crate::device::data::binding::chunk_bytes(c, tiles))
                        .unwrap_or(0);
                    f(slot, bound.access(), need);
                }
            }
        }
    }

    used_by_cuda! {
    /// A command that moves no bytes (skipped by the CUDA device).
    pub(crate) fn is_empty_op(&self) -> bool {
        match self {
            Command::Fill { len, .. } | Command::Copy { len, .. } => *len == 0,
            Command::Update { data, .. } => data.is_empty(),
            _ => false,
        }
    }
    }
}
