//! The estimator's model of CubeCL's CUDA memory pool (`wanda::memory::pool`) against
//! cubecl-runtime's own memory manager, run on host bytes with CUDA's settings (largest page a
//! quarter of the GPU, 512-byte alignment, sliced pools): the device allocations the estimate
//! lists for each stage are reserved in order, released when the stage ends, and the manager's
//! reserved bytes must equal what the estimate says the pool holds.

use std::sync::Arc;

use cubecl_ir::MemoryDeviceProperties;
use cubecl_runtime::logging::ServerLogger;
use cubecl_runtime::memory_management::{
    MemoryConfiguration, MemoryManagement, MemoryManagementOptions,
};
use cubecl_runtime::storage::BytesStorage;
use wanda::memory::device::{DeviceKind, Precision};
use wanda::memory::estimate::{estimate_prune, PruneRun};
use wanda::model::arch::{ModelShape, Place};
use wanda::prune::Method;

/// Bytes CubeCL's manager reserves for `stages` (each a list of allocations alive together)
/// on a GPU of `memory` bytes.
fn replay(memory: u64, stages: &[Vec<u64>]) -> u64 {
    let mut manager = MemoryManagement::from_configuration(
        BytesStorage::default(),
        &MemoryDeviceProperties {
            max_page_size: memory / 4,
            alignment: 512,
        },
        MemoryConfiguration::SubSlices,
        Arc::new(ServerLogger::default()),
        MemoryManagementOptions::new("replay"),
    );
    for stage in stages {
        let handles: Vec<_> = stage
            .iter()
            .map(|&bytes| manager.reserve(bytes).expect("a page takes it"))
            .collect();
        drop(handles);
    }
    manager.memory_usage().bytes_reserved
}

fn shape(
    parameters: u64,
    h: usize,
    i: usize,
    layers: usize,
    heads: usize,
    kv: usize,
) -> ModelShape {
    ModelShape {
        parameters,
        hidden_size: h,
        intermediate_size: i,
        num_hidden_layers: layers,
        num_attention_heads: heads,
        num_key_value_heads: kv,
        head_dim: h / heads,
        vocab_size: 49152,
        tie_word_embeddings: true,
        max_position_embeddings: 8192,
        gated_mlp: true,
        parallel_residual: false,
        experts: 0,
        shared_expert_size: 0,
        shared_expert_gated: false,
        dense_layers: 0,
        dense_intermediate_size: 0,
        latent_attention: None,
        generic_layers: false,
    }
}

#[test]
fn the_pool_model_reserves_what_cubecls_manager_reserves() {
    let memory = 16u64 << 30;
    let smollm2 = shape(134_515_008, 576, 1536, 30, 9, 3);
    let llama1b = shape(1_073_809_408, 2048, 8192, 16, 32, 8);
    for (shape, precision, lean, nsamples, seqlen) in [
        (&smollm2, Precision::F32, false, 16, 512),
        (&smollm2, Precision::F16, true, 32, 1024),
        (&llama1b, Precision::F32, false, 16, 512),
        (&llama1b, Precision::F16, false, 32, 2048),
        (&llama1b, Precision::F16, true, 128, 2048),
    ] {
        let run = PruneRun {
            method: Some(Method::Wanda),
            nsamples,
            seqlen,
            batch: if lean { 1 } else { 8 },
            eval_seqlen: Some(seqlen),
            keeps_dense_copy: false,
            streaming: lean,
            checkpoint_bytes: 0,
            calibration_text_bytes: 0,
            eval_text_bytes: 0,
            device: DeviceKind::Cuda,
            precision,
            activations_on_host: lean,
            gpu_memory: Some(memory),
            owl: false,
            dsnot: false,
            weight_update: None,
            zeroshot: false,
            eval_group: 8,
            expert_removal: None,
        };
        let estimate = estimate_prune(shape, &run);
        let stages: Vec<Vec<u64>> = estimate
            .stages
            .iter()
            .map(|stage| stage.device_allocations())
            .collect();
        // What the estimate says the pool holds at the end: the last stage's tensors and the
        // unused parts of every page reserved so far.
        let last = estimate.stages.last().unwrap();
        let modelled: u64 = last
            .breakdown
            .items
            .iter()
            .filter(|i| i.place == Place::Device)
            .filter(|i| !i.allocations.is_empty() || i.name.starts_with("memory pool"))
            .map(|i| i.bytes)
            .sum();
        let reserved = replay(memory, &stages);
        assert_eq!(
            modelled, reserved,
            "H {} {precision:?} lean {lean} {nsamples} × {seqlen}",
            shape.hidden_size
        );
    }
}
