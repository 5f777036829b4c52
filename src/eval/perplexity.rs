//! Perplexity by the Wanda reference protocol (`eval_ppl_wikitext`, arXiv 2306.11695): the text
//! is tokenised once as a whole, cut into non-overlapping windows of `seqlen` tokens (the
//! remainder is dropped), each window is one forward pass, and the perplexity is
//! `exp(mean next-token NLL)` over every predicted token of every window.

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::FloatDType;
use serde::Serialize;

use crate::model::checkpoint::{Layers, StreamError};
use crate::model::decoder::Llama;
use crate::model::kernels::kernels;
use crate::sys::phases::PhaseClock;

/// Errors of the perplexity evaluation.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PerplexityError {
    /// `seqlen` below 2 predicts nothing.
    #[error("seqlen must be at least 2, got {seqlen}")]
    SeqlenTooSmall {
        /// The requested window length.
        seqlen: usize,
    },
    /// The text does not fill one window.
    #[error("the text has {tokens} tokens, fewer than one window of {seqlen}; lower `seqlen`")]
    TextTooShort {
        /// Tokens in the text.
        tokens: usize,
        /// The requested window length.
        seqlen: usize,
    },
    /// The window does not fit the model's context.
    #[error("seqlen {seqlen} exceeds the model's context of {max} positions")]
    SeqlenTooLong {
        /// The requested window length.
        seqlen: usize,
        /// `max_position_embeddings` (or the sliding window).
        max: usize,
    },
    /// A streamed layer could not be read (the message of the
    /// [`crate::model::checkpoint::StreamError`]).
    #[error("{0}")]
    Layers(String),
    /// The windows gave a non-finite loss.
    #[error("the mean negative log-likelihood is not finite ({nll}); the model produced NaN or inf logits")]
    NotFinite {
        /// The loss.
        nll: f64,
    },
}

/// The result of a perplexity run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PerplexityReport {
    /// `exp(mean NLL)`.
    pub perplexity: f64,
    /// Mean next-token negative log-likelihood (nats).
    pub mean_nll: f64,
    /// Windows evaluated.
    pub windows: usize,
    /// Tokens fed to the model (`windows × seqlen`).
    pub tokens: usize,
    /// Tokens whose likelihood was scored (`windows × (seqlen − 1)`).
    pub predicted_tokens: usize,
    /// Window length.
    pub seqlen: usize,
    /// Tokens in the whole text.
    pub text_tokens: usize,
    /// Windows the whole text holds (before any limit).
    pub available_windows: usize,
}

/// Number of whole windows of `seqlen` in `tokens` tokens.
pub fn window_count(tokens: usize, seqlen: usize) -> usize {
    tokens / seqlen.max(1)
}

/// Sum of next-token NLLs of one window.
///
/// # Shapes
/// - `logits`: `[1, seq, vocab]`, `window`: `seq` ids → the sum over the `seq − 1` predictions
///
/// burn-ndarray f32 logits are read in place by the backend's kernels
/// ([`crate::model::kernels::Kernels::window_nll`]); other backends go through Burn's
/// `log_softmax`, in f32 whatever the logits' type (as PyTorch's cross-entropy accumulates).
pub fn window_nll<B: Backend>(logits: Tensor<B, 3>, window: &[u32]) -> f64 {
    if let Some(nll) = kernels::<B>().window_nll(&logits, window) {
        return nll;
    }
    let [batch, seq, vocab] = logits.dims();
    debug_assert_eq!(batch, 1);
    let device = logits.device();
    let predicted = logits
        .narrow(1, 0, seq - 1)
        .reshape([seq - 1, vocab])
        .cast(FloatDType::F32);
    let targets: Vec<i64> = window[1..].iter().map(|&t| i64::from(t)).collect();
    let targets = Tensor::<B, 2, Int>::from_data(TensorData::new(targets, [seq - 1, 1]), &device);
    let picked = log_softmax(predicted, 1).gather(1, targets);
    let values = crate::model::kernels::to_host_f32(picked);
    -values.iter().map(|&v| f64::from(v)).sum::<f64>()
}

/// Sum of next-token NLLs of one window from the residual stream after the last layer: the
/// logits a few rows at a time where the fused kernels run
/// ([`crate::model::kernels::Kernels::hidden_nll`], never a whole window's `seq × vocab` at once),
/// else through [`Llama::head`] and [`window_nll`].
///
/// # Shapes
/// - `hidden`: `[1, seq, hidden]`, `window`: `seq` ids
fn head_nll<B: Backend>(model: &Llama<B>, hidden: Tensor<B, 3>, window: &[u32]) -> f64 {
    match kernels::<B>().hidden_nll(&model.head_weights(), &hidden, window) {
        Some(nll) => nll,
        None => window_nll(model.head(hidden), window),
    }
}

/// One window of token ids as a batch of one.
///
/// # Shapes
/// - `window`: `seq` ids → `[1, seq]`
pub fn window_tokens<B: Backend>(window: &[u32], device: &B::Device) -> Tensor<B, 2, Int> {
    let input: Vec<i64> = window.iter().map(|&t| i64::from(t)).collect();
    Tensor::from_data(TensorData::new(input, [1, window.len()]), device)
}

/// Windows a streamed model evaluates together where no gate chose a group: each group reads
/// every layer once, and holds the residual streams of its windows (`group × seqlen × hidden`
/// values in the device's precision).
pub const STREAMED_WINDOW_GROUP: usize = 8;

