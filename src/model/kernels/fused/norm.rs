//! The fused path's norms, row by row in place or into a buffer: RMSNorm, LayerNorm, and the
//! per-head q/k norms.

use rayon::prelude::*;

use super::*;

/// `out` = `x` through `norm`, row by row: `x / sqrt(mean(x²) + eps) * weight`, or, where
/// the norm is centred, a LayerNorm (`(x − mean) / sqrt(var + eps) * weight + bias`).
///
/// # Shapes
/// - `x`, `out`: `[rows, norm.weight.len()]`
pub(super) fn norm_rows(x: &[f32], norm: NormRef, eps: f64, out: &mut [f32]) {
    /// Rows per parallel job.
    const ROWS: usize = 16;
    let width = norm.weight.len();
    x.par_chunks(ROWS * width)
        .zip(out.par_chunks_mut(ROWS * width))
        .for_each(|(x, out)| {
            for (row, dst) in x.chunks(width).zip(out.chunks_mut(width)) {
                if norm.centred {
                    vecmath::layer_norm_row(row, norm.weight, norm.bias, eps as f32, dst)
                } else {
                    vecmath::rms_norm_row(row, norm.weight, eps as f32, dst)
                }
            }
        });
}

/// [`norm_rows`] where the layer has the norm, else a copy of `x` (OLMo 2's attention and MLP
/// read the residual stream itself).
pub(super) fn pre_norm_rows(x: &[f32], norm: Option<NormRef>, eps: f64, out: &mut [f32]) {
    match norm {
        Some(norm) => norm_rows(x, norm, eps, out),
        None => out.copy_from_slice(x),
    }
}

/// [`norm_rows`] of an RMSNorm in place: every `weight.len()`-wide row of `x` normalised (the
/// per-head q/k norms of Qwen3, whose rows are heads).
pub(super) fn rms_norm_in_place(x: &mut [f32], weight: &[f32], eps: f64) {
    /// Rows per parallel job.
    const ROWS: usize = 64;
    let width = weight.len();
    x.par_chunks_mut(ROWS * width).for_each(|x| {
        let mut row_copy = vec![0.0f32; width];
        for row in x.chunks_mut(width) {
            row_copy.copy_from_slice(row);
            vecmath::rms_norm_row(&row_copy, weight, eps as f32, row);
        }
    });
}

/// A q/k norm in place over `x`'s rows (a position's heads).
pub(super) fn head_norm_in_place(x: &mut [f32], norm: HeadNormRef, eps: f64) {
    /// Rows per parallel job.
    const ROWS: usize = 64;
    let Some(group) = norm.group else {
        return rms_norm_in_place(x, norm.gain, eps);
    };
    let width = norm.gain.len();
    x.par_chunks_mut(ROWS * width).for_each(|x| {
        let mut part_copy = vec![0.0f32; group];
        for row in x.chunks_mut(width) {
            for (part, gain) in row.chunks_mut(group).zip(norm.gain.chunks(group)) {
                part_copy.copy_from_slice(part);
                vecmath::layer_norm_row(&part_copy, gain, None, eps as f32, part);
            }
        }
    });
}
