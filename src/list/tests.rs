//! Unit tests of the intrusive lists, on heap nodes that carry both kinds of
//! links.

use std::ptr::NonNull;

use super::*;

pub(crate) struct Node {
    pub(crate) val: u32,
    single: SingleLinks<Node>,
    double: DoubleLinks<Node>,
}

link!(pub(crate) Single: SingleLinks<Node> => single);
link!(pub(crate) Double: DoubleLinks<Node> => double);

/// Owns `n` heap nodes with values `0..n`; frees them on drop.
pub(crate) struct Nodes(Vec<NonNull<Node>>);

impl Nodes {
    pub(crate) fn new(n: u32) -> Nodes {
        Nodes(
            (0..n)
                .map(|val| {
                    let node = Box::new(Node {
                        val,
                        single: SingleLinks::new(),
                        double: DoubleLinks::new(),
                    });
                    // SAFETY: `Box::into_raw` is never null.
                    unsafe { NonNull::new_unchecked(Box::into_raw(node)) }
                })
                .collect(),
        )
    }

    pub(crate) fn get(&self, i: u32) -> NonNull<Node> {
        self.0[i as usize]
    }

    /// The handle to link node `i` through its single links.
    ///
    /// # Safety
    /// Node `i` is in no list through them (the nodes outlive every list).
    pub(crate) unsafe fn single(&self, i: u32) -> Handle<Single> {
        // SAFETY: forwarded contract; `Nodes` keeps the node allocated.
        unsafe { Handle::from_raw(self.get(i)) }
    }

    /// The handle to link node `i` through its double links.
    ///
    /// # Safety
    /// As for [`single`](Self::single).
    pub(crate) unsafe fn double(&self, i: u32) -> Handle<Double> {
        // SAFETY: forwarded contract; `Nodes` keeps the node allocated.
        unsafe { Handle::from_raw(self.get(i)) }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for &node in &self.0 {
            // SAFETY: each pointer came from `Box::into_raw` and is freed once,
            // after every list using it is gone.
            drop(unsafe { Box::from_raw(node.as_ptr()) });
        }
    }
}

fn val(node: NonNull<Node>) -> u32 {
    // SAFETY: nodes live as long as the `Nodes` of the test.
    unsafe { node.as_ref() }.val
}

fn hval<L: Link<Node = Node>>(handle: Handle<L>) -> u32 {
    val(handle.into_raw())
}

fn dvals(list: &DList<Double>) -> Vec<u32> {
    list.iter().map(val).collect()
}

fn svals(list: &SList<Single>) -> Vec<u32> {
    list.iter().map(val).collect()
}

/// A DList of nodes `vals` (pushed back in order).
fn dlist(nodes: &Nodes, vals: impl IntoIterator<Item = u32>) -> DList<Double> {
    let mut list = DList::new();
    for v in vals {
        // SAFETY: each node is pushed once and outlives the list.
        list.push_back(unsafe { nodes.double(v) });
    }
    list
}

fn slist(nodes: &Nodes, vals: impl IntoIterator<Item = u32>) -> SList<Single> {
    let mut list = SList::new();
    for v in vals {
        // SAFETY: each node is pushed once and outlives the list.
        list.push_back(unsafe { nodes.single(v) });
    }
    list
}

/// Checks head/tail/len against the forward walk, and the backward walk of
/// a DList through `prev`.
fn check_dlist(list: &DList<Double>, expected: &[u32]) {
    assert_eq!(dvals(list), expected);
    assert_eq!(list.len(), expected.len());
    assert_eq!(list.is_empty(), expected.is_empty());
    assert_eq!(list.front().map(val), expected.first().copied());
    assert_eq!(list.back().map(val), expected.last().copied());
    let mut back = Vec::new();
    let mut cur = list.back();
    while let Some(n) = cur {
        back.push(val(n));
        // SAFETY: linked nodes are valid.
        cur = unsafe { links::double_prev::<Double>(n) };
    }
    back.reverse();
    assert_eq!(back, expected, "prev links disagree with next links");
}

