//! `DList`: intrusive doubly-linked list (the pending queue's actions).

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use super::links::{
    double_next, double_prev, set_double_next, set_double_prev, DoubleLinks, Linked,
};

/// Intrusive doubly-linked list with O(1) push at both ends, `pop_front`,
/// `erase` of any linked node, `take_all` and `append`. Single-threaded;
/// see the [module contract](super) for the pointer rules.
pub struct DList<T: Linked<DoubleLinks<T>>> {
    head: Option<NonNull<T>>,
    tail: Option<NonNull<T>>,
    len: usize,
    _marker: PhantomData<NonNull<T>>,
}

// SAFETY: the list only holds pointers to nodes it may hand to another
// thread along with itself; nodes must be `Send` for that.
unsafe impl<T: Linked<DoubleLinks<T>> + Send> Send for DList<T> {}

impl<T: Linked<DoubleLinks<T>>> Default for DList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Linked<DoubleLinks<T>>> fmt::Debug for DList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DList").field("len", &self.len).finish()
    }
}

impl<T: Linked<DoubleLinks<T>>> DList<T> {
    /// An empty list.
    pub const fn new() -> Self {
        DList {
            head: None,
            tail: None,
            len: 0,
            _marker: PhantomData,
        }
    }

    /// Whether the list has no nodes.
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Number of linked nodes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// First node.
    pub fn front(&self) -> Option<NonNull<T>> {
        self.head
    }

    /// Last node.
    pub fn back(&self) -> Option<NonNull<T>> {
        self.tail
    }

    /// Links `node` at the end.
    ///
    /// # Safety
    /// `node` is valid, not in any list through these links, and stays valid
    /// and unmoved until it is unlinked (module contract).
    pub unsafe fn push_back(&mut self, node: NonNull<T>) {
        // SAFETY: `node` is valid and ours to link (caller contract); `tail`
        // is a linked node, valid by the same contract.
        unsafe {
            set_double_next(node, None);
            set_double_prev(node, self.tail);
            match self.tail {
                Some(tail) => set_double_next(tail, Some(node)),
                None => self.head = Some(node),
            }
        }
        self.tail = Some(node);
        self.len += 1;
    }

    /// Links `node` at the front.
    ///
    /// # Safety
    /// As for [`push_back`](Self::push_back).
    pub unsafe fn push_front(&mut self, node: NonNull<T>) {
        // SAFETY: as in `push_back`.
        unsafe {
            set_double_prev(node, None);
            set_double_next(node, self.head);
            match self.head {
                Some(head) => set_double_prev(head, Some(node)),
                None => self.tail = Some(node),
            }
        }
        self.head = Some(node);
        self.len += 1;
    }

    /// Links `node` right after `at`, or at the front when `at` is `None`.
    ///
    /// # Safety
    /// As for [`push_back`](Self::push_back), and `at` (if any) is linked in
    /// this list.
    pub unsafe fn insert_after(&mut self, at: Option<NonNull<T>>, node: NonNull<T>) {
        let Some(at) = at else {
            // SAFETY: forwarded contract.
            return unsafe { self.push_front(node) };
        };
        // SAFETY: `at` and its successor are linked here; `node` is ours.
        unsafe {
            let next = double_next(at);
            set_double_prev(node, Some(at));
            set_double_next(node, next);
            set_double_next(at, Some(node));
            match next {
                Some(n) => set_double_prev(n, Some(node)),
                None => self.tail = Some(node),
            }
        }
        self.len += 1;
    }

    /// The node after `node`.
    ///
    /// # Safety
    /// `node` is linked in this list.
    pub unsafe fn next(&self, node: NonNull<T>) -> Option<NonNull<T>> {
        // SAFETY: linked, hence valid.
        unsafe { double_next(node) }
    }

    /// The node before `node`.
    ///
    /// # Safety
    /// `node` is linked in this list.
    pub unsafe fn prev(&self, node: NonNull<T>) -> Option<NonNull<T>> {
        // SAFETY: linked, hence valid.
        unsafe { double_prev(node) }
    }

    /// Unlinks and returns the first node.
    pub fn pop_front(&mut self) -> Option<NonNull<T>> {
        let node = self.head?;
        // SAFETY: `node` is linked here, so valid (module contract).
        unsafe { self.erase(node) };
        Some(node)
    }

    /// Unlinks and returns the last node.
    pub fn pop_back(&mut self) -> Option<NonNull<T>> {
        let node = self.tail?;
        // SAFETY: `node` is linked here, so valid (module contract).
        unsafe { self.erase(node) };
        Some(node)
    }

    /// Unlinks `node` wherever it is, in O(1).
    ///
    /// # Safety
    /// `node` is linked in *this* list.
    pub unsafe fn erase(&mut self, node: NonNull<T>) {
        // SAFETY: `node` and its neighbours are linked here, hence valid.
        unsafe {
            let prev = double_prev(node);
            let next = double_next(node);
            match prev {
                Some(p) => set_double_next(p, next),
                None => {
                    debug_assert_eq!(self.head, Some(node), "erase: node not in this list");
                    self.head = next;
                }
            }
            match next {
                Some(n) => set_double_prev(n, prev),
                None => {
                    debug_assert_eq!(self.tail, Some(node), "erase: node not in this list");
                    self.tail = prev;
                }
            }
            set_double_next(node, None);
            set_double_prev(node, None);
        }
        self.len -= 1;
    }

    /// Moves every node out into a new list, leaving this one empty.
    #[must_use = "the taken nodes are lost (leaked) if the list is dropped"]
    pub fn take_all(&mut self) -> DList<T> {
        std::mem::take(self)
    }

    /// Moves every node of `other` to the end of this list, in order, in O(1).
    pub fn append(&mut self, other: &mut DList<T>) {
        let Some(other_head) = other.head else {
            return;
        };
        match self.tail {
            // SAFETY: both nodes are linked (in `self` and `other`), so valid.
            Some(tail) => unsafe {
                set_double_next(tail, Some(other_head));
                set_double_prev(other_head, Some(tail));
            },
            None => self.head = Some(other_head),
        }
        self.tail = other.tail;
        self.len += other.len;
        *other = DList::new();
    }

    /// Iterates front to back. The list cannot change while iterating.
    pub fn iter(&self) -> DIter<'_, T> {
        DIter {
            next: self.head,
            _list: PhantomData,
        }
    }
}

/// Iterator over a [`DList`], front to back.
pub struct DIter<'a, T: Linked<DoubleLinks<T>>> {
    next: Option<NonNull<T>>,
    _list: PhantomData<&'a DList<T>>,
}

impl<T: Linked<DoubleLinks<T>>> Iterator for DIter<'_, T> {
    type Item = NonNull<T>;

    fn next(&mut self) -> Option<NonNull<T>> {
        let node = self.next?;
        // SAFETY: `node` is linked in the borrowed list, so valid.
        self.next = unsafe { double_next(node) };
        Some(node)
    }
}
