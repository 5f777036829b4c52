//! A pruned linear held compressed on the CPU: per output, a bitmask over the inputs and the
//! kept values alone, in the layout of compressed-tensors' `sparse-bitmask` (`bitmask` packed
//! little-endian per row, `compressed` values row after row, `row_offsets` where each row's
//! values start), a row being one output (PyTorch's `[out, in]` weight row).
//!
//! Decoding reads every weight once a token, so a product of a few rows is bound by the bytes it
//! reads: at 50 % the mask and the f32 values are 2.125 bytes a weight against dense f32's 4.
//! [`SparseLinear::product`] reads each row's mask and values once for all the rows of `x`: on
//! AVX-512F, sixteen mask bits at a time expand the next values into a register
//! (`vexpandps`), multiplied with sixteen inputs of each row of `x`; elsewhere a loop over the
//! set bits. The outputs are split between the cores; for one or two rows of `x`, several outputs
//! run at once, so that their expand chains overlap. Exact: every kept value is the dense
//! weight's, every pruned one zero; the sums are the dense product's within f32 rounding (each
//! output sums its kept terms in another order).

use std::collections::HashMap;
use std::sync::Arc;

use burn::module::ParamId;
use rayon::prelude::*;

/// The linears of a model held compressed, by the id of their dense weight's parameter: a
/// weight replaced since (pruned again, reloaded) has a new id, so it is not found and runs
/// dense.
#[derive(Debug, Default)]
pub struct SparseWeights {
    linears: HashMap<ParamId, Arc<SparseLinear>>,
}

impl SparseWeights {
    /// Holds `linear` as the compressed form of the weight parameter `id`.
    pub fn insert(&mut self, id: ParamId, linear: SparseLinear) {
        self.linears.insert(id, Arc::new(linear));
    }

    /// The compressed form of the weight parameter `id`, where there is one.
    pub fn get(&self, id: &ParamId) -> Option<Arc<SparseLinear>> {
        self.linears.get(id).cloned()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.linears.is_empty()
    }
}

/// A linear's weight, compressed: its outputs as rows of a bitmask over the inputs and the
/// kept values.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseLinear {
    /// Outputs (rows).
    pub outputs: usize,
    /// Inputs (the bits of a row).
    pub inputs: usize,
    /// `outputs × ceil(inputs / 8)` bytes, bit `c % 8` of byte `c / 8` of a row set where input
    /// `c` is kept.
    pub bitmask: Vec<u8>,
    /// The kept values, row after row, each row's in input order.
    pub values: Vec<f32>,
    /// Where each row's values start in `values`.
    pub row_offsets: Vec<usize>,
}

/// Rows of `x` that share one pass over the weight's rows.
const ROW_BLOCK: usize = 4;

/// Outputs per parallel job.
const OUTPUT_CHUNK: usize = 64;

