//! The plan of a round: what it draws from its generator (the round's
//! kind, the device, the gates, every action's queue, waits, signals and
//! body, the command buffers' stages and commands, the grids and the
//! injected faults), before anything runs.

use std::fmt;

use fenceline::ErrorKind;

use crate::faults::Fault;
use crate::rng::{Rng, Size};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RoundKind {
    /// Everything settles, then the test drops the device.
    Normal,
    /// The test drops the device while work waits on unresolved gates.
    DropOutside,
    /// A host call holds the last handles and drops them when it runs.
    DropInside,
}

/// A semaphore of the round: a gate, or signal `sem` of an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Src {
    Gate(usize),
    Action { id: usize, sem: usize },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Dep {
    pub(crate) src: Src,
    pub(crate) value: u64,
}

/// The kinds gates fail with: none of them is injected any other way, so
/// a dependent's kind tells where it came from.
const GATE_KINDS: [ErrorKind; 4] = [
    ErrorKind::Unavailable,
    ErrorKind::FailedPrecondition,
    ErrorKind::OutOfRange,
    ErrorKind::ResourceExhausted,
];

#[derive(Debug)]
pub(crate) struct GatePlan {
    /// `None`: signalled to 1; `Some(kind)`: failed.
    pub(crate) fail: Option<ErrorKind>,
    /// Resolved only after every submission (after the drop in drop rounds).
    pub(crate) late: bool,
}

pub(crate) const BUF_LEN: usize = 32;

#[derive(Debug)]
pub(crate) enum Cmd {
    Fill {
        buf: usize,
        offset: usize,
        len: usize,
        pattern: Vec<u8>,
    },
    Update {
        buf: usize,
        offset: usize,
        data: Vec<u8>,
    },
    Copy {
        src: usize,
        src_offset: usize,
        dst: usize,
        dst_offset: usize,
        len: usize,
    },
    Dispatch {
        grid: [u32; 3],
        fault: Option<(u64, Fault)>,
    },
}

