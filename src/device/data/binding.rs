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
use std::sync::Arc;

use bytemuck::Pod;

use super::buffer::Buffer;
use super::hold::Access;
use crate::error::{Error, ErrorKind};
use crate::task::Tile;

/// Bindings one dispatch may have.
pub const MAX_BINDINGS: usize = 64;

/// Slots of a binding table: a command buffer's slot bindings name slots
/// `0..MAX_SLOTS`, and [`Queue::execute_with`](crate::Queue::execute_with)
/// takes a table of at most this many buffers.
pub const MAX_SLOTS: usize = 16;

/// A buffer bound to a dispatch, for [`CommandBuffer::dispatch_with`](crate::CommandBuffer::dispatch_with):
/// a buffer named at record, or a slot of the binding table each
/// submission brings ([`Queue::execute_with`](crate::Queue::execute_with)).
#[derive(Clone, Copy, Debug)]
pub struct Binding<'a> {
    pub(crate) source: Source<'a>,
    /// `Some(bytes)`: tile `i` writes chunk `i`; `None`: every tile reads
    /// the whole buffer.
    pub(crate) chunk: Option<usize>,
}

/// Where a binding's buffer comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Source<'a> {
    Buffer(&'a Buffer),
    Slot(usize),
}

impl<'a> Binding<'a> {
    /// Every tile reads the whole buffer ([`TileIo::read`]).
    pub fn read(buffer: &'a Buffer) -> Binding<'a> {
        Binding {
            source: Source::Buffer(buffer),
            chunk: None,
        }
    }

    /// Tile `i` ([`Tile::linear_id`]) writes bytes
    /// `[i * chunk_bytes, (i + 1) * chunk_bytes)` ([`TileIo::chunk`]).
    /// The grid's chunks must fit in the buffer.
    pub fn write_chunks(buffer: &'a Buffer, chunk_bytes: usize) -> Binding<'a> {
        Binding {
            source: Source::Buffer(buffer),
            chunk: Some(chunk_bytes),
        }
    }

    /// As [`read`](Self::read), of the buffer in slot `slot` of each
    /// submission's binding table.
    pub fn slot_read(slot: u32) -> Binding<'static> {
        Binding {
            source: Source::Slot(slot as usize),
            chunk: None,
        }
    }

    /// As [`write_chunks`](Self::write_chunks), of the buffer in slot
    /// `slot` of each submission's binding table (which must be at least
    /// the grid's tiles times `chunk_bytes` long).
    pub fn slot_write_chunks(slot: u32, chunk_bytes: usize) -> Binding<'static> {
        Binding {
            source: Source::Slot(slot as usize),
            chunk: Some(chunk_bytes),
        }
    }

    /// The buffer, for a binding that names one.
    pub(crate) fn buffer(&self) -> Option<&'a Buffer> {
        match self.source {
            Source::Buffer(b) => Some(b),
            Source::Slot(_) => None,
        }
    }

    fn access(&self) -> Access {
        match self.chunk {
            Some(_) => Access::Write,
            None => Access::Read,
        }
    }
}

/// A table slot's bytes, as a submission resolves them for its tiles.
#[derive(Clone, Copy)]
pub(crate) struct SlotView {
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
}

/// A submission's resolved binding table (the address and length of each
/// slot's buffer), which its dispatch tasks hand their tiles.
pub(crate) struct SlotViews {
    pub(crate) views: [SlotView; MAX_SLOTS],
    pub(crate) len: usize,
}

// SAFETY: views of buffers that the submission's table keeps alive; the
// bytes are reached only under the hold protocol (`TileIo`).
unsafe impl Send for SlotViews {}
// SAFETY: as above; the views themselves are only read.
unsafe impl Sync for SlotViews {}

/// A binding as recorded: the buffer's handle (kept by the command) with
/// its bytes' address and length (read by every tile without going
/// through the handle), or a slot; and its use.
pub(crate) struct Bound {
    source: BoundSource,
    pub(crate) chunk: Option<usize>,
}

enum BoundSource {
    Buffer { buffer: Buffer, view: SlotView },
    Slot(usize),
}

// SAFETY: a view points into its buffer's memory, which the handle beside
// it keeps alive; the bytes are reached only under the hold protocol
// (`TileIo`).
unsafe impl Send for Bound {}
// SAFETY: as above.
unsafe impl Sync for Bound {}

