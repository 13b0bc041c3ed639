//! The data plane's rules, checked in one place where a mistake is made
//! (wgpu-core keeps its validation together the same way): at record, what
//! a command may touch (ranges, its device's memory, no conflict within a
//! stage); at submit, an execute's recordings (its device's) and binding
//! table (every bound slot filled, long enough, of the device, no buffer
//! written through two names). What cannot be known before an action runs,
//! whether a buffer is free to touch then, is enforced at issue by the
//! holds (`work.rs`: `check_not_gone`, `take_holds`). Every failure here is
//! `InvalidArgument` (`FailedPrecondition` for another device's recording)
//! and records or submits nothing.

use super::data::binding::MAX_SLOTS;
use super::data::hold::Access;
use super::recording::command::Command;
use super::recording::{Recording, RecordingRef, Target};
use super::{on_backend, Buffer, DeviceBackend, DeviceInner};
use crate::error::{Error, ErrorKind};

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, message)
}

/// A fill of `len` bytes at `offset` with `pattern`: 1, 2 or 4 bytes, the
/// range in bounds and a multiple of the pattern.
pub(crate) fn fill(
    buffer: &Buffer,
    offset: usize,
    len: usize,
    pattern: &[u8],
) -> Result<(), Error> {
    let plen = pattern.len();
    if !matches!(plen, 1 | 2 | 4) {
        return Err(invalid(format!(
            "fill pattern length {plen}: must be 1, 2 or 4"
        )));
    }
    if offset % plen != 0 || len % plen != 0 {
        return Err(invalid(format!(
            "fill offset {offset} length {len}: must be multiples of the pattern length {plen}"
        )));
    }
    buffer.range(offset, len).map(drop)
}

/// A copy of `len` bytes: both ranges in bounds, not overlapping within
/// one buffer.
pub(crate) fn copy(
    src: &Buffer,
    src_offset: usize,
    dst: &Buffer,
    dst_offset: usize,
    len: usize,
) -> Result<(), Error> {
    let s = src.range(src_offset, len)?;
    let d = dst.range(dst_offset, len)?;
    if src.same(dst) && len > 0 && s.start < d.end && d.start < s.end {
        return Err(invalid(format!(
            "copy within one buffer: {s:?} overlaps {d:?}"
        )));
    }
    Ok(())
}

/// `buffer` is memory of the device `target` names (and, a CUDA buffer
/// from `Queue::alloca`, has an address: between its alloca and its
/// dealloca).
pub(crate) fn of_device(target: &Target, buffer: &Buffer) -> Result<(), Error> {
    if !target.owns(buffer) {
        return Err(invalid(
            "buffer belongs to another device than the command buffer".to_string(),
        ));
    }
    if buffer.cuda_transient_queue().is_some() {
        buffer.device_ptr()?;
    }
    Ok(())
}

/// `command` may join the open stage of `recording`: no buffer or slot it
/// writes is touched by a command of that stage, and none it touches is
/// written there (commands of a stage run at once).
pub(crate) fn stage(recording: &Recording, command: &Command) -> Result<(), Error> {
    for other in recording.open_stage() {
        if let Some(slot) = slot_conflict(command, other) {
            return Err(invalid(format!(
                "slot {slot} is written by one command of this stage and \
                 bound by another: commands of a stage run at once \
                 (record a barrier between them)"
            )));
        }
        if let Some(buffer) = conflict(command, other) {
            return Err(invalid(format!(
                "buffer {:p} ({} bytes) is written by one command of this stage \
                 and used by another: commands of a stage run at once \
                 (record a barrier between them)",
                buffer.id(),
                buffer.len()
            )));
        }
    }
    Ok(())
}

/// A slot `this` and `other` bind in conflicting ways (one of them writes it).
fn slot_conflict(this: &Command, other: &Command) -> Option<usize> {
    let mut found = None;
    this.slot_accesses(|a, access_a, _| {
        other.slot_accesses(|b, access_b, _| {
            if found.is_none() && a == b && (access_a == Access::Write || access_b == Access::Write)
            {
                found = Some(a);
            }
        });
    });
    found
}

/// The first buffer `this` and `other` touch in conflicting ways (one of them
/// writes it).
fn conflict(this: &Command, other: &Command) -> Option<Buffer> {
    let mut found = None;
    this.accesses(|a, access_a| {
        if found.is_some() {
            return;
        }
        other.accesses(|b, access_b| {
            if found.is_none()
                && a.same(b)
                && (access_a == Access::Write || access_b == Access::Write)
            {
                found = Some(a.clone());
            }
        });
    });
    found
}

/// `table` against how `recordings` (ended, of one device) use its slots:
/// at most [`MAX_SLOTS`] buffers; every slot a command binds filled with a
/// buffer of the device, long enough for the slot's chunks; no buffer in
/// two slots where either is written, or in a slot and bound directly
/// where either writes it. Returns each slot's strongest access.
pub(crate) fn table<'r>(
    table: &[&Buffer],
    recordings: impl Iterator<Item = &'r Recording> + Clone,
) -> Result<[Option<Access>; MAX_SLOTS], Error> {
    if table.len() > MAX_SLOTS {
        return Err(invalid(format!(
            "a binding table of {} buffers: at most {MAX_SLOTS}",
            table.len()
        )));
    }
    let mut uses: [Option<Access>; MAX_SLOTS] = [None; MAX_SLOTS];
    for r in recordings.clone() {
        for (slot, u) in r.slots().iter().enumerate() {
            let Some(access) = u.access else { continue };
            let Some(buffer) = table.get(slot) else {
                return Err(invalid(format!(
                    "a command buffer binds slot {slot}, but the table has {} buffers",
                    table.len()
                )));
            };
            if buffer.len() < u.need {
                return Err(invalid(format!(
                    "slot {slot}: a buffer of {} bytes, but its chunks span {} bytes",
                    buffer.len(),
                    u.need
                )));
            }
            if !r.pool().target.owns(buffer) {
                return Err(invalid(format!(
                    "slot {slot}: a buffer of another device than the command buffers"
                )));
            }
            uses[slot] = Some(match (uses[slot], access) {
                (Some(Access::Write), _) | (_, Access::Write) => Access::Write,
                _ => Access::Read,
            });
        }
    }
    for (i, a) in table.iter().enumerate() {
        let Some(access_a) = uses[i] else { continue };
        for (j, b) in table[..i].iter().enumerate() {
            let Some(access_b) = uses[j] else { continue };
            if a.same(b) && (access_a == Access::Write || access_b == Access::Write) {
                return Err(invalid(format!(
                    "slots {j} and {i} hold one buffer and one of them is written"
                )));
            }
        }
        for r in recordings.clone() {
            for e in r.holds() {
                if e.buffer.same(a) && (e.access == Access::Write || access_a == Access::Write) {
                    return Err(invalid(format!(
                        "slot {i} holds a buffer that a command buffer of the \
                             submission also binds, and one of them writes it"
                    )));
                }
            }
        }
    }
    Ok(uses)
}

/// Every recording was made for `device` (`FailedPrecondition` if not).
pub(crate) fn recordings(device: &DeviceInner, recordings: &[&RecordingRef]) -> Result<(), Error> {
    let ok = recordings
        .iter()
        .all(|r| on_backend!(device, |d| d.made(&r.pool().target)));
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::FailedPrecondition,
            "command buffer was recorded for another device",
        ))
    }
}
