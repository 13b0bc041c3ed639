//! `TransferStack`: multi-producer push, single-swap take-all.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use crossbeam_utils::{Backoff, CachePadded};

use super::ends::Ends;
use super::links::{next, set_next, Handle, SingleLink};
use super::slist::SList;
use crate::sync::atomic::{AtomicPtr, Ordering};

/// Lock-free hand-off of intrusive nodes from many threads to one consumer.
///
/// Producers [`push`](Self::push) with a CAS loop; the consumer takes every
/// node at once with [`take_all`](Self::take_all), a single `swap(null)`,
/// and gets them back in push order. Because nodes are only ever removed all
/// together, no thread ever reads the `next` of a node another thread may be
/// removing, so there is no ABA problem (the one a Treiber stack's `pop`
/// has).
///
/// Ownership: `push` hands the node to the stack; `take_all` hands it to the
/// taker. Any number of threads may call `take_all` concurrently: each node
/// goes to exactly one of them.
///
/// Ordering: the successful push CAS is `Release` and the take's swap is
/// `Acquire`; pushes are read-modify-writes, so one take synchronizes with
/// every push whose node it receives (release sequence), and everything a
/// producer wrote to its node before pushing is visible to the taker.
pub struct TransferStack<L: SingleLink> {
    head: CachePadded<AtomicPtr<L::Node>>,
    _link: PhantomData<Handle<L>>,
}

// SAFETY: nodes move from producers to the consumer; they must be `Send`.
unsafe impl<L: SingleLink> Send for TransferStack<L> where L::Node: Send {}
// SAFETY: all shared access is through the atomic head (see type docs).
unsafe impl<L: SingleLink> Sync for TransferStack<L> where L::Node: Send {}

impl<L: SingleLink> Default for TransferStack<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: SingleLink> fmt::Debug for TransferStack<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransferStack")
            .field("empty", &self.is_empty())
            .finish()
    }
}

impl<L: SingleLink> TransferStack<L> {
    /// An empty stack.
    pub fn new() -> Self {
        TransferStack {
            head: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
            _link: PhantomData,
        }
    }

    /// Whether the stack looked empty at the time of the load (a hint: it
    /// may change right after).
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }

    /// Pushes `node`. Returns `true` if the stack was empty before (the
    /// consumer may need a wake-up).
    pub fn push(&self, node: Handle<L>) -> bool {
        let node = node.into_raw();
        // SAFETY: the handle gave us the right to link `node`: a one-node
        // chain.
        unsafe { self.push_chain(node, node) }
    }

    #[cfg(any(test, feature = "testing"))]
    /// Pushes every node of `list`, as if pushed one by one in list order
    /// (so `take_all` returns them after earlier pushes, in list order), with
    /// one CAS. O(len) to prepare (the chain is reversed first), O(1) shared.
    /// Returns `true` if the stack was empty before.
    pub fn push_list(&self, mut list: SList<L>) -> bool {
        list.reverse();
        self.push_list_unordered(list)
    }

    /// Pushes every node of `list` with one CAS and no walk (O(1)), in no
    /// promised order: `take_all` returns them after earlier pushes but in
    /// reverse list order. For consumers to whom order means nothing (the
    /// executor's injector: a worker giving back what it took and did not
    /// keep would otherwise walk and rewrite every link twice a round).
    /// Returns `true` if the stack was empty before.
    pub fn push_list_unordered(&self, mut list: SList<L>) -> bool {
        match list.take_ends() {
            Ends {
                head: Some(head),
                tail: Some(tail),
                ..
            } => {
                // SAFETY: the list owned the chain `head ..= tail`, linked
                // through `next`, under the module contract, which now moves
                // to the stack.
                unsafe { self.push_chain(head, tail) }
            }
            _ => false,
        }
    }

    /// # Safety
    /// `first ..= last` is a chain linked through `next` of nodes we own.
    unsafe fn push_chain(&self, first: NonNull<L::Node>, last: NonNull<L::Node>) -> bool {
        // Back off on a lost race: under contention, retrying at once makes
        // every CAS fail (measured: ~13x slower pool pairs on two threads).
        let backoff = Backoff::new();
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: we still own `last` until the CAS below succeeds.
            unsafe { set_next::<L>(last, NonNull::new(head)) };
            // Release: pairs with the Acquire swap in `take_all`, publishing
            // the links and the nodes' contents to the taker.
            match self.head.compare_exchange_weak(
                head,
                first.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return head.is_null(),
                Err(now) => {
                    backoff.spin();
                    head = now;
                }
            }
        }
    }

    /// Takes every node pushed so far, in push order (FIFO).
    #[must_use = "the taken nodes are lost (leaked) if the list is dropped"]
    pub fn take_all(&self) -> SList<L> {
        // Relaxed pre-check: skip the RMW (and its cache-line steal) when
        // there is nothing to take.
        if self.head.load(Ordering::Relaxed).is_null() {
            return SList::new();
        }
        // Acquire: pairs with the Release of every push in this chain.
        let Some(top) = NonNull::new(self.head.swap(ptr::null_mut(), Ordering::Acquire)) else {
            return SList::new();
        };
        // The chain runs newest to oldest; reverse it into FIFO order.
        let mut reversed: Option<NonNull<L::Node>> = None;
        let mut cur = Some(top);
        let mut len = 0;
        while let Some(node) = cur {
            // SAFETY: the swap gave us the whole chain; every node in it is
            // valid (producers' contract) and now exclusively ours.
            cur = unsafe { next::<L>(node) };
            // SAFETY: as for the read just above: `node` is valid and
            // exclusively ours.
            unsafe { set_next::<L>(node, reversed) };
            reversed = Some(node);
            len += 1;
        }
        let Some(oldest) = reversed else {
            unreachable!("the chain has at least `top`");
        };
        // SAFETY: `oldest ..= top` is now a FIFO chain of `len` nodes ending
        // at the newest node `top`, whose `next` was set to `None` first.
        unsafe {
            SList::from_ends(Ends {
                head: Some(oldest),
                tail: Some(top),
                len,
            })
        }
    }
}

#[cfg(not(fenceline_loom))]
mod assertions {
    use super::TransferStack;
    use crate::list::{DList, DoubleLinks, SList, SingleLinks};

    struct Node {
        single: SingleLinks<Node>,
        double: DoubleLinks<Node>,
    }
    link!(Single: SingleLinks<Node> => single);
    link!(Double: DoubleLinks<Node> => double);

    static_assertions::assert_impl_all!(TransferStack<Single>: Send, Sync);
    static_assertions::assert_impl_all!(SList<Single>: Send);
    static_assertions::assert_impl_all!(DList<Double>: Send);
    static_assertions::assert_not_impl_any!(SList<Single>: Sync, Clone);
    static_assertions::assert_not_impl_any!(DList<Double>: Sync, Clone);
}
