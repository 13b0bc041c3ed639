//! The CUDA backend of a device queue: a ready action waits on the device
//! events of its device-met waits (`cuStreamWaitEvent`), launches its
//! command buffers' graphs (`cuGraphLaunch`), records one pooled event
//! after them for its signals (the device-wait shortcut), and hands itself
//! to the queue's [`Completer`].

use std::sync::Arc;

use cudarc::driver::sys;

use super::completer::{Completer, CompletionMode};
use super::driver::{check, Event, Stream};
use super::stream_priority::StreamPriorities;
use super::CudaShared;
use crate::device::teardown::QueueToken;
use crate::device::Work;
use crate::error::{Error, ErrorKind};
use crate::queue::issuer::Issuer;
use crate::queue::{Backend, Completion, IssueTurn};
use crate::semaphore::{AnyEvent, EventHandle, Semaphore};
use crate::task::Priority;

/// A CUDA action's payload: its work and the event recorded after it.
pub(crate) struct CudaPayload {
    pub(crate) work: Work,
    pub(crate) event: Option<EventHandle<Event>>,
    /// Its signals were published as device signals: dependents may
    /// complete on the host before it.
    pub(crate) published: bool,
}

impl CudaPayload {
    pub(crate) fn new(work: Work) -> CudaPayload {
        CudaPayload {
            work,
            event: None,
            published: false,
        }
    }
}

pub(crate) struct CudaBackend {
    pub(crate) shared: Arc<CudaShared>,
    /// Declared before the stream: dropped (its thread joined) first.
    completer: Completer,
    stream: Arc<Stream>,
    device_waits: bool,
    /// As configured; its stream was created with the matching CUDA
    /// stream priority.
    priority: Priority,
    /// The device's issuer thread, which takes this queue's turn when a
    /// submitting or signalling thread hands it off (bounded submits).
    issuer: Issuer,
    /// This queue's slot there.
    index: usize,
    /// Tells the device's drop when this queue's state is freed.
    _token: QueueToken,
}

impl CudaBackend {
    /// Queue `index`'s backend: its stream, created with the CUDA stream
    /// priority `range` maps `priority` to, and its completion thread (as
    /// `config` says: completion mode, device waits).
    pub(crate) fn new(
        shared: &Arc<CudaShared>,
        config: &super::CudaConfig,
        index: usize,
        priority: Priority,
        range: StreamPriorities,
        issuer: Issuer,
        token: QueueToken,
    ) -> Result<CudaBackend, Error> {
        let stream = Arc::new(Stream::new(&shared.ctx, range.stream_priority(priority))?);
        let completer =
            Completer::start(config.completion, shared.ctx.clone(), stream.clone(), index)?;
        let device_waits = config.device_waits;
        Ok(CudaBackend {
            shared: shared.clone(),
            completer,
            stream,
            device_waits,
            priority,
            issuer,
            index,
            _token: token,
        })
    }

    /// The queue's priority, as configured.
    pub(crate) fn priority(&self) -> Priority {
        self.priority
    }

    /// The priority the driver reports for the queue's stream.
    #[cfg(feature = "testing")]
    pub(crate) fn stream_priority(&self) -> Result<i32, Error> {
        self.stream.priority()
    }

    /// The queue's completion thread.
    pub(crate) fn completion_thread(&self) -> std::thread::ThreadId {
        self.completer.thread_id
    }

