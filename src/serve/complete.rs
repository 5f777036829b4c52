//! One completion choice on the model: the prompt's log-probabilities position by position
//! (with `echo`), then up to `max_tokens` generated tokens, each with its log-probability and
//! the most likely alternatives, as OpenAI's legacy completions report them.
//!
//! A prompt that only needs scoring (`max_tokens` 0 or 1: lm-eval's log-likelihood requests)
//! runs as one forward pass (the fused kernels where the backend has them), its logits whole
//! up to [`WHOLE_FORWARD_LOGITS`], else through the LM head in blocks of [`HEAD_BLOCK`] rows; a
//! longer generation fills a KV cache in blocks of as many tokens and then decodes token by
//! token.

use burn::prelude::*;
use rand::rngs::StdRng;
use serde_json::{Map, Value};

use super::openai::{ApiError, Choice, CompletionRequest, Logprobs, Prompt};
use crate::model::arch::LlamaConfig;
use crate::model::checkpoint::Tokenizer;
use crate::model::decoder::pick;
use crate::model::decoder::{KvCache, Llama};
use crate::model::kernels::to_host_f32;

/// Rows of logits on the host at once (`HEAD_BLOCK × vocab × 4` bytes) past
/// [`WHOLE_FORWARD_LOGITS`].
pub const HEAD_BLOCK: usize = 256;

/// Logits (rows × vocabulary) a scoring pass may hold at once: up to this a prompt runs as one
/// forward pass with its logits (256 MB), which on the fused CPU kernels is twice as fast as a
/// pass to the residual stream and Burn's head after it.
pub const WHOLE_FORWARD_LOGITS: usize = 64 << 20;

/// The model a server answers with.
pub struct Served<'a, B: Backend> {
    /// The decoder.
    pub model: &'a Llama<B>,
    /// Its tokenizer.
    pub tokenizer: &'a Tokenizer,
    /// Its configuration: the context (`max_position_embeddings`: prompt plus generated tokens
    /// at most), the vocabulary, the end- and beginning-of-sequence ids.
    pub config: &'a LlamaConfig,
    /// The name clients use (`/v1/models`).
    pub name: String,
}

/// What [`Served::prompt_pass`] leaves: the prompt's scores from its second position on, the
/// logits after its last token, and the KV cache when a generation follows.
struct PromptPass<B: Backend> {
    scores: Vec<RowScores>,
    last_row: Vec<f32>,
    cache: Option<KvCache<B>>,
}

/// One position's scores: the chosen token's log-probability and the `k` most likely tokens.
struct RowScores {
    logprob: f64,
    top: Vec<(u32, f64)>,
}

/// Log-softmax of one row of logits, read at `token` and at the `k` largest (first id of equals
/// first), in f64.
fn score_row(row: &[f32], token: u32, k: usize) -> RowScores {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = f64::from(max)
        + row
            .iter()
            .map(|&l| (f64::from(l) - f64::from(max)).exp())
            .sum::<f64>()
            .ln();
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    for (i, &l) in row.iter().enumerate() {
        if top.len() < k || top.last().is_some_and(|&(_, v)| l > v) {
            let at = top.iter().position(|&(_, v)| l > v).unwrap_or(top.len());
            top.insert(at, (i as u32, l));
            top.truncate(k);
        }
    }
    RowScores {
        logprob: f64::from(row[token as usize]) - lse,
        top: top
            .into_iter()
            .map(|(i, l)| (i, f64::from(l) - lse))
            .collect(),
    }
}

