//! Checkpoints seen another way: under the decoder's names ([`RenamedSource`]), with a family's
//! stored-transposed linears turned ([`TransposedSource`]), and fused tensors split into their
//! parts ([`SplitSource`]).

use std::sync::Arc;

use burn::tensor::DType;

use crate::model::arch::FusedLinear;
use crate::model::arch::LlamaConfig;
use crate::model::checkpoint::ExpertStackSource;

use super::{HostData, HostTensor, SafetensorsSource, WeightError, WeightSource};

/// A checkpoint seen under the decoder's (Llama's) tensor names, for a family whose
/// checkpoints name tensors their own way ([`crate::model::family::Family::checkpoint_name`]:
/// OPT's `model.decoder.layers.N.fc1` is the decoder's `model.layers.N.mlp.up_proj`).
struct RenamedSource {
    inner: Arc<dyn WeightSource>,
    config: LlamaConfig,
}

impl RenamedSource {
    fn checkpoint_name<'n>(&self, name: &'n str) -> std::borrow::Cow<'n, str> {
        let family = self.config.architecture.family();
        match family.checkpoint_name(&self.config, name) {
            Some(theirs) => theirs.into(),
            None => name.into(),
        }
    }
}

impl WeightSource for RenamedSource {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        self.inner.tensor(&self.checkpoint_name(name))
    }

    fn tensor_transposed(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        self.inner.tensor_transposed(&self.checkpoint_name(name))
    }

    fn tensor_transposed_in(
        &self,
        name: &str,
        dtype: DType,
    ) -> Result<Option<HostData>, WeightError> {
        self.inner
            .tensor_transposed_in(&self.checkpoint_name(name), dtype)
    }

    fn parameter_count(&self) -> u64 {
        self.inner.parameter_count()
    }

    fn release_pages(&self) {
        self.inner.release_pages();
    }
}

/// A Hugging Face checkpoint whose family stores some linear weights transposed, `[in, out]`
/// (GPT-2's `Conv1D`; [`crate::model::family::FamilyRow::transposed_linears`]), seen with every
/// weight in PyTorch's `[out, in]`. Names are the checkpoint's; GGUF files store those weights
/// as linears, so only folders are wrapped.
pub struct TransposedSource {
    inner: Arc<dyn WeightSource>,
    row: &'static crate::model::family::FamilyRow,
}

impl TransposedSource {
    /// `inner` with the transposed weights of `config`'s family turned, when it has any.
    pub fn for_family(config: &LlamaConfig, inner: Arc<dyn WeightSource>) -> Arc<dyn WeightSource> {
        let row = config.architecture.row();
        if row.transposed_linears.is_empty() {
            return inner;
        }
        #[allow(clippy::arc_with_non_send_sync)]
        let source = Arc::new(Self { inner, row });
        source
    }
}

/// A Hugging Face checkpoint as the decoder reads it: under Llama's names, in PyTorch's
/// layout ([`TransposedSource`]), its stacked linears ([`SplitSource`]) and experts
/// ([`ExpertStackSource`]) apart.
pub fn hf_source(config: &LlamaConfig, checkpoint: SafetensorsSource) -> Arc<dyn WeightSource> {
    let stacks = crate::model::checkpoint::stacks_in(config, |name| checkpoint.has_tensor(name));
    let experts = ExpertStackSource::wrap(config, stacks, Arc::new(checkpoint));
    SplitSource::for_family(config, TransposedSource::for_family(config, experts))
}

/// `t` with its shape's two dimensions swapped (its values as they are).
fn swapped(mut t: HostTensor) -> HostTensor {
    t.shape.reverse();
    t
}

impl WeightSource for TransposedSource {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        if self.row.stores_transposed(name) {
            return Ok(self.inner.tensor_transposed(name)?.map(swapped));
        }
        self.inner.tensor(name)
    }

    fn tensor_transposed(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        if self.row.stores_transposed(name) {
            return Ok(self.inner.tensor(name)?.map(swapped));
        }
        self.inner.tensor_transposed(name)
    }

    fn tensor_transposed_in(
        &self,
        name: &str,
        dtype: DType,
    ) -> Result<Option<HostData>, WeightError> {
        if self.row.stores_transposed(name) {
            return Ok(self
                .tensor_transposed(name)?
                .map(|t| HostData::from_transposed(t, dtype)));
        }
        self.inner.tensor_transposed_in(name, dtype)
    }

    fn parameter_count(&self) -> u64 {
        self.inner.parameter_count()
    }

    fn release_pages(&self) {
        self.inner.release_pages();
    }
}

