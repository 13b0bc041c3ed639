//! Recording and submitting actions: command buffers recorded from their
//! plan, top-level actions submitted by their thread (host calls inline or
//! boxed, nested submissions through a captured queue, the dropper holding
//! the last handles), and the submitting threads of a round with their
//! timed waits and frames.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceline::{Binding, CommandBuffer, Device, Error, ErrorKind, Queue, Semaphore, Tile, TileIo};

use crate::faults::{Fault, Tracked};
use crate::frames::{run_frame, Frame, FrameCbs};
use crate::plan::{Body, CbPlan, CbUse, Cmd, BUF_LEN};
use crate::probes::{probe, Probe};
use crate::rng::{pause, Rng, Size};
use crate::world::{resolve_gate, ActionState, World};

/// Everything a nested submission needs, captured by its parent's call.
struct Nested {
    queue: Queue,
    waits: Vec<(Semaphore, u64)>,
    state: Arc<ActionState>,
    value: u64,
    kind: NestedKind,
    live: Arc<AtomicIsize>,
}

enum NestedKind {
    Barrier,
    EmptyExecute,
    Host(Option<Fault>),
}

impl Nested {
    fn submit(self) {
        let waits: Vec<(&Semaphore, u64)> = self.waits.iter().map(|(s, v)| (s, *v)).collect();
        let signals: Vec<(&Semaphore, u64)> =
            self.state.sems.iter().map(|s| (s, self.value)).collect();
        // Marked first: the submission may complete (and a waiter look)
        // before `host_call` returns.
        self.state.submitted.store(true, Ordering::SeqCst);
        let r = match self.kind {
            NestedKind::Barrier => self.queue.barrier(&waits, &signals),
            NestedKind::EmptyExecute => self.queue.execute(&waits, &signals, &[]),
            NestedKind::Host(fault) => {
                let state = self.state.clone();
                let tracked = Tracked::new(&self.live, false);
                self.queue.host_call(&waits, &signals, move || {
                    let _keep = &tracked;
                    state.runs.fetch_add(1, Ordering::SeqCst);
                    fault.map_or(Ok(()), Fault::raise)
                })
            }
        };
        if let Err(e) = r {
            *self.state.submit_error.lock().unwrap() = Some(e);
        }
    }
}

/// A host call's captures, when it needs more than the small closure.
struct HostCall {
    state: Arc<ActionState>,
    fault: Option<Fault>,
    sleep_us: u64,
    nested: Option<Nested>,
    handles: Option<(Device, Queue)>,
    pad: [u64; 8],
    /// Dropped last (by `run`, or with the call unrun), maybe panicking.
    tracked: Tracked,
}

impl HostCall {
    fn run(self) -> Result<(), Error> {
        let HostCall {
            state,
            fault,
            sleep_us,
            nested,
            handles,
            pad,
            tracked,
        } = self;
        std::hint::black_box(&pad);
        state.runs.fetch_add(1, Ordering::SeqCst);
        if sleep_us > 0 {
            std::thread::sleep(Duration::from_micros(sleep_us));
        }
        if let Some(n) = nested {
            n.submit();
        }
        // The device's last handles, when held, go here, inside its work.
        drop(handles);
        let result = fault.map_or(Ok(()), Fault::raise);
        drop(tracked); // may panic: the call then fails `Internal`
        result
    }
}

fn record(device: &Device, world: &World, id: usize, cb: &CbPlan) -> Result<CommandBuffer, Error> {
    let st = &world.actions[id];
    let bufs = st.bufs.as_ref().expect("an execute has buffers");
    let mut out = device.command_buffer()?;
    let mut drop_panic = cb.drop_panic;
    for stage in &cb.stages {
        for cmd in stage {
            match cmd {
                Cmd::Fill {
                    buf,
                    offset,
                    len,
                    pattern,
                } => out.fill(&bufs[*buf], *offset, *len, pattern)?,
                Cmd::Update { buf, offset, data } => out.update(data, &bufs[*buf], *offset)?,
                Cmd::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    len,
                } => out.copy(&bufs[*src], *src_offset, &bufs[*dst], *dst_offset, *len)?,
                Cmd::Dispatch { grid, fault } => {
                    let (state, fault, [x, y, _]) = (st.clone(), *fault, *grid);
                    let tracked = Tracked::new(&world.live, std::mem::take(&mut drop_panic));
                    let tile = move |t: &Tile| {
                        let _keep = &tracked;
                        let [i, j, k] = t.workgroup_id.map(u64::from);
                        let index = i + u64::from(x) * (j + u64::from(y) * k);
                        state.tiles.fetch_add(1, Ordering::SeqCst);
                        state.tile_sum.fetch_add(index + 1, Ordering::SeqCst);
                        match fault {
                            Some((at, f)) if at == index => f.raise(),
                            _ => Ok(()),
                        }
                    };
                    // In a stage of dispatches only, the dispatch reads both
                    // of the action's buffers through bindings (its tiles
                    // then run under the action's shared holds, beside the
                    // stage's other readers); elsewhere (a stage that
                    // writes a buffer) it binds nothing.
                    if stage.iter().all(|c| matches!(c, Cmd::Dispatch { .. })) {
                        out.dispatch_with(
                            *grid,
                            &[Binding::read(&bufs[0]), Binding::read(&bufs[1])],
                            move |t: &Tile, io: &TileIo<'_>| {
                                if io.read::<u8>(0)?.len() != BUF_LEN
                                    || io.read::<u8>(1)?.len() != BUF_LEN
                                {
                                    return Err(Error::new(
                                        ErrorKind::Internal,
                                        "a binding's length",
                                    ));
                                }
                                tile(t)
                            },
                        )?;
                    } else {
                        out.dispatch(*grid, tile)?;
                    }
                }
            }
        }
        out.barrier()?;
    }
    out.end()?;
    Ok(out)
}

