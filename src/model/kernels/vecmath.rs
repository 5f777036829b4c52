//! Element-wise kernels of the fused CPU path (attention softmax rows, SwiGLU, a row's
//! negative log-likelihood) built on one exponential the compiler can vectorise: a branch-free
//! polynomial `exp` within 2 ulp of the exact value. Each kernel is compiled twice, for AVX2 +
//! FMA (chosen at run time) and for the baseline target. Both builds run the same operations in
//! the same order, and `mul_add` is one rounding on every target, so a result does not depend
//! on which CPU computed it.

/// Independent accumulators per reduction: one AVX2 register of f32.
const LANES: usize = 8;

/// `e^x` within 2 ulp for finite `x`; 0 below ln of the smallest subnormal, infinity above
/// ln(`f32::MAX`), NaN for NaN.
///
/// Cody–Waite reduction `x = n ln 2 + r` with |r| ≤ ln 2 / 2, the Cephes `expf` polynomial
/// for `e^r`, and `2^n` applied as two exact powers so that subnormal results stay exact
/// to rounding.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that `n · LN2_HI` is exact for every n in range.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 · 2^23: adding it rounds a float below 2^22 to an integer, ties to even.
    const ROUND: f32 = 12_582_912.0;
    const HI: f32 = 88.722_84;
    const LO: f32 = -103.972_08;
    // Comparisons with NaN are false, so a NaN runs through and comes out NaN.
    let clamped = x.clamp(LO, HI);
    let shifted = clamped.mul_add(LOG2E, ROUND);
    let n = shifted - ROUND;
    let r = n.mul_add(-LN2_HI, clamped);
    let r = n.mul_add(-LN2_LO, r);
    let mut p: f32 = 1.987_569_2e-4;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 0.5);
    let p = p.mul_add(r * r, r) + 1.0;
    // n in [-150, 128]: 2^n as 2^(n/2) · 2^(n − n/2), each a normal float.
    let n = (shifted.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let half = n >> 1;
    let power = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
    let value = p * power(half) * power(n - half);
    if x < LO {
        0.0
    } else if x > HI {
        f32::INFINITY
    } else {
        value
    }
}

/// The larger of `a` and `b` (`b` when either is NaN): one `maxps`.
#[inline(always)]
fn larger(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// Folds `values` into `lanes` with `step`, value `i` into lane `i % LANES`: a fixed order
/// on every target, and one vector operation per [`LANES`] values.
#[inline(always)]
fn fold_lanes<T: Copy>(lanes: &mut [T; LANES], values: &[f32], step: impl Fn(T, f32) -> T) {
    let mut chunks = values.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = step(*lane, v);
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane = step(*lane, v);
    }
}

/// The maximum of `values` (−∞ when empty).
#[inline(always)]
fn max_of(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    fold_lanes(&mut lanes, values, |m, v| larger(v, m));
    lanes.into_iter().fold(f32::NEG_INFINITY, larger)
}

