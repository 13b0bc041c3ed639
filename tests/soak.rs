//! A randomized soak of the CPU device through the public API only.
//!
//! Each round draws a plan from a seeded xorshift generator: a CPU device
//! (1 or 2 workers, 1 to 3 queues), a few gate semaphores that the test
//! signals or fails (during submission, or only at the end), and 2 or 3
//! submitting threads, each submitting random actions over the queues:
//! `execute` of freshly recorded command buffers (fill / update / copy /
//! dispatch, with barriers; a stage of dispatches only reads the action's
//! buffers through bindings) and of one command buffer shared by every
//! thread (a bound dispatch reading one buffer from every thread at once),
//! `barrier`, and `host_call`. Beside those, submitters run transient
//! frames: `alloca`, a dispatch writing the memory and one reading it into
//! another buffer (one recording of each, shared by every thread, bound per
//! submission through binding tables), `dealloca`, then an action that
//! uses the memory after its dealloca (it must fail with
//! `FailedPrecondition`, never touch the memory). Every action signals semaphores of
//! its own (1 or 2, at one value of 1 to 3) and waits on gates and on
//! earlier actions' semaphores, so the graph is a DAG and no value is ever
//! signalled twice. Injected into it: tile and host-call errors
//! (`Aborted`), panics (they must become `Internal`), captures whose `Drop`
//! panics, host calls that submit another action through a captured
//! `Queue`, gates the test fails (their kind must reach the dependents),
//! timed waits, and devices dropped with work pending (pending actions must
//! fail with `Cancelled`, issued ones complete), either from the test
//! thread or by a host call holding the last handles.
//!
//! After every action settled, the test checks each one against its plan:
//! its semaphores are either signalled (and then its body ran exactly once:
//! every tile once, its buffers hold exactly what the plan wrote) or failed
//! with a kind it may carry (its own injected fault, one of its failed
//! waits' kinds, or `Cancelled` in a round that dropped the device), and
//! then it ran nothing. Every timed wait's answer must agree with the
//! final states. Every captured value is dropped by the end of the round,
//! the workers exit, and the process's live heap bytes after the last round
//! are within 64 KiB of those after the first.
//!
//! Size: short by default (a few seconds in a debug build), tiny under
//! Miri, and `FENCELINE_SOAK=long` runs rounds for `FENCELINE_SOAK_SECS`
//! seconds (default 120). `FENCELINE_SOAK_SEED=<u64>` picks the seed (it is
//! printed on failure). One test, alone in its binary: the thread and heap
//! counts are the process's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use fenceline::{
    wait_all, wait_any, Binding, Buffer, CommandBuffer, CpuConfig, Device, Error, ErrorKind, Queue,
    Semaphore, Tile, TileIo, Timeout,
};

// ---------------------------------------------------------------------------
// Live heap bytes
// ---------------------------------------------------------------------------

/// Forwards to `System`, keeping the bytes currently allocated.
struct LiveBytes;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

#[global_allocator]
static GLOBAL: LiveBytes = LiveBytes;

