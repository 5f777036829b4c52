//! The memory a pruning run will need, predicted from the model's shape and the run's settings
//! alone — pure arithmetic, no tensors.
//!
//! The run is split into its stages (`load`, `prune` with calibration, `eval`); each gets a
//! [`Breakdown`] of what is alive at its peak, and the run's peak is the largest. Every share
//! is one formula below, in bytes, with `f` the bytes of the device's precision (4 for f32,
//! 2 for bf16 and f16: weights and activations are stored in it) and f32 = 4 B for what every
//! precision computes in f32 (attention, norms, log-probabilities, statistics). Symbols: `P`
//! parameters, `L` layers, `H` width, `I` MLP width, `nh` query heads, `d` head width, `V`
//! vocabulary, `n` calibration samples, `s` their length, `b` samples per forward pass
//! (`min(batch, n)`), `e` the evaluation window.
//!
//! - weights: `P × f` (checkpoints of any type are converted to the device's precision);
//! - tokenisation, while a text is read: its bytes × [`TOKENIZE_BYTES_PER_TEXT_BYTE`];
//! - checkpoint pages, while loading: the memory-mapped checkpoint's pages count in the
//!   resident set while they are read, and each tensor's leave it once it is read; in memory,
//!   the largest tensor's pages and host copies ([`tensor_being_read`]); streamed, the shell's
//!   share of the pages (its parameters over all) and one layer's, as an upper bound;
//! - pruned copy: `L × linears × f` when the dense model must stay for other cells (a
//!   pipeline); `wanda prune` prunes in place;
//! - calibration activations: `(n + b) × s × H × f` — every sample's input of the current
//!   layer, plus one batch's output while the next layer's inputs replace them batch by batch;
//!   kept on the host (`activations_on_host`, a GPU only), `n × s × H × f` there and the batch
//!   in and out, `2·b × s × H × f`, on the device;
//! - attention scores: on the generic path (CUDA, burn-flex) one block of `r` query rows at a
//!   time, `b × nh × r × s × 4 × ATTENTION_SCORE_COPIES` with `r` from
//!   [`attention_block_rows`]; the fused CPU kernels, in memory and streamed, one block of
//!   [`ATTENTION_ROWS`] rows of a kv group's query heads per thread (see [`forward`]);
//! - layer intermediates: `b × s × (4·nh·d × 4 + 3·I × f)` (q, k and v repeated to all heads
//!   and the attention output, in f32; gate, up and their product; with experts `I` is the
//!   wider of an expert and a shared expert, and `3·H × f` more for the gathered rows);
//! - statistics: Wanda `b × s × I × 4` (the squared MLP input, the widest); SparseGPT the
//!   Hessians of the four shared inputs `(H² + (nh·d)² + H² + I²) × (4 + 8)` (f32 sums on the
//!   device, f64 on the host);
//! - pruning buffers: the layer's pruned linears held until all seven succeed, as the masks of
//!   their zeros `linears/L × 1` (SparseGPT's updated weights `linears/L × 4`; nothing on the
//!   default CPU backend, where the layer's own buffers move to the host and back), plus for the
//!   widest linear `in × out × 12` (its host copy, its device copy while the mask is applied,
//!   scores or sort keys) or `in² × 8 × 3` (SparseGPT: Hessian, its Cholesky factor and
//!   inverse in f64), or with DSnoT at least `in × out ×` [`DSNOT_BYTES_PER_WEIGHT`];
//! - OWL: its dense pass holds what the pruning pass holds plus one layer's pooled Wanda scores,
//!   `linears/L × 4` (on the host); magnitude with OWL or DSnoT calibrates like Wanda;
//! - DSnoT: one batch's widest input copied to the host for its moments, `b × s × I × 4`;
//! - eval logits: with the fused CPU kernels [`HEAD_ROWS`] rows of logits at a time (the head
//!   read in place), elsewhere `e × V × 4 × LOGIT_COPIES` and on burn-flex the LM head's
//!   operands `V × H × f × HEAD_OPERAND_COPIES`, with the attention and intermediates of one
//!   window;
//! - framework overhead: [`CPU_OVERHEAD_BYTES`] (measured: the resident set of `wanda`
//!   with a tokenizer loaded and no model) or [`CUDA_OVERHEAD_BYTES`] on a GPU, and for a
//!   vocabulary above SmolLM2's [`TOKENIZER_BYTES_PER_TOKEN`] per further entry;
//! - on a GPU of known size (`gpu_memory`), the unused parts of CubeCL's pool pages: every
//!   transient device tensor above is a slice of a page whose size depends on the tensor's
//!   and the GPU's ([`super::pool`]), pages are never given back, so each stage counts the
//!   pages it needs and those earlier stages reserved, minus its tensors. On a GPU the LM
//!   head's product reads the weight in place (no operand copies).
//!
//! With layer streaming only the embeddings, the layer in use and the activations are in
//! memory (on the device): the other layers stay on disk, in the checkpoint (mapped while
//! layers are read from it) or, pruned, in the layer store; evaluation adds the residual
//! streams of `eval_group` windows ([`PruneRun::eval_group`]). On the CPU device and host
//! are one pool.
//!
//! The run's settings, the model's dimensions and the result types are in `dims.rs`, every
//! share's formula in `shares.rs`; this file puts the stages together.
//!
//! [`tensor_being_read`]: shares::tensor_being_read
//! [`forward`]: shares::forward
//! [`attention_block_rows`]: crate::model::decoder::attention_block_rows
//! [`ATTENTION_ROWS`]: crate::model::kernels::ATTENTION_ROWS