/// Runs `$portable` through a copy compiled with AVX2 and FMA when the CPU has both.
macro_rules! dispatch {
    ($(#[$doc:meta])* pub fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? = $portable:ident;) => {
        $(#[$doc])*
        pub fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                fn accelerated($($arg: $ty),*) $(-> $ret)? {
                    $portable($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has the features `accelerated` is compiled for.
                    #[allow(unsafe_code)]
                    return unsafe { accelerated($($arg),*) };
                }
            }
            $portable($($arg),*)
        }
    };
}

dispatch! {
    /// Softmax of `row[..visible] · scale` in place; the masked tail `row[visible..]` becomes 0.
    pub fn softmax_row(row: &mut [f32], visible: usize, scale: f32) = softmax_row_portable;
}

#[inline(always)]
fn softmax_row_portable(row: &mut [f32], visible: usize, scale: f32) {
    let (live, masked) = row.split_at_mut(visible);
    masked.fill(0.0);
    // Scaling by a positive number keeps the order, so max(s) · scale = max(s · scale).
    let max = max_of(live) * scale;
    // A plain map (the loop vectoriser's shape), then the sum in lanes.
    for s in live.iter_mut() {
        *s = exp(s.mul_add(scale, -max));
    }
    let sum = sum_of(live);
    live.iter_mut().for_each(|s| *s /= sum);
}

/// `tanh(x)` within 3 ulp of the exact value (±1 from |x| ≈ 9, NaN for NaN): the Cephes
/// `tanhf` polynomial below |x| = 0.625, `1 − 2 / (e^(2|x|) + 1)` from there (no cancellation:
/// the quotient is at most 0.45), the sign put back. Branch-free, so it vectorises.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let z = a * a;
    let mut p: f32 = -5.704_988_7e-3;
    p = p.mul_add(z, 2.063_908_8e-2);
    p = p.mul_add(z, -5.373_971_6e-2);
    p = p.mul_add(z, 1.333_144_2e-1);
    p = p.mul_add(z, -3.333_328e-1);
    let small = (p * z).mul_add(a, a);
    let large = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    let t = if a < 0.625 { small } else { large };
    t.copysign(x)
}

dispatch! {
    /// Soft-capping in place: `s = cap · tanh(s · scale / cap)`, in transformers' order of f32
    /// operations (Gemma 2's attention scores and logits), with [`tanh`].
    pub fn soft_cap(row: &mut [f32], scale: f32, cap: f32) = soft_cap_portable;
}

#[inline(always)]
fn soft_cap_portable(row: &mut [f32], scale: f32, cap: f32) {
    for s in row.iter_mut() {
        *s = tanh(*s * scale / cap) * cap;
    }
}

/// The sum of `values`, in lanes.
#[inline(always)]
fn sum_of(values: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    fold_lanes(&mut lanes, values, |sum, v| sum + v);
    lanes.iter().sum()
}

dispatch! {
    /// RMSNorm of one row: `out = x / sqrt(mean(x²) + eps) · weight`, the squares summed in
    /// [`LANES`] lanes.
    pub fn rms_norm_row(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) = rms_norm_row_portable;
}

#[inline(always)]
fn rms_norm_row_portable(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let mut lanes = [0.0f32; LANES];
    fold_lanes(&mut lanes, x, |sum, v| v.mul_add(v, sum));
    let mean_square = lanes.iter().sum::<f32>() / x.len() as f32;
    let rms = (mean_square + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = v / rms * w;
    }
}

dispatch! {
    /// SwiGLU in place: `gate = silu(gate) · up`, with `silu(g) = g / (1 + e^−g)`.
    pub fn silu_mul(gate: &mut [f32], up: &[f32]) = silu_mul_portable;
}

#[inline(always)]
fn silu_mul_portable(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}

/// SiLU in place (an MLP without a gate), `x / (1 + e^−x)`, as [`silu_mul`] computes it.
pub fn silu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = *v / (1.0 + exp(-*v)));
}

/// LayerNorm of one row: `out = (x − mean) / sqrt(var + eps) · weight + bias` (no bias where
/// it has none), the variance the mean square of `x − mean` (PyTorch's `nn.LayerNorm`), in f32.
pub fn layer_norm_row(x: &[f32], weight: &[f32], bias: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    let n = x.len() as f32;
    let mut lanes = [0.0f32; LANES];
    fold_lanes(&mut lanes, x, |sum, v| sum + v);
    let mean = lanes.iter().sum::<f32>() / n;
    let mut lanes = [0.0f32; LANES];
    fold_lanes(&mut lanes, x, |sum, v| (v - mean).mul_add(v - mean, sum));
    let std = (lanes.iter().sum::<f32>() / n + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = (v - mean) / std * w;
    }
    if let Some(bias) = bias {
        out.iter_mut().zip(bias).for_each(|(o, b)| *o += b);
    }
}

/// ReLU in place.
pub fn relu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = v.max(0.0));
}

