//! Loglikelihoods of `(context, continuation)` requests, tokenised and scored as
//! lm-evaluation-harness's Hugging Face model (`HFLM`) scores them: the context's trailing white
//! space moves to the continuation, the whole text is encoded once and the continuation is what
//! follows the encoded context (`_encode_pair`); the input is the last `max_length + 1` tokens
//! less the last, and the loglikelihood is the sum of the continuation tokens' log-probabilities.
//!
//! Requests are scored in batches of similar length (longest first, right-padded; causal
//! attention keeps padding from reaching the real positions), so the choices of a document and
//! neighbouring documents share one forward pass; only the continuation positions go through
//! the LM head.

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::FloatDType;

use super::tasks::py_isspace;
use crate::data::TextEncoder;
use crate::model::checkpoint::{Layers, StreamError};
use crate::model::decoder::Llama;
use crate::model::kernels::kernels;

/// Padded tokens per forward pass (a streamed model reads every layer once per pass); the
/// memory estimate counts one pass of this many tokens.
pub const BATCH_TOKENS: usize = 4096;
/// Sequences per forward pass, at most.
const BATCH_SEQUENCES: usize = 64;

/// The token ids of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedPair {
    /// The context's tokens.
    pub context: Vec<u32>,
    /// The continuation's tokens, the ones scored.
    pub continuation: Vec<u32>,
}

/// Encodes one request as lm-eval's `_encode_pair` does for a causal model; an empty context
/// is conditioned on `prefix_token` alone (lm-eval's `prefix_token_id`: BOS, else EOS).
pub fn encode_pair<T: TextEncoder>(
    tokenizer: &T,
    context: &str,
    continuation: &str,
    prefix_token: u32,
) -> Result<EncodedPair, T::Error> {
    if context.is_empty() {
        let continuation = tokenizer.encode_text(continuation)?;
        return Ok(match continuation.first() {
            Some(&first) if first == prefix_token => EncodedPair {
                context: vec![first],
                continuation: continuation[1..].to_vec(),
            },
            _ => EncodedPair {
                context: vec![prefix_token],
                continuation,
            },
        });
    }
    let kept = context.trim_end_matches(py_isspace);
    let moved = &context[kept.len()..];
    let whole = tokenizer.encode_text(&format!("{kept}{moved}{continuation}"))?;
    let context_ids = tokenizer.encode_text(kept)?;
    let continuation_ids = whole.get(context_ids.len()..).unwrap_or_default().to_vec();
    Ok(EncodedPair {
        context: context_ids,
        continuation: continuation_ids,
    })
}

/// One request made ready for the model: its input tokens and the positions that predict the
/// continuation.
struct Prepared {
    input: Vec<u32>,
    /// The continuation tokens, predicted by the last `targets.len()` input positions.
    targets: Vec<u32>,
}

impl Prepared {
    /// HFLM's `(context_enc + continuation_enc)[-(max_length + 1):][:-1]`.
    fn new(pair: &EncodedPair, max_length: usize) -> Self {
        let whole: Vec<u32> = pair
            .context
            .iter()
            .chain(&pair.continuation)
            .copied()
            .collect();
        let kept = &whole[whole.len().saturating_sub(max_length + 1)..];
        let input = kept[..kept.len().saturating_sub(1)].to_vec();
        // A window shorter than the continuation predicts only its last tokens.
        let scored = pair.continuation.len().min(input.len());
        let targets = pair.continuation[pair.continuation.len() - scored..].to_vec();
        Prepared { input, targets }
    }

    /// The input positions that predict the targets.
    fn positions(&self) -> std::ops::Range<usize> {
        self.input.len() - self.targets.len()..self.input.len()
    }
}