impl SparseLinear {
    /// The compressed form of a dense weight in Burn's `[inputs, outputs]` layout (row-major):
    /// its nonzero entries are kept.
    pub fn from_in_out(weight: &[f32], inputs: usize, outputs: usize) -> Self {
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "a weight of inputs × outputs values"
        );
        let row_bytes = inputs.div_ceil(8);
        // A chunk of outputs at a time, each input's values of the chunk read together (one
        // contiguous run of the `[inputs, outputs]` weight).
        let chunks = (0..outputs).step_by(OUTPUT_CHUNK);
        let rows: Vec<(Vec<u8>, Vec<f32>)> = chunks
            .collect::<Vec<_>>()
            .into_par_iter()
            .flat_map_iter(|first| {
                let chunk = first..(first + OUTPUT_CHUNK).min(outputs);
                let mut rows = vec![(vec![0u8; row_bytes], Vec::new()); chunk.len()];
                for i in 0..inputs {
                    let run = &weight[i * outputs + chunk.start..i * outputs + chunk.end];
                    for ((mask, kept), &w) in rows.iter_mut().zip(run) {
                        if w != 0.0 {
                            mask[i / 8] |= 1 << (i % 8);
                            kept.push(w);
                        }
                    }
                }
                rows
            })
            .collect();
        let mut bitmask = Vec::with_capacity(outputs * row_bytes);
        let mut values = Vec::with_capacity(rows.iter().map(|r| r.1.len()).sum());
        let mut row_offsets = Vec::with_capacity(outputs);
        for (mask, kept) in rows {
            row_offsets.push(values.len());
            bitmask.extend_from_slice(&mask);
            values.extend_from_slice(&kept);
        }
        Self {
            outputs,
            inputs,
            bitmask,
            values,
            row_offsets,
        }
    }

    /// The dense weight again, `[inputs, outputs]`.
    pub fn to_in_out(&self) -> Vec<f32> {
        let mut weight = vec![0.0f32; self.inputs * self.outputs];
        for o in 0..self.outputs {
            let mut at = self.row_offsets[o];
            for i in 0..self.inputs {
                if self.row_mask(o)[i / 8] >> (i % 8) & 1 == 1 {
                    weight[i * self.outputs + o] = self.values[at];
                    at += 1;
                }
            }
        }
        weight
    }

    /// The bytes it holds: mask, values and row offsets (as compressed-tensors stores them,
    /// 8 bytes each).
    pub fn bytes(&self) -> usize {
        self.bitmask.len() + self.values.len() * 4 + self.row_offsets.len() * 8
    }

    /// The inputs `depth` of the outputs `rows`, dense, into `panel` (`[rows, depth.len()]`,
    /// PyTorch's layout of that slice of the weight). `at` holds, per output of `rows`, where
    /// its values from `depth.start` on begin, and is moved past `depth`: start it at the
    /// outputs' [`SparseLinear::row_offsets`] and expand the depths in order.
    pub fn expand_panel(
        &self,
        rows: std::ops::Range<usize>,
        depth: std::ops::Range<usize>,
        panel: &mut [f32],
        at: &mut [usize],
    ) {
        let width = depth.len();
        assert!(rows.end <= self.outputs, "rows among the outputs");
        assert!(depth.end <= self.inputs, "a depth within the inputs");
        assert_eq!(panel.len(), rows.len() * width, "a panel of rows × depth");
        assert_eq!(at.len(), rows.len(), "a value offset for each row");
        if width == 0 {
            return;
        }
        for ((o, row), at) in rows.zip(panel.chunks_mut(width)).zip(at) {
            let (mask, values) = (self.row_mask(o), &self.values[*at..]);
            #[cfg(target_arch = "x86_64")]
            if avx512() {
                // SAFETY: AVX-512F and popcnt are present (checked at run time).
                #[allow(unsafe_code)]
                let taken = unsafe { avx512_expand_row(mask, values, depth.clone(), row) };
                *at += taken;
                continue;
            }
            *at += expand_row(mask, values, depth.clone(), row);
        }
    }

    /// Row `o`'s mask bytes.
    fn row_mask(&self, o: usize) -> &[u8] {
        let row_bytes = self.inputs.div_ceil(8);
        &self.bitmask[o * row_bytes..(o + 1) * row_bytes]
    }

    /// `out[rows, outputs] (+)= x[rows, inputs] · W`: added to `out` where `accumulate`.
    pub fn product(&self, x: &[f32], rows: usize, out: &mut [f32], accumulate: bool) {
        assert_eq!(x.len(), rows * self.inputs, "x of rows × inputs values");
        assert_eq!(
            out.len(),
            rows * self.outputs,
            "out of rows × outputs values"
        );
        if rows == 0 {
            return;
        }
        // Per job, its outputs' sums for every row of x, `[outputs, rows]` (for one row, `out`
        // itself); then set in place.
        let mut by_output = match rows {
            1 => Vec::new(),
            _ => vec![0.0f32; self.outputs * rows],
        };
        let sums = match rows {
            1 => &mut *out,
            _ => &mut by_output[..],
        };
        let accumulate_here = accumulate && rows == 1;
        sums.par_chunks_mut(OUTPUT_CHUNK * rows)
            .enumerate()
            .for_each(|(chunk, sums)| {
                self.outputs_sums(chunk * OUTPUT_CHUNK, x, rows, sums, accumulate_here)
            });
        if rows == 1 {
            return;
        }
        for (o, sums) in by_output.chunks(rows).enumerate() {
            for (r, &s) in sums.iter().enumerate() {
                let to = &mut out[r * self.outputs + o];
                *to = match accumulate {
                    true => *to + s,
                    false => s,
                };
            }
        }
    }

    /// The outputs from `first` on, `sums.len() / rows` of them, for every row of `x`, into
    /// `sums` (`[outputs, rows]`; added to it where `accumulate`): a block of rows at a time,
    /// several outputs at a time where the rows are few, so that several expand chains are in
    /// flight.
    fn outputs_sums(
        &self,
        first: usize,
        x: &[f32],
        rows: usize,
        sums: &mut [f32],
        accumulate: bool,
    ) {
        let outputs = sums.len() / rows;
        for block_start in (0..rows).step_by(ROW_BLOCK) {
            let block = ROW_BLOCK.min(rows - block_start);
            let x = &x[block_start * self.inputs..(block_start + block) * self.inputs];
            let mut o = 0;
            while o < outputs {
                let mut put = |o: usize, row_sums: &[f32]| {
                    let at = o * rows + block_start;
                    let to = &mut sums[at..at + block];
                    match accumulate {
                        true => to.iter_mut().zip(row_sums).for_each(|(t, s)| *t += s),
                        false => to.copy_from_slice(row_sums),
                    }
                };
                #[cfg(target_arch = "x86_64")]
                if avx512() {
                    o += match (block, outputs - o) {
                        (1, 4..) => self.avx512_outputs::<1, 4>(first + o, x, |k, s| put(o + k, s)),
                        (1, _) => self.avx512_outputs::<1, 1>(first + o, x, |k, s| put(o + k, s)),
                        (2, 2..) => self.avx512_outputs::<2, 2>(first + o, x, |k, s| put(o + k, s)),
                        (2, _) => self.avx512_outputs::<2, 1>(first + o, x, |k, s| put(o + k, s)),
                        (3, _) => self.avx512_outputs::<3, 1>(first + o, x, |k, s| put(o + k, s)),
                        _ => self.avx512_outputs::<4, 1>(first + o, x, |k, s| put(o + k, s)),
                    };
                    continue;
                }
                let mut row_sums = [0.0f32; ROW_BLOCK];
                let (mask, values) = (self.row_mask(first + o), self.row_values(first + o));
                scalar_row_sums(mask, values, x, self.inputs, &mut row_sums[..block]);
                put(o, &row_sums[..block]);
                o += 1;
            }
        }
    }

    /// Row `o`'s kept values, and every row's after it.
    fn row_values(&self, o: usize) -> &[f32] {
        &self.values[self.row_offsets[o]..]
    }

    /// Outputs `first..first + N` for the `R` rows of `x` on the AVX-512 kernel, each
    /// output's `R` sums handed to `put` with its index from `first`; returns `N`.
    #[cfg(target_arch = "x86_64")]
    fn avx512_outputs<const R: usize, const N: usize>(
        &self,
        first: usize,
        x: &[f32],
        mut put: impl FnMut(usize, &[f32]),
    ) -> usize {
        assert_eq!(x.len(), R * self.inputs, "R rows of x");
        let masks: [&[u8]; N] = std::array::from_fn(|k| self.row_mask(first + k));
        let values: [&[f32]; N] = std::array::from_fn(|k| self.row_values(first + k));
        // SAFETY: AVX-512F and popcnt are present (checked by the caller at run time).
        #[allow(unsafe_code)]
        let (sums, at) = unsafe { avx512_sums::<R, N>(masks, values, x, self.inputs) };
        for k in 0..N {
            let mut row_sums = sums[k];
            // The inputs past the whole blocks (a whole number of mask bytes).
            let tail = self.inputs / 16 * 16;
            if tail < self.inputs {
                let mut rest = [0.0f32; R];
                let (mask, values) = (&masks[k][tail / 8..], &values[k][at[k]..]);
                scalar_row_sums(mask, values, &x[tail..], self.inputs, &mut rest);
                row_sums.iter_mut().zip(rest).for_each(|(s, r)| *s += r);
            }
            put(k, &row_sums);
        }
        N
    }
}

