//! loom models of `BlockPool`: threads acquiring and releasing never hold the
//! same block at once, growth races install each chunk once, the ABA case is
//! caught by the generation tag, and every block is back at the end.
#![cfg(loom)]

use fenceline::pool::{BlockPool, BlockPoolConfig};
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
