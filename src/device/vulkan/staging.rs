//! A Vulkan recording's staged bytes. `vkCmdUpdateBuffer` and
//! `vkCmdFillBuffer` take only 4-byte aligned ranges (and an update at most
//! 64 KiB), where fenceline's `update` and `fill` take any: at `end`, the
//! bytes of every update and of each fill's unaligned ends are written,
//! packed in command order, into device memory the recording keeps; at
//! issue each update, and each fill's ends, is a copy from it (copies take
//! any range), and a fill's aligned middle is a `vkCmdFillBuffer`.

use std::ops::Range;

use super::driver::MappedBuffer;
use super::shared::VulkanShared;
use super::staged::VulkanStaging;
use crate::device::recording::command::Command;
use crate::device::recording::Recording;
use crate::error::Error;

/// How a fill is issued: `middle` (4-byte aligned) filled with `word`,
/// `head` and `tail` (under 4 bytes each) copied from the staged bytes.
pub(crate) struct FillPlan {
    pub(crate) word: u32,
    pub(crate) head: Range<usize>,
    pub(crate) middle: Range<usize>,
    pub(crate) tail: Range<usize>,
}

/// The plan of a fill of `len` bytes at `offset` with `pattern` (its first
/// `plen` bytes, `plen` 1, 2 or 4, dividing `offset` and `len`).
pub(crate) fn fill_plan(offset: usize, len: usize, pattern: &[u8; 4], plen: usize) -> FillPlan {
    let end = offset + len;
    let a = offset.next_multiple_of(4).min(end);
    let b = (end / 4 * 4).max(a);
    // The byte at `i` is `pattern[(i - offset) % plen]`; `plen` divides 4,
    // so every aligned word of the middle is the same.
    let word = std::array::from_fn(|k| pattern[(a + k - offset) % plen]);
    FillPlan {
        word: u32::from_ne_bytes(word),
        head: offset..a,
        middle: a..b,
        tail: b..end,
    }
}

/// The staged bytes `command` takes (in command order, packed).
pub(crate) fn staged_len(command: &Command) -> usize {
    match command {
        Command::Update { data, .. } => data.len(),
        Command::Fill {
            offset,
            len,
            pattern,
            pattern_len,
            ..
        } => {
            let plan = fill_plan(*offset, *len, pattern, *pattern_len);
            plan.head.len() + plan.tail.len()
        }
        _ => 0,
    }
}

impl VulkanShared {
    /// Writes an ending recording's staged bytes (growing its memory if
    /// it needs more). No submission of the recording is in flight: it is
    /// still recording.
    pub(crate) fn stage_bytes(&self, recording: &mut Recording) -> Result<(), Error> {
        let total: usize = recording
            .stages()
            .flat_map(|s| s.commands())
            .map(staged_len)
            .sum();
        if total == 0 {
            return Ok(());
        }
        if recording
            .staged
            .as_ref()
            .is_none_or(|s| s.buffer.len < total)
        {
            let buffer = MappedBuffer::new(&self.gpu, total.next_power_of_two())?;
            recording.staged = Some(VulkanStaging { buffer });
        }
        let Some(staged) = &recording.staged else {
            unreachable!("made above")
        };
        let mut at = 0;
        for command in recording.stages().flat_map(|s| s.commands()) {
            match command {
                Command::Update { data, .. } => {
                    let bytes = Command::update_data(data);
                    // SAFETY: no GPU work uses the staged memory: the
                    // recording has no submission in flight (see above).
                    unsafe { staged.buffer.write(at, bytes) };
                    at += bytes.len();
                }
                Command::Fill {
                    offset,
                    len,
                    pattern,
                    pattern_len,
                    ..
                } => {
                    let plan = fill_plan(*offset, *len, pattern, *pattern_len);
                    for i in plan.head.chain(plan.tail) {
                        let byte = [pattern[(i - offset) % pattern_len]];
                        // SAFETY: as above.
                        unsafe { staged.buffer.write(at, &byte) };
                        at += 1;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}