// SAFETY: forwards every call to `System`, only counting bytes.
unsafe impl GlobalAlloc for LiveBytes {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Heap the last round may hold above the first (test harness noise).
const LEAK_TOLERANCE: isize = 64 * 1024;

// ---------------------------------------------------------------------------
// Limits, randomness, sizes
// ---------------------------------------------------------------------------

/// A wait for something that must happen (a hang fails instead of blocking).
const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// A whole round.
const ROUND_LIMIT: Duration = Duration::from_secs(60);
/// The default seed (any `FENCELINE_SOAK_SEED` replaces it).
const DEFAULT_SEED: u64 = 0x5EED_F0CA_CC1A;

/// xorshift64* (seeded through splitmix64, so any seed works).
struct Rng(u64);

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(splitmix(seed) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
    fn fork(&mut self) -> Rng {
        Rng::new(self.next())
    }
}

#[derive(Clone, Copy, Debug)]
enum Rounds {
    Count(usize),
    For(Duration),
}

/// How big the soak is.
#[derive(Clone, Copy, Debug)]
struct Size {
    rounds: Rounds,
    threads: (usize, usize),
    actions: (usize, usize),
    gates: (usize, usize),
    max_grid: u32,
    /// Longest pause between submissions and inside host calls.
    max_sleep_us: u64,
}

fn size() -> Size {
    if cfg!(miri) {
        return Size {
            rounds: Rounds::Count(6),
            threads: (2, 2),
            actions: (2, 3),
            gates: (1, 2),
            max_grid: 2,
            max_sleep_us: 0,
        };
    }
    if std::env::var("FENCELINE_SOAK").is_ok_and(|v| v == "long") {
        let secs = std::env::var("FENCELINE_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(120);
        return Size {
            rounds: Rounds::For(Duration::from_secs(secs)),
            threads: (2, 3),
            actions: (3, 16),
            gates: (1, 5),
            max_grid: 4,
            max_sleep_us: 300,
        };
    }
    Size {
        rounds: Rounds::Count(600),
        threads: (2, 3),
        actions: (3, 10),
        gates: (1, 4),
        max_grid: 3,
        max_sleep_us: 200,
    }
}

fn seed() -> u64 {
    match std::env::var("FENCELINE_SOAK_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("FENCELINE_SOAK_SEED={s:?}: not a u64"))
        }
        Err(_) => DEFAULT_SEED,
    }
}

// ---------------------------------------------------------------------------
// Injected faults and tracked captures
// ---------------------------------------------------------------------------

/// The payload of every panic the soak injects (the panic hook keeps quiet
/// about it; any other panic is reported as usual).
struct Injected;

/// Panics that were not injected, on any thread (a fenceline thread's
/// panic would otherwise go unnoticed: nobody joins a detached worker).
static UNEXPECTED_PANICS: AtomicUsize = AtomicUsize::new(0);

fn install_quiet_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<Injected>() {
            UNEXPECTED_PANICS.fetch_add(1, Ordering::SeqCst);
            default(info);
        }
    }));
}

/// What the running round is doing, and its plan (reported if it hangs).
static PHASE: Mutex<&str> = Mutex::new("");
static PLAN: Mutex<String> = Mutex::new(String::new());

fn phase(what: &'static str) {
    *PHASE.lock().unwrap_or_else(|p| p.into_inner()) = what;
}

/// Counts itself alive in its round; panics when dropped if asked to (a
/// capture whose `Drop` panics). Every host-call and dispatch closure holds
/// one, so the round can tell that fenceline dropped every payload.
struct Tracked {
    live: Arc<AtomicIsize>,
    panic_on_drop: bool,
}

impl Tracked {
    fn new(live: &Arc<AtomicIsize>, panic_on_drop: bool) -> Tracked {
        live.fetch_add(1, Ordering::SeqCst);
        Tracked {
            live: live.clone(),
            panic_on_drop,
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
        // Never while unwinding: that would abort the process.
        if self.panic_on_drop && !std::thread::panicking() {
            std::panic::panic_any(Injected);
        }
    }
}

/// What the plan makes a body or a tile do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Returns `Err(Aborted)`.
    Error,
    /// Panics (an `Internal` error).
    Panic,
}

impl Fault {
    fn kind(self) -> ErrorKind {
        match self {
            Fault::Error => ErrorKind::Aborted,
            Fault::Panic => ErrorKind::Internal,
        }
    }
    fn raise(self) -> Result<(), Error> {
        match self {
            Fault::Error => Err(Error::new(ErrorKind::Aborted, "injected by the soak")),
            Fault::Panic => std::panic::panic_any(Injected),
        }
    }
}

// ---------------------------------------------------------------------------
// The plan of a round
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RoundKind {
    /// Everything settles, then the test drops the device.
    Normal,
    /// The test drops the device while work waits on unresolved gates.
    DropOutside,
    /// A host call holds the last handles and drops them when it runs.
    DropInside,
}

