//! How checkpoints stack several of the decoder's linears in one tensor: fused linears by rows
//! ([`FusedLinear`]) and experts across a layer ([`ExpertStacks`]).

/// A checkpoint tensor that stacks several of the decoder's linears by rows (names relative to
/// the layer, without `.weight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusedLinear {
    /// The checkpoint's name, e.g. `self_attn.qkv_proj`.
    pub fused: &'static str,
    /// The linears it holds, in row order.
    pub parts: &'static [&'static str],
    /// Whether the rows go by key/value head instead of part by part: each kv head's block
    /// holds its rows of every part in turn (its query heads', its key's, its value's), then
    /// the next kv head's (GPT-NeoX's and BLOOM's `query_key_value`, head by head; Falcon's
    /// grouped by kv head).
    pub per_kv_head: bool,
}

impl FusedLinear {
    /// Where each part's rows lie in the stack: per part, in `parts` order, one range of rows
    /// (stacked part by part) or one per kv head (`kv_heads` blocks of every part's
    /// `rows / kv_heads` rows in turn), given each part's rows; `None` where a part's rows do
    /// not split evenly over the kv heads. Loading reads a part from its ranges
    /// ([`crate::model::checkpoint::SplitSource`]), saving writes each part into them.
    pub fn row_ranges(
        &self,
        part_rows: &[usize],
        kv_heads: usize,
    ) -> Option<Vec<Vec<std::ops::Range<usize>>>> {
        let blocks = if self.per_kv_head { kv_heads.max(1) } else { 1 };
        if part_rows.iter().any(|rows| !rows.is_multiple_of(blocks)) {
            return None;
        }
        // Each part's rows in one block, and the rows of a whole block.
        let widths: Vec<usize> = part_rows.iter().map(|rows| rows / blocks).collect();
        let block: usize = widths.iter().sum();
        let mut offset = 0;
        Some(
            widths
                .iter()
                .map(|&width| {
                    let ranges = (0..blocks)
                        .map(|b| b * block + offset..b * block + offset + width)
                        .collect();
                    offset += width;
                    ranges
                })
                .collect(),
        )
    }
}

/// How a family's checkpoints stack a layer's experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertStacks {
    /// The module an expert's linears lie under once the family has renamed them, relative to
    /// the layer (`mlp.experts`, Llama 4's `feed_forward.experts`): `<module>.E.gate_proj`.
    pub module: &'static str,
    /// The checkpoint's stack of the gate and up projections, relative to the layer
    /// (`mlp.experts.gate_up_proj`); its biases' stack has `_bias` appended.
    pub gate_up: &'static str,
    /// The checkpoint's stack of the down projections, relative to the layer
    /// (`mlp.experts.down_proj`).
    pub down: &'static str,
    /// Whether `gate_up_proj` holds the gate's outputs as its first half and the up
    /// projection's as its second (Llama 4) instead of interleaved (GPT-OSS).
    pub halves: bool,
    /// Whether an expert's matrix may be stored `[out, in]`, transformers 5's own layout, which
    /// it saves (Qwen3-VL-MoE): then it is, unless shaped `[in, out]` and not square (the hub's
    /// layout, which transformers transposes on loading where the shapes tell them apart).
    pub out_major: bool,
}
