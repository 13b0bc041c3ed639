//! `CommandBuffer`: records fill / update / copy / dispatch / barrier once;
//! every submission runs the recording as a task DAG on the CPU device's
//! executor, built in pool memory (no re-recording, no allocation).
//!
//! Commands between two barriers run in parallel; a barrier makes
//! everything after it wait for everything before it. Crossing a barrier
//! costs no barrier task when the side after it has one command (its
//! predecessors join on it directly); a barrier task forks only to several.

use std::fmt;
use std::sync::Arc;

use crate::device::Buffer;
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
            Command::Dispatch { .. } => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    "a dispatch runs as a dispatch task",
                ))
            }
        }
        Ok(())
    }
}

/// An ended recording: stages of commands separated by barriers.
pub(crate) struct Recording {
    pub(crate) stages: Vec<Vec<Command>>,
}

/// Records work for a device's queues. `Send`; ended with
/// [`end`](Self::end), then submittable any number of times (also while an
/// earlier submission still runs).
///
/// ```
/// use fenceline::{Device, CpuConfig, Semaphore, Timeout};
/// let device = Device::cpu_with(CpuConfig { workers: 2, queues: 1, ..Default::default() })?;
/// let buf = device.buffer(16)?;
/// let mut cb = device.command_buffer()?;
/// cb.fill(&buf, 0, 16, &[0xAB])?;
/// cb.barrier()?;
/// cb.update(&[1, 2, 3, 4], &buf, 4)?;
/// cb.end()?;
/// let done = Semaphore::new(0);
/// device.queue(0)?.execute(&[], &[(&done, 1)], &[&cb])?;
/// done.wait(1, Timeout::Never)?;
/// let mut out = [0u8; 8];
/// buf.read(0, &mut out)?;
/// assert_eq!(out, [0xAB, 0xAB, 0xAB, 0xAB, 1, 2, 3, 4]);
/// # Ok::<(), fenceline::Error>(())
/// ```
pub struct CommandBuffer {
    stages: Vec<Vec<Command>>,
    ended: Option<Arc<Recording>>,
}

impl fmt::Debug for CommandBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandBuffer")
            .field("ended", &self.ended.is_some())
            .finish()
    }
}

impl CommandBuffer {
    pub(crate) fn new() -> CommandBuffer {
        CommandBuffer {
            stages: vec![Vec::new()],
            ended: None,
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
    pub fn update(&mut self, data: &[u8], buffer: &Buffer, offset: usize) -> Result<(), Error> {
        buffer.range(offset, data.len())?;
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
    pub fn dispatch<F>(&mut self, grid: [u32; 3], f: F) -> Result<(), Error>
    where
        F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static,
    {
        let f: TileFn = Arc::new(f);
        self.recording()?.push(Command::Dispatch { grid, f });
        Ok(())
    }

    /// Everything recorded after waits for everything recorded before.
    pub fn barrier(&mut self) -> Result<(), Error> {
        let stage = self.recording()?;
        if !stage.is_empty() {
            self.stages.push(Vec::new());
        }
        Ok(())
    }

    /// Ends recording; the command buffer can now be submitted, any number
    /// of times.
    ///
    /// Errors: `FailedPrecondition` if already ended.
    pub fn end(&mut self) -> Result<(), Error> {
        self.recording()?;
        let mut stages = std::mem::take(&mut self.stages);
        stages.retain(|s| !s.is_empty());
        stages.shrink_to_fit();
        self.ended = Some(Arc::new(Recording { stages }));
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