use super::device::DeviceKind;
use super::pool::{PoolLadder, PoolPages};
use crate::eval::zeroshot::loglik::BATCH_TOKENS as ZEROSHOT_BATCH_TOKENS;
use crate::model::arch::{gib, Breakdown, ModelShape, Place};
use crate::model::kernels::HEAD_ROWS;

mod dims;
mod shares;

pub use dims::{Estimate, PruneRun, StageEstimate};
pub use shares::{
    ATTENTION_SCORE_COPIES, ATTENTION_THREADS, CPU_OVERHEAD_BYTES, CUBLAS_BYTES,
    CUDA_OVERHEAD_BYTES, DSNOT_BYTES_PER_WEIGHT, HEAD_OPERAND_COPIES, LOGIT_COPIES, OVERHEAD_VOCAB,
    TOKENIZER_BYTES_PER_TOKEN, TOKENIZE_BYTES_PER_TEXT_BYTE,
};

use dims::Dims;
use shares::{
    calibration, eval_stage, forward, overhead, pruning_buffers, tensor_being_read, tokenise,
    weights, F32,
};

/// Predicts the memory of `run` on a model of `shape`.
pub fn estimate_prune(shape: &ModelShape, run: &PruneRun) -> Estimate {
    let m = Dims::new(shape);
    // Device placement: on the CPU everything is device memory (one pool).
    let host = match run.device {
        DeviceKind::Cpu | DeviceKind::CpuFlex => Place::Device,
        DeviceKind::Cuda => Place::Host,
    };
    let mut stages = Vec::new();

    let mut load = Breakdown::default();
    overhead(&mut load, run.device, host, &m);
    weights(&mut load, shape, run, &m, host, None);
    if run.streaming {
        // Streamed, the shell's share of the checkpoint pages (an upper bound: they are
        // released tensor by tensor), and one layer's in every stage (`weights`).
        let shell = shape.embedding_and_head_parameters();
        let pages = (u128::from(run.checkpoint_bytes) * u128::from(shell)
            / u128::from(shape.parameters.max(1))) as u64;
        load.push(
            "checkpoint pages (the embeddings')",
            pages,
            host,
            format!(
                "{} B of checkpoint files × {shell} / {} params",
                run.checkpoint_bytes, shape.parameters
            ),
        );
    } else {
        tensor_being_read(&mut load, shape, run, host);
    }
    stages.push(StageEstimate {
        stage: "load",
        breakdown: load,
    });

    if let Some(method) = run.method {
        if run.calibrates() {
            stages.push(tokenise(
                "calibration text",
                shape,
                run,
                &m,
                host,
                run.calibration_text_bytes,
            ));
        }
        let mut prune = Breakdown::default();
        overhead(&mut prune, run.device, host, &m);
        // The copy is whole until its layers are pruned.
        weights(&mut prune, shape, run, &m, host, Some(shape));
        if run.calibrates() {
            calibration(&mut prune, run, &m, host, method);
        }
        pruning_buffers(&mut prune, run, &m, host, method);
        stages.push(StageEstimate {
            stage: "prune",
            breakdown: prune,
        });
    }

    if let Some(e) = run.eval_seqlen {
        stages.push(tokenise(
            "eval text",
            shape,
            run,
            &m,
            host,
            run.eval_text_bytes,
        ));
        stages.push(eval_stage(shape, run, &m, host, e as u64));
    }
    if run.zeroshot {
        // One batch of requests, padded to `BATCH_TOKENS` at most, through the decoder (as
        // one sequence: the worst case of its attention); the head sees continuation rows a
        // block at a time.
        let t = ZEROSHOT_BATCH_TOKENS as u64;
        let mut zeroshot = Breakdown::default();
        overhead(&mut zeroshot, run.device, host, &m);
        let after = run.pruned_shape(shape);
        weights(
            &mut zeroshot,
            shape,
            run,
            &m,
            host,
            run.method.map(|_| &after),
        );
        zeroshot.push_allocations(
            "zero-shot logits (a block of rows)",
            1,
            HEAD_ROWS as u64 * m.v * F32,
            Place::Device,
            format!("{HEAD_ROWS} rows × {} × 4 B", m.v),
        );
        forward(&mut zeroshot, run, &m, 1, t);
        stages.push(StageEstimate {
            stage: "eval (zero-shot)",
            breakdown: zeroshot,
        });
    }
    if let (DeviceKind::Cuda, Some(memory)) = (run.device, run.gpu_memory) {
        pool_pages(&mut stages, memory);
    }
    Estimate { stages }
}

