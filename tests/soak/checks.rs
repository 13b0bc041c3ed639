//! The checks of a settled round against its plan: the gates, every
//! action (its states, runs, tiles and buffer contents, computed from the
//! plan), the shared command buffer's runs, the timed waits and the frames;
//! and what the rounds exercised.

use std::sync::atomic::Ordering;

use fenceline::ErrorKind;

use crate::frames::{check_frame, Frame};
use crate::plan::{tile_sum, tiles, ActionPlan, Body, CbPlan, CbUse, Cmd, RoundKind, BUF_LEN};
use crate::probes::{check_probe, Probe};
use crate::world::{state, ActionState, World};

/// What the rounds exercised (printed in long or verbose runs).
#[derive(Default, Debug)]
pub(crate) struct Stats {
    pub(crate) rounds: [usize; 3],
    pub(crate) actions: usize,
    pub(crate) signalled: usize,
    pub(crate) own_faults: usize,
    pub(crate) failed_waits: usize,
    pub(crate) cancelled: usize,
    pub(crate) never_submitted: usize,
    pub(crate) host_runs: usize,
    pub(crate) nested: usize,
    pub(crate) tiles: u64,
    pub(crate) probes: usize,
    pub(crate) probes_timed_out: usize,
    pub(crate) frames: usize,
    pub(crate) frames_done: usize,
}

impl Stats {
    pub(crate) fn add(&mut self, o: &Stats) {
        for (a, b) in self.rounds.iter_mut().zip(o.rounds) {
            *a += b;
        }
        self.actions += o.actions;
        self.signalled += o.signalled;
        self.own_faults += o.own_faults;
        self.failed_waits += o.failed_waits;
        self.cancelled += o.cancelled;
        self.never_submitted += o.never_submitted;
        self.host_runs += o.host_runs;
        self.nested += o.nested;
        self.tiles += o.tiles;
        self.probes += o.probes;
        self.probes_timed_out += o.probes_timed_out;
        self.frames += o.frames;
        self.frames_done += o.frames_done;
    }
}

/// What the test saw of one action.
#[derive(Debug)]
struct Seen {
    states: Vec<Result<u64, ErrorKind>>,
    runs: usize,
    tiles: u64,
    tile_sum: u64,
    submitted: bool,
}

/// Checks the settled round against its plan: the gates, every action, the
/// shared command buffer's runs, the timed waits, then the frames.
pub(crate) fn check(ctx: &str, world: &World, probes: &[Probe], frames: &[Frame]) -> Stats {
    let plan = &world.plan;
    let mut stats = Stats::default();
    stats.rounds[plan.kind as usize] = 1;
    stats.probes = probes.len();
    stats.probes_timed_out = probes
        .iter()
        .filter(|p| {
            p.result
                .as_ref()
                .is_err_and(|e| e.kind() == ErrorKind::DeadlineExceeded)
        })
        .count();
    for (g, p) in plan.gates.iter().enumerate() {
        let expect = match p.fail {
            Some(k) => Err(k),
            None => Ok(1),
        };
        assert_eq!(state(&world.gates[g]), expect, "{ctx}: gate {g}");
    }
    let mut shared_runs = 0u64;
    for (a, st) in plan.actions.iter().zip(&world.actions) {
        shared_runs += check_action(ctx, world, a, st, &mut stats);
    }
    check_shared(ctx, world, shared_runs);
    for p in probes {
        check_probe(ctx, world, p);
    }
    for f in frames {
        check_frame(ctx, world, f, &mut stats);
    }
    stats
}

