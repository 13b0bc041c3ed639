//! A task's successors beyond its completion task: one inline, more in
//! edge blocks from the task pool (`Graph::precede`).

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use super::header::{Task, TASK_BLOCK};
use crate::error::Error;
use crate::pool::{BlockSource, RawBlock};

/// Successors an edge block holds: what fits a task block after its
/// next pointer and its counts (30).
pub(crate) const EDGES_PER_BLOCK: usize = (TASK_BLOCK - 16) / std::mem::size_of::<NonNull<Task>>();

/// A block of successors, one task-pool block: a task's edges past the
/// first two, newest block first.
#[repr(C, align(64))]
pub(crate) struct EdgeBlock {
    /// The block filled before this one.
    next: Option<NonNull<EdgeBlock>>,
    /// This block's index in the task pool (to give it back).
    block: u32,
    /// Successors held (`to[..len]`).
    len: u32,
    to: [MaybeUninit<NonNull<Task>>; EDGES_PER_BLOCK],
}

#[cfg(not(fenceline_loom))]
static_assertions::const_assert_eq!(std::mem::size_of::<EdgeBlock>(), TASK_BLOCK);
static_assertions::const_assert!(std::mem::size_of::<EdgeBlock>() <= TASK_BLOCK);

/// A task's extra successors (the word in `Task::successors`): none, one
/// task, or a chain of edge blocks. A tagged pointer (tasks and edge
/// blocks are cache-line aligned: bit 0 is free), written while the graph
/// is built and read once, by the worker retiring the task.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct Successors(usize);

/// Bit 0 of a `Successors` word: it points at an edge block.
const BLOCKS: usize = 1;

/// What a `Successors` word holds.
pub(crate) enum Held {
    None,
    One(NonNull<Task>),
    Blocks(NonNull<EdgeBlock>),
}

impl Successors {
    fn held(self) -> Held {
        match NonNull::new((self.0 & !BLOCKS) as *mut u8) {
            None => Held::None,
            Some(p) if self.0 & BLOCKS != 0 => Held::Blocks(p.cast()),
            Some(p) => Held::One(p.cast()),
        }
    }

    fn blocks(b: NonNull<EdgeBlock>) -> Successors {
        Successors(b.as_ptr() as usize | BLOCKS)
    }

    /// Adds `to`; a second successor or a full block takes an edge block
    /// from `cache`.
    ///
    /// Errors: `ResourceExhausted` without task memory (nothing changed).
    pub(crate) fn add<C: BlockSource + ?Sized>(
        self,
        cache: &mut C,
        to: NonNull<Task>,
    ) -> Result<Successors, Error> {
        match self.held() {
            Held::None => Ok(Successors(to.as_ptr() as usize)),
            Held::One(first) => {
                let b = new_block(cache, None)?;
                // SAFETY: just made, ours, empty.
                unsafe { push(b, first) };
                // SAFETY: just made, ours, with room for a second edge.
                unsafe { push(b, to) };
                Ok(Successors::blocks(b))
            }
            Held::Blocks(b) => {
                // SAFETY: the task's edge blocks are its builder's until
                // submission.
                if unsafe { b.as_ref() }.len as usize == EDGES_PER_BLOCK {
                    let fresh = new_block(cache, Some(b))?;
                    // SAFETY: just made, ours.
                    unsafe { push(fresh, to) };
                    Ok(Successors::blocks(fresh))
                } else {
                    // SAFETY: as above, with room.
                    unsafe { push(b, to) };
                    Ok(self)
                }
            }
        }
    }

    /// Calls `f` on every successor, newest edge block first, and gives
    /// the edge blocks back to `cache`.
    ///
    /// # Safety
    /// The caller owns the task these successors are of (it finished, or
    /// was never submitted), whose edge blocks came from `cache`'s pool and
    /// are given back once, here.
    pub(crate) unsafe fn drain<C: BlockSource + ?Sized>(
        self,
        cache: &mut C,
        mut f: impl FnMut(NonNull<Task>),
    ) {
        match self.held() {
            Held::None => {}
            Held::One(t) => f(t),
            Held::Blocks(mut b) => loop {
                // SAFETY: a block of the task's chain, ours per contract;
                // read whole before it is given back.
                let (next, block, len) = unsafe {
                    let r = b.as_ref();
                    (r.next, r.block, r.len as usize)
                };
                for i in 0..len {
                    // SAFETY: a block of the task's chain, ours per contract.
                    let slot = unsafe { b.as_ref() }.to[i];
                    // SAFETY: slots below `len` were written by `push`.
                    f(unsafe { slot.assume_init() });
                }
                // SAFETY: `b` is block `block` of this cache's pool
                // (contract).
                let raw = unsafe { RawBlock::from_parts(b.cast(), block) };
                // SAFETY: from this cache's pool (contract), given back once.
                unsafe { cache.release(raw) };
                match next {
                    Some(n) => b = n,
                    None => break,
                }
            },
        }
    }
}

/// An empty edge block from `cache`, in front of `next`.
fn new_block<C: BlockSource + ?Sized>(
    cache: &mut C,
    next: Option<NonNull<EdgeBlock>>,
) -> Result<NonNull<EdgeBlock>, Error> {
    let raw = cache.acquire()?;
    let b = raw.as_ptr().cast::<EdgeBlock>();
    // The block is ours, `TASK_BLOCK` bytes aligned to a cache line (an
    // `EdgeBlock` fits, asserted above); the slots stay uninitialized until
    // pushed.
    let p = b.as_ptr();
    // SAFETY: a field projection, in bounds of our block (an `EdgeBlock`
    // fits).
    let field = unsafe { std::ptr::addr_of_mut!((*p).next) };
    // SAFETY: the field is in our block, aligned for an `EdgeBlock`.
    unsafe { field.write(next) };
    // SAFETY: a field projection, in bounds of our block (an `EdgeBlock`
    // fits).
    let field = unsafe { std::ptr::addr_of_mut!((*p).block) };
    // SAFETY: the field is in our block, aligned for an `EdgeBlock`.
    unsafe { field.write(raw.index()) };
    // SAFETY: a field projection, in bounds of our block (an `EdgeBlock`
    // fits).
    let field = unsafe { std::ptr::addr_of_mut!((*p).len) };
    // SAFETY: the field is in our block, aligned for an `EdgeBlock`.
    unsafe { field.write(0) };
    Ok(b)
}

/// Appends `to` to `b`.
///
/// # Safety
/// The caller owns `b`, which has room.
unsafe fn push(b: NonNull<EdgeBlock>, to: NonNull<Task>) {
    // SAFETY: per contract.
    let b = unsafe { &mut *b.as_ptr() };
    b.to[b.len as usize].write(to);
    b.len += 1;
}
