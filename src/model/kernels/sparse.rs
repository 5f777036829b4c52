//! A pruned linear held compressed on the CPU: per output, a bitmask over the inputs and the kept
//! values alone, in the layout of compressed-tensors' `sparse-bitmask` (`bitmask` packed
//! little-endian per row, `compressed` values row after row, `row_offsets` where each row's values
//! start), a row being one output (PyTorch's `[out, in]` weight row).
//!
//! Decoding reads every weight once a token, so a product of a few rows is bound by the bytes it
//! reads: at 50 % the mask and the f32 values are 2.125 bytes a weight against dense f32's 4.
//! [`SparseLinear::product`] reads each row's mask and values once for all the rows of `x`: on
//! AVX-512F, sixteen mask bits at a time expand the next values into a register (`vexpandps`),
//! multiplied with sixteen inputs of each row of `x`; on AVX2, a mask byte's values are moved to
//! their lanes by a permutation; elsewhere a loop over the set bits. [`SparseLinear::expand_panel`]
//! writes slices of the weight dense again, for products of many rows (prefill) where the dense
//! weight was released. The outputs are split between the cores; for one or two rows of `x`,
//! several outputs run at once, so that their expand chains overlap. Exact: every kept value is the
//! dense weight's, every pruned one zero; the sums are the dense product's within f32 rounding
//! (each output sums its kept terms in another order).

use std::collections::HashMap;
use std::sync::Arc;

use burn::module::ParamId;
use rayon::prelude::*;

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

