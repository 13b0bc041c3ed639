//! `CommandBuffer`: records fill / update / copy / dispatch / barrier into
//! a recording its device recycles (see `recording`); on the CPU device
//! every submission runs the recording as a task DAG on the executor,
//! built in pool memory (no re-recording, no allocation); on the CUDA
//! device `end` builds one CUDA graph that every submission launches, or,
//! for a one-shot command buffer, each submission issues the commands on
//! the stream directly.
//!
//! Commands between two barriers run in parallel; a barrier makes
//! everything after it wait for everything before it. Crossing a barrier
//! costs no barrier task when the side after it has one command (its
//! predecessors join on it directly); a barrier task forks only to several.

use std::fmt;

use super::recording::command::Command;
use super::recording::{RecordingPool, RecordingRef, Target};
use super::validate;
use super::Buffer;
use crate::error::{Error, ErrorKind};
use crate::sync::Arc;
use crate::task::Tile;

/// Records work for a device's queues. `Send`; ended with
/// [`end`](Self::end), then submittable any number of times (also while an
/// earlier submission still runs); [`reset`](Self::reset) starts over.
///
/// # Memory
///
/// Commands, `update` bytes, dispatch closures and kernel parameters are
/// stored in the command buffer's recording: an arena that its device
/// recycles. Once warm, making, recording, ending, submitting and dropping
/// a command buffer allocates nothing. Exactly when it does allocate:
///
/// - a recording that needs more bytes than its arena holds (a new one
///   holds [`RECORDING_INITIAL_BYTES`](super::RECORDING_INITIAL_BYTES))
///   allocates one more chunk, which it keeps: recording that much again
///   (after a reset, or in a recycled recording) allocates nothing;
/// - a command buffer made while every recording of the device is still
///   in use (recording, or held by submissions in flight) allocates a new
///   recording, which the device keeps once it is released.
///
/// ```
/// use std::time::Duration;
/// use fenceline::{Device, CpuConfig, Semaphore};
/// let device = Device::cpu_with(CpuConfig { workers: 2, queues: 1, ..Default::default() })?;
/// let buf = device.buffer(16)?;
/// let mut cb = device.command_buffer()?;
/// cb.fill(&buf, 0, 16, &[0xAB])?;
/// cb.barrier()?;
/// cb.update(&[1, 2, 3, 4], &buf, 4)?;
/// cb.end()?;
/// let done = Semaphore::new(0);
/// device.queue(0)?.execute(&[], &[(&done, 1)], &[&cb])?;
/// done.wait(1, Duration::from_secs(5))?;
/// let mut out = [0u8; 8];
/// buf.read(0, &mut out)?;
/// assert_eq!(out, [0xAB, 0xAB, 0xAB, 0xAB, 1, 2, 3, 4]);
/// # Ok::<(), fenceline::Error>(())
/// ```
pub struct CommandBuffer {
    pub(super) recording: RecordingRef,
}

impl fmt::Debug for CommandBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandBuffer")
            .field("ended", &self.recording.is_ended())
            .field("one_shot", &self.recording.is_one_shot())
            .field("stages", &self.recording.stage_count())
            .finish()
    }
}

impl CommandBuffer {
    pub(crate) fn new(pool: &Arc<RecordingPool>, one_shot: bool) -> Result<CommandBuffer, Error> {
        Ok(CommandBuffer {
            recording: RecordingPool::take(pool, one_shot)?,
        })
    }

    /// Checks that `buffer` is memory of this command buffer's device.
    pub(super) fn check_buffer(&self, buffer: &Buffer) -> Result<(), Error> {
        validate::of_device(&self.recording.pool().target, buffer)
    }

    /// Records `command` if it may join the open stage (dropped, with
    /// nothing recorded, on an error).
    pub(super) fn record(&mut self, command: Command) -> Result<(), Error> {
        let recording = self.recording_mut()?;
        validate::stage(recording, &command)?;
        recording.push(command)
    }

