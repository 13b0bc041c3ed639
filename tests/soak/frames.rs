//! Transient frames: alloca, write, read, dealloca, a use after the
//! dealloca. Submitters run them between their actions, through two
//! recordings shared by every thread and bound per submission through
//! binding tables; each frame is then settled and checked.

use fenceline::{
    Binding, Buffer, CommandBuffer, Device, ErrorKind, Queue, Semaphore, Tile, TileIo,
};

use crate::checks::Stats;
use crate::plan::RoundKind;
use crate::rng::{Rng, WAIT_LIMIT};
use crate::world::{state, World};

/// Bytes each tile of a frame writes to its transient memory.
const FRAME_CHUNK: usize = 16;

/// Word `k` of tile `i`'s chunk of a frame's transient memory.
fn frame_word(i: usize, k: usize) -> u32 {
    (i as u32).wrapping_mul(0x9E37_79B9) ^ (k as u32 + 1)
}

/// What the reading dispatch writes for tile `i`.
fn frame_out(i: usize) -> u32 {
    (0..FRAME_CHUNK / 4).fold(0u32, |a, k| a.wrapping_add(frame_word(i, k))) ^ 0x5A5A_5A5A
}

/// The two recordings every frame of a round runs, on its own buffers.
pub(crate) struct FrameCbs {
    tiles: u32,
    /// Slot 0: the transient memory, written in chunks.
    write: CommandBuffer,
    /// Slot 0: the transient memory, read; slot 1: `out`, one `u32` a tile.
    read: CommandBuffer,
}

pub(crate) fn frame_cbs(device: &Device, tiles: u32) -> FrameCbs {
    let mut write = device.command_buffer().expect("a command buffer");
    write
        .dispatch_with(
            [tiles, 1, 1],
            &[Binding::slot_write_chunks(0, FRAME_CHUNK)],
            |t: &Tile, io: &TileIo<'_>| {
                let i = t.linear_id() as usize;
                for (k, w) in io.chunk::<u32>(0)?.iter_mut().enumerate() {
                    *w = frame_word(i, k);
                }
                Ok(())
            },
        )
        .unwrap();
    write.end().unwrap();
    let mut read = device.command_buffer().expect("a command buffer");
    read.dispatch_with(
        [tiles, 1, 1],
        &[Binding::slot_read(0), Binding::slot_write_chunks(1, 4)],
        |t: &Tile, io: &TileIo<'_>| {
            let i = t.linear_id() as usize;
            let words = &io.read::<u32>(0)?[i * FRAME_CHUNK / 4..][..FRAME_CHUNK / 4];
            io.chunk::<u32>(1)?[0] =
                words.iter().fold(0u32, |a, w| a.wrapping_add(*w)) ^ 0x5A5A_5A5A;
            Ok(())
        },
    )
    .unwrap();
    read.end().unwrap();
    FrameCbs { tiles, write, read }
}

/// A transient frame a submitter ran: `sem` reaches 1 when the alloca ran,
/// 2 and 3 after the writing and reading dispatches, 4 after the
/// dealloca; `late` is the use after the dealloca's signal (it never
/// signals).
pub(crate) struct Frame {
    /// The gate the alloca waited on, if any.
    gate: Option<usize>,
    sem: Semaphore,
    late: Semaphore,
    tmp: Buffer,
    out: Buffer,
}