fn check_slist(list: &SList<Single>, expected: &[u32]) {
    assert_eq!(svals(list), expected);
    assert_eq!(list.len(), expected.len());
    assert_eq!(list.front().map(val), expected.first().copied());
    assert_eq!(list.back().map(val), expected.last().copied());
    if let Some(tail) = list.back() {
        assert!(
            // SAFETY: linked nodes are valid.
            unsafe { links::next::<Single>(tail) }.is_none(),
            "tail has a next"
        );
    }
}

// ---------------------------------------------------------------------------
// DList
// ---------------------------------------------------------------------------

#[test]
fn dlist_push_back_front_and_pop() {
    let nodes = Nodes::new(4);
    let mut list = DList::new();
    check_dlist(&list, &[]);
    assert!(list.pop_front().is_none());
    // SAFETY: each node pushed once.
    list.push_back(unsafe { nodes.double(1) });
    // SAFETY: each node pushed once.
    list.push_back(unsafe { nodes.double(2) });
    // SAFETY: each node pushed once.
    list.push_front(unsafe { nodes.double(0) });
    // SAFETY: each node pushed once.
    list.push_back(unsafe { nodes.double(3) });
    check_dlist(&list, &[0, 1, 2, 3]);
    assert_eq!(list.pop_front().map(hval), Some(0));
    assert_eq!(list.pop_back().map(hval), Some(3));
    check_dlist(&list, &[1, 2]);
    assert_eq!(list.pop_front().map(hval), Some(1));
    assert_eq!(list.pop_front().map(hval), Some(2));
    assert!(list.pop_front().is_none());
    check_dlist(&list, &[]);
}

#[test]
fn dlist_erase_head_middle_tail_and_only() {
    let nodes = Nodes::new(5);
    let mut list = dlist(&nodes, 0..5);
    // SAFETY: each removed node is linked in `list`.
    assert_eq!(hval(unsafe { list.remove(nodes.get(0)) }), 0);
    check_dlist(&list, &[1, 2, 3, 4]);
    // SAFETY: as above.
    let two = unsafe { list.remove(nodes.get(2)) };
    check_dlist(&list, &[1, 3, 4]);
    // SAFETY: as above.
    let _ = unsafe { list.remove(nodes.get(4)) };
    check_dlist(&list, &[1, 3]);
    // SAFETY: node 1 is linked in `list`.
    let _ = unsafe { list.remove(nodes.get(1)) };
    // SAFETY: node 3 is linked in `list`.
    let _ = unsafe { list.remove(nodes.get(3)) };
    check_dlist(&list, &[]);
    // A removed node's handle links it again.
    list.push_back(two);
    check_dlist(&list, &[2]);
}

#[test]
fn dlist_take_all_and_append() {
    let nodes = Nodes::new(6);
    let mut a = dlist(&nodes, 0..3);
    let mut b = dlist(&nodes, 3..6);
    a.append(&mut b);
    check_dlist(&a, &[0, 1, 2, 3, 4, 5]);
    check_dlist(&b, &[]);
    let taken = a.take_all();
    check_dlist(&a, &[]);
    check_dlist(&taken, &[0, 1, 2, 3, 4, 5]);
    // Appending to and from empty lists.
    let mut empty = DList::new();
    let mut taken = taken;
    empty.append(&mut taken);
    check_dlist(&empty, &[0, 1, 2, 3, 4, 5]);
    empty.append(&mut taken);
    check_dlist(&empty, &[0, 1, 2, 3, 4, 5]);
}

// ---------------------------------------------------------------------------
// SList
// ---------------------------------------------------------------------------

#[test]
fn slist_push_pop() {
    let nodes = Nodes::new(3);
    let mut list = SList::new();
    // SAFETY: each node pushed once.
    list.push_back(unsafe { nodes.single(1) });
    // SAFETY: each node pushed once.
    list.push_front(unsafe { nodes.single(0) });
    // SAFETY: each node pushed once.
    list.push_back(unsafe { nodes.single(2) });
    check_slist(&list, &[0, 1, 2]);
    assert_eq!(list.pop_front().map(hval), Some(0));
    check_slist(&list, &[1, 2]);
    let one = list.pop_front();
    assert_eq!(one.as_ref().map(|h| val(h.as_ptr())), Some(1));
    assert_eq!(list.pop_front().map(hval), Some(2));
    assert!(list.pop_front().is_none());
    check_slist(&list, &[]);
    // push_front on empty sets the tail too (with a popped node's handle).
    list.extend(one);
    check_slist(&list, &[1]);
}

