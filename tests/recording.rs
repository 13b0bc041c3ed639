//! Command buffers recorded anew every frame, reset while in flight, and
//! one-shot, on the CPU device: results read back exactly, captures live
//! exactly as long as some submission or the command buffer needs them,
//! and every validation error is still returned after a reset.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceline::{Binding, CpuConfig, Device, ErrorKind, Semaphore, Tile, TileIo};

const T: Duration = Duration::from_secs(10);

fn device() -> Device {
    Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap()
}

/// Counts its drops.
struct Dropped(Arc<AtomicUsize>);
impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn fresh_recordings_every_frame_read_back_exactly() {
    let device = device();
    let queue = device.queue(0).unwrap();
    let (a, b) = (device.buffer(64).unwrap(), device.buffer(64).unwrap());
    let done = Semaphore::new(0);
    let sum = Arc::new(AtomicU64::new(0));
    for frame in 1..=200u64 {
        let f = frame as u8;
        let mut cb = if frame % 2 == 0 {
            device.command_buffer().unwrap()
        } else {
            device.command_buffer_one_shot().unwrap()
        };
        cb.fill(&a, 0, 64, &[f]).unwrap();
        cb.update(&[f, f.wrapping_add(1), f.wrapping_add(2)], &b, 61)
            .unwrap();
        cb.barrier().unwrap();
        cb.copy(&a, 0, &b, 0, 32).unwrap();
        cb.barrier().unwrap();
        let s = sum.clone();
        // The dispatch reads `b` through a binding: the action holds `b`
        // for writing (the stages before write it), so a host read from
        // inside its own dispatch would be refused.
        cb.dispatch_with(
            [8, 1, 1],
            &[Binding::read(&b)],
            move |t: &Tile, io: &TileIo<'_>| {
                let bytes: &[u8] = io.read(0)?;
                s.fetch_add(
                    u64::from(bytes[t.workgroup_id[0] as usize]),
                    Ordering::Relaxed,
                );
                Ok(())
            },
        )
        .unwrap();
        cb.end().unwrap();
        queue.execute(&[], &[(&done, frame)], &[&cb]).unwrap();
        drop(cb); // the submission keeps the recording
        done.wait(frame, T).unwrap();
        let mut out = [0u8; 64];
        b.read(0, &mut out).unwrap();
        assert!(out[..32].iter().all(|&x| x == f), "frame {frame}: {out:?}");
        assert_eq!(out[61..], [f, f.wrapping_add(1), f.wrapping_add(2)]);
        let expected: u64 = (1..=frame).map(|k| 8 * (k as u8) as u64).sum();
        assert_eq!(sum.load(Ordering::Relaxed), expected, "frame {frame}");
    }
}