/// Checks one settled action against its plan: never submitted only under
/// a parent that never ran; with a failed wait (or cancelled), failed with
/// a kind it may carry and ran nothing; otherwise its body ran once and it
/// signalled (every tile ran once, its buffers hold what the plan wrote) or
/// failed with its own fault. Returns the runs of the shared command buffer
/// it made whole.
fn check_action(
    ctx: &str,
    world: &World,
    a: &ActionPlan,
    st: &ActionState,
    stats: &mut Stats,
) -> u64 {
    let plan = &world.plan;
    let cancel_ok = plan.kind != RoundKind::Normal;
    let mut shared_runs = 0u64;
    let seen = Seen {
        states: st.sems.iter().map(state).collect(),
        runs: st.runs.load(Ordering::SeqCst),
        tiles: st.tiles.load(Ordering::SeqCst),
        tile_sum: st.tile_sum.load(Ordering::SeqCst),
        submitted: st.submitted.load(Ordering::SeqCst),
    };
    let here = || format!("{ctx}: action {}: {seen:?}\nplan: {a:?}\n{plan:?}", a.id);
    stats.actions += 1;
    stats.host_runs += seen.runs;
    stats.tiles += seen.tiles;
    stats.nested += usize::from(a.parent.is_some() && seen.submitted);
    match seen.states[0] {
        Ok(_) => stats.signalled += 1,
        Err(ErrorKind::Cancelled) => stats.cancelled += 1,
        Err(_) => {}
    }
    if let Some(e) = st.submit_error.lock().unwrap().take() {
        panic!("{}\nits nested submission failed: {e}", here());
    }
    if !seen.submitted {
        // Only a nested action whose parent never ran.
        let parent = a.parent.expect("every top-level action is submitted");
        assert_eq!(
            world.actions[parent].runs.load(Ordering::SeqCst),
            0,
            "{}\nits parent ran but did not submit it",
            here()
        );
        assert!(
            seen.states.iter().all(|s| *s == Ok(0)),
            "{}\nnever submitted, yet its semaphores moved",
            here()
        );
        stats.never_submitted += 1;
        return shared_runs;
    }
    let first = seen.states[0];
    assert!(
        seen.states.iter().all(|s| *s == first),
        "{}\nits signals disagree",
        here()
    );
    // The kinds its failed waits may pass on.
    let mut failed_waits: Vec<ErrorKind> = Vec::new();
    for d in &a.deps {
        match state(world.sem(d.src)) {
            Ok(v) => assert!(
                v >= d.value,
                "{}\nwait {d:?} ended at {v}, below its value",
                here()
            ),
            Err(k) => failed_waits.push(k),
        }
    }
    let own_dispatches = own_dispatch_tiles(&a.body);
    let own_tiles: u64 = own_dispatches.iter().sum();
    let own_tile_sum: u64 = own_dispatches.iter().map(|&n| tile_sum(n)).sum();
    let ran_nothing = |why: &str| {
        assert_eq!(seen.runs, 0, "{}\n{why}, yet its call ran", here());
        assert_eq!(seen.tiles, 0, "{}\n{why}, yet tiles ran", here());
        if let Some(bufs) = &st.bufs {
            for b in bufs {
                let mut bytes = [0u8; BUF_LEN];
                b.read(0, &mut bytes).unwrap();
                assert_eq!(bytes, [0u8; BUF_LEN], "{}\n{why}, yet it wrote", here());
            }
        }
    };
    let host = matches!(a.body, Body::Host { .. });
    if !failed_waits.is_empty() {
        let kind = first.expect_err("an action with a failed wait must fail");
        assert!(
            failed_waits.contains(&kind) || (cancel_ok && kind == ErrorKind::Cancelled),
            "{}\nfailed with {kind:?}; its failed waits carry {failed_waits:?}",
            here()
        );
        ran_nothing("a wait failed");
        stats.failed_waits += 1;
        return shared_runs;
    }
    if cancel_ok && first == Err(ErrorKind::Cancelled) {
        ran_nothing("cancelled");
        return shared_runs;
    }
    // Every wait was reached: the body ran, once, and decided.
    match a.own_fault() {
        None => assert_eq!(first, Ok(a.value), "{}\nshould have signalled", here()),
        Some(k) => {
            assert_eq!(first, Err(k), "{}\nshould have failed so", here());
            stats.own_faults += 1;
        }
    }
    if host {
        assert_eq!(seen.runs, 1, "{}\nthe call ran {} times", here(), seen.runs);
    }
    if let Body::Execute { cbs, uses } = &a.body {
        if first.is_ok() {
            assert_eq!(seen.tiles, own_tiles, "{}\ntiles run", here());
            assert_eq!(seen.tile_sum, own_tile_sum, "{}\ntiles run twice", here());
            let model = apply(cbs, uses);
            let bufs = st.bufs.as_ref().unwrap();
            for (b, want) in bufs.iter().zip(&model) {
                let mut bytes = [0u8; BUF_LEN];
                b.read(0, &mut bytes).unwrap();
                assert_eq!(&bytes, want, "{}\nbuffer contents", here());
            }
            shared_runs += uses.iter().filter(|u| **u == CbUse::Shared).count() as u64;
        } else {
            assert!(
                (1..=own_tiles).contains(&seen.tiles),
                "{}\na faulting tile ran, and at most every tile once",
                here()
            );
            // The shared recordings before the faulting one ran whole.
            let faulty = uses
                .iter()
                .position(|u| match u {
                    CbUse::Own(i) => cbs[*i]
                        .stages
                        .iter()
                        .flatten()
                        .any(|c| matches!(c, Cmd::Dispatch { fault: Some(_), .. })),
                    CbUse::Shared => false,
                })
                .expect("a faulting recording");
            shared_runs += uses[..faulty]
                .iter()
                .filter(|u| **u == CbUse::Shared)
                .count() as u64;
        }
    }
    shared_runs
}

