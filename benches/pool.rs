//! `BlockPool` acquire + release against its peers, same block sizes, same
//! loop, in one criterion group each, so the ratios between them mean
//! something.
//!
//! Peers (every one hands out uninitialized memory and `black_box`es the
//! block pointer, so none pays a memset and none can be optimized away):
//!
//! - `fenceline`: [`BlockPool::new(size, 64)`](BlockPool::new), preallocated;
//!   `acquire` and drop of the `Block` guard (one CAS each), the path any
//!   thread can take.
//! - `fenceline_cache`: the same pool behind a per-thread
//!   [`BlockCache`] (32 blocks; no atomic while the stash has blocks or
//!   room, one CAS per 16 blocks moved), the path an owner that loops takes
//!   (an executor worker, a queue's issuer).
//! - `box`: `Box::<[u8; N]>::new_uninit()` and drop (the global allocator).
//! - `floor_two_cas` (1-thread group only): two uncontended
//!   `compare_exchange` on one `AtomicU64`, what any shared free list pays
//!   for a pop and a push: the physical floor of the `fenceline` row.
//! - `mutex_vec_pool`: the simple pool a `BlockPool` replaces,
//!   `Mutex<Vec<Box<[MaybeUninit<u8>; N]>>>`, preallocated; pop under the
//!   lock, push back under the lock.
//!
//! Groups, for block sizes 64 and 4096 bytes:
//!
//! - `pool_acquire_release_1thread/<size>`: one thread, one acquire+release
//!   per iteration.
//! - `pool_acquire_release_2threads/<size>`: two threads on one shared pool,
//!   each doing `iters` acquire+release pairs; the time is the wall time of
//!   the whole run, so one iteration is one pair *on each thread* (the
//!   throughput line counts both pairs). The second thread is spawned before
//!   the clock starts and released by a barrier.
//!
//! Run with `cargo bench --bench pool`.

use std::hint::black_box;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fenceline::testing::pool::{BlockCache, BlockPool};

/// Block alignment of the `BlockPool` (a cache line).
const ALIGN: usize = 64;
/// Blocks preallocated in both pools: far more than the threads ever hold.
const PREALLOCATED: usize = 64;
/// Threads of the contended group.
const THREADS: usize = 2;

/// `Mutex<Vec<Box<..>>>` free list: the straightforward pool.
struct MutexVecPool<const N: usize> {
    free: Mutex<Vec<Box<[MaybeUninit<u8>; N]>>>,
}

impl<const N: usize> MutexVecPool<N> {
    fn new(preallocated: usize) -> Self {
        let free = (0..preallocated)
            .map(|_| Box::new([MaybeUninit::uninit(); N]))
            .collect();
        MutexVecPool {
            free: Mutex::new(free),
        }
    }

    /// Pops a free block, allocating one only if none is free (never here:
    /// the pool is preallocated).
    fn acquire(&self) -> Box<[MaybeUninit<u8>; N]> {
        let block = self.free.lock().unwrap().pop();
        block.unwrap_or_else(|| Box::new([MaybeUninit::uninit(); N]))
    }

    fn release(&self, block: Box<[MaybeUninit<u8>; N]>) {
        self.free.lock().unwrap().push(block);
    }
}

fn block_pool(size: usize) -> BlockPool {
    let pool = BlockPool::new(size, ALIGN).unwrap();
    pool.preallocate(PREALLOCATED).unwrap();
    pool
}

// One acquire+release of each peer; the loops below call these.

#[inline(always)]
fn fenceline_pair(pool: &BlockPool) {
    let block = pool.acquire().unwrap();
    black_box(block.as_ptr());
}

#[inline(always)]
fn fenceline_cache_pair(cache: &mut BlockCache<&BlockPool>) {
    let block = cache.acquire().unwrap();
    black_box(block.as_ptr());
    // SAFETY: the block came from this cache's pool and is released once.
    unsafe { cache.release(block) };
}