#[derive(Debug)]
pub(crate) struct CbPlan {
    /// Commands of one stage run in parallel: at most one buffer command
    /// per stage, so the bytes are deterministic.
    pub(crate) stages: Vec<Vec<Cmd>>,
    /// Its first dispatch's closure holds a capture whose `Drop` panics.
    pub(crate) drop_panic: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CbUse {
    Own(usize),
    Shared,
}

#[derive(Debug)]
pub(crate) enum Body {
    Barrier,
    /// `execute` with no command buffer.
    EmptyExecute,
    Host {
        fault: Option<Fault>,
        /// A capture panics in `Drop` after the call (never with a panic).
        drop_panic: bool,
        sleep_us: u64,
        /// Submits this action through a captured queue before returning.
        nested: Option<usize>,
        /// Captures enough to be boxed rather than stored inline.
        large: bool,
        /// Holds (and drops) the device's last handles (`DropInside`).
        drops_device: bool,
    },
    Execute {
        cbs: Vec<CbPlan>,
        uses: Vec<CbUse>,
    },
}

#[derive(Debug)]
pub(crate) struct ActionPlan {
    pub(crate) id: usize,
    pub(crate) queue: usize,
    pub(crate) deps: Vec<Dep>,
    pub(crate) signals: usize,
    pub(crate) value: u64,
    pub(crate) body: Body,
    /// The host call that submits this one (nobody waits on it).
    pub(crate) parent: Option<usize>,
}

impl ActionPlan {
    /// The fault the body itself ends with, if it runs.
    pub(crate) fn own_fault(&self) -> Option<ErrorKind> {
        match &self.body {
            Body::Barrier | Body::EmptyExecute => None,
            Body::Host {
                fault, drop_panic, ..
            } => {
                if *drop_panic {
                    Some(ErrorKind::Internal)
                } else {
                    fault.map(Fault::kind)
                }
            }
            Body::Execute { cbs, .. } => cbs
                .iter()
                .flat_map(|cb| cb.stages.iter().flatten())
                .find_map(|c| match c {
                    Cmd::Dispatch {
                        fault: Some((_, f)),
                        ..
                    } => Some(f.kind()),
                    _ => None,
                }),
        }
    }
}

pub(crate) struct Plan {
    pub(crate) kind: RoundKind,
    pub(crate) workers: usize,
    pub(crate) queues: usize,
    pub(crate) spin: bool,
    pub(crate) gates: Vec<GatePlan>,
    pub(crate) actions: Vec<ActionPlan>,
    /// Top-level action ids each submitting thread submits, in order.
    pub(crate) threads: Vec<Vec<usize>>,
    /// The host call that drops the last handles (`DropInside`).
    pub(crate) dropper: Option<usize>,
    pub(crate) shared_grid: [u32; 3],
}

fn grid(rng: &mut Rng, max: u32) -> [u32; 3] {
    let mut g = [0u32; 3];
    for d in &mut g {
        *d = rng.range(1, max as usize) as u32;
    }
    if rng.percent(5) {
        g[rng.below(3)] = 0; // an empty grid completes at once
    }
    g
}

pub(crate) fn tiles(g: [u32; 3]) -> u64 {
    g.iter().map(|&d| u64::from(d)).product()
}

/// The sum of (tile index + 1) over a dispatch of `n` tiles.
pub(crate) fn tile_sum(n: u64) -> u64 {
    n * (n + 1) / 2
}

fn buffer_cmd(rng: &mut Rng) -> Cmd {
    match rng.below(3) {
        0 => {
            let plen = [1, 2, 4][rng.below(3)];
            let offset = plen * rng.below(BUF_LEN / plen);
            let len = plen * rng.below((BUF_LEN - offset) / plen + 1);
            Cmd::Fill {
                buf: rng.below(2),
                offset,
                len,
                pattern: (0..plen).map(|_| rng.next() as u8).collect(),
            }
        }
        1 => {
            let len = rng.range(1, 8);
            Cmd::Update {
                buf: rng.below(2),
                offset: rng.range(0, BUF_LEN - len),
                data: (0..len).map(|_| rng.next() as u8).collect(),
            }
        }
        _ => {
            let len = rng.range(0, 12);
            let src = rng.below(2);
            let mut dst = rng.below(2);
            let src_offset = rng.range(0, BUF_LEN - len);
            let mut dst_offset = rng.range(0, BUF_LEN - len);
            if src == dst && len > 0 {
                // Within one buffer the ranges must not overlap.
                let overlap = |d: usize| src_offset < d + len && d < src_offset + len;
                if overlap(dst_offset) {
                    if src_offset + 2 * len <= BUF_LEN {
                        dst_offset = src_offset + len;
                    } else if src_offset >= len {
                        dst_offset = src_offset - len;
                    } else {
                        dst = 1 - src;
                    }
                }
            }
            Cmd::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                len,
            }
        }
    }
}

fn cb_plan(rng: &mut Rng, max_grid: u32) -> CbPlan {
    let stages = (0..rng.range(1, 3))
        .map(|_| {
            let mut stage = Vec::new();
            match rng.below(5) {
                0 => stage.push(buffer_cmd(rng)),
                1 => stage.push(Cmd::Dispatch {
                    grid: grid(rng, max_grid),
                    fault: None,
                }),
                2 => {
                    stage.push(buffer_cmd(rng));
                    stage.push(Cmd::Dispatch {
                        grid: grid(rng, max_grid),
                        fault: None,
                    });
                }
                3 => {
                    for _ in 0..2 {
                        stage.push(Cmd::Dispatch {
                            grid: grid(rng, max_grid),
                            fault: None,
                        });
                    }
                }
                _ => {
                    stage.push(Cmd::Dispatch {
                        grid: grid(rng, max_grid),
                        fault: None,
                    });
                    stage.push(buffer_cmd(rng));
                    stage.push(Cmd::Dispatch {
                        grid: grid(rng, max_grid),
                        fault: None,
                    });
                }
            }
            stage
        })
        .collect();
    CbPlan {
        stages,
        drop_panic: false,
    }
}

