//! Unit tests of the block pool and its cache.

use super::*;
use crate::pool::BlockCache;
use std::collections::HashSet;

fn pool(block_size: usize, first: u32, max: Option<u32>) -> BlockPool {
    BlockPool::with_config(BlockPoolConfig {
        block_size,
        align: 16,
        first_chunk_blocks: first,
        max_blocks: max,
    })
    .unwrap()
}

#[test]
fn rejects_bad_config() {
    let e = BlockPool::new(0, 8).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("block_size 0"), "{e}");
    let e = BlockPool::new(64, 24).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("align 24"), "{e}");
    let e = BlockPool::new(usize::MAX - 3, 64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn block_size_rounds_up_to_alignment() {
    let p = BlockPool::new(100, 64).unwrap();
    assert_eq!(p.block_size(), 128);
    assert_eq!(p.block_align(), 64);
}

#[test]
fn index_math_round_trips() {
    for first in [1u32, 2, 8, 64] {
        let p = pool(8, first, None);
        for k in 0..12 {
            let base = p.chunk_base(k) as u32;
            let len = p.chunk_len(k);
            assert_eq!(p.locate(base), (k, 0));
            assert_eq!(p.locate(base + len - 1), (k, len as usize - 1));
        }
    }
}

#[test]
fn acquire_gives_distinct_aligned_writable_blocks() {
    let p = BlockPool::new(96, 32).unwrap();
    let blocks: Vec<_> = (0..100).map(|_| p.acquire().unwrap()).collect();
    let mut addrs = HashSet::new();
    for (n, b) in blocks.iter().enumerate() {
        let addr = b.as_ptr().as_ptr() as usize;
        assert_eq!(addr % 32, 0);
        assert!(addrs.insert(addr));
        // SAFETY: we own the block and it is `size()` bytes long.
        unsafe { ptr::write_bytes(b.as_ptr().as_ptr(), n as u8, b.size()) };
    }
    for (n, b) in blocks.iter().enumerate() {
        // SAFETY: as above; the bytes were written.
        let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr().as_ptr(), b.size()) };
        assert!(bytes.iter().all(|&x| x == n as u8), "block {n} overwritten");
    }
    let mut indices: Vec<u32> = blocks.iter().map(|b| b.index()).collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..100).collect::<Vec<_>>());
}

#[test]
fn release_makes_block_reusable_without_growth() {
    let p = pool(64, 4, None);
    let a = p.acquire().unwrap();
    let addr = a.as_ptr();
    assert_eq!(p.capacity(), 4);
    p.release(a);
    let b = p.acquire().unwrap();
    assert_eq!(b.as_ptr(), addr, "LIFO free list gives the last block back");
    assert_eq!(p.capacity(), 4);
}

#[test]
fn chunks_grow_geometrically() {
    let p = pool(8, 2, None);
    let held: Vec<_> = (0..2).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(p.capacity(), 2);
    let more: Vec<_> = (0..5).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(p.capacity(), 2 + 4 + 8);
    drop((held, more));
}

#[test]
fn preallocate_then_acquire_does_not_grow() {
    let mut p = pool(32, 4, None);
    p.preallocate(20).unwrap();
    let cap = p.capacity();
    assert!(cap >= 20, "capacity {cap}");
    assert_eq!(p.count_free(), cap);
    let held: Vec<_> = (0..cap).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(p.capacity(), cap);
    drop(held);
    assert_eq!(p.count_free(), cap);
    p.preallocate(3).unwrap();
    assert_eq!(p.capacity(), cap, "already large enough");
}

#[test]
fn cap_returns_resource_exhausted_and_recovers() {
    let p = pool(32, 2, Some(5));
    let held: Vec<_> = (0..5).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(p.capacity(), 5, "last chunk cut short by the cap");
    let e = p.acquire().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResourceExhausted);
    assert!(e.message().contains("cap of 5"), "{e}");
    drop(held);
    assert!(p.acquire().is_ok());
    let e = p.preallocate(6).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResourceExhausted);
}

#[test]
fn zero_cap_pool_never_allocates() {
    let p = pool(32, 2, Some(0));
    assert_eq!(
        p.acquire().unwrap_err().kind(),
        ErrorKind::ResourceExhausted
    );
    assert_eq!(p.capacity(), 0);
}

#[test]
fn trim_frees_only_fully_free_chunks() {
    let mut p = pool(16, 2, None);
    let blocks: Vec<_> = (0..14).map(|_| p.acquire_raw().unwrap()).collect();
    assert_eq!(p.capacity(), 14); // chunks of 2, 4, 8
                                  // Keep one block of chunk 1 (indices 2..6); release everything else.
    let mut kept = None;
    for b in blocks {
        if b.index() == 3 {
            kept = Some(b);
        } else {
            // SAFETY: acquired from `p`, released once.
            unsafe { p.release_raw(b) };
        }
    }
    assert_eq!(p.trim(), 2 + 8);
    assert_eq!(p.capacity(), 4);
    assert_eq!(p.count_free(), 3);
    // SAFETY: acquired from `p`, released once.
    unsafe { p.release_raw(kept.unwrap()) };
    assert_eq!(p.trim(), 4);
    assert_eq!(p.capacity(), 0);
    assert_eq!(p.count_free(), 0);
    // The pool grows again from the first free slot.
    let b = p.acquire().unwrap();
    assert_eq!(b.index(), 0);
    drop(b);
    assert_eq!(p.capacity(), 2);
}

