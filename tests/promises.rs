//! What the docs promise about device identity, alloca sizes and
//! deallocated buffers, checked through the public surface (CPU device;
//! the CUDA identity checks are in `cuda_device.rs`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceline::{Binding, CpuConfig, Device, ErrorKind, Semaphore, Tile, TileIo};

const T: Duration = Duration::from_secs(10);

fn cpu() -> Device {
    Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap()
}

/// A command buffer recorded on one CPU device is refused by another
/// device's queue, at the call, and runs nothing. Today's behaviour
/// before (fails): `execute` compared device kinds only, returned `Ok` and
/// device B ran A's fill.
#[test]
fn a_command_buffer_of_another_cpu_device_is_refused_at_the_call() {
    let (a, b) = (cpu(), cpu());
    let x = a.buffer(16).unwrap();
    let mut cb = a.command_buffer().unwrap();
    cb.fill(&x, 0, 16, &[7]).unwrap();
    cb.end().unwrap();
    let s = Semaphore::new(0);
    let e = b
        .queue(0)
        .unwrap()
        .execute(&[], &[(&s, 1)], &[&cb])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    assert_eq!(s.query().unwrap(), 0, "nothing submitted");
    let mut out = [1u8; 16];
    x.read(0, &mut out).unwrap();
    assert_eq!(out, [0; 16], "A's fill did not run");
    // On its own device it runs.
    a.queue(0)
        .unwrap()
        .execute(&[], &[(&s, 1)], &[&cb])
        .unwrap();
    s.wait(1, T).unwrap();
    x.read(0, &mut out).unwrap();
    assert_eq!(out, [7; 16]);
}

/// A device's identity is never another's, also after it is dropped: a
/// buffer of a dropped device is refused by every later device (its
/// command buffers, its binding tables). Today's behaviour before (fails):
/// the identity was the recording pool's address, which a later device
/// got again (within a few rounds the pool of a new device sat where a
/// dropped one's had been, and its command buffers accepted the stale
/// buffer).
#[test]
fn a_dropped_devices_buffers_are_refused_by_the_devices_after_it() {
    let mut stale = Vec::new();
    for round in 0..40 {
        let a = cpu();
        stale.push(a.buffer(64).unwrap());
        drop(a);
        let b = cpu();
        for (k, x) in stale.iter().enumerate() {
            let mut cb = b.command_buffer().unwrap();
            let e = cb.fill(x, 0, 64, &[1]).unwrap_err();
            assert_eq!(
                e.kind(),
                ErrorKind::InvalidArgument,
                "round {round}, buffer {k}: {e}"
            );
        }
        let mut cb = b.command_buffer().unwrap();
        cb.dispatch_with(
            [1, 1, 1],
            &[Binding::slot_write_chunks(0, 64)],
            |_: &Tile, io: &TileIo<'_>| {
                io.chunk::<u8>(0)?.fill(9);
                Ok(())
            },
        )
        .unwrap();
        cb.end().unwrap();
        let s = Semaphore::new(0);
        for (k, x) in stale.iter().enumerate() {
            let e = b
                .queue(0)
                .unwrap()
                .execute_with(&[], &[(&s, 1)], &[&cb], &[x])
                .unwrap_err();
            assert_eq!(
                e.kind(),
                ErrorKind::InvalidArgument,
                "round {round}, buffer {k}: {e}"
            );
        }
    }
    for x in &stale {
        let mut out = [0u8; 64];
        x.read(0, &mut out).unwrap();
        assert_eq!(out, [0; 64], "nothing ran on a stale buffer");
    }
}

/// An `alloca` past the largest size class (1 GiB) can be given back like
/// any other. Today's behaviour before (fails): it got memory of its own
/// that `dealloca` refused (`InvalidArgument`), so it could never be given
/// back. (The bytes are never touched here: the allocation is zeroed by
/// the OS on first use, so the test costs no memory.)
#[test]
fn an_alloca_of_more_than_a_gib_can_be_given_back() {
    let d = cpu();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let big = q.alloca(&[], &[(&s, 1)], (1 << 30) + 64).unwrap();
    assert_eq!(big.len(), (1 << 30) + 64);
    q.dealloca(&[(&s, 1)], &[(&s, 2)], &big).unwrap();
    s.wait(2, T).unwrap();
    // Given back: using it now is refused.
    let e = big.write(0, &[1]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
}

/// A buffer whose dealloca ran is refused by `execute` at the call, as the
/// docs say (in a recording or in a binding table), and nothing runs.
/// Today's behaviour before (fails): `execute` returned `Ok` and the
/// action failed at its issue.
#[test]
fn a_buffer_whose_dealloca_ran_is_refused_at_the_call() {
    let d = cpu();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let tmp = q.alloca(&[], &[(&s, 1)], 256).unwrap();
    q.dealloca(&[(&s, 1)], &[(&s, 2)], &tmp).unwrap();
    s.wait(2, T).unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut direct = d.command_buffer().unwrap();
    let r = runs.clone();
    direct
        .dispatch_with(
            [4, 1, 1],
            &[Binding::write_chunks(&tmp, 64)],
            move |_: &Tile, io: &TileIo<'_>| {
                r.fetch_add(1, Ordering::SeqCst);
                io.chunk::<u8>(0)?.fill(1);
                Ok(())
            },
        )
        .unwrap();
    direct.end().unwrap();
    let done = Semaphore::new(0);
    let e = q.execute(&[], &[(&done, 1)], &[&direct]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    let mut slotted = d.command_buffer().unwrap();
    let r = runs.clone();
    slotted
        .dispatch_with(
            [4, 1, 1],
            &[Binding::slot_write_chunks(0, 64)],
            move |_: &Tile, io: &TileIo<'_>| {
                r.fetch_add(1, Ordering::SeqCst);
                io.chunk::<u8>(0)?.fill(1);
                Ok(())
            },
        )
        .unwrap();
    slotted.end().unwrap();
    let e = q
        .execute_with(&[], &[(&done, 1)], &[&slotted], &[&tmp])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    assert_eq!(done.query().unwrap(), 0, "nothing submitted");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no tile ran");
}
