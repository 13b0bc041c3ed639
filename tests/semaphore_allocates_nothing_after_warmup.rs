//! With a counting global allocator: 10k semaphore ping-pong rounds between
//! two threads, after warm-up, allocate nothing on any thread — including
//! rounds where the waiter parks (a host wait's timepoints live on its
//! stack).

use std::thread;
use std::time::Duration;

use fenceline::Semaphore;

mod common;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

const TIMEOUT: Duration = Duration::from_secs(10);

/// `rounds` ping-pongs starting after `base`; the partner sleeps now and
/// then so the waiter really parks.
fn rounds(ping: &Semaphore, pong: &Semaphore, base: u64, rounds: u64) {
    thread::scope(|s| {
        s.spawn(|| {
            for i in base + 1..=base + rounds {
                ping.wait(i, TIMEOUT).unwrap();
                if i % 1000 == 0 {
                    thread::sleep(Duration::from_millis(2));
                }
                pong.signal(i).unwrap();
            }
        });
        for i in base + 1..=base + rounds {
            ping.signal(i).unwrap();
            pong.wait(i, TIMEOUT).unwrap();
        }
    });
}

#[test]
fn ping_pong_allocates_nothing() {
    let ping = Semaphore::new(0);
    let pong = Semaphore::new(0);
    rounds(&ping, &pong, 0, 2000); // warm-up: thread handles, TLS

    let before = common::allocations();
    thread::scope(|s| {
        s.spawn(|| {});
    });
    let per_spawn = common::allocations() - before;

    let before = common::allocations();
    rounds(&ping, &pong, 2000, 10_000);
    let allocations = common::allocations() - before;
    assert_eq!(
        allocations,
        per_spawn,
        "10k ping-pong rounds allocated {} times beyond spawning the partner thread",
        allocations.saturating_sub(per_spawn)
    );
    assert_eq!(pong.query().unwrap(), 12_000);
}
