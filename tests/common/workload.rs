//! A small mixed workload shared by the stats and trace tests (included
//! with `#[path = "common/workload.rs"] mod workload;`).
#![allow(dead_code)] // each test binary uses part of it

use fenceline::{CommandBuffer, CpuConfig, Device, Queue, Semaphore};

/// A CPU device with 2 parking workers and `queues` queues.
pub fn device(queues: usize) -> Device {
    Device::cpu_with(CpuConfig {
        workers: 2,
        queues,
        spin: false,
    })
    .unwrap()
}

/// A command buffer with one 16-tile dispatch that does nothing.
pub fn dispatch_16(d: &Device) -> CommandBuffer {
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch([16, 1, 1], |_| Ok(())).unwrap();
    cb.end().unwrap();
    cb
}

/// Actions `from..to` of a chain on `s` (action `i` waits for `i` and
/// signals `i + 1`), alternating the queues and cycling through an
/// execute of `cb`, a barrier and a host call.
pub fn mixed(qs: &[Queue], cb: &CommandBuffer, s: &Semaphore, from: u64, to: u64) {
    for i in from..to {
        let q = &qs[i as usize % qs.len()];
        match i % 3 {
            0 => q.execute(&[(s, i)], &[(s, i + 1)], &[cb]).unwrap(),
            1 => q.barrier(&[(s, i)], &[(s, i + 1)]).unwrap(),
            _ => q.host_call(&[(s, i)], &[(s, i + 1)], || Ok(())).unwrap(),
        }
    }
}
