//! What one queue action runs ([`Work`]), and what an execute does with
//! the buffers it touches around its run: the holds it takes at issue and
//! gives back, with its command buffers, before it signals; and the
//! actions of `Queue::alloca` / `dealloca`.

use super::data::hold;
use super::data::{binding, buffer, table};
use super::recording::RecordingRef;
use super::{host_fn, Buffer, EXECUTE_INLINE_COMMAND_BUFFERS};
use crate::error::{Error, ErrorKind};

/// What one queue action runs, on any device.
pub(crate) enum Work {
    Barrier,
    HostCall(host_fn::HostFn),
    /// Makes a pending buffer from `Queue::alloca` usable.
    Alloca(Buffer),
    /// Closes a buffer from `Queue::alloca` for good.
    Dealloca(Buffer),
    Execute {
        inline: [Option<RecordingRef>; EXECUTE_INLINE_COMMAND_BUFFERS],
        more: Option<Box<[RecordingRef]>>,
        /// The action holds the buffers its recordings touch (CPU device,
        /// from its issue: [`take_holds`]).
        held: bool,
        /// The binding table of an `execute_with`.
        table: Option<table::SlotTable>,
    },
}

impl Work {
    /// The resolved binding table of an `execute_with` (null: none).
    pub(crate) fn slot_views(&self) -> *const binding::SlotViews {
        match self {
            Work::Execute { table: Some(t), .. } => t.views(),
            _ => std::ptr::null(),
        }
    }

    /// The recordings of an execute, in order.
    fn recordings(&self) -> impl Iterator<Item = &RecordingRef> + Clone {
        let (inline, more) = match self {
            Work::Execute { inline, more, .. } => (&inline[..], more.as_deref()),
            _ => (&[][..], None),
        };
        inline.iter().flatten().chain(more.into_iter().flatten())
    }
}

/// Calls `f` once for each distinct CPU-device buffer the execute's
/// recordings touch, with the strongest access any of them makes, in a
/// fixed order, until `f` returns `false`; returns whether it never did.
///
/// On a device whose actions hold shared ([`Target::shares_holds`](super::recording::Target::shares_holds): the
/// device orders its own users), every access is `Read`.
fn each_hold(work: &Work, mut f: impl FnMut(&buffer::HostMem, hold::Access) -> bool) -> bool {
    let recordings = work.recordings();
    let shared = recordings
        .clone()
        .next()
        .is_some_and(|r| r.pool().target.shares_holds());
    let mut f =
        |mem: &buffer::HostMem, access| f(mem, if shared { hold::Access::Read } else { access });
    let entries = recordings.clone().flat_map(|r| r.holds());
    // One recording's entries are distinct already (the usual case: no
    // quadratic look-around).
    let single = recordings.clone().nth(1).is_none();
    for (i, e) in entries.clone().enumerate() {
        let mut access = e.access;
        if !single {
            if entries.clone().take(i).any(|p| p.buffer.same(&e.buffer)) {
                continue;
            }
            if entries
                .clone()
                .skip(i + 1)
                .any(|p| p.buffer.same(&e.buffer) && p.access == hold::Access::Write)
            {
                access = hold::Access::Write;
            }
        }
        let Some(mem) = e.buffer.host() else { continue };
        if !f(mem, access) {
            return false;
        }
    }
    // The table's buffers (checked at `execute_with` against the direct
    // ones: a buffer in both is only ever read, and is taken twice).
    match work {
        Work::Execute { table: Some(t), .. } => t.each_hold(f),
        _ => true,
    }
}

/// The execute's check at the call (CPU device): no buffer it names (in
/// its recordings or its table) has had its dealloca run, or
/// `FailedPrecondition` naming the buffer. (A dealloca that runs between
/// the call and the issue is met at the issue: the hold cannot be taken,
/// and the action fails instead of running.)
pub(crate) fn check_not_gone(work: &Work) -> Result<(), Error> {
    let gone = |mem: &buffer::HostMem| mem.hold().life() == hold::Life::Gone;
    let mut bad = work
        .recordings()
        .flat_map(|r| r.holds())
        .filter_map(|e| e.buffer.host().map(|m| &**m))
        .find(|m| gone(m))
        .map(gone_error);
    if bad.is_none() {
        if let Work::Execute { table: Some(t), .. } = work {
            t.each_hold(|mem, _| {
                if gone(mem) {
                    bad = Some(gone_error(mem));
                }
                bad.is_none()
            });
        }
    }
    bad.map_or(Ok(()), Err)
}