impl Bound {
    /// The recorded form of `binding` (a CPU-device buffer, or a slot).
    pub(crate) fn new(binding: &Binding<'_>) -> Result<Bound, Error> {
        let source = match binding.source {
            Source::Slot(i) => BoundSource::Slot(i),
            Source::Buffer(buffer) => {
                let Some(mem) = buffer.host() else {
                    return Err(invalid("a CUDA buffer bound to a CPU dispatch".to_string()));
                };
                BoundSource::Buffer {
                    buffer: buffer.clone(),
                    view: SlotView {
                        base: mem.base(),
                        len: buffer.len(),
                    },
                }
            }
        };
        Ok(Bound {
            source,
            chunk: binding.chunk,
        })
    }

    pub(crate) fn access(&self) -> Access {
        match self.chunk {
            Some(_) => Access::Write,
            None => Access::Read,
        }
    }

    /// The buffer, for a binding recorded with one.
    pub(crate) fn buffer(&self) -> Option<&Buffer> {
        match &self.source {
            BoundSource::Buffer { buffer, .. } => Some(buffer),
            BoundSource::Slot(_) => None,
        }
    }

    /// What a tile sees of this binding, with `slots` the submission's
    /// resolved table.
    #[inline]
    fn resolve(&self, slots: &[SlotView]) -> Resolved {
        let view = match &self.source {
            BoundSource::Buffer { view, .. } => *view,
            // In range: every slot a dispatch binds is in its submission's
            // table (checked at `execute_with`).
            BoundSource::Slot(i) => slots[*i],
        };
        Resolved {
            base: view.base,
            len: view.len,
            chunk: self.chunk.unwrap_or(0),
        }
    }

    /// The slot, for a slot binding.
    pub(crate) fn slot(&self) -> Option<usize> {
        match self.source {
            BoundSource::Slot(i) => Some(i),
            BoundSource::Buffer { .. } => None,
        }
    }
}

/// Checks `bindings` for a dispatch of `tiles` tiles; `Err` is
/// `InvalidArgument` naming the binding. (A slot's fit is checked against
/// each submission's table.)
pub(crate) fn check(bindings: &[Binding<'_>], tiles: u64) -> Result<(), Error> {
    if bindings.len() > MAX_BINDINGS {
        return Err(invalid(format!(
            "{} bindings: a dispatch takes at most {MAX_BINDINGS}",
            bindings.len()
        )));
    }
    for (i, b) in bindings.iter().enumerate() {
        if let Source::Slot(slot) = b.source {
            if slot >= MAX_SLOTS {
                return Err(invalid(format!(
                    "binding {i}: slot {slot}, but a binding table has at most {MAX_SLOTS}"
                )));
            }
        }
        if let Some(chunk) = b.chunk {
            if chunk == 0 {
                return Err(invalid(format!("binding {i}: a chunk of 0 bytes")));
            }
            let need = chunk_bytes(chunk, tiles);
            let fits = match b.source {
                Source::Buffer(buffer) => need.is_some_and(|n| n <= buffer.len()),
                Source::Slot(_) => need.is_some(),
            };
            if !fits {
                return Err(invalid(format!(
                    "binding {i}: {tiles} chunks of {chunk} bytes do not fit {}",
                    match b.buffer() {
                        Some(buffer) => format!("a buffer of {} bytes", buffer.len()),
                        None => "in memory".to_string(),
                    }
                )));
            }
        }
        for (j, other) in bindings[..i].iter().enumerate() {
            let same = match (other.source, b.source) {
                (Source::Buffer(x), Source::Buffer(y)) => x.same(y),
                (Source::Slot(x), Source::Slot(y)) => x == y,
                _ => false,
            };
            if same && (other.access() == Access::Write || b.access() == Access::Write) {
                return Err(invalid(format!(
                    "bindings {j} and {i} are one buffer (or slot) and a dispatch writes it: \
                     a dispatch may not read what it writes, nor write it twice"
                )));
            }
        }
    }
    Ok(())
}

/// Bytes `tiles` chunks of `chunk` bytes span (`None`: past `usize`).
pub(crate) fn chunk_bytes(chunk: usize, tiles: u64) -> Option<usize> {
    usize::try_from(tiles)
        .ok()
        .and_then(|t| t.checked_mul(chunk))
}

#[cold]
#[inline(never)]
fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, message)
}

