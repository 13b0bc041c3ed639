//! `set_wait_yield`: how long a blocking host wait yields before it parks
//! (registers its timepoints). A test binary of its own: the setting is
//! process-wide.

use fenceline::testing::SemaphoreInternals;
use std::thread;
use std::time::{Duration, Instant};

use fenceline::semaphore::{set_wait_yield, wait_yield};
use fenceline::{ErrorKind, Semaphore};

/// Whether `s` gets a registered timepoint within `within` (polled).
fn registers_within(s: &Semaphore, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if s.timepoints_registered() > 0 {
            return true;
        }
        thread::sleep(Duration::from_micros(200));
    }
    false
}

/// A wait that would yield for an hour never registers in the 50 ms the
/// test watches it (the default parks after 50 us: mutation checked, the
/// setting ignored, the timepoint is registered), still honours its
/// timeout, and still sees a signal. With no yielding, a wait registers
/// (parks) at once.
#[test]
fn the_wait_yield_decides_when_a_wait_parks() {
    assert_eq!(wait_yield(), Duration::from_micros(50), "the default");
    let s = Semaphore::new(0);

    assert_eq!(
        set_wait_yield(Duration::from_secs(3600)),
        Duration::from_micros(50)
    );
    let e = s.wait(1, Duration::from_millis(2)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
    thread::scope(|t| {
        let waiter = t.spawn(|| s.wait(1, Duration::from_secs(10)));
        assert!(
            !registers_within(&s, Duration::from_millis(50)),
            "a wait told to yield for an hour parked"
        );
        s.signal(1).unwrap();
        waiter.join().unwrap().unwrap();
    });

    set_wait_yield(Duration::ZERO);
    thread::scope(|t| {
        let waiter = t.spawn(|| s.wait(2, Duration::from_secs(10)));
        assert!(
            registers_within(&s, Duration::from_secs(10)),
            "a wait told not to yield never parked"
        );
        s.signal(2).unwrap();
        waiter.join().unwrap().unwrap();
    });
    assert_eq!(s.timepoints_registered(), 0);
    set_wait_yield(Duration::from_micros(50));
}
