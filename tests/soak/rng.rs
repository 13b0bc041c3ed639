//! Limits, randomness, sizes: the time limits of waits and rounds, the
//! seeded generator every draw comes from, and how big the soak is (by
//! default, under Miri, or `FENCELINE_SOAK=long`), with its seed.

use std::time::Duration;

/// A wait for something that must happen (a hang fails instead of blocking).
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// A whole round.
pub(crate) const ROUND_LIMIT: Duration = Duration::from_secs(60);
/// The default seed (any `FENCELINE_SOAK_SEED` replaces it).
const DEFAULT_SEED: u64 = 0x5EED_F0CA_CC1A;

/// xorshift64* (seeded through splitmix64, so any seed works).
pub(crate) struct Rng(u64);

pub(crate) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(splitmix(seed) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    pub(crate) fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
    pub(crate) fn fork(&mut self) -> Rng {
        Rng::new(self.next())
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Rounds {
    Count(usize),
    For(Duration),
}

/// How big the soak is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Size {
    pub(crate) rounds: Rounds,
    pub(crate) threads: (usize, usize),
    pub(crate) actions: (usize, usize),
    pub(crate) gates: (usize, usize),
    pub(crate) max_grid: u32,
    /// Longest pause between submissions and inside host calls.
    pub(crate) max_sleep_us: u64,
}

pub(crate) fn size() -> Size {
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

pub(crate) fn seed() -> u64 {
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

pub(crate) fn pause(rng: &mut Rng, max_us: u64) {
    match rng.below(4) {
        0 => {}
        1 => std::thread::yield_now(),
        _ if max_us > 0 => {
            std::thread::sleep(Duration::from_micros(rng.below(max_us as usize + 1) as u64))
        }
        _ => std::thread::yield_now(),
    }
}
