//! Drives `Arena` allocate/reset sequences from arbitrary bytes: every
//! allocation is aligned, lies apart from every other live one, and keeps the
//! pattern written into it until the reset.
#![no_main]

use std::alloc::Layout;
use std::sync::Arc;

use fenceline::pool::{Arena, BlockPool, BlockPoolConfig};
use libfuzzer_sys::fuzz_target;

struct Live {
    ptr: *mut u8,
    len: usize,
    tag: u8,
}

fn check(live: &[Live]) {
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for a in live {
        // SAFETY: `a` is a live allocation of `len` bytes we wrote.
        let bytes = unsafe { std::slice::from_raw_parts(a.ptr, a.len) };
        assert!(bytes.iter().all(|&b| b == a.tag), "allocation overwritten");
        if a.len > 0 {
            spans.push((a.ptr as usize, a.ptr as usize + a.len));
        }
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "allocations overlap");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, data)) = data.split_first() else {
        return;
    };
    let pool = BlockPool::with_config(BlockPoolConfig {
        block_size: 64 << (shape % 5), // 64 B .. 1 KiB blocks
        align: 16 << (shape / 5 % 3),  // 16 .. 64
        first_chunk_blocks: 2,
        max_blocks: Some(64),
    })
    .unwrap();
    let pool = Arc::new(pool);
    let mut arena = Arena::new(pool.clone()).unwrap();
    let mut live: Vec<Live> = Vec::new();
    let mut tag = 0u8;
    for op in data.chunks(3) {
        if op[0] == 0xFF {
            check(&live);
            live.clear();
            arena.reset();
            assert_eq!(arena.block_count(), 0);
            assert_eq!(arena.oversized_count(), 0);
            continue;
        }
        let align = 1usize << (op[0] % 12); // 1 .. 2048
        let size = u16::from_le_bytes([*op.get(1).unwrap_or(&0), *op.get(2).unwrap_or(&0)]) as usize % 3000;
        let layout = Layout::from_size_align(size, align).unwrap();
        match arena.alloc(layout) {
            Ok(p) => {
                assert_eq!(p.as_ptr() as usize % align, 0, "misaligned");
                tag = tag.wrapping_add(1);
                // SAFETY: a fresh allocation of `size` bytes.
                unsafe { std::ptr::write_bytes(p.as_ptr(), tag, size) };
                live.push(Live {
                    ptr: p.as_ptr(),
                    len: size,
                    tag,
                });
            }
            Err(e) => assert_eq!(e.kind(), fenceline::ErrorKind::ResourceExhausted),
        }
    }
    check(&live);
    drop(arena);
    let mut pool = Arc::try_unwrap(pool).unwrap();
    assert_eq!(pool.count_free(), pool.capacity(), "reset returned every block");
});
