//! Property tests: random operation sequences on the intrusive lists agree
//! with a `VecDeque` model at every step.

use std::collections::VecDeque;
use std::ptr::NonNull;

use fenceline::testing::list::{
    DList, DoubleLinks, Handle, Link, SList, SingleLinks, TransferStack,
};
use proptest::prelude::*;

struct Node {
    id: usize,
    single: SingleLinks<Node>,
    double: DoubleLinks<Node>,
}

fenceline::testing::list::link!(Single: SingleLinks<Node> => single);
fenceline::testing::list::link!(Double: DoubleLinks<Node> => double);

/// `N` heap nodes and the ids of those not linked anywhere.
struct Nodes {
    all: Vec<NonNull<Node>>,
    free: Vec<usize>,
}

impl Nodes {
    fn new(n: usize) -> Nodes {
        let all = (0..n)
            .map(|id| {
                let b = Box::new(Node {
                    id,
                    single: SingleLinks::new(),
                    double: DoubleLinks::new(),
                });
                // SAFETY: `Box::into_raw` is never null.
                unsafe { NonNull::new_unchecked(Box::into_raw(b)) }
            })
            .collect();
        Nodes {
            all,
            free: (0..n).rev().collect(),
        }
    }

    fn take(&mut self) -> Option<(usize, NonNull<Node>)> {
        self.free.pop().map(|id| (id, self.all[id]))
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for &n in &self.all {
            // SAFETY: from `Box::into_raw`, freed once after the lists are gone.
            drop(unsafe { Box::from_raw(n.as_ptr()) });
        }
    }
}

/// The id of an unlinked node, from its handle.
fn hid<L: Link<Node = Node>>(h: Handle<L>) -> usize {
    id(h.into_raw())
}

fn id(n: NonNull<Node>) -> usize {
    // SAFETY: nodes outlive every list in a test case.
    unsafe { n.as_ref() }.id
}

#[derive(Debug, Clone)]
enum DOp {
    PushBack,
    PushFront,
    PopFront,
    PopBack,
    Erase(usize),
    TakeAllAppend,
    SplitOffAppend(usize),
}

fn dop() -> impl Strategy<Value = DOp> {
    prop_oneof![
        3 => Just(DOp::PushBack),
        2 => Just(DOp::PushFront),
        2 => Just(DOp::PopFront),
        1 => Just(DOp::PopBack),
        2 => any::<usize>().prop_map(DOp::Erase),
        1 => Just(DOp::TakeAllAppend),
        1 => any::<usize>().prop_map(DOp::SplitOffAppend),
    ]
}

#[derive(Debug, Clone)]
enum SOp {
    PushBack,
    PushFront,
    PopFront,
    Reverse,
    Split(usize),
    SplitPrepend(usize),
    Transfer(usize),
}

