//! Bound dispatches: the buffers a dispatch's tiles read and write, and
//! what each tile sees of them ([`TileIo`]).
//!
//! A binding either lets every tile read the whole buffer
//! ([`Binding::read`]) or gives tile `i` (its [`Tile::linear_id`], x
//! fastest) the bytes `[i * chunk, (i + 1) * chunk)` to write
//! ([`Binding::write_chunks`]). Tiles of one dispatch therefore write
//! disjoint bytes, and nothing writes what they read: the recording
//! rejects a dispatch that reads a buffer it writes (or writes one twice),
//! and a stage in which another command touches a buffer the dispatch
//! writes, or writes one it reads; across actions, the action holds each
//! buffer while it runs (see `hold`). Inside a tile, [`TileIo`] hands out
//! each write chunk once, so no two `&mut` slices alias.

use std::cell::Cell;

use bytemuck::Pod;

use super::hold::Access;
use super::Buffer;
use crate::error::{Error, ErrorKind};
use crate::task::Tile;

/// Bindings one dispatch may have.
pub const MAX_BINDINGS: usize = 64;

/// A buffer bound to a dispatch, for [`CommandBuffer::dispatch_with`](super::CommandBuffer::dispatch_with).
#[derive(Clone, Copy, Debug)]
pub struct Binding<'a> {
    pub(crate) buffer: &'a Buffer,
    /// `Some(bytes)`: tile `i` writes chunk `i`; `None`: every tile reads
    /// the whole buffer.
    pub(crate) chunk: Option<usize>,
}

