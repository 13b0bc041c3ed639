//! [`Queue`]: a device queue's handle, and what it submits (execute with
//! or without a binding table, barrier, host call, alloca, dealloca).

use std::fmt;
use std::sync::Arc;

use super::data::table;
use super::recording::RecordingRef;
use super::validate;
use super::work::Work;
use super::{
    host_fn, on_backend, Buffer, CommandBuffer, DeviceBackend, DeviceInner,
    EXECUTE_INLINE_COMMAND_BUFFERS,
};
use crate::error::{Error, ErrorKind};
use crate::semaphore::Semaphore;
use crate::task::Priority;

/// A device queue: a cheap `Clone + Send + Sync` handle.
#[derive(Clone)]
pub struct Queue {
    pub(super) device: Arc<DeviceInner>,
    pub(super) index: usize,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue").field("index", &self.index).finish()
    }
}

impl Queue {
    /// The queue's priority, as its device was made with
    /// ([`Device::cpu_with_priorities`](super::Device::cpu_with_priorities),
    /// `Device::cuda_with_priorities`; `Normal` otherwise).
    ///
    /// ```
    /// use fenceline::{CpuConfig, Device, Priority};
    ///
    /// let device = Device::cpu_with_priorities(
    ///     CpuConfig { queues: 2, ..Default::default() },
    ///     &[Priority::High],
    /// )?;
    /// assert_eq!(device.queue(0)?.priority(), Priority::High);
    /// assert_eq!(device.queue(1)?.priority(), Priority::Normal);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn priority(&self) -> Priority {
        on_backend!(&*self.device, |d| d.queue_priority(self.index))
    }

    fn submit(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        payload: Work,
    ) -> Result<(), Error> {
        on_backend!(&*self.device, |d| d
            .submit(self.index, waits, signals, payload))
    }

    /// Runs `command_buffers` in order once every wait is reached, then
    /// signals every signal (or fails them with the first error: a failed
    /// wait, a failing command or tile, a panic). Up to
    /// [`EXECUTE_INLINE_COMMAND_BUFFERS`] command buffers are kept without
    /// allocating; more take one allocation.
    ///
    /// # Errors
    ///
    /// Nothing is submitted and no semaphore is touched when this returns
    /// an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if a wait or signal
    ///   value is `u64::MAX` (reserved for failure).
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) on a CUDA device,
    ///   if a command buffer names a buffer from another queue's
    ///   [`alloca`](Self::alloca).
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition) if a command
    ///   buffer was not [ended](CommandBuffer::end) or was recorded for
    ///   another device, or names a buffer whose [`dealloca`](Self::dealloca)
    ///   ran (if it runs between this call and the execute's issue, the
    ///   execute fails instead of running: its signals fail with
    ///   `FailedPrecondition`).
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if the queue's
    ///   action pool cannot grow (out of memory, or at its size limit).
    ///
    /// Errors of the work itself are not returned here: they fail the
    /// signal semaphores.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let buf = device.buffer(4)?;
    /// let mut cb = device.command_buffer()?;
    /// cb.update(&[1, 2, 3, 4], &buf, 0)?;
    /// cb.end()?;
    /// let (start, done) = (Semaphore::new(0), Semaphore::new(0));
    /// device.queue(0)?.execute(&[(&start, 1)], &[(&done, 1)], &[&cb])?;
    /// start.signal(1)?; // the command buffer may run from now on
    /// done.wait(1, Duration::from_secs(5))?;
    /// let mut out = [0; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [1, 2, 3, 4]);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn execute(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        command_buffers: &[&CommandBuffer],
    ) -> Result<(), Error> {
        self.execute_table(waits, signals, command_buffers, None)
    }

    /// As [`execute`](Self::execute), with a binding table: slot `i` of
    /// the command buffers' slot bindings
    /// ([`Binding::slot_read`](super::Binding::slot_read),
    /// [`Binding::slot_write_chunks`](super::Binding::slot_write_chunks)) is
    /// `table[i]`, for this submission only. One recording runs on new
    /// buffers every submission, and the table costs no allocation once
    /// warm. The action holds the table's buffers as it holds the ones its
    /// command buffers name.
    ///
    /// On a CUDA device the slots are kernel arguments
    /// (`KernelArg::Slot`, with the `cuda` feature), resolved when the
    /// action is issued: a one-shot command buffer launches with them, a
    /// reusable one first sets its graph's kernel nodes' parameters
    /// (`cuGraphExecKernelNodeSetParams`). A buffer from
    /// [`alloca`](Self::alloca) may be in the table before its alloca ran,
    /// as long as the alloca is issued before this execute (order it with
    /// a semaphore): the execute fails with `FailedPrecondition` otherwise,
    /// or if the buffer's dealloca was issued first, and nothing of it is
    /// enqueued.
    ///
    /// # Errors
    ///
    /// Nothing is submitted and no semaphore is touched when this returns
    /// an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument): as for `execute`;
    ///   a table of more than [`MAX_SLOTS`](super::MAX_SLOTS) buffers, or shorter than a slot
    ///   a command buffer binds; a buffer shorter than its slot's chunks,
    ///   or of another device; one buffer in two slots where either is
    ///   written, or in a slot and bound directly by a command buffer of the
    ///   submission where either writes it; on a CUDA device, a buffer from
    ///   another queue's `alloca`, or a buffer shorter than a slot
    ///   argument's offset.
    /// - [`FailedPrecondition`](ErrorKind::FailedPrecondition): as for
    ///   `execute`; a buffer from `alloca` whose dealloca ran.
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted): as for
    ///   `execute`, or the table pool cannot grow.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Binding, Device, Semaphore, Tile, TileIo};
    ///
    /// let device = Device::cpu()?;
    /// let mut cb = device.command_buffer()?;
    /// cb.dispatch_with(
    ///     [2, 1, 1],
    ///     &[Binding::slot_read(0), Binding::slot_write_chunks(1, 4)],
    ///     |t: &Tile, io: &TileIo<'_>| {
    ///         let x: &[u32] = io.read(0)?;
    ///         io.chunk::<u32>(1)?[0] = x[t.linear_id() as usize] * 10;
    ///         Ok(())
    ///     },
    /// )?;
    /// cb.end()?;
    /// let q = device.queue(0)?;
    /// let done = Semaphore::new(0);
    /// for frame in 1..=3u32 {
    ///     let (x, y) = (device.buffer(8)?, device.buffer(8)?); // new buffers
    ///     x.write(0, &[frame.to_ne_bytes(), (frame + 1).to_ne_bytes()].concat())?;
    ///     q.execute_with(&[], &[(&done, u64::from(frame))], &[&cb], &[&x, &y])?;
    ///     done.wait(u64::from(frame), Duration::from_secs(5))?;
    ///     let mut out = [0u8; 8];
    ///     y.read(0, &mut out)?;
    ///     assert_eq!(out, [(10 * frame).to_ne_bytes(), (10 * frame + 10).to_ne_bytes()].concat()[..]);
    /// }
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn execute_with(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        command_buffers: &[&CommandBuffer],
        table: &[&Buffer],
    ) -> Result<(), Error> {
        if table.is_empty() {
            return self.execute_table(waits, signals, command_buffers, None);
        }
        let recs = command_buffers
            .iter()
            .filter_map(|cb| cb.recording_for_submit().ok().map(|r| &**r));
        let t = table::SlotTable::new(table, recs)?;
        // A table's buffer from an alloca needs no address yet: its alloca
        // may be issued between now and this execute's issue (which checks
        // it has been).
        on_backend!(&*self.device, |d| if d.checks_uses() {
            t.each_used(|b| d.check_use(b, self.index, false))?;
        });
        self.execute_table(waits, signals, command_buffers, Some(t))
    }

    fn execute_table(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        command_buffers: &[&CommandBuffer],
        table: Option<table::SlotTable>,
    ) -> Result<(), Error> {
        let mut inline: [Option<RecordingRef>; EXECUTE_INLINE_COMMAND_BUFFERS] = Default::default();
        let mut more = Vec::new();
        for (i, cb) in command_buffers.iter().enumerate() {
            let r = cb.recording_for_submit()?;
            validate::recordings(&self.device, &[r])?;
            on_backend!(&*self.device, |d| if d.checks_uses() {
                r.each_cuda_transient(|b| d.check_use(b, self.index, true))?;
            });
            if table.is_none() && r.has_slots() {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "a command buffer binds slots: it needs a binding table with every slot it \
                     binds (execute_with)",
                ));
            }
            let r = r.clone();
            if i < EXECUTE_INLINE_COMMAND_BUFFERS {
                inline[i] = Some(r);
            } else {
                more.push(r);
            }
        }
        let payload = if command_buffers.is_empty() {
            Work::Barrier
        } else {
            Work::Execute {
                inline,
                more: (!more.is_empty()).then(|| more.into_boxed_slice()),
                held: false,
                table,
            }
        };
        on_backend!(&*self.device, |d| d.check_execute(&payload))?;
        self.submit(waits, signals, payload)
    }

    /// Queue-ordered transient memory: a buffer of `len` zeroed bytes that
    /// becomes usable once this action runs (after `waits`), and before it
    /// signals `signals`. Work ordered after those signals may use it;
    /// anything that uses it before (an action, a host `read` or `write`)
    /// fails with `FailedPrecondition` instead, never touching its bytes.
    /// Give it back with [`dealloca`](Self::dealloca).
    ///
    /// The memory comes from the device's pool of power-of-two size
    /// classes (up to 1 GiB; a larger one is allocated on its own, freed
    /// rather than pooled when its last handle drops, and given back with
    /// `dealloca` all the same): a frame loop of alloca, work and dealloca
    /// allocates nothing once warm.
    /// The bytes are zeroed at this call (so any `Pod` view of them is
    /// defined), which costs a `memset` of `len` bytes.
    ///
    /// On a CUDA device the action enqueues `cuMemAllocAsync` and a zeroing
    /// memset on this queue's stream when it is issued (its waits met), and
    /// "ran" means that: from then on the buffer can be recorded into
    /// command buffers (its device address exists only from then) and used
    /// by work issued to this queue after it, which the stream runs after
    /// the allocation. Host [`read`](Buffer::read) and
    /// [`write`](Buffer::write) need the stream to have reached it: they
    /// work once the action completed (its signals are reached). The
    /// buffer is used only on this queue: submitting work that names it
    /// to another queue is `InvalidArgument`. Each alloca is one driver
    /// allocation (and one small host allocation for the handle).
    ///
    /// # Errors
    ///
    /// Nothing is submitted when this returns an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument): `len` is 0, or a
    ///   wait or signal value is `u64::MAX`.
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted): the pool
    ///   cannot grow, or the queue's action pool cannot.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, ErrorKind, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let q = device.queue(0)?;
    /// let (gate, s) = (Semaphore::new(0), Semaphore::new(0));
    /// let tmp = q.alloca(&[(&gate, 1)], &[(&s, 1)], 1 << 16)?;
    /// // Not usable before its alloca ran:
    /// assert_eq!(tmp.write(0, &[1]).unwrap_err().kind(), ErrorKind::FailedPrecondition);
    /// gate.signal(1)?;
    /// s.wait(1, Duration::from_secs(5))?;
    /// tmp.write(0, &[1, 2, 3])?;
    /// q.dealloca(&[(&s, 1)], &[(&s, 2)], &tmp)?;
    /// s.wait(2, Duration::from_secs(5))?;
    /// // Nor after its dealloca ran:
    /// let mut out = [0u8; 3];
    /// assert_eq!(tmp.read(0, &mut out).unwrap_err().kind(), ErrorKind::FailedPrecondition);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn alloca(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        len: usize,
    ) -> Result<Buffer, Error> {
        if len == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "alloca of 0 bytes: must be at least 1",
            ));
        }
        let buffer = on_backend!(&*self.device, |d| d.alloca(len, self.index))?;
        self.submit(waits, signals, Work::Alloca(buffer.clone()))?;
        Ok(buffer)
    }

    /// Gives a buffer from [`alloca`](Self::alloca) back to the device's
    /// pool once `waits` are met: from then on nothing may use it (an
    /// action or host copy that tries fails with `FailedPrecondition`),
    /// and its memory is recycled when its last handle is dropped. If an
    /// action still uses the buffer when this one runs, this one fails
    /// (its signals fail with `FailedPrecondition`) and the buffer stays
    /// usable; so does a second dealloca of one buffer.
    ///
    /// On a CUDA device the action enqueues `cuMemFreeAsync` on this
    /// queue's stream when it is issued: work issued to this queue before
    /// it (all the work that may use the buffer) runs before the free even
    /// if it is still running, and anything issued after it, recorded or
    /// copied from the host after it, fails with `FailedPrecondition`. It
    /// fails instead (the buffer stays usable) only while a host `read` or
    /// `write` of the buffer is copying.
    ///
    /// # Errors
    ///
    /// Nothing is submitted when this returns an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument): `buffer` did not
    ///   come from this device's `alloca` (on a CUDA device: from this
    ///   queue's), or a wait or signal value is `u64::MAX`.
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted): the queue's
    ///   action pool cannot grow.
    pub fn dealloca(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        buffer: &Buffer,
    ) -> Result<(), Error> {
        let ours = on_backend!(&*self.device, |d| d.owns_transient(buffer, self.index))?;
        if !ours {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "dealloca of a buffer that did not come from this device's alloca",
            ));
        }
        self.submit(waits, signals, Work::Dealloca(buffer.clone()))
    }

    /// `execute` with no command buffers: signals once the waits are reached.
    ///
    /// # Errors
    ///
    /// Nothing is submitted and no semaphore is touched when this returns
    /// an error:
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if a wait or signal
    ///   value is `u64::MAX` (reserved for failure).
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if the queue's
    ///   action pool cannot grow (out of memory, or at its size limit).
    ///
    /// A failed wait is not returned here: it fails the signals.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let (a, b, joined) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    /// device.queue(0)?.barrier(&[(&a, 1), (&b, 1)], &[(&joined, 1)])?;
    /// a.signal(1)?;
    /// b.signal(1)?;
    /// joined.wait(1, Duration::from_secs(5))?;
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn barrier(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
    ) -> Result<(), Error> {
        self.submit(waits, signals, Work::Barrier)
    }

    /// Runs `f` on a worker once every wait is reached (on a CUDA device:
    /// on the queue's completion thread, once the stream reached it; `f`
    /// may make CUDA calls); its result (or a panic, as an error) signals
    /// or fails the signals. A closure capturing
    /// up to [`HOST_CALL_INLINE_BYTES`](super::HOST_CALL_INLINE_BYTES) bytes is stored in pool memory; a
    /// larger one takes one allocation.
    ///
    /// # Errors
    ///
    /// Nothing is submitted and no semaphore is touched when this returns
    /// an error (`f` is dropped, not run):
    ///
    /// - [`InvalidArgument`](ErrorKind::InvalidArgument) if a wait or signal
    ///   value is `u64::MAX` (reserved for failure).
    /// - [`ResourceExhausted`](ErrorKind::ResourceExhausted) if the queue's
    ///   action pool cannot grow (out of memory, or at its size limit).
    ///
    /// The error `f` returns is not returned here: it fails the signals.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fenceline::{Device, Error, ErrorKind, Semaphore};
    ///
    /// let device = Device::cpu()?;
    /// let queue = device.queue(0)?;
    /// let (ok, failed) = (Semaphore::new(0), Semaphore::new(0));
    /// queue.host_call(&[], &[(&ok, 1)], || Ok(()))?;
    /// ok.wait(1, Duration::from_secs(5))?;
    /// queue.host_call(&[(&ok, 1)], &[(&failed, 1)], || {
    ///     Err(Error::new(ErrorKind::Aborted, "no input"))
    /// })?;
    /// let e = failed.wait(1, Duration::from_secs(5)).unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::Aborted);
    /// # Ok::<(), fenceline::Error>(())
    /// ```
    pub fn host_call<F>(
        &self,
        waits: &[(&Semaphore, u64)],
        signals: &[(&Semaphore, u64)],
        f: F,
    ) -> Result<(), Error>
    where
        F: FnOnce() -> Result<(), Error> + Send + 'static,
    {
        self.submit(waits, signals, Work::HostCall(host_fn::HostFn::new(f)))
    }
}
