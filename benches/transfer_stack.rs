//! `TransferStack` hand-off from producers to one consumer against its peers,
//! same item counts, same loop, in one criterion group each, so the ratios
//! between them mean something.
//!
//! Peers (each item is a `u64` that producers write and the consumer reads
//! and sums; the sum and count are asserted every round):
//!
//! - `fenceline`: a `TransferStack` of intrusive nodes (`SingleLinks` plus a
//!   `u64` payload), preallocated once and reused; producers write the
//!   payload and `push` the node, the consumer `take_all`s and walks the
//!   returned list.
//! - `mutex_vecdeque`: `Mutex<VecDeque<u64>>`; producers `push_back` under
//!   the lock, the consumer swaps the deque with a local one under the lock
//!   and drains that outside it (capacities are kept, so no allocation in
//!   steady state).
//! - `segqueue`: `crossbeam_queue::SegQueue<u64>`, `push` / `pop` until empty.
//!
//! Groups:
//!
//! - `transfer_2producers`: two producer threads each send `K` items while
//!   the measuring thread drains until it has all `2K`. One iteration is one
//!   such round; the producers are spawned before the clock starts and are
//!   released round by round through an atomic counter. Whoever finds
//!   nothing to do yields, identically for every peer, so the bench also
//!   behaves on machines with fewer than three cores.
//! - `transfer_1thread`: one thread sends `K` items, then drains them.
//!
//! Run with `cargo bench --bench transfer_stack`.

