//! MXFP4, the microscaling 4-bit floats GPT-OSS's checkpoints hold their experts in: a tensor
//! `name` is stored as `name_blocks` (`u8`, `[experts, rows, groups, 16]`: each group's 32 E2M1
//! values, two to a byte, the low nibble first) and `name_scales` (`u8`, `[experts, rows,
//! groups]`: each group's E8M0 scale, `2^(s − 127)`). Dequantised as transformers'
//! `convert_moe_packed_tensors` does it, into `[experts, groups · 32, rows]`: each expert's
//! `[rows, groups · 32]` matrix transposed, the layout of an unquantised checkpoint.

use rayon::prelude::*;

use crate::model::checkpoint::HostTensor;

/// The E2M1 value of each nibble: sign, two exponent bits, one mantissa bit.
pub(crate) const E2M1: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// The E8M0 scale `s`: `2^(s − 127)` (255, which the format leaves as NaN, reads as the
/// infinity transformers' `ldexp` gives).
pub(crate) fn e8m0(s: u8) -> f32 {
    match s {
        // 2^-127, below the normal range.
        0 => f32::from_bits(0x0040_0000),
        s => f32::from_bits(u32::from(s) << 23),
    }
}

/// Bytes of one group of 32 values.
const GROUP_BYTES: usize = 16;

/// The suffix of the packed values' tensor.
pub const BLOCKS: &str = "_blocks";

/// The suffix of the scales' tensor.
pub const SCALES: &str = "_scales";

/// The values of `blocks` (`[experts, rows, groups, 16]`) scaled by `scales` (`[experts, rows,
/// groups]`), as `[experts, groups · 32, rows]` f32; an error saying what does not fit when the
/// shapes do not match.
pub fn dequantize(
    blocks: &[u8],
    blocks_shape: &[usize],
    scales: &[u8],
    scales_shape: &[usize],
) -> Result<HostTensor, String> {
    let &[experts, rows, groups, GROUP_BYTES] = blocks_shape else {
        return Err(format!(
            "blocks of shape {blocks_shape:?}; MXFP4 expert blocks are [experts, rows, groups, {GROUP_BYTES}]"
        ));
    };
    if scales_shape != [experts, rows, groups] {
        return Err(format!(
            "scales of shape {scales_shape:?} for blocks of shape {blocks_shape:?}; they must be [{experts}, {rows}, {groups}]"
        ));
    }
    let cols = groups * 2 * GROUP_BYTES;
    if blocks.len() != experts * rows * groups * GROUP_BYTES
        || scales.len() != experts * rows * groups
    {
        return Err("blocks or scales hold fewer bytes than their shapes say".into());
    }
    let mut data = vec![0.0f32; experts * cols * rows];
    // Expert by expert, each output row (a column of the stored matrix) in parallel.
    for e in 0..experts {
        let blocks = &blocks[e * rows * groups * GROUP_BYTES..][..rows * groups * GROUP_BYTES];
        let scales = &scales[e * rows * groups..][..rows * groups];
        data[e * cols * rows..][..cols * rows]
            .par_chunks_mut(rows)
            .enumerate()
            .for_each(|(c, out)| {
                let (group, within) = (c / (2 * GROUP_BYTES), c % (2 * GROUP_BYTES));
                let shift = if within % 2 == 0 { 0 } else { 4 };
                for (r, o) in out.iter_mut().enumerate() {
                    let byte = blocks[(r * groups + group) * GROUP_BYTES + within / 2];
                    let scale = e8m0(scales[r * groups + group]);
                    *o = E2M1[usize::from((byte >> shift) & 0x0f)] * scale;
                }
            });
    }
    Ok(HostTensor {
        shape: vec![experts, cols, rows],
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One expert, two rows of one group: row 0's bytes count 0x10, 0x32, 0x54, … (nibbles
    /// 0, 1, 2, …, 15, then 0 … 15 again) at scale 2^0, row 1's every byte 0xf9 (−0.5 then
    /// −6) at scale 2^−2. Column `c` of the output is the stored matrix's column `c`.
    #[test]
    fn nibbles_low_first_times_their_groups_power_of_two_transposed() {
        let row0: Vec<u8> = (0..16u8)
            .map(|i| (((2 * i + 1) % 16) << 4) | ((2 * i) % 16))
            .collect();
        let blocks: Vec<u8> = row0.iter().copied().chain([0xf9; 16]).collect();
        let scales = [127u8, 125];
        let t = dequantize(&blocks, &[1, 2, 1, 16], &scales, &[1, 2, 1]).unwrap();
        assert_eq!(t.shape, vec![1, 32, 2]);
        for c in 0..32 {
            assert_eq!(t.data[c * 2], E2M1[c % 16], "row 0, column {c}");
            let want = if c % 2 == 0 { -0.5 * 0.25 } else { -6.0 * 0.25 };
            assert_eq!(t.data[c * 2 + 1], want, "row 1, column {c}");
        }
    }

    /// Experts and groups apart: expert 1's second group holds its own values and scale.
    #[test]
    fn each_expert_and_group_keeps_its_own_scale() {
        let (experts, rows, groups) = (2, 3, 2);
        let blocks: Vec<u8> = (0..experts * rows * groups * 16)
            .map(|i| (i * 7 % 256) as u8)
            .collect();
        let scales: Vec<u8> = (0..experts * rows * groups)
            .map(|i| 120 + (i % 9) as u8)
            .collect();
        let t = dequantize(
            &blocks,
            &[experts, rows, groups, 16],
            &scales,
            &[experts, rows, groups],
        )
        .unwrap();
        let cols = groups * 32;
        for e in 0..experts {
            for r in 0..rows {
                for c in 0..cols {
                    let (g, k) = (c / 32, c % 32);
                    let byte = blocks[((e * rows + r) * groups + g) * 16 + k / 2];
                    let nibble = if k % 2 == 0 { byte & 15 } else { byte >> 4 };
                    let scale = f64::from(scales[(e * rows + r) * groups + g]) - 127.0;
                    let want = f64::from(E2M1[usize::from(nibble)]) * scale.exp2();
                    assert_eq!(f64::from(t.data[(e * cols + c) * rows + r]), want);
                }
            }
        }
    }

    #[test]
    fn e8m0_is_a_power_of_two_from_the_smallest_to_infinity() {
        for s in 0..=254u8 {
            assert_eq!(f64::from(e8m0(s)), (f64::from(s) - 127.0).exp2(), "{s}");
        }
        assert_eq!(e8m0(255), f32::INFINITY);
    }

    #[test]
    fn shapes_that_do_not_fit_are_refused() {
        assert!(dequantize(&[0; 32], &[1, 2, 16], &[127; 2], &[1, 2]).is_err());
        let err = dequantize(&[0; 32], &[1, 2, 1, 16], &[127; 2], &[1, 1, 2]).unwrap_err();
        assert!(err.contains("[1, 2, 1]"), "{err}");
    }
}
