//! Every device scenario (`common/scenarios.rs`, shared with the CPU and
//! CUDA devices) on the Vulkan device: on a real driver (Mesa's lavapipe in
//! CI) with the Khronos validation layer and synchronization validation,
//! where any validation message fails the scenario. Skipped, with the
//! reason printed, without a driver, unless `FENCELINE_VULKAN` is set.
#![cfg(feature = "vulkan")]

#[cfg(feature = "cuda")]
#[path = "common/cuda.rs"]
mod cuda;
#[path = "common/scenarios.rs"]
mod scenarios;
#[path = "common/vulkan.rs"]
mod vulkan;

crate::all_scenarios!(crate::scenarios::Rig::vulkan());
