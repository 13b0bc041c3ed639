//! Timed waits: probes drawn and run by the submitting threads while the
//! round runs (`wait`, `wait_all`, `wait_any` with short timeouts), then
//! checked against the final states.

use std::time::{Duration, Instant};

use fenceline::{wait_all, wait_any, Error, ErrorKind, Semaphore, Timeout};

use crate::plan::Src;
use crate::rng::Rng;
use crate::world::{state, World};

#[derive(Debug)]
enum ProbeKind {
    One(Src, u64),
    All(Vec<(Src, u64)>),
    Any(Vec<(Src, u64)>),
}

#[derive(Debug)]
pub(crate) struct Probe {
    what: ProbeKind,
    timeout: Timeout,
    elapsed: Duration,
    pub(crate) result: Result<usize, Error>,
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

pub(crate) fn probe(rng: &mut Rng, world: &World) -> Probe {
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

pub(crate) fn check_probe(ctx: &str, world: &World, p: &Probe) {
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