/// A binding as the tiles of one range see it: its bytes and its chunk
/// (0: read), resolved once per range from the recorded binding and the
/// submission's table, on the running thread's stack, so that a tile's
/// checks read values the compiler can keep out of the tile loop.
#[derive(Clone, Copy)]
struct Resolved {
    base: *mut u8,
    len: usize,
    chunk: usize,
}

/// What one tile of a bound dispatch sees of its buffers.
///
/// Not `Sync`: it lives for one tile, on the thread running it.
pub struct TileIo<'a> {
    bindings: &'a [Resolved],
    tile: usize,
    /// Bit `i`: binding `i`'s chunk was handed out.
    taken: Cell<u64>,
}

impl<'a> TileIo<'a> {
    /// # Safety
    /// The action running the dispatch holds every buffer of `bindings`
    /// (for writing where the binding writes) for `'a`, and `tile` is a
    /// tile of the dispatch's grid (so its chunks are in bounds: checked at
    /// record or submission) run once, by this `TileIo` alone.
    unsafe fn new(bindings: &'a [Resolved], tile: u64) -> TileIo<'a> {
        TileIo {
            bindings,
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
        let Some(v) = self.bindings.get(binding) else {
            return Err(tile_error(out_of_range(binding, self.bindings.len())));
        };
        if v.chunk != 0 {
            return Err(tile_error(not_readable(binding)));
        }
        let size = std::mem::size_of::<T>();
        // The start is aligned to `BUFFER_ALIGN`: only a larger alignment
        // needs looking at (compiled out for every other type).
        let aligned = std::mem::align_of::<T>() <= super::buffer::BUFFER_ALIGN
            || (v.base as usize) % std::mem::align_of::<T>() == 0;
        if size == 0 || v.len % size != 0 || !aligned {
            return Err(tile_error(misfit::<T>(binding, v.len, 0)));
        }
        // SAFETY: the action holds the buffer, and nothing writes it while
        // the dispatch runs (no write binding of it in this dispatch, no
        // writer in its stage, none elsewhere while held: `new`'s
        // contract and the recording's checks); `base..base + len` is the
        // buffer's memory, alive while the command holds its handle,
        // aligned for `T` and a whole number of `T`s (checked above), and
        // any bytes are a valid `T` (`Pod`).
        Ok(unsafe { std::slice::from_raw_parts(v.base.cast::<T>(), v.len / size) })
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
        let Some(v) = self.bindings.get(binding) else {
            return Err(tile_error(out_of_range(binding, self.bindings.len())));
        };
        let chunk = v.chunk;
        if chunk == 0 {
            return Err(tile_error(not_writable(binding)));
        }
        let bit = 1u64 << binding;
        let taken = self.taken.get();
        if taken & bit != 0 {
            return Err(tile_error(taken_twice(binding)));
        }
        let start = self.tile * chunk;
        let size = std::mem::size_of::<T>();
        // Checked before the slice is made: a misfit hands nothing out.
        // A whole number of `T`s per chunk puts every chunk's start on a
        // multiple of `size_of::<T>()`, hence of its alignment, from a base
        // aligned to `BUFFER_ALIGN`: only a larger alignment needs the
        // address itself looked at (compiled out for every other type).
        let aligned = std::mem::align_of::<T>() <= super::buffer::BUFFER_ALIGN
            || (v.base as usize + start) % std::mem::align_of::<T>() == 0;
        if size == 0 || chunk % size != 0 || !aligned {
            return Err(tile_error(misfit::<T>(binding, chunk, start)));
        }
        self.taken.set(taken | bit);
        // SAFETY: in bounds of the buffer: checked at record for every
        // tile of the grid.
        let first = unsafe { v.base.add(start) };
        // SAFETY: the action holds the buffer for writing; this tile's
        // chunk is disjoint from every other tile's, nothing else of its
        // stage touches the buffer, and this is the only time this tile
        // hands it out (`taken`): no other reference to these bytes lives.
        // In bounds: checked at record for every tile of the grid. Aligned
        // for `T` (checked above) and a whole number of `T`s; any bytes are
        // a valid `T` (`Pod`).
        Ok(unsafe { std::slice::from_raw_parts_mut(first.cast::<T>(), chunk / size) })
    }

    /// The tile's linear id (its chunk index).
    pub fn tile(&self) -> u64 {
        self.tile as u64
    }
}

impl std::fmt::Debug for TileIo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileIo")
            .field("bindings", &self.bindings.len())
            .field("tile", &self.tile)
            .finish()
    }
}