pub(crate) fn run_frame(
    world: &World,
    device: &Device,
    queues: &[Queue],
    cbs: &FrameCbs,
    rng: &mut Rng,
) -> Frame {
    let gate = rng.percent(50).then(|| rng.below(world.gates.len()));
    let (sem, late) = (Semaphore::new(0), Semaphore::new(0));
    let tiles = cbs.tiles as usize;
    let out = device.buffer(tiles * 4).expect("a buffer");
    let mut q = || &queues[rng.below(queues.len())];
    let waits: Vec<(&Semaphore, u64)> = gate.iter().map(|&g| (&world.gates[g], 1)).collect();
    let tmp = q()
        .alloca(&waits, &[(&sem, 1)], tiles * FRAME_CHUNK)
        .expect("an alloca");
    q().execute_with(&[(&sem, 1)], &[(&sem, 2)], &[&cbs.write], &[&tmp])
        .expect("a frame's write");
    q().execute_with(&[(&sem, 2)], &[(&sem, 3)], &[&cbs.read], &[&tmp, &out])
        .expect("a frame's read");
    q().dealloca(&[(&sem, 3)], &[(&sem, 4)], &tmp)
        .expect("a dealloca");
    // A use after the dealloca: refused at the call if the dealloca ran
    // already, else when it runs; either way `late` carries the refusal.
    if let Err(e) = q().execute_with(&[(&sem, 4)], &[(&late, 1)], &[&cbs.write], &[&tmp]) {
        assert_eq!(
            e.kind(),
            ErrorKind::FailedPrecondition,
            "a use after the dealloca: {e}"
        );
        late.fail(e);
    }
    Frame {
        gate,
        sem,
        late,
        tmp,
        out,
    }
}

/// Checks a settled frame: either it ran to its dealloca (then `out`
/// holds what the reading dispatch computed from what the writing one
/// wrote, and the memory is refused to the host and to the late use), or
/// it failed with its gate's kind (or `Cancelled` in a round that dropped
/// the device) and the late use failed with it.
///
/// Checked against a mutation: with the dealloca not closing the buffer's
/// hold word (`work::dealloca_ran` returning `Ok` without `close`), the
/// first round fails ("the use after the dealloca was not refused").
pub(crate) fn check_frame(ctx: &str, world: &World, f: &Frame, stats: &mut Stats) {
    let cancel_ok = world.plan.kind != RoundKind::Normal;
    let gate_kind = f.gate.and_then(|g| world.plan.gates[g].fail);
    let allowed = |k: ErrorKind| Some(k) == gate_kind || (cancel_ok && k == ErrorKind::Cancelled);
    let (seen, late) = (state(&f.sem), state(&f.late));
    let here = format!(
        "{ctx}: frame (gate {:?} failing with {gate_kind:?}, {:?} round): {seen:?}, \
         late use {late:?}",
        f.gate, world.plan.kind
    );
    stats.frames += 1;
    match seen {
        Ok(4) => {
            stats.frames_done += 1;
            // The use after the dealloca: refused (a dropped device may
            // have cancelled it first).
            assert!(
                late == Err(ErrorKind::FailedPrecondition)
                    || (cancel_ok && late == Err(ErrorKind::Cancelled)),
                "{here}: the use after the dealloca was not refused"
            );
            let mut out = vec![0u8; f.out.len()];
            f.out.read(0, &mut out).expect("the frame's output");
            for (i, w) in out.chunks_exact(4).enumerate() {
                let w = u32::from_ne_bytes(w.try_into().unwrap());
                assert_eq!(w, frame_out(i), "{here}: tile {i}'s output");
            }
            let mut one = [0u8; 1];
            assert_eq!(
                f.tmp.read(0, &mut one).map_err(|e| e.kind()),
                Err(ErrorKind::FailedPrecondition),
                "{here}: a host read of the memory after its dealloca"
            );
        }
        Ok(v) => panic!("{here}: stopped at {v} without failing"),
        Err(k) => {
            assert!(allowed(k), "{here}: failed with a kind it may not carry");
            assert!(late.is_err(), "{here}: the late use signalled");
        }
    }
}

/// Waits until every frame finished or failed (a hang fails the test).
pub(crate) fn settle_frames(ctx: &str, frames: &[Frame]) {
    for f in frames {
        for (s, v) in [(&f.sem, 4), (&f.late, 1)] {
            if let Err(e) = s.wait(v, WAIT_LIMIT) {
                assert_ne!(
                    e.kind(),
                    ErrorKind::DeadlineExceeded,
                    "{ctx}: a frame neither finished nor failed after {WAIT_LIMIT:?} (hang)"
                );
            }
        }
    }
}
