//! Intrusive lists on raw pointers: nodes carry their own links, lists hold
//! only head/tail pointers, and no operation ever allocates.
//!
//! # The pointer contract (for every list here)
//!
//! A node type embeds link fields ([`SingleLinks`], [`DoubleLinks`]); a
//! [`link!`](crate::link) names one of them with a type, and lists are
//! generic over that link, so a node with two link fields may sit in two
//! lists at once (as tokio's `util/linked_list.rs` does it). Lists never
//! own node memory: pushing takes a [`Handle`], the right to link the node
//! through that link, and unlinking gives it back. Making a handle is the
//! one `unsafe` promise, for as long as the node is linked:
//!
//! 1. the node stays alive and does not move (it lives in pool memory, a
//!    pinned future or a stack frame that outlives the list's use);
//! 2. it is linked into at most one list through a given link (one handle
//!    per node and link);
//! 3. nobody else touches that link field (link accessors are `unsafe`).
//!
//! Given that, pushing and unlinking (`pop_front`, `take_all`, `split`) are
//! safe, and the handles they return are exactly those pushed. Erasing a
//! node from the middle of a `DList` (`remove`) names it by pointer and is
//! `unsafe`. Dropping a list with nodes still linked just forgets them (the
//! node memory is its owner's anyway).
//!
//! - [`DList`]: doubly linked, O(1) `remove` anywhere (pending queue actions).
//! - [`SList`]: singly linked with a tail, O(1) `append`/`prepend`, `split`
//!   for stealing (tasks).
//! - [`TransferStack`]: many producers push with a CAS, one consumer takes
//!   everything with a single `swap` and gets it in FIFO order.
//! - [`Injector`]: many producers and many consumers, FIFO, O(1) amortized
//!   per node (a `TransferStack` and a consumer token).

// First, with its macro: `link!` is in scope for the modules after it.
#[macro_use]
mod links;
mod dlist;
mod ends;
mod injector;
mod slist;
mod transfer_stack;

pub use dlist::DList;
#[cfg(any(test, feature = "testing"))]
pub use ends::Iter;
#[cfg(any(test, feature = "testing"))]
pub use injector::Front;
pub use injector::{Injector, Take};
pub(crate) use links::next as links_next;
pub(crate) use links::set_next as set_links_next;
pub use links::{DoubleLink, DoubleLinks, Handle, Link, SingleLink, SingleLinks};
pub use slist::SList;
pub use transfer_stack::TransferStack;

#[cfg(all(test, not(fenceline_loom)))]
mod tests;
