//! The CUDA device (feature `cuda`), each against its peer in the same run:
//!
//! - `execute_host_cost`: host time per `Queue::execute` of a command
//!   buffer holding one empty kernel (one `cuGraphLaunch` plus fenceline's
//!   queue, event and completion work), with each completion path (the
//!   default, `EventThread`, is `fenceline_execute`), vs a
//!   raw `cuLaunchKernel` of the same kernel on a stream through cudarc.
//!   All sync every 256 calls.
//! - `chain_2queues`: latency of a 32-link semaphore chain alternating
//!   between two queues, with the device-wait shortcut (each link waits on
//!   the GPU) vs forced host round trips (`device_waits: false`).
//! - `completion`: from `execute` to the host seeing its signal, for the
//!   two completion paths (`HostFunction` vs `EventThread`).
//!
//! On a real GPU (`FENCELINE_CUDA=real`, see `scripts/gpu-check.sh`) these
//! are the targets quoted in BENCHMARKS.md; on the simulated driver they
//! measure the simulator's threads, not a GPU. Run with
//! `cargo bench --features cuda --bench cuda`.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use cudarc::driver::sys;
use fenceline::{CommandBuffer, CompletionMode, CudaConfig, Device, Queue, Semaphore};

#[path = "../tests/common/cuda.rs"]
mod cuda;

const LONG: Duration = Duration::from_secs(10);

const EMPTY_PTX: &str = "
.version 7.0
.target sm_50
.address_size 64
.visible .entry fenceline_empty() { ret; }
";

fn device(config: CudaConfig) -> Option<Device> {
    cuda::device_with(config)
}

fn empty_cb(d: &Device) -> CommandBuffer {
    let k = d.load_kernel(EMPTY_PTX, "fenceline_empty").unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.launch(&k, [1, 1, 1], [1, 1, 1], 0, &[]).unwrap();
    cb.end().unwrap();
    cb
}

/// A one-queue device with `completion`, a command buffer holding the
/// empty kernel, and the queue.
fn one_queue(completion: CompletionMode) -> Option<(Device, CommandBuffer, Queue)> {
    let d = device(CudaConfig {
        completion,
        ..Default::default()
    })?;
    let cb = empty_cb(&d);
    let q = d.queue(0).unwrap();
    Some((d, cb, q))
}

/// The peer: a raw launch of the same kernel on a stream.
struct RawLaunch {
    stream: sys::CUstream,
    function: sys::CUfunction,
}

impl RawLaunch {
    fn new() -> RawLaunch {
        // SAFETY: driver calls in API order with out-pointers to locals;
        // the context stays current on this (the bench) thread.
        unsafe {
            assert_eq!(sys::cuInit(0), sys::CUresult::CUDA_SUCCESS);
            let mut dev = 0;
            sys::cuDeviceGet(&mut dev, 0);
            let mut ctx = std::ptr::null_mut();
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev);
            sys::cuCtxSetCurrent(ctx);
            let mut stream = std::ptr::null_mut();
            sys::cuStreamCreate(&mut stream, 1);
            let ptx = std::ffi::CString::new(EMPTY_PTX).unwrap();
            let mut module = std::ptr::null_mut();
            assert_eq!(
                sys::cuModuleLoadData(&mut module, ptx.as_ptr().cast()),
                sys::CUresult::CUDA_SUCCESS
            );
            let mut function = std::ptr::null_mut();
            sys::cuModuleGetFunction(&mut function, module, c"fenceline_empty".as_ptr());
            RawLaunch { stream, function }
        }
    }

    fn launch(&self) {
        // SAFETY: a live function with no parameters, on a live stream.
        let r = unsafe {
            sys::cuLaunchKernel(
                self.function,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                self.stream,
                std::ptr::null_mut::<*mut c_void>(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    }

    fn sync(&self) {
        // SAFETY: a live stream.
        unsafe { sys::cuStreamSynchronize(self.stream) };
    }
}

fn host_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("execute_host_cost");
    for (name, completion) in [
        ("fenceline_execute", CompletionMode::EventThread),
        (
            "fenceline_execute_host_function",
            CompletionMode::HostFunction,
        ),
    ] {
        let Some((_device, cb, q)) = one_queue(completion) else {
            return;
        };
        let s = Semaphore::new(0);
        let mut n = 0u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut host = Duration::ZERO;
                for i in 0..iters {
                    let t = Instant::now();
                    q.execute(&[], &[(&s, n + 1)], &[&cb]).unwrap();
                    host += t.elapsed();
                    n += 1;
                    if i % 256 == 255 {
                        s.wait(n, LONG).unwrap();
                    }
                }
                s.wait(n, LONG).unwrap();
                host
            })
        });
    }
    let raw = RawLaunch::new();
    group.bench_function("raw_cudarc_launch", |b| {
        b.iter_custom(|iters| {
            let mut host = Duration::ZERO;
            for i in 0..iters {
                let t = Instant::now();
                raw.launch();
                host += t.elapsed();
                if i % 256 == 255 {
                    raw.sync();
                }
            }
            raw.sync();
            host
        })
    });
    group.finish();
}

fn chain(c: &mut Criterion) {
    let mut group = c.benchmark_group("chain_2queues");
    group.sample_size(20);
    for (name, device_waits) in [("device_wait_shortcut", true), ("host_round_trips", false)] {
        let Some(d) = device(CudaConfig {
            queues: 2,
            device_waits,
            ..Default::default()
        }) else {
            return;
        };
        let cb = empty_cb(&d);
        let qs = [d.queue(0).unwrap(), d.queue(1).unwrap()];
        let s = Semaphore::new(0);
        let mut n = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                for _ in 0..32 {
                    qs[(n % 2) as usize]
                        .execute(&[(&s, n)], &[(&s, n + 1)], &[&cb])
                        .unwrap();
                    n += 1;
                }
                s.wait(n, LONG).unwrap();
            })
        });
    }
    group.finish();
}

fn completion(c: &mut Criterion) {
    let mut group = c.benchmark_group("completion");
    for (name, completion) in [
        ("host_function", CompletionMode::HostFunction),
        ("event_thread", CompletionMode::EventThread),
    ] {
        let Some((_device, cb, q)) = one_queue(completion) else {
            return;
        };
        let s = Semaphore::new(0);
        let mut n = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                q.execute(&[], &[(&s, n + 1)], &[&cb]).unwrap();
                n += 1;
                s.wait(n, LONG).unwrap();
            })
        });
    }
    group.finish();
}

criterion_group!(benches, host_cost, chain, completion);
criterion_main!(benches);