/// Squared ReLU in place, `max(x, 0)²`.
pub fn relu2(x: &mut [f32]) {
    x.iter_mut().for_each(|v| {
        let r = v.max(0.0);
        *v = r * r;
    });
}

/// Squared ReLU as a gate in place: `gate = max(gate, 0)² · up`.
pub fn relu2_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        let r = g.max(0.0);
        *g = r * r * u;
    }
}

/// ReGLU in place: `gate = max(gate, 0) · up`.
pub fn relu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = g.max(0.0) * u;
    }
}

/// `erf(x)` within 2 ulp (±1 from |x| = 4, where it rounds to 1; NaN for NaN), branch-free so
/// that a loop of it vectorises.
///
/// Below |x| = 0.921875, `x · P(x²)`; above, `1 − e^(−x²) · R(t)` with `t = 1 / (1 + |x|/2)`
/// (`R` approximates `erfc(a) · e^(a²)`, smooth over the range). `P` (degree 6) and `R`
/// (degree 7) are least-squares fits to the f64 `erf` and `erfc`, relative error 4.9e-9 and
/// 2.2e-9 before rounding to f32.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    const SPLIT: f32 = 0.921_875;
    const P: [f32; 7] = [
        // The fit's leading coefficient rounds to 2/√π, erf's slope at 0.
        std::f32::consts::FRAC_2_SQRT_PI,
        -0.376_126_17,
        0.112_835_49,
        -0.026_853_595,
        0.005_189_832_3,
        -0.000_803_861_9,
        7.997_228e-5,
    ];
    const R: [f32; 8] = [
        -0.000_149_595_61,
        0.284_841_72,
        0.260_152_64,
        0.346_120_42,
        -0.099_990_964,
        0.558_636_96,
        -0.467_940_87,
        0.118_376_076,
    ];
    let horner = |c: &[f32], v: f32| c.iter().rev().fold(0.0f32, |acc, &k| acc.mul_add(v, k));
    // A comparison with NaN is false, so a NaN runs through and comes out NaN.
    let a = if x.abs() > 4.0 { 4.0 } else { x.abs() };
    let s = a * a;
    let small = a * horner(&P, s);
    let t = 1.0 / 0.5f32.mul_add(a, 1.0);
    let large = 1.0 - exp(-s) * horner(&R, t);
    let value = if a < SPLIT { small } else { large };
    value.copysign(x)
}

dispatch! {
    /// GELU in place, exact: `x/2 · (1 + erf(x/√2))` (PyTorch's `gelu`; GPT-NeoX's and
    /// Falcon's MLP), with [`erf`].
    pub fn gelu(x: &mut [f32]) = gelu_portable;
}

#[inline(always)]
fn gelu_portable(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu_one(*v));
}

dispatch! {
    /// GeGLU in place with the exact GELU: `gate = gelu(gate) · up`.
    pub fn gelu_mul(gate: &mut [f32], up: &[f32]) = gelu_mul_portable;
}

#[inline(always)]
fn gelu_mul_portable(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = gelu_one(*g) * u;
    }
}

#[inline(always)]
fn gelu_one(x: f32) -> f32 {
    x * 0.5 * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

dispatch! {
    /// GELU's tanh approximation in place (an MLP without a gate: BLOOM's, GPT-NeoX-20B's
    /// `gelu_fast`), as [`gelu_tanh_mul`] computes it.
    pub fn gelu_tanh(x: &mut [f32]) = gelu_tanh_portable;
}

#[inline(always)]
fn gelu_tanh_portable(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu_tanh_one(*v));
}

#[inline(always)]
fn gelu_tanh_one(x: f32) -> f32 {
    /// √(2/π).
    const K: f32 = 0.797_884_6;
    let y = K * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp(-2.0 * y))
}

dispatch! {
    /// GeGLU in place: `gate = gelu_tanh(gate) · up`, with GELU's tanh approximation
    /// `g/2 · (1 + tanh(y)) = g / (1 + e^(−2y))`, `y = √(2/π) · (g + 0.044715 g³)`.
    pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) = gelu_tanh_mul_portable;
}