impl<B: Backend> Served<'_, B> {
    /// The prompt's ids: token ids checked against the vocabulary, or the text encoded.
    fn ids(&self, prompt: &Prompt) -> Result<Vec<u32>, ApiError> {
        let ids = match prompt {
            Prompt::Ids(ids) => ids.clone(),
            Prompt::Text(text) => self
                .tokenizer
                .encode(text)
                .map_err(|e| ApiError::invalid(format!("the prompt cannot be encoded: {e}")))?,
        };
        if let Some(bad) = ids
            .iter()
            .find(|&&id| id as usize >= self.config.vocab_size)
        {
            return Err(ApiError::invalid(format!(
                "token id {bad} is outside the model's vocabulary of {} ids",
                self.config.vocab_size
            )));
        }
        if ids.is_empty() {
            return Err(ApiError::invalid(
                "the prompt is empty: give text or token ids",
            ));
        }
        Ok(ids)
    }

    /// A token as text, special tokens included.
    fn token_text(&self, id: u32) -> String {
        self.tokenizer.token_text(id).unwrap_or_default()
    }

    /// The `top` alternatives as OpenAI's `{token text: log-probability}` (the likelier of two
    /// ids with the same text kept).
    fn top_map(&self, top: &[(u32, f64)]) -> Map<String, Value> {
        let mut map = Map::new();
        for &(id, lp) in top {
            map.entry(self.token_text(id)).or_insert(Value::from(lp));
        }
        map
    }

    /// Checks a prompt's length against the model's context before any work.
    pub fn check(&self, request: &CompletionRequest) -> Result<Vec<Vec<u32>>, ApiError> {
        request
            .prompts
            .iter()
            .map(|prompt| {
                let ids = self.ids(prompt)?;
                if ids.len() + request.max_tokens > self.config.max_position_embeddings {
                    return Err(ApiError::invalid(format!(
                        "the prompt's {} tokens plus `max_tokens` {} exceed the model's context \
                         of {} positions",
                        ids.len(),
                        request.max_tokens,
                        self.config.max_position_embeddings
                    )));
                }
                Ok(ids)
            })
            .collect()
    }

    /// `ids` as a `[1, n]` tensor on the model's device.
    fn tokens(&self, ids: &[u32]) -> Tensor<B, 2, Int> {
        let values: Vec<i64> = ids.iter().map(|&t| i64::from(t)).collect();
        let device = self.model.embed_tokens.weight.device();
        Tensor::from_data(TensorData::new(values, [1, ids.len()]), &device)
    }

    /// The prompt through the model: each position's scores with `k` alternatives when
    /// `scored` is `Some(k)`, the last row of logits, and the filled KV cache when `max_tokens`
    /// asks for a generation of 2 tokens or more.
    fn prompt_pass(&self, ids: &[u32], scored: Option<usize>, max_tokens: usize) -> PromptPass<B> {
        let n = ids.len();
        let vocab = self.config.vocab_size;
        let mut pass = PromptPass {
            scores: Vec::new(),
            last_row: Vec::new(),
            cache: None,
        };
        // Position i of the prompt (i ≥ 1) is scored on row i − 1.
        let mut on_rows = |first: usize, logits: Vec<f32>| {
            for (r, row) in logits.chunks_exact(vocab).enumerate() {
                let pos = first + r;
                if let Some(k) = scored.filter(|_| pos + 1 < n) {
                    pass.scores.push(score_row(row, ids[pos + 1], k));
                }
                if pos + 1 == n {
                    pass.last_row = row.to_vec();
                }
            }
        };
        if max_tokens <= 1 && n * vocab <= WHOLE_FORWARD_LOGITS {
            // One pass with its logits (the fused kernels' head where the backend has them).
            on_rows(0, to_host_f32(self.model.forward(self.tokens(ids))));
        } else if max_tokens <= 1 {
            let hidden = self.model.hidden(self.tokens(ids));
            let (starts, len): (Vec<usize>, usize) = match scored {
                Some(_) => ((0..n).step_by(HEAD_BLOCK).collect(), HEAD_BLOCK),
                None => (vec![n - 1], 1),
            };
            for first in starts {
                let rows = hidden.clone().narrow(1, first, len.min(n - first));
                on_rows(first, to_host_f32(self.model.head(rows)));
            }
        } else {
            let mut kv = KvCache::new(self.model.layers.len());
            for first in (0..n).step_by(HEAD_BLOCK) {
                let block = &ids[first..n.min(first + HEAD_BLOCK)];
                let logits = self.model.forward_cached(self.tokens(block), &mut kv);
                on_rows(first, to_host_f32(logits));
            }
            pass.cache = Some(kv);
        }
        pass
    }

    /// Answers prompt `index` of `request` (ids from [`Served::check`]).
    pub fn complete(
        &self,
        request: &CompletionRequest,
        index: usize,
        ids: &[u32],
        rng: &mut StdRng,
    ) -> Choice {
        let k = request.logprobs.unwrap_or(0);
        let scores_wanted = request.echo && request.logprobs.is_some();
        let PromptPass {
            scores: prompt_scores,
            last_row,
            mut cache,
        } = self.prompt_pass(ids, scores_wanted.then_some(k), request.max_tokens);

        let mut logprobs = Logprobs::default();
        let prompt_text = match &request.prompts[index] {
            Prompt::Text(text) => text.clone(),
            Prompt::Ids(_) => self.tokenizer.decode(ids).unwrap_or_default(),
        };
        let mut offset = if request.echo {
            0
        } else {
            prompt_text.chars().count()
        };
        let mut push = |lp: &mut Logprobs, id: u32, scores: Option<RowScores>| {
            let text = self.token_text(id);
            lp.text_offset.push(offset);
            offset += text.chars().count();
            lp.tokens.push(text);
            lp.token_logprobs.push(scores.as_ref().map(|s| s.logprob));
            lp.top_logprobs.push(scores.map(|s| self.top_map(&s.top)));
        };
        if scores_wanted {
            let mut scores = prompt_scores.into_iter();
            push(&mut logprobs, ids[0], None);
            for &id in &ids[1..] {
                push(&mut logprobs, id, scores.next());
            }
        }

        let mut generated: Vec<u32> = Vec::new();
        let mut text = String::new();
        let mut finish = "length";
        let mut row = last_row;
        for step in 0..request.max_tokens {
            let next = pick(&row, request.temperature, rng);
            if Some(next) == self.config.eos_token_id {
                finish = "stop";
                break;
            }
            generated.push(next);
            if request.logprobs.is_some() {
                push(&mut logprobs, next, Some(score_row(&row, next, k)));
            }
            text = self.tokenizer.decode(&generated).unwrap_or_default();
            if let Some(at) = request
                .stop
                .iter()
                .filter_map(|s| text.find(s.as_str()))
                .min()
            {
                text.truncate(at);
                finish = "stop";
                break;
            }
            if step + 1 < request.max_tokens {
                let kv = cache
                    .as_mut()
                    .expect("a generation of 2+ tokens fills the cache");
                row = to_host_f32(self.model.forward_cached(self.tokens(&[next]), kv));
            }
        }
        Choice {
            index,
            text: if request.echo {
                prompt_text + &text
            } else {
                text
            },
            logprobs: request.logprobs.map(|_| logprobs),
            finish_reason: finish,
            prompt_tokens: ids.len(),
            completion_tokens: generated.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rows_scores_by_hand() {
        // Logits [ln 1, ln 2, ln 1]: probabilities 1/4, 1/2, 1/4.
        let row = [0.0f32, 2f32.ln(), 0.0];
        let s = score_row(&row, 2, 2);
        assert!((s.logprob - 0.25f64.ln()).abs() < 1e-6, "{}", s.logprob);
        assert_eq!(s.top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 0]);
        assert!((s.top[0].1 - 0.5f64.ln()).abs() < 1e-6);
        assert!(score_row(&row, 1, 0).top.is_empty());
    }
}
