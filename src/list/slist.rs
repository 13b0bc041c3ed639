//! `SList`: intrusive singly-linked list with a tail (task lists).

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use super::ends::{list_type, Ends, Iter};
use super::links::{next, set_next, Handle, SingleLink};

list_type!(
    /// Intrusive singly-linked list through the link `L`: O(1) `push_back`,
    /// `push_front`, `pop_front`, `append`, `prepend`; O(n) `reverse` and
    /// `split`. Single-threaded; see the [module contract](super).
    SList: SingleLink, next::<L>
);

impl<L: SingleLink> SList<L> {
    /// # Safety
    /// `ends` describes a chain of valid nodes linked through `L`, owned by
    /// the caller under the module contract, whose tail's `next` is `None`.
    pub(super) unsafe fn from_ends(ends: Ends<L::Node>) -> Self {
        SList {
            ends,
            _link: PhantomData,
        }
    }

    /// The chain; the list is left empty and the chain is the caller's.
    pub(super) fn take_ends(&mut self) -> Ends<L::Node> {
        self.ends.take()
    }

    /// Links `node` at the end.
    pub fn push_back(&mut self, node: Handle<L>) {
        let node = node.into_raw();
        // SAFETY: the handle gave us the right to link `node`.
        unsafe { set_next::<L>(node, None) };
        match self.ends.tail {
            // SAFETY: `tail` is linked here, hence valid.
            Some(tail) => unsafe { set_next::<L>(tail, Some(node)) },
            None => self.ends.head = Some(node),
        }
        self.ends.tail = Some(node);
        self.ends.len += 1;
    }

    /// Links `node` at the front.
    pub fn push_front(&mut self, node: Handle<L>) {
        let node = node.into_raw();
        // SAFETY: the handle gave us the right to link `node`.
        unsafe { set_next::<L>(node, self.ends.head) };
        if self.ends.head.is_none() {
            self.ends.tail = Some(node);
        }
        self.ends.head = Some(node);
        self.ends.len += 1;
    }

    /// Unlinks and returns the first node.
    pub fn pop_front(&mut self) -> Option<Handle<L>> {
        let node = self.ends.head?;
        // SAFETY: `node` is linked here, hence valid.
        self.ends.head = unsafe { next::<L>(node) };
        // SAFETY: `node` is linked here, hence valid.
        unsafe { set_next::<L>(node, None) };
        if self.ends.head.is_none() {
            self.ends.tail = None;
        }
        self.ends.len -= 1;
        // SAFETY: unlinked just above; the right to link it goes back to
        // the caller with the handle it was pushed with.
        Some(unsafe { Handle::from_raw(node) })
    }

    /// Moves all of `suffix` to the end of this list, in O(1).
    pub fn append(&mut self, suffix: &mut SList<L>) {
        let Some(suffix_head) = suffix.ends.head else {
            return;
        };
        match self.ends.tail {
            // SAFETY: `tail` is linked here, hence valid.
            Some(tail) => unsafe { set_next::<L>(tail, Some(suffix_head)) },
            None => self.ends.head = Some(suffix_head),
        }
        self.ends.tail = suffix.ends.tail;
        self.ends.len += suffix.ends.len;
        suffix.ends = Ends::EMPTY;
    }

    #[cfg(any(test, feature = "testing"))]
    /// Moves all of `prefix` to the front of this list, in O(1).
    pub fn prepend(&mut self, prefix: &mut SList<L>) {
        let Some(prefix_tail) = prefix.ends.tail else {
            return;
        };
        // SAFETY: `prefix_tail` is linked in `prefix`, hence valid.
        unsafe { set_next::<L>(prefix_tail, self.ends.head) };
        if self.ends.tail.is_none() {
            self.ends.tail = Some(prefix_tail);
        }
        self.ends.head = prefix.ends.head;
        self.ends.len += prefix.ends.len;
        prefix.ends = Ends::EMPTY;
    }

