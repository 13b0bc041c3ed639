//! How a device's drop learns that its queues are done, without polling,
//! and how a device dropped from inside its own work lets that work finish.
//!
//! Each queue's backend holds a [`QueueToken`]; the token is dropped with
//! the queue's state, which the queue frees when its handle is gone and its
//! last action finished. The last token signals `drained`:
//!
//! - dropped from outside (a user thread), the device cancels what is
//!   pending, drops its queue handles, blocks on `drained` (no polling),
//!   then shuts its executor down and joins the workers;
//! - dropped from inside its own work (a host call or dispatch closure
//!   that held the last handle, on a worker or completion thread), it must
//!   not wait for the work that runs the drop: it cancels what is pending,
//!   drops its queue handles and hands its executor to the teardown; the
//!   last token, once the last action finished, shuts it down without
//!   joining, and the workers exit on their own.

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Arc, Mutex, MutexGuard};

use crate::semaphore::{Semaphore, Timeout};
use crate::task::Executor;

/// A threaded device's queues, their teardown and its issuer thread.
#[cfg(any(feature = "cuda", feature = "vulkan"))]
pub(crate) type Threaded<B> = (
    Vec<crate::queue::PendingQueue<B>>,
    Arc<Teardown>,
    crate::queue::issuer::IssuerThread,
);

/// The queues of a device that an issuer thread serves (CUDA, Vulkan):
/// starts the thread (`name`), makes queue `i`'s backend with
/// `make(i, issuer, token)`, and returns the queues, their teardown and
/// the thread (which exits once the last queue is freed: the queues hold
/// its only handles).
#[cfg(any(feature = "cuda", feature = "vulkan"))]
pub(crate) fn start_threaded<B: crate::queue::Backend>(
    name: &str,
    count: usize,
    mut make: impl FnMut(usize, crate::queue::issuer::Issuer, QueueToken) -> Result<B, crate::Error>,
) -> Result<Threaded<B>, crate::Error> {
    let (thread, issuer) = crate::queue::issuer::IssuerThread::start(
        name,
        count,
        crate::queue::IssueTurn::<B>::run_raw,
    )?;
    let teardown = Teardown::new(count);
    let queues = (0..count)
        .map(|i| {
            let backend = make(i, issuer.clone(), Teardown::token(&teardown))?;
            crate::queue::PendingQueue::new(backend)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((queues, teardown, thread))
}

/// The drop of a device whose queues an issuer thread and per-queue
/// completion threads serve (CUDA, Vulkan): frees the queues, and waits
/// for their work to drain unless called from inside it (`inside`: an
/// issue pass or a completion thread), where the last queue state to go
/// finishes the teardown and the issuer thread exits on its own.
#[cfg(any(feature = "cuda", feature = "vulkan"))]
pub(crate) fn tear_down_threaded<B: crate::queue::Backend>(
    queues: &mut Vec<crate::queue::PendingQueue<B>>,
    issuer: Option<crate::queue::issuer::IssuerThread>,
    teardown: &Teardown,
    inside: bool,
) {
    queues.clear();
    if inside {
        // The queues may outlive this drop (the work running it): the
        // issuer thread exits once the last of them is freed.
        if let Some(t) = issuer {
            t.detach();
        }
    } else {
        teardown.wait_drained();
        drop(issuer); // every queue freed: the thread exits; joined
    }
}

/// Shared by a device and its queues' backends.
pub(crate) struct Teardown {
    /// Queue states not freed yet.
    live_queues: AtomicUsize,
    /// Reaches 1 when the last queue state is freed.
    drained: Semaphore,
    /// An executor handed over by a drop inside the device's own work.
    deferred: Mutex<Option<Executor>>,
}

impl Teardown {
    /// A teardown for `queues` queues; hand each one a [`token`](Self::token).
    pub(crate) fn new(queues: usize) -> Arc<Teardown> {
        Arc::new(Teardown {
            live_queues: AtomicUsize::new(queues),
            drained: Semaphore::new(0),
            deferred: Mutex::new(None),
        })
    }

    /// The token one queue's backend holds (one per queue counted in `new`).
    pub(crate) fn token(this: &Arc<Teardown>) -> QueueToken {
        QueueToken(this.clone())
    }

    /// Blocks until every queue state is freed (every action finished).
    pub(crate) fn wait_drained(&self) {
        // `Never`: a failure cannot happen (only `queue_freed` touches the
        // semaphore), and work that never finishes is the caller's hang,
        // as it would be without fenceline.
        let _ = self.drained.wait(1, Timeout::Never);
    }

    /// Hands `executor` over, to be shut down (without joining) once every
    /// queue state is freed: now, if they already are.
    pub(crate) fn defer(&self, executor: Executor) {
        *self.lock() = Some(executor);
        // AcqRel pairs with the last token's decrement: either it sees the
        // executor stored (and shuts it down), or we see zero here.
        if self.live_queues.fetch_add(0, Ordering::AcqRel) == 0 {
            self.shut_down_deferred();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Executor>> {
        self.deferred.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn shut_down_deferred(&self) {
        let executor = self.lock().take();
        if let Some(e) = executor {
            e.shut_down_detached();
        }
    }

    fn queue_freed(&self) {
        // AcqRel: pairs with the AcqRel `fetch_add(0)` in `defer` (either
        // it sees zero, or the last decrement sees the executor it stored),
        // and with the other tokens' decrements (the last one sees every
        // queue state freed).
        if self.live_queues.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _ = self.drained.signal(1);
            self.shut_down_deferred();
        }
    }
}

/// Held by one queue's backend; dropped with the queue's state.
pub(crate) struct QueueToken(Arc<Teardown>);

impl Drop for QueueToken {
    fn drop(&mut self) {
        self.0.queue_freed();
    }
}
