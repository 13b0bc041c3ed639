//! Intrusive lists on raw pointers: nodes carry their own links, lists hold
//! only head/tail pointers, and no operation ever allocates.
//!
//! # The pointer contract (for every list here)
//!
//! A node type `T` embeds a link field and implements [`Linked`] to say
//! where it is. The lists never own nodes; they hold `NonNull<T>` that the
//! caller handed in with an `unsafe` push, and the caller promises, for as
//! long as the node is linked:
//!
//! 1. the node stays alive and does not move (it lives in pool memory or a
//!    pinned box);
//! 2. it is linked into at most one list through a given link field (a type
//!    with two link fields may sit in one list through each);
//! 3. nobody else touches its link field.
//!
//! Given that, unlinking (`pop_front`, `take_all`, `split`, iteration) is
//! safe: the pointers it returns are exactly those the caller pushed.
//! Dropping a list with nodes still linked just forgets them (the caller owns
//! them anyway).
//!
//! - [`DList`]: doubly linked, O(1) `erase` anywhere (pending queue actions).
//! - [`SList`]: singly linked with a tail, O(1) `append`/`prepend`, `split`
//!   for stealing (tasks).
//! - [`TransferStack`]: many producers push with a CAS, one consumer takes
//!   everything with a single `swap` and gets it in FIFO order.

mod dlist;
mod links;
mod slist;
mod transfer_stack;

pub use dlist::{DIter, DList};
pub(crate) use links::next as links_next;
pub use links::{DoubleLinks, Linked, SingleLinks};
pub use slist::{SIter, SList};
pub use transfer_stack::TransferStack;

#[cfg(all(test, not(fenceline_loom)))]
mod tests;
