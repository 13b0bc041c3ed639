//! `Recording`: a command buffer's commands, in a bump arena the recording
//! owns, recycled by its device.
//!
//! Every command is one node in the arena, linked in recording order;
//! commands between two barriers form a stage. Update bytes, dispatch
//! closures and kernel parameters live in the same arena, so recording
//! allocates nothing once the arena has held a recording that large
//! ([`bumpalo`] keeps its largest chunk on reset).
//!
//! A recording is reference counted by hand ([`RecordingRef`]): the
//! command buffer holds one reference and each submission one more. The
//! last release drops the commands (and what they captured), resets the
//! arena, and pushes the recording onto its device's [`RecordingPool`],
//! from which the next command buffer takes it: no allocation either.

pub(crate) mod command;
mod pool;

use std::alloc::Layout;
use std::fmt;
use std::ptr::NonNull;

use bumpalo::Bump;

use super::cuda::graph::CudaGraph;
use super::data::hold::Access;
use super::vulkan::staged::VulkanStaging;
use super::Buffer;
use crate::error::{Error, ErrorKind};
use crate::list::SingleLinks;
use crate::sync::atomic::AtomicUsize;
use crate::sync::Arc;
use crate::unwind::FirstPanic;
use command::Command;

pub(crate) use pool::{RecordingPool, RecordingRef, Target};

/// Bytes a new recording's arena starts with (more are allocated, once, by
/// a recording that needs more; the arena keeps them).
pub const RECORDING_INITIAL_BYTES: usize = 4096;

/// How a recording uses one slot of the binding tables it is submitted
/// with.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlotUse {
    /// The strongest access of its bindings (`None`: unused).
    pub(crate) access: Option<Access>,
    /// Bytes its write bindings' chunks span (the table's buffer must be
    /// at least this long).
    pub(crate) need: usize,
}

/// A buffer the recording's commands touch, and how (`Write` if any
/// command writes it): one per buffer, in the arena.
pub(crate) struct HoldEntry {
    pub(crate) buffer: Buffer,
    pub(crate) access: Access,
    next: Option<NonNull<HoldEntry>>,
}

/// The [`HoldEntry`]s of a recording.
#[derive(Clone)]
pub(crate) struct Holds<'a> {
    next: Option<NonNull<HoldEntry>>,
    _recording: std::marker::PhantomData<&'a Recording>,
}

impl<'a> Iterator for Holds<'a> {
    type Item = &'a HoldEntry;

    fn next(&mut self) -> Option<&'a HoldEntry> {
        // SAFETY: entries live in the borrowed recording's arena.
        let entry = unsafe { self.next?.as_ref() };
        self.next = entry.next;
        Some(entry)
    }
}

/// A command in the arena, linked to the next one recorded.
struct Node {
    next: Option<NonNull<Node>>,
    command: Command,
}

/// Commands between two barriers (or the ends), in the arena.
pub(crate) struct Stage {
    first: NonNull<Node>,
    len: usize,
    next: Option<NonNull<Stage>>,
}

impl Stage {
    /// Commands in the stage (at least one).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The stage's commands, in recording order.
    pub(crate) fn commands(&self) -> Commands<'_> {
        Commands {
            next: Some(self.first),
            left: self.len,
            _stage: std::marker::PhantomData,
        }
    }
}

/// The commands of a [`Stage`].
pub(crate) struct Commands<'a> {
    next: Option<NonNull<Node>>,
    left: usize,
    _stage: std::marker::PhantomData<&'a Stage>,
}

impl Commands<'_> {
    /// No commands.
    fn empty() -> Self {
        Commands {
            next: None,
            left: 0,
            _stage: std::marker::PhantomData,
        }
    }
}

impl<'a> Iterator for Commands<'a> {
    type Item = &'a Command;

