//! loom models of the executor's lock-free pieces, using the very counters
//! the executor runs (`fenceline::testing::executor`): the join counter, the
//! sleep/wake protocol, tile claiming, and a scope's first error.
#![cfg(fenceline_loom)]

use fenceline::task::Scope;
use fenceline::testing::executor::{JoinCount, SleepState, TileCounter};
use fenceline::{Error, ErrorKind};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A join of three predecessors: each writes its effect, then counts
/// down; the one that makes the join ready runs it, which must see every
/// effect.
struct Join {
    count: JoinCount,
    effects: [UnsafeCell<u32>; 3],
    ready: AtomicUsize,
}

// SAFETY: each effect cell is written by one predecessor before its
// decrement, and read only by the one that made the join ready.
unsafe impl Sync for Join {}

impl Join {
    fn new() -> Arc<Join> {
        Arc::new(Join {
            count: JoinCount::new(3),
            effects: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
            ready: AtomicUsize::new(0),
        })
    }

    /// Predecessor `i`'s work.
    fn effect(&self, i: usize) {
        // SAFETY: predecessor `i` owns effect `i` until it counts down.
        self.effects[i].with_mut(|e| unsafe { *e = i as u32 + 1 });
    }

    /// The join's run: it must see every predecessor's effect.
    fn run(&self) {
        self.ready.fetch_add(1, Ordering::Relaxed);
        for (k, e) in self.effects.iter().enumerate() {
            // SAFETY: all predecessors finished (the count reached 0).
            assert_eq!(e.with(|e| unsafe { *e }), k as u32 + 1);
        }
    }
}

#[test]
fn join_counter_makes_the_dependent_ready_exactly_once() {
    loom::model(|| {
        let join = Join::new();
        let finish = |join: &Join, i: usize| {
            join.effect(i);
            if join.count.finish_one() {
                join.run();
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
        let join = Join::new();
        // A worker running predecessors `range` in a row: the first one the
        // last stores; otherwise each decrement is held, and all of them
        // are released (one `finish`) before it looks for other work.
        let worker = |join: &Join, range: std::ops::Range<usize>| {
            let mut held = 0;
            let mut ready = false;
            for i in range {
                join.effect(i);
                if held == 0 && join.count.is_last() {
                    join.count.finish_last();
                    ready = true;
                } else {
                    held += 1;
                }
            }
            if held > 0 && join.count.finish(held) {
                ready = true;
            }
            if ready {
                join.run();
            }
        };
        // Both on threads of their own (a model whose main thread ran one
        // explored no schedule where it comes last).
        let threads: Vec<_> = [0..2, 2..3]
            .into_iter()
            .map(|range| {
                let join = join.clone();
                thread::spawn(move || worker(&join, range))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
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

// The guided claim's CAS loop: every tile claimed once by two racing
// shards (and this thread). Mutation checked: a load and a store in place
// of the CAS: a tile claimed twice.
#[test]
fn every_tile_is_claimed_exactly_once() {
    loom::model(|| {
        let tiles = Arc::new(TileCounter::new(5, 2, 2));
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
