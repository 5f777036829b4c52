//! The dense f64 linear algebra SparseGPT (arXiv 2301.00774, Algorithm 1) needs: a blocked
//! Cholesky factorisation, a lower-triangular inverse, and from them the upper Cholesky factor
//! of an inverse, `U` with `H⁻¹ = UᵀU`, without forming `H⁻¹`.
//!
//! Matrices are `n × n`, row-major. Parallel loops give every output value to one thread and sum
//! in a fixed order, so results do not depend on the thread count.

use rayon::prelude::*;

/// Columns per panel of the blocked Cholesky factorisation.
const PANEL: usize = 64;

/// A Cholesky factorisation broke down: the matrix is not (numerically) positive definite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NotPositiveDefinite {
    /// Row of the pivot that failed, in the order of the matrix given.
    pub index: usize,
    /// The pivot: not positive, or not finite.
    pub pivot: f64,
}

/// `Σ a_k b_k` over the shorter length, with eight partial sums so it vectorises; always summed
/// in the same order.
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let len = a.len().min(b.len());
    let (a, b) = (&a[..len], &b[..len]);
    let mut acc = [0.0f64; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Width of the register-blocked kernel: dot products taken eight at a time.
pub(crate) const LANES: usize = 8;

/// `acc[c] = Σ_k a[k] · b[k · 8 + c]`: eight dot products against one `a`, with `b` packed
/// eight-interleaved so each `a[k]` is loaded once. Two partial sums per lane (even and odd `k`),
/// always combined in the same order.
///
/// Compiled also for AVX-512 and for AVX2, chosen at run time: the eight lanes fill one or two
/// registers instead of four SSE2 ones. Every build multiplies, then adds (never fused), lane by
/// lane in the same order, so each gives the same bits.
#[inline]
pub(crate) fn dots_1x8(a: &[f64], b: &[f64]) -> [f64; LANES] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has the feature `dots_1x8_avx512` is compiled for.
            #[allow(unsafe_code)]
            return unsafe { dots_1x8_avx512(a, b) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has the feature `dots_1x8_avx2` is compiled for.
            #[allow(unsafe_code)]
            return unsafe { dots_1x8_avx2(a, b) };
        }
    }
    dots_1x8_portable(a, b)
}

/// [`dots_1x8`] compiled for AVX-512: each partial sum is one register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn dots_1x8_avx512(a: &[f64], b: &[f64]) -> [f64; LANES] {
    dots_1x8_portable(a, b)
}

/// [`dots_1x8`] compiled for AVX2: each partial sum is two registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dots_1x8_avx2(a: &[f64], b: &[f64]) -> [f64; LANES] {
    dots_1x8_portable(a, b)
}

/// [`dots_1x8`] for the target the crate is compiled for.
#[inline(always)]
fn dots_1x8_portable(a: &[f64], b: &[f64]) -> [f64; LANES] {
    let mut even = [0.0f64; LANES];
    let mut odd = [0.0f64; LANES];
    let pairs_a = a.chunks_exact(2);
    let last = pairs_a.remainder().first().copied();
    let pairs_b = b.chunks_exact(2 * LANES);
    let rest_b = pairs_b.remainder();
    for (pa, pb) in pairs_a.zip(pairs_b) {
        let (b0, b1) = pb.split_at(LANES);
        for c in 0..LANES {
            even[c] += pa[0] * b0[c];
            odd[c] += pa[1] * b1[c];
        }
    }
    if let Some(a_last) = last {
        for (e, &bv) in even.iter_mut().zip(rest_b) {
            *e += a_last * bv;
        }
    }
    let mut acc = [0.0f64; LANES];
    for c in 0..LANES {
        acc[c] = even[c] + odd[c];
    }
    acc
}

/// [`dots_1x8`] of two rows `a0` and `a1` of one length against the same packed `b`, each
/// `b` value loaded once for both: the kernel is bound by its loads, and a row's sums are those
/// [`dots_1x8`] gives it, to the bit (the same products added in the same order).
#[inline]
pub(crate) fn dots_2x8(a0: &[f64], a1: &[f64], b: &[f64]) -> [[f64; LANES]; 2] {
    dots_2x8_with(a0, a1, b, pair_sums_2x8)
}

