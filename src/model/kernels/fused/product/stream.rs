//! [`super::matmul`]'s products of a few rows (decoding, small batches) on x86 CPUs with AVX2 and
//! FMA: `b` is read once, in the order it is stored, with no packed copy, so a product at batch 1
//! runs at the speed memory delivers the weights. The bits are those of the other kernels
//! ([`super::depth_blocks`]): each output's products within a depth block summed in order by
//! fused multiply-adds from zero in one lane, the block's sum then added to the destination.
//!
//! A row-major `b` (`[in, out]`, the linears) is shared between the cores by depth block, so
//! each reads whole rows, and summed four rows at a time into sums that wait in L1 (the blocks'
//! sums are added in order afterwards); a transposed one (`[out, in]` stored, the tied LM head)
//! is shared by columns and read eight stored rows at a time, eight depths of each transposed in
//! registers so that each lane sums one output.

use std::arch::x86_64::*;
use std::ops::Range;

use rayon::prelude::*;

use super::{depth_blocks, View};

/// Rows of `a` up to which [`super::matmul`] streams `b` rather than packing it.
pub(super) const ROWS: usize = 4;
/// Columns of a row-major `b` one pass over a depth block covers, their sums held in L1.
const CHUNK: usize = 2048;
/// Multiply-adds below which a product runs on one thread.
const PARALLEL_WORK: usize = 1 << 15;
/// Rows of a row-major `b` summed at a time.
const GROUP: usize = 4;
/// Rows of a row-major `b` ahead of the ones summed whose chunks are prefetched.
const AHEAD: usize = 8;
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
/// checked the bounds and [`takes`]. `parallel` shares the work between the cores: a row-major
/// `b` by depth blocks first (each core then reads whole rows of it, contiguous memory, and the
/// blocks' sums are added in order afterwards), a transposed one by columns (each a stored row,
/// read whole).
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
    let blocks: Vec<Range<usize>> = depth_blocks(k).collect();
    let row_major = b.col_stride == 1;
    let bands = match row_major {
        true => bands_per_block(blocks.len(), threads),
        false => threads,
    };
    let band = n.div_ceil(bands).next_multiple_of(64);
    let columns = (0..n).step_by(band).map(|s| s..(s + band).min(n));
    // (the depth block, or all of them; the columns), depth blocks in order.
    let tasks: Vec<(Option<usize>, Range<usize>)> = match row_major {
        true => (0..blocks.len())
            .flat_map(|i| columns.clone().map(move |c| (Some(i), c)))
            .collect(),
        false => columns.map(|c| (None, c)).collect(),
    };
    let run = |(block, columns): &(Option<usize>, Range<usize>)| {
        let width = columns.len();
        let mut out = vec![0.0f32; m * width];
        // SAFETY: the caller checked that every element of both views lies inside their
        // slices and that the CPU has AVX2 and FMA (`takes`).
        #[allow(unsafe_code)]
        unsafe {
            match block {
                Some(i) => row_major_block(&mut out, a, b, blocks[*i].clone(), columns.clone()),
                None => {
                    if accumulate {
                        for (i, row) in out.chunks_exact_mut(width).enumerate() {
                            row.copy_from_slice(&dst[i * dst_stride + columns.start..][..width]);
                        }
                    }
                    transposed(&mut out, a, b, columns.clone(), accumulate);
                }
            }
        }
        out
    };
    let outs: Vec<Vec<f32>> = match tasks.len() {
        1 => vec![run(&tasks[0])],
        _ => tasks.par_iter().map(run).collect(),
    };
    for ((block, columns), out) in tasks.iter().zip(&outs) {
        let add = block.is_some_and(|i| accumulate || i > 0);
        let width = columns.len();
        for (i, row) in out.chunks_exact(width).enumerate() {
            add_or_set(
                &mut dst[i * dst_stride + columns.start..][..width],
                row,
                add,
            );
        }
    }
}

/// Column bands per depth block that share the tasks out evenly between `threads`, or make
/// them many enough that an uneven share costs little.
fn bands_per_block(blocks: usize, threads: usize) -> usize {
    (1..)
        .find(|bands| (blocks * bands).is_multiple_of(threads) || blocks * bands >= 4 * threads)
        .unwrap_or(1)
}

/// `a`'s element `(i, p)`.
fn at(a: &View, i: usize, p: usize) -> f32 {
    a.data[i * a.row_stride + p * a.col_stride]
}

/// One depth block's sums of a row-major `b`'s `columns` into `out` (`[a.rows,
/// columns.len()]`), each row of the block read once, in order.
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
) {
    let (m, width) = (a.rows, columns.len());
    let mut sums = vec![0.0f32; m * CHUNK];
    for first in (0..width).step_by(CHUNK) {
        let len = CHUNK.min(width - first);
        sums.fill(0.0);
        let row = |p: usize| &b.data[p * b.row_stride + columns.start + first..][..len];
        let mut p = depth.start;
        while p < depth.end {
            // Four rows at a time where the block has them: one load and store of each sum
            // for four multiply-adds, and four streams of the weights in flight.
            let group = if depth.end - p >= GROUP { GROUP } else { 1 };
            // The chunks of rows a few ahead are requested now: each row's chunk is a stream
            // of its own to the CPU's prefetchers, found too late without a hint.
            for ahead in p + AHEAD..p + AHEAD + group {
                let ahead = b
                    .data
                    .as_ptr()
                    .wrapping_add(ahead * b.row_stride + columns.start + first);
                for line in (0..len).step_by(16) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
                }
            }
            for i in 0..m {
                let sums = &mut sums[i * CHUNK..][..len];
                let x = |q| at(&a, i, q);
                // SAFETY: every row is `len` long, as `sums` is.
                unsafe {
                    match group {
                        GROUP => add_rows(
                            sums,
                            [row(p), row(p + 1), row(p + 2), row(p + 3)],
                            [x(p), x(p + 1), x(p + 2), x(p + 3)],
                        ),
                        _ => add_rows(sums, [row(p)], [x(p)]),
                    }
                }
            }
            p += group;
        }
        for i in 0..m {
            out[i * width + first..][..len].copy_from_slice(&sums[i * CHUNK..][..len]);
        }
    }
}

