//! `Priority`: how urgent a queue's work is, relative to the other queues
//! of its device.

use crate::error::{Error, ErrorKind};

/// A queue's priority, chosen when its device is made
/// ([`Device::cpu_with_priorities`](crate::Device::cpu_with_priorities),
/// `Device::cuda_with_priorities`) and read with
/// [`Queue::priority`](crate::Queue::priority).
///
/// On the CPU device, an idle or finishing worker takes the ready tasks of
/// a higher-priority action (its dispatch tiles, its commands, its host
/// call) before those of lower ones, including tasks queued before them.
/// A running task is never preempted; a dispatch's shards stop claiming
/// tiles while higher-priority tasks wait, and its remaining tiles run
/// once those have been taken (between two tile ranges, not inside one).
///
/// Lower levels still progress under a constant higher-priority load:
/// after every [`FAIRNESS_PERIOD`](Self::FAIRNESS_PERIOD) tasks it starts,
/// a worker takes its next task from below the top, Low first and Normal
/// first in turn. So a level with ready tasks waiting gets at least one
/// of them started in every `2 × FAIRNESS_PERIOD` tasks each worker
/// starts, however much higher-priority work keeps arriving.
///
/// On a CUDA device, a queue's stream is created
/// (`cuStreamCreateWithPriority`) with the context's greatest stream
/// priority for `High`, and the default (least) for `Normal` and `Low`:
/// CUDA has nothing below the default. The GPU's block scheduler prefers a
/// `High` stream's pending blocks; on a GPU without stream priorities the
/// three are the same.
///
/// A device whose queues all have one priority pays nothing for them: its
/// workers take tasks exactly as with no priorities at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Priority {
    /// Background work: runs when no higher-priority task waits (and on
    /// the fairness picks).
    Low = 0,
    /// The default.
    #[default]
    Normal = 1,
    /// Latency-critical work: taken before every other ready task.
    High = 2,
}

impl Priority {
    /// Tasks a worker starts between two fairness picks (see
    /// [`Priority`]): the starvation bound. (2 under the model checker,
    /// so that its small models reach the turns.)
    pub const FAIRNESS_PERIOD: u32 = if cfg!(fenceline_loom) { 2 } else { 16 };
}

/// Queue `index`'s priority in a device's queue `priorities` (`Normal`
/// past the slice's end).
pub(crate) fn of_queue(priorities: &[Priority], index: usize) -> Priority {
    priorities.get(index).copied().unwrap_or_default()
}

/// Whether the queues of a device made with `priorities` have more
/// than one priority among them (its executor then has levels).
pub(crate) fn several(priorities: &[Priority], queues: usize) -> bool {
    let first = of_queue(priorities, 0);
    (1..queues).any(|i| of_queue(priorities, i) != first)
}

/// Checks a device's queue `priorities` against its queue count.
///
/// Errors: `InvalidArgument` if it names more queues than there are.
pub(crate) fn check(priorities: &[Priority], queues: usize) -> Result<(), Error> {
    if priorities.len() > queues {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "{} queue priorities for {queues} queue(s)",
                priorities.len()
            ),
        ));
    }
    Ok(())
}