fn execute_body(rng: &mut Rng, max_grid: u32) -> Body {
    let mut cbs: Vec<CbPlan> = (0..rng.range(1, 2))
        .map(|_| cb_plan(rng, max_grid))
        .collect();
    let mut uses: Vec<CbUse> = (0..cbs.len()).map(CbUse::Own).collect();
    if rng.percent(15) {
        uses.push(CbUse::Own(0)); // the same command buffer twice
    }
    if rng.percent(40) {
        let at = rng.below(uses.len() + 1);
        uses.insert(at, CbUse::Shared);
    }
    while rng.percent(10) && uses.len() < 6 {
        uses.push(CbUse::Shared); // past the 4 kept inline
    }
    // At most one faulting tile per action (its kind is then exact).
    if rng.percent(25) {
        let dispatches: Vec<(usize, usize, usize)> = cbs
            .iter()
            .enumerate()
            .flat_map(|(c, cb)| {
                cb.stages.iter().enumerate().flat_map(move |(s, stage)| {
                    stage
                        .iter()
                        .enumerate()
                        .filter_map(move |(k, cmd)| match cmd {
                            Cmd::Dispatch { grid, .. } if tiles(*grid) > 0 => Some((c, s, k)),
                            _ => None,
                        })
                })
            })
            .collect();
        if !dispatches.is_empty() {
            let (c, s, k) = dispatches[rng.below(dispatches.len())];
            if let Cmd::Dispatch { grid, fault } = &mut cbs[c].stages[s][k] {
                let tile = rng.below(tiles(*grid) as usize) as u64;
                let kind = if rng.percent(50) {
                    Fault::Error
                } else {
                    Fault::Panic
                };
                *fault = Some((tile, kind));
            }
        }
    }
    // At most one capture panicking in `Drop` per action: two recordings
    // freed together would panic twice in one drop (an abort).
    if rng.percent(10) {
        let c = rng.below(cbs.len());
        let has_dispatch = cbs[c]
            .stages
            .iter()
            .flatten()
            .any(|cmd| matches!(cmd, Cmd::Dispatch { .. }));
        cbs[c].drop_panic = has_dispatch;
    }
    Body::Execute { cbs, uses }
}

fn host_body(rng: &mut Rng, size: &Size) -> Body {
    let fault = match rng.below(10) {
        0 | 1 => Some(Fault::Error),
        2 => Some(Fault::Panic),
        _ => None,
    };
    Body::Host {
        fault,
        drop_panic: fault != Some(Fault::Panic) && rng.percent(12),
        sleep_us: if rng.percent(30) {
            rng.range(0, size.max_sleep_us as usize) as u64
        } else {
            0
        },
        nested: None,
        large: rng.percent(30),
        drops_device: false,
    }
}

/// Waits on gates and earlier top-level actions (and, for a nested action,
/// on its parent).
fn deps(rng: &mut Rng, gates: usize, earlier: &[(usize, usize, u64)]) -> Vec<Dep> {
    (0..rng.range(0, 3))
        .map(|_| {
            if earlier.is_empty() || rng.percent(30) {
                Dep {
                    src: Src::Gate(rng.below(gates)),
                    value: 1,
                }
            } else {
                let (id, signals, value) = earlier[rng.below(earlier.len())];
                Dep {
                    src: Src::Action {
                        id,
                        sem: rng.below(signals),
                    },
                    value: rng.range(1, value as usize) as u64,
                }
            }
        })
        .collect()
}

