//! `CommandBuffer`: records fill / update / copy / dispatch / barrier once;
//! on the CPU device every submission runs the recording as a task DAG on
//! the executor, built in pool memory (no re-recording, no allocation); on
//! the CUDA device `end` builds one CUDA graph that every submission
//! launches.
//!
//! Commands between two barriers run in parallel; a barrier makes
//! everything after it wait for everything before it. Crossing a barrier
//! costs no barrier task when the side after it has one command (its
//! predecessors join on it directly); a barrier task forks only to several.

use std::fmt;
use std::sync::Arc;

use super::Buffer;
use crate::error::{Error, ErrorKind};
use crate::task::Tile;

/// A dispatch closure, shared by every submission of the recording.
pub(crate) type TileFn = Arc<dyn Fn(&Tile) -> Result<(), Error> + Send + Sync>;

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
        data: Box<[u8]>,
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
        f: TileFn,
    },
    #[cfg(feature = "cuda")]
    Launch(super::cuda::Launch),
}

/// The device a command buffer records for.
#[derive(Clone)]
pub(crate) enum Target {
    Cpu,
    #[cfg(feature = "cuda")]
    Cuda(Arc<super::cuda::CudaShared>),
}

impl Command {
    /// Runs a non-dispatch command.
    pub(crate) fn run(&self) -> Result<(), Error> {
        match self {
            Command::Fill {
                buffer,
                offset,
                len,
                pattern,
                pattern_len,
            } => buffer.fill(*offset, *len, &pattern[..*pattern_len]),
            Command::Update {
                buffer,
                offset,
                data,
            } => buffer.write(*offset, data),
            Command::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                len,
            } => src.copy_to(*src_offset, dst, *dst_offset, *len),
            Command::Dispatch { .. } => Err(Error::new(
                ErrorKind::Internal,
                "a dispatch runs as a dispatch task",
            )),
            #[cfg(feature = "cuda")]
            Command::Launch(_) => Err(Error::new(
                ErrorKind::FailedPrecondition,
                "a CUDA kernel cannot run on the CPU device",
            )),
        }
    }

    /// A command that moves no bytes (skipped by the CUDA graph).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn is_empty_op(&self) -> bool {
        match self {
            Command::Fill { len, .. } | Command::Copy { len, .. } => *len == 0,
            Command::Update { data, .. } => data.is_empty(),
            _ => false,
        }
    }
}

/// An ended recording: stages of commands separated by barriers.
pub(crate) struct Recording {
    /// For a CUDA recording: its context and graph (`None`: no command).
    /// Declared first: the graph is destroyed before the buffers it uses.
    #[cfg(feature = "cuda")]
    cuda: Option<(
        Arc<super::cuda::driver::Context>,
        Option<super::cuda::graph::CudaGraph>,
    )>,
    pub(crate) stages: Vec<Vec<Command>>,
}

impl Recording {
    /// Whether it was recorded for the CPU device.
    pub(crate) fn is_cpu(&self) -> bool {
        #[cfg(feature = "cuda")]
        if self.cuda.is_some() {
            return false;
        }
        true
    }

    /// Whether it was recorded for the CUDA device of `ctx`.
    #[cfg(feature = "cuda")]
    pub(crate) fn is_for(&self, ctx: &Arc<super::cuda::driver::Context>) -> bool {
        matches!(&self.cuda, Some((c, _)) if Arc::ptr_eq(c, ctx))
    }

    /// The graph every submission launches (CUDA recordings).
    #[cfg(feature = "cuda")]
    pub(crate) fn cuda_graph(&self) -> Option<&super::cuda::graph::CudaGraph> {
        self.cuda.as_ref().and_then(|(_, g)| g.as_ref())
    }
}

/// Records work for a device's queues. `Send`; ended with
/// [`end`](Self::end), then submittable any number of times (also while an
/// earlier submission still runs).
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
    target: Target,
    stages: Vec<Vec<Command>>,
    ended: Option<Arc<Recording>>,
}

impl fmt::Debug for CommandBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stages = match &self.ended {
            Some(recording) => recording.stages.len(),
            None => self.stages.len(),
        };
        f.debug_struct("CommandBuffer")
            .field("ended", &self.ended.is_some())
            .field("stages", &stages)
            .finish()
    }
}

impl CommandBuffer {
    pub(crate) fn new(target: Target) -> CommandBuffer {
        CommandBuffer {
            target,
            stages: vec![Vec::new()],
            ended: None,
        }
    }

