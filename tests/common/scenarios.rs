//! Device scenarios written once and run on every device: the CPU device
//! (`tests/device_scenarios.rs`), the CUDA device on a real GPU or the
//! simulated driver (`tests/cuda_scenarios.rs`), and the Vulkan device on
//! a real driver with validation (`tests/vulkan_scenarios.rs`). A [`Rig`]
//! makes the devices and a [`Counter`]: a command buffer that counts its
//! runs (a dispatch closure on the CPU, a kernel with an atomic add on
//! CUDA and Vulkan).
//!
//! Included with `#[path = "common/scenarios.rs"] mod scenarios;` next to
//! `#[cfg(feature = "cuda")] #[path = "common/cuda.rs"] mod cuda;` and
//! `#[cfg(feature = "vulkan")] #[path = "common/vulkan.rs"] mod vulkan;`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceline::{CommandBuffer, Device, Error, ErrorKind, Semaphore, Timeout};

// Under Miri (about a thousand times slower) a hang limit of 10 s fails
// healthy runs.
pub const LONG: Duration = Duration::from_secs(if cfg!(miri) { 900 } else { 10 });

/// Makes devices of one kind.
pub struct Rig {
    make: Box<dyn Fn(usize) -> Result<Device, Error>>,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Cpu,
    Cuda,
    Vulkan,
}

impl Rig {
    pub fn cpu() -> Rig {
        Rig {
            make: Box::new(|queues| {
                Device::cpu_with(fenceline::CpuConfig {
                    workers: 2,
                    queues,
                    ..Default::default()
                })
            }),
            kind: Kind::Cpu,
        }
    }

    #[cfg(feature = "cuda")]
    pub fn cuda(completion: fenceline::CompletionMode) -> Option<Rig> {
        let config = move |queues| fenceline::CudaConfig {
            queues,
            completion,
            ..Default::default()
        };
        crate::cuda::device_with(config(1))?;
        crate::cuda::register_test_kernels();
        Some(Rig {
            make: Box::new(move |queues| Device::cuda_with(0, config(queues))),
            kind: Kind::Cuda,
        })
    }

    /// The Vulkan device 0 with the validation layer: `None` when there is
    /// none (see `common/vulkan.rs`).
    #[cfg(feature = "vulkan")]
    pub fn vulkan() -> Option<Rig> {
        let config = |queues| fenceline::VulkanConfig {
            queues,
            validation: true,
            ..Default::default()
        };
        crate::vulkan::device_with(config(1))?;
        Some(Rig {
            make: Box::new(move |queues| {
                Device::vulkan_with(crate::vulkan::index(), config(queues))
            }),
            kind: Kind::Vulkan,
        })
    }

    /// After a scenario: the simulated driver saw no misuse.
    pub fn finish(&self) {
        #[cfg(feature = "vulkan")]
        if self.kind == Kind::Vulkan {
            crate::vulkan::assert_no_messages();
        }
        #[cfg(feature = "cuda")]
        if self.kind == Kind::Cuda {
            let n = crate::cuda::misuse_count();
            assert_eq!(n, 0, "driver misuse: {}", crate::cuda::last_misuse());
        }
    }

    pub fn try_device(&self, queues: usize) -> Result<Device, Error> {
        (self.make)(queues)
    }

    pub fn device(&self, queues: usize) -> Device {
        self.try_device(queues).expect("opening the device")
    }

    pub fn counter(&self, device: &Device) -> Counter {
        match self.kind {
            Kind::Cpu => Counter::Host(Arc::new(AtomicU32::new(0))),
            Kind::Cuda => Counter::Device(device.buffer(4).expect("counter buffer")),
            #[cfg(feature = "vulkan")]
            Kind::Vulkan => Counter::Vulkan(
                device.buffer(4).expect("counter buffer"),
                crate::vulkan::count_kernel(device),
            ),
            #[cfg(not(feature = "vulkan"))]
            Kind::Vulkan => unreachable!("no Vulkan device without the feature"),
        }
    }
}

