//! loom model of `TransferStack`: two producers push while a consumer takes
//! concurrently; every node is taken exactly once and each producer's nodes
//! arrive in its push order.
#![cfg(fenceline_loom)]

use std::ptr::NonNull;

use fenceline::testing::list::{Handle, SingleLinks, TransferStack};
use loom::sync::Arc;
use loom::thread;

struct Node {
    id: usize,
    links: SingleLinks<Node>,
}

fenceline::testing::list::link!(NodeLink: SingleLinks<Node> => links);

/// A node pointer handed to a producer thread.
struct Send_(NonNull<Node>);
// SAFETY: the node is owned by exactly one thread at a time (producer, then
// the stack, then the consumer).
unsafe impl Send for Send_ {}

const PER_PRODUCER: usize = 2;

fn new_nodes() -> Vec<NonNull<Node>> {
    (0..2 * PER_PRODUCER)
        .map(|id| {
            let b = Box::new(Node {
                id,
                links: SingleLinks::new(),
            });
            // SAFETY: `Box::into_raw` is never null.
            unsafe { NonNull::new_unchecked(Box::into_raw(b)) }
        })
        .collect()
}

fn take_into(stack: &TransferStack<NodeLink>, seen: &mut Vec<usize>) {
    for n in stack.take_all().iter() {
        // SAFETY: the take made the node ours; it is alive until freed below.
        seen.push(unsafe { n.as_ref() }.id);
    }
}

fn check(seen: &[usize]) {
    let mut sorted = seen.to_vec();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..2 * PER_PRODUCER).collect::<Vec<_>>(),
        "taken once each"
    );
    for p in 0..2 {
        let order: Vec<usize> = seen
            .iter()
            .copied()
            .filter(|id| id / PER_PRODUCER == p)
            .collect();
        let mut in_order = order.clone();
        in_order.sort_unstable();
        assert_eq!(order, in_order, "producer {p} out of order");
    }
}

#[test]
fn two_producers_one_concurrent_consumer() {
    loom::model(|| {
        let stack = Arc::new(TransferStack::<NodeLink>::new());
        let nodes = new_nodes();
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let stack = stack.clone();
                let mine: Vec<Send_> = nodes[p * PER_PRODUCER..(p + 1) * PER_PRODUCER]
                    .iter()
                    .map(|&n| Send_(n))
                    .collect();
                thread::spawn(move || {
                    for n in mine {
                        // SAFETY: each node is pushed once and outlives the model.
                        stack.push(unsafe { Handle::from_raw(n.0) });
                    }
                })
            })
            .collect();
        // Take until everything arrived, concurrently with the pushes.
        let mut seen = Vec::new();
        let mut takes = 0;
        while seen.len() < 2 * PER_PRODUCER {
            let before = seen.len();
            take_into(&stack, &mut seen);
            if seen.len() > before {
                takes += 1;
            }
            thread::yield_now();
        }
        for p in producers {
            p.join().unwrap();
        }
        check(&seen);
        assert!((1..=2 * PER_PRODUCER).contains(&takes));
        for n in nodes {
            // SAFETY: every node was taken; none is linked any more.
            drop(unsafe { Box::from_raw(n.as_ptr()) });
        }
    });
}

#[test]
fn two_concurrent_takers_split_the_nodes() {
    loom::model(|| {
        let stack = Arc::new(TransferStack::<NodeLink>::new());
        let nodes = new_nodes();
        let mine: Vec<Send_> = nodes[..PER_PRODUCER].iter().map(|&n| Send_(n)).collect();
        let producer = {
            let stack = stack.clone();
            thread::spawn(move || {
                for n in mine {
                    // SAFETY: pushed once; outlives the model.
                    stack.push(unsafe { Handle::from_raw(n.0) });
                }
            })
        };
        let taker = {
            let stack = stack.clone();
            thread::spawn(move || {
                let mut seen = Vec::new();
                take_into(&stack, &mut seen);
                thread::yield_now();
                take_into(&stack, &mut seen);
                seen
            })
        };
        let mut seen = Vec::new();
        take_into(&stack, &mut seen);
        thread::yield_now();
        take_into(&stack, &mut seen);
        producer.join().unwrap();
        let theirs = taker.join().unwrap();
        take_into(&stack, &mut seen);
        let mut all = seen.clone();
        all.extend(&theirs);
        all.sort_unstable();
        assert_eq!(
            all,
            (0..PER_PRODUCER).collect::<Vec<_>>(),
            "each node to one taker"
        );
        for part in [&seen, &theirs] {
            let mut sorted = part.clone();
            sorted.sort_unstable();
            assert_eq!(*part, sorted, "a take returns push order");
        }
        for n in nodes {
            // SAFETY: nodes are unlinked or were never pushed.
            drop(unsafe { Box::from_raw(n.as_ptr()) });
        }
    });
}
