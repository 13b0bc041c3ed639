//! The Vulkan backend of a device queue. Issue records the action's
//! commands into a command buffer of the queue's ring (after a barrier
//! that makes earlier work's writes visible, before one that makes its own
//! visible to the host), and submits it to the queue's hardware queue:
//! waiting on the GPU for the points of its device-met waits, signalling
//! the queue's timeline semaphore to the action's own value. The action
//! then goes to the queue's [`Completer`], which waits for that value and
//! completes it; its signals are published as device signals at once, so
//! that a later action on any queue of the device that waits for them is
//! issued at once and waits on the GPU.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use ash::vk;

use super::completer::Completer;
use super::driver::{submit, Recorder, Timeline};
use super::kernel::Bound;
use super::shared::VulkanShared;
use super::staging::{fill_plan, staged_len};
use crate::device::data::table::SlotTable;
use crate::device::recording::command::Command;
use crate::device::recording::Recording;
use crate::device::teardown::QueueToken;
use crate::device::Work;
use crate::error::{Error, ErrorKind};
use crate::queue::issuer::Issuer;
use crate::queue::{Backend, Completion, IssueTurn, DEVICE_WAITS};
use crate::semaphore::{AnyEvent, Semaphore};
use crate::task::Priority;

/// Most command buffers a queue keeps in flight; past it, issue waits on
/// the host for the oldest (the queue is that far ahead of its GPU).
const RING_MAX: usize = 256;
/// Command buffers a queue makes when it is made: up to this many
/// submissions in flight, issue never makes one (nor allocates).
pub(crate) const RING_PREFILL: usize = 16;

/// A Vulkan action's payload: its work and the timeline value its
/// submission signals (0: not submitted).
pub(crate) struct VulkanPayload {
    pub(crate) work: Work,
    pub(crate) value: u64,
}

impl VulkanPayload {
    pub(crate) fn new(work: Work) -> VulkanPayload {
        VulkanPayload { work, value: 0 }
    }
}

/// What only the queue's issuer touches: the last value submitted and the
/// ring of command buffers, each with the value of its last submission.
struct IssueState {
    submitted: u64,
    /// A value the timeline was seen to have reached (a lower bound).
    reached: u64,
    ring: VecDeque<(Recorder, u64)>,
}

pub(crate) struct VulkanBackend {
    pub(crate) shared: Arc<VulkanShared>,
    /// Declared first: dropped (its thread joined, every action
    /// completed) before the ring and the timeline.
    completer: Completer,
    /// Locked by the issuer alone (the queue's turn makes it uncontended;
    /// the lock makes that no assumption of safety).
    issue: Mutex<IssueState>,
    timeline: Arc<Timeline>,
    /// The hardware queue it submits to.
    hardware: usize,
    device_waits: bool,
    priority: Priority,
    issuer: Issuer,
    index: usize,
    _token: QueueToken,
}

impl VulkanBackend {
    pub(crate) fn new(
        shared: &Arc<VulkanShared>,
        index: usize,
        priority: Priority,
        device_waits: bool,
        issuer: Issuer,
        token: QueueToken,
    ) -> Result<VulkanBackend, Error> {
        let timeline = Arc::new(Timeline::new(&shared.gpu, 0)?);
        let mut ring = VecDeque::with_capacity(RING_MAX);
        for _ in 0..RING_PREFILL {
            ring.push_back((Recorder::new(&shared.gpu)?, 0));
        }
        let completer = Completer::start(timeline.clone(), index)?;
        Ok(VulkanBackend {
            shared: shared.clone(),
            completer,
            issue: Mutex::new(IssueState {
                submitted: 0,
                reached: 0,
                ring,
            }),
            timeline,
            hardware: index % shared.hardware_queues(),
            device_waits,
            priority,
            issuer,
            index,
            _token: token,
        })
    }

    pub(crate) fn priority(&self) -> Priority {
        self.priority
    }

    /// The queue's completion thread (where host calls run).
    pub(crate) fn completion_thread(&self) -> std::thread::ThreadId {
        self.completer.thread_id
    }