/// A semaphore of the round: a gate, or signal `sem` of an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Src {
    Gate(usize),
    Action { id: usize, sem: usize },
}

#[derive(Clone, Copy, Debug)]
struct Dep {
    src: Src,
    value: u64,
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
struct GatePlan {
    /// `None`: signalled to 1; `Some(kind)`: failed.
    fail: Option<ErrorKind>,
    /// Resolved only after every submission (after the drop in drop rounds).
    late: bool,
}

const BUF_LEN: usize = 32;

#[derive(Debug)]
enum Cmd {
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
struct CbPlan {
    /// Commands of one stage run in parallel: at most one buffer command
    /// per stage, so the bytes are deterministic.
    stages: Vec<Vec<Cmd>>,
    /// Its first dispatch's closure holds a capture whose `Drop` panics.
    drop_panic: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CbUse {
    Own(usize),
    Shared,
}

#[derive(Debug)]
enum Body {
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
struct ActionPlan {
    id: usize,
    queue: usize,
    deps: Vec<Dep>,
    signals: usize,
    value: u64,
    body: Body,
    /// The host call that submits this one (nobody waits on it).
    parent: Option<usize>,
}

impl ActionPlan {
    /// The fault the body itself ends with, if it runs.
    fn own_fault(&self) -> Option<ErrorKind> {
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

struct Plan {
    kind: RoundKind,
    workers: usize,
    queues: usize,
    spin: bool,
    gates: Vec<GatePlan>,
    actions: Vec<ActionPlan>,
    /// Top-level action ids each submitting thread submits, in order.
    threads: Vec<Vec<usize>>,
    /// The host call that drops the last handles (`DropInside`).
    dropper: Option<usize>,
    shared_grid: [u32; 3],
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

fn tiles(g: [u32; 3]) -> u64 {
    g.iter().map(|&d| u64::from(d)).product()
}

/// The sum of (tile index + 1) over a dispatch of `n` tiles.
fn tile_sum(n: u64) -> u64 {
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
    fn new(rng: &mut Rng, size: &Size, round: usize) -> Plan {
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

// ---------------------------------------------------------------------------
// A round's live state
// ---------------------------------------------------------------------------

struct ActionState {
    sems: Vec<Semaphore>,
    /// Host-call bodies run.
    runs: AtomicUsize,
    /// Own dispatch tiles run, and the sum of their (index + 1).
    tiles: AtomicU64,
    tile_sum: AtomicU64,
    /// Submitted (set before the submitter can learn the outcome).
    submitted: AtomicBool,
    /// A nested submission's error, if any (it must not fail).
    submit_error: Mutex<Option<Error>>,
    /// Two buffers, for executes.
    bufs: Option<[Buffer; 2]>,
}

struct World {
    plan: Plan,
    gates: Vec<Semaphore>,
    actions: Vec<Arc<ActionState>>,
    /// Captures not dropped yet.
    live: Arc<AtomicIsize>,
    shared_tiles: Arc<AtomicU64>,
    shared_tile_sum: Arc<AtomicU64>,
    shared_buf: Buffer,
}

impl World {
    fn sem(&self, src: Src) -> &Semaphore {
        match src {
            Src::Gate(g) => &self.gates[g],
            Src::Action { id, sem } => &self.actions[id].sems[sem],
        }
    }

    fn waits(&self, a: &ActionPlan) -> Vec<(Semaphore, u64)> {
        a.deps
            .iter()
            .map(|d| (self.sem(d.src).clone(), d.value))
            .collect()
    }
}

/// Final state of a semaphore: its value, or its failure's kind.
fn state(s: &Semaphore) -> Result<u64, ErrorKind> {
    s.query().map_err(|e| e.kind())
}

fn pause(rng: &mut Rng, max_us: u64) {
    match rng.below(4) {
        0 => {}
        1 => std::thread::yield_now(),
        _ if max_us > 0 => {
            std::thread::sleep(Duration::from_micros(rng.below(max_us as usize + 1) as u64))
        }
        _ => std::thread::yield_now(),
    }
}

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
fn submit(
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

// ---------------------------------------------------------------------------
// Timed waits
// ---------------------------------------------------------------------------

#[derive(Debug)]
enum ProbeKind {
    One(Src, u64),
    All(Vec<(Src, u64)>),
    Any(Vec<(Src, u64)>),
}

#[derive(Debug)]
struct Probe {
    what: ProbeKind,
    timeout: Timeout,
    elapsed: Duration,
    result: Result<usize, Error>,
}

fn random_src(rng: &mut Rng, world: &World) -> (Src, u64) {
    if rng.percent(20) {
        return (Src::Gate(rng.below(world.gates.len())), 1);
    }
    let a = &world.plan.actions[rng.below(world.plan.actions.len())];
    // Sometimes one above the value signalled: never reached.
    let value = rng.range(1, a.value as usize + 1) as u64;
    (
        Src::Action {
            id: a.id,
            sem: rng.below(a.signals),
        },
        value,
    )
}

fn probe(rng: &mut Rng, world: &World) -> Probe {
    let timeout = if rng.percent(25) {
        Timeout::Immediate
    } else {
        Timeout::After(Duration::from_micros(rng.below(2000) as u64))
    };
    let what = match rng.below(4) {
        0 => ProbeKind::All(
            (0..rng.range(1, 3))
                .map(|_| random_src(rng, world))
                .collect(),
        ),
        1 => ProbeKind::Any(
            (0..rng.range(1, 3))
                .map(|_| random_src(rng, world))
                .collect(),
        ),
        _ => {
            let (src, v) = random_src(rng, world);
            ProbeKind::One(src, v)
        }
    };
    let list = |l: &[(Src, u64)]| -> Vec<(Semaphore, u64)> {
        l.iter().map(|(s, v)| (world.sem(*s).clone(), *v)).collect()
    };
    let start = Instant::now();
    let result = match &what {
        ProbeKind::One(src, v) => world.sem(*src).wait(*v, timeout).map(|()| 0),
        ProbeKind::All(l) => {
            let owned = list(l);
            let refs: Vec<(&Semaphore, u64)> = owned.iter().map(|(s, v)| (s, *v)).collect();
            wait_all(&refs, timeout).map(|()| 0)
        }
        ProbeKind::Any(l) => {
            let owned = list(l);
            let refs: Vec<(&Semaphore, u64)> = owned.iter().map(|(s, v)| (s, *v)).collect();
            wait_any(&refs, timeout)
        }
    };
    Probe {
        what,
        timeout,
        elapsed: start.elapsed(),
        result,
    }
}

fn check_probe(ctx: &str, world: &World, p: &Probe) {
    let reached = |(src, v): &(Src, u64)| state(world.sem(*src)).is_ok_and(|now| now >= *v);
    let failed_with = |(src, _): &(Src, u64), k: ErrorKind| state(world.sem(*src)) == Err(k);
    let items: Vec<(Src, u64)> = match &p.what {
        ProbeKind::One(s, v) => vec![(*s, *v)],
        ProbeKind::All(l) | ProbeKind::Any(l) => l.clone(),
    };
    match &p.result {
        Ok(i) => match &p.what {
            ProbeKind::Any(_) => assert!(
                reached(&items[*i]),
                "{ctx}: wait_any said item {i} was reached, which it never was: {p:?}"
            ),
            _ => assert!(
                items.iter().all(reached),
                "{ctx}: a wait returned Ok for values never all reached: {p:?}"
            ),
        },
        Err(e) if e.kind() == ErrorKind::DeadlineExceeded => {
            if let Timeout::After(d) = p.timeout {
                assert!(
                    p.elapsed >= d,
                    "{ctx}: a wait timed out early ({:?} of {d:?}): {p:?}",
                    p.elapsed
                );
            }
        }
        Err(e) => assert!(
            items.iter().any(|it| failed_with(it, e.kind())),
            "{ctx}: a wait failed with {e}, but no semaphore it watched failed so: {p:?}"
        ),
    }
}

// ---------------------------------------------------------------------------
// Threads of the process
// ---------------------------------------------------------------------------

/// Worker threads of every fenceline executor alive in the process (their
/// names, `fenceline-worker-N`, are cut to 15 bytes by Linux).
#[cfg(all(target_os = "linux", not(miri)))]
fn worker_threads() -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .flatten()
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.starts_with("fenceline-work"))
            })
            .count(),
    )
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn worker_threads() -> Option<usize> {
    None
}

fn wait_until(ctx: &str, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "{ctx}: {what}: not after {WAIT_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ---------------------------------------------------------------------------
// One round
// ---------------------------------------------------------------------------

fn resolve_gate(world: &World, g: usize) {
    let gate = &world.gates[g];
    match world.plan.gates[g].fail {
        Some(kind) => gate.fail(Error::new(kind, "gate failed by the soak")),
        None => gate.signal(1).expect("a gate is signalled once"),
    }
}

// ---------------------------------------------------------------------------
// Transient frames: alloca, write, read, dealloca, a use after the dealloca
// ---------------------------------------------------------------------------

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
struct FrameCbs {
    tiles: u32,
    /// Slot 0: the transient memory, written in chunks.
    write: CommandBuffer,
    /// Slot 0: the transient memory, read; slot 1: `out`, one `u32` a tile.
    read: CommandBuffer,
}

fn frame_cbs(device: &Device, tiles: u32) -> FrameCbs {
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
struct Frame {
    /// The gate the alloca waited on, if any.
    gate: Option<usize>,
    sem: Semaphore,
    late: Semaphore,
    tmp: Buffer,
    out: Buffer,
}

fn run_frame(
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
fn check_frame(ctx: &str, world: &World, f: &Frame, stats: &mut Stats) {
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
fn settle_frames(ctx: &str, frames: &[Frame]) {
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

// ---------------------------------------------------------------------------
// A round, phase by phase
// ---------------------------------------------------------------------------

/// One round: its plan drawn from `seed`, run phase by phase, then checked.
/// The phases draw from one generator in this order (each thread from a
/// fork of it), so a seed replays the round's plan and every thread's draws
/// (not how the threads interleave).
fn round(ctx: &str, seed: u64, round_no: usize, size: &Size) -> Stats {
    let mut rng = Rng::new(seed);
    let Setup {
        device,
        queues,
        world,
        shared,
        frame_cbs,
    } = set_up(&mut rng, size, round_no);
    phase("submitting");
    let (probes, frames) = submit_all(
        &mut rng, size, &world, &device, &queues, &shared, &frame_cbs,
    );
    match world.plan.kind {
        RoundKind::Normal => settle_then_drop(ctx, &world, &frames, device, queues),
        _ => drop_then_settle(ctx, &mut rng, size, &world, &shared, device, queues),
    }
    phase("settling the frames");
    settle_frames(ctx, &frames);
    phase("waiting for every capture dropped and every worker exited");
    wait_for_captures_and_workers(ctx, &world, shared, frame_cbs);
    phase("checking");
    let stats = check(ctx, &world, &probes, &frames);
    *PLAN.lock().unwrap_or_else(|p| p.into_inner()) = String::new();
    stats
}

/// What `set_up` builds for the later phases.
struct Setup {
    device: Device,
    queues: Vec<Queue>,
    world: World,
    /// The command buffer every submitting thread shares.
    shared: CommandBuffer,
    frame_cbs: FrameCbs,
}

/// Draws the round's plan and builds what it runs on: the device and its
/// queues, every action's semaphores and buffers, the shared command buffer
/// and the frames' recordings. Nothing is submitted yet, and the plan is
/// recorded for a hang's message.
fn set_up(rng: &mut Rng, size: &Size, round_no: usize) -> Setup {
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

/// Runs the submitting threads, each submitting its top-level actions in
/// plan order (with timed waits and frames between them), beside a thread
/// that resolves the early gates in random order. On return every frame
/// and every top-level action but the dropper is submitted, and every early
/// gate resolved; work waiting on a late gate is still pending. The probes
/// and frames are returned for the settling and the checks.
fn submit_all(
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

/// The gates resolved only after the submission.
fn late_gates(world: &World) -> Vec<usize> {
    (0..world.plan.gates.len())
        .filter(|&g| world.plan.gates[g].late)
        .collect()
}

/// A round that keeps its device until its work is done: resolves the
/// late gates, waits until every submitted action and frame signalled or
/// failed, then drops the idle device. On return nothing is pending and
/// the device is gone.
fn settle_then_drop(
    ctx: &str,
    world: &World,
    frames: &[Frame],
    device: Device,
    queues: Vec<Queue>,
) {
    let late = late_gates(world);
    phase("resolving the late gates");
    for &g in &late {
        resolve_gate(world, g);
    }
    phase("settling");
    settle_actions(ctx, world);
    settle_frames(ctx, frames);
    phase("dropping the device");
    drop(queues);
    drop(device);
}

/// A round that drops its device with work pending: the test thread drops
/// its handles, or (`DropInside`) submits the dropper, whose host call takes
/// the last ones, and drops its queues. The late gates resolve after the
/// drop or racing it. On return the test holds no handle of the device and
/// every submitted action signalled or failed (pending ones may fail with
/// `Cancelled`).
fn drop_then_settle(
    ctx: &str,
    rng: &mut Rng,
    size: &Size,
    world: &World,
    shared: &CommandBuffer,
    device: Device,
    queues: Vec<Queue>,
) {
    let max_sleep = size.max_sleep_us;
    let late = late_gates(world);
    // The late gates resolved after the drop, or racing it.
    let racing = rng.percent(50);
    let mut lrng = rng.fork();
    std::thread::scope(|s| {
        if racing {
            let late = &late;
            s.spawn(move || {
                for &g in late {
                    pause(&mut lrng, max_sleep);
                    resolve_gate(world, g);
                }
            });
        }
        if world.plan.kind == RoundKind::DropInside {
            let id = world.plan.dropper.expect("a dropper");
            let q = queues[world.plan.actions[id].queue].clone();
            let handles = Some((device, q));
            submit(world, None, &queues, id, shared, handles, rng);
            pause(rng, max_sleep);
            phase("dropping the queue handles (a host call holds the last)");
            drop(queues);
        } else {
            pause(rng, max_sleep);
            phase("dropping the device with work pending");
            drop(queues);
            drop(device);
        }
        phase("resolving the late gates");
    });
    if !racing {
        for &g in &late {
            resolve_gate(world, g);
        }
    }
    phase("settling");
    settle_actions(ctx, world);
}

/// Waits until every submitted action's semaphores signalled or failed (a
/// hang fails the test).
fn settle_actions(ctx: &str, world: &World) {
    for (a, st) in world.plan.actions.iter().zip(&world.actions) {
        // A parent signals after its call returned (and submitted).
        if !st.submitted.load(Ordering::SeqCst) {
            continue;
        }
        for (k, s) in st.sems.iter().enumerate() {
            let r = s.wait(a.value, WAIT_LIMIT);
            if let Err(e) = r {
                assert_ne!(
                    e.kind(),
                    ErrorKind::DeadlineExceeded,
                    "{ctx}: action {} signal {k} neither signalled nor failed after \
                     {WAIT_LIMIT:?} (hang)\n{:?}",
                    a.id,
                    world.plan
                );
            }
        }
    }
}

/// Drops the round's recordings (the shared one's dispatch holds a
/// capture), then waits until fenceline dropped every capture and every
/// worker thread exited (where threads can be counted): nothing of the
/// round runs any more, so what the checks read is final.
fn wait_for_captures_and_workers(
    ctx: &str,
    world: &World,
    shared: CommandBuffer,
    frame_cbs: FrameCbs,
) {
    drop(shared);
    drop(frame_cbs);
    wait_until(ctx, "every captured value dropped", || {
        world.live.load(Ordering::SeqCst) == 0
    });
    if worker_threads().is_some() {
        wait_until(ctx, "every worker thread exited", || {
            worker_threads() == Some(0)
        });
    }
}

/// What the rounds exercised (printed in long or verbose runs).
#[derive(Default, Debug)]
struct Stats {
    rounds: [usize; 3],
    actions: usize,
    signalled: usize,
    own_faults: usize,
    failed_waits: usize,
    cancelled: usize,
    never_submitted: usize,
    host_runs: usize,
    nested: usize,
    tiles: u64,
    probes: usize,
    probes_timed_out: usize,
    frames: usize,
    frames_done: usize,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
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
fn check(ctx: &str, world: &World, probes: &[Probe], frames: &[Frame]) -> Stats {
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

// ---------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------

/// Runs `f` on its own thread; a hang past `limit` fails the test.
fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let phase = *PHASE.lock().unwrap_or_else(|p| p.into_inner());
            let plan = PLAN.lock().unwrap_or_else(|p| p.into_inner()).clone();
            panic!("{what}: still running after {limit:?} (hang) while {phase}; plan:\n{plan}")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => {
                eprintln!("{what}: failed");
                resume_unwind(panic)
            }
            Ok(()) => panic!("{what}: ended without a result"),
        },
    }
}

#[test]
fn soak() {
    install_quiet_hook();
    let size = size();
    let seed = seed();
    let started = Instant::now();
    let mut baseline: Option<isize> = None;
    let mut round_no = 0;
    let mut stats = Stats::default();
    loop {
        let more = match size.rounds {
            Rounds::Count(n) => round_no < n,
            Rounds::For(d) => round_no < 2 || started.elapsed() < d,
        };
        if !more {
            break;
        }
        let round_seed = splitmix(seed ^ splitmix(round_no as u64));
        let ctx = format!(
            "soak round {round_no} (FENCELINE_SOAK_SEED={seed}, round seed {round_seed:#x})"
        );
        let c = ctx.clone();
        let seen = within(&ctx, ROUND_LIMIT, move || {
            round(&c, round_seed, round_no, &size)
        });
        stats.add(&seen);
        assert_eq!(
            UNEXPECTED_PANICS.load(Ordering::SeqCst),
            0,
            "{ctx}: a thread panicked (see above)"
        );
        if round_no == 0 {
            baseline = Some(live_bytes());
        }
        round_no += 1;
    }
    let baseline = baseline.expect("at least one round");
    // Frames that failed (a failed gate, a dropped device) check little:
    // most must have run to their dealloca.
    assert!(
        stats.frames < 10 || stats.frames_done * 2 > stats.frames,
        "soak (FENCELINE_SOAK_SEED={seed}): only {} of {} transient frames ran to their dealloca",
        stats.frames_done,
        stats.frames
    );
    // A device dropped inside its own work frees its last memory when its
    // detached workers exit; where their exit cannot be observed (Miri has
    // no /proc), give them the round limit to do so.
    let deadline = Instant::now() + ROUND_LIMIT;
    let mut after = live_bytes();
    while after - baseline > LEAK_TOLERANCE && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        after = live_bytes();
    }
    assert!(
        after - baseline <= LEAK_TOLERANCE,
        "soak (FENCELINE_SOAK_SEED={seed}): live heap grew from {baseline} bytes after the \
         first round to {after} after round {round_no}"
    );
    if matches!(size.rounds, Rounds::For(_)) || std::env::var_os("FENCELINE_SOAK_VERBOSE").is_some()
    {
        eprintln!(
            "soak: seed {seed}: {round_no} rounds in {:?}; live heap {baseline} -> {after} bytes\n\
             {stats:?}",
            started.elapsed()
        );
    }
}
