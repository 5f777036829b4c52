//! The compressed product's vector kernels on x86-64: AVX-512F expands a block of sixteen
//! kept values into their lanes with one instruction (`vexpandps`); AVX2 loads a byte's kept
//! values and moves them to their lanes with a permutation from a table.

use std::arch::x86_64::*;

use super::portable::expand_row;

/// [`expand_row`] sixteen inputs at a time where they start on a whole mask byte pair: the
/// sixteen bits expand the next values into their lanes (`vexpandps`), stored whole. Returns
/// how many values it took.
///
/// # Safety
/// The CPU must have AVX-512F and `popcnt`.
#[target_feature(enable = "avx512f,popcnt")]
#[allow(unsafe_code)]
pub(super) unsafe fn avx512_expand_row(
    mask: &[u8],
    values: &[f32],
    depth: std::ops::Range<usize>,
    row: &mut [f32],
) -> usize {
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

/// [`super::portable::scalar_row_sums`] of `N` outputs at once over the whole blocks of
/// sixteen inputs: each output's sixteen mask bits of a block expand its next values into their
/// lanes (`vexpandps`), multiplied with the block's inputs of each of the `R` rows of `x` and
/// summed per lane. The `N` outputs' chains (value offsets and sums) are independent, so they
/// overlap. Returns each output's sums and how many of its values the blocks took.
///
/// # Safety
/// The CPU must have AVX-512F and `popcnt`.
#[target_feature(enable = "avx512f,popcnt")]
#[allow(unsafe_code)]
pub(super) unsafe fn avx512_sums<const R: usize, const N: usize>(
    masks: [&[u8]; N],
    values: [&[f32]; N],
    x: &[f32],
    inputs: usize,
) -> ([[f32; R]; N], [usize; N]) {
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
        let step = |k: usize| {
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
        each_output::<N>(step);
    }
    let sums = std::array::from_fn(|k| std::array::from_fn(|r| _mm512_reduce_add_ps(acc[k][r])));
    (sums, at)
}

/// `step` for each of `N` outputs in turn, spelled out for four, so that their chains live in
/// registers.
#[inline(always)]
fn each_output<const N: usize>(mut step: impl FnMut(usize)) {
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

/// Per mask byte, the lane of the byte's loaded values each of the eight lanes takes: lane `l`
/// of a set bit takes the value numbered by the set bits below it; an unset lane takes lane 7,
/// which the masked load leaves zero unless all eight bits are set.
static PERMUTE: [[i32; 8]; 256] = {
    let mut table = [[7i32; 8]; 256];
    let mut bits = 0;
    while bits < 256 {
        let (mut lane, mut taken) = (0, 0);
        while lane < 8 {
            if bits >> lane & 1 == 1 {
                table[bits][lane] = taken;
                taken += 1;
            }
            lane += 1;
        }
        bits += 1;
    }
    table
};

/// Per count `k` of set bits, the load mask of the first `k` lanes.
static FIRST_LANES: [[i32; 8]; 9] = {
    let mut table = [[0i32; 8]; 9];
    let mut k = 0;
    while k <= 8 {
        let mut lane = 0;
        while lane < k {
            table[k][lane] = -1;
            lane += 1;
        }
        k += 1;
    }
    table
};

/// [`avx512_sums`] on AVX2, over the whole blocks of eight inputs (one mask byte): the byte's
/// kept values are loaded (only those: a masked load), moved to their lanes by a permutation
/// from [`PERMUTE`], multiplied with the block's inputs of each of the `R` rows of `x` and
/// summed per lane. Returns each output's sums and how many of its values the blocks took.
///
/// # Safety
/// The CPU must have AVX2, FMA and `popcnt`.
#[target_feature(enable = "avx2,fma,popcnt")]
#[allow(unsafe_code)]
// The block index reads the N masks' bytes and the rows of x alike.
#[allow(clippy::needless_range_loop)]
pub(super) unsafe fn avx2_sums<const R: usize, const N: usize>(
    masks: [&[u8]; N],
    values: [&[f32]; N],
    x: &[f32],
    inputs: usize,
) -> ([[f32; R]; N], [usize; N]) {
    let blocks = inputs / 8;
    assert!(
        masks.iter().all(|m| m.len() >= blocks),
        "masks of whole blocks"
    );
    assert!(x.len() >= R * inputs, "R rows of x");
    let mut acc = [[_mm256_setzero_ps(); R]; N];
    let mut at = [0usize; N];
    for b in 0..blocks {
        // SAFETY: each row of x has `inputs` values and this block ends within them.
        let xs: [__m256; R] =
            std::array::from_fn(|r| unsafe { _mm256_loadu_ps(x.as_ptr().add(r * inputs + 8 * b)) });
        let step = |k: usize| {
            let bits = masks[k][b];
            let count = bits.count_ones() as usize;
            // SAFETY: the tables' rows are eight i32s; the masked load reads the first `count`
            // values from `at[k]`, one for each set bit, which the output's values hold.
            let w = unsafe {
                let load = _mm256_loadu_si256(FIRST_LANES[count].as_ptr().cast());
                let loaded = _mm256_maskload_ps(values[k].as_ptr().wrapping_add(at[k]), load);
                let lanes = _mm256_loadu_si256(PERMUTE[bits as usize].as_ptr().cast());
                _mm256_permutevar8x32_ps(loaded, lanes)
            };
            at[k] += count;
            for r in 0..R {
                acc[k][r] = _mm256_fmadd_ps(w, xs[r], acc[k][r]);
            }
        };
        each_output::<N>(step);
    }
    let sums = std::array::from_fn(|k| {
        std::array::from_fn(|r| {
            let mut lanes = [0.0f32; 8];
            // SAFETY: eight floats into eight.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc[k][r]) };
            lanes.iter().sum()
        })
    });
    (sums, at)
}
