//! From a queue's [`Priority`] to the CUDA stream priority its stream is
//! created with.
//!
//! CUDA numbers stream priorities downwards: a context reports its range as
//! `least` (the default, 0 on every GPU so far) and `greatest`
//! (numerically lower, -5 on current GPUs; equal to `least` where the
//! device has no stream priorities), and the block scheduler prefers the
//! pending blocks of streams with lower numbers.
//!
//! The mapping is `High` → `greatest`, `Normal` and `Low` → `least`. The
//! range has nothing below the default, so `Low` cannot sit under
//! `Normal` without lifting `Normal` above every stream created with the
//! default priority in the process (other libraries' streams, the null
//! stream's work): a device whose queues are all `Normal` then issues
//! exactly as it did before priorities existed, and only `High` queues
//! are preferred by the GPU.

use super::driver::{check, Context};
use crate::error::Error;
use crate::task::Priority;
use cudarc::driver::sys;

/// A context's stream priority range, as `cuCtxGetStreamPriorityRange`
/// reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamPriorities {
    /// The default and lowest priority (numerically the highest).
    pub(crate) least: i32,
    /// The highest priority (numerically the lowest).
    pub(crate) greatest: i32,
}

impl StreamPriorities {
    /// The range of `ctx`, asked once when its device opens.
    pub(crate) fn of(ctx: &Context) -> Result<StreamPriorities, Error> {
        let _cur = ctx.enter()?;
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: out-pointers to locals; the context is current.
        let r = unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) };
        check(r, "cuCtxGetStreamPriorityRange")?;
        Ok(StreamPriorities { least, greatest })
    }

    /// The stream priority of a queue of `priority` (see the module docs).
    pub(crate) fn stream_priority(self, priority: Priority) -> i32 {
        match priority {
            Priority::High => self.greatest,
            Priority::Normal | Priority::Low => self.least,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn high_gets_the_greatest_and_the_others_the_default() {
        let range = StreamPriorities {
            least: 0,
            greatest: -5,
        };
        let got =
            [Priority::Low, Priority::Normal, Priority::High].map(|p| range.stream_priority(p));
        assert_eq!(got, [0, 0, -5]);
    }

    #[test]
    fn a_device_without_priorities_gets_its_one_value() {
        let range = StreamPriorities {
            least: 0,
            greatest: 0,
        };
        let got =
            [Priority::Low, Priority::Normal, Priority::High].map(|p| range.stream_priority(p));
        assert_eq!(got, [0, 0, 0]);
    }
}