/// Counts runs of the command buffers it records into.
pub enum Counter {
    Host(Arc<AtomicU32>),
    Device(fenceline::Buffer),
    #[cfg(feature = "vulkan")]
    Vulkan(fenceline::Buffer, fenceline::SpirvKernel),
}

impl Counter {
    /// Records work that adds `n` to the count when it runs.
    pub fn record(&self, device: &Device, cb: &mut CommandBuffer, n: u32) {
        match self {
            Counter::Host(c) => {
                let c = c.clone();
                cb.dispatch([n, 1, 1], move |_| {
                    c.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
            }
            #[cfg(feature = "cuda")]
            Counter::Device(b) => {
                let k = device
                    .load_kernel(crate::cuda::COUNT_PTX, "fenceline_count")
                    .unwrap();
                cb.launch(
                    &k,
                    [n, 1, 1],
                    [1, 1, 1],
                    0,
                    &[fenceline::KernelArg::Buffer(b, 0)],
                )
                .unwrap();
            }
            #[cfg(not(feature = "cuda"))]
            Counter::Device(_) => {
                let _ = device;
                unreachable!("no CUDA device without the feature")
            }
            #[cfg(feature = "vulkan")]
            Counter::Vulkan(b, k) => cb
                .dispatch_spirv(k, [n, 1, 1], &[fenceline::SpirvBinding::Buffer(b)], &[])
                .unwrap(),
        }
    }

    /// An ended command buffer that adds `n` per run.
    pub fn command_buffer(&self, device: &Device, n: u32) -> CommandBuffer {
        let mut cb = device.command_buffer().unwrap();
        self.record(device, &mut cb, n);
        cb.end().unwrap();
        cb
    }

    pub fn get(&self) -> u32 {
        match self {
            Counter::Host(c) => c.load(Ordering::SeqCst),
            #[cfg(feature = "vulkan")]
            Counter::Vulkan(b, _) => {
                let mut v = [0u8; 4];
                b.read(0, &mut v).unwrap();
                u32::from_le_bytes(v)
            }
            Counter::Device(b) => {
                let mut v = [0u8; 4];
                b.read(0, &mut v).unwrap();
                u32::from_le_bytes(v)
            }
        }
    }
}

fn crate_wait_all(list: &[(&Semaphore, u64)]) {
    fenceline::wait_all(list, LONG).unwrap();
}

/// One `#[test]` per scenario, each running it on the rig `$rig` makes
/// (skipped, with the reason printed, when it makes none).
#[macro_export]
macro_rules! scenario_tests {
    ($rig:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                if let Some(rig) = $rig {
                    $crate::scenarios::$name(&rig);
                    rig.finish();
                }
            }
        )*
    };
}

/// Every scenario, for `scenario_tests!`.
#[macro_export]
macro_rules! all_scenarios {
    ($rig:expr) => {
        $crate::scenario_tests!($rig; queue_index_is_checked, submit_with_no_command_buffers_and_signal, submit_with_wait_stays_until_the_host_signals, multiple_waits_and_signals, intermediate_semaphore_between_two_batches, two_batches_on_two_queues_wait_on_one_former_batch_submitted_in_reverse, batches_waiting_on_values_1_and_2_of_a_producer_signalling_3, batch_waiting_on_another_batch_and_a_host_signal, wait_on_a_smaller_value_before_and_after_it_was_signalled, failed_wait_propagates_and_the_payload_does_not_run, fill_barrier_update_barrier_copy_reads_back_exactly, every_bad_recording_input_is_an_error, one_command_buffer_reused_for_200_chained_submissions, two_threads_submit_interleaved_links_of_one_chain, host_calls_run_and_a_panic_fails_the_signals, drop_with_pending_work_cancels_it, queue_handles_outlive_the_device_handle, a_host_call_holding_the_last_handles_finishes, a_pending_host_call_holding_the_last_handles_may_be_failed);
    };
}