    /// The recording, while it is still recording.
    pub(super) fn recording_mut(&mut self) -> Result<&mut super::recording::Recording, Error> {
        if self.recording.is_ended() {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "command buffer already ended: reset it, or record into a new one",
            ));
        }
        debug_assert!(
            RecordingRef::is_unique(&self.recording),
            "only an ended recording is submitted"
        );
        // SAFETY: not ended, so never submitted since it was taken or reset:
        // this command buffer holds the only reference, borrowed mutably.
        Ok(unsafe { RecordingRef::get_mut(&mut self.recording) })
    }

    /// Fills `len` bytes at `offset` with `pattern` (1, 2 or 4 bytes,
    /// repeated). `offset` and `len` must be multiples of the pattern length.
    ///
    /// # Errors
    ///
    /// Nothing is recorded when this returns an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if `pattern` is not
    ///   1, 2 or 4 bytes long, if `offset` or `len` is not a multiple of its
    ///   length, or if `buffer` belongs to another device.
    /// - [`OutOfRange`](ErrorKind::OutOfRange) if `offset..offset + len`
    ///   does not fit in `buffer`.
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) if the
    ///   command buffer has already ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, ErrorKind, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let buf = device.buffer(8)?;
    /// let mut cb = device.command_buffer()?;
    /// cb.fill(&buf, 0, 8, &[0x12, 0x34])?; // a 2-byte pattern, repeated
    /// assert_eq!(cb.fill(&buf, 0, 8, &[1, 2, 3]).unwrap_err().kind(), ErrorKind::InvalidArgument);
    /// assert_eq!(cb.fill(&buf, 4, 8, &[0]).unwrap_err().kind(), ErrorKind::OutOfRange);
    /// cb.end()?;
    /// let done = Semaphore::new(0);
    /// device.queue(0)?.execute(&[], &[(&done, 1)], &[&cb])?;
    /// done.wait(1, Duration::from_secs(5))?;
    /// let mut out = [0; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [0x12, 0x34, 0x12, 0x34]);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn fill(
        &mut self,
        buffer: &Buffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<(), Error> {
        validate::fill(buffer, offset, len, pattern)?;
        self.check_buffer(buffer)?;
        let plen = pattern.len();
        let mut p = [0u8; 4];
        p[..plen].copy_from_slice(pattern);
        self.record(Command::Fill {
            buffer: buffer.clone(),
            offset,
            len,
            pattern: p,
            pattern_len: plen,
        })
    }

    /// Writes `data` at `offset` when it runs; `data` is copied now.
    ///
    /// # Errors
    ///
    /// Nothing is recorded when this returns an error:
    ///
    /// - [`OutOfRange`](ErrorKind::OutOfRange) if
    ///   `offset..offset + data.len()` does not fit in `buffer`.
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if `buffer` belongs
    ///   to another device.
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) if the
    ///   command buffer has already ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, ErrorKind, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let buf = device.buffer(8)?;
    /// let mut data = [1, 2, 3, 4];
    /// let mut cb = device.command_buffer()?;
    /// cb.update(&data, &buf, 4)?;
    /// data[0] = 9; // too late: the bytes were copied when recorded
    /// assert_eq!(cb.update(&data, &buf, 6).unwrap_err().kind(), ErrorKind::OutOfRange);
    /// cb.end()?;
    /// let done = Semaphore::new(0);
    /// device.queue(0)?.execute(&[], &[(&done, 1)], &[&cb])?;
    /// done.wait(1, Duration::from_secs(5))?;
    /// let mut out = [0; 8];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [0, 0, 0, 0, 1, 2, 3, 4]);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn update(&mut self, data: &[u8], buffer: &Buffer, offset: usize) -> Result<(), Error> {
        buffer.range(offset, data.len())?;
        self.check_buffer(buffer)?;
        let recording = self.recording_mut()?;
        let data = recording.alloc_bytes(data)?;
        self.record(Command::Update {
            buffer: buffer.clone(),
            offset,
            data,
        })
    }

    /// Copies `len` bytes. Ranges must be in bounds; overlapping ranges of
    /// one buffer are `InvalidArgument`.
    ///
    /// # Errors
    ///
    /// Nothing is recorded when this returns an error:
    ///
    /// - [`OutOfRange`](ErrorKind::OutOfRange) if the source or the
    ///   destination range does not fit in its buffer.
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if `src` and `dst`
    ///   are the same buffer and the ranges overlap (`len > 0`), or if either
    ///   buffer belongs to another device.
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) if the
    ///   command buffer has already ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, ErrorKind, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let buf = device.buffer(8)?;
    /// let mut cb = device.command_buffer()?;
    /// cb.update(&[1, 2, 3, 4], &buf, 0)?;
    /// cb.barrier()?; // the copy reads what the update wrote
    /// cb.copy(&buf, 0, &buf, 4, 4)?;
    /// assert_eq!(cb.copy(&buf, 0, &buf, 2, 4).unwrap_err().kind(), ErrorKind::InvalidArgument);
    /// cb.end()?;
    /// let done = Semaphore::new(0);
    /// device.queue(0)?.execute(&[], &[(&done, 1)], &[&cb])?;
    /// done.wait(1, Duration::from_secs(5))?;
    /// let mut out = [0; 8];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [1, 2, 3, 4, 1, 2, 3, 4]);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn copy(
        &mut self,
        src: &Buffer,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), Error> {
        validate::copy(src, src_offset, dst, dst_offset, len)?;
        self.check_buffer(src)?;
        self.check_buffer(dst)?;
        self.record(Command::Copy {
            src: src.clone(),
            src_offset,
            dst: dst.clone(),
            dst_offset,
            len,
        })
    }

    /// Runs `f` over every tile of `grid`, in parallel on the workers.
    ///
    /// # Errors
    ///
    /// Nothing is recorded when this returns an error:
    ///
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) on a CUDA
    ///   device's command buffer (a CPU closure cannot run there: record a
    ///   kernel `launch`, feature `cuda`), or if the command buffer has
    ///   already ended.
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if the grid's tile
    ///   count overflows `u64`.
    ///
    /// An error `f` returns for a tile is not returned here: it fails the
    /// signals of the submission that ran it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use fenceline::{Device, Semaphore, Tile};
    ///
    /// let device = Device::cpu()?;
    /// let tiles = Arc::new(AtomicU32::new(0));
    /// let counter = tiles.clone();
    /// let mut cb = device.command_buffer()?;
    /// cb.dispatch([4, 2, 1], move |_: &Tile| {
    ///     counter.fetch_add(1, Ordering::Relaxed);
    ///     Ok(())
    /// })?;
    /// cb.end()?;
    /// let done = Semaphore::new(0);
    /// device.queue(0)?.execute(&[], &[(&done, 1)], &[&cb])?;
    /// done.wait(1, Duration::from_secs(5))?;
    /// assert_eq!(tiles.load(Ordering::Relaxed), 8);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn dispatch<F>(&mut self, grid: [u32; 3], f: F) -> Result<(), Error>
    where
        F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static,
    {
        self.check_closures()?;
        crate::task::tile_count(grid)?;
        let f = self.recording_mut()?.alloc(f)?;
        let run: super::recording::command::RunTiles = super::recording::command::run_tiles_of::<F>;
        // An unsized coercion of the pointer: the closure stays in the
        // recording's arena, owned by the command.
        let f: std::ptr::NonNull<dyn super::recording::command::Recorded> = f;
        self.record(Command::Dispatch {
            grid,
            f,
            run,
            bindings: None,
        })
    }

    /// Records a dispatch of `f` over `grid` whose tiles read and write
    /// device buffers: `f` gets each tile and a [`TileIo`](super::TileIo)
    /// with the `bindings`' memory. A [`Binding::read`](super::Binding::read)
    /// buffer is the same `&[T]` for every tile; a
    /// [`Binding::write_chunks`](super::Binding::write_chunks) buffer gives
    /// tile `i` ([`Tile::linear_id`]) the bytes
    /// `[i * chunk, (i + 1) * chunk)` as `&mut [T]`.
    ///
    /// While its action runs it holds every bound buffer (see
    /// [`Buffer`]); a submission that would run it while another action
    /// uses a buffer it writes (or writes one it reads) fails with
    /// `FailedPrecondition` instead of running.
    ///
    /// # Errors
    ///
    /// Nothing is recorded when this returns an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument): a grid whose tile
    ///   count overflows; more than [`MAX_BINDINGS`](super::MAX_BINDINGS)
    ///   bindings; a zero chunk, or chunks of the grid's tiles that do not
    ///   fit their buffer; a buffer bound twice when either binding writes
    ///   it (a dispatch may not read what it writes); a buffer of another
    ///   device; another command of the current stage writing a buffer
    ///   this one binds, or touching one it writes (record a barrier).
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) if the
    ///   command buffer has already ended, or belongs to a CUDA device.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Binding, Device, Error, Semaphore, Tile, TileIo};
    ///
    /// let device = Device::cpu()?;
    /// let (x, y) = (device.buffer(1024 * 4)?, device.buffer(1024 * 4)?);
    /// let ones: Vec<u8> = (0..1024).flat_map(|i| (i as f32).to_ne_bytes()).collect();
    /// x.write(0, &ones)?;
    /// let mut cb = device.command_buffer()?;
    /// cb.dispatch_with(
    ///     [16, 1, 1],
    ///     &[Binding::read(&x), Binding::write_chunks(&y, 256)],
    ///     |t: &Tile, io: &TileIo<'_>| -> Result<(), Error> {
    ///         let x: &[f32] = io.read(0)?;
    ///         let y: &mut [f32] = io.chunk(1)?; // 64 floats
    ///         let base = t.linear_id() as usize * 64;
    ///         for (i, out) in y.iter_mut().enumerate() {
    ///             *out = 2.0 * x[base + i];
    ///         }
    ///         Ok(())
    ///     },
    /// )?;
    /// cb.end()?;
    /// let done = Semaphore::new(0);
    /// device.queue(0)?.execute(&[], &[(&done, 1)], &[&cb])?;
    /// done.wait(1, Duration::from_secs(5))?;
    /// let mut out = [0u8; 4];
    /// y.read(4 * 1000, &mut out)?;
    /// assert_eq!(f32::from_ne_bytes(out), 2000.0);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn dispatch_with<F>(
        &mut self,
        grid: [u32; 3],
        bindings: &[super::Binding<'_>],
        f: F,
    ) -> Result<(), Error>
    where
        F: Fn(&Tile, &super::TileIo<'_>) -> Result<(), Error> + Send + Sync + 'static,
    {
        self.check_closures()?;
        let tiles = crate::task::tile_count(grid)?;
        for b in bindings {
            if let Some(buffer) = b.buffer() {
                self.check_buffer(buffer)?;
            }
        }
        super::data::binding::check(bindings, tiles)?;
        let recording = self.recording_mut()?;
        let bound = recording.alloc_slice(bindings.len(), |i| {
            super::data::binding::Bound::new(&bindings[i])
        })?;
        // The tiles reach the bindings through this value (see
        // `run_bound_tiles_of`): the command drops it before the bindings.
        let dispatch = super::data::binding::BoundDispatch { f, bound };
        let run: super::recording::command::RunTiles =
            super::data::binding::run_bound_tiles_of::<F>;
        let f = match recording.alloc(dispatch) {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: made just above, owned by nothing else.
                unsafe { bound.as_ptr().drop_in_place() };
                return Err(e);
            }
        };
        let f: std::ptr::NonNull<dyn super::recording::command::Recorded> = f;
        self.record(Command::Dispatch {
            grid,
            f,
            run,
            bindings: Some(bound),
        })
    }

    /// Everything recorded after waits for everything recorded before.
    ///
    /// # Errors
    ///
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) if the
    ///   command buffer has already ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, ErrorKind, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let buf = device.buffer(4)?;
    /// let mut cb = device.command_buffer()?;
    /// cb.fill(&buf, 0, 4, &[1])?;
    /// cb.barrier()?; // the update runs after the fill
    /// cb.update(&[2], &buf, 0)?;
    /// cb.end()?;
    /// assert_eq!(cb.barrier().unwrap_err().kind(), ErrorKind::FailedPrecondition);
    /// let done = Semaphore::new(0);
    /// device.queue(0)?.execute(&[], &[(&done, 1)], &[&cb])?;
    /// done.wait(1, Duration::from_secs(5))?;
    /// let mut out = [0; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [2, 1, 1, 1]);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn barrier(&mut self) -> Result<(), Error> {
        self.recording_mut()?.barrier();
        Ok(())
    }

    /// Ends recording; the command buffer can now be submitted, any number
    /// of times. On a CUDA device this builds and instantiates the CUDA
    /// graph.
    ///
    /// # Errors
    ///
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) if the
    ///   command buffer has already ended.
    /// - [`Internal`](ErrorKind::Internal) on a CUDA device, if the driver
    ///   fails to build or instantiate the graph; the command buffer is then
    ///   still recording.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, ErrorKind, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let (queue, buf) = (device.queue(0)?, device.buffer(4)?);
    /// let mut cb = device.command_buffer()?;
    /// cb.fill(&buf, 0, 4, &[1])?;
    /// let early = queue.execute(&[], &[], &[&cb]).unwrap_err(); // not ended yet
    /// assert_eq!(early.kind(), ErrorKind::FailedPrecondition);
    /// cb.end()?;
    /// assert_eq!(cb.end().unwrap_err().kind(), ErrorKind::FailedPrecondition);
    /// let done = Semaphore::new(0);
    /// queue.execute(&[], &[(&done, 1)], &[&cb])?;
    /// queue.execute(&[(&done, 1)], &[(&done, 2)], &[&cb])?; // and again
    /// done.wait(2, Duration::from_secs(5))?;
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn end(&mut self) -> Result<(), Error> {
        let recording = self.recording_mut()?;
        if let Target::Cuda(shared) = &recording.pool().target {
            // On failure: still recording, exactly as before the call.
            let graph = shared.graph(recording)?;
            recording.graph = graph;
        }
        if let Target::Vulkan(shared) = &recording.pool().target {
            // On failure: still recording, exactly as before the call.
            let shared = shared.clone();
            shared.stage_bytes(recording)?;
        }
        recording.set_ended();
        Ok(())
    }

    /// Starts a new recording, keeping the memory: the command buffer is
    /// recording again, empty, as if just made (and one-shot if it was).
    ///
    /// Submissions of the old recording still in flight are unaffected:
    /// they hold it until they complete, and it is recycled then. Only
    /// when none is in flight does the command buffer reuse its own
    /// recording in place; otherwise it takes another from its device
    /// (once warm, a released one: no allocation either way). The old
    /// recording's captures (dispatch closures, buffers) are dropped when
    /// its last submission completes.
    ///
    /// # Errors
    ///
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if a new
    ///   recording is needed and its memory cannot be had; the command
    ///   buffer is then unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let (queue, buf) = (device.queue(0)?, device.buffer(4)?);
    /// let (go, done) = (Semaphore::new(0), Semaphore::new(0));
    /// let mut cb = device.command_buffer()?;
    /// cb.fill(&buf, 0, 4, &[1])?;
    /// cb.end()?;
    /// queue.execute(&[(&go, 1)], &[(&done, 1)], &[&cb])?; // waits for `go`
    /// cb.reset()?; // the submission above keeps the old recording
    /// cb.fill(&buf, 0, 4, &[2])?;
    /// cb.end()?;
    /// queue.execute(&[(&done, 1)], &[(&done, 2)], &[&cb])?;
    /// go.signal(1)?;
    /// done.wait(2, Duration::from_secs(5))?;
    /// let mut out = [0; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [2; 4]); // the fill of 1, then the fill of 2
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn reset(&mut self) -> Result<(), Error> {
        if RecordingRef::is_unique(&self.recording) {
            // SAFETY: the only reference, borrowed mutably.
            let panicked = unsafe { RecordingRef::get_mut(&mut self.recording) }.reset();
            panicked.resume();
        } else {
            let fresh = RecordingPool::take(self.recording.pool(), self.recording.is_one_shot())?;
            self.recording = fresh;
        }
        Ok(())
    }

    /// A dispatch of a closure: only the CPU device runs them.
    fn check_closures(&self) -> Result<(), Error> {
        let which = match self.recording.pool().target {
            Target::Cpu(_) => return Ok(()),
            Target::Cuda(_) => "a CUDA device: record a kernel launch",
            Target::Vulkan(_) => "a Vulkan device: record a SPIR-V dispatch",
        };
        Err(Error::new(
            ErrorKind::FailedPrecondition,
            format!("dispatch of a CPU closure recorded for {which}"),
        ))
    }

    /// The ended recording, for submission.
    pub(crate) fn recording_for_submit(&self) -> Result<&RecordingRef, Error> {
        if self.recording.is_ended() {
            Ok(&self.recording)
        } else {
            Err(Error::new(
                ErrorKind::FailedPrecondition,
                "command buffer submitted before end()",
            ))
        }
    }
}

static_assertions::assert_impl_all!(CommandBuffer: Send);
