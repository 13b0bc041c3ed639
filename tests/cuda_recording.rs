//! Command buffers on the CUDA device (simulated driver when no GPU):
//! one-shot ones issue their commands on the stream with no graph, and
//! reusable ones build one graph at `end`; both read back exactly,
//! recorded anew every frame or reset while a submission is in flight.
#![cfg(feature = "cuda")]

use std::time::Duration;

use fenceline::{CudaConfig, Device, KernelArg, Semaphore};

#[path = "common/cuda.rs"]
mod cuda;

const T: Duration = Duration::from_secs(10);

/// The simulated driver's instantiation count is process-wide: one test
/// at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Records a frame: fill `a`, update the tail of `b`, barrier, copy the
/// head of `a` into `b`, and launch the counting kernel on `counter`
/// (2 x 2 threads: +4).
fn record(
    cb: &mut fenceline::CommandBuffer,
    device: &Device,
    [a, b, counter]: [&fenceline::Buffer; 3],
    f: u8,
) {
    let kernel = device
        .load_kernel(cuda::COUNT_PTX, "fenceline_count")
        .unwrap();
    cb.fill(a, 0, 64, &[f, f.wrapping_add(1)]).unwrap();
    cb.update(&[f; 8], b, 56).unwrap();
    cb.barrier().unwrap();
    cb.copy(a, 0, b, 0, 32).unwrap();
    cb.launch(
        &kernel,
        [2, 1, 1],
        [2, 1, 1],
        0,
        &[KernelArg::Buffer(counter, 0)],
    )
    .unwrap();
    cb.end().unwrap();
}

fn check(b: &fenceline::Buffer, counter: &fenceline::Buffer, f: u8, launches: u32) {
    let mut out = [0u8; 64];
    b.read(0, &mut out).unwrap();
    let pattern: Vec<u8> = (0..32)
        .map(|i| if i % 2 == 0 { f } else { f.wrapping_add(1) })
        .collect();
    assert_eq!(out[..32], pattern[..], "frame {f}: the copy of the fill");
    assert_eq!(out[56..], [f; 8], "frame {f}: the update");
    if cuda::is_sim() {
        let mut v = [0u8; 4];
        counter.read(0, &mut v).unwrap();
        assert_eq!(u32::from_le_bytes(v), 4 * launches, "frame {f}");
    }
}

/// The CUDA device (or `None`: no driver) and three buffers: two of 64
/// bytes, one of 4 for the counting kernel.
fn setup() -> Option<(Device, [fenceline::Buffer; 3])> {
    let device = cuda::device_with(CudaConfig::default())?;
    cuda::register_test_kernels();
    let bufs = [
        device.buffer(64).unwrap(),
        device.buffer(64).unwrap(),
        device.buffer(4).unwrap(),
    ];
    Some((device, bufs))
}

fn command_buffer(device: &Device, one_shot: bool) -> fenceline::CommandBuffer {
    if one_shot {
        device.command_buffer_one_shot().unwrap()
    } else {
        device.command_buffer().unwrap()
    }
}

#[test]
fn one_shot_command_buffers_issue_directly_and_reusable_ones_build_a_graph() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, bufs)) = setup() else {
        return;
    };
    let queue = device.queue(0).unwrap();
    let [_, b, counter] = &bufs;
    let done = Semaphore::new(0);
    let mut launches = 0;
    for frame in 1..=40u64 {
        let one_shot = frame % 2 == 1;
        let before = cuda::graph_instantiations();
        let mut cb = command_buffer(&device, one_shot);
        record(
            &mut cb,
            &device,
            [&bufs[0], &bufs[1], &bufs[2]],
            frame as u8,
        );
        if let (Some(before), Some(after)) = (before, cuda::graph_instantiations()) {
            assert_eq!(after - before, u64::from(!one_shot), "frame {frame}");
        }
        queue
            .execute(&[(&done, frame - 1)], &[(&done, frame)], &[&cb])
            .unwrap();
        drop(cb); // the submission holds the recording
        done.wait(frame, T).unwrap();
        launches += 1;
        check(b, counter, frame as u8, launches);
    }
    // A one-shot command buffer may be submitted again: every command is
    // issued again.
    let mut cb = command_buffer(&device, true);
    record(&mut cb, &device, [&bufs[0], &bufs[1], &bufs[2]], 99);
    for frame in 41..=42 {
        queue
            .execute(&[(&done, frame - 1)], &[(&done, frame)], &[&cb])
            .unwrap();
    }
    done.wait(42, T).unwrap();
    launches += 2;
    check(b, counter, 99, launches);
    assert_eq!(cuda::misuse_count(), 0, "{}", cuda::last_misuse());
}

#[test]
fn reset_while_a_cuda_submission_of_the_old_recording_waits() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, bufs)) = setup() else {
        return;
    };
    let queue = device.queue(0).unwrap();
    let (go, done) = (Semaphore::new(0), Semaphore::new(0));
    for one_shot in [false, true] {
        let base = if one_shot { 2 } else { 0 };
        let mut cb = command_buffer(&device, one_shot);
        record(
            &mut cb,
            &device,
            [&bufs[0], &bufs[1], &bufs[2]],
            10 + base as u8,
        );
        queue
            .execute(&[(&go, base + 1)], &[(&done, base + 1)], &[&cb])
            .unwrap();
        cb.reset().unwrap();
        record(
            &mut cb,
            &device,
            [&bufs[0], &bufs[1], &bufs[2]],
            20 + base as u8,
        );
        queue
            .execute(&[(&done, base + 1)], &[(&done, base + 2)], &[&cb])
            .unwrap();
        go.signal(base + 1).unwrap();
        done.wait(base + 2, T).unwrap();
        // Both ran, old then new: the new frame's bytes are what is left.
        check(
            &bufs[1],
            &bufs[2],
            20 + base as u8,
            2 * (base as u32 / 2 + 1),
        );
    }
    assert_eq!(cuda::misuse_count(), 0, "{}", cuda::last_misuse());
}
