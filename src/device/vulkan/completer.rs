//! How a Vulkan queue learns that submitted work finished: its completion
//! thread takes the issued actions in submission order (a lock-free
//! [`CompletionStack`] from the issuer) and waits on the host for each
//! one's value of the queue's timeline semaphore (`vkWaitSemaphores`),
//! then completes it: runs a host call, gives back its holds and command
//! buffers, and signals. An action that waited on the GPU for another
//! queue's work completes only after that work completed on the host too,
//! so whoever sees its signals finds its producers' holds given back.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};

use crossbeam_utils::sync::{Parker, Unparker};

use super::backend::VulkanBackend;
use super::driver::Timeline;
use crate::device::Work;
use crate::error::{Error, ErrorKind};
use crate::queue::{Completion, CompletionStack, Completions};
use crate::semaphore::Timeout;

/// How long one `vkWaitSemaphores` waits before the thread looks again
/// (the wait ends early when the value is reached or the device is lost).
const WAIT_NS: u64 = 100_000_000;

struct Shared {
    issued: CompletionStack<VulkanBackend>,
    unparker: Unparker,
    stop: AtomicBool,
}

/// One queue's completion thread.
pub(crate) struct Completer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    pub(crate) thread_id: ThreadId,
}

impl Completer {
    pub(crate) fn start(timeline: Arc<Timeline>, index: usize) -> Result<Completer, Error> {
        let parker = Parker::new();
        let shared = Arc::new(Shared {
            issued: CompletionStack::default(),
            unparker: parker.unparker().clone(),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fenceline-vk-q{index}"))
            .spawn(move || run(&s, &timeline, &parker))
            .map_err(|e| {
                Error::new(
                    ErrorKind::ResourceExhausted,
                    format!("spawning a Vulkan completion thread: {e}"),
                )
            })?;
        let thread_id = thread.thread().id();
        Ok(Completer {
            shared,
            thread: Some(thread),
            thread_id,
        })
    }

    /// Hands a submitted action to the thread (the queue's issuer, in
    /// submission order).
    pub(crate) fn submit(&self, work: Completion<VulkanBackend>) {
        self.shared.issued.push(work);
        self.shared.unparker.unpark();
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load of `stop` in `run`; the
        // actions pushed before are seen there in `issued`.
        self.shared.stop.store(true, Ordering::Release);
        self.shared.unparker.unpark();
        if let Some(t) = self.thread.take() {
            // A queue dropped from a host call runs on this very thread:
            // it finishes its loop on its own instead.
            if std::thread::current().id() != self.thread_id {
                let _ = t.join();
            }
        }
    }
}

fn run(shared: &Shared, timeline: &Timeline, parker: &Parker) {
    let mut fifo: Completions<VulkanBackend> = shared.issued.take_all();
    // A value the timeline was seen to have reached: the actions up to it
    // complete with no driver call (one wait, then one query, per batch).
    let mut seen = 0u64;
    loop {
        fifo.append(shared.issued.take_all());
        if let Some(work) = fifo.next() {
            let value = work.payload().value;
            let reached = if value <= seen {
                Ok(())
            } else {
                reach(timeline, value).inspect(|()| {
                    seen = timeline.value().unwrap_or(value).max(value);
                })
            };
            // A panic out of a completion (a timepoint callback that
            // panicked while the action signalled; the action itself was
            // finished) is dropped: the thread goes on.
            let _ = catch_unwind(AssertUnwindSafe(|| finish(work, reached)));
            continue;
        }
        // Acquire: pairs with the Release store in `Completer::drop`; sees
        // the actions pushed before it in `issued`.
        if shared.stop.load(Ordering::Acquire) && shared.issued.is_empty() {
            return;
        }
        parker.park();
    }
}

/// Waits until the timeline reaches `value` (or the device is lost).
fn reach(timeline: &Timeline, value: u64) -> Result<(), Error> {
    loop {
        match timeline.wait(value, WAIT_NS) {
            Ok(true) => return Ok(()),
            Ok(false) => continue,
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Aborted,
                    format!("the Vulkan device failed before this work completed: {e}"),
                ))
            }
        }
    }
}

/// Runs a host call, waits for the producers of GPU-side waits to
/// complete, gives back holds and recordings, then completes.
fn finish(mut work: Completion<VulkanBackend>, mut result: Result<(), Error>) {
    if result.is_ok() {
        if let Work::HostCall(_) = &work.payload().work {
            if let Work::HostCall(f) =
                std::mem::replace(&mut work.payload_mut().work, Work::Barrier)
            {
                result = crate::unwind::guarded(|| f.call());
            }
        }
    }
    if result.is_ok() && work.device_waits().next().is_some() {
        // Its waits were met on the GPU: their producers' work is done, but
        // their completion (holds given back, signals) may not have
        // reached the host yet, on another queue's thread. Wait for it: a
        // producer that failed fails this action.
        result = work
            .waits()
            .find_map(|(s, v)| s.wait(v, Timeout::Never).err())
            .map_or(Ok(()), Err);
    }
    if result.is_ok() {
        if let Work::Dealloca(buffer) = &work.payload().work {
            // Everything ordered before it completed (its waits, met on
            // the host or waited for above): closed for good; the memory
            // goes back to the pool with the last handle.
            result = crate::device::work::dealloca_ran(buffer);
        }
    }
    if let Err(e) = crate::device::work::release_held(&mut work.payload_mut().work) {
        result = result.and(Err(e));
    }
    work.complete(result);
}
