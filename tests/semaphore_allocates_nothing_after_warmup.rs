//! With a counting global allocator: 10k semaphore ping-pong rounds between
//! two threads, after warm-up, allocate nothing on any thread — including
//! rounds where the waiter parks (a host wait's timepoints come from a
//! pool that the first semaphore fills); and host waits that time out
//! give their timepoints back without allocating or leaving them
//! registered.

use std::thread;
use std::time::Duration;

use fenceline::testing::SemaphoreInternals;
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

/// 300 waits that park and time out, on values never reached: each
/// registers its timepoints, then abandons them (`Semaphore::abandon`,
/// which never waits for another thread). Nothing allocates, nothing
/// stays registered, and a later signal wakes nobody left behind.
/// Mutation checked: a removal that does not unlink the abandoned
/// timepoint leaves every one registered (619 on `a`).
fn timed_out_waits_allocate_nothing_and_leave_nothing_registered() {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    // Past the wait's ~50 us of spinning, so it registers and parks.
    let short = Duration::from_micros(200);
    let timed_out = |r: Result<(), fenceline::Error>| {
        assert_eq!(
            r.unwrap_err().kind(),
            fenceline::ErrorKind::DeadlineExceeded
        );
    };
    for _ in 0..20 {
        timed_out(a.wait(1, short)); // warm-up
    }
    let before = common::allocations();
    for _ in 0..300 {
        timed_out(a.wait(1, short));
        timed_out(fenceline::wait_all(&[(&a, 1), (&b, 1)], short));
    }
    let allocations = common::allocations() - before;
    assert_eq!(allocations, 0, "300 timed-out waits allocated");
    assert_eq!(a.timepoints_registered(), 0);
    assert_eq!(b.timepoints_registered(), 0);
    a.signal(1).unwrap();
    b.signal(1).unwrap();
    fenceline::wait_all(&[(&a, 1), (&b, 1)], TIMEOUT).unwrap();
}

/// The checks above, one after another in this binary's only test: the
/// allocation count is process-wide, and a second test's thread, started
/// late on a busy machine, allocates on itself before its body runs
/// (libtest's set-up: 2 allocations measured) inside another test's
/// window.
#[test]
fn one_check_after_another() {
    ping_pong_allocates_nothing();
    timed_out_waits_allocate_nothing_and_leave_nothing_registered();
}