// A tile's errors: each message is made by a cold function, and the
// `Error` around it inline (`tile_error`), so that the tile loop's compiled
// code knows a failed check leaves the loop (see `Error::with_shared`):
// that lets the compiler test the loop-invariant checks (a binding's
// kind, a length that fits `T`) once per range instead of once per tile.

#[inline(always)]
fn tile_error(message: Arc<str>) -> Error {
    Error::with_shared(ErrorKind::InvalidArgument, message)
}

#[cold]
#[inline(never)]
fn out_of_range(binding: usize, bindings: usize) -> Arc<str> {
    Arc::from(format!(
        "binding {binding}: the dispatch has {bindings} bindings"
    ))
}

#[cold]
#[inline(never)]
fn not_readable(binding: usize) -> Arc<str> {
    Arc::from(format!(
        "binding {binding} is written in chunks: tiles cannot read it (use chunk)"
    ))
}

#[cold]
#[inline(never)]
fn not_writable(binding: usize) -> Arc<str> {
    Arc::from(format!(
        "binding {binding} is read: tiles cannot write it (use read)"
    ))
}

#[cold]
#[inline(never)]
fn taken_twice(binding: usize) -> Arc<str> {
    Arc::from(format!(
        "binding {binding}: this tile's chunk was already handed out"
    ))
}

#[cold]
#[inline(never)]
fn misfit<T>(binding: usize, len: usize, start: usize) -> Arc<str> {
    Arc::from(format!(
        "binding {binding}: {len} bytes at offset {start} are not a whole number of \
         aligned {}s (size {}, alignment {})",
        std::any::type_name::<T>(),
        std::mem::size_of::<T>(),
        std::mem::align_of::<T>()
    ))
}

/// A bound dispatch as recorded: the user's closure and its bindings (in
/// the recording's arena; the command owns and drops them).
pub(crate) struct BoundDispatch<F> {
    pub(crate) f: F,
    pub(crate) bound: std::ptr::NonNull<[Bound]>,
}

// SAFETY: the bindings are buffer handles and slot numbers (`Send +
// Sync`), only read; `F` is `Send + Sync` (`dispatch_with`'s bound).
unsafe impl<F: Send + Sync> Send for BoundDispatch<F> {}
// SAFETY: as above.
unsafe impl<F: Send + Sync> Sync for BoundDispatch<F> {}

/// The tile loop of a bound dispatch of closure type `F` (a
/// [`RunTiles`](crate::device::recording::RunTiles)): one `TileIo` per tile.
///
/// # Safety
/// `data` points to a live `BoundDispatch<F>`; `slots` is null or points
/// to the submission's resolved table; the contract of [`TileIo::new`]
/// holds for every tile of `start..end`.
pub(crate) unsafe fn run_bound_tiles_of<F>(
    data: *const (),
    slots: *const SlotViews,
    grid: [u32; 3],
    start: u64,
    end: u64,
) -> Result<(), Error>
where
    F: Fn(&Tile, &TileIo<'_>) -> Result<(), Error>,
{
    // SAFETY: per contract.
    let d = unsafe { &*data.cast::<BoundDispatch<F>>() };
    // SAFETY: the bindings live as long as the command (per contract).
    let bound = unsafe { d.bound.as_ref() };
    let views: &[SlotView] = if slots.is_null() {
        &[]
    } else {
        // SAFETY: per contract.
        let s = unsafe { &*slots };
        &s.views[..s.len]
    };
    let mut resolved = [const { std::mem::MaybeUninit::<Resolved>::uninit() }; MAX_BINDINGS];
    for (r, b) in resolved.iter_mut().zip(bound) {
        r.write(b.resolve(views));
    }
    // SAFETY: the first `bound.len()` (at most `MAX_BINDINGS`: checked at
    // record) were written just above.
    let resolved: &[Resolved] =
        unsafe { std::slice::from_raw_parts(resolved.as_ptr().cast(), bound.len()) };
    crate::task::run_tiles(
        &|t: &Tile| {
            // SAFETY: per contract (`TileIo::new`): the action holds every
            // buffer these bindings resolve to.
            let io = unsafe { TileIo::new(resolved, t.linear_id()) };
            (d.f)(t, &io)
        },
        grid,
        start,
        end,
    )
}