/// [`dots_1x8`] of `a0`, and of `a1` where there is one, against the same packed `b`
/// ([`dots_2x8`] for both): a loop over rows in pairs takes its last, unpaired row the same way.
#[inline]
pub(crate) fn dots_1or2x8(
    a0: &[f64],
    a1: Option<&[f64]>,
    b: &[f64],
) -> ([f64; LANES], Option<[f64; LANES]>) {
    match a1 {
        Some(a1) => {
            let [acc0, acc1] = dots_2x8(a0, a1, b);
            (acc0, Some(acc1))
        }
        None => (dots_1x8(a0, b), None),
    }
}

/// [`dots_2x8`] with the pair sums of `sums` (one build of [`pair_sums_2x8`]).
#[inline(always)]
fn dots_2x8_with(
    a0: &[f64],
    a1: &[f64],
    b: &[f64],
    sums: impl Fn(&[f64], &[f64], &[f64]) -> PairSums,
) -> [[f64; LANES]; 2] {
    let mut s = sums(a0, a1, b);
    if a0.len() % 2 == 1 {
        let k = a0.len() - 1;
        s.add_even(0, a0[k], &b[k * LANES..]);
        s.add_even(1, a1[k], &b[k * LANES..]);
    }
    [s.total(0), s.total(1)]
}

/// The two partial sums per lane of two rows ([`dots_1x8`]'s `even` and `odd`), so far.
pub(crate) struct PairSums {
    even: [[f64; LANES]; 2],
    odd: [[f64; LANES]; 2],
}

impl PairSums {
    /// Adds `a · b[c]` to row `row`'s even sums (where `dots_1x8` adds an odd length's last
    /// value).
    #[inline(always)]
    pub(crate) fn add_even(&mut self, row: usize, a: f64, b: &[f64]) {
        for (e, &bv) in self.even[row].iter_mut().zip(&b[..LANES]) {
            *e += a * bv;
        }
    }

    /// Row `row`'s dot products: even plus odd, lane by lane.
    #[inline(always)]
    pub(crate) fn total(&self, row: usize) -> [f64; LANES] {
        std::array::from_fn(|c| self.even[row][c] + self.odd[row][c])
    }
}

/// [`dots_1x8`]'s even and odd sums of two rows of one length over their whole pairs of values
/// (a last, unpaired value is left to the caller), each `b` value loaded once for both rows.
#[inline]
pub(crate) fn pair_sums_2x8(a0: &[f64], a1: &[f64], b: &[f64]) -> PairSums {
    debug_assert_eq!(
        a0.len(),
        a1.len(),
        "pair_sums_2x8 takes two rows of one length"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has the feature `pair_sums_2x8_avx512` is compiled for.
            #[allow(unsafe_code)]
            return unsafe { pair_sums_2x8_avx512(a0, a1, b) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has the feature `pair_sums_2x8_avx2` is compiled for.
            #[allow(unsafe_code)]
            return unsafe { pair_sums_2x8_avx2(a0, a1, b) };
        }
    }
    pair_sums_2x8_portable(a0, a1, b)
}

/// [`pair_sums_2x8`] compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn pair_sums_2x8_avx512(a0: &[f64], a1: &[f64], b: &[f64]) -> PairSums {
    pair_sums_2x8_portable(a0, a1, b)
}

/// [`pair_sums_2x8`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn pair_sums_2x8_avx2(a0: &[f64], a1: &[f64], b: &[f64]) -> PairSums {
    pair_sums_2x8_portable(a0, a1, b)
}

/// [`pair_sums_2x8`] for the target the crate is compiled for: [`dots_1x8_portable`]'s loop,
/// two rows at once.
#[inline(always)]
fn pair_sums_2x8_portable(a0: &[f64], a1: &[f64], b: &[f64]) -> PairSums {
    let mut even = [[0.0f64; LANES]; 2];
    let mut odd = [[0.0f64; LANES]; 2];
    for ((p0, p1), pb) in a0
        .chunks_exact(2)
        .zip(a1.chunks_exact(2))
        .zip(b.chunks_exact(2 * LANES))
    {
        let (b0, b1) = pb.split_at(LANES);
        for c in 0..LANES {
            even[0][c] += p0[0] * b0[c];
            odd[0][c] += p0[1] * b1[c];
            even[1][c] += p1[0] * b0[c];
            odd[1][c] += p1[1] * b1[c];
        }
    }
    PairSums { even, odd }
}

