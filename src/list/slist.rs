//! `SList`: intrusive singly-linked list with a tail (task lists).

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use super::links::{next, set_next, Linked, SingleLinks};

/// Intrusive singly-linked list: O(1) `push_back`, `push_front`,
/// `pop_front`, `append`, `prepend`; O(n) `reverse` and `split`.
/// Single-threaded; see the [module contract](super) for the pointer rules.
pub struct SList<T: Linked<SingleLinks<T>>> {
    head: Option<NonNull<T>>,
    tail: Option<NonNull<T>>,
    len: usize,
    _marker: PhantomData<NonNull<T>>,
}

// SAFETY: as for `DList`: the nodes travel with the list.
unsafe impl<T: Linked<SingleLinks<T>> + Send> Send for SList<T> {}

impl<T: Linked<SingleLinks<T>>> Default for SList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Linked<SingleLinks<T>>> fmt::Debug for SList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SList").field("len", &self.len).finish()
    }
}

impl<T: Linked<SingleLinks<T>>> SList<T> {
    /// An empty list.
    pub const fn new() -> Self {
        SList {
            head: None,
            tail: None,
            len: 0,
            _marker: PhantomData,
        }
    }

    /// A list from an already linked chain.
    ///
    /// # Safety
    /// `head` starts a chain of `len` valid nodes linked through `next`
    /// ending at `tail` (whose `next` is `None`), owned by the caller under
    /// the module contract.
    pub(crate) unsafe fn from_raw_parts(head: NonNull<T>, tail: NonNull<T>, len: usize) -> Self {
        SList {
            head: Some(head),
            tail: Some(tail),
            len,
            _marker: PhantomData,
        }
    }

    /// `(head, tail, len)`; the list is left empty and the chain is the
    /// caller's.
    pub(crate) fn into_raw_parts(mut self) -> Option<(NonNull<T>, NonNull<T>, usize)> {
        let parts = (self.head?, self.tail?, self.len);
        self.head = None;
        self.tail = None;
        self.len = 0;
        Some(parts)
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
        // SAFETY: `node` is ours to link; `tail` is linked, hence valid.
        unsafe {
            set_next(node, None);
            match self.tail {
                Some(tail) => set_next(tail, Some(node)),
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
        // SAFETY: `node` is ours to link.
        unsafe { set_next(node, self.head) };
        if self.head.is_none() {
            self.tail = Some(node);
        }
        self.head = Some(node);
        self.len += 1;
    }

    /// Unlinks and returns the first node.
    pub fn pop_front(&mut self) -> Option<NonNull<T>> {
        let node = self.head?;
        // SAFETY: `node` is linked here, hence valid.
        unsafe {
            self.head = next(node);
            set_next(node, None);
        }
        if self.head.is_none() {
            self.tail = None;
        }
        self.len -= 1;
        Some(node)
    }

    /// Moves all of `suffix` to the end of this list, in O(1).
    pub fn append(&mut self, suffix: &mut SList<T>) {
        let Some(suffix_head) = suffix.head else {
            return;
        };
        match self.tail {
            // SAFETY: `tail` is linked here, hence valid.
            Some(tail) => unsafe { set_next(tail, Some(suffix_head)) },
            None => self.head = Some(suffix_head),
        }
        self.tail = suffix.tail;
        self.len += suffix.len;
        *suffix = SList::new();
    }

    /// Moves all of `prefix` to the front of this list, in O(1).
    pub fn prepend(&mut self, prefix: &mut SList<T>) {
        let Some(prefix_tail) = prefix.tail else {
            return;
        };
        // SAFETY: `prefix_tail` is linked in `prefix`, hence valid.
        unsafe { set_next(prefix_tail, self.head) };
        if self.tail.is_none() {
            self.tail = Some(prefix_tail);
        }
        self.head = prefix.head;
        self.len += prefix.len;
        *prefix = SList::new();
    }

    /// Reverses the list in place, O(n).
    pub fn reverse(&mut self) {
        let mut reversed: Option<NonNull<T>> = None;
        let mut cur = self.head;
        while let Some(node) = cur {
            // SAFETY: `node` is linked here, hence valid.
            unsafe {
                cur = next(node);
                set_next(node, reversed);
            }
            reversed = Some(node);
        }
        std::mem::swap(&mut self.head, &mut self.tail);
    }

    /// Hands off nodes from the tail for stealing: `min(ceil(len / 2), max)`
    /// of them, so a thief takes at most half (and a single node is always
    /// taken: its owner is likely busy with its last task). The stolen nodes
    /// keep their order; this list keeps the front part.
    pub fn split(&mut self, max: usize) -> SList<T> {
        let take = self.len.div_ceil(2).min(max);
        if take == 0 {
            return SList::new();
        }
        if take == self.len {
            return std::mem::take(self);
        }
        let keep = self.len - take;
        let mut last_kept = self.head;
        for _ in 1..keep {
            // SAFETY: the first `keep` nodes are linked here, hence valid.
            last_kept = last_kept.and_then(|n| unsafe { next(n) });
        }
        let Some(last_kept) = last_kept else {
            unreachable!("len counts the linked nodes");
        };
        // SAFETY: `last_kept` is linked here, hence valid.
        let stolen_head = unsafe { next(last_kept) };
        // SAFETY: as above.
        unsafe { set_next(last_kept, None) };
        let stolen = SList {
            head: stolen_head,
            tail: self.tail,
            len: take,
            _marker: PhantomData,
        };
        self.tail = Some(last_kept);
        self.len = keep;
        stolen
    }

    /// Iterates front to back. The list cannot change while iterating.
    pub fn iter(&self) -> SIter<'_, T> {
        SIter {
            next: self.head,
            _list: PhantomData,
        }
    }
}

/// Iterator over an [`SList`], front to back.
pub struct SIter<'a, T: Linked<SingleLinks<T>>> {
    next: Option<NonNull<T>>,
    _list: PhantomData<&'a SList<T>>,
}

impl<T: Linked<SingleLinks<T>>> Iterator for SIter<'_, T> {
    type Item = NonNull<T>;

    fn next(&mut self) -> Option<NonNull<T>> {
        let node = self.next?;
        // SAFETY: `node` is linked in the borrowed list, so valid.
        self.next = unsafe { next(node) };
        Some(node)
    }
}
