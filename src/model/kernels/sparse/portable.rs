//! The compressed product's loops over the set bits, on any CPU: the reference the vector
//! kernels are tested against, and their tails.

/// One output's sums for the rows of `x` (`sums.len()` rows, `stride` apart), over the set
/// bits of its `mask` (bit `i` for the input at `x[r · stride + i]`) with its kept `values`.
pub(super) fn scalar_row_sums(
    mask: &[u8],
    values: &[f32],
    x: &[f32],
    stride: usize,
    sums: &mut [f32],
) {
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

/// The inputs `depth` of one output, dense, into `row`: the set bits of its `mask` within
/// `depth` take its kept `values` in order (the first the value of the first set bit at or
/// after `depth.start`), the others zero. Returns how many values it took.
pub(super) fn expand_row(
    mask: &[u8],
    values: &[f32],
    depth: std::ops::Range<usize>,
    row: &mut [f32],
) -> usize {
    row.fill(0.0);
    let mut at = 0;
    let bytes = depth.start / 8..depth.end.div_ceil(8);
    for (byte_index, &byte) in bytes.clone().zip(&mask[bytes]) {
        let mut bits = byte;
        while bits != 0 {
            let i = byte_index * 8 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if depth.contains(&i) {
                row[i - depth.start] = values[at];
                at += 1;
            }
        }
    }
    at
}