/// Tile counts of the dispatches in an action's own command buffers
/// (shared ones run under other actions too).
fn own_dispatch_tiles(body: &Body) -> Vec<u64> {
    match body {
        Body::Execute { cbs, uses } => uses
            .iter()
            .filter_map(|u| match u {
                CbUse::Own(i) => Some(&cbs[*i]),
                CbUse::Shared => None,
            })
            .flat_map(|cb| cb.stages.iter().flatten())
            .filter_map(|c| match c {
                Cmd::Dispatch { grid, .. } => Some(tiles(*grid)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Checks the shared command buffer: its tiles ran exactly `shared_runs`
/// times each (the runs the actions made whole), and every run left the
/// buffer it read unchanged.
fn check_shared(ctx: &str, world: &World, shared_runs: u64) {
    let per_run = tiles(world.plan.shared_grid);
    assert_eq!(
        world.shared_tiles.load(Ordering::SeqCst),
        shared_runs * per_run,
        "{ctx}: tiles of the shared command buffer ({shared_runs} runs of {per_run})"
    );
    assert_eq!(
        world.shared_tile_sum.load(Ordering::SeqCst),
        shared_runs * tile_sum(per_run),
        "{ctx}: tiles of the shared command buffer, by index"
    );
    let mut bytes = [0u8; 16];
    world.shared_buf.read(0, &mut bytes).unwrap();
    assert_eq!(
        bytes, [0xA5; 16],
        "{ctx}: the shared buffer, read by every run"
    );
}

/// The two buffers after a successful execute, computed in order.
fn apply(cbs: &[CbPlan], uses: &[CbUse]) -> [[u8; BUF_LEN]; 2] {
    let mut b = [[0u8; BUF_LEN]; 2];
    for u in uses {
        let CbUse::Own(i) = u else { continue };
        for cmd in cbs[*i].stages.iter().flatten() {
            match cmd {
                Cmd::Fill {
                    buf,
                    offset,
                    len,
                    pattern,
                } => {
                    for k in 0..*len {
                        b[*buf][offset + k] = pattern[k % pattern.len()];
                    }
                }
                Cmd::Update { buf, offset, data } => {
                    b[*buf][*offset..offset + data.len()].copy_from_slice(data);
                }
                Cmd::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    len,
                } => {
                    let from: Vec<u8> = b[*src][*src_offset..src_offset + len].to_vec();
                    b[*dst][*dst_offset..dst_offset + len].copy_from_slice(&from);
                }
                Cmd::Dispatch { .. } => {}
            }
        }
    }
    b
}
