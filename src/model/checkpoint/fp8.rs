//! Block-scaled FP8, the form DeepSeek-V3 and R1 are released in (and other
//! "fine-grained FP8" checkpoints: `quantization_config.quant_method: fp8`,
//! `weight_block_size: [128, 128]`): a linear's `weight` is stored as E4M3 floats (`F8_E4M3`,
//! `[out, in]`) beside `weight_scale_inv` (`[⌈out/128⌉, ⌈in/128⌉]`, f32, bf16 or E8M0), the factor
//! of each 128 × 128 block. Dequantised as transformers' `_dequantize_fp8_weight` does it in the
//! model's dtype: the value and its block's scale each in that dtype, their product rounded to it.

use rayon::prelude::*;

use crate::model::checkpoint::HostTensor;

/// The suffix of a weight's block scales.
pub const SCALES: &str = "_scale_inv";

/// The side of a scale's square block (`weight_block_size`).
pub const BLOCK: usize = 128;

/// The E4M3 value of `b` (OCP's `E4M3FN`: sign, four exponent bits of bias 7, three mantissa
/// bits; no infinities, `S.1111.111` is NaN).
pub fn e4m3(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exponent, mantissa) = (i32::from((b >> 3) & 0x0f), f32::from(b & 0x07));
    match (exponent, b & 0x07) {
        (15, 7) => f32::NAN,
        (0, _) => sign * mantissa / 8.0 * 2f32.powi(-6),
        _ => sign * (1.0 + mantissa / 8.0) * 2f32.powi(exponent - 7),
    }
}

/// The matrix of E4M3 `values` (`[rows, cols]`) times the scale of its 128 × 128 block
/// (`scales`, `[⌈rows/128⌉, ⌈cols/128⌉]` row-major), the scale and the product rounded by `round`
/// (to the model's dtype; the identity for f32), as value and scale each in that dtype give it; the values in `[cols, rows]`
/// order when `transposed` (the shape stays the stored one, as
/// [`crate::model::checkpoint::WeightSource::tensor_transposed`] gives it). An error saying what does not fit when the shapes do not match.
pub fn dequantize(
    values: &[u8],
    shape: &[usize],
    scales: &[f32],
    scales_shape: &[usize],
    transposed: bool,
    round: fn(f32) -> f32,
) -> Result<HostTensor, String> {
    let &[rows, cols] = shape else {
        return Err(format!(
            "shape {shape:?}; only matrices are read block-scaled"
        ));
    };
    let blocks = [rows.div_ceil(BLOCK), cols.div_ceil(BLOCK)];
    if scales_shape != blocks {
        return Err(format!(
            "scales of shape {scales_shape:?} for a [{rows}, {cols}] weight; with \
             {BLOCK} × {BLOCK} blocks (the only weight_block_size read) they are {blocks:?}"
        ));
    }
    if values.len() != rows * cols || scales.len() != blocks[0] * blocks[1] {
        return Err("values or scales hold fewer bytes than their shapes say".into());
    }
    let scales: Vec<f32> = scales.iter().map(|&s| round(s)).collect();
    // Every E4M3 value is exact in f16 and bf16 (three mantissa bits, exponents 2^-9 to 2^8):
    // only the scale and the product round.
    let value = |r: usize, c: usize| {
        let scale = scales[r / BLOCK * blocks[1] + c / BLOCK];
        round(e4m3(values[r * cols + c]) * scale)
    };
    let data = match transposed {
        false => (0..rows)
            .into_par_iter()
            .flat_map_iter(|r| (0..cols).map(move |c| value(r, c)))
            .collect(),
        true => (0..cols)
            .into_par_iter()
            .flat_map_iter(|c| (0..rows).map(move |r| value(r, c)))
            .collect(),
    };
    Ok(HostTensor {
        shape: shape.to_vec(),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_reads_normals_subnormals_signs_and_nan() {
        // 0.0111.000 = 2^0; 0.1000.000 = 2; 1.1000.000 = −2; 0.1111.110 = 1.75 · 2^8, the
        // largest; 0.0000.001 = 2^-9, the smallest subnormal; 0.0001.100 = 1.5 · 2^-6.
        for (b, v) in [
            (0x38, 1.0),
            (0x40, 2.0),
            (0xc0, -2.0),
            (0x7e, 448.0),
            (0x01, 2f32.powi(-9)),
            (0x0c, 1.5 * 2f32.powi(-6)),
            (0x00, 0.0),
        ] {
            assert_eq!(e4m3(b), v, "{b:#04x}");
        }
        assert!(e4m3(0x7f).is_nan() && e4m3(0xff).is_nan());
        // Each value is exact in f16 and bf16, so dequantising need not round it.
        for b in (0..=255u8).filter(|b| b & 0x7f != 0x7f) {
            let v = e4m3(b);
            assert_eq!(half::f16::from_f32(v).to_f32(), v, "{b:#04x}");
            assert_eq!(half::bf16::from_f32(v).to_f32(), v, "{b:#04x}");
        }
    }

    #[test]
    fn each_value_takes_its_blocks_scale() {
        // A [130, 129] weight of ones (0x38) in 2 × 2 blocks scaled 1, 2, 3, 4: the last row
        // and column fall in the second blocks.
        let (rows, cols) = (130, 129);
        let values = vec![0x38u8; rows * cols];
        let scales = [1.0, 2.0, 3.0, 4.0];
        let t = dequantize(&values, &[rows, cols], &scales, &[2, 2], false, |v| v).unwrap();
        let at = |r: usize, c: usize| t.data[r * cols + c];
        assert_eq!([at(0, 0), at(0, 128), at(128, 0), at(129, 128)], scales);
        let back = dequantize(&values, &[rows, cols], &scales, &[2, 2], true, |v| v).unwrap();
        assert_eq!(back.shape, vec![rows, cols]);
        assert_eq!(back.data[128 * rows + 129], 4.0);
        // A scale rounded to bf16 first, as transformers multiplies in the model's dtype.
        let bf16 = |v: f32| half::bf16::from_f32(v).to_f32();
        let odd = [1.0 + 2f32.powi(-12); 4];
        let t = dequantize(&values, &[rows, cols], &odd, &[2, 2], false, bf16).unwrap();
        assert_eq!(t.data[0], 1.0);
        let err = dequantize(&values, &[rows, cols], &scales, &[1, 2], false, |v| v).unwrap_err();
        assert!(err.contains("[2, 2]"), "{err}");
    }
}