pub fn queue_index_is_checked(rig: &Rig) {
    let d = rig.device(2);
    assert!(d.queue(1).is_ok());
    assert_eq!(d.queue(2).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let e = rig.try_device(0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

pub fn submit_with_no_command_buffers_and_signal(rig: &Rig) {
    let d = rig.device(1);
    let s = Semaphore::new(0);
    d.queue(0).unwrap().execute(&[], &[(&s, 1)], &[]).unwrap();
    s.wait(1, LONG).unwrap();
    d.queue(0).unwrap().barrier(&[(&s, 1)], &[(&s, 2)]).unwrap();
    s.wait(2, LONG).unwrap();
}

pub fn submit_with_wait_stays_until_the_host_signals(rig: &Rig) {
    let d = rig.device(1);
    let (w, s) = (Semaphore::new(0), Semaphore::new(0));
    let hits = rig.counter(&d);
    let cb = hits.command_buffer(&d, 1);
    d.queue(0)
        .unwrap()
        .execute(&[(&w, 1)], &[(&s, 1)], &[&cb])
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(s.query().unwrap(), 0);
    assert_eq!(hits.get(), 0, "ran before its wait");
    w.signal(1).unwrap();
    s.wait(1, LONG).unwrap();
    assert_eq!(hits.get(), 1);
}

pub fn multiple_waits_and_signals(rig: &Rig) {
    let d = rig.device(1);
    let waits: Vec<Semaphore> = (0..3).map(|_| Semaphore::new(0)).collect();
    let sigs: Vec<Semaphore> = (0..3).map(|_| Semaphore::new(0)).collect();
    let wl: Vec<_> = waits.iter().map(|s| (s, 1)).collect();
    let sl: Vec<_> = sigs
        .iter()
        .enumerate()
        .map(|(i, s)| (s, i as u64 + 1))
        .collect();
    d.queue(0).unwrap().barrier(&wl, &sl).unwrap();
    for w in &waits {
        assert_eq!(sigs[0].query().unwrap(), 0);
        w.signal(1).unwrap();
    }
    for (i, s) in sigs.iter().enumerate() {
        s.wait(i as u64 + 1, LONG).unwrap();
    }
}

pub fn intermediate_semaphore_between_two_batches(rig: &Rig) {
    let d = rig.device(1);
    let (mid, end) = (Semaphore::new(0), Semaphore::new(0));
    let hits = rig.counter(&d);
    let cb = hits.command_buffer(&d, 1);
    let q = d.queue(0).unwrap();
    q.execute(&[(&mid, 1)], &[(&end, 1)], &[&cb]).unwrap();
    q.execute(&[], &[(&mid, 1)], &[&cb]).unwrap();
    end.wait(1, LONG).unwrap();
    assert_eq!(hits.get(), 2);
}

pub fn two_batches_on_two_queues_wait_on_one_former_batch_submitted_in_reverse(rig: &Rig) {
    let d = rig.device(2);
    let (a, b1, b2) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let hits = rig.counter(&d);
    let cb = hits.command_buffer(&d, 1);
    d.queue(1)
        .unwrap()
        .execute(&[(&a, 1)], &[(&b2, 1)], &[&cb])
        .unwrap();
    d.queue(0)
        .unwrap()
        .execute(&[(&a, 1)], &[(&b1, 1)], &[&cb])
        .unwrap();
    d.queue(0)
        .unwrap()
        .execute(&[], &[(&a, 1)], &[&cb])
        .unwrap();
    crate_wait_all(&[(&b1, 1), (&b2, 1)]);
    assert_eq!(hits.get(), 3);
}

pub fn batches_waiting_on_values_1_and_2_of_a_producer_signalling_3(rig: &Rig) {
    let d = rig.device(2);
    let (p, c1, c2) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    d.queue(0)
        .unwrap()
        .barrier(&[(&p, 1)], &[(&c1, 1)])
        .unwrap();
    d.queue(1)
        .unwrap()
        .barrier(&[(&p, 2)], &[(&c2, 1)])
        .unwrap();
    d.queue(0).unwrap().barrier(&[], &[(&p, 3)]).unwrap();
    crate_wait_all(&[(&c1, 1), (&c2, 1)]);
}

pub fn batch_waiting_on_another_batch_and_a_host_signal(rig: &Rig) {
    let d = rig.device(1);
    let (batch, host, out) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let q = d.queue(0).unwrap();
    q.barrier(&[(&batch, 1), (&host, 1)], &[(&out, 1)]).unwrap();
    q.barrier(&[], &[(&batch, 1)]).unwrap();
    batch.wait(1, LONG).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(out.query().unwrap(), 0, "the host signal is still missing");
    host.signal(1).unwrap();
    out.wait(1, LONG).unwrap();
}

pub fn wait_on_a_smaller_value_before_and_after_it_was_signalled(rig: &Rig) {
    let d = rig.device(1);
    let (s, a, b) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let q = d.queue(0).unwrap();
    q.barrier(&[(&s, 1)], &[(&a, 1)]).unwrap(); // before
    s.signal(5).unwrap();
    q.barrier(&[(&s, 3)], &[(&b, 1)]).unwrap(); // after
    crate_wait_all(&[(&a, 1), (&b, 1)]);
}

pub fn failed_wait_propagates_and_the_payload_does_not_run(rig: &Rig) {
    let d = rig.device(1);
    let (w, mid, out) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let hits = rig.counter(&d);
    let cb = hits.command_buffer(&d, 1);
    let q = d.queue(0).unwrap();
    q.execute(&[(&w, 1)], &[(&mid, 1)], &[&cb]).unwrap();
    q.execute(&[(&mid, 1)], &[(&out, 1)], &[&cb]).unwrap();
    w.fail(Error::new(ErrorKind::Aborted, "upstream"));
    let e = out.wait(1, LONG).unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::Aborted, "upstream"));
    assert_eq!(hits.get(), 0);
}

pub fn fill_barrier_update_barrier_copy_reads_back_exactly(rig: &Rig) {
    let d = rig.device(1);
    let (a, b) = (d.buffer(64).unwrap(), d.buffer(64).unwrap());
    let mut cb = d.command_buffer().unwrap();
    cb.fill(&a, 0, 64, &[0x11, 0x22]).unwrap();
    cb.fill(&b, 0, 64, &[0xEE]).unwrap();
    cb.barrier().unwrap();
    cb.update(&[1, 2, 3, 4, 5], &a, 10).unwrap();
    cb.barrier().unwrap();
    cb.copy(&a, 8, &b, 32, 16).unwrap();
    cb.end().unwrap();
    let done = Semaphore::new(0);
    d.queue(0)
        .unwrap()
        .execute(&[], &[(&done, 1)], &[&cb])
        .unwrap();
    done.wait(1, LONG).unwrap();
    let mut got_a = [0u8; 64];
    a.read(0, &mut got_a).unwrap();
    let mut want_a = [0u8; 64];
    for (i, x) in want_a.iter_mut().enumerate() {
        *x = if i % 2 == 0 { 0x11 } else { 0x22 };
    }
    want_a[10..15].copy_from_slice(&[1, 2, 3, 4, 5]);
    assert_eq!(got_a, want_a);
    let mut got_b = [0u8; 64];
    b.read(0, &mut got_b).unwrap();
    let mut want_b = [0xEEu8; 64];
    want_b[32..48].copy_from_slice(&want_a[8..24]);
    assert_eq!(got_b, want_b);
}

pub fn every_bad_recording_input_is_an_error(rig: &Rig) {
    let d = rig.device(1);
    let buf = d.buffer(16).unwrap();
    let mut cb = d.command_buffer().unwrap();
    let e = cb.fill(&buf, 0, 16, &[1, 2, 3]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("fill pattern length 3"), "{e}");
    assert_eq!(
        cb.fill(&buf, 0, 16, &[]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        cb.fill(&buf, 1, 4, &[1, 2]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        cb.fill(&buf, 0, 6, &[1, 2, 3, 4]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        cb.fill(&buf, 8, 12, &[1]).unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
    assert_eq!(
        cb.fill(&buf, usize::MAX, 2, &[1]).unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
    cb.fill(&buf, 0, 16, &[1, 2, 3, 4]).unwrap(); // an exactly full range is fine
    assert_eq!(
        cb.update(&[0; 9], &buf, 8).unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
    // The fill above writes `buf` in this stage: another command of the
    // stage may not touch it (commands of a stage run at once), and the
    // refused command leaves the recording as it was.
    let e = cb.update(&[0; 8], &buf, 8).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.message().contains("record a barrier"), "{e}");
    cb.barrier().unwrap();
    cb.update(&[0; 8], &buf, 8).unwrap();
    cb.barrier().unwrap();
    let other = d.buffer(8).unwrap();
    assert_eq!(
        cb.copy(&buf, 0, &other, 4, 8).unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
    assert_eq!(
        cb.copy(&buf, 12, &other, 0, 8).unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
    let e = cb.copy(&buf, 0, &buf, 4, 8).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "overlap");
    cb.copy(&buf, 0, &buf, 8, 8).unwrap(); // adjacent, not overlapping
    assert_eq!(d.buffer(0).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let mut out = [0u8; 4];
    assert_eq!(
        buf.read(14, &mut out).unwrap_err().kind(),
        ErrorKind::OutOfRange
    );
    // Submitting before end, recording after end, ending twice.
    let s = Semaphore::new(0);
    let e = d
        .queue(0)
        .unwrap()
        .execute(&[], &[(&s, 1)], &[&cb])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert_eq!(s.query().unwrap(), 0, "nothing was submitted");
    cb.end().unwrap();
    assert_eq!(
        cb.barrier().unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    assert_eq!(cb.end().unwrap_err().kind(), ErrorKind::FailedPrecondition);
    assert_eq!(
        cb.fill(&buf, 0, 4, &[1]).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
}

pub fn one_command_buffer_reused_for_200_chained_submissions(rig: &Rig) {
    let d = rig.device(2);
    let hits = rig.counter(&d);
    let mut cb = d.command_buffer().unwrap();
    hits.record(&d, &mut cb, 4);
    cb.barrier().unwrap();
    hits.record(&d, &mut cb, 2);
    cb.end().unwrap();
    let s = Semaphore::new(0);
    for i in 0..200u64 {
        d.queue((i % 2) as usize)
            .unwrap()
            .execute(&[(&s, i)], &[(&s, i + 1)], &[&cb])
            .unwrap();
    }
    s.wait(200, LONG).unwrap();
    assert_eq!(hits.get(), 200 * 6);
}

pub fn two_threads_submit_interleaved_links_of_one_chain(rig: &Rig) {
    let d = rig.device(2);
    let s = Semaphore::new(0);
    std::thread::scope(|sc| {
        for t in 0..2u64 {
            let (d, s) = (&d, &s);
            sc.spawn(move || {
                let q = d.queue(t as usize).unwrap();
                for i in (t..400).step_by(2) {
                    q.barrier(&[(s, i)], &[(s, i + 1)]).unwrap();
                }
            });
        }
    });
    s.wait(400, LONG).unwrap();
}

pub fn host_calls_run_and_a_panic_fails_the_signals(rig: &Rig) {
    let d = rig.device(1);
    let q = d.queue(0).unwrap();
    let (a, b, c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let hit = Arc::new(AtomicU32::new(0));
    let h = hit.clone();
    q.host_call(&[], &[(&a, 1)], move || {
        h.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    a.wait(1, LONG).unwrap();
    assert_eq!(hit.load(Ordering::SeqCst), 1);
    q.host_call(&[(&a, 1)], &[(&b, 1)], || panic!("host call exploded"))
        .unwrap();
    let e = b.wait(1, LONG).unwrap_err();
    assert!(e.message().contains("host call exploded"), "{e}");
    // A big closure (boxed) works too; the device keeps working.
    let big = [7u8; 256];
    q.host_call(&[], &[(&c, 1)], move || {
        assert_eq!(big[255], 7);
        Err(Error::new(ErrorKind::Unavailable, "sensor offline"))
    })
    .unwrap();
    assert_eq!(c.wait(1, LONG).unwrap_err().kind(), ErrorKind::Unavailable);
}

pub fn drop_with_pending_work_cancels_it(rig: &Rig) {
    let (gate, out) = (Semaphore::new(0), Semaphore::new(0));
    let ran = {
        let d = rig.device(1);
        let ran = rig.counter(&d);
        let cb = ran.command_buffer(&d, 1);
        d.queue(0)
            .unwrap()
            .execute(&[(&gate, 1)], &[(&out, 1)], &[&cb])
            .unwrap();
        ran
    };
    assert_eq!(out.query().unwrap_err().kind(), ErrorKind::Cancelled);
    assert_eq!(ran.get(), 0);
    gate.signal(1).unwrap();
}

pub fn queue_handles_outlive_the_device_handle(rig: &Rig) {
    let s = Semaphore::new(0);
    let q = {
        let d = rig.device(1);
        d.queue(0).unwrap()
    };
    q.barrier(&[], &[(&s, 1)]).unwrap();
    s.wait(1, Timeout::Never).unwrap();
}

/// Signals its semaphore when dropped: placed after a handle in a tuple, it
/// reports that the handle's drop returned.
struct SignalOnDrop(Semaphore);
impl Drop for SignalOnDrop {
    fn drop(&mut self) {
        let _ = self.0.signal(1);
    }
}

/// Runs `f` on its own thread: a hang fails the test after `LONG`.
fn within(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(LONG)
        .unwrap_or_else(|e| panic!("{what}: {e:?} (a hang, or a panic above)"));
}

// Mutation caught: a device's drop waiting for its in-flight work wherever
// it runs (here inside the host call holding the last handles: a hang).
pub fn a_host_call_holding_the_last_handles_finishes(rig: &Rig) {
    let d = rig.device(1);
    within("host call dropping the last handles", move || {
        let q = d.queue(0).unwrap();
        let (done, freed) = (Semaphore::new(0), Semaphore::new(0));
        let held = (d, q.clone(), SignalOnDrop(freed.clone()));
        q.host_call(&[], &[(&done, 1)], move || {
            drop(held);
            Ok(())
        })
        .unwrap();
        drop(q);
        freed
            .wait(1, LONG)
            .expect("the drop inside the host call returned");
        done.wait(1, LONG).unwrap();
    });
}

// Mutation caught: a device's drop waiting for its queues to drain inside
// one of their issue passes (a signal fails a pending host call holding
// the last handles: the pass dropping them waited for itself).
pub fn a_pending_host_call_holding_the_last_handles_may_be_failed(rig: &Rig) {
    let d = rig.device(1);
    within(
        "failing a pending host call holding the last handles",
        move || {
            let q = d.queue(0).unwrap();
            let (gate, out, freed) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
            let held = (d, q.clone(), SignalOnDrop(freed.clone()));
            q.host_call(&[(&gate, 1)], &[(&out, 1)], move || {
                let _ = &held;
                Ok(())
            })
            .unwrap();
            drop(q);
            gate.fail(Error::new(ErrorKind::Aborted, "the gate failed"));
            freed
                .wait(1, LONG)
                .expect("the drop inside the pass returned");
            assert_eq!(out.query().unwrap_err().kind(), ErrorKind::Aborted);
        },
    );
}
