//! Decoding and prefill speed at batch 1 (`wanda bench decode`, `eval: { speed }`): a prompt
//! of fixed ids as one prefill, then one id a step with a KV cache, as greedy decoding runs.
//! Where the model's pruned linears are held compressed ([`Llama::sparsify`]), the same rounds
//! also run dense, alternately, so both see the same machine.

use std::time::Instant;

use burn::prelude::*;

use crate::model::decoder::{KvCache, Llama, SparseMode, SparseSummary};

/// What [`measure`] found: medians over the timed rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedReport {
    /// Prefill tokens/s, with the compressed linears where any are held.
    pub prefill: f64,
    /// Decode tokens/s, the same way.
    pub decode: f64,
    /// Every timed round's decode tokens/s, in order.
    pub decode_runs: Vec<f64>,
    /// Prefill and decode tokens/s dense, in the same rounds (the figures above where no
    /// linear is held compressed).
    pub dense: (f64, f64),
    /// The bytes of weights a decode step reads: every parameter once, the compressed linears
    /// in that form.
    pub weight_bytes: usize,
    /// The same, every weight dense.
    pub dense_weight_bytes: usize,
    /// What was held compressed.
    pub sparse: SparseSummary,
}

/// A fixed, model-independent token pattern of `len` ids below `vocab`: timings do not depend
/// on content (scripts/transformers-ppl.py and scripts/torch-decode.py use the same).
pub fn pattern_ids(len: usize, vocab: usize) -> Vec<i64> {
    let vocab = vocab as i64;
    (0..len as i64).map(|i| (i * 7919 + 13) % vocab).collect()
}

/// The median of `values` (the upper one of an even count), as every benchmark figure reports
/// it.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// `decode` steps after a `prompt`-token prefill on a copy of `model` (its tensors shared),
/// one untimed round then `repeats` timed ones, each on a fresh cache; with the linears held
/// compressed as `sparse` says within `budget` bytes, and dense in the same rounds where any
/// are. The dense copy keeps every dense weight, so the compressed forms cost their bytes on
/// top of the model's. The caller checks that `prompt + decode` fits the model's context.
pub fn measure<B: Backend>(
    model: &Llama<B>,
    [prompt, decode]: [usize; 2],
    repeats: usize,
    (sparse, budget): (SparseMode, usize),
    device: &B::Device,
) -> SpeedReport {
    assert!(prompt > 0 && decode > 0 && repeats > 0, "some work to time");
    let mut dense = model.dense_weights().into_owned();
    dense.sparse = None;
    let mut compressed = dense.clone();
    let summary = compressed.sparsify(sparse, budget);
    let forms = match compressed.sparse.is_some() {
        true => vec![&compressed, &dense],
        false => vec![&dense],
    };
    let vocab = dense.embed_tokens.weight.dims()[0];
    let ids = pattern_ids(prompt + decode, vocab);
    // Per form (compressed, then dense), each timed round's prefill and decode tokens/s.
    let mut rates: [(Vec<f64>, Vec<f64>); 2] = Default::default();
    for timed in std::iter::once(false).chain(std::iter::repeat_n(true, repeats)) {
        for (model, rates) in forms.iter().zip(&mut rates) {
            let (prefill, decode) = round(model, &ids, prompt, device);
            if timed {
                rates.0.push(prefill);
                rates.1.push(decode);
            }
        }
    }
    let dense_weight_bytes = dense.num_params() * std::mem::size_of::<B::FloatElem>();
    let [(prefill, decode_runs), (dense_prefill, dense_decode)] = rates;
    let (prefill, decode) = (median(&prefill), median(&decode_runs));
    SpeedReport {
        prefill,
        decode,
        decode_runs,
        dense: match forms.len() {
            2 => (median(&dense_prefill), median(&dense_decode)),
            _ => (prefill, decode),
        },
        weight_bytes: dense_weight_bytes - summary.dense_bytes + summary.sparse_bytes,
        dense_weight_bytes,
        sparse: summary,
    }
}

/// One round on a fresh cache: the prefill tokens/s of `ids[..prompt]`, then the decode
/// tokens/s of the rest, one id a step.
fn round<B: Backend>(
    model: &Llama<B>,
    ids: &[i64],
    prompt: usize,
    device: &B::Device,
) -> (f64, f64) {
    let run = |ids: &[i64], cache: &mut KvCache<B>| {
        let tokens = TensorData::new(ids.to_vec(), [1, ids.len()]);
        let logits = model.forward_cached(Tensor::from_data(tokens, device), cache);
        // Reading one value forces the whole lazy graph on every backend.
        let _ = logits.slice([0..1, 0..1, 0..1]).into_scalar();
    };
    let mut cache = KvCache::new(model.layers.len());
    let started = Instant::now();
    run(&ids[..prompt], &mut cache);
    let prefill = prompt as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    for step in prompt..ids.len() {
        run(&ids[step..step + 1], &mut cache);
    }
    let decode = (ids.len() - prompt) as f64 / started.elapsed().as_secs_f64();
    (prefill, decode)
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;

    use super::*;
    use crate::model::arch::HfLlamaConfig;

    #[test]
    fn a_pruned_model_is_timed_compressed_and_dense_and_a_dense_one_once() {
        let json = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":32,
            "intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,
            "num_key_value_heads":2,"vocab_size":50,"rms_norm_eps":1e-5,
            "tie_word_embeddings":true}"#;
        let config = HfLlamaConfig::from_json(json).unwrap().resolve().unwrap();
        let model = Llama::<NdArray<f32>>::init_random(&config, 1, &Default::default());
        let device = Default::default();
        let dense = measure(&model, [6, 4], 2, (SparseMode::Auto, usize::MAX), &device);
        assert_eq!(dense.sparse.compressed, 0);
        assert_eq!(dense.dense, (dense.prefill, dense.decode));
        assert_eq!(dense.weight_bytes, dense.dense_weight_bytes);
        assert_eq!(dense.dense_weight_bytes, model.num_params() * 4);
        assert_eq!(dense.decode_runs.len(), 2);
        let on = measure(&model, [6, 4], 3, (SparseMode::On, usize::MAX), &device);
        assert_eq!(on.sparse.compressed, 14);
        // No zeros: the mask and the row offsets come on top of every value.
        let extra = on.sparse.sparse_bytes - on.sparse.dense_bytes;
        assert_eq!(on.weight_bytes, on.dense_weight_bytes + extra);
        assert!(on.decode > 0.0 && on.dense.1 > 0.0 && on.decode_runs.len() == 3);
        // The model measured is a copy: the caller's holds nothing compressed.
        assert!(model.sparse.is_none());
    }

    #[test]
    fn the_pattern_is_fixed_and_within_the_vocabulary() {
        assert_eq!(pattern_ids(4, 50), vec![13, 32, 1, 20]);
        assert!(pattern_ids(1000, 7).iter().all(|&i| (0..7).contains(&i)));
    }
}
