//! The data plane on the CPU device: buffers as plain bytes written and
//! read from the host, dispatches that compute on bound buffers, and the
//! rules that keep every byte race-free from safe code (stage hazards at
//! record, holds across actions and host copies).
//!
//! Each test names the guard it checks and the mutation that makes it
//! fail.

use fenceline::testing::BufferInternals;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use fenceline::{
    Binding, Buffer, CommandBuffer, CpuConfig, Device, Error, ErrorKind, Semaphore, Tile, TileIo,
    BUFFER_ALIGN,
};

const T: Duration = Duration::from_secs(20);

fn device() -> Device {
    Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 2,
        ..Default::default()
    })
    .unwrap()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes_of(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn run(device: &Device, cb: &CommandBuffer) -> Result<(), Error> {
    let done = Semaphore::new(0);
    device.queue(0)?.execute(&[], &[(&done, 1)], &[cb])?;
    done.wait(1, T)
}

/// A 64-byte-aligned plain value: reading a buffer as these proves its
/// start is aligned to 64.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);
// SAFETY: one `[u8; 64]` field, no padding (size 64 = alignment 64);
// every bit pattern is valid and zeroes are a valid value.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Line {}

#[test]
fn host_write_and_read_are_exact_and_out_of_range_changes_nothing() {
    let d = device();
    let buf = d.buffer(16).unwrap();
    buf.write(0, &[7; 16]).unwrap();
    buf.write(3, &[1, 2, 3]).unwrap();
    let e = buf.write(14, &[9, 9, 9]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfRange);
    assert_eq!(
        buf.write(usize::MAX, &[1]).unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
    let mut out = [0u8; 16];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, [7, 7, 7, 1, 2, 3, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]);
    assert!(!buf.is_held());
}

#[test]
fn buffer_memory_is_aligned_to_64_for_typed_views() {
    const { assert!(BUFFER_ALIGN >= 64) };
    let d = device();
    for len in [64usize, 128, 64 * 5] {
        let buf = d.buffer(len).unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let mut cb = d.command_buffer().unwrap();
        let s = seen.clone();
        cb.dispatch_with(
            [1, 1, 1],
            &[Binding::read(&buf)],
            move |_: &Tile, io: &TileIo<'_>| {
                let lines: &[Line] = io.read(0)?;
                s.store(lines.len(), Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
        cb.end().unwrap();
        run(&d, &cb).unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), len / 64);
    }
}

/// A plain value aligned to 128, more than a buffer's start promises.
#[derive(Clone, Copy)]
#[repr(C, align(128))]
struct Wide([u8; 128]);
// SAFETY: one `[u8; 128]` field, no padding (size 128 = alignment 128);
// every bit pattern is valid and zeroes are a valid value.
unsafe impl bytemuck::Zeroable for Wide {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Wide {}

// A type aligned past `BUFFER_ALIGN` is handed out only where the address
// itself is aligned: on a buffer whose start is 64 past a multiple of 128
// both `read` and `chunk` refuse it, and every view handed out is aligned.
// Mutation checked: `chunk` checking the chunk's offset instead of its
// address (`start % align`) hands out a misaligned `&mut [Wide]`.
#[test]
fn a_type_aligned_past_the_buffer_is_refused_where_the_address_is_not() {
    let d = device();
    let mut kept = Vec::new();
    let mut misaligned_seen = 0;
    for _ in 0..256 {
        let buf = d.buffer(256).unwrap();
        // The buffer's address, from a byte view (always aligned).
        let addr = Arc::new(AtomicUsize::new(0));
        let mut cb = d.command_buffer().unwrap();
        let a = addr.clone();
        cb.dispatch_with(
            [1, 1, 1],
            &[Binding::write_chunks(&buf, 256)],
            move |_: &Tile, io: &TileIo<'_>| {
                let bytes: &mut [u8] = io.chunk(0)?;
                a.store(bytes.as_ptr() as usize, Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
        cb.end().unwrap();
        run(&d, &cb).unwrap();
        let base = addr.load(Ordering::SeqCst);
        assert_eq!(base % BUFFER_ALIGN, 0);
        // Two tiles of 128 bytes each, as `Wide`, then the whole buffer
        // read as `Wide`: each records whether it was handed out aligned.
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let mut cb = d.command_buffer().unwrap();
        let o = outcomes.clone();
        cb.dispatch_with(
            [2, 1, 1],
            &[Binding::write_chunks(&buf, 128)],
            move |_: &Tile, io: &TileIo<'_>| {
                let got = io.chunk::<Wide>(0).map(|w| w.as_ptr() as usize % 128 == 0);
                o.lock().unwrap().push(got.map_err(|e| e.kind()));
                Ok(())
            },
        )
        .unwrap();
        cb.barrier().unwrap();
        let o = outcomes.clone();
        cb.dispatch_with(
            [1, 1, 1],
            &[Binding::read(&buf)],
            move |_: &Tile, io: &TileIo<'_>| {
                let got = io.read::<Wide>(0).map(|w| w.as_ptr() as usize % 128 == 0);
                o.lock().unwrap().push(got.map_err(|e| e.kind()));
                Ok(())
            },
        )
        .unwrap();
        cb.end().unwrap();
        run(&d, &cb).unwrap();
        let outcomes = outcomes.lock().unwrap().clone();
        assert_eq!(outcomes.len(), 3);
        let want = if base % 128 == 0 {
            Ok(true)
        } else {
            misaligned_seen += 1;
            Err(ErrorKind::InvalidArgument)
        };
        assert!(
            outcomes.iter().all(|o| *o == want),
            "base {base:#x}: {outcomes:?}"
        );
        kept.push(buf);
        if misaligned_seen >= 2 && kept.len() >= 8 {
            return;
        }
    }
    panic!("no buffer started 64 past a multiple of 128: the test proves nothing here");
}

// y[i] = 2 x[i] + 1 over a 3-D grid: every tile reads all of x, writes
// its chunk of y (tile i = x + X (y + Y z), x fastest), and the result
// is exact. Fails if chunks were indexed other than by `linear_id`.
#[test]
fn a_bound_dispatch_computes_on_device_buffers() {
    let d = device();
    let grid = [4u32, 3, 2];
    let per_tile = 16usize; // floats
    let n = 24 * per_tile;
    let x = d.buffer(n * 4).unwrap();
    let y = d.buffer(n * 4).unwrap();
    let input: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    x.write(0, &bytes_of(&input)).unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch_with(
        grid,
        &[Binding::read(&x), Binding::write_chunks(&y, per_tile * 4)],
        move |t: &Tile, io: &TileIo<'_>| {
            let x: &[f32] = io.read(0)?;
            let y: &mut [f32] = io.chunk(1)?;
            assert_eq!(io.tile(), t.linear_id());
            let base = t.linear_id() as usize * per_tile;
            for (i, out) in y.iter_mut().enumerate() {
                *out = 2.0 * x[base + i] + 1.0;
            }
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    for _ in 0..3 {
        run(&d, &cb).unwrap();
        let mut out = vec![0u8; n * 4];
        y.read(0, &mut out).unwrap();
        let want: Vec<f32> = input.iter().map(|v| 2.0 * v + 1.0).collect();
        assert_eq!(f32s(&out), want);
        assert!(!x.is_held() && !y.is_held(), "holds given back");
    }
}

// Misuse inside a tile is an `Err`, never an alias: each probe records
// the kind it got. Mutation checked: `chunk` not marking the binding
// taken (the second chunk succeeds).
#[test]
fn misuse_inside_a_tile_is_an_error_never_an_alias() {
    let d = device();
    let (x, y) = (d.buffer(64).unwrap(), d.buffer(64).unwrap());
    type Seen = Vec<(&'static str, Option<ErrorKind>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let mut cb = d.command_buffer().unwrap();
    let s = seen.clone();
    cb.dispatch_with(
        [1, 1, 1],
        &[Binding::read(&x), Binding::write_chunks(&y, 60)],
        move |_: &Tile, io: &TileIo<'_>| {
            let kind = |r: Result<usize, Error>| r.err().map(|e| e.kind());
            let mut s = s.lock().unwrap();
            s.push((
                "read of a write binding",
                kind(io.read::<u8>(1).map(<[u8]>::len)),
            ));
            s.push((
                "chunk of a read binding",
                kind(io.chunk::<u8>(0).map(|c| c.len())),
            ));
            s.push((
                "binding out of range",
                kind(io.read::<u8>(2).map(<[u8]>::len)),
            ));
            s.push((
                "chunk not a multiple of T",
                kind(io.chunk::<u64>(1).map(|c| c.len())),
            ));
            s.push(("first chunk", kind(io.chunk::<u32>(1).map(|c| c.len()))));
            s.push(("second chunk", kind(io.chunk::<u32>(1).map(|c| c.len()))));
            s.push((
                "read of a misfit length",
                kind(io.read::<[u8; 48]>(0).map(<[_]>::len)),
            ));
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    run(&d, &cb).unwrap();
    let seen = seen.lock().unwrap();
    let invalid = Some(ErrorKind::InvalidArgument);
    assert_eq!(
        *seen,
        vec![
            ("read of a write binding", invalid),
            ("chunk of a read binding", invalid),
            ("binding out of range", invalid),
            ("chunk not a multiple of T", invalid),
            ("first chunk", None),
            ("second chunk", invalid),
            ("read of a misfit length", invalid),
        ]
    );
}

// Record-time checks: nothing is recorded when they refuse (the command
// buffer then runs as if the call had not been made). Mutations checked:
// dropping the read/write check of one dispatch, or the fit of its
// chunks, lets the call succeed.
#[test]
fn bad_bindings_are_refused_at_record() {
    let d = device();
    let other_device = device();
    let (x, y) = (d.buffer(64).unwrap(), d.buffer(64).unwrap());
    let foreign = other_device.buffer(64).unwrap();
    let mut cb = d.command_buffer().unwrap();
    let nop = |_: &Tile, _: &TileIo<'_>| Ok(());
    let refused = |cb: &mut CommandBuffer, grid: [u32; 3], b: &[Binding<'_>]| {
        let e = cb.dispatch_with(grid, b, nop).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        e.message().to_string()
    };
    // 5 chunks of 16 bytes do not fit 64.
    let m = refused(&mut cb, [5, 1, 1], &[Binding::write_chunks(&y, 16)]);
    assert!(m.contains("do not fit"), "{m}");
    refused(&mut cb, [1, 1, 1], &[Binding::write_chunks(&y, 0)]);
    refused(&mut cb, [1, 1, 1], &[Binding::read(&foreign)]);
    let m = refused(
        &mut cb,
        [1, 1, 1],
        &[Binding::read(&x), Binding::write_chunks(&x, 8)],
    );
    assert!(m.contains("may not read what it writes"), "{m}");
    refused(
        &mut cb,
        [1, 1, 1],
        &[Binding::write_chunks(&y, 8), Binding::write_chunks(&y, 8)],
    );
    // Readers of one buffer, twice in one dispatch, are fine; 4 chunks of
    // 16 fit exactly.
    cb.dispatch_with(
        [4, 1, 1],
        &[
            Binding::read(&x),
            Binding::read(&x),
            Binding::write_chunks(&y, 16),
        ],
        |_: &Tile, io: &TileIo<'_>| {
            io.chunk::<u8>(2)?.fill(3);
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    run(&d, &cb).unwrap();
    let mut out = [0u8; 64];
    y.read(0, &mut out).unwrap();
    assert_eq!(out, [3; 64]);
}

// Inside one stage, a buffer one command writes may not be touched by
// another; readers share. The refused command leaves the recording
// unchanged. Mutation checked: `Recording::push` skipping its stage
// check (the fill/dispatch pairs below are accepted).
#[test]
fn stage_hazards_are_refused_at_record_and_readers_share() {
    let d = device();
    let (a, b, c) = (
        d.buffer(64).unwrap(),
        d.buffer(64).unwrap(),
        d.buffer(64).unwrap(),
    );
    a.write(0, &[5; 64]).unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.fill(&b, 0, 64, &[1]).unwrap();
    // Writes b, which the fill writes: refused.
    let e = cb.update(&[2; 4], &b, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // Reads b, which the fill writes: refused.
    let e = cb
        .dispatch_with(
            [1, 1, 1],
            &[Binding::read(&b)],
            |_: &Tile, _: &TileIo<'_>| Ok(()),
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = cb.copy(&b, 0, &c, 0, 8).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // Readers of `a` share the stage: a copy from it and a dispatch that
    // reads it and writes `c`.
    cb.dispatch_with(
        [2, 1, 1],
        &[Binding::read(&a), Binding::write_chunks(&c, 32)],
        |_: &Tile, io: &TileIo<'_>| {
            let a: &[u8] = io.read(0)?;
            let total: u8 = a.iter().fold(0u8, |s, v| s.wrapping_add(*v));
            io.chunk::<u8>(1)?.fill(total);
            Ok(())
        },
    )
    .unwrap();
    cb.barrier().unwrap();
    cb.update(&[2; 4], &b, 0).unwrap();
    cb.end().unwrap();
    run(&d, &cb).unwrap();
    let mut out = [0u8; 64];
    b.read(0, &mut out).unwrap();
    let mut want = [1u8; 64];
    want[..4].copy_from_slice(&[2; 4]);
    assert_eq!(out, want, "only the accepted commands ran");
    c.read(0, &mut out).unwrap();
    assert_eq!(out, [(5u32 * 64 % 256) as u8; 64]);
}

/// A stop inside a tile: `here` says the tile got there (`entered`) and
/// blocks until the test sends on `gate` (or drops it).
struct Stop {
    entered: Mutex<mpsc::Sender<()>>,
    gate: Mutex<mpsc::Receiver<()>>,
}

impl Stop {
    /// The stop, the receiver of its arrival, and its gate.
    fn new() -> (Stop, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (entered_tx, entered) = mpsc::channel();
        let (gate, gate_rx) = mpsc::channel();
        let stop = Stop {
            entered: Mutex::new(entered_tx),
            gate: Mutex::new(gate_rx),
        };
        (stop, entered, gate)
    }

    fn here(&self) {
        self.entered.lock().unwrap().send(()).unwrap();
        let _ = self.gate.lock().unwrap().recv_timeout(T);
    }
}

/// A bound dispatch that writes `buf` and blocks in its tile until the
/// returned sender is used (or dropped): its action holds `buf` then.
fn a_writer_blocked_in_its_tile(
    d: &Device,
    buf: &Buffer,
    queue: usize,
    done: &Semaphore,
) -> (mpsc::Sender<()>, mpsc::Receiver<()>) {
    let (stop, entered, gate) = Stop::new();
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch_with(
        [1, 1, 1],
        &[Binding::write_chunks(buf, buf.len())],
        move |_: &Tile, io: &TileIo<'_>| {
            io.chunk::<u8>(0)?.fill(0xEE);
            stop.here();
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    d.queue(queue)
        .unwrap()
        .execute(&[], &[(done, 1)], &[&cb])
        .unwrap();
    entered.recv_timeout(T).expect("the writer's tile runs");
    (gate, entered)
}

// While an action runs it holds what it touches: an unordered action that
// would write (or read) a buffer it writes fails with FailedPrecondition
// naming the buffer, its signals fail, and it never ran; host copies get
// the same error. Once the writer finished, all of it works again.
// Mutations checked: the CPU backend not taking holds at issue (the
// conflicting action runs: its closure counts), and host `read` not
// taking its hold (it returns Ok during the write).
#[test]
fn a_conflicting_action_or_host_copy_fails_instead_of_racing() {
    let d = device();
    let buf = d.buffer(64).unwrap();
    let writer_done = Semaphore::new(0);
    let (gate, _entered) = a_writer_blocked_in_its_tile(&d, &buf, 0, &writer_done);
    assert!(buf.is_held());

    let ran = Arc::new(AtomicUsize::new(0));
    for binding in [Binding::read(&buf), Binding::write_chunks(&buf, 64)] {
        let mut cb = d.command_buffer().unwrap();
        let r = ran.clone();
        cb.dispatch_with([1, 1, 1], &[binding], move |_: &Tile, _: &TileIo<'_>| {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        cb.end().unwrap();
        let failed = Semaphore::new(0);
        d.queue(1)
            .unwrap()
            .execute(&[], &[(&failed, 1)], &[&cb])
            .unwrap();
        let e = failed.wait(1, T).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
        assert!(e.message().contains("(64 bytes)"), "names the buffer: {e}");
    }
    let mut fill = d.command_buffer().unwrap();
    fill.fill(&buf, 0, 64, &[1]).unwrap();
    fill.end().unwrap();
    let failed = Semaphore::new(0);
    d.queue(1)
        .unwrap()
        .execute(&[], &[(&failed, 1)], &[&fill])
        .unwrap();
    assert_eq!(
        failed.wait(1, T).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    let mut out = [0u8; 64];
    assert_eq!(
        buf.read(0, &mut out).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    assert_eq!(
        buf.write(0, &[1]).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a conflicting action ran");

    gate.send(()).unwrap();
    writer_done.wait(1, T).unwrap();
    buf.read(0, &mut out).unwrap();
    assert_eq!(
        out, [0xEE; 64],
        "the writer's bytes, untouched by the refused"
    );
    run(&d, &fill).unwrap();
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, [1; 64]);
}

// Concurrent readers never conflict: a reader blocked in its tile, and
// meanwhile another action reading the same buffer, and a host read.
#[test]
fn concurrent_readers_never_conflict() {
    let d = device();
    let buf = d.buffer(64).unwrap();
    buf.write(0, &[4; 64]).unwrap();
    let (stop, entered, gate) = Stop::new();
    let mut blocked = d.command_buffer().unwrap();
    blocked
        .dispatch_with(
            [1, 1, 1],
            &[Binding::read(&buf)],
            move |_: &Tile, io: &TileIo<'_>| {
                assert_eq!(io.read::<u8>(0)?, [4; 64]);
                stop.here();
                Ok(())
            },
        )
        .unwrap();
    blocked.end().unwrap();
    let first = Semaphore::new(0);
    d.queue(0)
        .unwrap()
        .execute(&[], &[(&first, 1)], &[&blocked])
        .unwrap();
    entered.recv_timeout(T).unwrap();
    let sum = Arc::new(AtomicU64::new(0));
    let mut reader = d.command_buffer().unwrap();
    let s = sum.clone();
    reader
        .dispatch_with(
            [2, 1, 1],
            &[Binding::read(&buf)],
            move |_: &Tile, io: &TileIo<'_>| {
                let b: &[u8] = io.read(0)?;
                s.fetch_add(b.iter().map(|v| u64::from(*v)).sum(), Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
    reader.end().unwrap();
    let second = Semaphore::new(0);
    d.queue(1)
        .unwrap()
        .execute(&[], &[(&second, 1)], &[&reader])
        .unwrap();
    second.wait(1, T).unwrap();
    let mut out = [0u8; 64];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, [4; 64]);
    gate.send(()).unwrap();
    first.wait(1, T).unwrap();
    assert_eq!(sum.load(Ordering::SeqCst), 2 * 4 * 64);
    assert!(!buf.is_held());
}

/// A waker that, woken, says whether the buffer was still held and
/// whether a host write to it went through: it runs inside the signal
/// that wakes it, on the signalling thread.
struct Probe {
    buf: Buffer,
    seen: Mutex<Vec<(bool, Result<(), ErrorKind>)>>,
}

impl Wake for Probe {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let held = self.buf.is_held();
        let wrote = self.buf.write(0, &[9]).map_err(|e| e.kind());
        self.seen.lock().unwrap().push((held, wrote));
    }
}

// An action gives its holds back before it signals: a waker run by its
// signal (inside the completing thread's signal) already finds the buffer
// free, and so does work ordered after it by the semaphore, on any
// thread. Mutation checked: the execute's `finally` giving the holds (and
// recordings) back after `complete` instead of before: the probe sees
// `buf` held and its write refused.
#[test]
fn holds_are_given_back_before_the_signal() {
    let d = device();
    // The probe watches `buf`; the action ordered after writes `other`
    // (so the two never meet each other).
    let (buf, other) = (d.buffer(64).unwrap(), d.buffer(64).unwrap());
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch_with(
        [4, 1, 1],
        &[
            Binding::write_chunks(&buf, 16),
            Binding::write_chunks(&other, 16),
        ],
        |t: &Tile, io: &TileIo<'_>| {
            io.chunk::<u8>(0)?.fill(t.linear_id() as u8);
            io.chunk::<u8>(1)?.fill(t.linear_id() as u8);
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    let mut next = d.command_buffer().unwrap();
    next.fill(&other, 60, 4, &[0xAB]).unwrap();
    next.end().unwrap();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    for round in 1..=200u64 {
        // A probe per round: a wake of an earlier round's waker may come
        // late (the signal marks the future, which may be polled ready
        // before the signalling thread gets to call the waker), and it
        // would then meet this round's action.
        let probe = Arc::new(Probe {
            buf: buf.clone(),
            seen: Mutex::default(),
        });
        let waker = Waker::from(probe.clone());
        let mut f = Box::pin(s.wait_async(2 * round - 1));
        assert!(f
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        q.execute(&[(&s, 2 * round - 2)], &[(&s, 2 * round - 1)], &[&cb])
            .unwrap();
        // Ordered after it by the semaphore, on the other queue.
        d.queue(1)
            .unwrap()
            .execute(&[(&s, 2 * round - 1)], &[(&s, 2 * round)], &[&next])
            .unwrap();
        s.wait(2 * round, T).unwrap();
        assert!(matches!(
            f.as_mut().poll(&mut Context::from_waker(&waker)),
            Poll::Ready(Ok(()))
        ));
        // The signal's wake (the first; a waker may be called more than
        // once), waited for before the next round's action can hold `buf`.
        let start = std::time::Instant::now();
        let first = loop {
            if let Some(&w) = probe.seen.lock().unwrap().first() {
                break w;
            }
            assert!(
                start.elapsed() < T,
                "round {round}: the signal never woke the future"
            );
            std::thread::yield_now();
        };
        assert_eq!(
            first,
            (false, Ok(())),
            "round {round}: the signal's waker met the action's hold"
        );
    }
}

// An execute of several command buffers holds the union: a buffer one of
// them reads and another writes is held for writing (a concurrent reader
// fails), and the same command buffer twice in one execute is fine.
// Mutation checked: `each_hold` taking each recording's access as it is
// (not the strongest): the concurrent reader gets in.
#[test]
fn an_action_holds_the_union_of_its_command_buffers() {
    let d = device();
    let (x, y) = (d.buffer(64).unwrap(), d.buffer(64).unwrap());
    let (stop, entered, gate) = Stop::new();
    // First command buffer: reads x, blocks.
    let mut reads = d.command_buffer().unwrap();
    reads
        .dispatch_with(
            [1, 1, 1],
            &[Binding::read(&x)],
            move |_: &Tile, _: &TileIo<'_>| {
                stop.here();
                Ok(())
            },
        )
        .unwrap();
    reads.end().unwrap();
    // Second: writes x (runs after the first, in the same action).
    let mut writes = d.command_buffer().unwrap();
    writes.fill(&x, 0, 64, &[6]).unwrap();
    writes.copy(&y, 0, &y, 32, 8).unwrap();
    writes.end().unwrap();
    let done = Semaphore::new(0);
    d.queue(0)
        .unwrap()
        .execute(&[], &[(&done, 1)], &[&reads, &writes, &writes])
        .unwrap();
    entered.recv_timeout(T).unwrap();
    // x is held for writing by the whole action, though its running
    // command only reads it.
    let mut out = [0u8; 8];
    assert_eq!(
        x.read(0, &mut out).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    gate.send(()).unwrap();
    done.wait(1, T).unwrap();
    x.read(0, &mut out).unwrap();
    assert_eq!(out, [6; 8]);
}

// A failure at issue gives back what it took: the second buffer conflicts,
// the first (taken before) is free afterwards. Mutation checked: not
// giving back the holds taken before the conflict (the first buffer stays
// held for good).
#[test]
fn a_refused_action_keeps_no_hold() {
    let d = device();
    let (free, busy) = (d.buffer(64).unwrap(), d.buffer(64).unwrap());
    let writer_done = Semaphore::new(0);
    let (gate, _entered) = a_writer_blocked_in_its_tile(&d, &busy, 0, &writer_done);
    // Both recording orders: whichever order the action takes its holds
    // in, one of them takes `free` before it meets `busy`.
    for round in 0..4 {
        let mut cb = d.command_buffer().unwrap();
        let (first, second) = if round % 2 == 0 {
            (&free, &busy)
        } else {
            (&busy, &free)
        };
        cb.fill(first, 0, 64, &[1]).unwrap();
        cb.fill(second, 0, 64, &[1]).unwrap();
        cb.end().unwrap();
        let s = Semaphore::new(0);
        d.queue(1)
            .unwrap()
            .execute(&[], &[(&s, 1)], &[&cb])
            .unwrap();
        assert_eq!(
            s.wait(1, T).unwrap_err().kind(),
            ErrorKind::FailedPrecondition
        );
        assert!(!free.is_held(), "a hold taken before the conflict was kept");
    }
    free.write(0, &[2]).unwrap();
    gate.send(()).unwrap();
    writer_done.wait(1, T).unwrap();
}

/// A recording of one bound dispatch over slots: y[i] = x[i] * 3 for the
/// `n` u32s of slot 0 into slot 1, 4 per tile.
fn tripler(d: &Device, n: usize) -> CommandBuffer {
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch_with(
        [(n / 4) as u32, 1, 1],
        &[Binding::slot_read(0), Binding::slot_write_chunks(1, 16)],
        |t: &Tile, io: &TileIo<'_>| {
            let x: &[u32] = io.read(0)?;
            let y: &mut [u32] = io.chunk(1)?;
            let base = t.linear_id() as usize * 4;
            for (i, out) in y.iter_mut().enumerate() {
                *out = x[base + i] * 3;
            }
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    cb
}

fn u32s(b: &Buffer) -> Vec<u32> {
    let mut out = vec![0u8; b.len()];
    b.read(0, &mut out).unwrap();
    out.chunks_exact(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn write_u32s(b: &Buffer, values: &[u32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    b.write(0, &bytes).unwrap();
}

// One recording runs on new buffers every submission: slot `i` is
// `table[i]` for that submission only. Three pairs of buffers in flight
// at once (unordered: they share nothing), each result exact. Mutation
// checked: the dispatch tasks not handed their submission's table (a null
// table in `build`): the tiles fail.
#[test]
fn a_binding_table_gives_each_submission_its_own_buffers() {
    let d = device();
    let cb = tripler(&d, 64);
    let pairs: Vec<(Buffer, Buffer)> = (0..3)
        .map(|_| (d.buffer(256).unwrap(), d.buffer(256).unwrap()))
        .collect();
    for (k, (x, _)) in pairs.iter().enumerate() {
        write_u32s(x, &(0..64).map(|i| i + 100 * k as u32).collect::<Vec<_>>());
    }
    let gate = Semaphore::new(0);
    let sems: Vec<Semaphore> = (0..3).map(|_| Semaphore::new(0)).collect();
    for ((x, y), s) in pairs.iter().zip(&sems) {
        d.queue(0)
            .unwrap()
            .execute_with(&[(&gate, 1)], &[(s, 1)], &[&cb], &[x, y])
            .unwrap();
    }
    gate.signal(1).unwrap();
    for s in &sems {
        s.wait(1, T).unwrap();
    }
    for (k, (_, y)) in pairs.iter().enumerate() {
        let want: Vec<u32> = (0..64).map(|i| (i + 100 * k as u32) * 3).collect();
        assert_eq!(u32s(y), want, "pair {k}");
    }
}

// Validation at the call: nothing is submitted (the signal is never
// made). Mutations checked: `SlotTable::new` without the length check of a
// slot's buffer (the too-short table is accepted), and without the
// read/write slot hazard (the aliased table is accepted).
#[test]
fn a_bad_binding_table_is_refused_at_the_call() {
    let d = device();
    let cb = tripler(&d, 64);
    let (x, y, short) = (
        d.buffer(256).unwrap(),
        d.buffer(256).unwrap(),
        d.buffer(255).unwrap(),
    );
    let foreign = device().buffer(256).unwrap();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let refused = |table: &[&Buffer], cbs: &[&CommandBuffer]| {
        let e = q.execute_with(&[], &[(&s, 1)], cbs, table).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        e.message().to_string()
    };
    // `execute` of a command buffer with slots.
    let e = q.execute(&[], &[(&s, 1)], &[&cb]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let m = refused(&[&x], &[&cb]);
    assert!(m.contains("slot 1"), "a short table: {m}");
    let m = refused(&[&x, &short], &[&cb]);
    assert!(
        m.contains("255 bytes"),
        "a buffer too small for its chunks: {m}"
    );
    refused(&[&x, &foreign], &[&cb]);
    let m = refused(&[&x, &x], &[&cb]);
    assert!(
        m.contains("slots 0 and 1"),
        "one buffer read and written: {m}"
    );
    let many: Vec<&Buffer> = (0..17).map(|_| &x).collect();
    refused(&many, &[&cb]);
    // A table buffer that a command buffer also writes directly.
    let mut direct = d.command_buffer().unwrap();
    direct.fill(&y, 0, 4, &[1]).unwrap();
    direct.end().unwrap();
    refused(&[&x, &y], &[&cb, &direct]);
    assert_eq!(s.query().unwrap(), 0, "nothing was submitted");
    // The same buffer in two read slots is fine.
    let mut two_reads = d.command_buffer().unwrap();
    two_reads
        .dispatch_with(
            [1, 1, 1],
            &[Binding::slot_read(0), Binding::slot_read(1)],
            |_: &Tile, io: &TileIo<'_>| {
                assert_eq!(io.read::<u8>(0)?.len(), io.read::<u8>(1)?.len());
                Ok(())
            },
        )
        .unwrap();
    two_reads.end().unwrap();
    q.execute_with(&[], &[(&s, 1)], &[&two_reads], &[&x, &x])
        .unwrap();
    s.wait(1, T).unwrap();
}

// Record-time rules for slots: a slot past the table size, a dispatch
// reading the slot it writes, two commands of one stage on one slot where
// one writes.
#[test]
fn slot_bindings_are_checked_at_record() {
    let d = device();
    let nop = |_: &Tile, _: &TileIo<'_>| Ok(());
    let mut cb = d.command_buffer().unwrap();
    let kind = |r: Result<(), Error>| r.unwrap_err().kind();
    assert_eq!(
        kind(cb.dispatch_with([1, 1, 1], &[Binding::slot_read(16)], nop)),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(cb.dispatch_with(
            [1, 1, 1],
            &[Binding::slot_read(0), Binding::slot_write_chunks(0, 4)],
            nop
        )),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(cb.dispatch_with([1, 1, 1], &[Binding::slot_write_chunks(0, 0)], nop)),
        ErrorKind::InvalidArgument
    );
    cb.dispatch_with([1, 1, 1], &[Binding::slot_write_chunks(0, 4)], nop)
        .unwrap();
    assert_eq!(
        kind(cb.dispatch_with([1, 1, 1], &[Binding::slot_read(0)], nop)),
        ErrorKind::InvalidArgument,
        "stage hazard on a slot"
    );
    cb.barrier().unwrap();
    cb.dispatch_with([1, 1, 1], &[Binding::slot_read(0)], nop)
        .unwrap();
}

// An action holds its table's buffers like its own: a writer through a
// slot, blocked in its tile, makes a host read and an unordered action on
// that buffer fail with FailedPrecondition. Mutation checked: `each_hold`
// leaving out the table (the host read goes through).
#[test]
fn an_action_holds_its_tables_buffers() {
    let d = device();
    let (x, y) = (d.buffer(64).unwrap(), d.buffer(64).unwrap());
    let (stop, entered, gate) = Stop::new();
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch_with(
        [1, 1, 1],
        &[Binding::slot_read(0), Binding::slot_write_chunks(1, 64)],
        move |_: &Tile, io: &TileIo<'_>| {
            let x: &[u8] = io.read(0)?;
            io.chunk::<u8>(1)?.copy_from_slice(x);
            stop.here();
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    x.write(0, &[8; 64]).unwrap();
    let done = Semaphore::new(0);
    d.queue(0)
        .unwrap()
        .execute_with(&[], &[(&done, 1)], &[&cb], &[&x, &y])
        .unwrap();
    entered.recv_timeout(T).unwrap();
    let mut out = [0u8; 64];
    assert_eq!(
        y.read(0, &mut out).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    assert_eq!(
        x.write(0, &[1]).unwrap_err().kind(),
        ErrorKind::FailedPrecondition,
        "x is read by the action"
    );
    x.read(0, &mut out).unwrap(); // readers share
    gate.send(()).unwrap();
    done.wait(1, T).unwrap();
    y.read(0, &mut out).unwrap();
    assert_eq!(out, [8; 64]);
    assert!(!x.is_held() && !y.is_held());
}

// Queue-ordered memory: a buffer from `alloca` is unusable until its
// alloca ran and after its dealloca ran, for the host and for actions
// alike (FailedPrecondition, its bytes never touched), zeroed when it
// becomes usable. Mutations checked: `Hold::try_take` ignoring the
// pending mark (the early host read goes through), and ignoring the gone
// mark (the late read goes through).
#[test]
fn alloca_memory_is_usable_only_between_its_alloca_and_dealloca() {
    let d = device();
    let q = d.queue(0).unwrap();
    let (gate, s) = (Semaphore::new(0), Semaphore::new(0));
    let tmp = q.alloca(&[(&gate, 1)], &[(&s, 1)], 1000).unwrap();
    assert_eq!(tmp.len(), 1000);
    let e = tmp.write(0, &[1]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert!(e.message().contains("before its alloca ran"), "{e}");
    let mut early_bytes = [0u8; 8];
    assert_eq!(
        tmp.read(0, &mut early_bytes).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    // An unordered action that uses it before the alloca ran fails too.
    let mut fill = d.command_buffer().unwrap();
    fill.fill(&tmp, 0, 1000, &[7]).unwrap();
    fill.end().unwrap();
    let early = Semaphore::new(0);
    d.queue(1)
        .unwrap()
        .execute(&[], &[(&early, 1)], &[&fill])
        .unwrap();
    assert_eq!(
        early.wait(1, T).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    gate.signal(1).unwrap();
    s.wait(1, T).unwrap();
    let mut out = vec![0xFFu8; 1000];
    tmp.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0), "zeroed");
    // Ordered after the alloca: the fill runs.
    q.execute(&[(&s, 1)], &[(&s, 2)], &[&fill]).unwrap();
    s.wait(2, T).unwrap();
    tmp.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 7));
    q.dealloca(&[(&s, 2)], &[(&s, 3)], &tmp).unwrap();
    s.wait(3, T).unwrap();
    let e = tmp.read(0, &mut out).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert!(e.message().contains("after its dealloca ran"), "{e}");
    // Its dealloca ran: refused at the call, nothing submitted.
    let late = Semaphore::new(0);
    let e = q.execute(&[], &[(&late, 1)], &[&fill]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    assert_eq!(late.query().unwrap(), 0);
    // A second dealloca fails (its signal with it).
    let twice = Semaphore::new(0);
    q.dealloca(&[], &[(&twice, 1)], &tmp).unwrap();
    let e = twice.wait(1, T).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert!(e.message().contains("ran already"), "{e}");
}

// A dealloca that runs while an action still uses the buffer fails (its
// signals with it) and the buffer stays usable; a dealloca that runs
// before the alloca closes it for good (the alloca then fails). A
// dealloca of a buffer that is not this device's alloca is refused at the
// call. Mutation checked: `Hold::close` closing a held word: the
// dealloca's signal is reached and the test does not pass (it then hangs
// in the device's drop, the writer's give-back asserting on the closed
// word; loom's `a_close_never_closes_a_held_word` fails outright).
#[test]
fn dealloca_never_closes_a_buffer_in_use() {
    let d = device();
    let q = d.queue(0).unwrap();
    let s = Semaphore::new(0);
    let tmp = q.alloca(&[], &[(&s, 1)], 64).unwrap();
    s.wait(1, T).unwrap();
    let writer_done = Semaphore::new(0);
    let (gate, _entered) = a_writer_blocked_in_its_tile(&d, &tmp, 1, &writer_done);
    let refused = Semaphore::new(0);
    q.dealloca(&[], &[(&refused, 1)], &tmp).unwrap();
    let e = refused.wait(1, T).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert!(e.message().contains("still uses it"), "{e}");
    gate.send(()).unwrap();
    writer_done.wait(1, T).unwrap();
    let mut out = [0u8; 64];
    tmp.read(0, &mut out).unwrap();
    assert_eq!(out, [0xEE; 64], "still usable, the writer's bytes");
    q.dealloca(&[], &[(&s, 2)], &tmp).unwrap();
    s.wait(2, T).unwrap();

    // Dealloca before alloca.
    let (gate, order) = (Semaphore::new(0), Semaphore::new(0));
    let early = q.alloca(&[(&gate, 1)], &[(&order, 1)], 64).unwrap();
    q.dealloca(&[], &[(&order, 5)], &early).unwrap();
    gate.signal(1).unwrap();
    let e = order.wait(1, T).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    assert_eq!(
        early.write(0, &[1]).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );

    // Not an alloca'd buffer of this device.
    let plain = d.buffer(64).unwrap();
    let e = q.dealloca(&[], &[], &plain).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let other = device();
    let theirs = other.queue(0).unwrap().alloca(&[], &[], 64).unwrap();
    assert_eq!(
        q.dealloca(&[], &[], &theirs).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        q.alloca(&[], &[], 0).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

// A frame loop of alloca, a bound dispatch writing the new buffer through
// a binding table, a host read, dealloca: every frame's buffer is fresh
// (zeroed, then the frame's value), the memory recycled (a class of
// blocks reused across frames: the allocation test counts it), and an
// old handle kept past its dealloca never sees a later frame's bytes.
#[test]
fn alloca_frames_recycle_memory_and_old_handles_stay_closed() {
    let d = device();
    let q = d.queue(0).unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch_with(
        [4, 1, 1],
        &[Binding::slot_read(0), Binding::slot_write_chunks(1, 16)],
        |t: &Tile, io: &TileIo<'_>| {
            let frame: &[u32] = io.read(0)?;
            let out: &mut [u32] = io.chunk(1)?;
            out.fill(frame[0] + t.linear_id() as u32);
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    let input = d.buffer(4).unwrap();
    let s = Semaphore::new(0);
    let mut kept = Vec::new();
    for frame in 0..50u32 {
        let v = u64::from(frame) * 3;
        input.write(0, &frame.to_ne_bytes()).unwrap();
        let tmp = q.alloca(&[(&s, v)], &[(&s, v + 1)], 64).unwrap();
        q.execute_with(&[(&s, v + 1)], &[(&s, v + 2)], &[&cb], &[&input, &tmp])
            .unwrap();
        s.wait(v + 2, T).unwrap();
        let want: Vec<u32> = (0..16).map(|i| frame + i / 4).collect();
        assert_eq!(u32s(&tmp), want, "frame {frame}");
        q.dealloca(&[(&s, v + 2)], &[(&s, v + 3)], &tmp).unwrap();
        s.wait(v + 3, T).unwrap();
        if frame % 10 == 0 {
            kept.push(tmp); // kept past its dealloca
        }
    }
    let mut out = [0u8; 4];
    for old in &kept {
        assert_eq!(
            old.read(0, &mut out).unwrap_err().kind(),
            ErrorKind::FailedPrecondition
        );
    }
}
