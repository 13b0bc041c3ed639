//! loom models of `Injector` (the executor's ready queue): every node is
//! taken once, in push order; a consumer told `Busy` or `Empty` about a
//! node it saw pushed is covered by the holder, whose take reports nodes
//! left (`left`), the executor's cue to wake sleepers.
#![cfg(fenceline_loom)]

use std::ptr::NonNull;

use fenceline::testing::list::{Handle, Injector, SingleLinks, Take};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

struct Node {
    id: usize,
    links: SingleLinks<Node>,
}

fenceline::testing::list::link!(NodeLink: SingleLinks<Node> => links);

/// A node pointer handed to another thread.
#[derive(Clone, Copy)]
struct Send_(NonNull<Node>);
// SAFETY: the node is owned by exactly one thread at a time (its pusher,
// the injector, then its taker).
unsafe impl Send for Send_ {}

fn node(id: usize) -> Send_ {
    let b = Box::new(Node {
        id,
        links: SingleLinks::new(),
    });
    // SAFETY: `Box::into_raw` is never null.
    Send_(unsafe { NonNull::new_unchecked(Box::into_raw(b)) })
}

fn push(inj: &Injector<NodeLink>, n: Send_) {
    // SAFETY: each node is pushed once and outlives the model.
    inj.push(unsafe { Handle::from_raw(n.0) });
}

/// One take: the node's id and whether nodes were left, or `Busy` /
/// `Empty` as `Err(true)` / `Err(false)`.
fn take(inj: &Injector<NodeLink>) -> Result<(usize, bool), bool> {
    // SAFETY: a taken node is alive (freed at the model's end).
    match inj.take(|h, _| unsafe { h.into_raw().as_ref() }.id) {
        Take::Taken { value, left } => Ok((value, left)),
        Take::Busy => Err(true),
        Take::Empty => Err(false),
    }
}

fn free(nodes: &[Send_]) {
    for n in nodes {
        // SAFETY: every node was taken; none is linked any more.
        drop(unsafe { Box::from_raw(n.0.as_ptr()) });
    }
}

/// Node 0 waits in the injector; a producer pushes node 1 and then says
/// so; consumer A takes once; consumer B, once it saw node 1 announced,
/// takes once. Each node is taken at most once (then the rest drained),
/// and if B was answered `Busy` or `Empty` while node 1 was left for
/// nobody, A's take reported nodes left (so A's caller wakes the
/// sleepers B may have joined).
///
/// Mutations checked (each fails): the token released with a plain
/// `store(false, Release)` (A's look at the pushes may miss node 1 that B
/// saw, and A reports nothing left); `left` not counting the pushes that
/// came while the token was held (A took node 0 only).
#[test]
fn a_consumer_turned_away_is_covered_by_the_holder() {
    loom::model(|| {
        let inj = Arc::new(Injector::<NodeLink>::new());
        let nodes = [node(0), node(1)];
        push(&inj, nodes[0]);
        let announced = Arc::new(AtomicBool::new(false));
        let producer = {
            let (inj, announced) = (inj.clone(), announced.clone());
            let n = nodes[1];
            thread::spawn(move || {
                push(&inj, n);
                announced.store(true, Ordering::Release);
            })
        };
        let b = {
            let (inj, announced) = (inj.clone(), announced.clone());
            thread::spawn(move || {
                if announced.load(Ordering::Acquire) {
                    Some(take(&inj))
                } else {
                    None
                }
            })
        };
        let a = take(&inj);
        producer.join().unwrap();
        let b = b.join().unwrap();
        let mut taken: Vec<usize> = [Some(a), b]
            .into_iter()
            .flatten()
            .filter_map(|r| r.ok().map(|(id, _)| id))
            .collect();
        let taken_by_a_or_b = taken.clone();
        while let Ok((id, _)) = take(&inj) {
            taken.push(id);
        }
        taken.sort_unstable();
        assert_eq!(taken, [0, 1], "each node taken once");
        if let Some(Err(_)) = b {
            if !taken_by_a_or_b.contains(&1) {
                assert!(
                    matches!(a, Ok((_, true))),
                    "B saw node 1 and was turned away; A left it and said nothing: {a:?}"
                );
            }
        }
        free(&nodes);
    });
}

/// Two consumers take while a producer pushes two nodes: nothing is taken
/// twice, and the nodes come out in push order (a consumer's list is
/// passed on with the token: loom checks the list's cell for races).
/// Mutation checked: the token's acquiring swap `Relaxed` (loom reports
/// the list's cell accessed concurrently).
#[test]
fn consumers_take_each_node_once_in_push_order() {
    loom::model(|| {
        let inj = Arc::new(Injector::<NodeLink>::new());
        let nodes = [node(0), node(1), node(2)];
        push(&inj, nodes[0]);
        let producer = {
            let inj = inj.clone();
            let (n1, n2) = (nodes[1], nodes[2]);
            thread::spawn(move || {
                push(&inj, n1);
                push(&inj, n2);
            })
        };
        let other = {
            let inj = inj.clone();
            thread::spawn(move || [take(&inj), take(&inj)])
        };
        let mine = [take(&inj), take(&inj)];
        producer.join().unwrap();
        let theirs = other.join().unwrap();
        for side in [&mine, &theirs] {
            let ids: Vec<usize> = side
                .iter()
                .filter_map(|r| r.ok().map(|(id, _)| id))
                .collect();
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "push order: {ids:?}");
        }
        let mut taken: Vec<usize> = mine
            .iter()
            .chain(theirs.iter())
            .filter_map(|r| r.ok().map(|(id, _)| id))
            .collect();
        while let Ok((id, _)) = take(&inj) {
            taken.push(id);
        }
        taken.sort_unstable();
        assert_eq!(taken, [0, 1, 2], "each node taken once");
        free(&nodes);
    });
}
