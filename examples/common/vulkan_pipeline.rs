//! The Vulkan run of `examples/pipeline.rs` (feature `vulkan`, flag
//! `--vulkan`): the same frames on a Vulkan device, the kernels the WGSL
//! shaders of `examples/common/shaders/` (byte for byte the CPU kernels of
//! `examples/common/image.rs`), compiled to SPIR-V by naga and loaded with
//! `Device::load_spirv`.
//!
//! Each frame, as in the CPU device's run: the host writes the source
//! image into a buffer of a ring (`Buffer::write`); queue 0 takes a buffer
//! from the device's pool (`Queue::alloca`); the blur runs on queue 1 into
//! it, the statistics on queue 0 from it into a buffer of a second ring;
//! queue 0 gives the blurred buffer back (`Queue::dealloca`, its memory
//! back in the pool with its last handle: no allocation once warm); the
//! host reads the statistics (`Buffer::read`). Both dispatches are
//! recorded once and run on the frame's buffers through binding tables
//! (`Queue::execute_with`); the queues are chained by the CPU run's four
//! timeline semaphores, with its waits and signals, 3 frames in flight.
//!
//! First a short run under the Khronos validation layer (any message
//! fails the demo), then the timed run without it; both runs' statistics
//! must be those of the CPU device's run, frame for frame.

use std::time::{Duration, Instant};

use fenceline::{bytemuck, Device, Error, ErrorKind, SpirvBinding, SpirvKernel, VulkanConfig};

use super::image::{fold_digest, IMAGE_BYTES, STATS_BYTES, TILES};
use super::{
    allocations, submit_frame, Chain, Figures, Measure, IMAGES, IN_FLIGHT, RING, WARMUP_FRAMES,
};

/// WGSL to SPIR-V with naga, as the Vulkan tests compile their kernels.
#[path = "../../tests/common/vulkan.rs"]
mod wgsl;

const BLUR: &str = include_str!("shaders/blur.wgsl");
const STATS: &str = include_str!("shaders/stats.wgsl");

/// Frames of the validated run: past the rings' length, so that every
/// ring buffer, and the pool's blurred buffers, are reused under
/// validation.
const VALIDATED_FRAMES: u64 = 3 * RING as u64;

/// Longest wait for one frame's statistics: a stuck device fails the demo
/// rather than hanging it.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// How many frames a run computes.
#[derive(Clone, Copy)]
enum Until {
    /// As the CPU runs: until `seconds` have passed and at least twice
    /// the warm-up.
    Seconds(f64),
    /// Exactly this many.
    Frames(u64),
}

/// The two kernels' SPIR-V words.
struct Spirv {
    blur: Vec<u32>,
    stats: Vec<u32>,
}

/// The Vulkan run, after the CPU device's: `cpu` holds that run's
/// statistics digests, frame by frame. With no Vulkan device, prints why
/// and returns `Ok`.
///
/// # Errors
///
/// Any error of the device; `Internal` if the validation layer reported
/// anything, or if a frame's statistics differ from the CPU device's.
pub fn run(until_seconds: f64, images: &[Vec<u8>], cpu: &Figures) -> Result<(), Error> {
    let spirv = Spirv {
        blur: wgsl::spirv(BLUR),
        stats: wgsl::spirv(STATS),
    };
    let config = |validation| VulkanConfig {
        queues: 2,
        validation,
        ..Default::default()
    };
    match Device::vulkan_with(0, config(true)) {
        Ok(device) => {
            let name = device.kind_name().to_string();
            let figures = frames(&device, &spirv, Until::Frames(VALIDATED_FRAMES), images);
            // Dropped first: the layer also checks the device's teardown.
            drop(device);
            let messages = fenceline::testing::vulkan_validation_messages();
            for m in &messages {
                eprintln!("{m}");
            }
            // The messages shown first: they may say why the run failed.
            let figures = figures?;
            let differ = first_difference(&figures.digests, &cpu.digests);
            println!(
                "vulkan, validated: {} frames on {name}, {} validation messages, statistics {}",
                figures.digests.len(),
                messages.len(),
                if differ.is_none() {
                    "identical"
                } else {
                    "DIFFERENT"
                },
            );
            if !messages.is_empty() {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!(
                        "the validation layer reported {} messages on the Vulkan device",
                        messages.len()
                    ),
                ));
            }
            check("vulkan, validated", differ, &figures.digests, &cpu.digests)?;
        }
        Err(e) => match Device::vulkan_with(0, config(false)) {
            Ok(_) => println!("vulkan: validated run skipped: {e}"),
            Err(e) => {
                println!("vulkan: skipped, no Vulkan device: {e}");
                return Ok(());
            }
        },
    }
    let device = Device::vulkan_with(0, config(false))?;
    println!(
        "vulkan on {}: the blur into an alloca'd buffer (dealloca'd after the statistics), \
         the WGSL kernels compiled to SPIR-V by naga, {TILES} workgroups a dispatch, \
         {IN_FLIGHT} frames in flight, {until_seconds} s",
        device.kind_name()
    );
    let mut ours = frames(&device, &spirv, Until::Seconds(until_seconds), images)?;
    ours.print("fenceline vulkan");
    let both = ours.digests.len().min(cpu.digests.len());
    let differ = first_difference(&ours.digests, &cpu.digests);
    let ratio = (ours.elapsed.as_secs_f64() / ours.frames as f64)
        / (cpu.elapsed.as_secs_f64() / cpu.frames as f64);
    println!(
        "frame time fenceline vulkan / fenceline: {ratio:.2}; statistics of the {both} frames \
         both ran: {}",
        if differ.is_none() {
            "identical"
        } else {
            "DIFFERENT"
        }
    );
    check("vulkan", differ, &ours.digests, &cpu.digests)
}