// Fails if `reset` reused a recording still held by a submission (checked
// by forcing the in-place branch: the held submission then runs the new
// commands, and the old closure is dropped before it ran).
#[test]
fn reset_while_a_submission_of_the_old_recording_is_still_running() {
    let device = device();
    let queue = device.queue(0).unwrap();
    let buf = device.buffer(8).unwrap();
    let (go, done) = (Semaphore::new(0), Semaphore::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let mut cb = device.command_buffer().unwrap();
    cb.fill(&buf, 0, 8, &[1]).unwrap();
    let (marker, r) = (Dropped(drops.clone()), ran.clone());
    cb.dispatch([1, 1, 1], move |_: &Tile| {
        let _ = &marker;
        r.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    queue.execute(&[(&go, 1)], &[(&done, 1)], &[&cb]).unwrap();
    cb.reset().unwrap();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        0,
        "the waiting submission still holds the old closure"
    );
    cb.barrier().unwrap();
    cb.update(&[2, 2], &buf, 6).unwrap();
    cb.end().unwrap();
    queue.execute(&[(&done, 1)], &[(&done, 2)], &[&cb]).unwrap();
    go.signal(1).unwrap();
    done.wait(2, T).unwrap();
    let mut out = [0u8; 8];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, [1, 1, 1, 1, 1, 1, 2, 2], "old, then new");
    assert_eq!(ran.load(Ordering::Relaxed), 1, "the old dispatch ran once");
    // The old recording is released when its submission completes.
    let deadline = std::time::Instant::now() + T;
    while drops.load(Ordering::Relaxed) == 0 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert_eq!(
        drops.load(Ordering::Relaxed),
        1,
        "dropped once, after it ran"
    );
}

#[test]
fn a_reset_of_an_idle_command_buffer_drops_its_captures_at_once() {
    let device = device();
    let drops = Arc::new(AtomicUsize::new(0));
    let mut cb = device.command_buffer().unwrap();
    let marker = Dropped(drops.clone());
    cb.dispatch([1, 1, 1], move |_: &Tile| {
        let _ = &marker;
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    cb.reset().unwrap();
    assert_eq!(drops.load(Ordering::Relaxed), 1);
    assert!(format!("{cb:?}").contains("ended: false"), "{cb:?}");
    assert!(format!("{cb:?}").contains("stages: 0"), "{cb:?}");
}

#[test]
fn a_dropped_command_buffer_keeps_its_captures_until_its_submissions_complete() {
    let device = device();
    let queue = device.queue(0).unwrap();
    let (go, done) = (Semaphore::new(0), Semaphore::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let mut cb = device.command_buffer().unwrap();
    let marker = Dropped(drops.clone());
    cb.dispatch([2, 1, 1], move |_: &Tile| {
        let _ = &marker;
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    queue.execute(&[(&go, 1)], &[(&done, 1)], &[&cb]).unwrap();
    queue.execute(&[(&done, 1)], &[(&done, 2)], &[&cb]).unwrap();
    drop(cb);
    assert_eq!(drops.load(Ordering::Relaxed), 0);
    go.signal(1).unwrap();
    done.wait(2, T).unwrap();
    let deadline = std::time::Instant::now() + T;
    while drops.load(Ordering::Relaxed) == 0 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert_eq!(drops.load(Ordering::Relaxed), 1);
    // The device hands the recycled recording out again, empty.
    let again = device.command_buffer().unwrap();
    assert!(format!("{again:?}").contains("stages: 0"), "{again:?}");
}

#[test]
fn every_validation_error_is_still_returned_after_a_reset() {
    let device = device();
    let queue = device.queue(0).unwrap();
    let buf = device.buffer(16).unwrap();
    let mut cb = device.command_buffer().unwrap();
    for round in 0..3 {
        let kind = |r: Result<(), fenceline::Error>| r.unwrap_err().kind();
        assert_eq!(
            kind(cb.fill(&buf, 0, 16, &[1, 2, 3])),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind(cb.fill(&buf, 1, 4, &[1, 2])),
            ErrorKind::InvalidArgument
        );
        assert_eq!(kind(cb.fill(&buf, 8, 16, &[1])), ErrorKind::OutOfRange);
        assert_eq!(kind(cb.update(&[0; 4], &buf, 14)), ErrorKind::OutOfRange);
        assert_eq!(
            kind(cb.copy(&buf, 0, &buf, 4, 8)),
            ErrorKind::InvalidArgument
        );
        assert_eq!(kind(cb.copy(&buf, 12, &buf, 0, 8)), ErrorKind::OutOfRange);
        assert_eq!(
            kind(cb.dispatch([u32::MAX, u32::MAX, u32::MAX], |_: &Tile| Ok(()))),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind(queue.execute(&[], &[], &[&cb])),
            ErrorKind::FailedPrecondition
        );
        // Nothing was recorded by the failed calls.
        assert!(
            format!("{cb:?}").contains("stages: 0"),
            "round {round}: {cb:?}"
        );
        cb.fill(&buf, 0, 16, &[round as u8]).unwrap();
        cb.end().unwrap();
        assert_eq!(kind(cb.end()), ErrorKind::FailedPrecondition);
        assert_eq!(
            kind(cb.fill(&buf, 0, 16, &[1])),
            ErrorKind::FailedPrecondition
        );
        assert_eq!(kind(cb.barrier()), ErrorKind::FailedPrecondition);
        let done = Semaphore::new(0);
        queue.execute(&[], &[(&done, 1)], &[&cb]).unwrap();
        done.wait(1, T).unwrap();
        let mut out = [0u8; 16];
        buf.read(0, &mut out).unwrap();
        assert_eq!(out, [round as u8; 16]);
        cb.reset().unwrap();
    }
}

#[test]
fn a_recording_larger_than_its_first_chunk_reads_back_exactly() {
    // Far past RECORDING_INITIAL_BYTES: the arena grows, and keeps it.
    let device = device();
    let queue = device.queue(0).unwrap();
    let buf = device.buffer(1 << 16).unwrap();
    let done = Semaphore::new(0);
    let mut cb = device.command_buffer().unwrap();
    for round in 1..=3u64 {
        let data: Vec<u8> = (0..1 << 16)
            .map(|i| ((i * 7 + round as usize) % 251) as u8)
            .collect();
        for chunk in 0..16 {
            let at = chunk * 4096;
            cb.update(&data[at..at + 4096], &buf, at).unwrap();
            // Each update writes `buf`: one stage each.
            cb.barrier().unwrap();
        }
        cb.end().unwrap();
        queue.execute(&[], &[(&done, round)], &[&cb]).unwrap();
        done.wait(round, T).unwrap();
        let mut out = vec![0u8; 1 << 16];
        buf.read(0, &mut out).unwrap();
        assert!(out == data, "round {round}");
        cb.reset().unwrap();
    }
}

/// Panics when dropped.
struct PanicsOnDrop;
impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a capture's Drop panics");
        }
    }
}

// The last reference to a recording released where its submission
// completes drops the captures there, before the submission signals. A
// capture whose `Drop` panics must not fail that submission (its work
// ran) nor the ones it releases (mutation checked: letting the panic
// unwind out of the release fails the submission, and `done`, with
// `Internal`).
#[test]
fn a_capture_panicking_in_drop_at_completion_fails_nothing() {
    let device = device();
    let queue = device.queue(0).unwrap();
    let buf = device.buffer(4).unwrap();
    let (gate, done) = (Semaphore::new(0), Semaphore::new(0));
    let others: Vec<Semaphore> = (0..4).map(|_| Semaphore::new(0)).collect();
    let mut other = device.command_buffer().unwrap();
    // Read only: the four unordered submissions of it may run at once
    // (a write would make all but one fail, by the hold rule).
    other
        .dispatch_with(
            [1, 1, 1],
            &[Binding::read(&buf)],
            |_: &Tile, io: &TileIo<'_>| io.read::<u8>(0).map(|_| ()),
        )
        .unwrap();
    other.end().unwrap();
    for round in 1..=200u64 {
        let mut cb = device.command_buffer().unwrap();
        let capture = PanicsOnDrop;
        cb.dispatch([2, 1, 1], move |_: &Tile| {
            let _ = &capture;
            Ok(())
        })
        .unwrap();
        cb.end().unwrap();
        // `cb`'s submission holds the last reference once `cb` is dropped;
        // the others start as it completes, on the scopes it frees.
        queue
            .execute(&[(&gate, round)], &[(&done, round)], &[&cb])
            .unwrap();
        drop(cb);
        for s in &others {
            queue
                .execute(&[(&done, round)], &[(s, round)], &[&other])
                .unwrap();
        }
        gate.signal(round).unwrap();
        for s in &others {
            s.wait(round, T).unwrap();
        }
    }
    assert_eq!(done.query().unwrap(), 200);
}