use portable::{expand_row, scalar_row_sums};
#[cfg(target_arch = "x86_64")]
use x86::{avx2_sums, avx512_expand_row, avx512_sums};

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
            if vector_kernel() == Some(Vector::Avx512) {
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
                if let Some(kernel) = vector_kernel() {
                    let mut put = |k: usize, s: &[f32]| put(o + k, s);
                    o += match (block, outputs - o) {
                        (1, 4..) => self.vector_outputs::<1, 4>(kernel, first + o, x, &mut put),
                        (1, _) => self.vector_outputs::<1, 1>(kernel, first + o, x, &mut put),
                        (2, 2..) => self.vector_outputs::<2, 2>(kernel, first + o, x, &mut put),
                        (2, _) => self.vector_outputs::<2, 1>(kernel, first + o, x, &mut put),
                        (3, _) => self.vector_outputs::<3, 1>(kernel, first + o, x, &mut put),
                        _ => self.vector_outputs::<4, 1>(kernel, first + o, x, &mut put),
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

    /// Outputs `first..first + N` for the `R` rows of `x` on the vector `kernel`, each
    /// output's `R` sums handed to `put` with its index from `first`; returns `N`.
    #[cfg(target_arch = "x86_64")]
    fn vector_outputs<const R: usize, const N: usize>(
        &self,
        kernel: Vector,
        first: usize,
        x: &[f32],
        put: &mut impl FnMut(usize, &[f32]),
    ) -> usize {
        assert_eq!(x.len(), R * self.inputs, "R rows of x");
        let masks: [&[u8]; N] = std::array::from_fn(|k| self.row_mask(first + k));
        let values: [&[f32]; N] = std::array::from_fn(|k| self.row_values(first + k));
        // SAFETY: the CPU has the features of `kernel` (checked at run time, `vector_kernel`).
        #[allow(unsafe_code)]
        let (sums, at) = unsafe {
            match kernel {
                Vector::Avx512 => avx512_sums::<R, N>(masks, values, x, self.inputs),
                Vector::Avx2 => avx2_sums::<R, N>(masks, values, x, self.inputs),
            }
        };
        for k in 0..N {
            let mut row_sums = sums[k];
            // The inputs past the whole blocks (a whole number of mask bytes).
            let tail = self.inputs / kernel.lanes() * kernel.lanes();
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

/// The kernel [`SparseLinear::product`] runs on this CPU: `AVX-512 expand`, `AVX2 permute` or
/// `portable`.
pub fn kernel_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    match vector_kernel() {
        Some(Vector::Avx512) => return "AVX-512 expand",
        Some(Vector::Avx2) => return "AVX2 permute",
        None => {}
    }
    "portable"
}

/// Whether [`SparseLinear::product`] runs its AVX-512 kernel on this CPU, the one measured to
/// beat the dense product from 30 % zeros at every shape. The AVX2 kernel (a masked load and a
/// permutation per mask byte) is 3–9× the portable loop but not that: measured on a Zen 4 with
/// `WANDA_SPARSE_AVX512=off`, 1.2× the dense product at 2048 × 8192 and 50 % zeros, 0.8–0.9×
/// at 70 % and at 576 × 1536 (`results/decode-speed.md`).
pub fn expands_in_registers() -> bool {
    #[cfg(target_arch = "x86_64")]
    if vector_kernel() == Some(Vector::Avx512) {
        return true;
    }
    false
}

/// A vector kernel of the compressed product.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vector {
    /// Sixteen lanes, `vexpandps`.
    Avx512,
    /// Eight lanes, a masked load and a permutation.
    Avx2,
}

#[cfg(target_arch = "x86_64")]
impl Vector {
    /// Inputs a block of the kernel covers.
    fn lanes(self) -> usize {
        match self {
            Self::Avx512 => 16,
            Self::Avx2 => 8,
        }
    }
}

/// The vector kernel this CPU runs, checked once: AVX-512F (and `popcnt`, which every such CPU
/// has) unless `WANDA_SPARSE_AVX512=off` asks for the next; AVX2 with FMA and `popcnt`; else
/// none.
#[cfg(target_arch = "x86_64")]
fn vector_kernel() -> Option<Vector> {
    static KERNEL: std::sync::OnceLock<Option<Vector>> = std::sync::OnceLock::new();
    *KERNEL.get_or_init(|| {
        use std::arch::is_x86_feature_detected as has;
        let avx512_allowed = std::env::var("WANDA_SPARSE_AVX512").map_or(true, |v| v != "off");
        if !has!("popcnt") {
            None
        } else if has!("avx512f") && avx512_allowed {
            Some(Vector::Avx512)
        } else if has!("avx2") && has!("fma") {
            Some(Vector::Avx2)
        } else {
            None
        }
    })
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

    /// Every vector kernel this CPU has (AVX-512F; AVX2 with FMA), whatever `vector_kernel`
    /// picked, gives the dense product within rounding for every block of rows and outputs
    /// the product runs, on inputs with a tail past the whole blocks.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_vector_kernel_gives_the_dense_sums() {
        use std::arch::is_x86_feature_detected as has;
        fn check<const R: usize, const N: usize>(s: &SparseLinear, kernel: Vector, w: &[f32]) {
            let x: Vec<f32> = (0..R * s.inputs)
                .map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0)
                .collect();
            let expected = dense_product(&x, w, R, s.inputs, s.outputs);
            for first in [0, 5, s.outputs - N] {
                let mut seen = 0;
                let taken = s.vector_outputs::<R, N>(kernel, first, &x, &mut |k, sums| {
                    for (r, v) in sums.iter().enumerate() {
                        let e = expected[r * s.outputs + first + k];
                        assert!(
                            (f64::from(*v) - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "{kernel:?}"
                        );
                    }
                    seen += 1;
                });
                assert_eq!((taken, seen), (N, N));
            }
        }
        let mut kernels = Vec::new();
        if has!("popcnt") && has!("avx512f") {
            kernels.push(Vector::Avx512);
        }
        if has!("popcnt") && has!("avx2") && has!("fma") {
            kernels.push(Vector::Avx2);
        }
        // 77 inputs: four blocks of sixteen (nine of eight) and a tail.
        let (inputs, outputs) = (77, 40);
        for zero_in in [0, 5, 8, 10] {
            let w = weight(inputs, outputs, zero_in);
            let s = SparseLinear::from_in_out(&w, inputs, outputs);
            for &kernel in &kernels {
                check::<1, 4>(&s, kernel, &w);
                check::<1, 1>(&s, kernel, &w);
                check::<2, 2>(&s, kernel, &w);
                check::<2, 1>(&s, kernel, &w);
                check::<3, 1>(&s, kernel, &w);
                check::<4, 1>(&s, kernel, &w);
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