/// A pop's and a push's CAS on a shared head, and nothing else.
#[inline(always)]
fn two_cas(head: &AtomicU64) {
    let v = head.load(Ordering::Acquire);
    let _ = black_box(head.compare_exchange(v, v + 1, Ordering::Acquire, Ordering::Acquire));
    let v = head.load(Ordering::Relaxed);
    let _ = black_box(head.compare_exchange(v, v + 1, Ordering::Release, Ordering::Relaxed));
}

#[inline(always)]
fn box_pair<const N: usize>() {
    let block = Box::<[u8; N]>::new_uninit();
    black_box(block.as_ptr());
}

#[inline(always)]
fn mutex_vec_pool_pair<const N: usize>(pool: &MutexVecPool<N>) {
    let block = pool.acquire();
    black_box(block.as_ptr());
    pool.release(block);
}

/// Runs `pair` `iters` times on each of `THREADS` threads at once and
/// returns the wall time from the barrier to the last thread's end.
fn concurrent(iters: u64, pair: impl Fn() + Sync) -> Duration {
    concurrent_with(iters, || (), |_: &mut ()| pair())
}

/// `concurrent` with per-thread state made by `init` on each thread before
/// the clock starts (a thread's own `BlockCache`).
fn concurrent_with<S>(
    iters: u64,
    init: impl Fn() -> S + Sync,
    pair: impl Fn(&mut S) + Sync,
) -> Duration {
    let barrier = Barrier::new(THREADS);
    let run = || {
        let mut state = init();
        barrier.wait();
        for _ in 0..iters {
            pair(&mut state);
        }
    };
    thread::scope(|s| {
        for _ in 1..THREADS {
            s.spawn(run);
        }
        let mut state = init();
        barrier.wait();
        let start = Instant::now();
        for _ in 0..iters {
            pair(&mut state);
        }
        // The scope joins the other threads before returning.
        start
    })
    .elapsed()
}

fn one_thread<const N: usize>(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("pool_acquire_release_1thread/{N}"));
    let pool = block_pool(N);
    group.bench_function("fenceline", |b| b.iter(|| fenceline_pair(&pool)));
    let mut cache = BlockCache::new(&pool);
    group.bench_function("fenceline_cache", |b| {
        b.iter(|| fenceline_cache_pair(&mut cache))
    });
    group.bench_function("box", |b| b.iter(box_pair::<N>));
    let mutex_pool = MutexVecPool::<N>::new(PREALLOCATED);
    group.bench_function("mutex_vec_pool", |b| {
        b.iter(|| mutex_vec_pool_pair(&mutex_pool))
    });
    let head = AtomicU64::new(0);
    group.bench_function("floor_two_cas", |b| b.iter(|| two_cas(black_box(&head))));
    group.finish();
}

fn two_threads<const N: usize>(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("pool_acquire_release_2threads/{N}"));
    group.throughput(Throughput::Elements(THREADS as u64));
    let pool = block_pool(N);
    group.bench_function("fenceline", |b| {
        b.iter_custom(|iters| concurrent(iters, || fenceline_pair(&pool)))
    });
    group.bench_function("fenceline_cache", |b| {
        b.iter_custom(|iters| {
            concurrent_with(iters, || BlockCache::new(&pool), fenceline_cache_pair)
        })
    });
    group.bench_function("box", |b| {
        b.iter_custom(|iters| concurrent(iters, box_pair::<N>))
    });
    let mutex_pool = MutexVecPool::<N>::new(PREALLOCATED);
    group.bench_function("mutex_vec_pool", |b| {
        b.iter_custom(|iters| concurrent(iters, || mutex_vec_pool_pair(&mutex_pool)))
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    one_thread::<64>(c);
    one_thread::<4096>(c);
    two_threads::<64>(c);
    two_threads::<4096>(c);
}

criterion_group! {
    name = pool;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = benches
}
criterion_main!(pool);
