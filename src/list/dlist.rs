//! `DList`: intrusive doubly-linked list (the pending queue's actions).

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use super::ends::{list_type, Ends, Iter};
use super::links::{
    double_next, double_prev, set_double_next, set_double_prev, DoubleLink, Handle,
};

list_type!(
    /// Intrusive doubly-linked list through the link `L`, with O(1) push at
    /// both ends, `pop_front`, `remove` of any linked node, `take_all` and
    /// `append`. Single-threaded; see the [module contract](super).
    DList: DoubleLink, double_next::<L>
);

impl<L: DoubleLink> DList<L> {
    /// Links `node` at the end.
    pub fn push_back(&mut self, node: Handle<L>) {
        // SAFETY: `tail` (if any) is linked here.
        unsafe { self.insert_after(self.ends.tail, node) }
    }

    #[cfg(any(test, feature = "testing"))]
    /// Links `node` at the front.
    pub fn push_front(&mut self, node: Handle<L>) {
        // SAFETY: `None` is always a valid position.
        unsafe { self.insert_after(None, node) }
    }

    /// Links `node` right after `at`, or at the front when `at` is `None`.
    ///
    /// # Safety
    /// `at` (if any) is linked in this list.
    pub unsafe fn insert_after(&mut self, at: Option<NonNull<L::Node>>, node: Handle<L>) {
        let node = node.into_raw();
        let next = match at {
            // SAFETY: `at` is linked here (contract), so valid.
            Some(at) => unsafe { double_next::<L>(at) },
            None => self.ends.head,
        };
        // SAFETY: the handle gave us the right to link `node`.
        unsafe { set_double_prev::<L>(node, at) };
        // SAFETY: the handle gave us the right to link `node`.
        unsafe { set_double_next::<L>(node, next) };
        match at {
            // SAFETY: `at` is linked here (contract), so valid.
            Some(at) => unsafe { set_double_next::<L>(at, Some(node)) },
            None => self.ends.head = Some(node),
        }
        match next {
            // SAFETY: `next` is the successor of `at` (or the head), linked
            // here, so valid.
            Some(n) => unsafe { set_double_prev::<L>(n, Some(node)) },
            None => self.ends.tail = Some(node),
        }
        self.ends.len += 1;
    }

    /// The node after `node`.
    ///
    /// # Safety
    /// `node` is linked in this list.
    pub unsafe fn next(&self, node: NonNull<L::Node>) -> Option<NonNull<L::Node>> {
        // SAFETY: linked, hence valid.
        unsafe { double_next::<L>(node) }
    }

    /// The node before `node`.
    ///
    /// # Safety
    /// `node` is linked in this list.
    pub unsafe fn prev(&self, node: NonNull<L::Node>) -> Option<NonNull<L::Node>> {
        // SAFETY: linked, hence valid.
        unsafe { double_prev::<L>(node) }
    }

    /// Unlinks and returns the first node.
    pub fn pop_front(&mut self) -> Option<Handle<L>> {
        let node = self.ends.head?;
        // SAFETY: `node` is linked here.
        Some(unsafe { self.remove(node) })
    }

    #[cfg(any(test, feature = "testing"))]
    /// Unlinks and returns the last node.
    pub fn pop_back(&mut self) -> Option<Handle<L>> {
        let node = self.ends.tail?;
        // SAFETY: `node` is linked here.
        Some(unsafe { self.remove(node) })
    }

    /// Unlinks `node` wherever it is, in O(1), and gives back its handle.
    ///
    /// # Safety
    /// `node` is linked in *this* list.
    pub unsafe fn remove(&mut self, node: NonNull<L::Node>) -> Handle<L> {
        // SAFETY: `node` is linked here (contract), hence valid.
        let prev = unsafe { double_prev::<L>(node) };
        // SAFETY: `node` is linked here (contract), hence valid.
        let next = unsafe { double_next::<L>(node) };
        match prev {
            // SAFETY: `p`, a neighbour of `node`, is linked here, hence valid.
            Some(p) => unsafe { set_double_next::<L>(p, next) },
            None => {
                debug_assert_eq!(self.ends.head, Some(node), "remove: not in this list");
                self.ends.head = next;
            }
        }
        match next {
            // SAFETY: `n`, a neighbour of `node`, is linked here, hence valid.
            Some(n) => unsafe { set_double_prev::<L>(n, prev) },
            None => {
                debug_assert_eq!(self.ends.tail, Some(node), "remove: not in this list");
                self.ends.tail = prev;
            }
        }
        // SAFETY: `node` is linked here (contract), hence valid.
        unsafe { set_double_next::<L>(node, None) };
        // SAFETY: `node` is linked here (contract), hence valid.
        unsafe { set_double_prev::<L>(node, None) };
        self.ends.len -= 1;
        // SAFETY: unlinked just above; the right to link it goes back to
        // the caller with the handle it was pushed with.
        unsafe { Handle::from_raw(node) }
    }

    /// Moves every node out into a new list, leaving this one empty.
    #[must_use = "the taken nodes are lost (leaked) if the list is dropped"]
    pub fn take_all(&mut self) -> DList<L> {
        std::mem::take(self)
    }

    /// Moves every node of `other` to the end of this list, in order, in O(1).
    pub fn append(&mut self, other: &mut DList<L>) {
        let Some(other_head) = other.ends.head else {
            return;
        };
        match self.ends.tail {
            Some(tail) => {
                // SAFETY: `tail` is linked in `self`, so valid.
                unsafe { set_double_next::<L>(tail, Some(other_head)) };
                // SAFETY: `other_head` is linked in `other`, so valid.
                unsafe { set_double_prev::<L>(other_head, Some(tail)) };
            }
            None => self.ends.head = Some(other_head),
        }
        self.ends.tail = other.ends.tail;
        self.ends.len += other.ends.len;
        other.ends = Ends::EMPTY;
    }
}