    /// Records and submits the action; publishes its signals as device
    /// signals (not a host call's: its work runs after the GPU's).
    fn enqueue(&self, work: &mut Completion<Self>) -> Result<(), Error> {
        if let Work::Execute { .. } = work.payload().work {
            crate::device::work::take_holds(&mut work.payload_mut().work)?;
        }
        let mut waits = [vk::SemaphoreSubmitInfo::default(); DEVICE_WAITS];
        let mut count = 0;
        for any in work.device_waits() {
            let point = self.shared.points.event_of(any).ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    "a device wait on another device's point",
                )
            })?;
            waits[count] = point.wait_info();
            count += 1;
        }
        let mut state = self.issue.lock().unwrap_or_else(|p| p.into_inner());
        let value = state.submitted + 1;
        let recorder = match &work.payload().work {
            Work::Execute { .. } => Some(self.record(&mut state, &work.payload().work)?),
            _ => None,
        };
        let submitted = {
            let queue = self.shared.lock_queue(self.hardware);
            submit(
                &self.shared.gpu,
                *queue,
                recorder.as_ref(),
                &waits[..count],
                (&self.timeline, value),
            )
        };
        if let Some(r) = recorder {
            // Not pending if the submit failed: reusable at once.
            let last = if submitted.is_ok() { value } else { 0 };
            state.ring.push_back((r, last));
        }
        submitted?;
        state.submitted = value;
        drop(state);
        if let Work::Alloca(buffer) = &work.payload().work {
            // Usable from now on by the work ordered after the alloca (the
            // memory exists already: its pool made it at the call).
            crate::device::work::alloca_ran(buffer)?;
        }
        if count > 0 {
            self.shared
                .device_waits
                .fetch_add(count as u64, std::sync::atomic::Ordering::Relaxed);
        }
        work.payload_mut().value = value;
        let host_call = matches!(work.payload().work, Work::HostCall(_));
        if self.device_waits && !host_call {
            for (sem, v) in work.signals() {
                // Pool exhausted: no shortcut (the value is met on the host).
                if let Ok(point) = self.shared.points.acquire() {
                    point.event().set(&self.timeline, value);
                    // Published only now that its submission is made: a
                    // GPU wait never waits for a value nothing will signal.
                    sem.record_device_signal(v, point.erase());
                }
            }
        }
        Ok(())
    }

    /// A command buffer of the ring with the execute's commands recorded.
    fn record(&self, state: &mut IssueState, work: &Work) -> Result<Recorder, Error> {
        let mut rec = self.free_recorder(state)?;
        rec.begin()?;
        rec.barrier_after_earlier_work();
        if let Work::Execute {
            inline,
            more,
            table,
            ..
        } = work
        {
            let table = table.as_ref();
            let recordings = inline
                .iter()
                .flatten()
                .chain(more.iter().flat_map(|m| m.iter()));
            for (i, recording) in recordings.enumerate() {
                if i > 0 {
                    rec.barrier();
                }
                record_commands(&mut rec, recording, table)?;
            }
        }
        rec.barrier_to_host();
        rec.end()?;
        Ok(rec)
    }

    /// The oldest command buffer of the ring if its last submission is
    /// done, else a new one (the ring grows to [`RING_MAX`], then waits
    /// for its oldest).
    fn free_recorder(&self, state: &mut IssueState) -> Result<Recorder, Error> {
        if let Some(&(_, last)) = state.ring.front() {
            // One driver query per pass over the ring at most: the value
            // seen covers every command buffer submitted before it.
            if last > state.reached {
                state.reached = self.timeline.value()?;
            }
            let reached = last <= state.reached;
            if reached || state.ring.len() >= RING_MAX {
                if !reached {
                    while !self.timeline.wait(last, 100_000_000)? {}
                }
                if let Some((r, _)) = state.ring.pop_front() {
                    return Ok(r);
                }
            }
        }
        Recorder::new(&self.shared.gpu)
    }
}

/// Records `recording`'s commands, a barrier between stages; its staged
/// bytes copied from its staging memory (`staging.rs`).
fn record_commands(
    rec: &mut Recorder,
    recording: &Recording,
    table: Option<&SlotTable>,
) -> Result<(), Error> {
    let staged = recording
        .staged
        .as_ref()
        .map(|s| (s.buffer.raw, s.buffer.len));
    let mut at = 0usize;
    for (i, stage) in recording.stages().enumerate() {
        if i > 0 {
            rec.barrier();
        }
        for command in stage.commands() {
            let from = at;
            at += staged_len(command);
            record_command(rec, command, staged, from, table)?;
        }
    }
    Ok(())
}