#[test]
fn slist_append_prepend() {
    let nodes = Nodes::new(7);
    let mut list = slist(&nodes, 2..4);
    let mut suffix = slist(&nodes, 4..7);
    let mut prefix = slist(&nodes, 0..2);
    list.append(&mut suffix);
    list.prepend(&mut prefix);
    check_slist(&list, &[0, 1, 2, 3, 4, 5, 6]);
    check_slist(&suffix, &[]);
    check_slist(&prefix, &[]);
    let mut empty = SList::new();
    empty.prepend(&mut list);
    check_slist(&empty, &[0, 1, 2, 3, 4, 5, 6]);
    let mut other = SList::new();
    other.append(&mut empty);
    check_slist(&other, &[0, 1, 2, 3, 4, 5, 6]);
}

#[test]
fn slist_reverse() {
    for n in 0..5 {
        let nodes = Nodes::new(n);
        let mut list = slist(&nodes, 0..n);
        list.reverse();
        let expected: Vec<u32> = (0..n).rev().collect();
        check_slist(&list, &expected);
    }
}

#[test]
fn slist_split_one_to_four_nodes() {
    // (len, max) -> (kept, stolen)
    let cases: &[(u32, usize, &[u32], &[u32])] = &[
        (1, 8, &[], &[0]),
        (2, 8, &[0], &[1]),
        (3, 8, &[0], &[1, 2]),
        (4, 8, &[0, 1], &[2, 3]),
        (0, 8, &[], &[]),
    ];
    for &(n, max, kept, stolen) in cases {
        let nodes = Nodes::new(n);
        let mut list = slist(&nodes, 0..n);
        let taken = list.split(max);
        check_slist(&list, kept);
        check_slist(&taken, stolen);
    }
}

#[test]
fn slist_split_respects_max() {
    let nodes = Nodes::new(10);
    let mut list = slist(&nodes, 0..10);
    let taken = list.split(3);
    check_slist(&list, &[0, 1, 2, 3, 4, 5, 6]);
    check_slist(&taken, &[7, 8, 9]);
    let none = list.split(0);
    check_slist(&none, &[]);
    check_slist(&list, &[0, 1, 2, 3, 4, 5, 6]);
    let one = list.split(1);
    check_slist(&one, &[6]);
    check_slist(&list, &[0, 1, 2, 3, 4, 5]);
}

// ---------------------------------------------------------------------------
// TransferStack
// ---------------------------------------------------------------------------

#[test]
fn transfer_stack_returns_fifo() {
    let nodes = Nodes::new(5);
    let stack = TransferStack::new();
    assert!(stack.is_empty());
    check_slist(&stack.take_all(), &[]);
    assert!(
        // SAFETY: each node pushed once.
        stack.push(unsafe { nodes.single(0) }),
        "first push sees an empty stack"
    );
    // SAFETY: each node pushed once.
    assert!(!stack.push(unsafe { nodes.single(1) }));
    // SAFETY: each node pushed once.
    assert!(!stack.push(unsafe { nodes.single(2) }));
    assert!(!stack.is_empty());
    let taken = stack.take_all();
    check_slist(&taken, &[0, 1, 2]);
    assert!(stack.is_empty());
    // SAFETY: node 3 is unlinked.
    assert!(stack.push(unsafe { nodes.single(3) }));
    // SAFETY: node 4 is unlinked.
    stack.push(unsafe { nodes.single(4) });
    check_slist(&stack.take_all(), &[3, 4]);
}

#[test]
fn transfer_stack_push_list_keeps_list_order() {
    let nodes = Nodes::new(6);
    let stack = TransferStack::new();
    // SAFETY: node 0 pushed once.
    stack.push(unsafe { nodes.single(0) });
    assert!(!stack.push_list(slist(&nodes, 1..4)));
    // SAFETY: node 4 pushed once.
    stack.push(unsafe { nodes.single(4) });
    assert!(!stack.push_list(SList::new()));
    check_slist(&stack.take_all(), &[0, 1, 2, 3, 4]);
    assert!(stack.push_list(slist(&nodes, 5..6)));
    check_slist(&stack.take_all(), &[5]);
}

