//! `Injector`: many producers, many consumers, O(1) amortized per node.

use std::fmt;

use crossbeam_utils::CachePadded;

use super::links::{Handle, SingleLink};
use super::slist::SList;
use super::transfer_stack::TransferStack;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::UnsafeCell;

/// A FIFO of intrusive nodes that any thread pushes to and any thread
/// takes from, each node costing O(1) amortized (a two-stack queue).
///
/// Producers push onto a [`TransferStack`] (one CAS, no walk). Consumers
/// take through a **token**: the thread that swaps it from `false` holds
/// the consumer's list (`taken`) until it swaps it back, and moves into it
/// whatever the producers pushed (one swap, one reversal) only when it is
/// empty, so every node is moved and reversed once in its life. A consumer
/// that finds the token held does not wait: [`take`](Self::take) says
/// `Busy`, and the caller looks elsewhere.
///
/// A taker never gives a node back: what it leaves stays in `taken`. So
/// nothing is walked twice (a take-all stack whose taker keeps one node
/// and pushes the rest back walks every node left at every take: n
/// nodes cost O(n²)).
///
/// # Nodes out of sight
///
/// Between a holder's swap of `incoming` and its store of `pending`,
/// another consumer can see neither. Its `take` then says `Empty`, and a
/// caller that parks on that answer is woken by the holder:
/// [`take`](Self::take) reports whether nodes were left
/// (`Taken { left: true }`), and the caller then tells the sleepers (the
/// executor's `notify`). A `Busy` answer is an RMW on the token, which the
/// holder's release RMW reads from, so the holder's look at `incoming`
/// after its release sees every push the busy caller had seen.
pub struct Injector<L: SingleLink> {
    /// Where producers push.
    incoming: TransferStack<L>,
    /// The consumer's side, one cache line: the token and what it guards.
    consumer: CachePadded<Consumer<L>>,
}

struct Consumer<L: SingleLink> {
    /// Held (`true`) by the one consumer that may touch `taken`. Swapped
    /// both ways (AcqRel): each holder's release is read by the next
    /// holder's acquire, so `taken` passes from one to the next with its
    /// contents.
    token: AtomicBool,
    /// `taken` is not empty (stored by the holder before its release; read
    /// by anyone as a hint, without the token).
    pending: AtomicBool,
    /// Nodes moved out of `incoming`, oldest first; the token holder's.
    taken: UnsafeCell<SList<L>>,
}

/// What a [`take`](Injector::take) found.
#[derive(Debug)]
pub enum Take<T> {
    /// A node (the oldest); `left`: nodes remain, which the caller must
    /// make known to anyone who may have found the injector empty
    /// meanwhile (see the type's docs).
    Taken {
        /// What the caller's function made of the node.
        value: T,
        /// Nodes remain after this take.
        left: bool,
    },
    /// Nothing to take (as far as this caller could see).
    Empty,
    /// Another consumer holds the token; it reports what it leaves.
    Busy,
}

// SAFETY: nodes move from producers to consumers; they must be `Send`.
unsafe impl<L: SingleLink> Send for Injector<L> where L::Node: Send {}
// SAFETY: `incoming` is a `TransferStack` (Sync for Send nodes); `taken`
// is touched only by the token's holder, and the token's AcqRel swaps
// order one holder's accesses before the next's.
unsafe impl<L: SingleLink> Sync for Injector<L> where L::Node: Send {}

impl<L: SingleLink> Default for Injector<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: SingleLink> fmt::Debug for Injector<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Injector")
            .field("empty", &self.is_empty())
            .finish()
    }
}

impl<L: SingleLink> Injector<L> {
    /// An empty injector.
    pub fn new() -> Self {
        Injector {
            incoming: TransferStack::new(),
            consumer: CachePadded::new(Consumer {
                token: AtomicBool::new(false),
                pending: AtomicBool::new(false),
                taken: UnsafeCell::new(SList::new()),
            }),
        }
    }

    /// Whether the injector looked empty (a hint: it may change right
    /// after, and nodes a taker is moving are seen by neither side).
    pub fn is_empty(&self) -> bool {
        self.incoming.is_empty() && !self.consumer.pending.load(Ordering::Relaxed)
    }

    #[cfg(any(test, feature = "testing"))]
    /// Pushes `node` (after every node pushed before it).
    pub fn push(&self, node: Handle<L>) {
        self.incoming.push(node);
    }

    /// Pushes every node of `list` with one CAS and no walk, in no
    /// promised order among themselves (see
    /// [`TransferStack::push_list_unordered`]).
    pub fn push_list_unordered(&self, list: SList<L>) {
        self.incoming.push_list_unordered(list);
    }

