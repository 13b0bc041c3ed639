//! Demo of fenceline's foundation: producer threads build messages in
//! `BlockPool` memory and hand them to a consumer through a `TransferStack`
//! (the path every queue submission will take), with no lock and, after
//! warm-up, no heap allocation. Prints hand-off latency percentiles.
//!
//! Run: `cargo run --release --example handoff`

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fenceline::list::{Handle, SingleLinks, TransferStack};
use fenceline::pool::{BlockPool, RawBlock};

/// A message living inside one pool block.
struct Message {
    links: SingleLinks<Message>,
    producer: usize,
    seq: u64,
    sent: Instant,
    /// The block holding this message, given back by the consumer.
    block: RawBlock,
}
fenceline::link!(MessageLink: SingleLinks<Message> => links);

const PRODUCERS: usize = 2;
const PER_PRODUCER: u64 = 200_000;
/// Messages in flight at most (back-pressure): the pool is preallocated to
/// this, so it never grows and nothing is allocated per message.
const IN_FLIGHT: u64 = 1024;

fn main() -> Result<(), fenceline::Error> {
    let pool = BlockPool::new(std::mem::size_of::<Message>(), 64)?;
    pool.preallocate(IN_FLIGHT as usize)?;
    let capacity = pool.capacity();
    let sent = AtomicU64::new(0);
    let consumed = AtomicU64::new(0);
    let stack = TransferStack::<MessageLink>::new();
    let start = Instant::now();

    let mut latencies: Vec<Duration> = Vec::with_capacity(PRODUCERS * PER_PRODUCER as usize);
    let mut next_seq = [0u64; PRODUCERS];
    std::thread::scope(|s| -> Result<(), fenceline::Error> {
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|producer| {
                let (pool, stack, sent, consumed) = (&pool, &stack, &sent, &consumed);
                s.spawn(move || -> Result<(), fenceline::Error> {
                    for seq in 0..PER_PRODUCER {
                        // Back-pressure: claim a slot among IN_FLIGHT.
                        while sent.fetch_add(1, Ordering::Relaxed)
                            >= consumed.load(Ordering::Relaxed) + IN_FLIGHT
                        {
                            sent.fetch_sub(1, Ordering::Relaxed);
                            std::thread::yield_now();
                        }
                        let block = pool.acquire_raw()?;
                        let node = block.as_ptr().cast::<Message>();
                        // SAFETY: the block is ours, sized and aligned for a
                        // `Message`; the consumer reads it after the push.
                        unsafe {
                            node.as_ptr().write(Message {
                                links: SingleLinks::new(),
                                producer,
                                seq,
                                sent: Instant::now(),
                                block,
                            });
                            stack.push(Handle::from_raw(node));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let consumer = s.spawn(|| {
            let mut received = 0;
            while received < PRODUCERS as u64 * PER_PRODUCER {
                let batch = stack.take_all();
                if batch.is_empty() {
                    std::thread::yield_now(); // 2 producers + 1 consumer may exceed the cores
                    continue;
                }
                let now = Instant::now();
                for node in batch.iter() {
                    let node: NonNull<Message> = node;
                    // SAFETY: the take handed us the message; we move it out
                    // and return its block once (the list is done with it).
                    let msg = unsafe { node.as_ptr().read() };
                    assert_eq!(msg.seq, next_seq[msg.producer], "per-producer order");
                    next_seq[msg.producer] += 1;
                    latencies.push(now - msg.sent);
                    // SAFETY: the block came from `pool` and is released once.
                    unsafe { pool.release_raw(msg.block) };
                    received += 1;
                }
                consumed.store(received, Ordering::Relaxed);
            }
        });
        for p in producers {
            p.join().expect("producer panicked")?;
        }
        consumer.join().expect("consumer panicked");
        Ok(())
    })?;
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    println!(
        "{} messages from {PRODUCERS} producers in {:.1?} ({:.1} M msg/s)",
        latencies.len(),
        elapsed,
        latencies.len() as f64 / elapsed.as_secs_f64() / 1e6
    );
    println!(
        "hand-off latency: p50 {:?}  p99 {:?}  p99.9 {:?}  max {:?}",
        pct(0.5),
        pct(0.99),
        pct(0.999),
        latencies[latencies.len() - 1]
    );
    println!(
        "pool blocks: {} after, {capacity} after preallocating for {IN_FLIGHT} in flight",
        pool.capacity()
    );
    Ok(())
}