/// A checkpoint whose family stores linears stacked in one tensor (Phi-3's `qkv_proj`,
/// `gate_up_proj`), seen with the linears apart: `model.layers.N.self_attn.k_proj.weight` is
/// the rows of `model.layers.N.self_attn.qkv_proj.weight` after the query's. Every other name,
/// and a checkpoint that already has the linears apart, passes through.
pub struct SplitSource {
    inner: Arc<dyn WeightSource>,
    fused: &'static [FusedLinear],
    config: LlamaConfig,
    /// The stacked tensor read last: its parts are asked for one after another, and each
    /// would otherwise read and convert the whole stack again.
    last: std::sync::Mutex<Option<(String, Arc<HostTensor>)>>,
}

impl SplitSource {
    /// `inner` as the decoder reads it: under Llama's names ([`RenamedSource`]), split when
    /// the family of `config` stacks linears.
    pub fn for_family(config: &LlamaConfig, inner: Arc<dyn WeightSource>) -> Arc<dyn WeightSource> {
        // The loaders share sources as `Arc<dyn WeightSource>` on one thread at a time; the
        // trait does not require Send or Sync, so neither do these wrappers.
        #[allow(clippy::arc_with_non_send_sync)]
        let inner: Arc<dyn WeightSource> = Arc::new(RenamedSource {
            inner,
            config: config.clone(),
        });
        let fused = config.architecture.row().fused_linears;
        if fused.is_empty() {
            return inner;
        }
        #[allow(clippy::arc_with_non_send_sync)]
        let split = Arc::new(Self {
            inner,
            fused,
            config: config.clone(),
            last: std::sync::Mutex::new(None),
        });
        split
    }

    /// The stacked tensor `name`, from the one held when it is that one.
    fn stacked(&self, name: &str) -> Result<Option<Arc<HostTensor>>, WeightError> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((held, t)) = last.as_ref() {
            if held == name {
                return Ok(Some(Arc::clone(t)));
            }
        }
        // Drop the previous stack before reading the next.
        *last = None;
        let Some(t) = self.inner.tensor(name)? else {
            return Ok(None);
        };
        let t = Arc::new(t);
        *last = Some((name.to_owned(), Arc::clone(&t)));
        Ok(Some(t))
    }

    /// Where part `name` lives: the stacked tensor's name and the part's rows in it, one range
    /// (stacked part by part) or one per kv head (stacked by kv head).
    fn locate(&self, name: &str) -> Option<(String, Vec<std::ops::Range<usize>>)> {
        let rest = name.strip_prefix("model.layers.")?;
        let (layer, rest) = rest.split_once('.')?;
        let (module, kind) = rest.rsplit_once('.')?;
        let fused = self.fused.iter().find(|f| f.parts.contains(&module))?;
        let stacked = format!("model.layers.{layer}.{}.{kind}", fused.fused);
        let rows: Option<Vec<usize>> = fused
            .parts
            .iter()
            .map(|part| self.config.linear_outputs(part))
            .collect();
        let index = fused.parts.iter().position(|p| *p == module)?;
        let mut ranges = fused.row_ranges(&rows?, self.config.num_key_value_heads)?;
        Some((stacked, ranges.swap_remove(index)))
    }
}

impl WeightSource for SplitSource {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        if let Some(t) = self.inner.tensor(name)? {
            return Ok(Some(t));
        }
        let Some((stacked, ranges)) = self.locate(name) else {
            return Ok(None);
        };
        let Some(t) = self.stacked(&stacked)? else {
            return Ok(None);
        };
        let cols: usize = t.shape[1..].iter().product();
        let total = t.shape.first().copied().unwrap_or(0);
        let end = ranges.iter().map(|r| r.end).max().unwrap_or(0);
        if end > total {
            return Err(WeightError::Shape {
                name: stacked,
                source_name: self.inner.name(),
                expected: vec![end],
                found: t.shape.clone(),
            });
        }
        let mut shape = t.shape.clone();
        shape[0] = ranges.iter().map(|r| r.len()).sum();
        let mut data = Vec::with_capacity(shape[0] * cols);
        for rows in &ranges {
            data.extend_from_slice(&t.data[rows.start * cols..rows.end * cols]);
        }
        if end == total {
            // The stack's last part: nothing more will be asked of it.
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        Ok(Some(HostTensor { data, shape }))
    }

    fn parameter_count(&self) -> u64 {
        self.inner.parameter_count()
    }

    fn release_pages(&self) {
        self.inner.release_pages();
    }
}