/// `sums += xs[0] · rows[0]`, then `+= xs[1] · rows[1]`, … by fused multiply-adds, each sum
/// loaded and stored once.
///
/// # Safety
/// The CPU has AVX2 and FMA; every row is as long as `sums`.
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma")]
unsafe fn add_rows<const R: usize>(sums: &mut [f32], rows: [&[f32]; R], xs: [f32; R]) {
    let vectors = sums.len() / LANES * LANES;
    let xv: [__m256; R] = std::array::from_fn(|r| _mm256_set1_ps(xs[r]));
    for v in (0..vectors).step_by(LANES) {
        // SAFETY: `v + LANES <= vectors`, inside `sums` and every row.
        unsafe {
            let s = sums.as_mut_ptr().add(v);
            let mut acc = _mm256_loadu_ps(s);
            for (x, row) in xv.iter().zip(&rows) {
                acc = _mm256_fmadd_ps(*x, _mm256_loadu_ps(row.as_ptr().add(v)), acc);
            }
            _mm256_storeu_ps(s, acc);
        }
    }
    for (j, s) in sums.iter_mut().enumerate().skip(vectors) {
        *s = xs
            .iter()
            .zip(&rows)
            .fold(*s, |s, (x, row)| x.mul_add(row[j], s));
    }
}

/// `dst = sums`, or `dst += sums` where `add`.
fn add_or_set(dst: &mut [f32], sums: &[f32], add: bool) {
    match add {
        true => dst.iter_mut().zip(sums).for_each(|(d, s)| *d += s),
        false => dst.copy_from_slice(sums),
    }
}

/// A transposed `b`'s `columns` (rows of the stored matrix) into `out` (`[a.rows,
/// columns.len()]`), eight stored rows at a time, each read from start to end across the depth
/// blocks: overwritten, or added to where `accumulate`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `b.row_stride` is 1 and the views lie inside their slices.
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma")]
unsafe fn transposed(out: &mut [f32], a: View, b: View, columns: Range<usize>, accumulate: bool) {
    let (m, width) = (a.rows, columns.len());
    let blocks: Vec<Range<usize>> = depth_blocks(a.cols).collect();
    let mut first = 0;
    while first + LANES <= width {
        let stored: [&[f32]; LANES] =
            std::array::from_fn(|lane| &b.data[(columns.start + first + lane) * b.col_stride..]);
        for (block, depth) in blocks.iter().enumerate() {
            // SAFETY: as promised by the caller.
            let sums = unsafe { transposed_sums(&a, &stored, depth.clone()) };
            for (i, sums) in sums.iter().enumerate().take(m) {
                let add = accumulate || block > 0;
                add_or_set(&mut out[i * width + first..][..LANES], sums, add);
            }
        }
        first += LANES;
    }
    for j in first..width {
        let stored = &b.data[(columns.start + j) * b.col_stride..];
        for (block, depth) in blocks.iter().enumerate() {
            for i in 0..m {
                let sum = depth
                    .clone()
                    .fold(0.0f32, |s, p| at(&a, i, p).mul_add(stored[p], s));
                let o = &mut out[i * width + j];
                *o = if accumulate || block > 0 {
                    *o + sum
                } else {
                    sum
                };
            }
        }
    }
}

/// The sums over `depth` of each row of `a` times each of eight `stored` rows (`b`'s columns),
/// lane by lane in order from zero.
///
/// # Safety
/// The CPU has AVX2 and FMA; each stored row holds `depth`'s elements.
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma")]
unsafe fn transposed_sums(
    a: &View,
    stored: &[&[f32]; LANES],
    depth: Range<usize>,
) -> [[f32; LANES]; ROWS] {
    let m = a.rows;
    let full = depth.len() / LANES * LANES;
    let mut sums = [[0.0f32; LANES]; ROWS];
    // SAFETY: `p + LANES <= depth.start + full`, inside every stored row.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); ROWS];
        for p in (depth.start..depth.start + full).step_by(LANES) {
            let rows: [__m256; LANES] =
                std::array::from_fn(|lane| _mm256_loadu_ps(stored[lane].as_ptr().add(p)));
            for (t, column) in transpose(rows).iter().enumerate() {
                for (i, acc) in acc.iter_mut().enumerate().take(m) {
                    let x = _mm256_set1_ps(at(a, i, p + t));
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
            let x = at(a, i, p);
            for (s, stored) in sums.iter_mut().zip(stored) {
                *s = x.mul_add(stored[p], *s);
            }
        }
    }
    sums
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
