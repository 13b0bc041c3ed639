//! Every device scenario (`common/scenarios.rs`, shared with the CPU
//! device) on the CUDA device, once per completion path: on a real GPU when
//! one is present, else on the project's simulated driver, which also
//! checks that fenceline never misuses the driver. Skipped, with the
//! reason printed, when neither is present.
#![cfg(feature = "cuda")]

#[path = "common/cuda.rs"]
mod cuda;
#[path = "common/scenarios.rs"]
mod scenarios;
#[cfg(feature = "vulkan")]
#[path = "common/vulkan.rs"]
mod vulkan;

mod host_function {
    crate::all_scenarios!(crate::scenarios::Rig::cuda(
        fenceline::CompletionMode::HostFunction
    ));
}

mod event_thread {
    crate::all_scenarios!(crate::scenarios::Rig::cuda(
        fenceline::CompletionMode::EventThread
    ));
}