/// The kernel [`SparseLinear::product`] runs on this CPU: `AVX-512 expand` or `portable`.
pub fn kernel_name() -> &'static str {
    match expands_in_registers() {
        true => "AVX-512 expand",
        false => "portable",
    }
}

/// Whether [`SparseLinear::product`] runs its AVX-512 kernel on this CPU, the one measured to
/// beat the dense product; elsewhere a portable loop over the set bits.
pub fn expands_in_registers() -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        return true;
    }
    false
}

/// Whether this CPU has AVX-512F (and `popcnt`, which every such CPU has), checked once.
#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("popcnt")
    })
}

/// One output's sums for the rows of `x` (`sums.len()` rows, `stride` apart), over the set
/// bits of its `mask` (bit `i` for the input at `x[r · stride + i]`) with its kept `values`.
fn scalar_row_sums(mask: &[u8], values: &[f32], x: &[f32], stride: usize, sums: &mut [f32]) {
    sums.fill(0.0);
    let mut at = 0;
    for (byte_index, &byte) in mask.iter().enumerate() {
        let mut bits = byte;
        while bits != 0 {
            let i = byte_index * 8 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let w = values[at];
            at += 1;
            for (r, s) in sums.iter_mut().enumerate() {
                *s += w * x[r * stride + i];
            }
        }
    }
}