/// The first frame (an index into the digests) for which `ours` and the
/// CPU device's digests differ, of the frames both ran.
fn first_difference(ours: &[u64], cpu: &[u64]) -> Option<usize> {
    ours.iter().zip(cpu).position(|(a, b)| a != b)
}

/// `Ok` if no frame differs, else which did, as an `Internal` error.
fn check(run: &str, differ: Option<usize>, ours: &[u64], cpu: &[u64]) -> Result<(), Error> {
    let Some(i) = differ else { return Ok(()) };
    Err(Error::new(
        ErrorKind::Internal,
        format!(
            "{run}: frame {}'s statistics differ from the CPU device's (digest {:#018x}, \
             the CPU's {:#018x})",
            i + 1,
            ours[i],
            cpu[i]
        ),
    ))
}

/// A kernel of two storage buffers (binding 0 read, binding 1 written) and
/// no push constants, from `words`.
fn load(device: &Device, words: &[u32]) -> Result<SpirvKernel, Error> {
    // SAFETY: naga wrote `words` from WGSL it parsed and validated
    // (`wgsl::spirv`); its compute entry `main` binds storage buffers 0
    // and 1 of group 0 and takes no push constants (blur.wgsl,
    // stats.wgsl).
    unsafe { device.load_spirv(words, "main", 2, 0) }
}

/// Frames on `device` (2 queues) until `until`: the figures and every
/// frame's statistics digest.
fn frames(
    device: &Device,
    spirv: &Spirv,
    until: Until,
    images: &[Vec<u8>],
) -> Result<Figures, Error> {
    let (q0, q1) = (device.queue(0)?, device.queue(1)?);
    // Frame `f` uses ring entry `f % RING`: its previous user, frame
    // `f - RING`, has finished when frame `f` starts (the loop waits for
    // frame `f - IN_FLIGHT` before it starts frame `f`).
    let ring = |len: usize| {
        (0..RING)
            .map(|_| device.buffer(len))
            .collect::<Result<Vec<_>, _>>()
    };
    let (sources, stats) = (ring(IMAGE_BYTES)?, ring(STATS_BYTES)?);
    // Each dispatch recorded once: slots 0 and 1 are the frame's buffers.
    let slots = [SpirvBinding::Slot(0), SpirvBinding::Slot(1)];
    let mut blur = device.command_buffer()?;
    blur.dispatch_spirv(&load(device, &spirv.blur)?, [TILES, 1, 1], &slots, &[])?;
    blur.end()?;
    let mut statistics = device.command_buffer()?;
    statistics.dispatch_spirv(&load(device, &spirv.stats)?, [TILES, 1, 1], &slots, &[])?;
    statistics.end()?;
    let chain = Chain::new();
    let freed = &chain.freed;
    let mut host_stats = vec![0u32; STATS_BYTES / 4];
    let mut digests = Vec::with_capacity(1 << 20);
    let mut started = [Instant::now(); RING];
    let mut measure = Measure::new();
    let mut frame = 0u64;
    let more = |frame: u64, deadline: Instant| match until {
        Until::Seconds(_) => Instant::now() < deadline || frame < WARMUP_FRAMES * 2,
        Until::Frames(n) => frame < n,
    };
    let seconds = match until {
        Until::Seconds(s) => s,
        Until::Frames(_) => 0.0,
    };
    let mut collect = |done: u64, started: &[Instant; RING], measure: &mut Measure| {
        freed.wait(done, FRAME_TIMEOUT)?;
        let latency = started[done as usize % RING].elapsed();
        stats[done as usize % RING].read(0, bytemuck::cast_slice_mut(&mut host_stats))?;
        digests.push(fold_digest(0, &host_stats));
        measure.finished(done, latency);
        Ok::<(), Error>(())
    };
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while more(frame, deadline) {
        frame += 1;
        let f = frame;
        let at = f as usize % RING;
        started[at] = Instant::now();
        let source = &sources[at];
        source.write(0, &images[(f % IMAGES) as usize])?;
        submit_frame(
            f,
            [&q0, &q1],
            &chain,
            [&blur, &statistics],
            source,
            &stats[at],
        )?;
        if f >= IN_FLIGHT {
            collect(f + 1 - IN_FLIGHT, &started, &mut measure)?;
        }
    }
    for done in (frame + 2).saturating_sub(IN_FLIGHT).max(1)..=frame {
        collect(done, &started, &mut measure)?;
    }
    let (end, allocations_at_end) = (Instant::now(), allocations());
    Ok(measure.figures(frame, end, allocations_at_end, digests))
}