    /// Detaches the first `n` nodes (all of them if fewer), in order, O(n).
    pub fn split_front(&mut self, n: usize) -> SList<L> {
        if n >= self.ends.len {
            return std::mem::take(self);
        }
        if n == 0 {
            return SList::new();
        }
        let head = self.ends.head;
        let mut last = head;
        for _ in 1..n {
            // SAFETY: the first `n` nodes are linked here, hence valid.
            last = last.and_then(|node| unsafe { next::<L>(node) });
        }
        let Some(last) = last else {
            unreachable!("len counts the linked nodes");
        };
        // SAFETY: `last` is linked here, hence valid.
        self.ends.head = unsafe { next::<L>(last) };
        // SAFETY: `last` is linked here, hence valid; cutting after it
        // leaves two well-formed chains.
        unsafe { set_next::<L>(last, None) };
        self.ends.len -= n;
        // SAFETY: `head ..= last` is a chain of `n` nodes we own, ended by
        // `None`.
        unsafe {
            SList::from_ends(Ends {
                head,
                tail: Some(last),
                len: n,
            })
        }
    }

    /// Gives up the chain as its first node (the caller owns the chain
    /// from there on, ended by `None`); `None` if empty.
    pub fn into_chain(mut self) -> Option<NonNull<L::Node>> {
        self.take_ends().head
    }

    /// Takes ownership of a chain given up by [`into_chain`](Self::into_chain),
    /// O(n) (walks it to count it and find its tail).
    ///
    /// # Safety
    /// `head` starts a chain of valid nodes linked through `L`, ended by
    /// `None`, that the caller owns under the module contract.
    pub unsafe fn from_chain(head: NonNull<L::Node>) -> SList<L> {
        // SAFETY: forwarded contract.
        unsafe { Self::from_chain_visiting(head, |_| {}) }
    }

    /// [`from_chain`](Self::from_chain), calling `visit` on each node as
    /// the walk passes it (one walk for the caller's look at each node and
    /// the count).
    ///
    /// # Safety
    /// As for `from_chain`; `visit` does not touch the nodes' `L` links.
    pub(crate) unsafe fn from_chain_visiting(
        head: NonNull<L::Node>,
        mut visit: impl FnMut(NonNull<L::Node>),
    ) -> SList<L> {
        let (mut tail, mut len) = (head, 1);
        visit(head);
        // SAFETY: the chain's nodes are valid per contract.
        while let Some(n) = unsafe { next::<L>(tail) } {
            visit(n);
            tail = n;
            len += 1;
        }
        // SAFETY: per contract, with the tail and length just counted.
        unsafe {
            SList::from_ends(Ends {
                head: Some(head),
                tail: Some(tail),
                len,
            })
        }
    }

    #[cfg(any(test, feature = "testing"))]
    /// Reverses the list in place, O(n).
    pub fn reverse(&mut self) {
        let mut reversed: Option<NonNull<L::Node>> = None;
        let mut cur = self.ends.head;
        while let Some(node) = cur {
            // SAFETY: `node` is linked here, hence valid.
            cur = unsafe { next::<L>(node) };
            // SAFETY: `node` is linked here, hence valid.
            unsafe { set_next::<L>(node, reversed) };
            reversed = Some(node);
        }
        std::mem::swap(&mut self.ends.head, &mut self.ends.tail);
    }

    #[cfg(any(test, feature = "testing"))]
    /// Hands off nodes from the tail for stealing: `min(ceil(len / 2), max)`
    /// of them, so a thief takes at most half (and a single node is always
    /// taken: its owner is likely busy with its last task). The stolen nodes
    /// keep their order; this list keeps the front part.
    pub fn split(&mut self, max: usize) -> SList<L> {
        let take = self.ends.len.div_ceil(2).min(max);
        if take == 0 {
            return SList::new();
        }
        if take == self.ends.len {
            return std::mem::take(self);
        }
        let keep = self.ends.len - take;
        let mut last_kept = self.ends.head;
        for _ in 1..keep {
            // SAFETY: the first `keep` nodes are linked here, hence valid.
            last_kept = last_kept.and_then(|n| unsafe { next::<L>(n) });
        }
        let Some(last_kept) = last_kept else {
            unreachable!("len counts the linked nodes");
        };
        // SAFETY: `last_kept` is linked here, hence valid.
        let stolen_head = unsafe { next::<L>(last_kept) };
        // SAFETY: as above.
        unsafe { set_next::<L>(last_kept, None) };
        let stolen = Ends {
            head: stolen_head,
            tail: self.ends.tail,
            len: take,
        };
        self.ends.tail = Some(last_kept);
        self.ends.len = keep;
        // SAFETY: the stolen part is a chain of `take` nodes ending at our
        // old tail, whose `next` is `None`.
        unsafe { SList::from_ends(stolen) }
    }
}
