//! `dispatch`: a closure over a 3-D tile grid, split into shards that claim
//! ranges of tiles from one atomic counter.

use std::marker::PhantomData;
use std::ptr::NonNull;

use super::{new_task, Kind};
use crate::error::{Error, ErrorKind};
use crate::small_box::SmallBox;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::task::context::TaskContext;
use crate::task::header::{Outcome, Task, FLAG_FAILED, PAYLOAD};
use crate::task::tile_counter::TileCounter;
use crate::task::Tile;
use crate::unwind::guarded;

/// A dispatch's payload: the tile closure (in the task block when it fits
/// there, [`DISPATCH_INLINE_BYTES`], boxed otherwise) and the grid.
#[repr(C)]
pub(crate) struct DispatchPayload<F> {
    f: SmallBox<F, DISPATCH_INLINE_BYTES>,
    grid: Grid,
}

/// What a dispatch's shards share besides the closure.
#[repr(C)]
struct Grid {
    size: [u32; 3],
    tiles: TileCounter,
    stop: AtomicBool,
}

/// Bytes of captured state a dispatch keeps in its task block: the
/// payload less the grid, rounded down to the closure's alignment unit.
pub const DISPATCH_INLINE_BYTES: usize = (PAYLOAD - std::mem::size_of::<Grid>()) / 16 * 16;

impl<F> DispatchPayload<F> {
    /// A dispatch of `f` over `grid`, of `total` tiles (`tile_count`).
    pub(crate) fn new(grid: [u32; 3], total: u64, f: F) -> Self {
        DispatchPayload {
            f: SmallBox::new(f),
            grid: Grid {
                size: grid,
                tiles: TileCounter::new(total, 1, 1),
                stop: AtomicBool::new(false),
            },
        }
    }
}

/// A shard of a dispatch of `F`: claims and runs tiles of its dispatch.
struct ShardPayload<F> {
    dispatch: NonNull<Task>,
    _dispatch_kind: PhantomData<fn() -> F>,
}

impl<F> Kind for DispatchPayload<F>
where
    F: Tiles,
{
    const NAME: &'static str = "dispatch";

    unsafe fn run(task: NonNull<Task>, tasks: &mut TaskContext) -> Outcome {
        // SAFETY: ours while running.
        let t = unsafe { task.as_ref() };
        // SAFETY: the payload is a `DispatchPayload<F>`.
        let p = unsafe { &mut (*Task::payload_ptr::<DispatchPayload<F>>(task)).grid };
        let total = p.tiles.total();
        // With priority levels, a shard stops claiming tiles while a
        // higher-priority task waits (`claim_and_run`); the tiles it left
        // run in a later phase of this task.
        let priority = t.priority;
        let watch = tasks.watches(priority);
        let workers = tasks.workers() as u64;
        if t.runs.get() == 1 {
            if total == 0 {
                return Outcome::Done(Ok(()));
            }
            if workers.min(total) == 1 && !watch {
                // One shard would run every tile on this worker anyway (one
                // tile, or one worker): run them here, with no shard task
                // and none of its counts (five read-modify-writes and a
                // second run of this task saved).
                // SAFETY: the payload is a `DispatchPayload<F>`; `f` is
                // another field than the grid borrowed above.
                let f = unsafe { &(*Task::payload_ptr::<DispatchPayload<F>>(task)).f }.get();
                return Outcome::Done(guarded(|| f.run(p.size, 0, total)));
            }
            // Watching for higher-priority work, shards claim one tile at
            // a time: such work waits at most one tile of each worker.
            let max = if watch { 1 } else { 1024 };
            p.tiles = TileCounter::new(total, max, workers.min(total).max(1) * 2);
        } else if p.tiles.left() == 0 || p.stop.load(Ordering::Relaxed) {
            // A later run: every shard finished (a failed one marks us
            // FLAG_FAILED and we are skipped instead), and no tile is
            // left (no shard yielded).
            return Outcome::Done(Ok(()));
        }
        // A phase: shards for the tiles left, this task the first of them.
        let shards = workers.min(p.tiles.left()).max(1);
        // From here on the grid is shared with the shards: shared
        // references only.
        // SAFETY: the payload is a `DispatchPayload<F>`, alive while this
        // task is (and it outlives every shard, which counts toward it).
        let DispatchPayload { f, grid: p } = unsafe { t.payload::<DispatchPayload<F>>() };
        // Held while adding shards and running tiles here. This task is the
        // first shard itself: one shard task fewer (its block, counts and
        // deque trip), and this worker starts on tiles at once.
        t.unfinished.set(1);
        for _ in 1..shards {
            let shard = match new_task(tasks.cache(), t.scope, priority, || ShardPayload::<F> {
                dispatch: task,
                _dispatch_kind: PhantomData,
            }) {
                Ok(s) => s,
                Err(e) => {
                    // SAFETY: the task keeps its scope alive.
                    unsafe { t.scope.as_ref() }.record(e);
                    t.mark_failed();
                    p.stop.store(true, Ordering::Relaxed);
                    break;
                }
            };
            // SAFETY: just created, ours.
            unsafe { shard.as_ref() }.completion_task.set(Some(task));
            t.add_unfinished();
            // SAFETY: the dispatch keeps its scope alive and non-idle.
            unsafe { t.scope.as_ref() }.enter_from_task();
            tasks.spawn(shard);
        }
        // The other workers hear of the shards before this one runs tiles
        // (user code, which may block).
        tasks.publish();
        let ctx = &*tasks;
        if let Err(e) = claim_and_run(f.get(), p, || watch && ctx.outranked(priority)) {
            // Counted like a failed shard: the scope keeps the error and
            // the dispatch, once the shards are done, fails.
            // SAFETY: the task keeps its scope alive.
            unsafe { t.scope.as_ref() }.record(e);
            t.mark_failed();
        }
        if t.finish_one() {
            // Every shard is done (or none was made): the dispatch is done
            // now, failed if a shard (or this one) failed, with no later
            // run; or, if they yielded with tiles left, it waits behind
            // the higher-priority work for its next phase.
            // Acquire: pairs with no Release (`mark_failed` is Relaxed):
            // the shards' marks are ordered before by `finish_one`'s AcqRel.
            if t.flags.load(Ordering::Acquire) & FLAG_FAILED != 0 {
                return Outcome::Done(Err(Error::new(
                    ErrorKind::Aborted,
                    "a dispatch shard failed",
                )));
            }
            if p.tiles.left() == 0 || p.stop.load(Ordering::Relaxed) {
                return Outcome::Done(Ok(()));
            }
            // Made ready again here, by us: nothing below touches it (a
            // worker may take it at once).
            tasks.push(task);
            return Outcome::Suspended;
        }
        // The last shard to finish makes this task ready again: its next
        // run completes it (or, if one failed, it is skipped), or starts
        // the next phase if they yielded.
        Outcome::Suspended
    }
}