    fn next(&mut self) -> Option<&'a Command> {
        if self.left == 0 {
            return None;
        }
        // SAFETY: a stage's `len` nodes from `first` are linked and live as
        // long as the recording (borrowed for `'a`).
        let node = unsafe { self.next?.as_ref() };
        self.left -= 1;
        self.next = node.next;
        Some(&node.command)
    }
}

/// The stages of a recording, in order.
pub(crate) struct Stages<'a> {
    next: Option<NonNull<Stage>>,
    _recording: std::marker::PhantomData<&'a Recording>,
}

impl<'a> Iterator for Stages<'a> {
    type Item = &'a Stage;

    fn next(&mut self) -> Option<&'a Stage> {
        // SAFETY: stages live in the borrowed recording's arena.
        let stage = unsafe { self.next?.as_ref() };
        self.next = stage.next;
        Some(stage)
    }
}

/// Commands, their stages and their memory. See the [module docs](self).
pub(crate) struct Recording {
    pub(super) refs: AtomicUsize,
    /// The pool it returns to; `Some` while handed out.
    pub(super) pool: Option<Arc<RecordingPool>>,
    /// In the pool's free stack while not handed out.
    link: SingleLinks<Recording>,
    /// Whether commands are issued one by one at each submission instead
    /// of through a prebuilt CUDA graph (no effect on the CPU device).
    pub(super) one_shot: bool,
    ended: bool,
    first_stage: Option<NonNull<Stage>>,
    last_stage: Option<NonNull<Stage>>,
    stage_count: usize,
    last_node: Option<NonNull<Node>>,
    /// Whether the next command joins the last stage (`false` after a
    /// barrier, or before the first command).
    stage_open: bool,
    /// Every CPU-device buffer the commands touch, once each, with the
    /// strongest access: what a submission holds while it runs.
    holds: Option<NonNull<HoldEntry>>,
    /// How the commands use each binding-table slot.
    slots: [SlotUse; super::data::binding::MAX_SLOTS],
    /// For a reusable CUDA recording: its graph (`None`: no command).
    pub(crate) graph: Option<CudaGraph>,
    /// Whether a command uses a CUDA buffer from `Queue::alloca` (whose
    /// life each submission checks).
    pub(crate) cuda_transients: bool,
    /// For a Vulkan recording: device memory holding its update bytes and
    /// the unaligned ends of its fills, written at `end` (kept across
    /// resets, grown when a recording needs more).
    #[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
    pub(crate) staged: Option<VulkanStaging>,
    /// Declared last: dropped after everything that points into it.
    bump: Bump,
}

link!(pub(super) RecordingLink: SingleLinks<Recording> => link);

// SAFETY: a recording moves between threads with its references; the raw
// pointers are into its own arena. Before `end`, only its command buffer
// touches it (`&mut`); after, every holder only reads its commands, whose
// contents are `Sync` (buffers, `Send + Sync` closures); the arena itself
// is touched again only by the last holder (`reset`).
unsafe impl Send for Recording {}
// SAFETY: as above: shared access reads `Sync` data only.
unsafe impl Sync for Recording {}

impl Recording {
    pub(super) fn new() -> Result<Recording, Error> {
        let bump = Bump::try_with_capacity(RECORDING_INITIAL_BYTES).map_err(|_| out_of_memory())?;
        Ok(Recording {
            refs: AtomicUsize::new(0),
            pool: None,
            link: SingleLinks::new(),
            one_shot: false,
            ended: false,
            first_stage: None,
            last_stage: None,
            stage_count: 0,
            last_node: None,
            stage_open: false,
            holds: None,
            slots: Default::default(),
            graph: None,
            cuda_transients: false,
            staged: None,
            bump,
        })
    }

