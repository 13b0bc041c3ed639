//! loom models of a buffer's hold word (`device::data::hold::Hold`, the real
//! code): what every user of a CPU buffer's bytes takes, without waiting,
//! for the span of its use. Each model's users touch a loom `UnsafeCell`
//! standing for the bytes only while they hold the word, so loom reports
//! any two accesses the word lets overlap (a data race) or leaves
//! unordered (a causality violation).
#![cfg(fenceline_loom)]

use fenceline::testing::hold::{Access, Hold};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

struct Bytes {
    hold: Hold,
    value: UnsafeCell<u64>,
}

fn bytes() -> Arc<Bytes> {
    Arc::new(Bytes {
        hold: Hold::new(),
        value: UnsafeCell::new(0),
    })
}

/// Writes `v` if the hold can be had; whether it could.
fn write(b: &Bytes, v: u64) -> bool {
    if !b.hold.try_take(Access::Write) {
        return false;
    }
    // SAFETY: held for writing: no other user (what the model checks).
    b.value.with_mut(|p| unsafe { *p = v });
    b.hold.give_back(Access::Write).unwrap();
    true
}

/// The value, if the hold can be had for reading.
fn read(b: &Bytes) -> Option<u64> {
    if !b.hold.try_take(Access::Read) {
        return None;
    }
    // SAFETY: held for reading: no writer (what the model checks).
    let v = b.value.with(|p| unsafe { *p });
    b.hold.give_back(Access::Read).unwrap();
    Some(v)
}

// Catches: two writers let in at once (loom: concurrent `with_mut`).
// Mutation checked: `try_take(Write)` as a plain load-then-store instead
// of one CAS from 0: both writers get in.
#[test]
fn two_writers_never_overlap() {
    loom::model(|| {
        let b = bytes();
        let other = {
            let b = b.clone();
            thread::spawn(move || write(&b, 1))
        };
        let mine = write(&b, 2);
        let theirs = other.join().unwrap();
        assert!(mine || theirs, "one of two writers always gets in");
        assert!(!b.hold.is_held());
    });
}

// Catches: a reader let in while a writer holds the word, or the reader
// reading bytes the writer's give-back did not publish (loom: a causality
// violation when the writer gives back with `Relaxed`, or the reader
// takes with `Relaxed`). Mutations checked: `give_back` with `Relaxed`;
// `try_take(Read)` with a `Relaxed` success ordering.
#[test]
fn a_reader_and_a_writer_never_overlap_and_the_reader_sees_the_write() {
    loom::model(|| {
        let b = bytes();
        let writer = {
            let b = b.clone();
            thread::spawn(move || write(&b, 7))
        };
        let seen = read(&b);
        let wrote = writer.join().unwrap();
        if let Some(v) = seen {
            assert!(v == 0 || v == 7);
        }
        assert!(wrote || seen.is_some(), "someone always gets in");
        assert!(!b.hold.is_held());
    });
}

// Catches: a reader failing because of another reader (readers never
// conflict), and a writer let in while readers hold the word. Two readers
// and a writer; the readers both always get in when the writer fails.
#[test]
fn readers_share_and_keep_a_writer_out() {
    loom::model(|| {
        let b = bytes();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || read(&b))
            })
            .collect();
        let wrote = write(&b, 3);
        let seen: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        if !wrote {
            // Only readers could have kept it out: each of them got in.
            assert!(seen.iter().any(Option::is_some));
        }
        assert!(!b.hold.is_held());
    });
}

// Catches, with the give-back racing the next take: a taker that sees the
// word free but not the bytes written before it was freed. The first
// writer holds the word before the other thread starts. Mutation checked:
// `give_back(Write)` with `Relaxed` (loom: causality violation on the
// bytes).
#[test]
fn a_give_back_racing_a_take_publishes_the_bytes() {
    loom::model(|| {
        let b = bytes();
        assert!(b.hold.try_take(Access::Write));
        let taker = {
            let b = b.clone();
            thread::spawn(move || {
                // Loops until the first writer is done: the model needs
                // the take to happen after the give-back in some runs.
                loop {
                    if let Some(v) = read(&b) {
                        return v;
                    }
                    thread::yield_now();
                }
            })
        };
        // SAFETY: held for writing.
        b.value.with_mut(|p| unsafe { *p = 9 });
        b.hold.give_back(Access::Write).unwrap();
        assert_eq!(taker.join().unwrap(), 9);
    });
}

// Catches: a dealloca closing a buffer a user still holds (the memory
// would be recycled under it: the closer's write below stands for the
// reuse), or a user taking a closed one. Mutation checked: `Hold::close`
// not refusing a held word (loom: concurrent accesses to the bytes).
#[test]
fn a_close_never_closes_a_held_word() {
    loom::model(|| {
        let b = bytes();
        let user = {
            let b = b.clone();
            thread::spawn(move || read(&b))
        };
        if b.hold.close().is_ok() {
            // Closed: nobody holds it or ever will; the bytes are ours to
            // recycle.
            // SAFETY: closed (what the model checks).
            b.value.with_mut(|p| unsafe { *p = 1 });
        }
        let _ = user.join().unwrap();
    });
}