    /// Checks that `buffer` is memory of this command buffer's device.
    fn check_buffer(&self, buffer: &Buffer) -> Result<(), Error> {
        let ok = match &self.target {
            Target::Cpu => buffer.host().is_some(),
            #[cfg(feature = "cuda")]
            Target::Cuda(shared) => buffer.on_context(&shared.ctx),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::InvalidArgument,
                "buffer belongs to another device than the command buffer",
            ))
        }
    }

    fn recording(&mut self) -> Result<&mut Vec<Command>, Error> {
        if self.ended.is_some() {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "command buffer already ended: record into a new one",
            ));
        }
        match self.stages.last_mut() {
            Some(stage) => Ok(stage),
            None => Err(Error::new(
                ErrorKind::Internal,
                "command buffer has no stage",
            )),
        }
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
        let plen = pattern.len();
        if !matches!(plen, 1 | 2 | 4) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("fill pattern length {plen}: must be 1, 2 or 4"),
            ));
        }
        if offset % plen != 0 || len % plen != 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("fill offset {offset} length {len}: must be multiples of the pattern length {plen}"),
            ));
        }
        buffer.range(offset, len)?;
        self.check_buffer(buffer)?;
        let mut p = [0u8; 4];
        p[..plen].copy_from_slice(pattern);
        let buffer = buffer.clone();
        self.recording()?.push(Command::Fill {
            buffer,
            offset,
            len,
            pattern: p,
            pattern_len: plen,
        });
        Ok(())
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
        let buffer = buffer.clone();
        self.recording()?.push(Command::Update {
            buffer,
            offset,
            data: data.into(),
        });
        Ok(())
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
        let s = src.range(src_offset, len)?;
        let d = dst.range(dst_offset, len)?;
        if src.same(dst) && len > 0 && s.start < d.end && d.start < s.end {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("copy within one buffer: {s:?} overlaps {d:?}"),
            ));
        }
        self.check_buffer(src)?;
        self.check_buffer(dst)?;
        let (src, dst) = (src.clone(), dst.clone());
        self.recording()?.push(Command::Copy {
            src,
            src_offset,
            dst,
            dst_offset,
            len,
        });
        Ok(())
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
        #[cfg(feature = "cuda")]
        if let Target::Cuda(_) = self.target {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "dispatch of a CPU closure recorded for a CUDA device: record a kernel launch",
            ));
        }
        crate::task::tile_count(grid)?;
        let f: TileFn = Arc::new(f);
        self.recording()?.push(Command::Dispatch { grid, f });
        Ok(())
    }

    /// Launches `kernel` over `grid` blocks of `block` threads with
    /// `shared_mem` bytes of dynamic shared memory and `args` as its
    /// parameters (feature `cuda`).
    ///
    /// Errors: `FailedPrecondition` on a CPU device's command buffer;
    /// `InvalidArgument` for a zero dimension or a kernel or buffer of
    /// another device.
    #[cfg(feature = "cuda")]
    pub fn launch(
        &mut self,
        kernel: &super::Kernel,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        args: &[super::KernelArg<'_>],
    ) -> Result<(), Error> {
        let Target::Cuda(shared) = &self.target else {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "kernel launch recorded for the CPU device: record a dispatch",
            ));
        };
        let launch = super::cuda::Launch::new(kernel, grid, block, shared_mem, args)?;
        if !Arc::ptr_eq(launch.context(), &shared.ctx) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "kernel belongs to another device than the command buffer",
            ));
        }
        self.recording()?.push(Command::Launch(launch));
        Ok(())
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
        let stage = self.recording()?;
        if !stage.is_empty() {
            self.stages.push(Vec::new());
        }
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
        self.recording()?;
        // Only the last stage can be empty (`barrier` opens a stage only
        // after a non-empty one): a trailing barrier, or nothing recorded.
        let trailing_barrier = self.stages.last().is_some_and(|s| s.is_empty());
        if trailing_barrier {
            self.stages.pop();
        }
        debug_assert!(self.stages.iter().all(|s| !s.is_empty()));
        #[cfg(feature = "cuda")]
        let cuda = match &self.target {
            Target::Cpu => None,
            Target::Cuda(shared) => {
                match super::cuda::graph::build(&shared.ctx, &shared.pinned, &self.stages) {
                    Ok(graph) => Some((shared.ctx.clone(), graph)),
                    Err(e) => {
                        // Still recording, exactly as before the call.
                        if trailing_barrier {
                            self.stages.push(Vec::new());
                        }
                        return Err(e);
                    }
                }
            }
        };
        let mut stages = std::mem::take(&mut self.stages);
        stages.shrink_to_fit();
        self.ended = Some(Arc::new(Recording {
            #[cfg(feature = "cuda")]
            cuda,
            stages,
        }));
        Ok(())
    }

    /// The ended recording, for submission.
    pub(crate) fn recording_for_submit(&self) -> Result<&Arc<Recording>, Error> {
        self.ended.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::FailedPrecondition,
                "command buffer submitted before end()",
            )
        })
    }
}

static_assertions::assert_impl_all!(CommandBuffer: Send);