    /// The device's pool (handed out, so `Some`).
    pub(crate) fn pool(&self) -> &Arc<RecordingPool> {
        match &self.pool {
            Some(pool) => pool,
            None => unreachable!("a recording in use has its pool"),
        }
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    pub(crate) fn is_one_shot(&self) -> bool {
        self.one_shot
    }

    /// Stages recorded so far.
    pub(crate) fn stage_count(&self) -> usize {
        self.stage_count
    }

    /// The CPU-device buffers the commands touch, each once, with the
    /// strongest access.
    pub(crate) fn holds(&self) -> Holds<'_> {
        Holds {
            next: self.holds,
            _recording: std::marker::PhantomData,
        }
    }

    /// How the commands use each binding-table slot.
    pub(crate) fn slots(&self) -> &[SlotUse; super::data::binding::MAX_SLOTS] {
        &self.slots
    }

    /// Whether any command binds a slot (the recording then needs a table:
    /// `execute_with`).
    pub(crate) fn has_slots(&self) -> bool {
        self.slots.iter().any(|u| u.access.is_some())
    }

    /// The stages, in order.
    pub(crate) fn stages(&self) -> Stages<'_> {
        Stages {
            next: self.first_stage,
            _recording: std::marker::PhantomData,
        }
    }

    /// Moves `value` into the arena.
    /// The commands of the open stage (none after a barrier, or before
    /// the first command).
    pub(crate) fn open_stage(&self) -> Commands<'_> {
        match self.last_stage.filter(|_| self.stage_open) {
            // SAFETY: in our arena, alive while `self` is.
            Some(stage) => unsafe { stage.as_ref() }.commands(),
            None => Commands::empty(),
        }
    }

    pub(crate) fn alloc<T>(&self, value: T) -> Result<NonNull<T>, Error> {
        self.bump
            .try_alloc(value)
            .map(NonNull::from)
            .map_err(|_| out_of_memory())
    }

    /// A copy of `bytes` in the arena (one `memcpy`).
    pub(crate) fn alloc_bytes(&self, bytes: &[u8]) -> Result<NonNull<[u8]>, Error> {
        let at = self
            .bump
            .try_alloc_layout(Layout::for_value(bytes))
            .map_err(|_| out_of_memory())?;
        // SAFETY: a fresh allocation of `bytes.len()` bytes, not
        // overlapping `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at.as_ptr(), bytes.len()) };
        Ok(NonNull::slice_from_raw_parts(at, bytes.len()))
    }

    used_by_cuda! {
    /// A slice of `len` values made by `make`, in the arena. If `make`
    /// fails, the values made so far are dropped. (Kernel parameters and
    /// CUDA graph nodes.)
    pub(crate) fn alloc_slice<T>(
        &self,
        len: usize,
        mut make: impl FnMut(usize) -> Result<T, Error>,
    ) -> Result<NonNull<[T]>, Error> {
        let layout = Layout::array::<T>(len).map_err(|_| out_of_memory())?;
        let at = self
            .bump
            .try_alloc_layout(layout)
            .map_err(|_| out_of_memory())?
            .cast::<T>();
        for i in 0..len {
            match make(i) {
                Ok(v) => {
                    // SAFETY: `i < len`, inside the fresh allocation.
                    let slot = unsafe { at.as_ptr().add(i) };
                    // SAFETY: `i < len`, inside the fresh allocation (laid
                    // out for `len` `T`s), not written before.
                    unsafe { slot.write(v) };
                }
                Err(e) => {
                    // SAFETY: the first `i` values were written above.
                    unsafe { std::ptr::slice_from_raw_parts_mut(at.as_ptr(), i).drop_in_place() };
                    return Err(e);
                }
            }
        }
        Ok(NonNull::slice_from_raw_parts(at, len))
    }
    }

    /// Records `command` at the end (of a new stage after a barrier).
    ///
    /// The caller checked it may join the open stage
    /// (`validate::stage`).
    ///
    /// # Errors
    /// `ResourceExhausted` (nothing recorded, the command dropped) if the
    /// arena cannot grow.
    pub(crate) fn push(&mut self, command: Command) -> Result<(), Error> {
        let new_holds = self.new_holds(&command)?;
        if let Target::Cuda(_) = self.pool().target {
            command.buffers(|b| {
                if b.cuda_transient_queue().is_some() {
                    self.cuda_transients = true;
                }
            });
        }
        let node = match self.alloc(Node {
            next: None,
            command,
        }) {
            Ok(node) => node,
            Err(e) => {
                // SAFETY: made by `new_holds` just above, linked nowhere.
                unsafe { drop_holds(new_holds) };
                return Err(e);
            }
        };
        if self.stage_open {
            let (Some(last), Some(stage)) = (self.last_node, self.last_stage) else {
                unreachable!("an open stage has a command");
            };
            // SAFETY: `last` is in our arena; we are the only holder while
            // recording (`&mut self`).
            unsafe { (*last.as_ptr()).next = Some(node) };
            // SAFETY: `stage` is in our arena; we are the only holder while
            // recording (`&mut self`).
            unsafe { (*stage.as_ptr()).len += 1 };
        } else {
            let stage = match self.alloc(Stage {
                first: node,
                len: 1,
                next: None,
            }) {
                Ok(s) => s,
                Err(e) => {
                    // SAFETY: the node is ours, in our arena.
                    let command = unsafe { std::ptr::addr_of_mut!((*node.as_ptr()).command) };
                    // SAFETY: the node is ours and linked nowhere: drop its
                    // command so nothing is recorded.
                    unsafe { command.drop_in_place() };
                    // SAFETY: the new hold entries are ours and linked
                    // nowhere: dropped once, here.
                    unsafe { drop_holds(new_holds) };
                    return Err(e);
                }
            };
            if let Some(last_node) = self.last_node {
                // SAFETY: `last_node` is in our arena; we are the only
                // holder while recording (`&mut self`).
                unsafe { (*last_node.as_ptr()).next = Some(node) };
            }
            match self.last_stage {
                // SAFETY: `last` is in our arena; we are the only holder
                // while recording (`&mut self`).
                Some(last) => unsafe { (*last.as_ptr()).next = Some(stage) },
                None => self.first_stage = Some(stage),
            }
            self.last_stage = Some(stage);
            self.stage_count += 1;
            self.stage_open = true;
        }
        self.last_node = Some(node);
        // SAFETY: in our arena; `&mut self`.
        let command = unsafe { &(*node.as_ptr()).command };
        command.accesses(|buffer, access| {
            if access == Access::Write {
                let mut at = self.holds;
                while let Some(e) = at {
                    // SAFETY: in our arena; `&mut self`.
                    let e = unsafe { &mut *e.as_ptr() };
                    if e.buffer.same(buffer) {
                        e.access = Access::Write;
                        break;
                    }
                    at = e.next;
                }
            }
        });
        let mut at = new_holds;
        while let Some(e) = at {
            // SAFETY: made by `new_holds`, ours.
            at = unsafe { e.as_ref() }.next;
            // SAFETY: made by `new_holds`, ours.
            unsafe { (*e.as_ptr()).next = self.holds };
            self.holds = Some(e);
        }
        let slots = &mut self.slots;
        command.slot_accesses(|slot, access, need| {
            let u = &mut slots[slot];
            u.access = Some(match (u.access, access) {
                (Some(Access::Write), _) | (_, Access::Write) => Access::Write,
                _ => Access::Read,
            });
            u.need = u.need.max(need);
        });
        Ok(())
    }

    /// Hold entries for the CPU-device buffers `command` touches that the
    /// recording has none for yet, linked to each other only (`push`
    /// links them once the command is recorded).
    fn new_holds(&self, command: &Command) -> Result<Option<NonNull<HoldEntry>>, Error> {
        let mut first: Option<NonNull<HoldEntry>> = None;
        let mut failed = None;
        command.accesses(|buffer, access| {
            if failed.is_some() || buffer.host().is_none() {
                return;
            }
            let known = |mut at: Option<NonNull<HoldEntry>>| {
                while let Some(e) = at {
                    // SAFETY: in our arena.
                    let e = unsafe { e.as_ref() };
                    if e.buffer.same(buffer) {
                        return true;
                    }
                    at = e.next;
                }
                false
            };
            if known(self.holds) || known(first) {
                // (A write upgrades the entry once the command is in.)
                return;
            }
            match self.alloc(HoldEntry {
                buffer: buffer.clone(),
                access,
                next: first,
            }) {
                Ok(e) => first = Some(e),
                Err(e) => failed = Some(e),
            }
        });
        if let Some(e) = failed {
            // SAFETY: made just above, linked nowhere else.
            unsafe { drop_holds(first) };
            return Err(e);
        }
        Ok(first)
    }

    /// Calls `f` with each CUDA buffer from `Queue::alloca` the commands
    /// name (a buffer as often as it is named), until it fails.
    pub(crate) fn each_cuda_transient(
        &self,
        mut f: impl FnMut(&Buffer) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if !self.cuda_transients {
            return Ok(());
        }
        for command in self.stages().flat_map(|stage| stage.commands()) {
            let mut result = Ok(());
            command.buffers(|b| {
                if result.is_ok() && b.cuda_transient_queue().is_some() {
                    result = f(b);
                }
            });
            result?;
        }
        Ok(())
    }

    /// Everything recorded after waits for everything recorded before.
    pub(crate) fn barrier(&mut self) {
        self.stage_open = false;
    }

    pub(crate) fn set_ended(&mut self) {
        self.ended = true;
    }

    /// Drops every command (and a CUDA graph) and resets the arena,
    /// keeping its memory: recording again. A panicking drop of a captured
    /// value does not keep the others from being dropped; the first panic
    /// is returned.
    pub(crate) fn reset(&mut self) -> FirstPanic {
        let mut panicked = FirstPanic::default();
        panicked.run(|| drop(self.graph.take()));
        let mut node = self.first_stage.map(|s| {
            // SAFETY: in our arena.
            unsafe { s.as_ref() }.first
        });
        while let Some(n) = node {
            // SAFETY: linked nodes are in our arena; the link is read
            // before the node's command is dropped.
            node = unsafe { n.as_ref() }.next;
            panicked.run(|| {
                // SAFETY: linked nodes are in our arena.
                let command = unsafe { std::ptr::addr_of_mut!((*n.as_ptr()).command) };
                // SAFETY: linked nodes are in our arena; each command is
                // dropped once, and the link was read first.
                unsafe { command.drop_in_place() }
            });
        }
        let holds = self.holds.take();
        // SAFETY: the recording's entries, dropped once (then forgotten).
        panicked.run(|| unsafe { drop_holds(holds) });
        self.slots = Default::default();
        self.cuda_transients = false;
        self.first_stage = None;
        self.last_stage = None;
        self.stage_count = 0;
        self.last_node = None;
        self.stage_open = false;
        self.ended = false;
        self.bump.reset();
        panicked
    }
}

/// Drops the buffer handles of a chain of hold entries (their memory is
/// the arena's).
///
/// # Safety
/// The entries are live, in an arena, and dropped once.
unsafe fn drop_holds(mut at: Option<NonNull<HoldEntry>>) {
    while let Some(e) = at {
        // SAFETY: live (contract); the link is read before the drop.
        at = unsafe { e.as_ref() }.next;
        // SAFETY: live, in an arena (contract).
        let buffer = unsafe { std::ptr::addr_of_mut!((*e.as_ptr()).buffer) };
        // SAFETY: dropped once (contract).
        unsafe { buffer.drop_in_place() };
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.reset().resume();
    }
}

impl fmt::Debug for Recording {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recording")
            .field("stages", &self.stage_count)
            .field("ended", &self.ended)
            .finish()
    }
}

fn out_of_memory() -> Error {
    Error::new(
        ErrorKind::ResourceExhausted,
        "command buffer: out of memory for the recording",
    )
}