/// Evaluates perplexity of `model` on the token ids of the whole text, a streamed model
/// [`STREAMED_WINDOW_GROUP`] windows at a time ([`perplexity_in_groups`]).
pub fn perplexity<B: Backend>(
    model: &impl Layers<B>,
    ids: &[u32],
    seqlen: usize,
    max_windows: Option<usize>,
    context_limit: usize,
    progress: impl FnMut(usize, usize),
) -> Result<PerplexityReport, PerplexityError> {
    perplexity_in_groups(
        model,
        ids,
        seqlen,
        max_windows,
        context_limit,
        STREAMED_WINDOW_GROUP,
        progress,
    )
}

/// Evaluates perplexity of `model` on the token ids of the whole text.
///
/// `max_windows` limits the evaluation to the first windows; `progress(done, total)` is called
/// after every window (after every group of `group` windows when the model is streamed: each
/// group runs layer by layer, reading each layer once, with the same kernels and the same
/// result to the bit as a model in memory).
pub fn perplexity_in_groups<B: Backend>(
    model: &impl Layers<B>,
    ids: &[u32],
    seqlen: usize,
    max_windows: Option<usize>,
    context_limit: usize,
    group: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<PerplexityReport, PerplexityError> {
    if seqlen < 2 {
        return Err(PerplexityError::SeqlenTooSmall { seqlen });
    }
    if seqlen > context_limit {
        return Err(PerplexityError::SeqlenTooLong {
            seqlen,
            max: context_limit,
        });
    }
    let available = window_count(ids.len(), seqlen);
    if available == 0 {
        return Err(PerplexityError::TextTooShort {
            tokens: ids.len(),
            seqlen,
        });
    }
    let windows = max_windows.map_or(available, |n| n.min(available)).max(1);
    let device = model.shell().embed_tokens.weight.device();
    let window = |w: usize| &ids[w * seqlen..(w + 1) * seqlen];
    let mut total_nll = 0.0f64;
    let mut clock = PhaseClock::new("perplexity", || {
        let _ = B::sync(&device);
    });
    match model.resident() {
        Some(model) => {
            for w in 0..windows {
                let x = model.hidden(window_tokens(window(w), &device));
                clock.lap("layers");
                total_nll += head_nll(model, x, window(w));
                clock.lap("head and NLL");
                progress(w + 1, windows);
            }
        }
        None => {
            let size = group.max(1);
            for start in (0..windows).step_by(size) {
                let group: Vec<usize> = (start..windows.min(start + size)).collect();
                let hidden = layer_by_layer(model, group.iter().map(|&w| window(w)), &device)
                    .map_err(|e| PerplexityError::Layers(e.to_string()))?;
                clock.lap("layers");
                let shell = model.shell();
                for (x, &w) in hidden.into_iter().zip(&group) {
                    total_nll += head_nll(shell, x, window(w));
                }
                clock.lap("head and NLL");
                progress(group.last().map_or(0, |w| w + 1), windows);
            }
        }
    }
    let predicted_tokens = windows * (seqlen - 1);
    let mean_nll = total_nll / predicted_tokens as f64;
    if !mean_nll.is_finite() {
        return Err(PerplexityError::NotFinite { nll: mean_nll });
    }
    Ok(PerplexityReport {
        perplexity: mean_nll.exp(),
        mean_nll,
        windows,
        tokens: windows * seqlen,
        predicted_tokens,
        seqlen,
        text_tokens: ids.len(),
        available_windows: available,
    })
}

/// The residual stream after the last layer of each window, running every window through one
/// layer before reading the next.
///
/// # Shapes
/// - each window: `seq` ids → `[1, seq, hidden]`
fn layer_by_layer<'a, B: Backend>(
    model: &impl Layers<B>,
    windows: impl Iterator<Item = &'a [u32]>,
    device: &B::Device,
) -> Result<Vec<Tensor<B, 3>>, StreamError> {
    let shell = model.shell();
    let mut hidden: Vec<Tensor<B, 3>> = windows
        .map(|w| shell.embed(window_tokens(w, device)))
        .collect();
    let Some(seq) = hidden.first().map(|h| h.dims()[1]) else {
        return Ok(Vec::new());
    };
    let (cos, sin) = shell.rope_tables(0, seq);
    for i in 0..model.layer_count() {
        hidden = model.layer(i)?.forward_each(hidden, &cos, &sin);
    }
    Ok(hidden)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f32>;

    #[test]
    fn window_nll_by_hand() {
        // vocab 3, seq 3 → two predictions. logits row 0 = [0, ln 2, 0] → p(1) = 2/4;
        // row 1 = [ln 3, 0, 0] → p(0) = 3/5. Window [9, 1, 0]: NLL = -ln(1/2) - ln(3/5).
        let ln2 = 2f32.ln();
        let ln3 = 3f32.ln();
        let logits = Tensor::<B, 3>::from_data(
            TensorData::new(vec![0.0, ln2, 0.0, ln3, 0.0, 0.0, 5.0, 5.0, 5.0], [1, 3, 3]),
            &Default::default(),
        );
        let nll = window_nll(logits, &[9, 1, 0]);
        let expected = -(0.5f64.ln()) - (0.6f64.ln());
        assert!((nll - expected).abs() < 1e-6, "{nll} vs {expected}");
    }

    #[test]
    fn remainder_is_dropped() {
        assert_eq!(window_count(1030, 512), 2);
        assert_eq!(window_count(511, 512), 0);
    }
}
