//! loom models of the executor's lock-free pieces, using the very counters
//! the executor runs (`fenceline::task::__model`): the join counter, the
//! sleep/wake protocol, tile claiming, and a scope's first error.
#![cfg(fenceline_loom)]

use fenceline::task::__model::{JoinCount, SleepState, TileCounter};
use fenceline::task::Scope;
use fenceline::{Error, ErrorKind};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

#[test]
fn join_counter_makes_the_dependent_ready_exactly_once() {
    loom::model(|| {
        struct Join {
            count: JoinCount,
            effects: [UnsafeCell<u32>; 3],
            ready: AtomicUsize,
        }
        // SAFETY: each effect cell is written by one predecessor before its
        // `finish_one`, and read only by the one that saw the count reach 0.
        unsafe impl Sync for Join {}
        let join = Arc::new(Join {
            count: JoinCount::new(3),
            effects: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
            ready: AtomicUsize::new(0),
        });
        let finish = |join: &Join, i: usize| {
            // SAFETY: predecessor `i` owns effect `i` until it finishes.
            join.effects[i].with_mut(|e| unsafe { *e = i as u32 + 1 });
            if join.count.finish_one() {
                join.ready.fetch_add(1, Ordering::Relaxed);
                // The dependent runs: it must see every predecessor's effect.
                for (k, e) in join.effects.iter().enumerate() {
                    // SAFETY: all predecessors finished (count reached 0).
                    assert_eq!(e.with(|e| unsafe { *e }), k as u32 + 1);
                }
            }
        };
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let join = join.clone();
                thread::spawn(move || finish(&join, i))
            })
            .collect();
        finish(&join, 2);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(join.ready.load(Ordering::Relaxed), 1, "ready exactly once");
    });
}

// Catches: a join made ready twice or never, or run without seeing a
// predecessor's effects, when a worker holds back the decrements of the
// predecessors it ran in a row (`Worker::held_join`, one `finish(n)`) and
// the last predecessor takes the count to zero with a plain store after
// `is_last` (no read-modify-write). Mutations checked: `is_last` with a
// Relaxed load (the join's run reads the other thread's effects without
// synchronizing: loom reports the causality violation); `finish(n)`
// returning true whenever the count was at least `n` (ready twice).
#[test]
fn held_decrements_and_the_last_store_make_the_join_ready_once() {
    loom::model(|| {
        struct Join {
            count: JoinCount,
            effects: [UnsafeCell<u32>; 3],
            ready: AtomicUsize,
        }
        // SAFETY: each effect cell is written by one predecessor before its
        // decrement, and read only by the one that made the join ready.
        unsafe impl Sync for Join {}
        let join = Arc::new(Join {
            count: JoinCount::new(3),
            effects: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
            ready: AtomicUsize::new(0),
        });
        let run_join = |join: &Join| {
            join.ready.fetch_add(1, Ordering::Relaxed);
            for (k, e) in join.effects.iter().enumerate() {
                // SAFETY: all predecessors finished.
                assert_eq!(e.with(|e| unsafe { *e }), k as u32 + 1);
            }
        };
        // The worker's policy for one retirement: the last one stores,
        // otherwise the decrement is held.
        let retire = |join: &Join, held: &mut u32| -> bool {
            if *held == 0 && join.count.is_last() {
                join.count.finish_last();
                return true;
            }
            *held += 1;
            false
        };
        let other = {
            let join = join.clone();
            thread::spawn(move || {
                // Two predecessors in a row on this worker, then the release
                // before it looks for other work.
                let mut held = 0;
                let mut ready = false;
                for i in 0..2 {
                    // SAFETY: predecessor `i` owns effect `i`.
                    join.effects[i].with_mut(|e| unsafe { *e = i as u32 + 1 });
                    ready |= retire(&join, &mut held);
                }
                if held > 0 && join.count.finish(held) {
                    ready = true;
                }
                if ready {
                    run_join(&join);
                }
            })
        };
        // The third predecessor, on a thread of its own (a model whose
        // main thread ran it explored no schedule where it comes last).
        let third = {
            let join = join.clone();
            thread::spawn(move || {
                // SAFETY: predecessor 2 owns effect 2.
                join.effects[2].with_mut(|e| unsafe { *e = 3 });
                let mut held = 0;
                let mut ready = retire(&join, &mut held);
                if held > 0 && join.count.finish(held) {
                    ready = true;
                }
                if ready {
                    run_join(&join);
                }
            })
        };
        other.join().unwrap();
        third.join().unwrap();
        assert_eq!(join.ready.load(Ordering::Relaxed), 1, "ready exactly once");
    });
}

#[test]
fn submission_racing_an_idle_worker_is_never_left_unrun() {
    // The worker's idle protocol and the submitter's notify, as the
    // executor runs them (`worker.rs`): park only if the epoch did not move.
    loom::model(|| {
        let sleep = Arc::new(SleepState::new());
        let work = Arc::new(AtomicBool::new(false));
        let sleeping = Arc::new(AtomicBool::new(false));
        let worker = {
            let (sleep, work, sleeping) = (sleep.clone(), work.clone(), sleeping.clone());
            // Taking work looks first (like the injector's `take_all`,
            // whose emptiness check is a load): the worker is the only
            // consumer here.
            let take = move |work: &AtomicBool| work.load(Ordering::Acquire);
            thread::spawn(move || loop {
                if take(&work) {
                    return; // ran it
                }
                let epoch = sleep.epoch();
                if take(&work) {
                    return;
                }
                sleeping.store(true, Ordering::Release);
                if sleep.announce(epoch) {
                    while sleeping.load(Ordering::Acquire) {
                        thread::park();
                    }
                }
                sleeping.store(false, Ordering::Release);
                sleep.leave();
            })
        };
        let worker_thread = worker.thread().clone();
        // Submit: publish, then notify; wake the sleeper if any.
        work.store(true, Ordering::Release);
        if sleep.notify() && sleeping.swap(false, Ordering::AcqRel) {
            worker_thread.unpark();
        }
        // A lost wake-up leaves the worker parked forever: loom reports the
        // deadlock.
        worker.join().unwrap();
    });
}

#[test]
fn every_tile_is_claimed_exactly_once() {
    loom::model(|| {
        let tiles = Arc::new(TileCounter::new(5, 2));
        let counts: Arc<Vec<AtomicUsize>> = Arc::new((0..5).map(|_| AtomicUsize::new(0)).collect());
        let shard = |tiles: &TileCounter, counts: &[AtomicUsize]| {
            while let Some((start, end)) = tiles.claim() {
                assert!(start < end && end <= 5);
                for i in start..end {
                    counts[i as usize].fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (tiles, counts) = (tiles.clone(), counts.clone());
                thread::spawn(move || shard(&tiles, &counts))
            })
            .collect();
        shard(&tiles, &counts);
        for t in threads {
            t.join().unwrap();
        }
        for (i, c) in counts.iter().enumerate() {
            assert_eq!(c.load(Ordering::Relaxed), 1, "tile {i}");
        }
    });
}

#[test]
fn scope_keeps_the_first_error() {
    loom::model(|| {
        let scope = Scope::new();
        let other = {
            let scope = scope.clone();
            thread::spawn(move || scope.fail(Error::new(ErrorKind::Aborted, "second?")))
        };
        scope.fail(Error::new(ErrorKind::Internal, "first?"));
        let seen = scope.error().expect("an error was recorded");
        other.join().unwrap();
        let last = scope.error().unwrap();
        assert_eq!(
            seen.message(),
            last.message(),
            "the first error never changes"
        );
        assert_eq!(seen.kind(), last.kind());
    });
}
