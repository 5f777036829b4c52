//! [`super::matmul`]'s products on CPUs with AVX-512F: packed panels and a 12 × 32 register
//! tile, with the `gemm` crate's bits ([`super::depth_blocks`]).
//!
//! Each output's products within a depth block are summed in order by fused multiply-adds from
//! zero in one register lane, and the block's sum is then added to the destination, exactly the
//! arithmetic the `gemm` crate's AVX2 kernels do: the two give the same bits, so a run on an
//! AVX-512 machine reproduces one on an AVX2 machine. The `gemm` crate's own AVX-512 kernels
//! (its `x86-v4` feature) do not promise that, and measured slower on a Zen 5.
//!
//! Layout (BLIS's): per depth block and per [`COLUMNS`] columns of `b`, the block of `b` is
//! copied into panels of [`NR`] columns (zero-padded), one panel row per depth step; then per
//! [`MR`] rows of `a`, those rows are copied depth-major (zero-padded), and the kernel runs the
//! rows against every panel. A panel of `a` stays in L1, the block of `b` in L2.

use std::arch::x86_64::*;
use std::cell::RefCell;

use rayon::prelude::*;

use super::{depth_blocks, View};

/// Rows of a register tile.
const MR: usize = 12;
/// Columns of a register tile: two 16-lane registers.
const NR: usize = 32;
/// Columns of `b` packed at a time (a depth block of 512 × 512 floats is 1 MiB).
const COLUMNS: usize = 512;
/// Multiply-adds below which a product runs on one thread.
const PARALLEL_WORK: usize = 1 << 18;

thread_local! {
    /// This thread's packed panels of `a` and `b`, reused from product to product.
    static PANELS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Whether this CPU runs the kernel here, unless `WANDA_AVX512_GEMM=off` asks for the `gemm`
/// crate's (read once).
pub(super) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        cpu_has() && std::env::var("WANDA_AVX512_GEMM").map_or(true, |v| v != "off")
    })
}

/// Whether this CPU has AVX-512F.
pub(super) fn cpu_has() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// The destination of a product: row-major at `stride`, `len` elements from `ptr`.
#[derive(Clone, Copy)]
struct Dst {
    ptr: *mut f32,
    len: usize,
    stride: usize,
}

impl Dst {
    /// All of `dst`, row-major at `stride`.
    fn of(dst: &mut [f32], stride: usize) -> Dst {
        Dst {
            ptr: dst.as_mut_ptr(),
            len: dst.len(),
            stride,
        }
    }

    /// The destination from column `start` of its first row on.
    fn at_column(self, start: usize) -> Dst {
        assert!(start <= self.len, "column outside the destination");
        Dst {
            // SAFETY: `start` is inside the destination (asserted).
            #[allow(unsafe_code)]
            ptr: unsafe { self.ptr.add(start) },
            len: self.len - start,
            stride: self.stride,
        }
    }
}

// SAFETY: threads given one `Dst` write disjoint columns of it (see `matmul`).
#[allow(unsafe_code)]
unsafe impl Send for Dst {}
// SAFETY: as for `Send`.
#[allow(unsafe_code)]
unsafe impl Sync for Dst {}

