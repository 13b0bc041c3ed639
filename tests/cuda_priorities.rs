//! Queue priorities on the CUDA device: each queue reports the priority
//! its config gave it, and its stream was created with the matching CUDA
//! stream priority (`High` → the context's greatest, `Normal` and `Low` →
//! the default, least). Runs on a real GPU or the simulated driver (whose
//! range is least 0, greatest -5; it records a stream's priority but runs
//! every stream on a thread of its own, so no test here can show the GPU
//! preferring a stream).
#![cfg(feature = "cuda")]

use fenceline::testing::{CudaInternals, CudaQueueInternals};
use fenceline::{CudaConfig, Device, ErrorKind, Priority};

#[path = "common/cuda.rs"]
mod cuda;

/// The device with `queues` queues of `priorities` (`None`: no driver).
fn device(queues: usize, priorities: &[Priority]) -> Option<Device> {
    cuda::driver().ok()?;
    let config = CudaConfig {
        queues,
        ..Default::default()
    };
    Some(Device::cuda_with_priorities(0, config, priorities).expect("opening CUDA device 0"))
}

/// Each queue's priority and the CUDA priority of its stream.
fn queues(device: &Device, count: usize) -> (Vec<Priority>, Vec<i32>) {
    (0..count)
        .map(|i| {
            let q = device.queue(i).unwrap();
            (q.priority(), q.cuda_stream_priority().unwrap())
        })
        .unzip()
}

// Fails if `CudaDevice::queue_priority` ignores its index or the config
// (checked: returning `Priority::Normal` there fails the first assert).
#[test]
fn queues_report_their_configured_priorities() {
    use Priority::{High, Low, Normal};
    let Some(d) = device(3, &[High, Normal, Low]) else {
        return;
    };
    assert_eq!(queues(&d, 3).0, [High, Normal, Low]);

    // Past the slice's end: Normal.
    let Some(d) = device(2, &[Low]) else {
        return;
    };
    assert_eq!(queues(&d, 2).0, [Low, Normal]);
}

// Fails if the streams are not created with the mapped priority (checked:
// `Stream::new` calling `cuStreamCreate` again makes the High queue's
// stream report 0, not -5; mapping High to `least` does the same).
#[test]
fn streams_are_created_with_the_mapped_cuda_priorities() {
    use Priority::{High, Low, Normal};
    let Some(d) = device(3, &[High, Normal, Low]) else {
        return;
    };
    let (least, greatest) = d.cuda_stream_priority_range().unwrap();
    if cuda::is_sim() {
        // A range with room in it, so the check below cannot pass because
        // every priority is the same number.
        assert_eq!((least, greatest), (0, -5));
    }
    assert!(greatest <= least, "range ({least}, {greatest})");
    assert_eq!(queues(&d, 3).1, [greatest, least, least]);
}

// Fails if Normal is not the CUDA default, which would lift a default
// device's streams above every other stream of the process (checked:
// mapping Normal to `greatest` makes these report -5, not 0).
#[test]
fn a_default_device_keeps_the_default_stream_priority() {
    let Some(d) = device(2, &[]) else {
        return;
    };
    let (least, _) = d.cuda_stream_priority_range().unwrap();
    assert_eq!(queues(&d, 2), (vec![Priority::Normal; 2], vec![least; 2]));
}

// Fails without the config check (checked: removing the `check` call in
// `CudaDevice::open` opens the device, and `unwrap_err` panics).
#[test]
fn more_priorities_than_queues_is_invalid_argument() {
    // The driver loaded where there is one, so that without the check the
    // device would open.
    let _ = cuda::driver();
    let e = Device::cuda_with_priorities(
        0,
        CudaConfig {
            queues: 1,
            ..Default::default()
        },
        &[Priority::High, Priority::Low],
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.message().contains("2 queue priorities for 1 queue"),
        "{e}"
    );
}
