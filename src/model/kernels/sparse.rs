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
//! set bits. The outputs are split between the cores. Exact: every kept value is the dense
//! weight's, every pruned one zero; the sums are the dense product's within f32 rounding (each
//! output sums its kept terms in another order).

use rayon::prelude::*;

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
        let rows: Vec<(Vec<u8>, Vec<f32>)> = (0..outputs)
            .into_par_iter()
            .map(|o| {
                let mut mask = vec![0u8; row_bytes];
                let mut kept = Vec::new();
                for i in 0..inputs {
                    let w = weight[i * outputs + o];
                    if w != 0.0 {
                        mask[i / 8] |= 1 << (i % 8);
                        kept.push(w);
                    }
                }
                (mask, kept)
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

    /// Row `o`'s mask bytes.
    fn row_mask(&self, o: usize) -> &[u8] {
        let row_bytes = self.inputs.div_ceil(8);
        &self.bitmask[o * row_bytes..(o + 1) * row_bytes]
    }

    /// `out[rows, outputs] = x[rows, inputs] · W`.
    pub fn product(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        assert_eq!(x.len(), rows * self.inputs, "x of rows × inputs values");
        assert_eq!(
            out.len(),
            rows * self.outputs,
            "out of rows × outputs values"
        );
        // Per job, its outputs' sums for every row of x, `[outputs, rows]`; then set in place.
        let mut by_output = vec![0.0f32; self.outputs * rows];
        by_output
            .par_chunks_mut(OUTPUT_CHUNK * rows.max(1))
            .enumerate()
            .for_each(|(chunk, sums)| {
                let first = chunk * OUTPUT_CHUNK;
                for (k, sums) in sums.chunks_mut(rows.max(1)).enumerate() {
                    self.row_sums(first + k, x, sums);
                }
            });
        if rows == 1 {
            out.copy_from_slice(&by_output);
            return;
        }
        for (o, sums) in by_output.chunks(rows).enumerate() {
            for (r, &s) in sums.iter().enumerate() {
                out[r * self.outputs + o] = s;
            }
        }
    }

    /// Output `o` for every row of `x`, into `sums` (one per row).
    fn row_sums(&self, o: usize, x: &[f32], sums: &mut [f32]) {
        let values = &self.values[self.row_offsets[o]..];
        let mask = self.row_mask(o);
        for (block, sums) in sums.chunks_mut(ROW_BLOCK).enumerate() {
            let first = block * ROW_BLOCK * self.inputs;
            let x = &x[first..first + sums.len() * self.inputs];
            #[cfg(target_arch = "x86_64")]
            if avx512() {
                // SAFETY: AVX-512F is present (checked at run time).
                #[allow(unsafe_code)]
                unsafe {
                    avx512_row_sums(mask, values, x, self.inputs, sums)
                };
                continue;
            }
            scalar_row_sums(mask, values, x, self.inputs, sums);
        }
    }
}

/// The kernel [`SparseLinear::product`] runs on this CPU: `AVX-512 expand` or `portable`.
pub fn kernel_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        return "AVX-512 expand";
    }
    "portable"
}

/// Whether this CPU has AVX-512F, checked once.
#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx512f"))
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

/// [`scalar_row_sums`] sixteen inputs at a time: the block's sixteen mask bits expand the next
/// values into their lanes, multiplied with each row's sixteen inputs and summed per lane; the
/// inputs past the last whole block on the scalar loop.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(unsafe_code)]
unsafe fn avx512_row_sums(mask: &[u8], values: &[f32], x: &[f32], inputs: usize, sums: &mut [f32]) {
    use std::arch::x86_64::*;
    let blocks = inputs / 16;
    let rows = sums.len();
    let mut acc = [_mm512_setzero_ps(); ROW_BLOCK];
    let mut at = 0;
    for b in 0..blocks {
        let bits = u16::from_le_bytes([mask[2 * b], mask[2 * b + 1]]);
        if bits == 0 {
            continue;
        }
        // SAFETY: the row holds a value for every set bit, so the load stays within `values`.
        let w = unsafe { _mm512_maskz_expandloadu_ps(bits, values.as_ptr().add(at)) };
        at += bits.count_ones() as usize;
        for (r, acc) in acc.iter_mut().enumerate().take(rows) {
            // SAFETY: row r has `inputs` values and this block ends within them.
            let xs = unsafe { _mm512_loadu_ps(x.as_ptr().add(r * inputs + 16 * b)) };
            *acc = _mm512_fmadd_ps(w, xs, *acc);
        }
    }
    for (s, acc) in sums.iter_mut().zip(acc) {
        *s = _mm512_reduce_add_ps(acc);
    }
    // The inputs past the whole blocks (a whole number of mask bytes).
    let tail = blocks * 16;
    if tail < inputs {
        let mut rest = [0.0f32; ROW_BLOCK];
        scalar_row_sums(
            &mask[tail / 8..],
            &values[at..],
            &x[tail..],
            inputs,
            &mut rest[..rows],
        );
        sums.iter_mut().zip(rest).for_each(|(s, r)| *s += r);
    }
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
        s.product(&x, 1, &mut out);
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
            for rows in [1, 3, 4, 9] {
                let x: Vec<f32> = (0..rows * inputs)
                    .map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0)
                    .collect();
                let mut out = vec![f32::NAN; rows * outputs];
                s.product(&x, rows, &mut out);
                let expected = dense_product(&x, &w, rows, inputs, outputs);
                for (o, e) in out.iter().zip(&expected) {
                    assert!(
                        (f64::from(*o) - e).abs() <= 1e-5 * (1.0 + e.abs()),
                        "{o} vs {e}"
                    );
                }
                // The portable loop gives the same within rounding.
                let mut sums = vec![0.0f32; rows.min(ROW_BLOCK)];
                scalar_row_sums(
                    s.row_mask(7),
                    &s.values[s.row_offsets[7]..],
                    &x,
                    inputs,
                    &mut sums,
                );
                for (r, v) in sums.iter().enumerate() {
                    assert!(
                        (f64::from(*v) - expected[r * outputs + 7]).abs()
                            <= 1e-5 * (1.0 + expected[r * outputs + 7].abs())
                    );
                }
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