#[test]
fn transfer_stack_push_list_unordered_keeps_every_node_after_earlier_pushes() {
    let nodes = Nodes::new(6);
    let stack = TransferStack::new();
    // SAFETY: node 0 pushed once.
    stack.push(unsafe { nodes.single(0) });
    assert!(!stack.push_list_unordered(slist(&nodes, 1..4)));
    // SAFETY: node 4 pushed once.
    stack.push(unsafe { nodes.single(4) });
    assert!(!stack.push_list_unordered(SList::new()));
    // The list comes out after the push before it, reversed, and before
    // the push after it.
    check_slist(&stack.take_all(), &[0, 3, 2, 1, 4]);
    assert!(stack.push_list_unordered(slist(&nodes, 5..6)));
    check_slist(&stack.take_all(), &[5]);
}

#[test]
fn transfer_stack_threads_each_node_taken_once_in_push_order() {
    const PER: u32 = if cfg!(miri) { 100 } else { 5000 };
    /// Node pointers handed to a producer thread.
    struct Batch(Vec<NonNull<Node>>);
    // SAFETY: each node is used by one thread at a time (producer, stack,
    // consumer).
    unsafe impl Send for Batch {}
    let nodes = Nodes::new(2 * PER);
    let stack = TransferStack::<Single>::new();
    let mut seen = Vec::new();
    std::thread::scope(|s| {
        for t in 0..2usize {
            let stack = &stack;
            let batch = Batch(nodes.0[t * PER as usize..(t + 1) * PER as usize].to_vec());
            s.spawn(move || {
                let batch = batch;
                for node in batch.0 {
                    // SAFETY: each node pushed once; `nodes` outlives the scope.
                    stack.push(unsafe { Handle::from_raw(node) });
                }
            });
        }
        while seen.len() < 2 * PER as usize {
            seen.extend(stack.take_all().iter().map(val));
        }
    });
    let mut last = [None::<u32>; 2];
    for &v in &seen {
        let producer = (v / PER) as usize;
        assert!(
            last[producer] < Some(v),
            "producer {producer} out of order at {v}"
        );
        last[producer] = Some(v);
    }
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..2 * PER).collect::<Vec<_>>());
}

#[test]
fn dlist_insert_after_front_middle_back() {
    let nodes = Nodes::new(5);
    let mut list = dlist(&nodes, [1, 3]);
    // SAFETY: node 0 is unlinked.
    let h0 = unsafe { nodes.double(0) };
    // SAFETY: `None` is always a valid position.
    unsafe { list.insert_after(None, h0) };
    // SAFETY: node 2 is unlinked.
    let h2 = unsafe { nodes.double(2) };
    // SAFETY: node 1 is linked in `list`.
    unsafe { list.insert_after(Some(nodes.get(1)), h2) };
    // SAFETY: node 4 is unlinked.
    let h4 = unsafe { nodes.double(4) };
    // SAFETY: node 3 is linked in `list`.
    unsafe { list.insert_after(Some(nodes.get(3)), h4) };
    check_dlist(&list, &[0, 1, 2, 3, 4]);
    // SAFETY: node 2 is linked.
    assert_eq!(unsafe { list.prev(nodes.get(2)) }.map(val), Some(1));
    // SAFETY: node 0 is linked.
    assert_eq!(unsafe { list.prev(nodes.get(0)) }, None);
}

#[test]
fn one_node_sits_in_two_lists_through_two_links() {
    let nodes = Nodes::new(3);
    let mut singles = slist(&nodes, 0..3);
    let mut doubles = dlist(&nodes, [2, 0, 1]);
    check_slist(&singles, &[0, 1, 2]);
    check_dlist(&doubles, &[2, 0, 1]);
    // Unlinking from one list leaves the other intact.
    // SAFETY: node 0 is linked in `doubles`.
    let zero = unsafe { doubles.remove(nodes.get(0)) };
    check_slist(&singles, &[0, 1, 2]);
    check_dlist(&doubles, &[2, 1]);
    assert_eq!(singles.pop_front().map(hval), Some(0));
    check_dlist(&doubles, &[2, 1]);
    doubles.push_front(zero);
    check_dlist(&doubles, &[0, 2, 1]);
    check_slist(&singles, &[1, 2]);
}
