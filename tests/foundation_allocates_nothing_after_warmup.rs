//! With a counting global allocator: once warm, the block pool
//! and the transfer stack never call the global allocator, on any thread.

use std::ptr::NonNull;

use fenceline::testing::list::{Handle, SingleLinks, TransferStack};
use fenceline::testing::pool::{BlockPool, BlockPoolConfig, RawBlock};

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

struct Msg {
    links: SingleLinks<Msg>,
    block: RawBlock,
    value: u64,
}
fenceline::testing::list::link!(MsgLink: SingleLinks<Msg> => links);

/// One round: two threads each move `n` messages built in pool blocks
/// through the stack; this thread takes them, checks and frees them.
fn round(pool: &BlockPool, stack: &TransferStack<MsgLink>, n: u64) -> u64 {
    let mut sum = 0;
    std::thread::scope(|s| {
        for t in 0..2u64 {
            s.spawn(move || {
                for i in 0..n {
                    let block = pool.acquire_raw().expect("pool has room");
                    let node = block.as_ptr().cast::<Msg>();
                    // SAFETY: the block is ours and sized/aligned for a Msg.
                    unsafe {
                        node.as_ptr().write(Msg {
                            links: SingleLinks::new(),
                            block,
                            value: t * n + i,
                        });
                        stack.push(Handle::from_raw(node));
                    }
                }
            });
        }
        let mut got = 0;
        while got < 2 * n {
            for node in stack.take_all().iter() {
                let node: NonNull<Msg> = node;
                // SAFETY: taken from the stack, read once, block freed once.
                let msg = unsafe { node.as_ptr().read() };
                sum += msg.value;
                // SAFETY: the block came from `pool`.
                unsafe { pool.release_raw(msg.block) };
                got += 1;
            }
        }
    });
    sum
}

#[test]
fn steady_state_allocates_nothing() {
    const N: u64 = 50_000;
    let pool = BlockPool::with_config(BlockPoolConfig {
        block_size: std::mem::size_of::<Msg>(),
        align: 64,
        first_chunk_blocks: 64,
        max_blocks: None,
    })
    .unwrap();
    pool.preallocate(2 * N as usize).unwrap();
    let stack = TransferStack::new();
    // Warm-up: thread spawning's own allocations are counted below, so
    // measure them once here and subtract.
    let expected = (0..2 * N).sum::<u64>();
    assert_eq!(round(&pool, &stack, N), expected);

    let before = common::allocations();
    std::thread::scope(|s| {
        s.spawn(|| {});
        s.spawn(|| {});
    });
    let per_spawn_pair = common::allocations() - before;

    let before = common::allocations();
    let rounds = 2;
    for _ in 0..rounds {
        assert_eq!(round(&pool, &stack, N), expected);
    }
    let allocations = common::allocations() - before;
    assert_eq!(
        allocations,
        rounds * per_spawn_pair,
        "{} submissions allocated {} times beyond thread spawning",
        rounds as u64 * 2 * N,
        allocations.saturating_sub(rounds * per_spawn_pair)
    );
}