/// `dst = (accumulate ? dst : 0) + a · b` as [`super::matmul`] promises it; the caller has
/// checked the views' and the destination's bounds and that this CPU has AVX-512F
/// ([`cpu_has`]).
/// `parallel` splits the larger of `a`'s rows and `b`'s columns between the cores.
pub(super) fn matmul(
    dst: &mut [f32],
    dst_stride: usize,
    accumulate: bool,
    a: View,
    b: View,
    parallel: bool,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let threads = rayon::current_num_threads();
    let out = Dst::of(dst, dst_stride);
    if !parallel || threads < 2 || m * k * n < PARALLEL_WORK {
        return serial(out, accumulate, a, b);
    }
    if m >= n {
        // Bands of rows: each core packs all of `b`, the smaller operand's copy.
        let band = m.div_ceil(threads).next_multiple_of(MR);
        dst.par_chunks_mut(band * dst_stride)
            .enumerate()
            .for_each(|(i, dst)| {
                let start = i * band;
                if start < m {
                    let a = View {
                        data: &a.data[start * a.row_stride..],
                        rows: band.min(m - start),
                        ..a
                    };
                    serial(Dst::of(dst, dst_stride), accumulate, a, b);
                }
            });
    } else {
        // Bands of columns: each core packs all of `a` and writes its own columns of every row.
        let band = n.div_ceil(threads).next_multiple_of(NR);
        (0..n.div_ceil(band)).into_par_iter().for_each(|i| {
            let start = i * band;
            let b = View {
                data: &b.data[start * b.col_stride..],
                cols: band.min(n - start),
                ..b
            };
            serial(out.at_column(start), accumulate, a, b);
        });
    }
}

/// [`matmul`] on the calling thread.
fn serial(dst: Dst, accumulate: bool, a: View, b: View) {
    let (m, n) = (a.rows, b.cols);
    assert!(
        m == 0 || n == 0 || (m - 1) * dst.stride + n <= dst.len,
        "destination too small"
    );
    PANELS.with(|panels| {
        let (a_panel, b_panels) = &mut *panels.borrow_mut();
        for (block, depth) in depth_blocks(a.cols).enumerate() {
            let add = accumulate || block > 0;
            let kc = depth.len();
            for first_column in (0..n).step_by(COLUMNS) {
                let columns = COLUMNS.min(n - first_column);
                let count = columns.div_ceil(NR);
                let packed_b = aligned(b_panels, count * kc * NR);
                pack_b(packed_b, b, depth.clone(), first_column, columns);
                for i0 in (0..m).step_by(MR) {
                    let rows = MR.min(m - i0);
                    let packed_a = aligned(a_panel, kc * MR);
                    pack_a(packed_a, a, depth.clone(), i0, rows);
                    for p in 0..count {
                        let j0 = first_column + p * NR;
                        let tile = Tile {
                            rows,
                            cols: NR.min(n - j0),
                            add,
                        };
                        // SAFETY: the tile's rows and columns lie inside the product, whose
                        // last element is inside `dst` (asserted above); the panels hold
                        // `kc · MR` and `kc · NR` floats; the CPU has AVX-512F (`available`).
                        #[allow(unsafe_code)]
                        unsafe {
                            kernel(
                                kc,
                                packed_a.as_ptr(),
                                packed_b.as_ptr().add(p * kc * NR),
                                dst.ptr.add(i0 * dst.stride + j0),
                                dst.stride,
                                tile,
                            );
                        }
                    }
                }
            }
        }
    });
}

/// `len` floats of `buffer` from a 64-byte boundary, so that no panel row spans two cache lines.
fn aligned(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buffer.len() < len + 16 {
        buffer.resize(len + 16, 0.0);
    }
    let offset = buffer.as_ptr().align_offset(64).min(16);
    &mut buffer[offset..offset + len]
}

