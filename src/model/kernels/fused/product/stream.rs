//! [`super::matmul`]'s products of a few rows (decoding, small batches) on x86 CPUs with AVX2 and
//! FMA: `b` is read once, in the order it is stored, with no packed copy, so a product at batch 1
//! runs at the speed memory delivers the weights. The bits are those of the other kernels
//! ([`super::depth_blocks`]): each output's products within a depth block summed in order by
//! fused multiply-adds from zero in one lane, the block's sum then added to the destination.
//!
//! A row-major `b` (`[in, out]`, the linears) is read a row at a time across a chunk of columns
//! whose sums wait in L1; a transposed one (`[out, in]` stored, the tied LM head) is read eight
//! stored rows at a time, eight depths of each transposed in registers so that each lane sums
//! one output.

use std::arch::x86_64::*;
use std::ops::Range;

use rayon::prelude::*;

use super::{depth_blocks, View};

/// Rows of `a` up to which [`super::matmul`] streams `b` rather than packing it.
pub(super) const ROWS: usize = 4;
/// Columns of a row-major `b` one pass over a depth block covers, their sums held in L1.
const CHUNK: usize = 512;
/// Multiply-adds below which a product runs on one thread.
const PARALLEL_WORK: usize = 1 << 17;
/// Rows of a row-major `b` ahead of the one summed whose chunk is prefetched.
const AHEAD: usize = 4;
/// Lanes of a register.
const LANES: usize = 8;

/// Whether this CPU has AVX2 and FMA (read once).
pub(super) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    })
}

/// Whether [`matmul`] takes this product: few rows of `a`, `b` contiguous along one dimension,
/// a CPU with AVX2 and FMA.
pub(super) fn takes(a: &View, b: &View) -> bool {
    a.rows <= ROWS && (b.col_stride == 1 || b.row_stride == 1) && available()
}

/// `dst = (accumulate ? dst : 0) + a · b` as [`super::matmul`] promises it; the caller has
/// checked the bounds and [`takes`]. `parallel` splits the columns between the cores.
pub(super) fn matmul(
    dst: &mut [f32],
    dst_stride: usize,
    accumulate: bool,
    a: View,
    b: View,
    parallel: bool,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let threads = match parallel && m * k * n >= PARALLEL_WORK {
        true => rayon::current_num_threads(),
        false => 1,
    };
    let band = n.div_ceil(threads).next_multiple_of(64);
    let bands: Vec<Range<usize>> = (0..n).step_by(band).map(|s| s..(s + band).min(n)).collect();
    let run = |columns: &Range<usize>| {
        let width = columns.len();
        let mut out = vec![0.0f32; m * width];
        if accumulate {
            for (i, row) in out.chunks_exact_mut(width).enumerate() {
                row.copy_from_slice(&dst[i * dst_stride + columns.start..][..width]);
            }
        }
        for (block, depth) in depth_blocks(k).enumerate() {
            let add = accumulate || block > 0;
            // SAFETY: the caller checked that every element of both views lies inside their
            // slices and that the CPU has AVX2 and FMA (`takes`).
            #[allow(unsafe_code)]
            unsafe {
                match b.col_stride == 1 {
                    true => row_major_block(&mut out, a, b, depth, columns.clone(), add),
                    false => transposed_block(&mut out, a, b, depth, columns.clone(), add),
                }
            }
        }
        out
    };
    let outs: Vec<Vec<f32>> = match bands.len() {
        1 => vec![run(&bands[0])],
        _ => bands.par_iter().map(run).collect(),
    };
    for (columns, out) in bands.iter().zip(&outs) {
        let width = columns.len();
        for (i, row) in out.chunks_exact(width).enumerate() {
            dst[i * dst_stride + columns.start..][..width].copy_from_slice(row);
        }
    }
}

/// `a`'s element `(i, p)`.
fn at(a: &View, i: usize, p: usize) -> f32 {
    a.data[i * a.row_stride + p * a.col_stride]
}