/// Packs rows `rows` of `src` (row stride `stride`), columns `cols`, eight-interleaved:
/// `out[(g · width + k) · 8 + t] = src[row g·8 + t][col k]`, zero-padded to whole groups.
pub(crate) fn pack_by_eight(
    src: &[f64],
    stride: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    out: &mut Vec<f64>,
) {
    let width = cols.len();
    let groups = rows.len().div_ceil(LANES);
    out.clear();
    out.resize(groups * width * LANES, 0.0);
    for (r, row) in rows.enumerate() {
        let (g, t) = (r / LANES, r % LANES);
        let base = g * width * LANES;
        for (k, &v) in src[row * stride + cols.start..row * stride + cols.end]
            .iter()
            .enumerate()
        {
            out[base + k * LANES + t] = v;
        }
    }
}

/// Factors a symmetric positive-definite `a = L Lᵀ` in place: on success the lower triangle holds
/// `L` and the strict upper triangle is zero. Only the lower triangle of `a` is read.
///
/// Right-looking and blocked by panels of 64 columns; the panel solve and the trailing update run
/// in parallel over rows.
///
/// # Shapes
/// - `a`: `[n, n]`
///
/// # Panics
/// If `a.len() != n * n`.
pub fn cholesky_lower(a: &mut [f64], n: usize) -> Result<(), NotPositiveDefinite> {
    assert_eq!(a.len(), n * n, "cholesky_lower needs an n × n matrix");
    let mut panel = Vec::new();
    for k0 in (0..n).step_by(PANEL) {
        let k1 = (k0 + PANEL).min(n);
        // Diagonal block, unblocked (its rows already hold the updates of earlier panels).
        for i in k0..k1 {
            for j in k0..=i {
                let s = a[i * n + j] - dot(&a[i * n + k0..i * n + j], &a[j * n + k0..j * n + j]);
                if i == j {
                    if !(s > 0.0 && s.is_finite()) {
                        return Err(NotPositiveDefinite { index: i, pivot: s });
                    }
                    a[i * n + i] = s.sqrt();
                } else {
                    a[i * n + j] = s / a[j * n + j];
                }
            }
        }
        if k1 == n {
            break;
        }
        let (top, below) = a.split_at_mut(k1 * n);
        let diag = &top[k0 * n..];
        // Panel below the diagonal block: L21 = A21 L11⁻ᵀ, one row at a time.
        below.par_chunks_mut(n).for_each(|row| {
            for j in k0..k1 {
                let ljj = &diag[(j - k0) * n..(j - k0) * n + n];
                let s = row[j] - dot(&row[k0..j], &ljj[k0..j]);
                row[j] = s / ljj[j];
            }
        });
        // Trailing update A22 −= L21 L21ᵀ (lower triangle), eight columns at a time against a
        // packed copy of the panel.
        let width = k1 - k0;
        pack_by_eight(below, n, 0..n - k1, k0..k1, &mut panel);
        // Rows in pairs: both take the groups up to the first's diagonal together
        // ([`dots_2x8`]), and the second its last group alone where it has one more.
        let group = |g: usize| &panel[g * width * LANES..(g + 1) * width * LANES];
        let update = |row: &mut [f64], r: usize, g: usize, acc: [f64; LANES]| {
            let c0 = g * LANES;
            let upto = (r + 1 - c0).min(LANES);
            for (t, v) in acc.iter().take(upto).enumerate() {
                row[k1 + c0 + t] -= v;
            }
        };
        below
            .par_chunks_mut(2 * n)
            .enumerate()
            .for_each(|(pair, rows)| {
                let r = 2 * pair;
                let (first, second) = rows.split_at_mut(n);
                let l0 = first[k0..k1].to_vec();
                let l1 = (!second.is_empty()).then(|| second[k0..k1].to_vec());
                for g in 0..=r / LANES {
                    let (acc0, acc1) = dots_1or2x8(&l0, l1.as_deref(), group(g));
                    update(first, r, g, acc0);
                    if let Some(acc1) = acc1 {
                        update(second, r + 1, g, acc1);
                    }
                }
                let last = (r + 1) / LANES;
                if let Some(l1) = l1.filter(|_| last > r / LANES) {
                    update(second, r + 1, last, dots_1x8(&l1, group(last)));
                }
            });
    }
    for i in 0..n {
        a[i * n + i + 1..(i + 1) * n].fill(0.0);
    }
    Ok(())
}

