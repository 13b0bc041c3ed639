//! Link fields embedded in list nodes, the [`SingleLink`]/[`DoubleLink`]
//! adapters that find them, and the owning [`Handle`] lists take and give.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::sync::UnsafeCell;

/// Names one link field of a node type: lists are generic over the link,
/// not the node, so a node with two link fields can sit in two lists at
/// once (one through each). Implement it with [`link!`](crate::link).
pub trait Link {
    /// The node type that embeds the link field.
    type Node;
}

/// A [`Link`] to a [`SingleLinks`] field ([`SList`](super::SList),
/// [`TransferStack`](super::TransferStack)).
///
/// # Safety
/// `links` must return a pointer to a field *inside* the node `node` points
/// to, the same field for every call, without reading or writing the node.
pub unsafe trait SingleLink: Link {
    /// The link field of `node`.
    ///
    /// # Safety
    /// `node` points to a node (not necessarily initialized).
    unsafe fn links(node: NonNull<Self::Node>) -> NonNull<SingleLinks<Self::Node>>;
}

/// A [`Link`] to a [`DoubleLinks`] field ([`DList`](super::DList)).
///
/// # Safety
/// As for [`SingleLink`].
pub unsafe trait DoubleLink: Link {
    /// The link field of `node`.
    ///
    /// # Safety
    /// `node` points to a node (not necessarily initialized).
    unsafe fn links(node: NonNull<Self::Node>) -> NonNull<DoubleLinks<Self::Node>>;
}

/// The right to link one node through the link `L`: lists take a handle
/// when a node is pushed and give it back when the node is unlinked, so a
/// node is in at most one list through `L`, and it stays alive and unmoved
/// while it is linked (both promised once, when the handle is made).
///
/// A handle is a pointer: dropping it frees nothing (the node's memory is
/// its owner's: a pool block, a pinned future, a stack frame). Turn it back
/// into the pointer with [`into_raw`](Self::into_raw).
#[must_use = "dropping a handle gives up the right to link its node"]
pub struct Handle<L: Link> {
    node: NonNull<L::Node>,
    _link: PhantomData<L>,
}

// SAFETY: a handle moves the ownership of its node's `L` link; the node may
// cross threads if its type may.
unsafe impl<L: Link> Send for Handle<L> where L::Node: Send {}

impl<L: Link> Handle<L> {
    /// Takes the right to link `node` through `L`.
    ///
    /// # Safety
    /// `node` is valid, is in no list through `L`, no other handle for it
    /// and `L` exists, and it stays valid and unmoved until this handle
    /// (or the one a list gives back for it) is turned back into a pointer
    /// with [`into_raw`](Self::into_raw).
    #[inline]
    pub unsafe fn from_raw(node: NonNull<L::Node>) -> Self {
        Handle {
            node,
            _link: PhantomData,
        }
    }

    /// The node, giving up the right to link it.
    #[inline]
    pub fn into_raw(self) -> NonNull<L::Node> {
        self.node
    }

    /// The node, keeping the handle.
    #[inline]
    pub fn as_ptr(&self) -> NonNull<L::Node> {
        self.node
    }
}

impl<L: Link> fmt::Debug for Handle<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Handle").field(&self.node).finish()
    }
}