/// One depth block of a row-major `b`'s `columns` into `out` (`[a.rows, columns.len()]`):
/// overwritten, or added to where `add`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `b.col_stride` is 1 and the views lie inside their slices.
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_major_block(
    out: &mut [f32],
    a: View,
    b: View,
    depth: Range<usize>,
    columns: Range<usize>,
    add: bool,
) {
    let (m, width) = (a.rows, columns.len());
    let mut sums = vec![0.0f32; m * CHUNK];
    for first in (0..width).step_by(CHUNK) {
        let len = CHUNK.min(width - first);
        let vectors = len / LANES * LANES;
        sums.fill(0.0);
        for p in depth.clone() {
            let row = &b.data[p * b.row_stride + columns.start + first..][..len];
            // The chunk of a row a few ahead is requested now: each row's chunk is a stream of
            // its own to the CPU's prefetchers, found too late without a hint.
            let ahead = row.as_ptr().wrapping_add(AHEAD * b.row_stride);
            for line in (0..len).step_by(16) {
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
            }
            for i in 0..m {
                let x = at(&a, i, p);
                let sums = &mut sums[i * CHUNK..][..len];
                // SAFETY: `v + LANES <= vectors <= len`, the length of both slices.
                unsafe {
                    let xv = _mm256_set1_ps(x);
                    for v in (0..vectors).step_by(LANES) {
                        let s = sums.as_mut_ptr().add(v);
                        let w = _mm256_loadu_ps(row.as_ptr().add(v));
                        _mm256_storeu_ps(s, _mm256_fmadd_ps(xv, w, _mm256_loadu_ps(s)));
                    }
                }
                for (s, w) in sums[vectors..].iter_mut().zip(&row[vectors..]) {
                    *s = x.mul_add(*w, *s);
                }
            }
        }
        for i in 0..m {
            let dst = &mut out[i * width + first..][..len];
            add_or_set(dst, &sums[i * CHUNK..][..len], add);
        }
    }
}

/// `dst = sums`, or `dst += sums` where `add`.
fn add_or_set(dst: &mut [f32], sums: &[f32], add: bool) {
    match add {
        true => dst.iter_mut().zip(sums).for_each(|(d, s)| *d += s),
        false => dst.copy_from_slice(sums),
    }
}

/// One depth block of a transposed `b`'s `columns` (rows of the stored matrix) into `out`
/// (`[a.rows, columns.len()]`): overwritten, or added to where `add`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `b.row_stride` is 1 and the views lie inside their slices.
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma")]
unsafe fn transposed_block(
    out: &mut [f32],
    a: View,
    b: View,
    depth: Range<usize>,
    columns: Range<usize>,
    add: bool,
) {
    let (m, width) = (a.rows, columns.len());
    let full = depth.len() / LANES * LANES;
    let mut sums = [[0.0f32; LANES]; ROWS];
    let mut first = 0;
    while first + LANES <= width {
        let stored = |lane: usize| &b.data[(columns.start + first + lane) * b.col_stride..];
        // SAFETY: the eight stored rows hold `depth`'s elements (the view lies inside `b.data`),
        // and `p + LANES <= depth.start + full`.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); ROWS];
            for p in (depth.start..depth.start + full).step_by(LANES) {
                let rows: [__m256; LANES] =
                    std::array::from_fn(|lane| _mm256_loadu_ps(stored(lane).as_ptr().add(p)));
                let columns = transpose(rows);
                for (t, column) in columns.iter().enumerate() {
                    for (i, acc) in acc.iter_mut().enumerate().take(m) {
                        let x = _mm256_set1_ps(at(&a, i, p + t));
                        *acc = _mm256_fmadd_ps(x, *column, *acc);
                    }
                }
            }
            for (sums, acc) in sums.iter_mut().zip(&acc) {
                _mm256_storeu_ps(sums.as_mut_ptr(), *acc);
            }
        }
        for p in depth.start + full..depth.end {
            for (i, sums) in sums.iter_mut().enumerate().take(m) {
                let x = at(&a, i, p);
                for (lane, s) in sums.iter_mut().enumerate() {
                    *s = x.mul_add(stored(lane)[p], *s);
                }
            }
        }
        for (i, sums) in sums.iter().enumerate().take(m) {
            add_or_set(&mut out[i * width + first..][..LANES], sums, add);
        }
        first += LANES;
    }
    for j in first..width {
        let stored = &b.data[(columns.start + j) * b.col_stride..];
        for i in 0..m {
            let sum = depth
                .clone()
                .fold(0.0f32, |s, p| at(&a, i, p).mul_add(stored[p], s));
            let o = &mut out[i * width + j];
            *o = if add { *o + sum } else { sum };
        }
    }
}

/// The 8 × 8 transpose of `r`: result `t` holds element `t` of every input row, in row order.
#[allow(unsafe_code)]
#[target_feature(enable = "avx2")]
fn transpose(r: [__m256; LANES]) -> [__m256; LANES] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}
