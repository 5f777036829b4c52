//! The empirical check of an estimate: run the pruning of a model's first layers for real and
//! read the process's peak resident set. Every layer has the same shapes, so the peak of two
//! layers is the peak of all of them.

use burn::prelude::Backend;

use crate::memory::log::MemoryLog;
use crate::model::checkpoint::Layers;
use crate::prune::layerwise::prune_model;
use crate::prune::{Method, MethodOptions, PruneError, Sparsity};

/// Prunes a copy of the first `layers` layers of `model` to 50 % with `method` and `options`
/// on `windows`, `batch` at a time, drops it, and returns the process's peak resident set
/// (None where `/proc` is missing).
pub fn probe_prune<B: Backend>(
    model: &impl Layers<B>,
    method: Method,
    options: &MethodOptions,
    windows: &[Vec<u32>],
    batch: usize,
    layers: usize,
) -> Result<Option<u64>, PruneError> {
    let mut copy = model.shell().clone();
    copy.layers = (0..layers.max(1).min(model.layer_count()))
        .map(|i| model.layer(i).map(std::borrow::Cow::into_owned))
        .collect::<Result<_, _>>()?;
    prune_model(
        &mut copy,
        method,
        options,
        Sparsity::unstructured(0.5)?,
        windows,
        batch,
        |_, _| {},
    )?;
    drop(copy);
    Ok(MemoryLog::new().checkpoint("probe").peak_rss)
}