/// Rows `depth` of `b`'s columns `first..first + columns` into `packed`: panel after panel of
/// [`NR`] columns, each `depth.len()` rows of [`NR`], zeros past the last column. `b` is read
/// along its contiguous dimension, in runs as long as the block is wide (a panel at a time
/// would read 128 bytes per row of `b`).
fn pack_b(
    packed: &mut [f32],
    b: View,
    depth: std::ops::Range<usize>,
    first: usize,
    columns: usize,
) {
    let kc = depth.len();
    let (full, rest) = (columns / NR, columns % NR);
    let at = |j: usize, step: usize| (j / NR) * kc * NR + step * NR + j % NR;
    if rest > 0 {
        for step in 0..kc {
            packed[at(full * NR, step) + rest..][..NR - rest].fill(0.0);
        }
    }
    if b.col_stride == 1 {
        for (step, p) in depth.enumerate() {
            let start = p * b.row_stride + first;
            let row = &b.data[start..start + columns];
            for (q, part) in row.chunks_exact(NR).enumerate() {
                // A copy of a constant length, inlined (a call to `memmove` per 128 bytes cost
                // more than the copy).
                let to: &mut [f32; NR] = (&mut packed[at(q * NR, step)..][..NR])
                    .try_into()
                    .expect("a panel row");
                *to = part.try_into().expect("a part of a row");
            }
            if rest > 0 {
                packed[at(full * NR, step)..][..rest].copy_from_slice(&row[full * NR..]);
            }
        }
    } else {
        // Whole panels of a `b` whose columns are contiguous along the depth, sixteen steps at
        // a time, transposed in registers; the rest one value at a time.
        let (tiled_columns, tiled_steps) = match b.row_stride {
            1 => (full * NR, kc / 16 * 16),
            _ => (0, 0),
        };
        for p in 0..tiled_columns / NR {
            for half in 0..NR / 16 {
                let j0 = p * NR + half * 16;
                let columns: [&[f32]; 16] = std::array::from_fn(|l| {
                    let start = depth.start + (first + j0 + l) * b.col_stride;
                    &b.data[start..start + tiled_steps]
                });
                for step in (0..tiled_steps).step_by(16) {
                    let to = &mut packed[at(j0, step)..];
                    // SAFETY: the CPU has AVX-512F (the caller's `available`).
                    #[allow(unsafe_code)]
                    unsafe {
                        transpose_into(&columns, step, to, NR)
                    };
                }
            }
        }
        for j in 0..columns {
            let start = depth.start * b.row_stride + (first + j) * b.col_stride;
            let steps = match j < tiled_columns {
                true => tiled_steps..kc,
                false => 0..kc,
            };
            for step in steps {
                packed[at(j, step)] = b.data[start + step * b.row_stride];
            }
        }
    }
}

/// Sixteen steps from `step` of sixteen `columns`, transposed: step `step + s` of column `l`
/// to `to[s · stride + l]`. Three rounds of in-lane unpacks and 128-bit shuffles.
///
/// # Safety
/// The CPU must have AVX-512F.
#[target_feature(enable = "avx512f")]
#[allow(unsafe_code)]
unsafe fn transpose_into(columns: &[&[f32]; 16], step: usize, to: &mut [f32], stride: usize) {
    assert!(to.len() >= 15 * stride + 16, "sixteen rows of sixteen");
    // SAFETY: each column holds sixteen values from `step` (its slice ends past them).
    let r: [__m512; 16] =
        std::array::from_fn(|l| unsafe { _mm512_loadu_ps(columns[l][step..step + 16].as_ptr()) });
    // t[2k], t[2k + 1]: per 128-bit lane, columns 2k and 2k + 1 interleaved.
    let t: [__m512; 16] = std::array::from_fn(|i| match i % 2 {
        0 => _mm512_unpacklo_ps(r[i], r[i + 1]),
        _ => _mm512_unpackhi_ps(r[i - 1], r[i]),
    });
    // u[4g + e], lane q: columns 4g..4g + 4 at step 4q + e.
    let u: [__m512; 16] = std::array::from_fn(|i| {
        let (g, e) = (i / 4, i % 4);
        let (a, b) = (
            _mm512_castps_pd(t[4 * g + e / 2]),
            _mm512_castps_pd(t[4 * g + 2 + e / 2]),
        );
        _mm512_castpd_ps(match e % 2 {
            0 => _mm512_unpacklo_pd(a, b),
            _ => _mm512_unpackhi_pd(a, b),
        })
    });
    for e in 0..4 {
        let (a, b, c, d) = (u[e], u[4 + e], u[8 + e], u[12 + e]);
        let x = [
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
            _mm512_shuffle_f32x4::<0x44>(c, d),
            _mm512_shuffle_f32x4::<0xEE>(c, d),
        ];
        let out = [
            _mm512_shuffle_f32x4::<0x88>(x[0], x[2]),
            _mm512_shuffle_f32x4::<0xDD>(x[0], x[2]),
            _mm512_shuffle_f32x4::<0x88>(x[1], x[3]),
            _mm512_shuffle_f32x4::<0xDD>(x[1], x[3]),
        ];
        for (q, row) in out.into_iter().enumerate() {
            // SAFETY: row 4q + e of sixteen lies inside `to` (asserted above).
            unsafe { _mm512_storeu_ps(to.as_mut_ptr().add((4 * q + e) * stride), row) };
        }
    }
}

