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
use crate::model::host::to_host_f32;
use crate::model::llama::{KvCache, Llama};
use crate::model::sample::pick;
use crate::model::tokenizer::Tokenizer;

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
    /// The name clients use (`/v1/models`).
    pub name: String,
    /// Positions the model takes: prompt plus generated tokens at most.
    pub context: usize,
    /// Ids the model has.
    pub vocab: usize,
    /// Generation stops at this id.
    pub eos: Option<u32>,
    /// The beginning-of-sequence id, if the model has one.
    pub bos: Option<u32>,
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
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(ApiError::invalid(format!(
                "token id {bad} is outside the model's vocabulary of {} ids",
                self.vocab
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
                if ids.len() + request.max_tokens > self.context {
                    return Err(ApiError::invalid(format!(
                        "the prompt's {} tokens plus `max_tokens` {} exceed the model's context \
                         of {} positions",
                        ids.len(),
                        request.max_tokens,
                        self.context
                    )));
                }
                Ok(ids)
            })
            .collect()
    }

    /// Answers prompt `index` of `request` (ids from [`Served::check`]).
    pub fn complete(
        &self,
        request: &CompletionRequest,
        index: usize,
        ids: &[u32],
        rng: &mut StdRng,
    ) -> Choice {
        let device = self.model.embed_tokens.weight.device();
        let k = request.logprobs.unwrap_or(0);
        let scores_wanted = request.echo && request.logprobs.is_some();
        let n = ids.len();
        // Position i of the prompt (i ≥ 1) is scored on row i − 1.
        let mut prompt_scores: Vec<RowScores> = Vec::new();
        let mut last_row: Vec<f32> = Vec::new();
        let mut on_rows = |first: usize, logits: Vec<f32>| {
            let vocab = self.vocab;
            for (r, row) in logits.chunks_exact(vocab).enumerate() {
                let pos = first + r;
                if scores_wanted && pos + 1 < n {
                    prompt_scores.push(score_row(row, ids[pos + 1], k));
                }
                if pos + 1 == n {
                    last_row = row.to_vec();
                }
            }
        };
        let tokens = |ids: &[u32]| {
            let values: Vec<i64> = ids.iter().map(|&t| i64::from(t)).collect();
            Tensor::<B, 2, Int>::from_data(TensorData::new(values, [1, ids.len()]), &device)
        };
        let mut cache = None;
        if request.max_tokens <= 1 && n * self.vocab <= WHOLE_FORWARD_LOGITS {
            // One pass with its logits (the fused kernels' head where the backend has them).
            on_rows(0, to_host_f32(self.model.forward(tokens(ids))));
        } else if request.max_tokens <= 1 {
            let hidden = self.model.hidden(tokens(ids));
            let rows: Vec<usize> = if scores_wanted {
                (0..n).step_by(HEAD_BLOCK).collect()
            } else {
                vec![n - 1]
            };
            for first in rows {
                let len = if scores_wanted {
                    HEAD_BLOCK.min(n - first)
                } else {
                    1
                };
                let logits = self.model.head(hidden.clone().narrow(1, first, len));
                on_rows(first, to_host_f32(logits));
            }
        } else {
            let mut kv = KvCache::new(self.model.layers.len());
            for first in (0..n).step_by(HEAD_BLOCK) {
                let block = &ids[first..n.min(first + HEAD_BLOCK)];
                let logits = self.model.forward_cached(tokens(block), &mut kv);
                on_rows(first, to_host_f32(logits));
            }
            cache = Some(kv);
        }

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
            if Some(next) == self.eos {
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
                row = to_host_f32(self.model.forward_cached(tokens(&[next]), kv));
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
            prompt_tokens: n,
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