fn sop() -> impl Strategy<Value = SOp> {
    prop_oneof![
        3 => Just(SOp::PushBack),
        2 => Just(SOp::PushFront),
        2 => Just(SOp::PopFront),
        1 => Just(SOp::Reverse),
        1 => (0usize..6).prop_map(SOp::Split),
        1 => (0usize..6).prop_map(SOp::SplitPrepend),
        1 => (0usize..5).prop_map(SOp::Transfer),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn dlist_matches_vecdeque(ops in proptest::collection::vec(dop(), 0..200)) {
        let mut nodes = Nodes::new(64);
        let mut list = DList::<Double>::new();
        let mut model = VecDeque::new();
        for op in ops {
            match op {
                DOp::PushBack => if let Some((i, n)) = nodes.take() {
                    // SAFETY: `n` is unlinked and outlives the list.
                    list.push_back(unsafe { Handle::from_raw(n) });
                    model.push_back(i);
                },
                DOp::PushFront => if let Some((i, n)) = nodes.take() {
                    // SAFETY: as above.
                    list.push_front(unsafe { Handle::from_raw(n) });
                    model.push_front(i);
                },
                DOp::PopFront => {
                    let got = list.pop_front().map(hid);
                    prop_assert_eq!(got, model.pop_front());
                    nodes.free.extend(got);
                }
                DOp::PopBack => {
                    let got = list.pop_back().map(hid);
                    prop_assert_eq!(got, model.pop_back());
                    nodes.free.extend(got);
                }
                DOp::Erase(k) => if !model.is_empty() {
                    let at = k % model.len();
                    let victim = model.remove(at).unwrap();
                    // SAFETY: the model says `victim` is linked in `list`.
                    let back = unsafe { list.remove(nodes.all[victim]) };
                    prop_assert_eq!(hid(back), victim);
                    nodes.free.push(victim);
                },
                DOp::TakeAllAppend => {
                    let mut taken = list.take_all();
                    prop_assert!(list.is_empty());
                    prop_assert_eq!(taken.len(), model.len());
                    list.append(&mut taken);
                    prop_assert!(taken.is_empty());
                }
                DOp::SplitOffAppend(k) => {
                    // Move the first k nodes to a second list and append the
                    // rest after them: the order must not change.
                    let k = if model.is_empty() { 0 } else { k % (model.len() + 1) };
                    let mut front = DList::new();
                    for _ in 0..k {
                        front.push_back(list.pop_front().unwrap());
                    }
                    front.append(&mut list);
                    list = front;
                }
            }
            prop_assert_eq!(list.len(), model.len());
            prop_assert_eq!(list.iter().map(id).collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(list.front().map(id), model.front().copied());
            prop_assert_eq!(list.back().map(id), model.back().copied());
        }
    }

    #[test]
    fn slist_and_transfer_stack_match_vecdeque(ops in proptest::collection::vec(sop(), 0..200)) {
        let mut nodes = Nodes::new(64);
        let mut list = SList::<Single>::new();
        let mut model = VecDeque::new();
        let stack = TransferStack::<Single>::new();
        for op in ops {
            match op {
                SOp::PushBack => if let Some((i, n)) = nodes.take() {
                    // SAFETY: `n` is unlinked and outlives the list.
                    list.push_back(unsafe { Handle::from_raw(n) });
                    model.push_back(i);
                },
                SOp::PushFront => if let Some((i, n)) = nodes.take() {
                    // SAFETY: as above.
                    list.push_front(unsafe { Handle::from_raw(n) });
                    model.push_front(i);
                },
                SOp::PopFront => {
                    let got = list.pop_front().map(hid);
                    prop_assert_eq!(got, model.pop_front());
                    nodes.free.extend(got);
                }
                SOp::Reverse => {
                    list.reverse();
                    model = model.into_iter().rev().collect();
                }
                SOp::Split(max) => {
                    let mut stolen = list.split(max);
                    let want = model.len().div_ceil(2).min(max);
                    prop_assert_eq!(stolen.len(), want);
                    let expect: Vec<usize> = model.iter().skip(model.len() - want).copied().collect();
                    prop_assert_eq!(stolen.iter().map(id).collect::<Vec<_>>(), expect);
                    list.append(&mut stolen);
                }
                SOp::SplitPrepend(max) => {
                    // Steal from the tail and put it back in front: a rotation.
                    let mut stolen = list.split(max);
                    let want = model.len().div_ceil(2).min(max);
                    model.rotate_right(want);
                    list.prepend(&mut stolen);
                }
                SOp::Transfer(k) => {
                    // Pop k nodes, push them through the transfer stack one by
                    // one (then the rest as a list), take them back: FIFO.
                    let mut staged = Vec::new();
                    for _ in 0..k.min(list.len()) {
                        staged.push(list.pop_front().unwrap());
                    }
                    for n in staged {
                        stack.push(n);
                    }
                    stack.push_list(std::mem::take(&mut list));
                    list = stack.take_all();
                    prop_assert!(stack.is_empty());
                }
            }
            prop_assert_eq!(list.len(), model.len());
            prop_assert_eq!(list.iter().map(id).collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(list.front().map(id), model.front().copied());
            prop_assert_eq!(list.back().map(id), model.back().copied());
        }
    }
}