/// The loglikelihood of each request (in `pairs` order): the sum of its continuation tokens'
/// log-probabilities. `documents[i]` groups request `i` with the other choices of its document,
/// whose common token prefix a model in memory runs once. `progress(done, total)` is called as
/// requests are scored.
pub fn loglikelihoods<B: Backend>(
    model: &impl Layers<B>,
    pairs: &[EncodedPair],
    documents: &[usize],
    max_length: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<f64>, StreamError> {
    let prepared: Vec<Prepared> = pairs.iter().map(|p| Prepared::new(p, max_length)).collect();
    let count = prepared.len();
    // A request whose input is a prefix of another's reads its positions from that one's pass
    // (causal attention: a position sees only what precedes it), as lm-eval scores the
    // one-token choices of one context in one pass. In lexicographic order a prefix comes right
    // before a sequence it begins, so one backward sweep finds every request's host.
    let mut lexical: Vec<usize> = (0..count).collect();
    lexical.sort_by(|&a, &b| prepared[a].input.cmp(&prepared[b].input));
    let mut host: Vec<usize> = (0..count).collect();
    for k in (0..count.saturating_sub(1)).rev() {
        let (i, next) = (lexical[k], lexical[k + 1]);
        if prepared[next].input.starts_with(&prepared[i].input) {
            host[i] = host[next];
        }
    }
    let mut guests: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (i, &h) in host.iter().enumerate() {
        guests[h].push(i);
    }
    let mut hosts: Vec<usize> = (0..count).filter(|&i| host[i] == i).collect();
    // Longest first, as lm-eval orders them, so a streamed batch pads little.
    hosts.sort_by_key(|&i| std::cmp::Reverse(prepared[i].input.len()));
    let mut scores = vec![0.0f64; count];
    let mut done = 0;
    if let Some(resident) = model.resident() {
        // In memory: one pass per document, its choices packed behind their common prefix
        // where the kernels pack, else one pass per host.
        for group in document_groups(documents, &hosts) {
            let readers: usize = group.iter().map(|&h| guests[h].len()).sum();
            for (i, score) in score_group(resident, &prepared, &guests, &group) {
                scores[i] = score;
            }
            done += readers;
            progress(done, count);
        }
        return Ok(scores);
    }
    let mut start = 0;
    while start < hosts.len() {
        let longest = prepared[hosts[start]].input.len().max(1);
        let take = (BATCH_TOKENS / longest).clamp(1, BATCH_SEQUENCES);
        let batch = &hosts[start..(start + take).min(hosts.len())];
        for (i, score) in score_streamed(model, &prepared, &guests, batch, longest)? {
            scores[i] = score;
        }
        start += batch.len();
        done += batch.iter().map(|&h| guests[h].len()).sum::<usize>();
        progress(done, count);
    }
    Ok(scores)
}

/// One forward pass's residual stream after the last layer, `[rows, hidden]`, and the requests
/// that read it: `(request index, the rows that predict its targets)`.
struct Pass<B: Backend> {
    hidden: Tensor<B, 2>,
    readers: Vec<(usize, Vec<usize>)>,
}

/// The hosts grouped by document, in first-seen order.
fn document_groups(documents: &[usize], hosts: &[usize]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut by_document: std::collections::HashMap<usize, usize> = Default::default();
    for &h in hosts {
        let g = *by_document.entry(documents[h]).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(h);
    }
    groups
}

/// The length of the longest common prefix of `inputs`.
fn common_prefix(inputs: &[&[u32]]) -> usize {
    let Some((first, rest)) = inputs.split_first() else {
        return 0;
    };
    rest.iter().fold(first.len(), |n, input| {
        first[..n]
            .iter()
            .zip(input.iter())
            .take_while(|(a, b)| a == b)
            .count()
    })
}

/// The loglikelihoods of the requests read from the hosts of one document, on a model in
/// memory: one pass with every host's remainder packed behind their common prefix when there
/// are several and the kernels pack, else a pass per host.
fn score_group<B: Backend>(
    model: &Llama<B>,
    prepared: &[Prepared],
    guests: &[Vec<usize>],
    group: &[usize],
) -> Vec<(usize, f64)> {
    let packed = if group.len() > 1 {
        packed_pass(model, prepared, guests, group)
    } else {
        None
    };
    let passes = match packed {
        Some(pass) => vec![pass],
        None => group
            .iter()
            .map(|&h| {
                let len = prepared[h].input.len().max(1);
                let tokens = padded_tokens::<B>(
                    &[&prepared[h].input],
                    len,
                    &model.embed_tokens.weight.device(),
                );
                let hidden = model.hidden(tokens);
                let width = hidden.dims()[2];
                Pass {
                    hidden: hidden.reshape([len, width]),
                    readers: readers_of(prepared, &guests[h], |p| p),
                }
            })
            .collect(),
    };
    read_scores(model, prepared, passes)
}

/// One pass for the hosts of `group`: their common prefix, then each host's remainder; `None`
/// where the kernels do not pack.
fn packed_pass<B: Backend>(
    model: &Llama<B>,
    prepared: &[Prepared],
    guests: &[Vec<usize>],
    group: &[usize],
) -> Option<Pass<B>> {
    let inputs: Vec<&[u32]> = group.iter().map(|&h| &prepared[h].input[..]).collect();
    let prefix = common_prefix(&inputs);
    let mut tokens = inputs[0][..prefix].to_vec();
    let mut branches = Vec::new();
    let mut readers = Vec::new();
    for (&h, input) in group.iter().zip(&inputs) {
        let start = tokens.len();
        let branch = &input[prefix..];
        tokens.extend_from_slice(branch);
        branches.push(branch.len());
        // A position in the prefix is its own row; one in the branch follows `start`.
        let row = |p: usize| if p < prefix { p } else { start + p - prefix };
        readers.extend(readers_of(prepared, &guests[h], row));
    }
    let hidden = model.packed_hidden(&tokens, prefix, &branches)?;
    Some(Pass { hidden, readers })
}

/// `inputs` right-padded to `length` tokens as one batch.
fn padded_tokens<B: Backend>(
    inputs: &[&[u32]],
    length: usize,
    device: &B::Device,
) -> Tensor<B, 2, Int> {
    let mut ids = Vec::with_capacity(inputs.len() * length);
    for input in inputs {
        ids.extend(input.iter().map(|&t| i64::from(t)));
        // Padding after the sequence: causal attention never lets it reach a real position.
        ids.extend(std::iter::repeat_n(0i64, length - input.len()));
    }
    Tensor::from_data(TensorData::new(ids, [inputs.len(), length]), device)
}

/// The readers of a host whose guests are `guests`: each guest's request index and the pass
/// rows (`row` of each input position) that predict its targets.
fn readers_of(
    prepared: &[Prepared],
    guests: &[usize],
    row: impl Fn(usize) -> usize,
) -> Vec<(usize, Vec<usize>)> {
    guests
        .iter()
        .map(|&g| (g, prepared[g].positions().map(&row).collect()))
        .collect()
}

/// The loglikelihoods of the requests reading one batch of hosts of a streamed model, padded to
/// `length` tokens and run layer by layer.
fn score_streamed<B: Backend>(
    model: &impl Layers<B>,
    prepared: &[Prepared],
    guests: &[Vec<usize>],
    batch: &[usize],
    length: usize,
) -> Result<Vec<(usize, f64)>, StreamError> {
    let shell = model.shell();
    let inputs: Vec<&[u32]> = batch.iter().map(|&h| &prepared[h].input[..]).collect();
    let tokens = padded_tokens::<B>(&inputs, length, &shell.embed_tokens.weight.device());
    let (cos, sin) = shell.rope_tables(0, length);
    let mut x = vec![shell.embed(tokens)];
    for i in 0..model.layer_count() {
        x = model.layer(i)?.forward_each(x, &cos, &sin);
    }
    let x = x.pop().expect("one batch in, one out");
    let width = x.dims()[2];
    let passes = batch
        .iter()
        .enumerate()
        .map(|(b, &h)| Pass {
            hidden: x.clone().narrow(0, b, 1).reshape([length, width]),
            readers: readers_of(prepared, &guests[h], |p| p),
        })
        .collect();
    Ok(read_scores(shell, prepared, passes))
}

/// Each reader's loglikelihood: the NLLs of its targets at its rows of its pass, through the
/// head once for all passes.
fn read_scores<B: Backend>(
    model: &Llama<B>,
    prepared: &[Prepared],
    passes: Vec<Pass<B>>,
) -> Vec<(usize, f64)> {
    let mut picked = Vec::new();
    let mut targets = Vec::new();
    let mut order = Vec::new();
    for Pass { hidden, readers } in passes {
        let device = hidden.device();
        let mut rows = Vec::new();
        for (index, reader_rows) in readers {
            rows.extend(reader_rows.iter().map(|&r| r as i64));
            targets.extend_from_slice(&prepared[index].targets);
            order.push((index, reader_rows.len()));
        }
        if !rows.is_empty() {
            let count = rows.len();
            let index = Tensor::<B, 1, Int>::from_data(TensorData::new(rows, [count]), &device);
            picked.push(hidden.select(0, index));
        }
    }
    let nlls = if picked.is_empty() {
        Vec::new()
    } else {
        token_nlls(model, Tensor::cat(picked, 0), &targets)
    };
    let mut nlls = nlls.into_iter();
    order
        .into_iter()
        .map(|(index, scored)| (index, -nlls.by_ref().take(scored).sum::<f64>()))
        .collect()
}

/// The NLL of each row's target through the final norm and LM head: the fused kernels where
/// they run, else Burn's `log_softmax` in f32.
///
/// # Shapes
/// - `rows`: `[n, hidden]`, `targets`: `n` ids → `n` NLLs
fn token_nlls<B: Backend>(model: &Llama<B>, rows: Tensor<B, 2>, targets: &[u32]) -> Vec<f64> {
    if let Some(nlls) = kernels::<B>().token_nlls(&model.head_weights(), &rows, targets) {
        return nlls;
    }
    let [count, width] = rows.dims();
    let device = rows.device();
    let logits = model.head(rows.reshape([1, count, width]));
    let vocab = logits.dims()[2];
    let index: Vec<i64> = targets.iter().map(|&t| i64::from(t)).collect();
    let index = Tensor::<B, 2, Int>::from_data(TensorData::new(index, [count, 1]), &device);
    let logits = logits.reshape([count, vocab]).cast(FloatDType::F32);
    let picked = log_softmax(logits, 1).gather(1, index);
    crate::model::kernels::to_host_f32(picked)
        .iter()
        .map(|&v| -f64::from(v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whitespace-separated words, each its own id; a leading space joins the next word (as
    /// byte-level BPE does), so moving the context's trailing space changes the tokens.
    struct Words;

    impl TextEncoder for Words {
        type Error = std::fmt::Error;
        fn encode_text(&self, text: &str) -> Result<Vec<u32>, std::fmt::Error> {
            let mut ids = Vec::new();
            for (i, word) in text.split(' ').enumerate() {
                if word.is_empty() {
                    continue;
                }
                let spaced = i > 0;
                ids.push(word.len() as u32 * 10 + u32::from(spaced));
            }
            Ok(ids)
        }
    }

    #[test]
    fn trailing_space_moves_to_the_continuation() {
        // "Answer: " + "yes": the context is encoded without its space, the continuation is
        // what the whole text adds after it (" yes" as one spaced token).
        let pair = encode_pair(&Words, "Q is Answer: ", "yes", 0).unwrap();
        assert_eq!(pair.context, vec![10, 21, 71]);
        assert_eq!(pair.continuation, vec![31]);
        let pair = encode_pair(&Words, "Answer:", " yes no", 0).unwrap();
        assert_eq!((pair.context, pair.continuation), (vec![70], vec![31, 21]));
    }

    #[test]
    fn an_empty_context_is_conditioned_on_the_prefix_token() {
        let pair = encode_pair(&Words, "", "ab cd", 7).unwrap();
        assert_eq!((pair.context, pair.continuation), (vec![7], vec![20, 21]));
        let pair = encode_pair(&Words, "", "ab cd", 20).unwrap();
        assert_eq!((pair.context, pair.continuation), (vec![20], vec![21]));
    }

    #[test]
    fn common_prefix_by_hand() {
        assert_eq!(common_prefix(&[&[1, 2, 3], &[1, 2, 4, 5], &[1, 2]]), 2);
        assert_eq!(common_prefix(&[&[7, 1], &[8, 1]]), 0);
        assert_eq!(common_prefix(&[&[1, 2]]), 2);
        assert_eq!(common_prefix(&[]), 0);
    }

    #[test]
    fn long_requests_keep_the_last_max_length_plus_one_tokens() {
        let pair = EncodedPair {
            context: vec![1, 2, 3, 4],
            continuation: vec![5, 6],
        };
        let p = Prepared::new(&pair, 3);
        assert_eq!((p.input, p.targets), (vec![3, 4, 5], vec![5, 6]));
        let p = Prepared::new(&pair, 100);
        assert_eq!((p.input, p.targets), (vec![1, 2, 3, 4, 5], vec![5, 6]));
        // A continuation longer than the window: only what the window predicts.
        let p = Prepared::new(&pair, 1);
        assert_eq!((p.input, p.targets), (vec![5], vec![6]));
    }
}
