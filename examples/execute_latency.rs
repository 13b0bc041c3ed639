//! How long an `execute` call takes while another thread streams work into
//! the same queue: two threads each submit chains of 1-tile executes (each
//! waits on its thread's previous one) into one queue of the CPU device,
//! and every call is timed. Prints the percentiles of a call, the wall
//! time and how often a submitter handed the queue's issuer turn to a
//! worker instead of issuing the other thread's work itself.
//!
//! Run: `cargo run --release --example execute_latency` (`-- <executes per
//! thread per round> <rounds>`, default 20000 and 10).

use std::time::Instant;

use fenceline::{CpuConfig, Device, Error, Semaphore, Timeout};

/// Executes a thread may have in flight before it waits for its chain.
const WINDOW: u64 = 1000;

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let per_thread = args.next().and_then(Result::ok).unwrap_or(20_000).max(1);
    let rounds = args.next().and_then(Result::ok).unwrap_or(10).max(1);
    let device = Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })?;
    let queue = device.queue(0)?;
    let mut calls: Vec<u64> = Vec::new();
    let start = Instant::now();
    for _ in 0..rounds {
        let chains = [Semaphore::new(0), Semaphore::new(0)];
        let timed = std::thread::scope(|sc| {
            let threads: Vec<_> = chains
                .iter()
                .map(|chain| {
                    let (queue, device) = (&queue, &device);
                    sc.spawn(move || -> Result<Vec<u64>, Error> {
                        let mut cb = device.command_buffer()?;
                        cb.dispatch([1, 1, 1], |_| Ok(()))?;
                        cb.end()?;
                        let mut times = Vec::with_capacity(per_thread as usize);
                        for i in 1..=per_thread {
                            if i > WINDOW && i % 256 == 0 {
                                chain.wait(i - WINDOW, Timeout::Never)?;
                            }
                            let t = Instant::now();
                            queue.execute(&[(chain, i - 1)], &[(chain, i)], &[&cb])?;
                            times.push(t.elapsed().as_nanos() as u64);
                        }
                        chain.wait(per_thread, Timeout::Never)?;
                        Ok(times)
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("a submitting thread panicked"))
                .collect::<Result<Vec<_>, Error>>()
        })?;
        calls.extend(timed.into_iter().flatten());
    }
    let wall = start.elapsed();
    calls.sort_unstable();
    let at = |q: f64| calls[((calls.len() - 1) as f64 * q) as usize];
    println!(
        "execute call, 2 threads x {per_thread} x {rounds} rounds on one queue: \
         p50 {} ns, p90 {} ns, p99 {} ns, p99.9 {} ns, p99.99 {} ns, max {} ns",
        at(0.5),
        at(0.9),
        at(0.99),
        at(0.999),
        at(0.9999),
        calls[calls.len() - 1]
    );
    println!(
        "wall time {:.1} ms; issuer turns handed to a worker: {}",
        wall.as_secs_f64() * 1e3,
        device.stats().issuer_hand_offs
    );
    Ok(())
}