#[test]
fn release_raw_all_pushes_a_chain() {
    let mut p = pool(16, 8, None);
    let blocks: Vec<_> = (0..8).map(|_| p.acquire_raw().unwrap()).collect();
    assert_eq!(p.count_free(), 0);
    // SAFETY: all acquired from `p`, released once.
    unsafe { p.release_raw_all(blocks) };
    assert_eq!(p.count_free(), 8);
    // Empty iterators are fine.
    // SAFETY: nothing to release.
    unsafe { p.release_raw_all(std::iter::empty()) };
    assert_eq!(p.count_free(), 8);
}

#[test]
#[should_panic(expected = "belongs to another pool")]
fn releasing_into_the_wrong_pool_panics() {
    let a = pool(16, 2, None);
    let b = pool(16, 2, None);
    let block = a.acquire().unwrap();
    b.release(block);
}

#[test]
fn pop_chain_into_takes_up_to_its_room_in_list_order() {
    let mut p = pool(16, 8, None);
    p.preallocate(8).unwrap();
    let mut out = [const { std::mem::MaybeUninit::<RawBlock>::uninit() }; 100];
    let count = p.pop_chain_into(&mut out[..3]);
    assert_eq!(count, 3);
    assert_eq!(p.count_free(), 5);
    // SAFETY: the first `count` slots were written with the popped blocks.
    let chain: Vec<RawBlock> = out[..count]
        .iter()
        .map(|b| unsafe { b.assume_init_read() })
        .collect();
    let indices: Vec<u32> = chain.iter().map(|b| b.index).collect();
    assert_eq!(indices, [0, 1, 2], "fresh chunks are pushed in index order");
    for b in &chain {
        // SAFETY: popped from `p`: each block's own address.
        assert_eq!(b.ptr, unsafe { p.block_ptr(b.index) });
    }
    let rest = p.pop_chain_into(&mut out);
    assert_eq!(rest, 5, "a short list gives what it has");
    assert_eq!(p.pop_chain_into(&mut out[..1]), 0);
    assert_eq!(p.count_free(), 0);
}

#[test]
fn cache_refills_half_and_spills_half_with_one_push() {
    let mut p = pool(16, 64, None);
    p.preallocate(64).unwrap();
    {
        let mut cache: BlockCache<&BlockPool, 8> = BlockCache::new(&p);
        let a = cache.acquire().unwrap();
        assert_eq!(
            cache.len(),
            4,
            "refill took half a stash plus the one returned"
        );
        let mut held = vec![a];
        for _ in 0..4 {
            held.push(cache.acquire().unwrap());
        }
        assert_eq!(cache.len(), 0, "served from the stash");
        let mut indices: Vec<u32> = held.iter().map(|b| b.index()).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), 5, "distinct blocks");
        held.push(cache.acquire().unwrap());
        assert_eq!(cache.len(), 4, "second refill");
        for b in held {
            // SAFETY: acquired from this cache's pool, released once.
            unsafe { cache.release(b) };
        }
        assert_eq!(cache.len(), 6, "4 + 6 released = 10 > 8: spilled 4");
    }
    assert_eq!(p.count_free(), 64, "drop flushed the stash");
}

#[test]
fn cache_grows_an_empty_pool_and_reports_the_cap() {
    let mut p = pool(16, 2, Some(3));
    {
        let mut cache: BlockCache<&BlockPool, 4> = BlockCache::new(&p);
        let held: Vec<_> = (0..3).map(|_| cache.acquire().unwrap()).collect();
        let e = cache.acquire().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ResourceExhausted);
        for b in held {
            // SAFETY: acquired from this cache's pool, released once.
            unsafe { cache.release(b) };
        }
        cache.flush();
        assert!(cache.is_empty());
    }
    assert_eq!(p.count_free(), 3);
}

#[test]
fn caches_on_threads_never_share_a_block() {
    let mut p = pool(64, 4, None);
    std::thread::scope(|s| {
        for t in 0..3u8 {
            let p = &p;
            s.spawn(move || {
                let mut cache: BlockCache<&BlockPool, 4> = BlockCache::new(p);
                let mut held = Vec::new();
                for round in 0..if cfg!(miri) { 40 } else { 3000u32 } {
                    let b = cache.acquire().unwrap();
                    let tag = t.wrapping_mul(61).wrapping_add(round as u8);
                    // SAFETY: we own the block.
                    unsafe { ptr::write_bytes(b.as_ptr().as_ptr(), tag, 64) };
                    held.push((b, tag));
                    if round % 3 == 2 {
                        for (b, tag) in held.drain(..) {
                            // SAFETY: as above.
                            let bytes =
                                unsafe { std::slice::from_raw_parts(b.as_ptr().as_ptr(), 64) };
                            assert!(bytes.iter().all(|&x| x == tag), "block shared");
                            // SAFETY: acquired from this cache's pool.
                            unsafe { cache.release(b) };
                        }
                    }
                }
                for (b, _) in held {
                    // SAFETY: acquired from this cache's pool.
                    unsafe { cache.release(b) };
                }
            });
        }
    });
    let cap = p.capacity();
    assert_eq!(p.count_free(), cap, "every block came back");
}

#[test]
fn threads_never_share_a_block() {
    let mut p = pool(64, 4, Some(64));
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let p = &p;
            s.spawn(move || {
                for round in 0..if cfg!(miri) { 50 } else { 2000u32 } {
                    let b = p.acquire().unwrap();
                    let tag = t.wrapping_mul(31).wrapping_add(round as u8);
                    // SAFETY: we own the block.
                    unsafe { ptr::write_bytes(b.as_ptr().as_ptr(), tag, 64) };
                    std::hint::spin_loop();
                    // SAFETY: as above.
                    let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr().as_ptr(), 64) };
                    assert!(bytes.iter().all(|&x| x == tag), "block shared");
                }
            });
        }
    });
    let cap = p.capacity();
    assert!(cap <= 64);
    assert_eq!(p.count_free(), cap, "every block came back");
}
