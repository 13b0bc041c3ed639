//! `Device::stats` and `PendingQueue::stats`: counts match what was
//! submitted, nothing is left in flight or in use after a workload.
//! (`device_stats_allocates_nothing.rs`: a snapshot allocates nothing.)

use std::time::{Duration, Instant};

use fenceline::queue::PendingQueue;
use fenceline::testing::TestingBackend;
use fenceline::{Device, DeviceStats, Error, ErrorKind, Semaphore};

const T: Duration = Duration::from_secs(10);

#[path = "common/workload.rs"]
mod workload;
use workload::{device as cpu, dispatch_16, mixed};

fn device() -> Device {
    cpu(2)
}

/// The stats once the executor's last tasks retired (a task's block is
/// released just after it signals).
fn settled(d: &Device) -> DeviceStats {
    let deadline = Instant::now() + T;
    loop {
        let st = d.stats();
        if st.pool_blocks_in_use == 0 || Instant::now() > deadline {
            return st;
        }
        std::thread::yield_now();
    }
}

#[test]
fn counts_match_a_workload_and_nothing_is_left_in_flight() {
    let d = device();
    let qs = [d.queue(0).unwrap(), d.queue(1).unwrap()];
    let cb = dispatch_16(&d);
    let s = Semaphore::new(0);
    const N: u64 = 300;
    mixed(&qs, &cb, &s, 0, N);
    s.wait(N, T).unwrap();
    // Exact at once for the actions: the last one counted itself finished
    // before its signal.
    let st = d.stats();
    assert_eq!(st.submitted, N);
    assert_eq!(st.completed, N);
    assert_eq!(
        (st.failed, st.cancelled, st.in_flight, st.pending),
        (0, 0, 0, 0)
    );
    let st = settled(&d);
    assert_eq!(st.pool_blocks_in_use, 0, "{st:?}");
    assert!(st.pool_blocks_high_water > 0, "{st:?}");
    // The pools are warm: the same workload again grows nothing.
    let high = st.pool_blocks_high_water;
    for i in N..2 * N {
        qs[(i % 2) as usize]
            .execute(&[(&s, i)], &[(&s, i + 1)], &[&cb])
            .unwrap();
    }
    s.wait(2 * N, T).unwrap();
    let st = settled(&d);
    assert_eq!(
        (st.submitted, st.completed, st.in_flight),
        (2 * N, 2 * N, 0)
    );
    assert_eq!(st.pool_blocks_in_use, 0);
    assert_eq!(
        st.pool_blocks_high_water, high,
        "a warm device grew its pools"
    );
}

#[test]
fn pending_failed_and_in_flight_are_counted() {
    let d = device();
    let q = d.queue(0).unwrap();
    let (gate, s) = (Semaphore::new(0), Semaphore::new(0));
    q.barrier(&[(&gate, 1)], &[(&s, 1)]).unwrap();
    // The issuer took it in before `barrier` returned (this thread issued).
    let st = d.stats();
    assert_eq!(
        (st.submitted, st.in_flight, st.pending, st.completed),
        (1, 1, 1, 0)
    );
    gate.signal(1).unwrap();
    s.wait(1, T).unwrap();
    let st = d.stats();
    assert_eq!((st.in_flight, st.pending, st.completed), (0, 0, 1));

    // A failing host call, and an action behind it that fails with it.
    let f = Semaphore::new(0);
    q.host_call(&[], &[(&f, 1)], || {
        Err(Error::new(ErrorKind::Internal, "boom"))
    })
    .unwrap();
    q.barrier(&[(&f, 1)], &[(&s, 2)]).unwrap();
    assert_eq!(s.wait(2, T).unwrap_err().kind(), ErrorKind::Internal);
    let st = d.stats();
    assert_eq!(
        (st.submitted, st.completed, st.failed, st.in_flight),
        (3, 1, 2, 0)
    );
}

#[test]
fn workers_count_parks_wakeups_and_steals() {
    let d = device();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    // Long tiles: the worker that runs the dispatch cannot finish them all
    // before the other one steals its shard.
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch([64, 1, 1], |_| {
        let until = Instant::now() + Duration::from_micros(100);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    for i in 0..20 {
        // Idle first: both workers park, then one is woken.
        std::thread::sleep(Duration::from_millis(5));
        q.execute(&[], &[(&s, i + 1)], &[&cb]).unwrap();
        s.wait(i + 1, T).unwrap();
    }
    let st = d.stats();
    assert!(st.worker_parks >= 20, "{st:?}");
    assert!(st.worker_wakeups >= 20, "{st:?}");
    assert!(st.steals >= 1, "{st:?}");
    let later = d.stats();
    assert!(later.worker_parks >= st.worker_parks && later.steals >= st.steals);
}

#[test]
fn a_shut_down_queue_counts_its_pending_actions_cancelled() {
    let q = PendingQueue::new(TestingBackend::new(true)).unwrap();
    let (gate, s) = (Semaphore::new(0), Semaphore::new(0));
    for i in 0..5 {
        q.submit(&[(&gate, 1)], &[(&s, i + 1)], i).unwrap();
    }
    let st = q.stats();
    assert_eq!((st.submitted, st.pending, st.in_flight), (5, 5, 5));
    q.shutdown();
    let st = q.stats();
    assert_eq!(
        (st.cancelled, st.pending, st.in_flight, st.completed),
        (5, 0, 0, 0)
    );
}

/// Waits until both workers are parked (no wait task runs, so no park
/// ends on a deadline: parks - wake-ups is the number parked).
fn both_parked(d: &Device) -> DeviceStats {
    let deadline = Instant::now() + T;
    loop {
        let st = d.stats();
        if st.worker_parks - st.worker_wakeups == 2 {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "workers never both parked: {st:?}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// With every worker parked, an `execute` of one tile wakes exactly one
/// worker, which runs it and parks again; the other sleeps through.
/// (Mutation checked: `ExecutorState::notify` waking every worker, as
/// `wake_all` does, reads 2 wake-ups per execute.)
#[test]
fn an_execute_wakes_exactly_one_parked_worker() {
    let d = device();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch([1, 1, 1], |_| Ok(())).unwrap();
    cb.end().unwrap();
    for i in 0..20 {
        let before = both_parked(&d);
        q.execute(&[], &[(&s, i + 1)], &[&cb]).unwrap();
        s.wait(i + 1, T).unwrap();
        let after = both_parked(&d);
        assert_eq!(
            after.worker_wakeups - before.worker_wakeups,
            1,
            "execute {i}: {before:?} then {after:?}"
        );
    }
}
