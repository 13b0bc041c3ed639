//! A round's live state: every action's semaphores, counters and buffers,
//! the gates, the count of live captures, and the shared command buffer's
//! counters; then setting a round up (drawing its plan, building the
//! device, its queues and the shared recordings) and resolving its gates.

use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use fenceline::{
    Binding, Buffer, CommandBuffer, CpuConfig, Device, Error, ErrorKind, Queue, Semaphore, Tile,
    TileIo,
};

use crate::faults::Tracked;
use crate::frames::{frame_cbs, FrameCbs};
use crate::plan::{ActionPlan, Body, Plan, Src, BUF_LEN};
use crate::rng::{Rng, Size};
use crate::PLAN;

pub(crate) struct ActionState {
    pub(crate) sems: Vec<Semaphore>,
    /// Host-call bodies run.
    pub(crate) runs: AtomicUsize,
    /// Own dispatch tiles run, and the sum of their (index + 1).
    pub(crate) tiles: AtomicU64,
    pub(crate) tile_sum: AtomicU64,
    /// Submitted (set before the submitter can learn the outcome).
    pub(crate) submitted: AtomicBool,
    /// A nested submission's error, if any (it must not fail).
    pub(crate) submit_error: Mutex<Option<Error>>,
    /// Two buffers, for executes.
    pub(crate) bufs: Option<[Buffer; 2]>,
}

pub(crate) struct World {
    pub(crate) plan: Plan,
    pub(crate) gates: Vec<Semaphore>,
    pub(crate) actions: Vec<Arc<ActionState>>,
    /// Captures not dropped yet.
    pub(crate) live: Arc<AtomicIsize>,
    pub(crate) shared_tiles: Arc<AtomicU64>,
    pub(crate) shared_tile_sum: Arc<AtomicU64>,
    pub(crate) shared_buf: Buffer,
}

impl World {
    pub(crate) fn sem(&self, src: Src) -> &Semaphore {
        match src {
            Src::Gate(g) => &self.gates[g],
            Src::Action { id, sem } => &self.actions[id].sems[sem],
        }
    }

    pub(crate) fn waits(&self, a: &ActionPlan) -> Vec<(Semaphore, u64)> {
        a.deps
            .iter()
            .map(|d| (self.sem(d.src).clone(), d.value))
            .collect()
    }
}

/// Final state of a semaphore: its value, or its failure's kind.
pub(crate) fn state(s: &Semaphore) -> Result<u64, ErrorKind> {
    s.query().map_err(|e| e.kind())
}

pub(crate) fn resolve_gate(world: &World, g: usize) {
    let gate = &world.gates[g];
    match world.plan.gates[g].fail {
        Some(kind) => gate.fail(Error::new(kind, "gate failed by the soak")),
        None => gate.signal(1).expect("a gate is signalled once"),
    }
}

/// What `set_up` builds for the later phases.
pub(crate) struct Setup {
    pub(crate) device: Device,
    pub(crate) queues: Vec<Queue>,
    pub(crate) world: World,
    /// The command buffer every submitting thread shares.
    pub(crate) shared: CommandBuffer,
    pub(crate) frame_cbs: FrameCbs,
}

/// Draws the round's plan and builds what it runs on: the device and its
/// queues, every action's semaphores and buffers, the shared command buffer
/// and the frames' recordings. Nothing is submitted yet, and the plan is
/// recorded for a hang's message.
pub(crate) fn set_up(rng: &mut Rng, size: &Size, round_no: usize) -> Setup {
    let plan = Plan::new(rng, size, round_no);
    let device = Device::cpu_with(CpuConfig {
        workers: plan.workers,
        queues: plan.queues,
        spin: plan.spin,
    })
    .expect("a CPU device");
    let queues: Vec<Queue> = (0..plan.queues)
        .map(|i| device.queue(i).expect("a queue"))
        .collect();
    let live = Arc::new(AtomicIsize::new(0));
    let actions = plan
        .actions
        .iter()
        .map(|a| {
            Arc::new(ActionState {
                sems: (0..a.signals).map(|_| Semaphore::new(0)).collect(),
                runs: AtomicUsize::new(0),
                tiles: AtomicU64::new(0),
                tile_sum: AtomicU64::new(0),
                submitted: AtomicBool::new(false),
                submit_error: Mutex::new(None),
                bufs: matches!(a.body, Body::Execute { .. }).then(|| {
                    [
                        device.buffer(BUF_LEN).expect("a buffer"),
                        device.buffer(BUF_LEN).expect("a buffer"),
                    ]
                }),
            })
        })
        .collect();
    let world = World {
        gates: (0..plan.gates.len()).map(|_| Semaphore::new(0)).collect(),
        actions,
        live,
        shared_tiles: Arc::new(AtomicU64::new(0)),
        shared_tile_sum: Arc::new(AtomicU64::new(0)),
        shared_buf: device.buffer(16).expect("a buffer"),
        plan,
    };
    let shared = shared_command_buffer(&device, &world);
    let frame_cbs = frame_cbs(&device, 1 + rng.below(2 * size.max_grid as usize) as u32);
    *PLAN.lock().unwrap_or_else(|p| p.into_inner()) = format!("{:?}", world.plan);
    Setup {
        device,
        queues,
        world,
        shared,
        frame_cbs,
    }
}

/// One command buffer every thread submits, concurrently: a dispatch
/// counting its tiles by index, then one reading the shared buffer.
fn shared_command_buffer(device: &Device, world: &World) -> CommandBuffer {
    let mut shared = device.command_buffer().expect("a command buffer");
    let (count, sum, [x, y, _]) = (
        world.shared_tiles.clone(),
        world.shared_tile_sum.clone(),
        world.plan.shared_grid,
    );
    let tracked = Tracked::new(&world.live, false);
    shared
        .dispatch(world.plan.shared_grid, move |t: &Tile| {
            let _keep = &tracked;
            let [i, j, k] = t.workgroup_id.map(u64::from);
            count.fetch_add(1, Ordering::SeqCst);
            sum.fetch_add(
                i + u64::from(x) * (j + u64::from(y) * k) + 1,
                Ordering::SeqCst,
            );
            Ok(())
        })
        .unwrap();
    shared.barrier().unwrap();
    // Every run reads the shared buffer through a binding: unordered
    // runs on every thread read it at once (readers share its hold).
    world.shared_buf.write(0, &[0xA5; 16]).unwrap();
    shared
        .dispatch_with(
            [1, 1, 1],
            &[Binding::read(&world.shared_buf)],
            |_: &Tile, io: &TileIo<'_>| {
                if io.read::<u8>(0)? != [0xA5; 16] {
                    return Err(Error::new(ErrorKind::Internal, "the shared buffer changed"));
                }
                Ok(())
            },
        )
        .unwrap();
    shared.end().unwrap();
    shared
}
