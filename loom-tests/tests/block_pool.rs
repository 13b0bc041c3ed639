//! loom models of `BlockPool`: threads acquiring and releasing never hold the
//! same block at once, growth races install each chunk once, the ABA case is
//! caught by the generation tag, and every block is back at the end.
#![cfg(fenceline_loom)]

use fenceline::testing::pool::{BlockPool, BlockPoolConfig};
use fenceline::ErrorKind;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

fn pool(first: u32, max: u32) -> BlockPool {
    BlockPool::with_config(BlockPoolConfig {
        block_size: 16,
        align: 16,
        first_chunk_blocks: first,
        max_blocks: Some(max),
    })
    .unwrap()
}

/// One flag per block index: set while some thread owns the block.
struct Owners(Vec<AtomicBool>);

impl Owners {
    fn new(n: usize) -> Owners {
        Owners((0..n).map(|_| AtomicBool::new(false)).collect())
    }
    fn claim(&self, index: u32) {
        let was = self.0[index as usize].swap(true, Ordering::Relaxed);
        assert!(!was, "block {index} handed to two owners");
    }
    fn unclaim(&self, index: u32) {
        let was = self.0[index as usize].swap(false, Ordering::Relaxed);
        assert!(was, "block {index} released while not owned");
    }
}

/// Acquire, claim, release `rounds` times; a full pool is allowed.
fn churn(pool: &BlockPool, owners: &Owners, rounds: usize) {
    for _ in 0..rounds {
        match pool.acquire() {
            Ok(block) => {
                owners.claim(block.index());
                owners.unclaim(block.index());
                drop(block);
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::ResourceExhausted),
        }
    }
}

fn finish(pool: Arc<BlockPool>) {
    let mut pool = Arc::try_unwrap(pool).unwrap_or_else(|_| panic!("pool still shared"));
    assert_eq!(pool.count_free(), pool.capacity(), "every block is back");
}

#[test]
fn two_threads_grow_and_churn() {
    // First chunk 1 block, cap 2: both threads may race to grow.
    loom::model(|| {
        let pool = Arc::new(pool(1, 2));
        let owners = Arc::new(Owners::new(2));
        let t = {
            let (pool, owners) = (pool.clone(), owners.clone());
            thread::spawn(move || churn(&pool, &owners, 2))
        };
        churn(&pool, &owners, 1);
        t.join().unwrap();
        assert!(pool.capacity() <= 2);
        finish(pool);
    });
}

#[test]
fn three_threads_on_two_blocks() {
    loom::model(|| {
        let pool = Arc::new(pool(2, 2));
        pool.preallocate(2).unwrap();
        let owners = Arc::new(Owners::new(2));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (pool, owners) = (pool.clone(), owners.clone());
                thread::spawn(move || churn(&pool, &owners, 1))
            })
            .collect();
        churn(&pool, &owners, 1);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(pool.capacity(), 2);
        finish(pool);
    });
}

#[test]
fn aba_pop_push_pop_is_detected() {
    // Thread A takes one block. Thread B takes two and returns the first, so
    // the head index A read may be back with a different `next`: the
    // generation tag must make A's stale CAS fail.
    loom::model(|| {
        let pool = Arc::new(pool(4, 3));
        pool.preallocate(3).unwrap();
        let owners = Arc::new(Owners::new(3));
        let a = {
            let (pool, owners) = (pool.clone(), owners.clone());
            thread::spawn(move || {
                let block = pool.acquire().unwrap();
                owners.claim(block.index());
                owners.unclaim(block.index());
            })
        };
        let x = pool.acquire().unwrap();
        owners.claim(x.index());
        let y = pool.acquire().unwrap();
        owners.claim(y.index());
        owners.unclaim(x.index());
        drop(x);
        owners.unclaim(y.index());
        drop(y);
        a.join().unwrap();
        finish(pool);
    });
}

#[test]
fn caches_pop_chains_against_each_other() {
    // Caches of 2: a refill pops a chain of 2 with one CAS. The main thread
    // pops [A, B] and gives A back alone (head is A again, now followed by
    // C), while the other thread's chain pop may have read "A then B": the
    // generation tag must reject that stale chain, or B gets two owners.
    use fenceline::testing::pool::BlockCache;
    loom::model(|| {
        let pool = Arc::new(pool(4, 4));
        pool.preallocate(4).unwrap();
        let owners = Arc::new(Owners::new(4));
        let t = {
            let (pool, owners) = (pool.clone(), owners.clone());
            thread::spawn(move || {
                let mut cache: BlockCache<Arc<BlockPool>, 2> = BlockCache::new(pool);
                let a = cache.acquire().unwrap();
                owners.claim(a.index());
                owners.unclaim(a.index());
                // SAFETY: from this cache's pool, released once.
                unsafe { cache.release(a) };
            })
        };
        let mut cache: BlockCache<Arc<BlockPool>, 2> = BlockCache::new(pool.clone());
        let a = cache.acquire().unwrap();
        owners.claim(a.index());
        let b = cache.acquire().unwrap();
        owners.claim(b.index());
        // `b` came from the stash: it is the chain's first block. Give it
        // back alone, so the head index is the same as before the refill.
        owners.unclaim(b.index());
        // SAFETY: from this cache's pool, released once.
        unsafe { cache.release(b) };
        cache.flush();
        owners.unclaim(a.index());
        // SAFETY: as above.
        unsafe { cache.release(a) };
        drop(cache);
        t.join().unwrap();
        assert_eq!(pool.capacity(), 4);
        finish(pool);
    });
}