#[inline(always)]
fn gelu_tanh_mul_portable(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh_one(*g) * u;
    }
}

dispatch! {
    /// `−log softmax(row)[target]`, with the exponentials summed in f64: an f32 running sum of
    /// ~50k mostly tiny terms rounds each one down (measured: perplexity 1.2e-4 low on SmolLM2).
    pub fn token_nll(row: &[f32], target: usize) -> f64 = token_nll_portable;
}

#[inline(always)]
fn token_nll_portable(row: &[f32], target: usize) -> f64 {
    let max = max_of(row);
    exp_sum(row, max).ln() - f64::from(row[target] - max)
}

/// `Σ exp(v − max)` over `row`: each exponential in f32, summed in f64.
#[inline(always)]
fn exp_sum(row: &[f32], max: f32) -> f64 {
    /// Exponentials formed per block (a plain map the loop vectoriser takes), then summed.
    const BLOCK: usize = 256;
    let mut sums = [0.0f64; LANES];
    let mut terms = [0.0f32; BLOCK];
    for block in row.chunks(BLOCK) {
        let terms = &mut terms[..block.len()];
        for (t, &v) in terms.iter_mut().zip(block) {
            *t = exp(v - max);
        }
        fold_lanes(&mut sums, terms, |sum, t| sum + f64::from(t));
    }
    sums.iter().sum()
}

/// A row's softmax denominator taken a block of the row at a time: the largest value so far
/// and `Σ exp(v − max)` over the values so far, in f64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxSum {
    /// The largest value so far (−∞ before any).
    pub max: f32,
    /// `Σ exp(v − max)` so far.
    pub sum: f64,
}

impl Default for SoftmaxSum {
    fn default() -> Self {
        Self {
            max: f32::NEG_INFINITY,
            sum: 0.0,
        }
    }
}

impl SoftmaxSum {
    /// `−log softmax(row)[target]` once every block of the row was added, with `logit` the
    /// target's value: as [`token_nll`] computes it, the terms before the largest value's block
    /// rescaled in f64.
    pub fn nll(&self, logit: f32) -> f64 {
        self.sum.ln() - f64::from(logit - self.max)
    }
}

dispatch! {
    /// Adds the next block of a row to `state`; a block that raises the maximum rescales the
    /// sum so far by `exp(old − new)` in f64, and its own terms are taken against the new one.
    pub fn softmax_sum_add(state: &mut SoftmaxSum, block: &[f32]) = softmax_sum_add_portable;
}