/// Submits top-level action `id` (a submitting thread, or the test thread
/// for the dropper, which then takes the last device handles).
pub(crate) fn submit(
    world: &World,
    device: Option<&Device>,
    queues: &[Queue],
    id: usize,
    shared: &CommandBuffer,
    handles: Option<(Device, Queue)>,
    rng: &mut Rng,
) {
    let a = &world.plan.actions[id];
    let st = &world.actions[id];
    let waits_owned = world.waits(a);
    let waits: Vec<(&Semaphore, u64)> = waits_owned.iter().map(|(s, v)| (s, *v)).collect();
    let signals: Vec<(&Semaphore, u64)> = st.sems.iter().map(|s| (s, a.value)).collect();
    let queue = &queues[a.queue];
    st.submitted.store(true, Ordering::SeqCst);
    let r = match &a.body {
        Body::Barrier => queue.barrier(&waits, &signals),
        Body::EmptyExecute => queue.execute(&waits, &signals, &[]),
        Body::Host {
            fault,
            drop_panic,
            sleep_us,
            nested,
            large,
            drops_device,
        } => {
            assert_eq!(
                *drops_device,
                handles.is_some(),
                "{id}: the dropper holds the handles"
            );
            let nested = nested.map(|n| {
                let child = &world.plan.actions[n];
                Nested {
                    queue: queues[child.queue].clone(),
                    waits: world.waits(child),
                    state: world.actions[n].clone(),
                    value: child.value,
                    kind: match &child.body {
                        Body::Barrier => NestedKind::Barrier,
                        Body::EmptyExecute => NestedKind::EmptyExecute,
                        Body::Host { fault, .. } => NestedKind::Host(*fault),
                        Body::Execute { .. } => unreachable!("nested actions are small"),
                    },
                    live: world.live.clone(),
                }
            });
            let tracked = Tracked::new(&world.live, *drop_panic);
            if nested.is_none() && handles.is_none() && !large {
                // Small enough to be stored inline.
                let (state, fault) = (st.clone(), *fault);
                queue.host_call(&waits, &signals, move || {
                    let _keep = &tracked;
                    state.runs.fetch_add(1, Ordering::SeqCst);
                    fault.map_or(Ok(()), Fault::raise)
                })
            } else {
                let call = HostCall {
                    state: st.clone(),
                    fault: *fault,
                    sleep_us: *sleep_us,
                    nested,
                    handles,
                    pad: [rng.next(); 8],
                    tracked,
                };
                queue.host_call(&waits, &signals, move || call.run())
            }
        }
        Body::Execute { cbs, uses } => {
            let device = device.expect("executes are submitted with the device at hand");
            let recorded: Vec<CommandBuffer> = cbs
                .iter()
                .map(|cb| record(device, world, id, cb).expect("a valid recording"))
                .collect();
            let list: Vec<&CommandBuffer> = uses
                .iter()
                .map(|u| match u {
                    CbUse::Own(i) => &recorded[*i],
                    CbUse::Shared => shared,
                })
                .collect();
            let r = queue.execute(&waits, &signals, &list);
            drop(list);
            // Freeing the recordings here (if the action is done with them)
            // may run a capture's panicking `Drop`: not fenceline's affair.
            let _ = catch_unwind(AssertUnwindSafe(|| drop(recorded)));
            r
        }
    };
    if let Err(e) = r {
        panic!("submitting action {id} failed: {e}");
    }
}

/// Runs the submitting threads, each submitting its top-level actions in
/// plan order (with timed waits and frames between them), beside a thread
/// that resolves the early gates in random order. On return every frame
/// and every top-level action but the dropper is submitted, and every early
/// gate resolved; work waiting on a late gate is still pending. The probes
/// and frames are returned for the settling and the checks.
pub(crate) fn submit_all(
    rng: &mut Rng,
    size: &Size,
    world: &World,
    device: &Device,
    queues: &[Queue],
    shared: &CommandBuffer,
    frame_cbs: &FrameCbs,
) -> (Vec<Probe>, Vec<Frame>) {
    let max_sleep = size.max_sleep_us;
    let mut probes: Vec<Probe> = Vec::new();
    let mut frames: Vec<Frame> = Vec::new();
    std::thread::scope(|s| {
        let mut early: Vec<usize> = (0..world.plan.gates.len())
            .filter(|&g| !world.plan.gates[g].late)
            .collect();
        let mut grng = rng.fork();
        s.spawn(move || {
            while !early.is_empty() {
                let g = early.swap_remove(grng.below(early.len()));
                pause(&mut grng, max_sleep);
                resolve_gate(world, g);
            }
        });
        let submitters: Vec<_> = world
            .plan
            .threads
            .iter()
            .map(|ids| {
                let mut trng = rng.fork();
                s.spawn(move || {
                    let (mut probes, mut frames) = (Vec::new(), Vec::new());
                    for &id in ids {
                        pause(&mut trng, max_sleep);
                        if trng.percent(25) {
                            probes.push(probe(&mut trng, world));
                        }
                        submit(world, Some(device), queues, id, shared, None, &mut trng);
                        if trng.percent(20) {
                            frames.push(run_frame(world, device, queues, frame_cbs, &mut trng));
                        }
                    }
                    (probes, frames)
                })
            })
            .collect();
        for t in submitters {
            match t.join() {
                Ok((p, f)) => {
                    probes.extend(p);
                    frames.extend(f);
                }
                Err(panic) => resume_unwind(panic),
            }
        }
    });
    (probes, frames)
}
