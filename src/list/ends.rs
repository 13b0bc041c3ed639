//! What `SList` and `DList` share: the head, tail and length of a chain,
//! and the walk along it.

use std::marker::PhantomData;
use std::ptr::NonNull;

/// The two ends of a chain of linked nodes and how many it holds.
pub(super) struct Ends<T> {
    pub(super) head: Option<NonNull<T>>,
    pub(super) tail: Option<NonNull<T>>,
    pub(super) len: usize,
}

impl<T> Ends<T> {
    pub(super) const EMPTY: Ends<T> = Ends {
        head: None,
        tail: None,
        len: 0,
    };

    /// Takes the chain, leaving these ends empty.
    pub(super) fn take(&mut self) -> Ends<T> {
        std::mem::replace(self, Ends::EMPTY)
    }
}

/// Iterator over a list's nodes, front to back, as pointers (valid while
/// the list is borrowed: linked nodes are valid by the list contract).
pub struct Iter<'a, T> {
    next: Option<NonNull<T>>,
    /// The link accessor of the list's link type.
    step: unsafe fn(NonNull<T>) -> Option<NonNull<T>>,
    _list: PhantomData<&'a T>,
}

impl<'a, T> Iter<'a, T> {
    /// # Safety
    /// `head` starts a chain of nodes linked through `step` that stays
    /// linked and valid for `'a`.
    pub(super) unsafe fn new(
        head: Option<NonNull<T>>,
        step: unsafe fn(NonNull<T>) -> Option<NonNull<T>>,
    ) -> Self {
        Iter {
            next: head,
            step,
            _list: PhantomData,
        }
    }
}

impl<T> Iterator for Iter<'_, T> {
    type Item = NonNull<T>;

    fn next(&mut self) -> Option<NonNull<T>> {
        let node = self.next?;
        // SAFETY: `node` is linked in the borrowed list, so valid (`new`).
        self.next = unsafe { (self.step)(node) };
        Some(node)
    }
}

/// Declares a list type over `Ends` and the parts every list shares: the
/// struct, `Send`, `Default`, `Debug`, `Extend`, `new`, `is_empty`, `len`,
/// `front`, `back` and `iter` (walking with `$next`).
macro_rules! list_type {
    ($(#[$meta:meta])* $name:ident: $link:ident, $next:path) => {
        $(#[$meta])*
        pub struct $name<L: $link> {
            ends: Ends<L::Node>,
            _link: PhantomData<Handle<L>>,
        }

        // SAFETY: the list only holds pointers to nodes it hands to another
        // thread along with itself; nodes must be `Send` for that.
        unsafe impl<L: $link> Send for $name<L> where L::Node: Send {}

        impl<L: $link> Default for $name<L> {
            fn default() -> Self {
                Self::new()
            }
        }

        impl<L: $link> fmt::Debug for $name<L> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name)).field("len", &self.len()).finish()
            }
        }

        impl<L: $link> Extend<Handle<L>> for $name<L> {
            fn extend<I: IntoIterator<Item = Handle<L>>>(&mut self, nodes: I) {
                for node in nodes {
                    self.push_back(node);
                }
            }
        }

        impl<L: $link> $name<L> {
            /// An empty list.
            pub const fn new() -> Self {
                $name {
                    ends: Ends::EMPTY,
                    _link: PhantomData,
                }
            }

            /// Whether the list has no nodes.
            pub fn is_empty(&self) -> bool {
                self.ends.head.is_none()
            }

            /// Number of linked nodes.
            pub fn len(&self) -> usize {
                self.ends.len
            }

            /// First node (still linked).
            // Both list types get `front` and `back`; a singly linked
            // list's are used only by tests.
            #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
            pub fn front(&self) -> Option<NonNull<L::Node>> {
                self.ends.head
            }

            /// Last node (still linked).
            #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
            pub fn back(&self) -> Option<NonNull<L::Node>> {
                self.ends.tail
            }

            /// Iterates front to back. The list cannot change while
            /// iterating.
            pub fn iter(&self) -> Iter<'_, L::Node> {
                // SAFETY: the chain stays linked while `self` is borrowed.
                unsafe { Iter::new(self.ends.head, $next) }
            }
        }
    };
}
pub(super) use list_type;