/// Columns `depth` of `a`'s rows `i0..i0 + rows` into `panel`, depth-major ([`MR`] floats per
/// step), zeros past `rows`.
fn pack_a(panel: &mut [f32], a: View, depth: std::ops::Range<usize>, i0: usize, rows: usize) {
    if a.col_stride == 1 && rows == MR {
        // Each row read in order, rather than a gather across the rows at every step.
        for i in 0..MR {
            let start = (i0 + i) * a.row_stride + depth.start;
            let row = &a.data[start..start + depth.len()];
            for (column, &x) in panel.chunks_exact_mut(MR).zip(row) {
                column[i] = x;
            }
        }
        return;
    }
    for (column, p) in panel.chunks_exact_mut(MR).zip(depth) {
        let start = i0 * a.row_stride + p * a.col_stride;
        for (i, x) in column[..rows].iter_mut().enumerate() {
            *x = a.data[start + i * a.row_stride];
        }
        column[rows..].fill(0.0);
    }
}

/// The part of a register tile that lies in the product, and whether it adds to the destination
/// (else it overwrites it).
#[derive(Clone, Copy)]
struct Tile {
    rows: usize,
    cols: usize,
    add: bool,
}

/// One [`MR`] × [`NR`] tile: `kc` steps of `a`'s packed column times `b`'s packed row, summed in
/// registers from zero, then written to `c` (row stride `ldc`) where `tile` lies.
///
/// # Safety
/// The CPU has AVX-512F; `a` holds `kc · MR` floats, `b` `kc · NR`; `c`
/// is valid for `tile.rows` rows of `tile.cols` floats at stride `ldc`.
#[allow(unsafe_code)]
#[target_feature(enable = "avx512f")]
unsafe fn kernel(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, tile: Tile) {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for p in 0..kc {
        // SAFETY (this block and the stores below): within the bounds the caller promised.
        unsafe {
            let b0 = _mm512_loadu_ps(b.add(p * NR));
            let b1 = _mm512_loadu_ps(b.add(p * NR + 16));
            let column = a.add(p * MR);
            for (i, acc) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*column.add(i));
                acc[0] = _mm512_fmadd_ps(x, b0, acc[0]);
                acc[1] = _mm512_fmadd_ps(x, b1, acc[1]);
            }
        }
    }
    if tile.rows == MR && tile.cols == NR {
        for (i, acc) in acc.iter().enumerate() {
            unsafe {
                let row = c.add(i * ldc);
                let (lo, hi) = match tile.add {
                    true => (
                        _mm512_add_ps(_mm512_loadu_ps(row), acc[0]),
                        _mm512_add_ps(_mm512_loadu_ps(row.add(16)), acc[1]),
                    ),
                    false => (acc[0], acc[1]),
                };
                _mm512_storeu_ps(row, lo);
                _mm512_storeu_ps(row.add(16), hi);
            }
        }
        return;
    }
    let mut sums = [0.0f32; MR * NR];
    for (row, acc) in sums.chunks_exact_mut(NR).zip(&acc) {
        unsafe {
            _mm512_storeu_ps(row.as_mut_ptr(), acc[0]);
            _mm512_storeu_ps(row.as_mut_ptr().add(16), acc[1]);
        }
    }
    for (i, sums) in sums.chunks_exact(NR).take(tile.rows).enumerate() {
        // SAFETY: row `i` of the tile's `tile.cols` columns lies where the caller promised.
        let row = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), tile.cols) };
        for (x, &s) in row.iter_mut().zip(sums) {
            *x = if tile.add { *x + s } else { s };
        }
    }
}