impl<L: Link> PartialEq for Handle<L> {
    fn eq(&self, other: &Self) -> bool {
        self.node == other.node
    }
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
/// `node` is valid and its `L` links are not accessed concurrently.
#[inline]
pub(crate) unsafe fn next<L: SingleLink>(node: NonNull<L::Node>) -> Option<NonNull<L::Node>> {
    #[cfg(all(not(fenceline_loom), fenceline_count_rmw))]
    crate::sync::rmw_count::link_read();
    // SAFETY: `node` is valid (caller), so `links` may be called on it.
    let links = unsafe { L::links(node) };
    // SAFETY: `links` points into the valid node.
    let links = unsafe { links.as_ref() };
    // SAFETY: access to the node's links is exclusive (caller).
    links.next.with(|p| unsafe { *p })
}

/// # Safety
/// As for [`next`].
#[inline]
pub(crate) unsafe fn set_next<L: SingleLink>(node: NonNull<L::Node>, to: Option<NonNull<L::Node>>) {
    // SAFETY: `node` is valid (caller), so `links` may be called on it.
    let links = unsafe { L::links(node) };
    // SAFETY: `links` points into the valid node.
    let links = unsafe { links.as_ref() };
    // SAFETY: access to the node's links is exclusive (caller).
    links.next.with_mut(|p| unsafe { *p = to })
}

/// # Safety
/// As for [`next`].
#[inline]
pub(crate) unsafe fn double_next<L: DoubleLink>(
    node: NonNull<L::Node>,
) -> Option<NonNull<L::Node>> {
    // SAFETY: `node` is valid (caller), so `links` may be called on it.
    let links = unsafe { L::links(node) };
    // SAFETY: `links` points into the valid node.
    let links = unsafe { links.as_ref() };
    // SAFETY: access to the node's links is exclusive (caller).
    links.next.with(|p| unsafe { *p })
}

/// # Safety
/// As for [`next`].
#[inline]
pub(crate) unsafe fn double_prev<L: DoubleLink>(
    node: NonNull<L::Node>,
) -> Option<NonNull<L::Node>> {
    // SAFETY: `node` is valid (caller), so `links` may be called on it.
    let links = unsafe { L::links(node) };
    // SAFETY: `links` points into the valid node.
    let links = unsafe { links.as_ref() };
    // SAFETY: access to the node's links is exclusive (caller).
    links.prev.with(|p| unsafe { *p })
}

/// # Safety
/// As for [`next`].
#[inline]
pub(crate) unsafe fn set_double_next<L: DoubleLink>(
    node: NonNull<L::Node>,
    to: Option<NonNull<L::Node>>,
) {
    // SAFETY: `node` is valid (caller), so `links` may be called on it.
    let links = unsafe { L::links(node) };
    // SAFETY: `links` points into the valid node.
    let links = unsafe { links.as_ref() };
    // SAFETY: access to the node's links is exclusive (caller).
    links.next.with_mut(|p| unsafe { *p = to })
}

/// # Safety
/// As for [`next`].
#[inline]
pub(crate) unsafe fn set_double_prev<L: DoubleLink>(
    node: NonNull<L::Node>,
    to: Option<NonNull<L::Node>>,
) {
    // SAFETY: `node` is valid (caller), so `links` may be called on it.
    let links = unsafe { L::links(node) };
    // SAFETY: `links` points into the valid node.
    let links = unsafe { links.as_ref() };
    // SAFETY: access to the node's links is exclusive (caller).
    links.prev.with_mut(|p| unsafe { *p = to })
}

/// Declares a link: an uninhabited type naming one link field of a node
/// type, with its [`Link`] and [`SingleLink`] or [`DoubleLink`]
/// implementation (a field projection, the only correct one, so no
/// `unsafe` is left to the caller).
///
/// ```
/// use std::ptr::NonNull;
/// use fenceline::testing::list::{link, DoubleLinks, Handle, SList, SingleLinks};
///
/// struct Job { id: u32, queued: SingleLinks<Job>, waiting: DoubleLinks<Job> }
/// link!(JobQueue: SingleLinks<Job> => queued);
/// link!(JobWait: DoubleLinks<Job> => waiting);
///
/// let mut a = Job { id: 1, queued: SingleLinks::new(), waiting: DoubleLinks::new() };
/// let mut b = Job { id: 2, queued: SingleLinks::new(), waiting: DoubleLinks::new() };
/// let mut list = SList::<JobQueue>::new();
/// // SAFETY: `a` and `b` outlive the list's use of them and do not move.
/// unsafe {
///     list.push_back(Handle::from_raw(NonNull::from(&mut a)));
///     list.push_back(Handle::from_raw(NonNull::from(&mut b)));
/// }
/// let ids: Vec<u32> = list.iter().map(|n| unsafe { n.as_ref() }.id).collect();
/// assert_eq!(ids, [1, 2]);
/// ```
// The crate's own uses reach it by textual scope (`#[macro_use]` on `mod
// links` and `mod list`, declared first): a `pub(crate) use link;` would
// clash with the builtin `#[link]` attribute. With the `testing` feature it
// is exported too (`fenceline::testing::list::link!`) and names the list
// traits through `testing`, the path that exists outside the crate;
// `local_inner_macros` makes its call of `link_impl!` `$crate::link_impl!`.
#[cfg(feature = "testing")]
#[macro_export(local_inner_macros)]
#[doc(hidden)]
macro_rules! link {
    ($(#[$meta:meta])* $vis:vis $name:ident : SingleLinks<$node:ty> => $field:ident) => {
        link_impl!([$crate::testing::list] $(#[$meta])* $vis $name, $node, $field, SingleLink, SingleLinks);
    };
    ($(#[$meta:meta])* $vis:vis $name:ident : DoubleLinks<$node:ty> => $field:ident) => {
        link_impl!([$crate::testing::list] $(#[$meta])* $vis $name, $node, $field, DoubleLink, DoubleLinks);
    };
}

#[cfg(not(feature = "testing"))]
macro_rules! link {
    ($(#[$meta:meta])* $vis:vis $name:ident : SingleLinks<$node:ty> => $field:ident) => {
        link_impl!([$crate::list] $(#[$meta])* $vis $name, $node, $field, SingleLink, SingleLinks);
    };
    ($(#[$meta:meta])* $vis:vis $name:ident : DoubleLinks<$node:ty> => $field:ident) => {
        link_impl!([$crate::list] $(#[$meta])* $vis $name, $node, $field, DoubleLink, DoubleLinks);
    };
}

/// `link!`'s expansion, the list module's path given.
#[cfg_attr(feature = "testing", macro_export)]
#[doc(hidden)]
macro_rules! link_impl {
    ([$($list:tt)*] $(#[$meta:meta])* $vis:vis $name:ident, $node:ty, $field:ident,
     $link:ident, $links:ident) => {
        $(#[$meta])*
        #[derive(Debug)]
        $vis enum $name {}
        impl $($list)*::Link for $name {
            type Node = $node;
        }
        // SAFETY: `links` projects to the named field of the node, without
        // reading or writing it.
        unsafe impl $($list)*::$link for $name {
            #[inline]
            unsafe fn links(
                node: ::core::ptr::NonNull<$node>,
            ) -> ::core::ptr::NonNull<$($list)*::$links<$node>> {
                // SAFETY: a field projection of a node pointer is in bounds
                // and non-null.
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