/// Inverse of a lower-triangular `l` with a non-zero diagonal; the result is lower triangular.
///
/// Column `j` of `L⁻¹` solves `L x = e_j`; the columns are independent and solved in parallel,
/// eight at a time so each row of `L` is read once per eight columns.
///
/// # Shapes
/// - `l`: `[n, n]` → `[n, n]`
///
/// # Panics
/// If `l.len() != n * n`.
pub fn invert_lower(l: &[f64], n: usize) -> Vec<f64> {
    assert_eq!(l.len(), n * n, "invert_lower needs an n × n matrix");
    // Eight columns of L⁻¹ at a time, interleaved: x[(i − j0) · 8 + c] = L⁻¹[i][j0 + c]. Row i
    // of L is read once for all eight; columns left of their diagonal hold exact zeros.
    let groups: Vec<Vec<f64>> = (0..n.div_ceil(LANES))
        .into_par_iter()
        .map(|g| {
            let j0 = g * LANES;
            let mut x = vec![0.0f64; (n - j0) * LANES];
            let delta = |i: usize, c: usize| if i == j0 + c { 1.0 } else { 0.0 };
            // Rows in pairs from the group's first, so the first of a pair has an even number
            // of solved values before it: both rows' sums over them take each solved value once
            // ([`pair_sums_2x8`]); the first row is solved, and the second adds its term for it
            // last, as `dots_1x8` adds the unpaired value of an odd length.
            for i in (j0..n).step_by(2) {
                let len = i - j0;
                let (solved, current) = x.split_at_mut(len * LANES);
                let row0 = &l[i * n + j0..i * n + i];
                let lii = l[i * n + i];
                if i + 1 == n {
                    let acc = dots_1x8(row0, solved);
                    for (c, (xc, s)) in current[..LANES].iter_mut().zip(acc).enumerate() {
                        *xc = (delta(i, c) - s) / lii;
                    }
                    break;
                }
                let row1 = &l[(i + 1) * n + j0..(i + 1) * n + i];
                let mut sums = pair_sums_2x8(row0, row1, solved);
                let (first, second) = current.split_at_mut(LANES);
                for (c, (xc, s)) in first.iter_mut().zip(sums.total(0)).enumerate() {
                    *xc = (delta(i, c) - s) / lii;
                }
                sums.add_even(1, l[(i + 1) * n + i], first);
                let next = l[(i + 1) * n + i + 1];
                for (c, (xc, s)) in second[..LANES].iter_mut().zip(sums.total(1)).enumerate() {
                    *xc = (delta(i + 1, c) - s) / next;
                }
            }
            x
        })
        .collect();
    let mut inv = vec![0.0f64; n * n];
    for (g, x) in groups.iter().enumerate() {
        let j0 = g * LANES;
        for (r, lanes) in x.chunks_exact(LANES).enumerate() {
            let i = j0 + r;
            for (c, &v) in lanes.iter().enumerate() {
                if j0 + c <= i {
                    inv[i * n + j0 + c] = v;
                }
            }
        }
    }
    inv
}