    /// Enqueues the action's device waits, work and signal event.
    fn enqueue(&self, work: &mut Completion<Self>) -> Result<(), Error> {
        let stream = self.stream.raw;
        for any in work.device_waits() {
            let event = self.shared.events.event_of(any).ok_or_else(|| {
                Error::new(ErrorKind::Internal, "device wait on another device's event")
            })?;
            // SAFETY: a live stream and a live event whose record was
            // issued before it was published on the semaphore (below, in
            // the producer's `enqueue`); our reference keeps it from being
            // reused until this call has captured that record.
            let r = unsafe { sys::cuStreamWaitEvent(stream, event.raw, 0) };
            check(r, "cuStreamWaitEvent")?;
            self.shared
                .device_waits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let host_call = matches!(work.payload().work, Work::HostCall(_));
        match &work.payload().work {
            Work::Alloca(buffer) => {
                let mem = buffer
                    .cuda()
                    .ok_or_else(|| internal("a CPU buffer's alloca"))?;
                // SAFETY: the stream of the buffer's queue (an alloca is
                // submitted to the queue it names), the context is current,
                // and this is its issuer.
                unsafe { mem.alloc_on(stream) }?;
            }
            Work::Dealloca(buffer) => {
                let mem = buffer
                    .cuda()
                    .ok_or_else(|| internal("a CPU buffer's dealloca"))?;
                // SAFETY: the stream of the buffer's queue
                // (`Queue::dealloca` refuses another queue's buffer), the
                // context is current, and this is its issuer.
                unsafe { mem.free_on(stream) }?;
            }
            _ => {}
        }
        if let Work::Execute {
            inline,
            more,
            table,
            ..
        } = &work.payload().work
        {
            let recordings = inline
                .iter()
                .flatten()
                .chain(more.iter().flat_map(|m| m.iter()));
            let table = table.as_ref();
            // Before anything is enqueued: every buffer from an alloca
            // (named or in the table) is between its alloca and its
            // dealloca on this stream (both issued by this thread, so
            // neither can move meanwhile).
            for recording in recordings.clone() {
                recording.each_cuda_transient(|b| b.device_ptr().map(drop))?;
            }
            if let Some(t) = table {
                t.each_used(|b| b.device_ptr().map(drop))?;
            }
            for recording in recordings {
                if let Some(graph) = &recording.graph {
                    graph.launch_with_table(recording, table, stream)?;
                } else if recording.is_one_shot() {
                    super::issue::issue_direct(recording, table, stream)?;
                }
            }
        }
        let thread_mode = self.completer.shared.mode == CompletionMode::EventThread;
        let publish = self.device_waits && !host_call && work.signals().next().is_some();
        if thread_mode || publish {
            // Pool exhausted: no shortcut (signals are met on the host) and
            // the event thread falls back to a stream sync.
            if let Ok(event) = self.shared.events.acquire() {
                // SAFETY: live event and stream; the context is current.
                let r = unsafe { sys::cuEventRecord(event.event().raw, stream) };
                check(r, "cuEventRecord")?;
                if publish {
                    // Published only now that its record is issued: a
                    // device wait never sees an event never recorded
                    // (IREE bug 17025).
                    for (sem, value) in work.signals() {
                        sem.record_device_signal(value, event.clone().erase());
                    }
                }
                let payload = work.payload_mut();
                payload.event = Some(event);
                payload.published = publish;
            }
        }
        Ok(())
    }
}

fn internal(what: &'static str) -> Error {
    Error::new(ErrorKind::Internal, what)
}

impl Backend for CudaBackend {
    type Payload = CudaPayload;

    fn issue(&self, mut work: Completion<Self>) {
        let entered = match self.shared.ctx.enter() {
            Ok(e) => e,
            Err(e) => return work.complete(Err(e)),
        };
        match self.enqueue(&mut work) {
            Ok(()) => self.completer.submit(&self.stream, work),
            Err(e) => {
                // What was enqueued still runs; nothing waits for it
                // through this action's signals, which fail now.
                drop(entered);
                return work.complete(Err(e));
            }
        }
        drop(entered);
    }

    /// Any thread but the device's issuer thread hands the turn off after
    /// its own action and a pass: its `submit` or `signal` returns in
    /// bounded time however long others keep submitting.
    fn wants_turn(&self) -> bool {
        !self.issuer.is_current()
    }

    /// The device's issuer thread runs the turn (it runs no user code:
    /// host calls run on the completion threads).
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
        semaphore.device_signal_in(value, &self.shared.events)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Everything issued completed before the queue state was dropped;
        // make sure the stream itself is idle before destroying it.
        let _ = self.stream.synchronize();
    }
}