#[inline(always)]
fn softmax_sum_add_portable(state: &mut SoftmaxSum, block: &[f32]) {
    let block_max = max_of(block);
    if block_max > state.max {
        if state.sum > 0.0 {
            state.sum *= (f64::from(state.max) - f64::from(block_max)).exp();
        }
        state.max = block_max;
    }
    state.sum += exp_sum(block, state.max);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between `a` and the f32 nearest to `exact`.
    fn ulps(a: f32, exact: f64) -> u32 {
        let b = exact as f32;
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    /// A row taken in blocks gives `token_nll`'s value to 1e-12 (relative, or absolute below 1)
    /// whichever block holds the maximum (first, middle, last), with blocks of unequal length.
    #[test]
    fn exact_gelu_is_within_a_few_ulps_of_the_f64_formula() {
        let mut worst = 0;
        for i in -4000..=4000 {
            let x = i as f32 * 0.002_5;
            let mut v = [x];
            gelu(&mut v);
            let exact = f64::from(x) * 0.5 * (1.0 + libm::erf(f64::from(x) / 2f64.sqrt()));
            // For negative x, `1 + erf` cancels in f32, as in PyTorch's own f32 formula: the
            // error is then a few ulp of 1, scaled by |x|.
            if x >= -0.5 {
                worst = worst.max(ulps(v[0], exact));
            }
            let bound = 4.0 * f64::from(f32::EPSILON) * f64::from(x.abs()).max(1e-3);
            assert!(
                (f64::from(v[0]) - exact).abs() <= bound,
                "{x}: {} vs {exact}",
                v[0]
            );
        }
        assert!(worst <= 4, "{worst} ulp");
        let (mut gate, up) = ([1.0f32, -2.0], [3.0f32, 0.5]);
        gelu_mul(&mut gate, &up);
        assert!((gate[0] - 0.841_344_7 * 3.0).abs() < 1e-6, "{gate:?}");
        assert!((gate[1] + 0.045_500_26 * 0.5).abs() < 1e-6, "{gate:?}");
    }

    /// Every 2^-12 step over ±6 (and the edges of both pieces): within 2 ulp of the f64 `erf`.
    #[test]
    fn erf_is_within_two_ulps() {
        let mut worst = (0, 0.0f32);
        let edges = [
            0.921_875f32,
            0.921_874_94,
            4.0,
            3.999_999_8,
            0.0,
            -0.0,
            1e-30,
        ];
        let grid = (-6 * 4096..=6 * 4096).map(|i| i as f32 / 4096.0);
        for x in grid.chain(edges) {
            let u = ulps(erf(x), libm::erf(f64::from(x)));
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 2, "{} ulp at {}", worst.0, worst.1);
        assert_eq!(erf(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!((erf(9.0), erf(-9.0), erf(f32::INFINITY)), (1.0, -1.0, 1.0));
        assert!(erf(f32::NAN).is_nan());
        let mut v = [f32::NAN];
        gelu(&mut v);
        assert!(v[0].is_nan());
    }

    #[test]
    fn blocked_softmax_sums_give_the_whole_rows_nll() {
        let row: Vec<f32> = (0..5000)
            .map(|i| ((i * 7919) % 1013) as f32 / 50.0 - 10.0)
            .collect();
        for peak in [3, 2500, 4999] {
            let mut row = row.clone();
            row[peak] = 40.0;
            for target in [0, peak, 4321] {
                let whole = token_nll(&row, target);
                let mut state = SoftmaxSum::default();
                for block in row.chunks(777) {
                    softmax_sum_add(&mut state, block);
                }
                let blocked = state.nll(row[target]);
                assert!(
                    (blocked - whole).abs() < 1e-12 * whole.abs().max(1.0),
                    "peak {peak}, target {target}: {blocked} vs {whole}"
                );
            }
        }
    }

    /// Checks that `f` is within `bound` ulp of `exact` at every point of the grid
    /// `from, from + step, …` below `to`, and that the grid meets at least one rounding
    /// difference (else it checks nothing).
    fn within_ulps_on_grid(
        name: &str,
        f: fn(f32) -> f32,
        exact: fn(f64) -> f64,
        [from, to, step]: [f32; 3],
        bound: u32,
    ) {
        let mut worst = 0;
        let mut x = from;
        while x < to {
            let u = ulps(f(x), exact(f64::from(x)));
            assert!(
                u <= bound,
                "{name}({x}) = {} is {u} ulp from {}",
                f(x),
                exact(f64::from(x))
            );
            worst = worst.max(u);
            x += step;
        }
        assert!(
            worst >= 1,
            "the grid should meet at least one rounding difference"
        );
    }

    #[test]
    fn exp_is_within_two_ulp_of_the_exact_value() {
        within_ulps_on_grid("exp", exp, f64::exp, [-103.0, 88.7, 0.000_37], 2);
    }

    #[test]
    fn exp_edges() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        // The largest finite result and a subnormal one.
        assert!(ulps(exp(88.72), f64::from(88.72f32).exp()) <= 2);
        assert!(ulps(exp(-100.0), (-100f64).exp()) <= 2);
    }

    #[test]
    fn softmax_row_by_hand() {
        // visible 3 of 4, scale ln 2: weights 2^1, 2^2, 2^3 over 14; the masked tail is 0.
        let ln2 = std::f32::consts::LN_2;
        let mut row = [1.0, 2.0, 3.0, 42.0];
        softmax_row(&mut row, 3, ln2);
        let expected = [2.0 / 14.0, 4.0 / 14.0, 8.0 / 14.0, 0.0];
        for (a, e) in row.iter().zip(expected) {
            assert!((a - e).abs() < 1e-6, "{row:?} vs {expected:?}");
        }
    }

    #[test]
    fn tanh_is_within_three_ulp_of_the_exact_value() {
        within_ulps_on_grid("tanh", tanh, f64::tanh, [-12.0, 12.0, 0.000_31], 3);
        // Near zero, where a difference of exponentials would lose every digit.
        for x in [1e-30f32, 1e-7, 3e-4, 0.01, 0.6249, 0.625] {
            for x in [x, -x] {
                assert!(
                    ulps(tanh(x), f64::from(x).tanh()) <= 3,
                    "tanh({x}) = {}",
                    tanh(x)
                );
            }
        }
        assert_eq!(tanh(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh(50.0), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert!(tanh(f32::NAN).is_nan());
    }

    #[test]
    fn soft_cap_by_hand() {
        // cap 2, scale 0.5: 2 · tanh(s / 4); tanh(ln 3 / 2) = 1/2, so s = 2 ln 3 gives 1.
        let mut row = [0.0, 2.0 * 3f32.ln(), -2.0 * 3f32.ln(), 1e6];
        soft_cap(&mut row, 0.5, 2.0);
        let expected = [0.0, 1.0, -1.0, 2.0];
        for (a, e) in row.iter().zip(expected) {
            assert!((a - e).abs() < 1e-6, "{row:?} vs {expected:?}");
        }
    }

    #[test]
    fn rms_norm_row_by_hand() {
        // 11 values (one full lane group and a remainder): mean square of 1..=11 is 46.
        let x: Vec<f32> = (1..=11).map(|v| v as f32).collect();
        let weight: Vec<f32> = (0..11)
            .map(|i| if i % 2 == 0 { 2.0 } else { -1.0 })
            .collect();
        let mut out = vec![0.0; 11];
        rms_norm_row(&x, &weight, 0.5, &mut out);
        let rms = 46.5f32.sqrt();
        for ((o, v), w) in out.iter().zip(&x).zip(&weight) {
            assert!((o - v / rms * w).abs() < 1e-6, "{out:?}");
        }
    }

    #[test]
    fn gelu_tanh_mul_by_hand() {
        let gelu = |x: f64| {
            let y = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
            0.5 * x * (1.0 + y.tanh())
        };
        let xs = [0.0f32, 1.0, -2.0, 0.3, 7.0, -40.0];
        let mut gate = xs;
        gelu_tanh_mul(&mut gate, &[2.0; 6]);
        for (a, x) in gate.iter().zip(xs) {
            let e = 2.0 * gelu(f64::from(x));
            assert!(
                (f64::from(*a) - e).abs() <= 1e-6 * e.abs().max(1.0),
                "{gate:?}"
            );
        }
        // gelu(1) = 0.841192 by hand: 0.5 · (1 + tanh(0.797885 · 1.044715)).
        assert!((gate[1] - 2.0 * 0.841_192).abs() < 2e-6, "{gate:?}");
    }

    #[test]
    fn layer_norm_row_by_hand() {
        // x = [1, 2, 3, 6]: mean 3, variance (4 + 1 + 0 + 9) / 4 = 3.5.
        let mut out = [0.0f32; 4];
        layer_norm_row(
            &[1.0, 2.0, 3.0, 6.0],
            &[1.0, 2.0, 1.0, 0.5],
            Some(&[0.0, 0.0, 1.0, -1.0]),
            0.0,
            &mut out,
        );
        let sd = 3.5f32.sqrt();
        let expected = [-2.0 / sd, -2.0 / sd, 1.0, 1.5 / sd - 1.0];
        for (a, e) in out.iter().zip(expected) {
            assert!((a - e).abs() < 1e-6, "{out:?} vs {expected:?}");
        }
        // Without a bias (Cohere's LayerNorm).
        layer_norm_row(
            &[1.0, 2.0, 3.0, 6.0],
            &[1.0, 2.0, 1.0, 0.5],
            None,
            0.0,
            &mut out,
        );
        let expected = [-2.0 / sd, -2.0 / sd, 0.0, 1.5 / sd];
        for (a, e) in out.iter().zip(expected) {
            assert!((a - e).abs() < 1e-6, "{out:?} vs {expected:?}");
        }
        let mut x = [-1.0, 0.0, 2.5];
        relu(&mut x);
        assert_eq!(x, [0.0, 0.0, 2.5]);
    }

    #[test]
    fn relu_mul_by_hand() {
        let mut gate = [-1.0, 0.0, 2.0, 3.5];
        relu_mul(&mut gate, &[5.0, 2.0, 1.5, -2.0]);
        assert_eq!(gate, [0.0, 0.0, 3.0, -7.0]);
    }

    #[test]
    fn silu_mul_by_hand() {
        let mut gate = [0.0, 1.0, -2.0, 30.0, -100.0];
        silu_mul(&mut gate, &[5.0, 2.0, 1.0, 0.5, 1.0]);
        let e = std::f32::consts::E;
        let expected = [0.0, 2.0 / (1.0 + 1.0 / e), -2.0 / (1.0 + e * e), 15.0, 0.0];
        for (a, e) in gate.iter().zip(expected) {
            assert!(
                (a - e).abs() <= 1e-6 * e.abs().max(1.0),
                "{gate:?} vs {expected:?}"
            );
        }
    }

    #[test]
    fn token_nll_matches_f64_over_a_long_row() {
        // 50 001 logits (not a multiple of the lanes), like a vocabulary row.
        let row: Vec<f32> = (0..50_001)
            .map(|i| ((i * 7919) % 1000) as f32 / 97.0 - 3.0)
            .collect();
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        let exact = sum.ln() + max - row[1234] as f64;
        let nll = token_nll(&row, 1234);
        assert!((nll - exact).abs() < 1e-6 * exact, "{nll} vs {exact}");
    }

    #[test]
    fn the_accelerated_and_portable_builds_agree_to_the_bit() {
        let values: Vec<f32> = (0..1003).map(|i| (i as f32 * 0.731).sin() * 40.0).collect();
        let (mut a, mut b) = (values.clone(), values.clone());
        softmax_row(&mut a, 997, 0.125);
        softmax_row_portable(&mut b, 997, 0.125);
        assert_eq!(a, b);
        let (mut a, mut b) = (values.clone(), values.clone());
        silu_mul(&mut a, &values);
        silu_mul_portable(&mut b, &values);
        assert_eq!(a, b);
        let (mut a, mut b) = (values.clone(), values.clone());
        soft_cap(&mut a, 0.3, 7.0);
        soft_cap_portable(&mut b, 0.3, 7.0);
        assert_eq!(a, b);
        let (mut a, mut b) = (values.clone(), values.clone());
        gelu_tanh_mul(&mut a, &values);
        gelu_tanh_mul_portable(&mut b, &values);
        assert_eq!(a, b);
        // The exact GELU over ±8, across both pieces of `erf`.
        let small: Vec<f32> = values.iter().map(|v| v / 5.0).collect();
        let (mut a, mut b) = (small.clone(), small.clone());
        gelu_mul(&mut a, &values);
        gelu_mul_portable(&mut b, &values);
        assert_eq!(a, b);
        let (mut a, mut b) = (small.clone(), small.clone());
        gelu(&mut a);
        gelu_portable(&mut b);
        assert_eq!(a, b);
        let (mut a, mut b) = (vec![0.0; 1003], vec![0.0; 1003]);
        rms_norm_row(&values, &values, 1e-5, &mut a);
        rms_norm_row_portable(&values, &values, 1e-5, &mut b);
        assert_eq!(a, b);
        assert_eq!(
            token_nll(&values, 7).to_bits(),
            token_nll_portable(&values, 7).to_bits()
        );
    }
}