impl<'a> Binding<'a> {
    /// Every tile reads the whole buffer ([`TileIo::read`]).
    pub fn read(buffer: &'a Buffer) -> Binding<'a> {
        Binding {
            buffer,
            chunk: None,
        }
    }

    /// Tile `i` ([`Tile::linear_id`]) writes bytes
    /// `[i * chunk_bytes, (i + 1) * chunk_bytes)` ([`TileIo::chunk`]).
    /// The grid's chunks must fit in the buffer.
    pub fn write_chunks(buffer: &'a Buffer, chunk_bytes: usize) -> Binding<'a> {
        Binding {
            buffer,
            chunk: Some(chunk_bytes),
        }
    }
}

/// A binding as recorded: the buffer's handle (kept by the command), its
/// use, and its bytes' address and length (read by every tile without
/// going through the handle).
pub(crate) struct Bound {
    pub(crate) buffer: Buffer,
    pub(crate) chunk: Option<usize>,
    base: *mut u8,
    len: usize,
}

// SAFETY: `base` points into `buffer`'s memory, which `buffer` keeps
// alive; the bytes are reached only under the hold protocol (`TileIo`).
unsafe impl Send for Bound {}
// SAFETY: as above.
unsafe impl Sync for Bound {}

impl Bound {
    /// The recorded form of `binding` (a CPU-device buffer).
    pub(crate) fn new(binding: &Binding<'_>) -> Result<Bound, Error> {
        let Some(mem) = binding.buffer.host() else {
            return Err(invalid("a CUDA buffer bound to a CPU dispatch".to_string()));
        };
        Ok(Bound {
            buffer: binding.buffer.clone(),
            chunk: binding.chunk,
            base: mem.base(),
            len: binding.buffer.len(),
        })
    }

    pub(crate) fn access(&self) -> Access {
        match self.chunk {
            Some(_) => Access::Write,
            None => Access::Read,
        }
    }
}

/// Checks `bindings` for a dispatch of `tiles` tiles; `Err` is
/// `InvalidArgument` naming the binding.
pub(crate) fn check(bindings: &[Binding<'_>], tiles: u64) -> Result<(), Error> {
    if bindings.len() > MAX_BINDINGS {
        return Err(invalid(format!(
            "{} bindings: a dispatch takes at most {MAX_BINDINGS}",
            bindings.len()
        )));
    }
    for (i, b) in bindings.iter().enumerate() {
        if let Some(chunk) = b.chunk {
            if chunk == 0 {
                return Err(invalid(format!("binding {i}: a chunk of 0 bytes")));
            }
            let need = u64::try_from(chunk).ok().and_then(|c| c.checked_mul(tiles));
            if need.is_none_or(|n| n > b.buffer.len() as u64) {
                return Err(invalid(format!(
                    "binding {i}: {tiles} chunks of {chunk} bytes do not fit a buffer of {} bytes",
                    b.buffer.len()
                )));
            }
        }
        for (j, other) in bindings[..i].iter().enumerate() {
            if other.buffer.same(b.buffer) && (other.chunk.is_some() || b.chunk.is_some()) {
                return Err(invalid(format!(
                    "bindings {j} and {i} are one buffer and a dispatch writes it: \
                     a dispatch may not read what it writes, nor write it twice"
                )));
            }
        }
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, message)
}

/// What one tile of a bound dispatch sees of its buffers.
///
/// Not `Sync`: it lives for one tile, on the thread running it.
pub struct TileIo<'a> {
    bound: &'a [Bound],
    tile: usize,
    /// Bit `i`: binding `i`'s chunk was handed out.
    taken: Cell<u64>,
}

impl<'a> TileIo<'a> {
    /// # Safety
    /// The action running the dispatch holds every bound buffer (for
    /// writing where the binding writes) for `'a`, and `tile` is a tile of
    /// the dispatch's grid (so its chunks are in bounds: checked at
    /// record) run once, by this `TileIo` alone.
    pub(crate) unsafe fn new(bound: &'a [Bound], tile: u64) -> TileIo<'a> {
        TileIo {
            bound,
            // A tile of a grid whose chunks fit in memory: fits `usize`.
            tile: tile as usize,
            taken: Cell::new(0),
        }
    }

    /// The whole buffer of read binding `binding`, as `T`s.
    ///
    /// # Errors
    /// `InvalidArgument` (nothing handed out) if `binding` is out of range,
    /// is a write binding, or the buffer's length is not a multiple of
    /// `size_of::<T>()` (its start is aligned to 64 bytes, so any `Pod`
    /// type's alignment fits).
    #[inline]
    pub fn read<T: Pod>(&self, binding: usize) -> Result<&[T], Error> {
        let Some(b) = self.bound.get(binding) else {
            return Err(out_of_range(binding, self.bound.len()));
        };
        if b.chunk.is_some() {
            return Err(not_readable(binding));
        }
        let size = std::mem::size_of::<T>();
        // The start is aligned to `BUFFER_ALIGN`: only a larger alignment
        // needs looking at (compiled out for every other type).
        let aligned = std::mem::align_of::<T>() <= super::BUFFER_ALIGN
            || (b.base as usize) % std::mem::align_of::<T>() == 0;
        if size == 0 || b.len % size != 0 || !aligned {
            return Err(misfit::<T>(binding, b.len, 0));
        }
        // SAFETY: the action holds the buffer, and nothing writes it while
        // the dispatch runs (no write binding of it in this dispatch, no
        // writer in its stage, none elsewhere while held: `new`'s
        // contract and the recording's checks); `base..base + len` is the
        // buffer's memory, alive while the command holds its handle,
        // aligned for `T` and a whole number of `T`s (checked above), and
        // any bytes are a valid `T` (`Pod`).
        Ok(unsafe { std::slice::from_raw_parts(b.base.cast::<T>(), b.len / size) })
    }

    /// This tile's chunk of write binding `binding`, as `T`s: bytes
    /// `[i * chunk, (i + 1) * chunk)` for `i = Tile::linear_id()`.
    ///
    /// # Errors
    /// `InvalidArgument` (nothing handed out) if `binding` is out of range,
    /// is a read binding, its chunk was already handed out in this tile
    /// (a second `&mut` would alias the first), or the chunk's length or
    /// alignment does not fit `T`.
    #[allow(clippy::mut_from_ref)] // handed out once per binding: `taken`
    #[inline]
    pub fn chunk<T: Pod>(&self, binding: usize) -> Result<&mut [T], Error> {
        let Some(b) = self.bound.get(binding) else {
            return Err(out_of_range(binding, self.bound.len()));
        };
        let Some(chunk) = b.chunk else {
            return Err(not_writable(binding));
        };
        let bit = 1u64 << binding;
        let taken = self.taken.get();
        if taken & bit != 0 {
            return Err(taken_twice(binding));
        }
        let start = self.tile * chunk;
        let size = std::mem::size_of::<T>();
        // Checked before the slice is made: a misfit hands nothing out.
        if size == 0 || start % std::mem::align_of::<T>() != 0 || chunk % size != 0 {
            return Err(misfit::<T>(binding, chunk, start));
        }
        self.taken.set(taken | bit);
        // SAFETY: the action holds the buffer for writing; this tile's
        // chunk is disjoint from every other tile's, nothing else of its
        // stage touches the buffer, and this is the only time this tile
        // hands it out (`taken`): no other reference to these bytes lives.
        // In bounds: checked at record for every tile of the grid. Aligned
        // for `T` (the buffer's start is aligned to 64, `start` checked)
        // and a whole number of `T`s; any bytes are a valid `T` (`Pod`).
        Ok(unsafe { std::slice::from_raw_parts_mut(b.base.add(start).cast::<T>(), chunk / size) })
    }

    /// The tile's linear id (its chunk index).
    pub fn tile(&self) -> u64 {
        self.tile as u64
    }
}

impl std::fmt::Debug for TileIo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileIo")
            .field("bindings", &self.bound.len())
            .field("tile", &self.tile)
            .finish()
    }
}

#[cold]
#[inline(never)]
fn out_of_range(binding: usize, bindings: usize) -> Error {
    invalid(format!(
        "binding {binding}: the dispatch has {bindings} bindings"
    ))
}

#[cold]
#[inline(never)]
fn not_readable(binding: usize) -> Error {
    invalid(format!(
        "binding {binding} is written in chunks: tiles cannot read it (use chunk)"
    ))
}

#[cold]
#[inline(never)]
fn not_writable(binding: usize) -> Error {
    invalid(format!(
        "binding {binding} is read: tiles cannot write it (use read)"
    ))
}

#[cold]
#[inline(never)]
fn taken_twice(binding: usize) -> Error {
    invalid(format!(
        "binding {binding}: this tile's chunk was already handed out"
    ))
}

#[cold]
#[inline(never)]
fn misfit<T>(binding: usize, len: usize, start: usize) -> Error {
    invalid(format!(
        "binding {binding}: {len} bytes at offset {start} are not a whole number of \
         aligned {}s (size {}, alignment {})",
        std::any::type_name::<T>(),
        std::mem::size_of::<T>(),
        std::mem::align_of::<T>()
    ))
}

/// Runs `f` for a tile with its bindings: the closure a bound dispatch
/// records.
///
/// # Safety
/// As for [`TileIo::new`].
#[inline]
pub(crate) unsafe fn run_tile<F>(f: &F, bound: &[Bound], tile: &Tile) -> Result<(), Error>
where
    F: Fn(&Tile, &TileIo<'_>) -> Result<(), Error>,
{
    // SAFETY: forwarded contract.
    let io = unsafe { TileIo::new(bound, tile.linear_id()) };
    f(tile, &io)
}
