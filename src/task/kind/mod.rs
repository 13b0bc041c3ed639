//! Task kinds. Each kind is a payload type, written into the task block
//! after the header, that implements [`Kind`]; [`vtable`] makes the one
//! static table per kind that the worker calls through (as tokio's
//! `runtime/task/raw.rs` does), so no kind writes a table by hand.

mod call;
mod dispatch;
mod fence;
mod finally;
mod nop;
mod wait;

use std::marker::PhantomData;
use std::ptr::{addr_of_mut, NonNull};

use super::context::TaskContext;
use super::header::{Outcome, Task, VTable};
use super::scope::ScopeInner;
use super::Priority;
use crate::error::Error;
use crate::pool::BlockSource;

pub(crate) use call::make_call;
pub use call::{CallContext, CALL_INLINE_BYTES};
pub use dispatch::DISPATCH_INLINE_BYTES;
pub(crate) use dispatch::{run_tiles, DispatchPayload, Tiles};
pub(crate) use fence::FencePayload;
pub(crate) use finally::FinallyPayload;
pub use finally::FINALLY_INLINE_BYTES;
pub(crate) use nop::{take_dependents, take_sole, BarrierPayload, Nop};
pub(crate) use wait::{WaitLink, WaitState};

/// A task kind: the payload type and what the worker does with it.
pub(crate) trait Kind: Sized + 'static {
    /// The kind's name, for messages.
    const NAME: &'static str;

    /// Whether the payload is a `BarrierPayload` (see `VTable::forks`).
    const FORKS: bool = false;

    /// Runs the payload.
    ///
    /// # Safety
    /// `task`'s payload is a `Self`, and the calling worker owns the task.
    unsafe fn run(task: NonNull<Task>, tasks: &mut TaskContext) -> Outcome;

    /// Called instead of `run` when a predecessor failed (a fence fails
    /// its semaphore); most kinds do nothing.
    ///
    /// # Safety
    /// As for [`run`](Self::run).
    unsafe fn skip(_task: NonNull<Task>) {}
}

/// The table of kind `K`.
pub(crate) fn vtable<K: Kind>() -> &'static VTable {
    struct Table<K>(PhantomData<K>);
    impl<K: Kind> Table<K> {
        const VTABLE: VTable = VTable {
            run: K::run,
            drop: if std::mem::needs_drop::<K>() {
                Some(drop_in_block::<K>)
            } else {
                None
            },
            skip: K::skip,
            name: K::NAME,
            forks: K::FORKS,
        };
    }
    &Table::<K>::VTABLE
}

/// Drops the `T` payload of a task in place.
///
/// # Safety
/// `task`'s payload is a live `T`, dropped once (by the vtable, at free).
unsafe fn drop_in_block<T>(task: NonNull<Task>) {
    // SAFETY: per contract.
    unsafe { std::ptr::drop_in_place(Task::payload_ptr::<T>(task)) }
}

/// Writes a task of kind `K` and priority `priority` with the payload `make` returns into a fresh block (not yet ready:
/// `unfinished` 0, no links). The payload is made
/// once the block is had, straight into it when the compiler sees through
/// `make` (a payload of a few hundred bytes is not made on the stack and
/// copied); if no block can be had, `make` is dropped uncalled.
#[inline]
pub(crate) fn new_task<K: Kind, C: BlockSource + ?Sized>(
    cache: &mut C,
    scope: NonNull<ScopeInner>,
    priority: Priority,
    make: impl FnOnce() -> K,
) -> Result<NonNull<Task>, Error> {
    const { assert!(Task::fits::<K>(), "payload too large for a task block") };
    // SAFETY: the caller's graph handle or running task keeps the scope
    // alive.
    let counted = unsafe { scope.as_ref() }.counted;
    let block = cache.acquire()?;
    let task = block.as_ptr().cast::<Task>();
    // The block is ours, `TASK_BLOCK` bytes aligned to a cache line.
    // Field by field: writing a whole `Task` value would copy its 192
    // uninitialized payload bytes too.
    let t = task.as_ptr();
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).next) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(crate::list::SingleLinks::new()) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).fork_links) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(crate::list::SingleLinks::new()) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).completion_task) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(crate::sync::Cell::new(None)) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).unfinished) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(super::join_count::JoinCount::new(0)) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).flags) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(crate::sync::atomic::AtomicU32::new(0)) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).scope) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(scope) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).vtable) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(vtable::<K>()) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).block) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(block.index()) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).build) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(crate::sync::Cell::new(0)) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).counted) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(counted) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).runs) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(crate::sync::Cell::new(0)) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).priority) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(priority) };
    // SAFETY: a projection of `t`, in bounds of our task-sized block.
    let field = unsafe { addr_of_mut!((*t).successors) };
    // SAFETY: the field is in our block, aligned for a task.
    unsafe { field.write(crate::sync::Cell::new(super::edges::Successors::default())) };
    // SAFETY: the payload lies in our block, sized and aligned for a `K`
    // (checked by `fits` above).
    unsafe { Task::payload_ptr::<K>(task).write(make()) };
    Ok(task)
}
