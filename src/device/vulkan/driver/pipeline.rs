//! Compute pipelines made from SPIR-V.

use std::ffi::CStr;
use std::sync::Arc;

use ash::vk;

use super::{internal, Gpu};
use crate::error::{Error, ErrorKind};

/// Most storage buffers one dispatch binds.
pub(crate) const MAX_DISPATCH_BUFFERS: usize = 16;

/// A compute pipeline made from SPIR-V: its storage buffers are set 0's
/// bindings `0..bindings`, pushed with each dispatch, and it takes
/// `push_bytes` of push constants.
pub(crate) struct Pipeline {
    gpu: Arc<Gpu>,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    pub(super) layout: vk::PipelineLayout,
    pub(super) pipeline: vk::Pipeline,
    pub(crate) bindings: u32,
    pub(crate) push_bytes: u32,
}

impl Pipeline {
    /// A pipeline of entry point `entry` of the SPIR-V module `words`.
    ///
    /// # Errors
    /// `InvalidArgument` if the driver refuses the module or the pipeline
    /// (the validation layer says why); `Internal` for any other failure.
    pub(crate) fn new(
        gpu: &Arc<Gpu>,
        words: &[u32],
        entry: &CStr,
        bindings: u32,
        push_bytes: u32,
    ) -> Result<Pipeline, Error> {
        if bindings as usize > MAX_DISPATCH_BUFFERS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a kernel of {bindings} buffers: at most {MAX_DISPATCH_BUFFERS}"),
            ));
        }
        let d = &gpu.device;
        let refused = |call: &str, r: vk::Result| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("{call} refused the kernel: {r:?}"),
            )
        };
        let info = vk::ShaderModuleCreateInfo::default().code(words);
        // SAFETY: a live device; `info` lives for the call.
        let module = unsafe { d.create_shader_module(&info, None) }
            .map_err(|r| refused("vkCreateShaderModule", r))?;
        let mut this = Pipeline {
            gpu: gpu.clone(),
            module,
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            bindings,
            push_bytes,
        };
        let slots: Vec<_> = (0..bindings)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let info = vk::DescriptorSetLayoutCreateInfo::default()
            .flags(vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR)
            .bindings(&slots);
        // SAFETY: a live device; `info` lives for the call.
        this.set_layout = unsafe { d.create_descriptor_set_layout(&info, None) }
            .map_err(|r| internal("vkCreateDescriptorSetLayout", r))?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(push_bytes)];
        let sets = [this.set_layout];
        let info = vk::PipelineLayoutCreateInfo::default()
            .set_layouts(&sets)
            .push_constant_ranges(if push_bytes > 0 { &ranges } else { &[] });
        // SAFETY: a live device; `info` lives for the call.
        this.layout = unsafe { d.create_pipeline_layout(&info, None) }
            .map_err(|r| internal("vkCreatePipelineLayout", r))?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(entry);
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(this.layout)];
        // SAFETY: a live device; `info` lives for the call.
        let made = unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
        this.pipeline = match made {
            Ok(p) => p[0],
            Err((_, r)) => return Err(refused("vkCreateComputePipelines", r)),
        };
        Ok(this)
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let d = &self.gpu.device;
        // SAFETY: each made in `new` (null ones are ignored by the
        // driver), destroyed once; no submission that uses them is in
        // flight (their users wait for them first).
        unsafe { d.destroy_pipeline(self.pipeline, None) };
        // SAFETY: as above.
        unsafe { d.destroy_pipeline_layout(self.layout, None) };
        // SAFETY: as above.
        unsafe { d.destroy_descriptor_set_layout(self.set_layout, None) };
        // SAFETY: as above.
        unsafe { d.destroy_shader_module(self.module, None) };
    }
}