#[cold]
fn gone_error(mem: &buffer::HostMem) -> Error {
    Error::new(
        ErrorKind::FailedPrecondition,
        format!(
            "buffer {:p} ({} bytes): its dealloca ran, it cannot be used again",
            mem.base(),
            mem.len()
        ),
    )
}

/// Takes the holds of an issued execute (CPU device): every buffer its
/// command buffers touch, shared where they only read it. On a conflict
/// with a running action (or a host copy) nothing stays held and the error
/// names the buffer: the action then fails instead of running.
pub(crate) fn take_holds(work: &mut Work) -> Result<(), Error> {
    let mut failed = None;
    let mut taken = 0usize;
    let all = each_hold(work, |mem, access| {
        if mem.hold().try_take(access) {
            taken += 1;
            true
        } else {
            failed = Some(buffer::conflict(mem, access, "an action"));
            false
        }
    });
    if !all {
        // Give back what was taken before the conflict (same order).
        let mut left = taken;
        let mut broken = None;
        each_hold(work, |mem, access| {
            if left == 0 {
                return false;
            }
            if let Err(e) = mem.hold().give_back(access) {
                broken.get_or_insert(e);
            }
            left -= 1;
            true
        });
        // A broken hold word (an internal error) outranks the conflict.
        return Err(broken
            .or(failed)
            .unwrap_or_else(|| Error::new(ErrorKind::Internal, "hold conflict")));
    }
    if let Work::Execute { held, .. } = work {
        *held = true;
    }
    Ok(())
}

/// An alloca's action: its buffer is usable from now on (before the
/// action signals).
pub(crate) fn alloca_ran(buffer: &Buffer) -> Result<(), Error> {
    let Some(mem) = buffer.host() else {
        return Ok(());
    };
    if mem.hold().make_live() {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::FailedPrecondition,
            format!(
                "alloca of buffer {:p} ({} bytes): its dealloca ran first",
                buffer.id(),
                buffer.len()
            ),
        ))
    }
}

/// A dealloca's action: nothing may use the buffer from now on; its
/// memory goes back with its last handle.
pub(crate) fn dealloca_ran(buffer: &Buffer) -> Result<(), Error> {
    let Some(mem) = buffer.host() else {
        return Ok(());
    };
    mem.hold().close().map_err(|life| {
        Error::new(
            ErrorKind::FailedPrecondition,
            format!(
                "dealloca of buffer {:p} ({} bytes): {}",
                buffer.id(),
                buffer.len(),
                match life {
                    hold::Life::Gone => "its dealloca ran already",
                    _ => "a running action still uses it (the buffer stays usable)",
                }
            ),
        )
    })
}

/// Gives back what a finished action holds before it signals: an
/// execute's buffer holds and command buffers, an alloca's or dealloca's
/// buffer handle. Whoever sees the signal then finds the buffers free and
/// the recordings released, and, its own handles dropped, an alloca's
/// memory back in its pool: a frame loop needs no more recordings or
/// buffers than frames in flight.
///
/// If this releases the last reference to a recording, its captures are
/// dropped here; a capture whose `Drop` panics is caught and the panic
/// dropped: the submission's outcome was decided by its work, and no
/// other submission may be failed for it.
///
/// Errors: `Internal` if a hold word had no such hold to give back (the
/// caller fails the action with it: never a silent wrap of the word).
#[must_use = "a broken hold word fails the action"]
pub(crate) fn release_held(work: &mut Work) -> Result<(), Error> {
    let mut broken = Ok(());
    if let Work::Execute { held: true, .. } = work {
        // The holds first: whoever sees the signal finds the buffers free.
        each_hold(work, |mem, access| {
            if let Err(e) = mem.hold().give_back(access) {
                if broken.is_ok() {
                    broken = Err(e);
                }
            }
            true
        });
    }
    if let Work::Execute { .. } | Work::Alloca(_) | Work::Dealloca(_) = work {
        let held = std::mem::replace(work, Work::Barrier);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(held)));
    }
    broken
}