/// A fenceline buffer's `VkBuffer` and length.
fn raw(buffer: &crate::device::Buffer) -> Result<(vk::Buffer, usize), Error> {
    use ash::vk::Handle;
    buffer
        .host()
        .and_then(|m| m.mapped_handle())
        .map(|h| (vk::Buffer::from_raw(h), buffer.len()))
        .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "a buffer of another device"))
}

fn record_command(
    rec: &mut Recorder,
    command: &Command,
    staged: Option<(vk::Buffer, usize)>,
    at: usize,
    table: Option<&SlotTable>,
) -> Result<(), Error> {
    let staged = || staged.ok_or_else(|| Error::new(ErrorKind::Internal, "staged bytes missing"));
    match command {
        Command::Fill {
            buffer,
            offset,
            len,
            pattern,
            pattern_len,
        } => {
            let dst = raw(buffer)?;
            let plan = fill_plan(*offset, *len, pattern, *pattern_len);
            if !plan.middle.is_empty() {
                rec.fill(dst, plan.middle.start, plan.middle.len(), plan.word);
            }
            let mut from = at;
            for part in [plan.head, plan.tail] {
                if !part.is_empty() {
                    rec.copy(staged()?, from, dst, part.start, part.len());
                    from += part.len();
                }
            }
        }
        Command::Update {
            buffer,
            offset,
            data,
        } => {
            if !data.is_empty() {
                rec.copy(staged()?, at, raw(buffer)?, *offset, data.len());
            }
        }
        Command::Copy {
            src,
            src_offset,
            dst,
            dst_offset,
            len,
        } => {
            if *len > 0 {
                rec.copy(raw(src)?, *src_offset, raw(dst)?, *dst_offset, *len);
            }
        }
        Command::Spirv(d) => {
            let mut buffers = [(vk::Buffer::null(), 0); super::driver::MAX_DISPATCH_BUFFERS];
            let mut n = 0;
            for b in d.bindings() {
                buffers[n] = match b {
                    Bound::Buffer(b) => raw(b)?,
                    // Checked at the call: the table fills every slot the
                    // recording binds (`validate::table`).
                    Bound::Slot(s) => raw(table.and_then(|t| t.buffer(*s)).ok_or_else(|| {
                        Error::new(
                            ErrorKind::Internal,
                            "a slot the binding table does not fill",
                        )
                    })?)?,
                };
                n += 1;
            }
            rec.dispatch(&d.pipeline, d.groups, &buffers[..n], d.push_constants())?;
        }
        Command::Dispatch { .. } | Command::Launch(_) => {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "a CPU dispatch or CUDA kernel cannot run on a Vulkan device",
            ))
        }
    }
    Ok(())
}

impl Backend for VulkanBackend {
    type Payload = VulkanPayload;

    fn issue(&self, mut work: Completion<Self>) {
        match self.enqueue(&mut work) {
            Ok(()) => self.completer.submit(work),
            Err(e) => {
                // Holds taken are given back with the recordings.
                let released = crate::device::work::release_held(&mut work.payload_mut().work);
                work.complete(Err(released.err().unwrap_or(e)));
            }
        }
    }

    /// Any thread but the device's issuer thread hands the turn off after
    /// its own action and a pass (bounded submits, as on CUDA).
    fn wants_turn(&self) -> bool {
        !self.issuer.is_current()
    }

    fn hand_off_turn(&self, turn: IssueTurn<Self>) -> Result<(), IssueTurn<Self>> {
        // SAFETY: a turn of this queue, given up; the thread's runner
        // (`IssueTurn::run_raw`) takes it back once.
        unsafe { self.issuer.offer(self.index, turn.into_raw().cast()) };
        Ok(())
    }

    fn device_wait(&self, semaphore: &Semaphore, value: u64) -> Option<AnyEvent> {
        if !self.device_waits {
            return None;
        }
        semaphore.device_signal_in(value, &self.shared.points)
    }
}
