//! Link fields embedded in list nodes, and the [`Linked`] trait that finds
//! them.

use std::fmt;
use std::ptr::NonNull;

use crate::sync::UnsafeCell;

/// A node type that embeds a link field of type `L`.
///
/// # Safety
/// `links` must return a pointer to a field *inside* the node `node` points
/// to (so it is valid exactly as long as the node), the same field for every
/// call, and must not read or write the node.
///
/// ```
/// use std::ptr::NonNull;
/// use fenceline::list::{Linked, SingleLinks, SList};
///
/// struct Job { id: u32, links: SingleLinks<Job> }
/// // SAFETY: `links` points at the `links` field of the node.
/// unsafe impl Linked<SingleLinks<Job>> for Job {
///     fn links(node: NonNull<Self>) -> NonNull<SingleLinks<Job>> {
///         // SAFETY: a field projection of a valid node pointer.
///         unsafe { NonNull::new_unchecked(std::ptr::addr_of_mut!((*node.as_ptr()).links)) }
///     }
/// }
///
/// let mut a = Job { id: 1, links: SingleLinks::new() };
/// let mut b = Job { id: 2, links: SingleLinks::new() };
/// let mut list = SList::new();
/// // SAFETY: `a` and `b` outlive the list's use of them and do not move.
/// unsafe { list.push_back(NonNull::from(&mut a)); list.push_back(NonNull::from(&mut b)); }
/// let ids: Vec<u32> = list.iter().map(|n| unsafe { n.as_ref() }.id).collect();
/// assert_eq!(ids, [1, 2]);
/// ```
pub unsafe trait Linked<L> {
    /// The link field of `node`.
    fn links(node: NonNull<Self>) -> NonNull<L>;
}

/// `next` link for [`SList`](super::SList) and
/// [`TransferStack`](super::TransferStack).
pub struct SingleLinks<T> {
    next: UnsafeCell<Option<NonNull<T>>>,
}

/// `next` and `prev` links for [`DList`](super::DList).
pub struct DoubleLinks<T> {
    next: UnsafeCell<Option<NonNull<T>>>,
    prev: UnsafeCell<Option<NonNull<T>>>,
}

// SAFETY: links are plain pointers whose use is governed by the list
// contract; the node type decides whether nodes may cross threads.
unsafe impl<T: Send> Send for SingleLinks<T> {}
// SAFETY: as above; concurrent access is only through `TransferStack`, which
// orders it with release/acquire.
unsafe impl<T: Send> Sync for SingleLinks<T> {}
// SAFETY: as for `SingleLinks`.
unsafe impl<T: Send> Send for DoubleLinks<T> {}
// SAFETY: as for `SingleLinks`; a `DList` is single-threaded.
unsafe impl<T: Send> Sync for DoubleLinks<T> {}

impl<T> SingleLinks<T> {
    /// Unlinked.
    pub fn new() -> Self {
        SingleLinks {
            next: UnsafeCell::new(None),
        }
    }
}

impl<T> Default for SingleLinks<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> DoubleLinks<T> {
    /// Unlinked.
    pub fn new() -> Self {
        DoubleLinks {
            next: UnsafeCell::new(None),
            prev: UnsafeCell::new(None),
        }
    }
}

impl<T> Default for DoubleLinks<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for SingleLinks<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SingleLinks")
    }
}

impl<T> fmt::Debug for DoubleLinks<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DoubleLinks")
    }
}

// Accessors used by the lists. Each is `unsafe`: the caller holds the right
// to touch the node's links under the contract in `list/mod.rs`.

/// # Safety
/// `node` is valid and its single links are not accessed concurrently.
#[inline]
pub(crate) unsafe fn next<T: Linked<SingleLinks<T>>>(node: NonNull<T>) -> Option<NonNull<T>> {
    // SAFETY: `links` points into the valid node; access is exclusive.
    unsafe { T::links(node).as_ref().next.with(|p| *p) }
}

/// # Safety
/// As for [`next`].
#[inline]
pub(crate) unsafe fn set_next<T: Linked<SingleLinks<T>>>(node: NonNull<T>, to: Option<NonNull<T>>) {
    // SAFETY: `links` points into the valid node; access is exclusive.
    unsafe { T::links(node).as_ref().next.with_mut(|p| *p = to) }
}

/// # Safety
/// `node` is valid and its double links are not accessed concurrently.
#[inline]
pub(crate) unsafe fn double_next<T: Linked<DoubleLinks<T>>>(
    node: NonNull<T>,
) -> Option<NonNull<T>> {
    // SAFETY: as for `next`.
    unsafe { T::links(node).as_ref().next.with(|p| *p) }
}

/// # Safety
/// As for [`double_next`].
#[inline]
pub(crate) unsafe fn double_prev<T: Linked<DoubleLinks<T>>>(
    node: NonNull<T>,
) -> Option<NonNull<T>> {
    // SAFETY: as for `next`.
    unsafe { T::links(node).as_ref().prev.with(|p| *p) }
}

/// # Safety
/// As for [`double_next`].
#[inline]
pub(crate) unsafe fn set_double_next<T: Linked<DoubleLinks<T>>>(
    node: NonNull<T>,
    to: Option<NonNull<T>>,
) {
    // SAFETY: as for `next`.
    unsafe { T::links(node).as_ref().next.with_mut(|p| *p = to) }
}

/// # Safety
/// As for [`double_next`].
#[inline]
pub(crate) unsafe fn set_double_prev<T: Linked<DoubleLinks<T>>>(
    node: NonNull<T>,
    to: Option<NonNull<T>>,
) {
    // SAFETY: as for `next`.
    unsafe { T::links(node).as_ref().prev.with_mut(|p| *p = to) }
}

/// Implements `Linked` for a node type by naming its link field, which is
/// the only correct implementation (a field projection), so no `unsafe` is
/// left to the caller.
///
/// ```
/// use fenceline::list::{SingleLinks, DoubleLinks};
/// struct Action { id: u32, next: SingleLinks<Action>, pending: DoubleLinks<Action> }
/// fenceline::impl_linked!(Action, next: SingleLinks<Action>);
/// fenceline::impl_linked!(Action, pending: DoubleLinks<Action>);
/// ```
#[macro_export]
macro_rules! impl_linked {
    ($node:ty, $field:ident : $links:ty) => {
        // SAFETY: `links` projects to the named field of the node, without
        // reading or writing it.
        unsafe impl $crate::list::Linked<$links> for $node {
            #[inline]
            fn links(node: ::core::ptr::NonNull<Self>) -> ::core::ptr::NonNull<$links> {
                // SAFETY: a field projection of a pointer to a valid node is
                // in bounds and non-null.
                unsafe {
                    ::core::ptr::NonNull::new_unchecked(::core::ptr::addr_of_mut!(
                        (*node.as_ptr()).$field
                    ))
                }
            }
        }
    };
}

// Links are exactly their pointers (std build; loom's cells carry tracking).
#[cfg(not(fenceline_loom))]
static_assertions::assert_eq_size!(SingleLinks<u64>, *const u64);
#[cfg(not(fenceline_loom))]
static_assertions::assert_eq_size!(DoubleLinks<u64>, [*const u64; 2]);