/// Adds to each stage the unused parts of the CUDA pool's pages ([`super::pool`]): the pages
/// its device allocations need, and every page an earlier stage reserved (pools keep them).
fn pool_pages(stages: &mut [StageEstimate], memory: u64) {
    let ladder = PoolLadder::for_gpu(memory);
    let mut reserved = PoolPages::default();
    for stage in stages {
        let allocations = stage.device_allocations();
        let live: u64 = allocations.iter().sum();
        if live == 0 && reserved.pages.iter().all(|&n| n == 0) {
            continue;
        }
        let (pages, formula) = match ladder.pages(&allocations) {
            Ok(pages) => {
                reserved = reserved.max(&pages);
                let bytes = ladder.bytes(&reserved);
                (
                    bytes.saturating_sub(live),
                    format!(
                        "{} of pages reserved (a {} GPU's pool) − {} of tensors in them",
                        gib(bytes),
                        gib(memory),
                        gib(live)
                    ),
                )
            }
            // CubeCL cannot place it: no page is that large. The estimate says so by the
            // size it would need.
            Err(bytes) => (
                bytes,
                format!(
                    "one tensor of {} exceeds the largest page of a {} GPU ({})",
                    gib(bytes),
                    gib(memory),
                    gib(memory / 4)
                ),
            ),
        };
        stage.breakdown.push(
            "memory pool pages (unused parts)",
            pages,
            Place::Device,
            formula,
        );
    }
}