use std::collections::VecDeque;
use std::hint::black_box;
use std::ptr::{addr_of_mut, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use crossbeam_queue::SegQueue;
use fenceline::testing::list::{Handle, SingleLinks, TransferStack};

/// Items sent per producer per round.
const K: usize = 4096;
/// Producers of the contended group.
const PRODUCERS: usize = 2;

/// One-way channel of `u64`s from any thread to one consumer.
trait Transfer: Sync {
    /// Sends `value` in slot `slot` (`slot < capacity`, each slot used by
    /// one sender at a time, and not again before the consumer has
    /// received it).
    fn send(&self, slot: usize, value: u64);
    /// Receives everything sent so far; returns `(count, sum)`.
    fn drain(&self) -> (usize, u64);
}

// -------------------------------------------------------------------------
// fenceline: TransferStack of intrusive nodes
// -------------------------------------------------------------------------

struct Node {
    links: SingleLinks<Node>,
    value: u64,
}

fenceline::testing::list::link!(NodeLink: SingleLinks<Node> => links);

/// A `TransferStack` over a preallocated array of nodes, one per slot.
struct Fenceline {
    stack: TransferStack<NodeLink>,
    /// `Box<[Node]>` turned raw: nodes are written through it by whichever
    /// thread owns them, so no reference to the array may be live.
    nodes: NonNull<[Node]>,
}

// SAFETY: the node array is only touched by the thread owning a node (a
// sender before `push`, the consumer after `take_all`, ordered by the
// stack's release/acquire and by the round hand-off); the stack is `Sync`.
unsafe impl Sync for Fenceline {}

impl Fenceline {
    fn new(capacity: usize) -> Self {
        let nodes: Box<[Node]> = (0..capacity)
            .map(|_| Node {
                links: SingleLinks::new(),
                value: 0,
            })
            .collect();
        Fenceline {
            stack: TransferStack::new(),
            nodes: NonNull::from(Box::leak(nodes)),
        }
    }
}

impl Drop for Fenceline {
    fn drop(&mut self) {
        // SAFETY: `nodes` came from `Box::leak` and, with `&mut self`, no
        // node is in use.
        drop(unsafe { Box::from_raw(self.nodes.as_ptr()) });
    }
}

impl Transfer for Fenceline {
    fn send(&self, slot: usize, value: u64) {
        assert!(slot < self.nodes.len());
        // SAFETY: `slot` is in bounds; the caller owns this node (trait
        // contract), it is in no list, and the array outlives every push.
        unsafe {
            let node = self.nodes.cast::<Node>().add(slot);
            addr_of_mut!((*node.as_ptr()).value).write(value);
            self.stack.push(Handle::from_raw(node));
        }
    }

    fn drain(&self) -> (usize, u64) {
        let list = self.stack.take_all();
        // SAFETY: `take_all` handed us these nodes; they are valid.
        let sum = list.iter().map(|node| unsafe { node.as_ref() }.value).sum();
        (list.len(), sum)
    }
}

// -------------------------------------------------------------------------
// Peers
// -------------------------------------------------------------------------

/// `Mutex<VecDeque>`; `spare` is the consumer's local deque, swapped in
/// under the lock (only the consumer locks it, uncontended).
struct MutexVecDeque {
    queue: Mutex<VecDeque<u64>>,
    spare: Mutex<VecDeque<u64>>,
}

impl MutexVecDeque {
    fn new(capacity: usize) -> Self {
        MutexVecDeque {
            queue: Mutex::new(VecDeque::with_capacity(capacity)),
            spare: Mutex::new(VecDeque::with_capacity(capacity)),
        }
    }
}

impl Transfer for MutexVecDeque {
    fn send(&self, _slot: usize, value: u64) {
        self.queue.lock().unwrap().push_back(value);
    }

    fn drain(&self) -> (usize, u64) {
        let mut local = self.spare.lock().unwrap();
        std::mem::swap(&mut *self.queue.lock().unwrap(), &mut *local);
        (local.len(), local.drain(..).sum())
    }
}

impl Transfer for SegQueue<u64> {
    fn send(&self, _slot: usize, value: u64) {
        self.push(value);
    }

    fn drain(&self) -> (usize, u64) {
        let (mut count, mut sum) = (0, 0);
        while let Some(value) = self.pop() {
            count += 1;
            sum += value;
        }
        (count, sum)
    }
}

// -------------------------------------------------------------------------
// Harness
// -------------------------------------------------------------------------

/// Sum of the values `0..n` that one round sends.
fn expected_sum(n: usize) -> u64 {
    (0..n as u64).sum()
}

/// Drains until `n` items came in; asserts the count and sum.
fn receive(t: &impl Transfer, n: usize) {
    let (mut count, mut sum) = (0, 0);
    while count < n {
        let (c, s) = t.drain();
        if c == 0 {
            thread::yield_now();
        }
        count += c;
        sum += s;
    }
    assert_eq!((count, black_box(sum)), (n, expected_sum(n)));
}

/// `iters` rounds of `PRODUCERS` threads each sending `K` items while this
/// thread receives all of them. Returns the time from releasing round 0 to
/// receiving the last item.
fn two_producers(t: &impl Transfer, iters: u64) -> Duration {
    let n = PRODUCERS * K;
    // Rounds below `open` may be sent; the consumer opens the next one only
    // after it received the previous one, so slots are free again.
    let open = AtomicU64::new(0);
    let ready = Barrier::new(PRODUCERS + 1);
    thread::scope(|s| {
        for p in 0..PRODUCERS {
            let (open, ready) = (&open, &ready);
            s.spawn(move || {
                ready.wait();
                for round in 0..iters {
                    // Acquire: pairs with the consumer's Release, so its
                    // reads of the previous round's slots came first.
                    while open.load(Ordering::Acquire) <= round {
                        thread::yield_now();
                    }
                    for slot in p * K..(p + 1) * K {
                        t.send(slot, slot as u64);
                    }
                }
            });
        }
        ready.wait();
        let start = Instant::now();
        for round in 0..iters {
            open.store(round + 1, Ordering::Release);
            receive(t, n);
        }
        start.elapsed()
    })
}

fn one_thread(t: &impl Transfer) {
    for slot in 0..K {
        t.send(slot, slot as u64);
    }
    receive(t, K);
}

fn transfer_2producers(c: &mut Criterion) {
    let n = PRODUCERS * K;
    let mut group = c.benchmark_group("transfer_2producers");
    group.throughput(Throughput::Elements(n as u64));
    let fenceline = Fenceline::new(n);
    group.bench_function("fenceline", |b| {
        b.iter_custom(|iters| two_producers(&fenceline, iters))
    });
    let mutex = MutexVecDeque::new(n);
    group.bench_function("mutex_vecdeque", |b| {
        b.iter_custom(|iters| two_producers(&mutex, iters))
    });
    let segqueue = SegQueue::new();
    group.bench_function("segqueue", |b| {
        b.iter_custom(|iters| two_producers(&segqueue, iters))
    });
    group.finish();
}

fn transfer_1thread(c: &mut Criterion) {
    let mut group = c.benchmark_group("transfer_1thread");
    group.throughput(Throughput::Elements(K as u64));
    let fenceline = Fenceline::new(K);
    group.bench_function("fenceline", |b| b.iter(|| one_thread(&fenceline)));
    let mutex = MutexVecDeque::new(K);
    group.bench_function("mutex_vecdeque", |b| b.iter(|| one_thread(&mutex)));
    let segqueue = SegQueue::new();
    group.bench_function("segqueue", |b| b.iter(|| one_thread(&segqueue)));
    group.finish();
}

criterion_group! {
    name = transfer_stack;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = transfer_2producers, transfer_1thread
}
criterion_main!(transfer_stack);
