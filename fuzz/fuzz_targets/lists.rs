//! Drives `DList`, `SList` and `TransferStack` from arbitrary bytes and
//! checks every step against `VecDeque` models.
#![no_main]

use std::collections::VecDeque;
use std::ptr::NonNull;

use fenceline::testing::list::{DList, DoubleLinks, Handle, Link, SList, SingleLinks, TransferStack};
use libfuzzer_sys::fuzz_target;

struct Node {
    id: usize,
    single: SingleLinks<Node>,
    double: DoubleLinks<Node>,
}
fenceline::testing::list::link!(Single: SingleLinks<Node> => single);
fenceline::testing::list::link!(Double: DoubleLinks<Node> => double);

const NODES: usize = 32;

/// Heap nodes; `free_d`/`free_s` are those not in the DList / SList side.
struct Nodes {
    all: Vec<NonNull<Node>>,
}

impl Nodes {
    fn new() -> Nodes {
        let all = (0..NODES)
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
        Nodes { all }
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
    // SAFETY: nodes outlive the lists of one run.
    unsafe { n.as_ref() }.id
}

fuzz_target!(|data: &[u8]| {
    let nodes = Nodes::new();
    // Doubly-linked side (links: `double`).
    let mut dlist = DList::<Double>::new();
    let mut dmodel: VecDeque<usize> = VecDeque::new();
    let mut dfree: Vec<usize> = (0..NODES).collect();
    // Singly-linked side (links: `single`): an SList plus a TransferStack.
    let mut slist = SList::<Single>::new();
    let mut smodel: VecDeque<usize> = VecDeque::new();
    let stack = TransferStack::<Single>::new();
    let mut stack_model: Vec<usize> = Vec::new();
    let mut sfree: Vec<usize> = (0..NODES).collect();

    for pair in data.chunks(2) {
        let (op, arg) = (pair[0], *pair.get(1).unwrap_or(&0) as usize);
        match op % 14 {
            0 | 1 => {
                if let Some(i) = dfree.pop() {
                    // SAFETY: node `i` is not linked through `double`.
                    unsafe {
                        if op % 14 == 0 {
                            dlist.push_back(Handle::from_raw(nodes.all[i]));
                            dmodel.push_back(i);
                        } else {
                            dlist.push_front(Handle::from_raw(nodes.all[i]));
                            dmodel.push_front(i);
                        }
                    }
                }
            }
            2 => {
                let got = dlist.pop_front().map(hid);
                assert_eq!(got, dmodel.pop_front());
                dfree.extend(got);
            }
            3 => {
                let got = dlist.pop_back().map(hid);
                assert_eq!(got, dmodel.pop_back());
                dfree.extend(got);
            }
            4 => {
                if !dmodel.is_empty() {
                    let victim = dmodel.remove(arg % dmodel.len()).unwrap();
                    // SAFETY: the model says `victim` is in `dlist`.
                    let back = unsafe { dlist.remove(nodes.all[victim]) };
                    assert_eq!(hid(back), victim);
                    dfree.push(victim);
                }
            }
            5 => {
                let mut all = dlist.take_all();
                assert!(dlist.is_empty());
                // Put back the first `arg` nodes, then append the rest.
                for _ in 0..arg.min(all.len()) {
                    dlist.push_back(all.pop_front().unwrap());
                }
                dlist.append(&mut all);
            }
            6 | 7 => {
                if let Some(i) = sfree.pop() {
                    // SAFETY: node `i` is not linked through `single`.
                    unsafe {
                        if op % 14 == 6 {
                            slist.push_back(Handle::from_raw(nodes.all[i]));
                            smodel.push_back(i);
                        } else {
                            slist.push_front(Handle::from_raw(nodes.all[i]));
                            smodel.push_front(i);
                        }
                    }
                }
            }
            8 => {
                let got = slist.pop_front().map(hid);
                assert_eq!(got, smodel.pop_front());
                sfree.extend(got);
            }
            9 => {
                slist.reverse();
                smodel = smodel.into_iter().rev().collect();
            }
            10 => {
                let max = arg % 8;
                let mut stolen = slist.split(max);
                let want = smodel.len().div_ceil(2).min(max);
                let tail: Vec<usize> = smodel.split_off(smodel.len() - want).into();
                assert_eq!(stolen.iter().map(id).collect::<Vec<_>>(), tail);
                // Put them back in front (rotation) or behind (identity).
                if arg & 0x80 != 0 {
                    slist.prepend(&mut stolen);
                    for &t in tail.iter().rev() {
                        smodel.push_front(t);
                    }
                } else {
                    slist.append(&mut stolen);
                    smodel.extend(tail);
                }
            }
            11 => {
                // Move the SList's front node onto the transfer stack.
                if let Some(n) = slist.pop_front() {
                    stack_model.push(smodel.pop_front().unwrap());
                    stack.push(n);
                }
            }
            12 => {
                // Move the whole SList onto the stack in one CAS.
                stack.push_list(std::mem::take(&mut slist));
                stack_model.extend(smodel.drain(..));
            }
            _ => {
                let mut taken = stack.take_all();
                let got: Vec<usize> = taken.iter().map(id).collect();
                assert_eq!(got, stack_model, "take_all is FIFO");
                slist.append(&mut taken);
                smodel.extend(stack_model.drain(..));
            }
        }
        assert_eq!(dlist.len(), dmodel.len());
        assert!(dlist.iter().map(id).eq(dmodel.iter().copied()));
        assert_eq!(dlist.back().map(id), dmodel.back().copied());
        assert_eq!(slist.len(), smodel.len());
        assert!(slist.iter().map(id).eq(smodel.iter().copied()));
        assert_eq!(slist.back().map(id), smodel.back().copied());
    }
    // Unlink everything before the nodes are freed.
    drop(stack.take_all());
});
