//! Matrix products of the fused kernels over strided views of f32 slices: the kernel of
//! [`avx512`] where the CPU has AVX-512F, else `gemm` calls, one band of rows per core; their
//! bits do not depend on the CPU they run on ([`depth_blocks`]).

use rayon::prelude::*;

use crate::model::kernels::sparse::SparseLinear;

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod stream;

/// Rows per core below which a product is left to gemm's own threading.
const BAND_ROWS: usize = 64;

/// A row-major matrix view with explicit strides (in elements).
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    pub(super) data: &'a [f32],
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) row_stride: usize,
    pub(super) col_stride: usize,
}

impl<'a> View<'a> {
    /// A contiguous `[rows, cols]` matrix.
    pub(super) fn dense(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose of a contiguous `[cols, rows]` matrix, without a copy.
    pub(super) fn transposed(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: 1,
            col_stride: rows,
        }
    }

    /// Whether every element lies inside `data`.
    fn in_bounds(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                < self.data.len()
    }
}

/// The kernel [`matmul`] runs on this CPU for a product of `rows` rows, as the benchmarks name
/// it.
pub fn kernel_name(rows: usize) -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if rows <= stream::ROWS && stream::available() {
        return "streamed AVX2 kernel";
    }
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return "AVX-512 kernel";
    }
    "gemm crate"
}

/// `dst = (accumulate ? dst : 0) + a · b`, with `dst` row-major `[a.rows, b.cols]` at row stride
/// `dst_stride`.
pub(super) fn matmul(
    dst: &mut [f32],
    dst_stride: usize,
    accumulate: bool,
    a: View,
    b: View,
    parallel: bool,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(k, b.rows, "inner dimensions differ");
    assert!(a.in_bounds() && b.in_bounds(), "operand view out of bounds");
    assert!(
        m == 0 || n == 0 || (m - 1) * dst_stride + n <= dst.len(),
        "destination too small"
    );
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if stream::takes(&a, &b) {
        return stream::matmul(dst, dst_stride, accumulate, a, b, parallel);
    }
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return avx512::matmul(dst, dst_stride, accumulate, a, b, parallel);
    }
    crate_matmul(dst, dst_stride, accumulate, a, b, parallel);
}

/// Outputs of a compressed weight one core expands and multiplies at a time in
/// [`compressed_matmul`], at most: a panel of them over a depth block (≤ 1 MiB) stays in or
/// near its L2, and each panel's product packs its rows of `x` once.
const PANEL_OUTPUTS: usize = 512;

/// `dst = (accumulate ? dst : 0) + x · W` for a weight held compressed alone, `dst` row-major
/// `[x.rows, outputs]`: each core takes up to [`PANEL_OUTPUTS`] outputs at a time, expands each
/// depth block of them into a panel (`[outputs, block]`) and multiplies it as [`matmul`]'s
/// transposed operand, so the sums are the dense product's, to the bit, with a few panels'
/// memory instead of the weight's.
pub(super) fn compressed_matmul(dst: &mut [f32], accumulate: bool, x: View, w: &SparseLinear) {
    assert_eq!(x.cols, w.inputs, "inner dimensions differ");
    let (m, n) = (x.rows, w.outputs);
    assert!(dst.len() >= m * n, "destination too small");
    if m == 0 {
        return;
    }
    let blocks: Vec<_> = depth_blocks(w.inputs).collect();
    // As few panels as hold the outputs, a multiple of the cores, equally wide.
    let panels = n
        .div_ceil(PANEL_OUTPUTS)
        .next_multiple_of(rayon::current_num_threads());
    let panel_outputs = n.div_ceil(panels).next_multiple_of(32);
    let parts: Vec<(usize, Vec<f32>)> = (0..n)
        .step_by(panel_outputs)
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|first| {
            let outputs = first..(first + panel_outputs).min(n);
            let width = outputs.len();
            // This part's columns of `dst`, as they are where the product adds to them.
            let mut part = vec![0.0f32; m * width];
            if accumulate {
                for (to, from) in part.chunks_mut(width).zip(dst.chunks(n)) {
                    to.copy_from_slice(&from[outputs.clone()]);
                }
            }
            let mut panel = vec![0.0f32; width * blocks[0].len()];
            let mut at = w.row_offsets[outputs.clone()].to_vec();
            for (i, depth) in blocks.iter().enumerate() {
                let panel = &mut panel[..width * depth.len()];
                w.expand_panel(outputs.clone(), depth.clone(), panel, &mut at);
                let x = View {
                    data: &x.data[(depth.start * x.col_stride).min(x.data.len())..],
                    cols: depth.len(),
                    ..x
                };
                let panel = View::transposed(panel, depth.len(), width);
                matmul(&mut part, width, accumulate || i > 0, x, panel, false);
            }
            (first, part)
        })
        .collect();
    for (first, part) in parts {
        let width = part.len() / m.max(1);
        for (to, from) in dst.chunks_mut(n).zip(part.chunks(width)) {
            to[first..first + width].copy_from_slice(from);
        }
    }
}