    /// Takes the oldest node and runs `f` on it while holding the token:
    /// `f` gets the node and may put nodes back at the front of the
    /// consumer's list (the rest of what it took: the executor's level
    /// injectors take one task of a chunk), which takes no walk. `f` runs
    /// no user code and returns promptly: other consumers find the
    /// injector `Busy` meanwhile.
    pub fn take<T>(&self, f: impl FnOnce(Handle<L>, &mut Front<'_, L>) -> T) -> Take<T> {
        // Hints first: no RMW on an empty injector's token line.
        if self.is_empty() {
            return Take::Empty;
        }
        let c = &*self.consumer;
        // AcqRel: pairs with the previous holder's release swap of `false`
        // below (acquiring `taken` with it); a busy answer releases this
        // thread's earlier reads (the pushes it saw) to the holder's
        // release swap, which reads it.
        if c.token.swap(true, Ordering::AcqRel) {
            return Take::Busy;
        }
        let (value, left) = c.taken.with_mut(|taken| {
            // SAFETY: we hold the token: nobody else touches `taken` until we
            // release it below.
            let taken = unsafe { &mut *taken };
            if taken.is_empty() {
                *taken = self.incoming.take_all();
            }
            let value = taken.pop_front().map(|node| f(node, &mut Front(taken)));
            c.pending.store(!taken.is_empty(), Ordering::Relaxed);
            (value, !taken.is_empty())
        });
        // AcqRel: pairs with the next holder's swap of `true` above
        // (releasing `taken` to it) and acquires the busy callers' swaps
        // of `true` (see the type's docs) before the look below.
        c.token.swap(false, Ordering::AcqRel);
        match value {
            Some(value) => Take::Taken {
                value,
                left: left || !self.incoming.is_empty(),
            },
            // Empty after all (another consumer took the last node between
            // our hint and our swap). Pushes that landed meanwhile were
            // announced by their producers.
            None => Take::Empty,
        }
    }
}

/// The front of an injector's consumer list, lent to a
/// [`take`](Injector::take)'s function.
pub struct Front<'a, L: SingleLink>(&'a mut SList<L>);

impl<L: SingleLink> Front<'_, L> {
    /// Puts `node` back first in line.
    pub fn push_front(&mut self, node: Handle<L>) {
        self.0.push_front(node);
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use super::*;
    use crate::list::SingleLinks;
    use std::ptr::NonNull;

    struct Node {
        id: usize,
        links: SingleLinks<Node>,
    }
    link!(NodeLink: SingleLinks<Node> => links);

    fn nodes(n: usize) -> Vec<Node> {
        (0..n)
            .map(|id| Node {
                id,
                links: SingleLinks::new(),
            })
            .collect()
    }

    fn handle(n: &mut Node) -> Handle<NodeLink> {
        // SAFETY: the vector (never grown once made) outlives the
        // injector's use in each test, and each node is pushed once.
        unsafe { Handle::from_raw(NonNull::from(n)) }
    }

    #[test]
    fn takes_in_push_order_across_refills() {
        let inj = Injector::<NodeLink>::new();
        let mut ns = nodes(6);
        for n in ns[..3].iter_mut() {
            inj.push(handle(n));
        }
        let id = |h: Handle<NodeLink>, _: &mut Front<'_, NodeLink>| {
            // SAFETY: alive (in the test's vector).
            unsafe { h.into_raw().as_ref() }.id
        };
        assert!(matches!(
            inj.take(id),
            Take::Taken {
                value: 0,
                left: true
            }
        ));
        for n in ns[3..].iter_mut() {
            inj.push(handle(n));
        }
        let mut seen = Vec::new();
        while let Take::Taken { value, .. } = inj.take(id) {
            seen.push(value);
        }
        assert_eq!(seen, [1, 2, 3, 4, 5]);
        assert!(inj.is_empty());
    }

    #[test]
    fn a_take_may_put_nodes_back_in_front() {
        let inj = Injector::<NodeLink>::new();
        let mut ns = nodes(3);
        let (a, rest) = ns.split_at_mut(1);
        inj.push(handle(&mut a[0]));
        inj.push(handle(&mut rest[1]));
        let back = handle(&mut rest[0]);
        let mut back = Some(back);
        let r = inj.take(|h, front| {
            front.push_front(back.take().unwrap());
            // SAFETY: alive.
            unsafe { h.into_raw().as_ref() }.id
        });
        assert!(matches!(
            r,
            Take::Taken {
                value: 0,
                left: true
            }
        ));
        let mut seen = Vec::new();
        // SAFETY: the taken node is one of `ns`, alive.
        while let Take::Taken { value, .. } = inj.take(|h, _| unsafe { h.into_raw().as_ref() }.id) {
            seen.push(value);
        }
        assert_eq!(seen, [1, 2]);
    }

    #[test]
    fn a_held_token_answers_busy() {
        let inj = Injector::<NodeLink>::new();
        let mut ns = nodes(3);
        let (first, rest) = ns.split_at_mut(1);
        inj.push(handle(&mut first[0]));
        let mut late = Some(handle(&mut rest[0]));
        let r = inj.take(|_, _| {
            // Another consumer while this one holds the token, with a node
            // pushed meanwhile (an empty-looking injector answers `Empty`
            // before it tries the token).
            inj.push(late.take().unwrap());
            matches!(inj.take(|_, _| ()), Take::Busy)
        });
        // The holder reports the node pushed while it held the token.
        assert!(matches!(
            r,
            Take::Taken {
                value: true,
                left: true
            }
        ));
        assert!(matches!(
            inj.take(|_, _| ()),
            Take::Taken { left: false, .. }
        ));
        assert!(matches!(inj.take(|_, _| ()), Take::Empty));
    }
}