impl Plan {
    pub(crate) fn new(rng: &mut Rng, size: &Size, round: usize) -> Plan {
        let kind = if cfg!(miri) {
            [
                RoundKind::Normal,
                RoundKind::DropOutside,
                RoundKind::DropInside,
            ][round % 3]
        } else {
            match rng.below(4) {
                0 | 1 => RoundKind::Normal,
                2 => RoundKind::DropOutside,
                _ => RoundKind::DropInside,
            }
        };
        let queues = rng.range(1, 3);
        let gates: Vec<GatePlan> = (0..rng.range(size.gates.0, size.gates.1))
            .map(|_| GatePlan {
                fail: rng
                    .percent(25)
                    .then(|| GATE_KINDS[rng.below(GATE_KINDS.len())]),
                late: rng.percent(40),
            })
            .collect();
        let nthreads = rng.range(size.threads.0, size.threads.1);
        let total = (0..nthreads)
            .map(|_| rng.range(size.actions.0, size.actions.1))
            .sum::<usize>();
        let mut plan = Plan {
            kind,
            workers: rng.range(1, 2),
            queues,
            spin: !cfg!(miri) && rng.percent(50),
            gates,
            actions: Vec::new(),
            threads: vec![Vec::new(); nthreads],
            dropper: None,
            shared_grid: grid(rng, size.max_grid),
        };
        // (id, signals, value) of the top-level actions so far.
        let mut earlier: Vec<(usize, usize, u64)> = Vec::new();
        for i in 0..=total {
            let dropper = i == total;
            if dropper && kind != RoundKind::DropInside {
                break;
            }
            let id = plan.actions.len();
            let mut body = if dropper {
                host_body(rng, size)
            } else {
                match rng.below(10) {
                    0 => Body::Barrier,
                    1 => Body::EmptyExecute,
                    2..=5 => host_body(rng, size),
                    _ => execute_body(rng, size.max_grid),
                }
            };
            let action = ActionPlan {
                id,
                queue: rng.below(queues),
                deps: deps(rng, plan.gates.len(), &earlier),
                signals: rng.range(1, 2),
                value: rng.range(1, 3) as u64,
                body: Body::Barrier,
                parent: None,
            };
            let nested = matches!(body, Body::Host { .. }) && rng.percent(30);
            if let Body::Host {
                nested: n,
                drops_device,
                drop_panic,
                ..
            } = &mut body
            {
                if nested {
                    *n = Some(id + 1);
                }
                if dropper {
                    *drops_device = true;
                    // Its captures include the device: none panics in Drop.
                    *drop_panic = false;
                }
            }
            earlier.push((id, action.signals, action.value));
            plan.actions.push(ActionPlan { body, ..action });
            if dropper {
                plan.dropper = Some(id);
            } else {
                let t = rng.below(nthreads);
                plan.threads[t].push(id);
            }
            if nested {
                // `earlier` ends with the parent.
                let mut deps = deps(rng, plan.gates.len(), &earlier);
                if rng.percent(50) {
                    let (_, signals, value) = earlier[earlier.len() - 1];
                    deps.push(Dep {
                        src: Src::Action {
                            id,
                            sem: rng.below(signals),
                        },
                        value: rng.range(1, value as usize) as u64,
                    });
                }
                let body = match rng.below(3) {
                    0 => Body::Barrier,
                    1 => Body::EmptyExecute,
                    _ => Body::Host {
                        fault: rng.percent(30).then_some(Fault::Error),
                        drop_panic: false,
                        sleep_us: 0,
                        nested: None,
                        large: false,
                        drops_device: false,
                    },
                };
                plan.actions.push(ActionPlan {
                    id: id + 1,
                    queue: rng.below(queues),
                    deps,
                    signals: rng.range(1, 2),
                    value: rng.range(1, 3) as u64,
                    body,
                    parent: Some(id),
                });
            }
        }
        plan
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "round kind {:?}, {} worker(s), {} queue(s), spin {}, threads {:?}, dropper {:?}",
            self.kind, self.workers, self.queues, self.spin, self.threads, self.dropper
        )?;
        for (i, g) in self.gates.iter().enumerate() {
            writeln!(f, "  gate {i}: {g:?}")?;
        }
        for a in &self.actions {
            writeln!(f, "  {a:?}")?;
        }
        Ok(())
    }
}