/// The inputs `depth` of one output, dense, into `row`: the set bits of its `mask` within
/// `depth` take its kept `values` in order (the first the value of the first set bit at or
/// after `depth.start`), the others zero. Returns how many values it took.
fn expand_row(
    mask: &[u8],
    values: &[f32],
    depth: std::ops::Range<usize>,
    row: &mut [f32],
) -> usize {
    row.fill(0.0);
    let mut at = 0;
    let bytes = depth.start / 8..depth.end.div_ceil(8);
    for (byte_index, &byte) in bytes.clone().zip(&mask[bytes]) {
        let mut bits = byte;
        while bits != 0 {
            let i = byte_index * 8 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if depth.contains(&i) {
                row[i - depth.start] = values[at];
                at += 1;
            }
        }
    }
    at
}

/// [`expand_row`] sixteen inputs at a time where they start on a whole mask byte pair: the
/// sixteen bits expand the next values into their lanes (`vexpandps`), stored whole. Returns
/// how many values it took.
///
/// # Safety
/// The CPU must have AVX-512F and `popcnt`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
#[allow(unsafe_code)]
unsafe fn avx512_expand_row(
    mask: &[u8],
    values: &[f32],
    depth: std::ops::Range<usize>,
    row: &mut [f32],
) -> usize {
    use std::arch::x86_64::*;
    let lead_end = depth.start.next_multiple_of(16).min(depth.end);
    let blocks = (depth.end - lead_end) / 16;
    let mut at = expand_row(
        mask,
        values,
        depth.start..lead_end,
        &mut row[..lead_end - depth.start],
    );
    assert!(
        mask.len() >= (lead_end + 16 * blocks) / 8,
        "mask bits for every block"
    );
    for b in 0..blocks {
        let i = lead_end + 16 * b;
        // SAFETY: the mask holds these sixteen bits (asserted above); the values hold one for
        // each set bit, which is all the expanding load reads; the row holds sixteen values
        // from `i - depth.start`, as `i + 16 <= depth.end`.
        unsafe {
            let bits = u16::from_le(mask.as_ptr().add(i / 8).cast::<u16>().read_unaligned());
            let w = _mm512_maskz_expandloadu_ps(bits, values.as_ptr().wrapping_add(at));
            _mm512_storeu_ps(row.as_mut_ptr().add(i - depth.start), w);
            at += bits.count_ones() as usize;
        }
    }
    let tail = lead_end + 16 * blocks;
    at + expand_row(
        mask,
        &values[at..],
        tail..depth.end,
        &mut row[tail - depth.start..],
    )
}