/// Claims and runs ranges of the dispatch's tiles until none is left, one
/// fails (which stops the others), or, after a range, `outranked` says a
/// higher-priority task waits (the tiles left run in a later phase).
fn claim_and_run<F: Tiles>(f: &F, p: &Grid, outranked: impl Fn() -> bool) -> Result<(), Error> {
    // One trace span per shard, not per range (a dispatch claims its tiles
    // in many small ranges: 2 tiles each in the demo's 64-tile stages):
    // the ranges it claimed, its first tile and the tiles it ran.
    let (t, mut ranges, mut first, mut tiles) = (crate::trace::now(), 0u64, u64::MAX, 0u64);
    let r = loop {
        if p.stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        let Some((start, end)) = p.tiles.claim() else {
            break Ok(());
        };
        (ranges, first, tiles) = (ranges + 1, first.min(start), tiles + (end - start));
        if let Err(e) = guarded(|| f.run(p.size, start, end)) {
            p.stop.store(true, Ordering::Relaxed);
            break Err(e);
        }
        if outranked() {
            break Ok(());
        }
    };
    crate::trace::span(crate::trace::Kind::Tiles, t, ranges, first, tiles);
    r
}

impl<F> Kind for ShardPayload<F>
where
    F: Tiles,
{
    const NAME: &'static str = "dispatch shard";

    unsafe fn run(task: NonNull<Task>, tasks: &mut TaskContext) -> Outcome {
        // SAFETY: the calling worker owns the task (`run`'s contract).
        let shard = unsafe { task.as_ref() };
        // SAFETY: the payload is a `ShardPayload` whose dispatch is suspended
        // (alive) until every shard retired.
        let dispatch = unsafe { shard.payload::<ShardPayload<F>>() }.dispatch;
        // SAFETY: the dispatch is suspended (alive) until every shard
        // retired.
        let dispatch = unsafe { dispatch.as_ref() };
        // SAFETY: its payload is a `DispatchPayload`; shards only read it
        // and use its atomics.
        let DispatchPayload { f, grid: p } = unsafe { dispatch.payload::<DispatchPayload<F>>() };
        let priority = Task::priority(task);
        let watch = tasks.watches(priority);
        let ctx = &*tasks;
        Outcome::Done(claim_and_run(f.get(), p, || {
            watch && ctx.outranked(priority)
        }))
    }
}

/// What a dispatch runs: a range of tiles at a time, so the per-tile loop
/// is compiled with the tile closure (inlined into it) and a shard pays at
/// most one indirect call per claimed range, never per tile.
pub(crate) trait Tiles: Send + Sync + 'static {
    /// Runs tiles `start..end` (linear indices, x fastest) of `grid`,
    /// stopping at the first error.
    fn run(&self, grid: [u32; 3], start: u64, end: u64) -> Result<(), Error>;
}

impl<F> Tiles for F
where
    F: Fn(&Tile) -> Result<(), Error> + Send + Sync + 'static,
{
    #[inline]
    fn run(&self, grid: [u32; 3], start: u64, end: u64) -> Result<(), Error> {
        run_tiles(self, grid, start, end)
    }
}

/// Runs `f` over tiles `start..end` of `grid`: one division per range,
/// then the tile id counts x, y, z up.
#[inline]
pub(crate) fn run_tiles<F>(f: &F, grid: [u32; 3], start: u64, end: u64) -> Result<(), Error>
where
    F: Fn(&Tile) -> Result<(), Error> + ?Sized,
{
    let (x, y) = (u64::from(grid[0]), u64::from(grid[1]));
    let mut tile = Tile {
        workgroup_id: [
            (start % x) as u32,
            (start / x % y) as u32,
            (start / (x * y)) as u32,
        ],
        workgroup_count: grid,
    };
    for _ in start..end {
        f(&tile)?;
        let id = &mut tile.workgroup_id;
        id[0] += 1;
        if id[0] == grid[0] {
            id[0] = 0;
            id[1] += 1;
            if id[1] == grid[1] {
                id[1] = 0;
                id[2] += 1;
            }
        }
    }
    Ok(())
}
