//! With a counting global allocator: after warm-up, 20k `execute` calls on
//! the CUDA device (1 wait, 1 signal, one reused command buffer launching a
//! kernel) allocate nothing in fenceline, on any thread, with either
//! completion path. The simulated driver is a separate library with its
//! own allocator: its allocations are its own business and not counted.
#![cfg(feature = "cuda")]

use std::time::Duration;

use fenceline::{CompletionMode, CudaConfig, KernelArg, Semaphore};

mod common;
#[path = "common/cuda.rs"]
mod cuda;

#[global_allocator]
static GLOBAL: common::Counting = common::Counting;

#[test]
fn execute_allocates_nothing() {
    for completion in [CompletionMode::HostFunction, CompletionMode::EventThread] {
        let Some(device) = cuda::device_with(CudaConfig {
            queues: 2,
            completion,
            ..Default::default()
        }) else {
            return;
        };
        cuda::register_test_kernels();
        let counter = device.buffer(4).unwrap();
        let kernel = device
            .load_kernel(cuda::COUNT_PTX, "fenceline_count")
            .unwrap();
        let mut cb = device.command_buffer().unwrap();
        cb.launch(
            &kernel,
            [2, 1, 1],
            [1, 1, 1],
            0,
            &[KernelArg::Buffer(&counter, 0)],
        )
        .unwrap();
        cb.end().unwrap();
        let queues = [device.queue(0).unwrap(), device.queue(1).unwrap()];
        let chain = Semaphore::new(0);
        let run = |from: u64, to: u64| {
            for i in from..to {
                queues[(i % 2) as usize]
                    .execute(&[(&chain, i)], &[(&chain, i + 1)], &[&cb])
                    .unwrap();
                if i % 64 == 63 {
                    chain.wait(i + 1, Duration::from_secs(10)).unwrap();
                }
            }
            chain.wait(to, Duration::from_secs(10)).unwrap();
        };
        run(0, 20_000);
        let events = cuda::live_events();
        let before = common::allocations();
        run(20_000, 40_000);
        let allocations = common::allocations() - before;
        assert_eq!(
            allocations, 0,
            "{completion:?}: 20k executes allocated {allocations} times"
        );
        // Events in use are bounded by the actions in flight (at most 64
        // here) plus the semaphore's table of device signals, not by the
        // 40k submissions.
        let bound = 64 + fenceline::semaphore::DEVICE_SIGNALS;
        assert!(
            device.events_created() <= bound,
            "{completion:?}: {} events created",
            device.events_created()
        );
        if let (Some(before), Some(after)) = (events, cuda::live_events()) {
            assert!(
                after <= before.max(bound as u64),
                "{completion:?}: events {before} -> {after}"
            );
        }
        if cuda::is_sim() {
            // The sim's kernel adds grid x block = 2 per run.
            let mut v = [0u8; 4];
            counter.read(0, &mut v).unwrap();
            assert_eq!(u32::from_le_bytes(v), 80_000);
        }
        assert_eq!(cuda::misuse_count(), 0, "{}", cuda::last_misuse());
    }
}