/// The breakdown as aligned text lines: name (marked `[host]` when not on the device), GiB,
/// formula.
pub fn render(breakdown: &Breakdown) -> String {
    let mut out = String::new();
    for item in &breakdown.items {
        let name = match item.place {
            Place::Device => item.name.clone(),
            Place::Host => format!("{} [host]", item.name),
        };
        out.push_str(&format!(
            "  {:<36} {:>10}  {}\n",
            name,
            gib(item.bytes),
            item.formula
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::dims::fixtures::{run, tiny};
    use super::*;
    use crate::eval::perplexity::STREAMED_WINDOW_GROUP;
    use crate::memory::device::Precision;
    use crate::model::decoder::attention_block_rows;
    use crate::model::kernels::ATTENTION_ROWS;
    use crate::prune::experts::ExpertAmount;
    use crate::prune::{Method, WeightUpdate};

    fn item(e: &Estimate, stage: &str, name: &str) -> u64 {
        let stage = e.stages.iter().find(|s| s.stage == stage).unwrap();
        stage
            .breakdown
            .items
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.bytes)
            .unwrap_or_else(|| panic!("no `{name}` in {stage:?}"))
    }

    #[test]
    fn wanda_run_by_hand() {
        let e = estimate_prune(&tiny(), &run(Method::Wanda));
        let names: Vec<_> = e.stages.iter().map(|s| s.stage).collect();
        assert_eq!(
            names,
            ["load", "calibration text", "prune", "eval text", "eval"]
        );
        assert_eq!(item(&e, "load", "weights"), 340 * 4);
        // The largest tensor, a stacked gate/up's 2 × 6 × 4 = 48 (the embeddings' 40, q/k/v's
        // 32), its pages at 1000 / 340 ≈ 3 B a parameter and its f32 copy beyond the 4 B the
        // weights count, or its host and device copies: 48 × max(3 + 4 − 4, 4).
        assert_eq!(item(&e, "load", "the tensor being read"), 48 * 4);
        let load = &e.stages[0].breakdown.items;
        assert!(load.iter().all(|i| !i.name.starts_with("checkpoint pages")));
        assert_eq!(item(&e, "calibration text", "tokenisation"), 10 * 100);
        assert_eq!(item(&e, "eval text", "tokenisation"), 20 * 100);
        // Linears per layer: q 16 + k, v 2·8 + o 16 + MLP 3·24 = 120; two layers, f32.
        assert_eq!(item(&e, "prune", "pruned copy"), 2 * 120 * 4);
        // (n + b) × s × H × 4 = 5 × 5 × 4 × 4.
        assert_eq!(item(&e, "prune", "calibration activations"), 400);
        // The fused kernels' blocks: 64 threads × 2 query heads of a kv group × 64 rows × s × 4.
        assert_eq!(
            item(&e, "prune", "attention score blocks"),
            64 * 2 * 64 * 5 * 4
        );
        // b × s × (4·nh·d + 3·I) × 4 = 10 × (16 + 18) × 4.
        assert_eq!(item(&e, "prune", "layer intermediates"), 1360);
        // b × s × I × 4.
        assert_eq!(item(&e, "prune", "statistics"), 240);
        // The widest linear (4 × 6) × 12; the layer's weights move to the host and back.
        assert_eq!(item(&e, "prune", "pruning buffers"), 288);
        // The fused kernels: e rows of logits, e × V × 4, the head read in place.
        assert_eq!(item(&e, "eval", "eval logits (a block of rows)"), 160);
        assert!(e.stages[4]
            .breakdown
            .items
            .iter()
            .all(|i| i.name != "LM head operands"));
        // 64 × 2 × 64 × e × 4; 1 × e × 34 × 4.
        assert_eq!(
            item(&e, "eval", "attention score blocks"),
            64 * 2 * 64 * 4 * 4
        );
        assert_eq!(item(&e, "eval", "layer intermediates"), 544);
        // The prune stage holds the most (overhead, weights, pruned copy and its buffers).
        let prune = CPU_OVERHEAD_BYTES + 1360 + 960 + 400 + 163_840 + 1360 + 240 + 288;
        assert_eq!(e.peak(Place::Device), ("prune", prune));
        // burn-flex computes the head with Burn's ops: V × H × 4 × 3 operands, e × V × 4.
        let mut flex = run(Method::Wanda);
        flex.device = DeviceKind::CpuFlex;
        let e = estimate_prune(&tiny(), &flex);
        assert_eq!(item(&e, "eval", "LM head operands"), 480);
        assert_eq!(item(&e, "eval", "eval logits"), 160);
    }

    #[test]
    fn a_parallel_layer_holds_the_attention_output_beside_the_mlp() {
        let shape = ModelShape {
            parallel_residual: true,
            ..tiny()
        };
        let e = estimate_prune(&shape, &run(Method::Wanda));
        // b × s × (4·nh·d + H + 3·I) × 4 = 10 × (16 + 4 + 18) × 4.
        assert_eq!(item(&e, "prune", "layer intermediates"), 1520);
        assert_eq!(
            item(&e, "eval", "layer intermediates"),
            4 * (16 + 4 + 18) * 4
        );
    }

    #[test]
    fn experts_add_their_hessians_and_gathered_rows_on_either_path() {
        let shape = ModelShape {
            experts: 3,
            ..tiny()
        };
        let e = estimate_prune(&shape, &run(Method::Sparsegpt));
        // (2·H² + (nh·d)² + E·(H² + I²)) × 12 = (32 + 16 + 3 · 52) × 12.
        assert_eq!(item(&e, "prune", "statistics"), (32 + 16 + 3 * 52) * 12);
        // b × s × (4·nh·d + 3·H + 3·I) × 4 = 10 × (16 + 12 + 18) × 4.
        assert_eq!(item(&e, "prune", "layer intermediates"), 1840);
        // The fused kernels run them: their per-thread blocks of query rows of a kv group.
        let group = (shape.num_attention_heads / shape.num_key_value_heads) as u64;
        assert_eq!(
            item(&e, "prune", "attention score blocks"),
            ATTENTION_THREADS * group * ATTENTION_ROWS as u64 * 5 * 4
        );
        // Layers only the generic path runs (GPT-OSS's, Llama 4's): Burn's attention blocks,
        // b × nh × rows × s × 4 × copies.
        let generic = ModelShape {
            generic_layers: true,
            ..shape.clone()
        };
        let rows = attention_block_rows(2, 2, 5).min(5) as u64;
        assert_eq!(
            item(
                &estimate_prune(&generic, &run(Method::Sparsegpt)),
                "prune",
                "attention score blocks"
            ),
            2 * 2 * rows * 5 * 4 * ATTENTION_SCORE_COPIES
        );
        // A shared expert wider than the routed ones widens the MLP's buffers to its width:
        // 10 × (16 + 12 + 3 · 8) × 4; one narrower leaves them as they were.
        let with_shared = |width| {
            let shape = ModelShape {
                shared_expert_size: width,
                ..shape.clone()
            };
            item(
                &estimate_prune(&shape, &run(Method::Sparsegpt)),
                "prune",
                "layer intermediates",
            )
        };
        assert_eq!(with_shared(8), 2080);
        assert_eq!(with_shared(2), 1840);
    }

    #[test]
    fn removed_experts_leave_the_model_the_stages_after_pruning_hold() {
        // Four experts a layer (H = 4, I = 6: 3·4·6 + 4 = 76 parameters each with its router
        // column), two layers: removing half takes 2 · 2 · 76 = 304 of 1,000 parameters.
        let shape = ModelShape {
            experts: 4,
            parameters: 1000,
            ..tiny()
        };
        let mut r = run(Method::Reap);
        r.expert_removal = Some(ExpertAmount(0.5));
        let after = r.pruned_shape(&shape);
        assert_eq!((after.experts, after.parameters), (2, 696));
        let e = estimate_prune(&shape, &r);
        // The copy is whole while it is pruned; the evaluation holds the dense model and the
        // copy of two experts a layer: attention (4·4 + 2·4·2 + 4·4 = 48) + 2 · 76 a layer.
        assert_eq!(item(&e, "prune", "pruned copy"), 2 * (48 + 4 * 76) * 4);
        assert_eq!(item(&e, "eval", "pruned copy"), 2 * (48 + 2 * 76) * 4);
        assert_eq!(item(&e, "eval", "weights"), 1000 * 4);
        // In place, the evaluation holds the smaller model alone.
        r.keeps_dense_copy = false;
        let e = estimate_prune(&shape, &r);
        assert_eq!(item(&e, "eval", "weights"), 696 * 4);
        assert_eq!(item(&e, "prune", "weights"), 1000 * 4);
    }

    #[test]
    fn sparsegpt_holds_its_updated_weights_and_other_methods_their_masks() {
        // Off the default CPU backend, whose layers move to the host and back whole.
        let buffers = |method, dsnot| {
            let mut r = run(method);
            r.dsnot = dsnot;
            r.device = DeviceKind::CpuFlex;
            item(&estimate_prune(&tiny(), &r), "prune", "pruning buffers")
        };
        // 120 × 4 + cols² × 8 × 3 with cols = max(H, I, nh·d) = 6.
        assert_eq!(buffers(Method::Sparsegpt, false), 480 + 6 * 6 * 8 * 3);
        // With DSnoT SparseGPT's saliency only orders a mask.
        assert_eq!(
            buffers(Method::Sparsegpt, true),
            120 + (6 * 6 * 8 * 3).max(24 * DSNOT_BYTES_PER_WEIGHT)
        );
        assert_eq!(buffers(Method::Magnitude, false), 120 + 288);
        // A weight update holds SparseGPT's factors and updated weights, plus a mask and its
        // scores, and collects SparseGPT's Hessians beside Wanda's squared inputs.
        let mut r = run(Method::Wanda);
        r.weight_update = Some(WeightUpdate::Sequential);
        r.device = DeviceKind::CpuFlex;
        let e = estimate_prune(&tiny(), &r);
        assert_eq!(
            item(&e, "prune", "pruning buffers"),
            480 + 6 * 6 * 8 * 3 + 24 * 5
        );
        r.device = DeviceKind::Cpu;
        let e = estimate_prune(&tiny(), &r);
        assert_eq!(item(&e, "prune", "pruning buffers"), 6 * 6 * 8 * 3 + 24 * 5);
        let sparsegpt = estimate_prune(&tiny(), &run(Method::Sparsegpt));
        assert_eq!(
            item(&e, "prune", "statistics"),
            item(&sparsegpt, "prune", "statistics")
        );
        assert!(item(&e, "prune", "norms' statistics") > 0);
    }

    #[test]
    fn a_gpu_in_half_precision_stores_two_bytes_and_holds_blocks_of_scores() {
        let mut r = run(Method::Wanda);
        r.device = DeviceKind::Cuda;
        r.precision = Precision::F16;
        let e = estimate_prune(&tiny(), &r);
        assert_eq!(item(&e, "load", "weights"), 340 * 2);
        assert_eq!(item(&e, "prune", "pruned copy"), 2 * 120 * 2);
        // (n + b) × s × H × 2 = 5 × 5 × 4 × 2.
        assert_eq!(item(&e, "prune", "calibration activations"), 200);
        // All 5 rows fit one block: b × nh × 5 × s × 4 × 2 = 2 × 2 × 5 × 5 × 4 × 2.
        assert_eq!(item(&e, "prune", "attention score blocks"), 800);
        // b × s × (4·nh·d × 4 + 3·I × 2) = 10 × (64 + 36).
        assert_eq!(item(&e, "prune", "layer intermediates"), 1000);
        // The head's product reads the weight in place on a GPU.
        assert!(e.stages[4]
            .breakdown
            .items
            .iter()
            .all(|i| i.name != "LM head operands"));
        // The activations on the host: n × s × H × 2 there, a batch in and out on the device.
        r.activations_on_host = true;
        let e = estimate_prune(&tiny(), &r);
        let prune = &e.stages[2].breakdown;
        let on = |name: &str| prune.items.iter().find(|i| i.name == name).unwrap();
        assert_eq!(on("calibration activations").bytes, 3 * 5 * 4 * 2);
        assert_eq!(on("calibration activations").place, Place::Host);
        assert_eq!(on("calibration batch in and out").bytes, 2 * 2 * 5 * 4 * 2);
        assert_eq!(on("calibration batch in and out").place, Place::Device);
    }

    /// Issue 25's target: Llama-2-70B, streamed, wanda at the paper's 128 × 2048 in fp16 fits
    /// a 24 GiB GPU with its headroom, the pool's pages included (39.14 GiB before: whole f32
    /// scores, 4-byte weights).
    #[test]
    fn a_streamed_70b_prune_at_the_papers_settings_fits_24_gib_in_fp16() {
        let shape = ModelShape {
            parameters: 68_976_648_192,
            hidden_size: 8192,
            intermediate_size: 28672,
            num_hidden_layers: 80,
            num_attention_heads: 64,
            num_key_value_heads: 8,
            head_dim: 128,
            vocab_size: 32000,
            tie_word_embeddings: false,
            max_position_embeddings: 4096,
            gated_mlp: true,
            parallel_residual: false,
            experts: 0,
            shared_expert_size: 0,
            shared_expert_gated: false,
            dense_layers: 0,
            dense_intermediate_size: 0,
            latent_attention: None,
            generic_layers: false,
        };
        let r = PruneRun {
            nsamples: 128,
            seqlen: 2048,
            batch: 8,
            eval_seqlen: None,
            keeps_dense_copy: false,
            streaming: true,
            checkpoint_bytes: 0,
            device: DeviceKind::Cuda,
            precision: Precision::F16,
            gpu_memory: Some(24 << 30),
            ..run(Method::Wanda)
        };
        let (_, peak) = estimate_prune(&shape, &r).peak(Place::Device);
        assert!(peak < (24u64 << 30) * 9 / 10, "{}", gib(peak));
        let e = estimate_prune(&shape, &r);
        // 8 × 64 heads × 64 rows × 2048 keys × 4 B × 2, not 16 GiB of whole scores.
        assert_eq!(item(&e, "prune", "attention score blocks"), 512 << 20);
    }

    /// On a 24 GiB GPU the tiny model's tensors all go to the 24 MiB pages (slices up to
    /// 1.5 MiB): one page, reserved in the first stage that allocates and kept after it.
    #[test]
    fn a_gpu_run_counts_the_pools_pages_and_keeps_them_across_stages() {
        let mut r = run(Method::Wanda);
        r.device = DeviceKind::Cuda;
        r.gpu_memory = Some(24 << 30);
        let e = estimate_prune(&tiny(), &r);
        let live = |stage: &str| -> u64 {
            let stage = e.stages.iter().find(|s| s.stage == stage).unwrap();
            stage
                .breakdown
                .items
                .iter()
                .flat_map(|i| i.allocations.iter())
                .map(|(n, each)| n * each)
                .sum()
        };
        let page = 24u64 << 20;
        for stage in ["prune", "eval text", "eval"] {
            assert_eq!(
                item(&e, stage, "memory pool pages (unused parts)") + live(stage),
                page,
                "{stage}"
            );
        }
        // Nothing allocated before calibration, so no pages then.
        let load = &e.stages[0].breakdown;
        assert!(load
            .items
            .iter()
            .all(|i| !i.name.starts_with("memory pool")));
        // A GPU whose size is not known leaves the pool out.
        r.gpu_memory = None;
        let e = estimate_prune(&tiny(), &r);
        assert!(e.stages.iter().all(|s| s
            .breakdown
            .items
            .iter()
            .all(|i| !i.name.starts_with("memory pool"))));
    }

    /// The NVML device peaks of `wanda run scripts/gpu/cell.yaml` on an H200 (143,771 MiB;
    /// `results/gpu-h200-2026-11-27-cublas/`, with cuBLAS's products): wanda 50 %, calibration
    /// 16 × 512, eval 4 × 512, random SmolLM2-135M-, Llama-3.2-1B- and 8-layer
    /// Llama-2-7B-shaped models with a 49,152-token vocabulary; in memory in f32 and f16, and
    /// lean (batch 1, activations on the host, streamed) in f16. With the pool's pages the
    /// estimate is within 15 % of each (0.24–0.84 of them without).
    #[test]
    fn gpu_estimates_are_within_15_percent_of_the_measured_h200_peaks() {
        let shape = |parameters, h, i, layers, heads, kv, tie, context| ModelShape {
            parameters,
            hidden_size: h,
            intermediate_size: i,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim: h / heads,
            vocab_size: 49152,
            tie_word_embeddings: tie,
            max_position_embeddings: context,
            gated_mlp: true,
            parallel_residual: false,
            experts: 0,
            shared_expert_size: 0,
            shared_expert_gated: false,
            dense_layers: 0,
            dense_intermediate_size: 0,
            latent_attention: None,
            generic_layers: false,
        };
        let smollm2 = shape(134_515_008, 576, 1536, 30, 9, 3, true, 8192);
        let llama1b = shape(1_073_809_408, 2048, 8192, 16, 32, 8, true, 131_072);
        let llama7b = shape(2_021_724_160, 4096, 11008, 8, 32, 32, false, 4096);
        let measured = [
            (&smollm2, Precision::F32, false, 4_343_201_792u64),
            (&smollm2, Precision::F16, false, 4_106_223_616),
            (&smollm2, Precision::F16, true, 3_837_788_160),
            (&llama1b, Precision::F32, false, 8_101_298_176),
            (&llama1b, Precision::F16, false, 6_253_707_264),
            (&llama1b, Precision::F16, true, 4_139_778_048),
            (&llama7b, Precision::F32, false, 13_503_561_728),
            (&llama7b, Precision::F16, false, 8_703_180_800),
            (&llama7b, Precision::F16, true, 5_112_856_576),
        ];
        for (shape, precision, lean, peak) in measured {
            let r = PruneRun {
                nsamples: 16,
                seqlen: 512,
                batch: if lean { 1 } else { 8 },
                eval_seqlen: Some(512),
                keeps_dense_copy: false,
                streaming: lean,
                checkpoint_bytes: 0,
                device: DeviceKind::Cuda,
                precision,
                activations_on_host: lean,
                gpu_memory: Some(143_771 << 20),
                ..run(Method::Wanda)
            };
            let (_, estimate) = estimate_prune(shape, &r).peak(Place::Device);
            let ratio = estimate as f64 / peak as f64;
            assert!(
                (0.85..=1.15).contains(&ratio),
                "H {} {precision:?} lean {lean}: {} estimated, {} measured",
                shape.hidden_size,
                gib(estimate),
                gib(peak)
            );
        }
    }

    #[test]
    fn sparsegpt_holds_hessians_in_f32_and_f64() {
        let e = estimate_prune(&tiny(), &run(Method::Sparsegpt));
        // (2·H² + (nh·d)² + I²) × 12 = (32 + 16 + 36) × 12.
        assert_eq!(item(&e, "prune", "statistics"), 1008);
        // The widest input's 6² × 8 × 3; the updated weights are the layer's own buffers.
        assert_eq!(item(&e, "prune", "pruning buffers"), 864);
    }

    #[test]
    fn magnitude_needs_no_calibration_and_a_cli_run_no_copy() {
        let mut r = run(Method::Magnitude);
        r.keeps_dense_copy = false;
        let e = estimate_prune(&tiny(), &r);
        let names: Vec<_> = e.stages.iter().map(|s| s.stage).collect();
        assert_eq!(names, ["load", "prune", "eval text", "eval"]);
        let prune = &e.stages[1].breakdown;
        assert!(prune
            .items
            .iter()
            .all(|i| i.name != "calibration activations" && i.name != "pruned copy"));
    }

    #[test]
    fn streaming_on_a_gpu_keeps_one_layer_and_the_embeddings_on_the_device() {
        let mut r = run(Method::Wanda);
        r.device = DeviceKind::Cuda;
        r.streaming = true;
        let e = estimate_prune(&tiny(), &r);
        // Untied: embeddings and head 2 × V × H, plus one layer's 120 linear weights.
        assert_eq!(
            item(&e, "prune", "weights (embeddings + one layer)"),
            (80 + 120) * 4
        );
        // The host holds one layer's pages of the 1000 B checkpoint and no f32 weights, and
        // pruned layers go to the layer store on disk, not to a pruned copy.
        assert_eq!(item(&e, "prune", "checkpoint pages (one layer's)"), 500);
        let host = e.stages[2].breakdown.total(Place::Host);
        assert_eq!(host, CPU_OVERHEAD_BYTES + 500 + 408);
    }

    /// Streamed, loading reads the shell (embeddings and head: 80 of the 340 parameters)
    /// from the 1000 B checkpoint first, and its pages stay while the layers are read.
    #[test]
    fn streamed_loading_counts_the_shells_checkpoint_pages() {
        let mut r = run(Method::Wanda);
        r.streaming = true;
        let e = estimate_prune(&tiny(), &r);
        assert_eq!(
            item(&e, "load", "checkpoint pages (the embeddings')"),
            1000 * 80 / 340
        );
        assert_eq!(item(&e, "load", "checkpoint pages (one layer's)"), 500);
    }

    /// A vocabulary above SmolLM2's adds its tokenizer's extra bytes to every stage (Gemma 3's
    /// 262,144 entries: 0.27 GB more); one at or below it adds nothing.
    #[test]
    fn a_large_vocabulary_counts_its_tokenizer() {
        let mut shape = tiny();
        let small = estimate_prune(&shape, &run(Method::Wanda));
        shape.vocab_size = 262_144;
        let large = estimate_prune(&shape, &run(Method::Wanda));
        for (a, b) in small.stages.iter().zip(&large.stages) {
            assert!(a
                .breakdown
                .items
                .iter()
                .all(|i| i.name != "tokenizer (beyond the overhead's)"));
            let extra = b
                .breakdown
                .items
                .iter()
                .find(|i| i.name == "tokenizer (beyond the overhead's)")
                .map(|i| i.bytes);
            assert_eq!(extra, Some((262_144 - 49_152) * 1_250), "{}", b.stage);
        }
    }

    #[test]
    fn streaming_on_the_cpu_counts_one_layer_and_the_residual_streams_of_a_window_group() {
        let mut r = run(Method::Wanda);
        let whole = estimate_prune(&tiny(), &r);
        r.streaming = true;
        let streamed = estimate_prune(&tiny(), &r);
        for stage in ["prune", "eval"] {
            // Whole weights 340 × 4 and the pruned copy 960 out; the shell, one layer and one
            // layer's pages of the checkpoint in.
            let (a, b) = (
                whole.stages.iter().find(|s| s.stage == stage).unwrap(),
                streamed.stages.iter().find(|s| s.stage == stage).unwrap(),
            );
            // The same attention blocks and rows of logits; in eval (b = 1, s = 4) the
            // residual streams of a window group in.
            let (added, removed) = if stage == "eval" {
                (STREAMED_WINDOW_GROUP as u64 * 4 * 4 * 4, 0)
            } else {
                (0, 0)
            };
            assert_eq!(
                b.breakdown.total(Place::Device) + 340 * 4 + 960 + removed,
                a.breakdown.total(Place::Device) + (80 + 120) * 4 + 500 + added,
                "{stage}"
            );
        }
        assert_eq!(
            item(&streamed, "eval", "residual streams"),
            STREAMED_WINDOW_GROUP as u64 * 4 * 4 * 4
        );
    }
}