/// [`matmul`] by the `gemm` crate (its AVX2 kernels on x86), once the bounds are checked.
fn crate_matmul(
    dst: &mut [f32],
    dst_stride: usize,
    accumulate: bool,
    a: View,
    b: View,
    parallel: bool,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let threads = rayon::current_num_threads();
    if parallel && m >= BAND_ROWS * threads {
        // Each core multiplies its own band of rows with gemm's one-thread kernel: the same
        // arithmetic per element as one call ([`depth_blocks`] depend on k alone), without
        // gemm's thread hand-offs inside every call (measured 1–10 % faster per forward).
        let band = m.div_ceil(threads);
        dst.par_chunks_mut(band * dst_stride)
            .enumerate()
            .for_each(|(i, dst)| {
                let start = i * band;
                if start < m {
                    let rows = band.min(m - start);
                    let a = View {
                        data: &a.data[start * a.row_stride..],
                        rows,
                        ..a
                    };
                    crate_matmul(dst, dst_stride, accumulate, a, b, false);
                }
            });
        return;
    }
    let parallelism = if parallel {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // One gemm call per block of the inner dimension, each added to what the blocks before it
    // left in `dst`: gemm then never blocks k itself.
    for (i, depth) in depth_blocks(k).enumerate() {
        // SAFETY: the asserts above keep every index gemm touches inside the three slices (a
        // block's operands start `depth.start` columns of `a` and rows of `b` in, and are
        // `depth.len()` long), and `dst` is borrowed mutably, so it overlaps neither operand.
        #[allow(unsafe_code)]
        unsafe {
            gemm::gemm(
                m,
                n,
                depth.len(),
                dst.as_mut_ptr(),
                1,
                dst_stride as isize,
                accumulate || i > 0,
                a.data.as_ptr().add(depth.start * a.col_stride),
                a.col_stride as isize,
                a.row_stride as isize,
                b.data.as_ptr().add(depth.start * b.row_stride),
                b.col_stride as isize,
                b.row_stride as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
    }
}

/// The most products one gemm call sums per element: the smallest k block gemm-common ever
/// chooses (`kernel_params`: `auto_kc.max(512)`).
const DEPTH_BLOCK: usize = 512;

/// The blocks of the inner dimension `k` that [`matmul`] sums one gemm call at a time: as few
/// as hold at most [`DEPTH_BLOCK`] each, of equal length but the last (gemm's own rule); one
/// empty block for `k = 0`, so that gemm still writes `dst` (zeros, or `dst` itself).
///
/// gemm-common blocks k by a size it derives from the CPU's L1 cache (512 on a 32 KiB 8-way
/// L1, as AMD's Zen 3 and Zen 4 have; 1024 on a 48 KiB 12-way one, as Intel's recent Xeons and
/// AMD's Zen 5 have), and each block's sums are rounded into `dst` before the next: left to
/// itself, the same product rounded differently on different CPUs, and so did every
/// perplexity (SmolLM2's `hidden_size` is 576). Blocks of at most 512 are never blocked again,
/// so every x86 CPU with AVX2 (the kernels gemm is built with) computes the same bits, those
/// Zen 3 and Zen 4 computed before.
fn depth_blocks(k: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let blocks = k.div_ceil(DEPTH_BLOCK).max(1);
    let size = k.div_ceil(blocks);
    (0..k.max(1))
        .step_by(size.max(1))
        .map(move |start| start..(start + size).min(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_blocks_are_gemms_own_for_a_512_block() {
        let blocks = |k| depth_blocks(k).collect::<Vec<_>>();
        assert_eq!(blocks(0), vec![0..0]);
        assert_eq!(blocks(37), vec![0..37]);
        assert_eq!(blocks(512), vec![0..512]);
        assert_eq!(blocks(576), vec![0..288, 288..576]);
        assert_eq!(blocks(1536), vec![0..512, 512..1024, 1024..1536]);
        assert_eq!(blocks(1537), vec![0..385, 385..770, 770..1155, 1155..1537]);
    }

    /// `dst[i][j]` as [`matmul`] promises it on any CPU: each depth block's products summed in
    /// order by fused multiply-adds from zero, then added to what `dst` held.
    fn blocked_reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut dst = vec![0.0f32; m * n];
        blocked_into(&mut dst, n, a, b, m, k, n);
        dst
    }

    /// [`blocked_reference`] added to `dst` (row stride `stride`) block by block.
    fn blocked_into(
        dst: &mut [f32],
        stride: usize,
        a: &[f32],
        b: &[f32],
        m: usize,
        k: usize,
        n: usize,
    ) {
        for depth in depth_blocks(k) {
            for i in 0..m {
                for j in 0..n {
                    let sum = depth
                        .clone()
                        .fold(0.0f32, |acc, p| a[i * k + p].mul_add(b[p * n + j], acc));
                    dst[i * stride + j] += sum;
                }
            }
        }
    }

    /// The products of one call equal, to the bit, the blocked sums above: nothing of gemm's
    /// own cache-sized blocking is left in them (on a CPU whose L1 made gemm block k by 1024,
    /// the 1000-deep product would otherwise be summed in one block).
    #[test]
    fn products_are_summed_in_depth_blocks_whatever_the_cpu() {
        for (m, k, n) in [
            (3, 7, 5),
            (9, 576, 17),
            (8, 1000, 33),
            (5, 1536, 24),
            (130, 1000, 70),
        ] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 104_729) % 991) as f32 / 89.0 - 5.5)
                .collect();
            let mut dst = vec![0.0f32; m * n];
            matmul(
                &mut dst,
                n,
                false,
                View::dense(&a, m, k),
                View::dense(&b, k, n),
                false,
            );
            let reference = blocked_reference(&a, &b, m, k, n);
            let differing = dst.iter().zip(&reference).filter(|(x, y)| x != y).count();
            assert_eq!(differing, 0, "[{m} × {k}] · [{k} × {n}]");
        }
    }

    /// A weight held compressed alone multiplies to the dense weight's bits, over depths of
    /// one block, of several, and of blocks that start inside a mask byte, added to `dst` or
    /// not.
    #[test]
    fn compressed_products_give_the_dense_bits() {
        for (m, k, n) in [(9, 70, 33), (6, 1000, 40), (17, 1537, 24)] {
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0)
                .collect();
            let w: Vec<f32> = (0..k * n)
                .map(|i| match i % 3 {
                    0 => 0.0,
                    _ => ((i * 104_729) % 991) as f32 / 89.0 - 5.5,
                })
                .collect();
            let sparse = SparseLinear::from_in_out(&w, k, n);
            for accumulate in [false, true] {
                let start: Vec<f32> = (0..m * n).map(|i| (i % 7) as f32).collect();
                let (mut dense, mut compressed) = (start.clone(), start);
                let x = View::dense(&x, m, k);
                matmul(&mut dense, n, accumulate, x, View::dense(&w, k, n), true);
                compressed_matmul(&mut compressed, accumulate, x, &sparse);
                assert_eq!(compressed, dense, "[{m} × {k}] · [{k} × {n}]");
            }
        }
    }

    /// A `rows × cols` operand held at strides `(row_stride, col_stride)` inside a larger slice
    /// (padding between rows, or stored transposed), with values that make every product's
    /// rounding count.
    fn strided(
        rows: usize,
        cols: usize,
        transposed: bool,
        seed: usize,
    ) -> (Vec<f32>, usize, usize) {
        let (row_stride, col_stride) = match transposed {
            true => (1, rows + 3),
            false => (cols + 5, 1),
        };
        let len = (rows.max(1) - 1) * row_stride + (cols.max(1) - 1) * col_stride + 1;
        let data = (0..len)
            .map(|i| (((i + seed) * 7919) % 1013) as f32 / 97.0 - 5.0)
            .collect();
        (data, row_stride, col_stride)
    }

    /// Every kernel this CPU runs (the `gemm` crate's; [`avx512`]'s where the CPU has AVX-512F),
    /// on one thread and on all, gives the blocked sums to the bit: over shapes that leave
    /// partial register tiles, more than one depth block and more than one packed block of
    /// columns, bands split by rows and by columns, strided and transposed operands, and a
    /// destination with padding that must stay as it was.
    #[test]
    fn every_kernel_gives_the_blocked_sums_to_the_bit() {
        type Kernel = fn(&mut [f32], usize, bool, View, View, bool);
        let mut kernels: Vec<(&str, Kernel)> = vec![("gemm crate", crate_matmul)];
        #[cfg(target_arch = "x86_64")]
        if avx512::cpu_has() {
            kernels.push(("avx512", avx512::matmul));
        }
        #[cfg(target_arch = "x86_64")]
        if stream::available() {
            kernels.push(("stream", stream::matmul));
        }
        for (m, k, n) in [
            (1, 1, 1),
            (1, 1000, 70),
            (2, 1536, 9),
            (3, 576, 515),
            (4, 37, 1100),
            (13, 37, 33),
            (12, 512, 32),
            (25, 1000, 70),
            (64, 1024, 515),
            (300, 600, 40),
            (7, 130, 1100),
        ] {
            for (transposed, accumulate, parallel) in [
                (false, false, false),
                (false, true, true),
                (true, false, true),
                (true, true, false),
            ] {
                let (a, ars, acs) = strided(m, k, false, 1);
                let (b, brs, bcs) = strided(k, n, transposed, 2);
                let a_view = View {
                    data: &a,
                    rows: m,
                    cols: k,
                    row_stride: ars,
                    col_stride: acs,
                };
                let b_view = View {
                    data: &b,
                    rows: k,
                    cols: n,
                    row_stride: brs,
                    col_stride: bcs,
                };
                let dense_a: Vec<f32> = (0..m * k).map(|e| a[e / k * ars + e % k * acs]).collect();
                let dense_b: Vec<f32> = (0..k * n).map(|e| b[e / n * brs + e % n * bcs]).collect();
                let stride = n + 2;
                let start: Vec<f32> = (0..m * stride).map(|i| (i % 17) as f32 - 8.0).collect();
                let mut expected = start.clone();
                if !accumulate {
                    for row in expected.chunks_mut(stride) {
                        row[..n].fill(0.0);
                    }
                }
                blocked_into(&mut expected, stride, &dense_a, &dense_b, m, k, n);
                for (name, kernel) in &kernels {
                    // On x86 the streamed kernel takes the products of a few rows: the gemm
                    // crate's own paths for them (its gemv) sum in another order.
                    #[cfg(target_arch = "x86_64")]
                    if (*name == "stream") != (m <= stream::ROWS) && *name != "avx512" {
                        continue;
                    }
                    let mut dst = start.clone();
                    kernel(&mut dst, stride, accumulate, a_view, b_view, parallel);
                    let differing = dst
                        .iter()
                        .zip(&expected)
                        .filter(|(x, y)| x.to_bits() != y.to_bits())
                        .count();
                    assert_eq!(
                        differing, 0,
                        "{name}: [{m} × {k}] · [{k} × {n}], transposed b {transposed}, \
                         accumulate {accumulate}, parallel {parallel}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_empty_inner_dimension_writes_zeros_or_keeps_dst() {
        let mut dst = vec![7.0f32; 6];
        matmul(
            &mut dst,
            3,
            true,
            View::dense(&[], 2, 0),
            View::dense(&[], 0, 3),
            false,
        );
        assert_eq!(dst, vec![7.0; 6]);
        matmul(
            &mut dst,
            3,
            false,
            View::dense(&[], 2, 0),
            View::dense(&[], 0, 3),
            false,
        );
        assert_eq!(dst, vec![0.0; 6]);
    }

    #[test]
    fn matmul_reads_a_transposed_view_and_accumulates() {
        // a = [[1, 2], [3, 4]] (2×2); b = transpose of [[1, 0, 2], [0, 1, 3]] stored as 3×2 …
        let a = [1.0, 2.0, 3.0, 4.0];
        let b_stored = [1.0, 0.0, 0.0, 1.0, 2.0, 3.0]; // [[1,0],[0,1],[2,3]] = bᵀ (3×2)
        let mut dst = vec![1.0f32; 6];
        matmul(
            &mut dst,
            3,
            true,
            View::dense(&a, 2, 2),
            View::transposed(&b_stored, 2, 3),
            false,
        );
        // a · [[1,0,2],[0,1,3]] = [[1,2,8],[3,4,18]], plus the ones already in dst.
        assert_eq!(dst, vec![2.0, 3.0, 9.0, 4.0, 5.0, 19.0]);
    }
}