/// [`scalar_row_sums`] of `N` outputs at once over the whole blocks of sixteen inputs: each
/// output's sixteen mask bits of a block expand its next values into their lanes (`vexpandps`),
/// multiplied with the block's inputs of each of the `R` rows of `x` and summed per lane. The
/// `N` outputs' chains (value offsets and sums) are independent, so they overlap. Returns each
/// output's sums and how many of its values the blocks took.
///
/// # Safety
/// The CPU must have AVX-512F and `popcnt`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
#[allow(unsafe_code)]
unsafe fn avx512_sums<const R: usize, const N: usize>(
    masks: [&[u8]; N],
    values: [&[f32]; N],
    x: &[f32],
    inputs: usize,
) -> ([[f32; R]; N], [usize; N]) {
    use std::arch::x86_64::*;
    let blocks = inputs / 16;
    assert!(
        masks.iter().all(|m| m.len() >= 2 * blocks),
        "masks of whole blocks"
    );
    // Sixteen values read whole from any offset of an output's row stay within its values
    // (then expanded in a register); otherwise the expand reads just the set bits' values.
    let whole_reads = values.iter().all(|v| v.len() >= inputs + 16);
    let mut acc = [[_mm512_setzero_ps(); R]; N];
    let mut at = [0usize; N];
    for b in 0..blocks {
        // SAFETY: each row of x has `inputs` values and this block ends within them.
        let xs: [__m512; R] = std::array::from_fn(|r| unsafe {
            _mm512_loadu_ps(x.as_ptr().add(r * inputs + 16 * b))
        });
        let mut step = |k: usize| {
            // SAFETY: each mask holds the bits of every whole block (asserted above).
            let bits = u16::from_le(unsafe {
                masks[k].as_ptr().add(2 * b).cast::<u16>().read_unaligned()
            });
            let from = values[k].as_ptr().wrapping_add(at[k]);
            // SAFETY: a row's value offset is at most `inputs`, so sixteen values lie within
            // its values where `whole_reads`; otherwise the row holds a value for every set
            // bit, which is all the expanding load reads.
            let w = unsafe {
                match whole_reads {
                    true => _mm512_maskz_expand_ps(bits, _mm512_loadu_ps(from)),
                    false => _mm512_maskz_expandloadu_ps(bits, from),
                }
            };
            at[k] += bits.count_ones() as usize;
            for r in 0..R {
                acc[k][r] = _mm512_fmadd_ps(w, xs[r], acc[k][r]);
            }
        };
        // Spelled out for four, so that the chains live in registers.
        match N {
            4 => {
                step(0);
                step(1);
                step(2);
                step(3);
            }
            _ => (0..N).for_each(step),
        }
    }
    let sums = std::array::from_fn(|k| std::array::from_fn(|r| _mm512_reduce_add_ps(acc[k][r])));
    (sums, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A weight `[inputs, outputs]` whose entries are zero where a hash says (about `zero_in`
    /// of every 10), the others distinct values in [-1, 1).
    fn weight(inputs: usize, outputs: usize, zero_in: usize) -> Vec<f32> {
        (0..inputs * outputs)
            .map(|i| match (i * 2_654_435_761) % 97 % 10 < zero_in {
                true => 0.0,
                false => ((i * 7919) % 2003) as f32 / 1001.5 - 1.0,
            })
            .collect()
    }

    fn dense_product(x: &[f32], w: &[f32], rows: usize, inputs: usize, outputs: usize) -> Vec<f64> {
        (0..rows * outputs)
            .map(|ro| {
                let (r, o) = (ro / outputs, ro % outputs);
                (0..inputs)
                    .map(|i| f64::from(x[r * inputs + i]) * f64::from(w[i * outputs + o]))
                    .sum()
            })
            .collect()
    }

    #[test]
    fn a_hand_made_row_packs_little_endian_with_its_offsets() {
        // Inputs 0..10, outputs 2: output 0 keeps inputs 0, 3 and 9; output 1 keeps input 8.
        let mut w = vec![0.0f32; 10 * 2];
        w[0] = 1.0;
        w[3 * 2] = 2.0;
        w[9 * 2] = 3.0;
        w[8 * 2 + 1] = 4.0;
        let s = SparseLinear::from_in_out(&w, 10, 2);
        assert_eq!(s.bitmask, vec![0b0000_1001, 0b0000_0010, 0, 0b0000_0001]);
        assert_eq!(s.values, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.row_offsets, vec![0, 3]);
        assert_eq!(s.to_in_out(), w);
        let mut out = vec![0.0; 2];
        let x: Vec<f32> = (1..=10).map(|v| v as f32).collect();
        s.product(&x, 1, &mut out, false);
        assert_eq!(out, vec![1.0 + 2.0 * 4.0 + 3.0 * 10.0, 4.0 * 9.0]);
    }

    #[test]
    fn products_equal_the_dense_product_at_every_sparsity_and_row_count() {
        // 70 inputs: four whole blocks of sixteen and a tail of six.
        let (inputs, outputs) = (70, 131);
        for zero_in in [0, 5, 7, 10] {
            let w = weight(inputs, outputs, zero_in);
            let s = SparseLinear::from_in_out(&w, inputs, outputs);
            assert_eq!(s.to_in_out(), w, "exact");
            assert_eq!(s.values.len(), w.iter().filter(|v| **v != 0.0).count());
            for rows in [1, 2, 3, 4, 9] {
                let x: Vec<f32> = (0..rows * inputs)
                    .map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0)
                    .collect();
                let mut out = vec![f32::NAN; rows * outputs];
                s.product(&x, rows, &mut out, false);
                let expected = dense_product(&x, &w, rows, inputs, outputs);
                for (o, e) in out.iter().zip(&expected) {
                    assert!(
                        (f64::from(*o) - e).abs() <= 1e-5 * (1.0 + e.abs()),
                        "{o} vs {e}"
                    );
                }
                // Accumulating adds the same sums to what `out` held.
                let before: Vec<f32> = (0..rows * outputs).map(|i| (i % 5) as f32).collect();
                let mut added = before.clone();
                s.product(&x, rows, &mut added, true);
                for ((a, b), o) in added.iter().zip(&before).zip(&out) {
                    assert_eq!(*a, b + o);
                }
                // The portable loop gives the same within rounding.
                let mut sums = vec![0.0f32; rows.min(ROW_BLOCK)];
                scalar_row_sums(s.row_mask(7), s.row_values(7), &x, inputs, &mut sums);
                for (r, v) in sums.iter().enumerate() {
                    assert!(
                        (f64::from(*v) - expected[r * outputs + 7]).abs()
                            <= 1e-5 * (1.0 + expected[r * outputs + 7].abs())
                    );
                }
            }
        }
    }

    /// Panels of any depth, starting and ending inside a mask byte or on a block of sixteen,
    /// are the dense weight's, on this CPU's kernel and on the portable loop.
    #[test]
    fn panels_are_slices_of_the_dense_weight() {
        let (inputs, outputs) = (70, 131);
        let w = weight(inputs, outputs, 5);
        let s = SparseLinear::from_in_out(&w, inputs, outputs);
        for depth in [0..70, 3..70, 17..50, 16..32, 5..9, 64..70, 69..70] {
            // Where each output's values from input `from` on begin.
            let offsets = |rows: std::ops::Range<usize>, from: usize| -> Vec<usize> {
                rows.map(|o| {
                    let before = (0..from).filter(|&i| w[i * outputs + o] != 0.0);
                    s.row_offsets[o] + before.count()
                })
                .collect()
            };
            let mut panel = vec![f32::NAN; outputs * depth.len()];
            let mut at = offsets(0..outputs, depth.start);
            s.expand_panel(0..outputs, depth.clone(), &mut panel, &mut at);
            assert_eq!(at, offsets(0..outputs, depth.end), "moved past {depth:?}");
            let mut some = vec![f32::NAN; 5 * depth.len()];
            let mut at = offsets(7..12, depth.start);
            s.expand_panel(7..12, depth.clone(), &mut some, &mut at);
            assert_eq!(some, panel[7 * depth.len()..12 * depth.len()]);
            for (o, row) in panel.chunks(depth.len()).enumerate() {
                let dense: Vec<f32> = depth.clone().map(|i| w[i * outputs + o]).collect();
                assert_eq!(row, dense, "output {o}, inputs {depth:?}");
                let before = (0..depth.start)
                    .filter(|&i| w[i * outputs + o] != 0.0)
                    .count();
                let mut portable = vec![f32::NAN; depth.len()];
                let taken = expand_row(
                    s.row_mask(o),
                    &s.row_values(o)[before..],
                    depth.clone(),
                    &mut portable,
                );
                assert_eq!(portable, dense);
                assert_eq!(taken, dense.iter().filter(|v| **v != 0.0).count());
            }
        }
    }

    #[test]
    fn half_the_weights_cost_a_little_over_half_the_bytes() {
        let (inputs, outputs) = (576, 1536);
        let w = weight(inputs, outputs, 5);
        let s = SparseLinear::from_in_out(&w, inputs, outputs);
        let ratio = s.bytes() as f64 / (w.len() * 4) as f64;
        let density = s.values.len() as f64 / w.len() as f64;
        // Values at the density, plus a bit (1/32 of f32) a weight, plus the row offsets.
        let expected = density + 1.0 / 32.0 + 8.0 / (inputs as f64 * 4.0);
        assert!((ratio - expected).abs() < 1e-9, "{ratio} vs {expected}");
    }
}