/// The upper Cholesky factor `U` of `H⁻¹` (`H⁻¹ = UᵀU`), what the SparseGPT reference computes as
/// `cholesky(cholesky_inverse(cholesky(H)), upper=True)`, for symmetric positive-definite `h`.
///
/// With `P` the index reversal, `P H P = L' L'ᵀ` gives `U = P L'⁻¹ P`: one factorisation and
/// one triangular inverse instead of three factorisations and a product, and no explicit `H⁻¹`
/// whose own factorisation could fail where `H`'s did not. The error's `index` is in the
/// original order.
///
/// # Shapes
/// - `h`: `[n, n]` → `[n, n]`, upper triangular
///
/// # Panics
/// If `h.len() != n * n`.
pub fn upper_cholesky_of_inverse(h: &[f64], n: usize) -> Result<Vec<f64>, NotPositiveDefinite> {
    assert_eq!(
        h.len(),
        n * n,
        "upper_cholesky_of_inverse needs an n × n matrix"
    );
    let mut reversed = vec![0.0f64; n * n];
    for a in 0..n {
        for b in 0..n {
            reversed[a * n + b] = h[(n - 1 - a) * n + (n - 1 - b)];
        }
    }
    cholesky_lower(&mut reversed, n).map_err(|e| NotPositiveDefinite {
        index: n - 1 - e.index,
        pivot: e.pivot,
    })?;
    let x = invert_lower(&reversed, n);
    let mut u = vec![0.0f64; n * n];
    for a in 0..n {
        for b in a..n {
            u[a * n + b] = x[(n - 1 - a) * n + (n - 1 - b)];
        }
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every build of `dots_1x8` this CPU runs gives the portable build's bits.
    #[test]
    fn the_vector_builds_of_dots_1x8_agree_to_the_bit() {
        for len in [0, 1, 2, 7, 128, 301] {
            let a: Vec<f64> = (0..len).map(|k| (k as f64 * 0.37).sin() * 1e3).collect();
            let b: Vec<f64> = (0..len * LANES)
                .map(|k| (k as f64 * 0.11).cos() / (1.0 + k as f64))
                .collect();
            let bits = |acc: [f64; LANES]| acc.map(f64::to_bits);
            let portable = bits(dots_1x8_portable(&a, &b));
            assert_eq!(bits(dots_1x8(&a, &b)), portable, "len {len}");
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2.
                    assert_eq!(
                        bits(unsafe { dots_1x8_avx2(&a, &b) }),
                        portable,
                        "len {len}"
                    );
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F.
                    assert_eq!(
                        bits(unsafe { dots_1x8_avx512(&a, &b) }),
                        portable,
                        "len {len}"
                    );
                }
            }
        }
    }

    /// Two rows at once give each row [`dots_1x8`]'s bits, in every build this CPU runs.
    #[test]
    fn two_rows_at_once_equal_each_row_alone_to_the_bit() {
        for len in [0, 1, 2, 3, 8, 129, 300] {
            let row = |phase: f64| -> Vec<f64> {
                (0..len)
                    .map(|k| (k as f64 * 0.37 + phase).sin() * 1e3)
                    .collect()
            };
            let (a0, a1) = (row(0.0), row(1.3));
            let b: Vec<f64> = (0..len * LANES)
                .map(|k| (k as f64 * 0.11).cos() / (1.0 + k as f64))
                .collect();
            let bits = |acc: [f64; LANES]| acc.map(f64::to_bits);
            let alone = [bits(dots_1x8(&a0, &b)), bits(dots_1x8(&a1, &b))];
            let together = |[x, y]: [[f64; LANES]; 2]| [bits(x), bits(y)];
            assert_eq!(together(dots_2x8(&a0, &a1, &b)), alone, "len {len}");
            let portable = dots_2x8_with(&a0, &a1, &b, pair_sums_2x8_portable);
            assert_eq!(together(portable), alone, "len {len}");
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2.
                    let avx2 = dots_2x8_with(&a0, &a1, &b, |x, y, z| unsafe {
                        pair_sums_2x8_avx2(x, y, z)
                    });
                    assert_eq!(together(avx2), alone, "len {len}");
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F.
                    let avx512 = dots_2x8_with(&a0, &a1, &b, |x, y, z| unsafe {
                        pair_sums_2x8_avx512(x, y, z)
                    });
                    assert_eq!(together(avx512), alone, "len {len}");
                }
            }
        }
    }

    /// [`invert_lower`] one row at a time, each row's sums by [`dots_1x8`] alone.
    fn invert_lower_by_rows(l: &[f64], n: usize) -> Vec<f64> {
        let mut inv = vec![0.0f64; n * n];
        for j0 in (0..n).step_by(LANES) {
            let mut x = vec![0.0f64; (n - j0) * LANES];
            for i in j0..n {
                let (solved, current) = x.split_at_mut((i - j0) * LANES);
                let acc = dots_1x8(&l[i * n + j0..i * n + i], solved);
                for (c, (xc, s)) in current[..LANES].iter_mut().zip(acc).enumerate() {
                    let delta = if i == j0 + c { 1.0 } else { 0.0 };
                    *xc = (delta - s) / l[i * n + i];
                }
            }
            for (r, lanes) in x.chunks_exact(LANES).enumerate() {
                for (c, &v) in lanes.iter().enumerate() {
                    if j0 + c <= j0 + r && j0 + c < n {
                        inv[(j0 + r) * n + j0 + c] = v;
                    }
                }
            }
        }
        inv
    }

    /// Rows solved in pairs give the bits of rows solved one at a time, at even and odd sizes
    /// and with an odd row left at the end of a group.
    #[test]
    fn lower_inverse_in_row_pairs_equals_one_row_at_a_time_to_the_bit() {
        for (n, seed) in [
            (1, 1),
            (2, 2),
            (7, 3),
            (8, 4),
            (9, 5),
            (23, 6),
            (64, 7),
            (131, 8),
        ] {
            let mut l = spd(n, seed);
            cholesky_lower(&mut l, n).unwrap();
            let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
            assert_eq!(
                bits(invert_lower(&l, n)),
                bits(invert_lower_by_rows(&l, n)),
                "n {n}"
            );
        }
    }

    /// `A Bᵀ` for row-major `[n, n]` matrices.
    fn mul_t(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
        let mut c = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                c[i * n + j] = (0..n).map(|k| a[i * n + k] * b[j * n + k]).sum();
            }
        }
        c
    }

    fn transpose(a: &[f64], n: usize) -> Vec<f64> {
        let mut t = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                t[j * n + i] = a[i * n + j];
            }
        }
        t
    }

    /// A seeded SPD matrix `G Gᵀ + n I`.
    fn spd(n: usize, seed: u64) -> Vec<f64> {
        let mut state = seed;
        let g: Vec<f64> = (0..n * n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 11) as f64 / (1u64 << 53) as f64) - 0.5
            })
            .collect();
        let mut a = mul_t(&g, &g, n);
        for i in 0..n {
            a[i * n + i] += n as f64 * 0.1;
        }
        a
    }

    fn max_diff(a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn cholesky_by_hand() {
        // [[4, 2], [2, 5]] = L Lᵀ with L = [[2, 0], [1, 2]].
        let mut a = vec![4.0, 2.0, 2.0, 5.0];
        cholesky_lower(&mut a, 2).unwrap();
        assert_eq!(a, [2.0, 0.0, 1.0, 2.0]);
    }

    #[test]
    fn cholesky_reconstructs_across_panels() {
        for n in [1, 5, 64, 65, 150] {
            let a = spd(n, n as u64);
            let mut l = a.clone();
            cholesky_lower(&mut l, n).unwrap();
            let rebuilt = mul_t(&l, &l, n);
            assert!(max_diff(&rebuilt, &a) < 1e-9, "n = {n}");
        }
    }

    #[test]
    fn cholesky_reports_the_failing_pivot() {
        // [[1, 2], [2, 1]] is indefinite: the second pivot is 1 − 4 = −3.
        let mut a = vec![1.0, 2.0, 2.0, 1.0];
        assert_eq!(
            cholesky_lower(&mut a, 2),
            Err(NotPositiveDefinite {
                index: 1,
                pivot: -3.0
            })
        );
        let mut z = vec![0.0; 9];
        assert_eq!(cholesky_lower(&mut z, 3).unwrap_err().index, 0);
    }

    #[test]
    fn lower_inverse_is_an_inverse() {
        let n = 70;
        let mut l = spd(n, 3);
        cholesky_lower(&mut l, n).unwrap();
        let inv = invert_lower(&l, n);
        // L · L⁻¹ = I, computed as L (L⁻¹ᵀ)ᵀ.
        let prod = mul_t(&l, &transpose(&inv, n), n);
        let eye: Vec<f64> = (0..n * n)
            .map(|k| if k / n == k % n { 1.0 } else { 0.0 })
            .collect();
        assert!(max_diff(&prod, &eye) < 1e-12);
        assert!((0..n).all(|i| (i + 1..n).all(|j| inv[i * n + j] == 0.0)));
    }

    #[test]
    fn upper_factor_matches_the_reference_route() {
        // Reference: L = chol(H); Hinv = L⁻ᵀ L⁻¹; U = chol(Hinv, upper).
        let n = 90;
        let h = spd(n, 11);
        let u = upper_cholesky_of_inverse(&h, n).unwrap();
        let mut l = h.clone();
        cholesky_lower(&mut l, n).unwrap();
        let linv = invert_lower(&l, n);
        let linv_t = transpose(&linv, n);
        let hinv = mul_t(&linv_t, &linv_t, n); // L⁻ᵀ (L⁻ᵀ)ᵀ = L⁻ᵀ L⁻¹
        let mut lower = hinv.clone();
        cholesky_lower(&mut lower, n).unwrap();
        let expected = transpose(&lower, n);
        assert!(
            max_diff(&u, &expected) < 1e-12,
            "{}",
            max_diff(&u, &expected)
        );
        assert!(max_diff(&mul_t(&transpose(&u, n), &transpose(&u, n), n), &hinv) < 1e-12);
    }

    #[test]
    fn upper_factor_error_index_is_in_original_order() {
        // Only channel 0 is broken; the reversed factorisation meets it last.
        let h = vec![-1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0];
        assert_eq!(upper_cholesky_of_inverse(&h, 3).unwrap_err().index, 0);
    }

    #[test]
    fn dot_handles_tails() {
        let a: Vec<f64> = (0..19).map(f64::from).collect();
        let expected: f64 = (0..19).map(|k| f64::from(k * k)).sum();
        assert_eq!(dot(&a, &a), expected);
        assert_eq!(dot(&a[..3], &a), 0.0 + 1.0 + 4.0);
    }
}
