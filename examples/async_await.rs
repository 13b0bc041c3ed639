//! Awaiting fenceline from async code: a three-stage pipeline
//! (decode, process, encode: a 64-tile dispatch each, over two queues of
//! the CPU device, chained by timeline semaphores, 3 frames in flight) is
//! fed from a tokio task, and every frame's end is awaited with
//! `Semaphore::wait_async` instead of a blocking wait, so the runtime's
//! threads stay free for other tasks meanwhile (here, a ticker that counts
//! how often it ran while frames were being processed).
//!
//! Run: `cargo run --release --example async_await` (`-- <frames>`,
//! default 2000).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use fenceline::{CpuConfig, Device, Error, Semaphore};

#[path = "common/pipeline_stages.rs"]
mod stages;
use stages::{stage_cb, IN_FLIGHT};

fn main() -> Result<(), Error> {
    let frames: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async move {
        let device = Device::cpu_with(CpuConfig {
            workers: 0,
            queues: 2,
            spin: true,
        })?;
        let (q0, q1) = (device.queue(0)?, device.queue(1)?);
        let sink = Arc::new(AtomicU64::new(0));
        let cbs = [
            stage_cb(&device, 1, &sink)?,
            stage_cb(&device, 2, &sink)?,
            stage_cb(&device, 3, &sink)?,
        ];
        let (a, b, c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));

        // Another task on the same runtime: it runs whenever the frame
        // loop is waiting for the device.
        let ticks = Arc::new(AtomicU64::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    ticks.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            })
        };

        let start = Instant::now();
        for frame in 1..=frames {
            let older = frame.saturating_sub(IN_FLIGHT);
            q0.execute(&[(&c, older), (&a, frame - 1)], &[(&a, frame)], &[&cbs[0]])?;
            q1.execute(&[(&a, frame), (&b, frame - 1)], &[(&b, frame)], &[&cbs[1]])?;
            q0.execute(&[(&b, frame), (&c, frame - 1)], &[(&c, frame)], &[&cbs[2]])?;
            if frame >= IN_FLIGHT {
                // The oldest frame in flight: awaited, not blocked on.
                c.wait_async(frame + 1 - IN_FLIGHT).await?;
            }
        }
        c.wait_async(frames).await?;
        let elapsed = start.elapsed();
        ticker.abort();
        println!(
            "{frames} frames awaited from tokio in {:.1} ms ({:.1} us a frame); \
             the other task ran {} times meanwhile (checksum {})",
            elapsed.as_secs_f64() * 1e3,
            elapsed.as_secs_f64() * 1e6 / frames as f64,
            ticks.load(Ordering::Relaxed),
            sink.load(Ordering::Relaxed),
        );
        Ok(())
    })
}
