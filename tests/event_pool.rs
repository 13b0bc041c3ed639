//! `EventPool` with a fake event that counts creations and destructions,
//! and the semaphore's device-signal bookkeeping built on it.

use fenceline::testing::SemaphoreInternals;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use fenceline::semaphore::{AnyEvent, EventHandle, EventPool};
use fenceline::{ErrorKind, Semaphore};

#[derive(Debug, PartialEq, Eq)]
struct FakeEvent(usize);

#[derive(Default)]
struct Counts {
    created: AtomicUsize,
    destroyed: AtomicUsize,
}

fn pool(counts: &Arc<Counts>, prefill: usize, capacity: u32) -> EventPool<FakeEvent> {
    let (c, d) = (counts.clone(), counts.clone());
    EventPool::new(
        move || Ok(FakeEvent(c.created.fetch_add(1, Ordering::SeqCst))),
        move |e: FakeEvent| {
            assert!(e.0 < usize::MAX);
            d.destroyed.fetch_add(1, Ordering::SeqCst);
        },
        prefill,
        capacity,
    )
    .unwrap()
}

#[test]
fn rejects_bad_shapes() {
    let e = EventPool::<u8>::new(|| Ok(0), |_| {}, 3, 2).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = EventPool::<u8>::new(|| Ok(0), |_| {}, 0, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn events_are_created_once_and_reused() {
    let counts = Arc::new(Counts::default());
    let p = pool(&counts, 2, 4);
    assert_eq!(p.created(), 2, "prefilled");
    let held: Vec<EventHandle<FakeEvent>> = (0..3).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(p.created(), 3, "one more created on demand");
    let ids: std::collections::HashSet<usize> = held.iter().map(|h| h.event().0).collect();
    assert_eq!(ids.len(), 3, "distinct events");
    drop(held);
    for _ in 0..10_000 {
        let h = p.acquire().unwrap();
        assert!(h.event().0 < 3);
    }
    assert_eq!(
        p.created(),
        3,
        "pool size stays bounded over 10k acquisitions"
    );
    assert_eq!(counts.destroyed.load(Ordering::SeqCst), 0);
    drop(p);
    assert_eq!(
        counts.destroyed.load(Ordering::SeqCst),
        3,
        "each destroyed once"
    );
}

#[test]
fn capacity_is_a_limit() {
    let counts = Arc::new(Counts::default());
    let p = pool(&counts, 0, 2);
    let a = p.acquire().unwrap();
    let _b = p.acquire().unwrap();
    assert_eq!(
        p.acquire().unwrap_err().kind(),
        ErrorKind::ResourceExhausted
    );
    let a2 = a.clone();
    drop(a);
    assert_eq!(
        p.acquire().unwrap_err().kind(),
        ErrorKind::ResourceExhausted,
        "a clone keeps the event out"
    );
    drop(a2);
    assert!(p.acquire().is_ok(), "the last drop returned it");
}

#[test]
fn clones_dropped_on_many_threads_return_the_event_exactly_once() {
    let counts = Arc::new(Counts::default());
    let p = pool(&counts, 0, 2);
    for _ in 0..200 {
        let h = p.acquire().unwrap();
        let clones: Vec<_> = (0..4).map(|_| h.clone()).collect();
        drop(h);
        let threads: Vec<_> = clones
            .into_iter()
            .map(|c| thread::spawn(move || drop(c)))
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Both slots must be free: a double return would corrupt the free
        // list, a missed one would make the second acquire fail.
        let x = p.acquire().unwrap();
        let y = p.acquire().unwrap();
        assert_ne!(x.event().0, y.event().0);
        assert_eq!(
            p.acquire().unwrap_err().kind(),
            ErrorKind::ResourceExhausted
        );
    }
    assert!(p.created() <= 2);
}

#[test]
fn handles_keep_the_pool_alive() {
    let counts = Arc::new(Counts::default());
    let p = pool(&counts, 1, 2);
    let h = p.acquire().unwrap();
    drop(p);
    assert_eq!(
        counts.destroyed.load(Ordering::SeqCst),
        0,
        "a handle is out"
    );
    assert_eq!(h.event().0, 0);
    let any: AnyEvent = h.erase();
    let again = any.clone();
    assert!(any.same(&again));
    // SAFETY: erased from an `EventHandle<FakeEvent>`.
    let typed: EventHandle<FakeEvent> = unsafe { again.downcast() };
    assert_eq!(typed.event().0, 0);
    drop(typed);
    drop(any);
    assert_eq!(counts.destroyed.load(Ordering::SeqCst), 1);
}

#[test]
fn device_signal_picks_the_smallest_value_reaching_and_never_leaks() {
    let counts = Arc::new(Counts::default());
    let p = pool(&counts, 0, 4);
    let s = Semaphore::new(0);
    let ids: Vec<usize> = [5u64, 10, 7]
        .iter()
        .map(|&v| {
            let h = p.acquire().unwrap();
            let id = h.event().0;
            assert!(s.record_device_signal(v, h.erase()));
            id
        })
        .collect();
    let (v, e) = s.device_signal_reaching(6).unwrap();
    assert_eq!(v, 7, "smallest recorded value >= 6");
    // SAFETY: recorded from `EventHandle<FakeEvent>`.
    assert_eq!(unsafe { e.downcast::<FakeEvent>() }.event().0, ids[2]);
    assert_eq!(s.device_signal_reaching(5).unwrap().0, 5);
    assert!(s.device_signal_reaching(11).is_none());
    // Reached values are useless: recording at or below the value is refused.
    s.signal(7).unwrap();
    assert!(!s.record_device_signal(7, p.acquire().unwrap().erase()));
    // 5 and 7 are pruned (their events return to the pool); 10 is kept.
    assert_eq!(s.device_signal_reaching(1).unwrap().0, 10);
    let free_now: Vec<_> = (0..3).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(free_now.len(), 3, "pruned events came back");
    drop(free_now);
    // Failure releases everything.
    s.fail(fenceline::Error::new(ErrorKind::Aborted, "x"));
    assert!(s.device_signal_reaching(1).is_none());
    let all: Vec<_> = (0..4).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(all.len(), 4, "no retain leaked");
    drop(all);
    drop(s);
    drop(p);
    assert_eq!(
        counts.destroyed.load(Ordering::SeqCst),
        counts.created.load(Ordering::SeqCst)
    );
}

/// Mutation checked: a full table refusing every value (the record of 100
/// fails).
#[test]
fn device_signal_table_is_bounded() {
    let counts = Arc::new(Counts::default());
    let cap = fenceline::testing::timepoint::DEVICE_SIGNALS as u32;
    let p = pool(&counts, 0, cap + 1);
    let s = Semaphore::new(0);
    for v in 2..=u64::from(cap) + 1 {
        assert!(s.record_device_signal(v, p.acquire().unwrap().erase()));
    }
    assert!(
        !s.record_device_signal(1, p.acquire().unwrap().erase()),
        "a full table of larger values refuses; the caller waits on the host"
    );
    // The refused event went straight back.
    let _ = p.acquire().unwrap();
    // A larger value takes the smallest one's place (a chain submitted
    // ahead: the next link waits for the newest value), and its event
    // goes back to the pool.
    assert!(s.record_device_signal(100, p.acquire().unwrap().erase()));
    assert_eq!(s.device_signal_reaching(1).unwrap().0, 3, "2 gave way");
    assert_eq!(s.device_signal_reaching(50).unwrap().0, 100);
    let _ = p.acquire().unwrap();
    drop(s);
    let all: Vec<_> = (0..=cap).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(
        all.len() as u32,
        cap + 1,
        "dropping the semaphore released its events"
    );
}

#[test]
fn event_of_recognizes_only_its_own_pool() {
    let counts = Arc::new(Counts::default());
    let (p1, p2) = (pool(&counts, 0, 4), pool(&counts, 0, 4));
    let e1 = p1.acquire().unwrap();
    let id = e1.event().0;
    let any = e1.erase();
    assert_eq!(p1.event_of(&any).map(|e| e.0), Some(id));
    assert!(p2.event_of(&any).is_none(), "another pool's event");
    let other: EventPool<u64> = EventPool::new(|| Ok(7), |_| {}, 0, 2).unwrap();
    assert!(other.event_of(&any).is_none(), "another event type");
}
