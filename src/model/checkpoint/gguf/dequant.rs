//! ggml dequantisation to `f32`: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K, each
//! kernel bit-exact with its counterpart in `ggml-quants.c`; large tensors are split by whole
//! blocks over several threads.

use half::f16;

use super::{GgmlType, GgufError};

/// Below this many elements a tensor is dequantised on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// Dequantises `n` elements of type `ty` from `data`, on several threads for large tensors.
pub(super) fn dequantize(
    name: &str,
    ty: GgmlType,
    data: &[u8],
    n: usize,
) -> Result<Vec<f32>, GgufError> {
    if !ty.is_dequantizable() {
        return Err(GgufError::UnsupportedType {
            ggml_type: ty,
            tensor: name.to_owned(),
        });
    }
    let bad = |reason: String| GgufError::BadTensorData {
        tensor: name.to_owned(),
        reason,
    };
    let (block, type_size) = ty.layout();
    if !n.is_multiple_of(block) {
        return Err(bad(format!(
            "{n} elements is not a multiple of the {ty} block size {block}"
        )));
    }
    let n_blocks = n / block;
    let expected = n_blocks
        .checked_mul(type_size)
        .ok_or_else(|| bad(format!("{n} elements of {ty} overflow the address space")))?;
    if data.len() != expected {
        return Err(bad(format!(
            "expected {expected} bytes of {ty} data for {n} elements, found {}",
            data.len()
        )));
    }
    let mut out = vec![0f32; n];
    let threads = std::thread::available_parallelism()
        .map_or(2, std::num::NonZeroUsize::get)
        .max(2);
    if n < PARALLEL_MIN_ELEMENTS {
        dequantize_blocks(ty, data, &mut out);
    } else {
        // Whole blocks per thread, each writing its own disjoint slice of the output.
        let per_thread = n_blocks.div_ceil(threads);
        std::thread::scope(|s| {
            for (src, dst) in data
                .chunks(per_thread * type_size)
                .zip(out.chunks_mut(per_thread * block))
            {
                s.spawn(move || dequantize_blocks(ty, src, dst));
            }
        });
    }
    Ok(out)
}

/// Dequantises the whole blocks of `src` into `dst`; callers have matched the lengths and
/// checked that `ty` is dequantisable.
fn dequantize_blocks(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    match ty {
        GgmlType::F32 => each_block::<4, 1>(src, dst, |b, y| y[0] = f32::from_le_bytes(*b)),
        GgmlType::F16 => {
            each_block::<2, 1>(src, dst, |b, y| y[0] = f16::from_le_bytes(*b).to_f32())
        }
        GgmlType::BF16 => each_block::<2, 1>(src, dst, |b, y| y[0] = bf16_to_f32(*b)),
        GgmlType::Q8_0 => each_block(src, dst, dequant_q8_0),
        GgmlType::Q4_0 => each_block(src, dst, dequant_q4_0),
        GgmlType::Q4_1 => each_block(src, dst, dequant_q4_1),
        GgmlType::Q5_0 => each_block(src, dst, dequant_q5_0),
        GgmlType::Q5_1 => each_block(src, dst, dequant_q5_1),
        GgmlType::Q4_K => each_block(src, dst, dequant_q4_k),
        GgmlType::Q5_K => each_block(src, dst, dequant_q5_k),
        GgmlType::Q6_K => each_block(src, dst, dequant_q6_k),
        GgmlType::MXFP4 => each_block(src, dst, dequant_mxfp4),
        // Not dequantisable: rejected by `dequantize` before any thread starts.
        _ => {}
    }
}

/// Applies a per-block function to every whole block.
fn each_block<const TS: usize, const BS: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: impl Fn(&[u8; TS], &mut [f32; BS]),
) {
    let (src, _) = src.as_chunks::<TS>();
    let (dst, _) = dst.as_chunks_mut::<BS>();
    for (block, out) in src.iter().zip(dst) {
        f(block, out);
    }
}

/// ggml's `GGML_BF16_TO_FP32`: the bf16 bits are the high half of the f32.
fn bf16_to_f32(bytes: [u8; 2]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes(bytes)) << 16)
}

fn f16_to_f32(lo: u8, hi: u8) -> f32 {
    f16::from_le_bytes([lo, hi]).to_f32()
}

/// `dequantize_row_q8_0`: `{ f16 d; i8 qs[32] }`, `y = qs * d`.
fn dequant_q8_0(b: &[u8; 34], y: &mut [f32; 32]) {
    let d = f16_to_f32(b[0], b[1]);
    for (y, &q) in y.iter_mut().zip(&b[2..]) {
        *y = f32::from(q as i8) * d;
    }
}

/// `dequantize_row_q4_0`: `{ f16 d; u8 qs[16] }`; low nibbles are elements 0..16, high nibbles
/// 16..32, each `(q - 8) * d`.
fn dequant_q4_0(b: &[u8; 18], y: &mut [f32; 32]) {
    let d = f16_to_f32(b[0], b[1]);
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, lo), hi) in b[2..].iter().zip(lo).zip(hi) {
        *lo = f32::from(i16::from(q & 0x0F) - 8) * d;
        *hi = f32::from(i16::from(q >> 4) - 8) * d;
    }
}

/// `dequantize_row_mxfp4`: `{ u8 e; u8 qs[16] }`, an E8M0 scale and E2M1 nibbles as Q4_0
/// lays them out (low nibbles are elements 0..16, high nibbles 16..32), each `e2m1(q) · 2^(e −
/// 127)` (GPT-OSS's experts, repacked from the checkpoint's MXFP4 by llama.cpp's converter).
fn dequant_mxfp4(b: &[u8; 17], y: &mut [f32; 32]) {
    let d = crate::model::checkpoint::mxfp4::e8m0(b[0]);
    let e2m1 = crate::model::checkpoint::mxfp4::E2M1;
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, lo), hi) in b[1..].iter().zip(lo).zip(hi) {
        *lo = e2m1[usize::from(q & 0x0F)] * d;
        *hi = e2m1[usize::from(q >> 4)] * d;
    }
}

/// `dequantize_row_q4_1`: `{ f16 d; f16 m; u8 qs[16] }`, nibbles as Q4_0, each `q * d + m`.
fn dequant_q4_1(b: &[u8; 20], y: &mut [f32; 32]) {
    let d = f16_to_f32(b[0], b[1]);
    let m = f16_to_f32(b[2], b[3]);
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, lo), hi) in b[4..].iter().zip(lo).zip(hi) {
        *lo = f32::from(q & 0x0F) * d + m;
        *hi = f32::from(q >> 4) * d + m;
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and minimum of sub-block `j` (0..8) from the
/// The 5-bit values of a Q5_0/Q5_1 block: nibbles as Q4_0 (low nibbles elements 0..16, high
/// 16..32), the fifth bit of element `j` bit `j` of the little-endian `qh`.
fn q5_values(qh: [u8; 4], qs: &[u8]) -> [u8; 32] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; 32];
    for (j, &byte) in qs.iter().enumerate().take(16) {
        let high = |bit: usize| (((qh >> bit) & 1) as u8) << 4;
        q[j] = (byte & 0x0F) | high(j);
        q[j + 16] = (byte >> 4) | high(j + 16);
    }
    q
}

/// `dequantize_row_q5_0`: `{ f16 d; u8 qh[4]; u8 qs[16] }`, each `(q - 16) * d`.
fn dequant_q5_0(b: &[u8; 22], y: &mut [f32; 32]) {
    let d = f16_to_f32(b[0], b[1]);
    let q = q5_values([b[2], b[3], b[4], b[5]], &b[6..]);
    for (y, &q) in y.iter_mut().zip(&q) {
        *y = f32::from(i16::from(q) - 16) * d;
    }
}

/// `dequantize_row_q5_1`: `{ f16 d; f16 m; u8 qh[4]; u8 qs[16] }`, each `q * d + m`.
fn dequant_q5_1(b: &[u8; 24], y: &mut [f32; 32]) {
    let d = f16_to_f32(b[0], b[1]);
    let m = f16_to_f32(b[2], b[3]);
    let q = q5_values([b[4], b[5], b[6], b[7]], &b[8..]);
    for (y, &q) in y.iter_mut().zip(&q) {
        *y = f32::from(q) * d + m;
    }
}

/// 12 packed bytes of a Q4_K/Q5_K super-block.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// `dequantize_row_q4_K`: `{ f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }`. Each 32 bytes of
/// `qs` hold two 32-element sub-blocks (low nibbles, then high), each `d*sc * q - dmin*m`.
fn dequant_q4_k(b: &[u8; 144], y: &mut [f32; 256]) {
    let d = f16_to_f32(b[0], b[1]);
    let min = f16_to_f32(b[2], b[3]);
    let scales = &b[4..16];
    for (pair, (qs, y)) in b[16..]
        .chunks_exact(32)
        .zip(y.chunks_exact_mut(64))
        .enumerate()
    {
        let (sc1, m1) = scale_min_k4(2 * pair, scales);
        let (sc2, m2) = scale_min_k4(2 * pair + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        let (lo, hi) = y.split_at_mut(32);
        for ((&q, lo), hi) in qs.iter().zip(lo).zip(hi) {
            *lo = d1 * f32::from(q & 0x0F) - m1;
            *hi = d2 * f32::from(q >> 4) - m2;
        }
    }
}

/// `dequantize_row_q5_K`: `{ f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }`. As
/// Q4_K, with bit `2*pair` (low nibbles) or `2*pair + 1` (high) of `qh[l]` adding 16.
fn dequant_q5_k(b: &[u8; 176], y: &mut [f32; 256]) {
    let d = f16_to_f32(b[0], b[1]);
    let min = f16_to_f32(b[2], b[3]);
    let scales = &b[4..16];
    let qh = &b[16..48];
    for (pair, (qs, y)) in b[48..]
        .chunks_exact(32)
        .zip(y.chunks_exact_mut(64))
        .enumerate()
    {
        let (sc1, m1) = scale_min_k4(2 * pair, scales);
        let (sc2, m2) = scale_min_k4(2 * pair + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        let (u1, u2) = (1u8 << (2 * pair), 2u8 << (2 * pair));
        let (lo, hi) = y.split_at_mut(32);
        for (((&q, &h), lo), hi) in qs.iter().zip(qh).zip(lo).zip(hi) {
            let high1 = if h & u1 != 0 { 16 } else { 0 };
            let high2 = if h & u2 != 0 { 16 } else { 0 };
            *lo = d1 * f32::from((q & 0x0F) + high1) - m1;
            *hi = d2 * f32::from((q >> 4) + high2) - m2;
        }
    }
}

/// `dequantize_row_q6_K`: `{ u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }`. Each 128-element
/// half takes 64 bytes of `ql` (low 4 bits), 32 of `qh` (2 high bits each) and 8 scales; element
/// `i` is `d * scales[i / 16] * (q - 32)`.
fn dequant_q6_k(b: &[u8; 210], y: &mut [f32; 256]) {
    let d = f16_to_f32(b[208], b[209]);
    let (ql, rest) = b.split_at(128);
    let (qh, rest) = rest.split_at(64);
    let scales = &rest[..16];
    for (((ql, qh), sc), y) in ql
        .chunks_exact(64)
        .zip(qh.chunks_exact(32))
        .zip(scales.chunks_exact(8))
        .zip(y.chunks_exact_mut(128))
    {
        for l in 0..32 {
            let is = l / 16;
            let q1 = i16::from((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i16::from((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i16::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i16::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            let s = |k: usize| d * f32::from(sc[is + k] as i8);
            y[l] = s(0) * f32::from(q1);
            y[l + 32] = s(2) * f32::from(q2);
            y[l + 64] = s(4) * f32::from(q3);
            y[l + 96] = s(6) * f32::from(q4);
        }
    }
}

#[cfg(test)]
// Index loops mirror the ggml formulas the expectations come from.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    fn h(bits: u16) -> [u8; 2] {
        bits.to_le_bytes()
    }

    fn deq(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
        dequantize("t", ty, bytes, n).expect("dequantize")
    }

    fn assert_truncated_fails(ty: GgmlType, block: &[u8]) {
        let n = ty.block_size();
        let err = dequantize("t", ty, &block[..block.len() - 1], n).unwrap_err();
        assert!(
            matches!(&err, GgufError::BadTensorData { tensor, .. } if tensor == "t"),
            "{err}"
        );
        assert!(err.to_string().contains("expected"), "{err}");
        // One block too few for twice the elements.
        assert!(dequantize("t", ty, block, 2 * n).is_err());
        if n > 1 {
            // Element counts that are not whole blocks.
            assert!(dequantize("t", ty, block, n - 1).is_err());
        }
    }

    // ---- dequantisation: hand-built blocks, expectations from the ggml formulas ----

    #[test]
    fn f32_is_read_little_endian() {
        let vals = [1.5f32, -2.25, 0.0, 3.0e-5, f32::MAX];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(deq(GgmlType::F32, &bytes, 5), vals);
        assert_truncated_fails(GgmlType::F32, &bytes[..4]);
    }

    #[test]
    fn f16_converts_normals_subnormals_and_max() {
        let bytes = [h(0x3C00), h(0xC000), h(0x3555), h(0x0001), h(0x7BFF)].concat();
        let expected = [1.0, -2.0, 0.333_251_95, 5.960_464_5e-8, 65504.0];
        assert_eq!(deq(GgmlType::F16, &bytes, 5), expected);
        assert_truncated_fails(GgmlType::F16, &bytes[..2]);
    }

    #[test]
    fn bf16_is_the_high_half_of_f32() {
        let bytes = [h(0x3F80), h(0xC0A0), h(0x3EAB), h(0x0001)].concat();
        // 0x3EAB0000: 2^-2 * (1 + 43/128).
        let expected = [
            1.0,
            -5.0,
            0.25 * (1.0 + 43.0 / 128.0),
            f32::from_bits(0x0001_0000),
        ];
        assert_eq!(deq(GgmlType::BF16, &bytes, 4), expected);
        assert_truncated_fails(GgmlType::BF16, &bytes[..2]);
    }

    #[test]
    fn q8_0_scales_signed_bytes() {
        // Block 0: d = 0.25; block 1: d = -1.5.
        let q0: Vec<i8> = (0..32)
            .map(|j| [-128, -1, 0, 1, 127, 5, -77, 33][j % 8])
            .collect();
        let q1: Vec<i8> = (0..32).map(|j| (j as i8) * 3 - 40).collect();
        let mut bytes = h(0x3400).to_vec();
        bytes.extend(q0.iter().map(|&q| q as u8));
        bytes.extend(h(0xBE00));
        bytes.extend(q1.iter().map(|&q| q as u8));
        let y = deq(GgmlType::Q8_0, &bytes, 64);
        for j in 0..32 {
            assert_eq!(y[j], f32::from(q0[j]) * 0.25);
            assert_eq!(y[32 + j], f32::from(q1[j]) * -1.5);
        }
        assert_eq!((y[0], y[4], y[32], y[63]), (-32.0, 31.75, 60.0, -79.5));
        assert_truncated_fails(GgmlType::Q8_0, &bytes[..34]);
    }

    #[test]
    fn mxfp4_low_nibbles_first_then_high_times_the_power_of_two() {
        // e = 125: 2^-2; byte j holds lo = j, hi = 15 - j.
        let mut bytes = vec![125u8];
        bytes.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = deq(GgmlType::MXFP4, &bytes, 32);
        let e2m1 = crate::model::checkpoint::mxfp4::E2M1;
        for j in 0..16 {
            assert_eq!(y[j], e2m1[j] / 4.0);
            assert_eq!(y[16 + j], e2m1[15 - j] / 4.0);
        }
        assert_eq!((y[7], y[16], y[31]), (1.5, -1.5, 0.0));
        assert_truncated_fails(GgmlType::MXFP4, &bytes);
    }

    #[test]
    fn q4_0_low_nibbles_first_then_high() {
        // d = 0.5; byte j holds lo = j, hi = 15 - j.
        let mut bytes = h(0x3800).to_vec();
        bytes.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = deq(GgmlType::Q4_0, &bytes, 32);
        for j in 0..16 {
            assert_eq!(y[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(y[16 + j], ((15 - j) as f32 - 8.0) * 0.5);
        }
        assert_eq!((y[0], y[15], y[16], y[31]), (-4.0, 3.5, 3.5, -4.0));
        assert_truncated_fails(GgmlType::Q4_0, &bytes);
    }

    #[test]
    fn q4_1_adds_the_minimum() {
        // d = 0.25, m = -1.5; byte j holds lo = 3j mod 16, hi = 7j + 1 mod 16.
        let lo = |j: usize| (3 * j % 16) as u8;
        let hi = |j: usize| ((7 * j + 1) % 16) as u8;
        let mut bytes = [h(0x3400), h(0xBE00)].concat();
        bytes.extend((0..16).map(|j| lo(j) | (hi(j) << 4)));
        let y = deq(GgmlType::Q4_1, &bytes, 32);
        for j in 0..16 {
            assert_eq!(y[j], f32::from(lo(j)) * 0.25 - 1.5);
            assert_eq!(y[16 + j], f32::from(hi(j)) * 0.25 - 1.5);
        }
        assert_eq!((y[0], y[16], y[5], y[21]), (-1.5, -1.25, 2.25, -0.5));
        assert_truncated_fails(GgmlType::Q4_1, &bytes);
    }

    #[test]
    fn q5_0_and_q5_1_take_the_fifth_bit_from_qh() {
        // d = 0.5 (m = -1.5 for Q5_1); qh = 0x8000_0001: bits 0 and 31 set, so element 0
        // (low nibble of byte 0) and element 31 (high nibble of byte 15) gain 16.
        let qh = 0x8000_0001u32.to_le_bytes();
        let qs: Vec<u8> = (0..16u8).map(|j| j | ((15 - j) << 4)).collect();
        let mut q5_0 = h(0x3800).to_vec();
        q5_0.extend(qh);
        q5_0.extend(&qs);
        let y = deq(GgmlType::Q5_0, &q5_0, 32);
        // Element 0: (0 + 16 − 16) · 0.5; element 1: (1 − 16) · 0.5; element 16: (15 − 16) · 0.5;
        // element 31: (0 + 16 − 16) · 0.5.
        assert_eq!((y[0], y[1], y[16], y[31]), (0.0, -7.5, -0.5, 0.0));
        assert_truncated_fails(GgmlType::Q5_0, &q5_0);
        let mut q5_1 = [h(0x3800), h(0xBE00)].concat();
        q5_1.extend(qh);
        q5_1.extend(&qs);
        let y = deq(GgmlType::Q5_1, &q5_1, 32);
        assert_eq!((y[0], y[1], y[16], y[31]), (6.5, -1.0, 6.0, 6.5));
        assert_truncated_fails(GgmlType::Q5_1, &q5_1);
    }

    /// Sub-block scales and minimums (6 bits each) exercising the upper-2-bit packing.
    const K_SCALES: [u8; 8] = [1, 63, 7, 32, 45, 2, 60, 17];
    const K_MINS: [u8; 8] = [0, 5, 63, 12, 33, 48, 1, 9];

    /// Packs scales/mins into the 12 bytes `get_scale_min_k4` reads (its inverse).
    fn pack_k4_scales(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
        let mut q = [0u8; 12];
        for j in 0..4 {
            q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            q[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
            q[j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
        }
        q
    }

    #[test]
    fn q4_k_unpacks_six_bit_scales_and_nibbles() {
        // d = 0.5, dmin = 0.125; element e of sub-block s = e / 32 has q = (5e + 3) mod 16.
        let q = |e: usize| ((5 * e + 3) % 16) as u8;
        let mut qs = [0u8; 128];
        for e in 0..256 {
            let (s, l) = (e / 32, e % 32);
            let byte = &mut qs[32 * (s / 2) + l];
            *byte |= if s % 2 == 0 { q(e) } else { q(e) << 4 };
        }
        let bytes = [
            &h(0x3800)[..],
            &h(0x3000),
            &pack_k4_scales(K_SCALES, K_MINS),
            &qs,
        ]
        .concat();
        let y = deq(GgmlType::Q4_K, &bytes, 256);
        for e in 0..256 {
            let s = e / 32;
            let expected =
                0.5 * f32::from(K_SCALES[s]) * f32::from(q(e)) - 0.125 * f32::from(K_MINS[s]);
            assert_eq!(y[e], expected, "element {e}");
        }
        // By hand: e = 0: 0.5*1*3; e = 32: 0.5*63*3 - 0.125*5; e = 255: 0.5*17*14 - 0.125*9.
        assert_eq!((y[0], y[32], y[255]), (1.5, 93.875, 117.875));
        assert_truncated_fails(GgmlType::Q4_K, &bytes);
    }

    #[test]
    fn q5_k_adds_the_high_bit_per_sub_block() {
        // d = 0.5, dmin = 0.125; q = (11e + 7) mod 32, the fifth bit in qh[l] bit s.
        let q = |e: usize| ((11 * e + 7) % 32) as u8;
        let mut qs = [0u8; 128];
        let mut qh = [0u8; 32];
        for e in 0..256 {
            let (s, l) = (e / 32, e % 32);
            let low = q(e) & 0x0F;
            qs[32 * (s / 2) + l] |= if s % 2 == 0 { low } else { low << 4 };
            qh[l] |= (q(e) >> 4) << s;
        }
        let bytes = [
            &h(0x3800)[..],
            &h(0x3000),
            &pack_k4_scales(K_SCALES, K_MINS),
            &qh,
            &qs,
        ]
        .concat();
        let y = deq(GgmlType::Q5_K, &bytes, 256);
        for e in 0..256 {
            let s = e / 32;
            let expected =
                0.5 * f32::from(K_SCALES[s]) * f32::from(q(e)) - 0.125 * f32::from(K_MINS[s]);
            assert_eq!(y[e], expected, "element {e}");
        }
        // By hand: e = 1: q = 18, 0.5*1*18; e = 200 (s = 6): q = 2207 mod 32 = 31, 0.5*60*31 - 0.125.
        assert_eq!((y[1], y[200]), (9.0, 929.875));
        assert_truncated_fails(GgmlType::Q5_K, &bytes);
    }

    #[test]
    fn q6_k_combines_low_and_high_bits_with_signed_scales() {
        // d = 0.5; q = (13e + 5) mod 64, value q - 32, scale scales[e / 16].
        let scales: [i8; 16] = [
            1, -2, 3, 127, -128, 5, -7, 11, 13, -17, 19, 23, -29, 31, 37, -41,
        ];
        let q = |e: usize| ((13 * e + 5) % 64) as u8;
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        for e in 0..256 {
            let (half, r) = (e / 128, e % 128);
            let (group, l) = (r / 32, r % 32);
            let low = q(e) & 0x0F;
            let byte = &mut ql[64 * half + 32 * (group % 2) + l];
            *byte |= if group < 2 { low } else { low << 4 };
            qh[32 * half + l] |= (q(e) >> 4) << (2 * group);
        }
        let sc: Vec<u8> = scales.iter().map(|&s| s as u8).collect();
        let bytes = [&ql[..], &qh, &sc, &h(0x3800)].concat();
        let y = deq(GgmlType::Q6_K, &bytes, 256);
        for e in 0..256 {
            let expected = 0.5 * f32::from(scales[e / 16]) * (f32::from(q(e)) - 32.0);
            assert_eq!(y[e], expected, "element {e}");
        }
        // By hand: e = 0: 0.5*1*(5-32); e = 64 (scale -128): q = 837 mod 64 = 5, 0.5*-128*-27.
        assert_eq!((y[0], y[64]), (-13.5, 1728.0));
        assert_truncated_fails(GgmlType::Q6_K, &bytes);
    }

    #[test]
    fn unsupported_types_are_named() {
        let err = dequantize("x", GgmlType::Q2_K, &[0; 84], 256).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported ggml type `Q2_K` for tensor `x`"
        );
        assert!(!GgmlType::IQ4_XS.is_dequantizable());
        for ty in [
            GgmlType::F32,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::BF16,
        ] {
            assert!(ty.is_dequantizable());
        }
    }

    #[test]
    fn parallel_dequantisation_matches_one_thread() {
        let n_blocks = 1100;
        let mut state = 0x9E37_79B9u32;
        let mut bytes = Vec::with_capacity(n_blocks * 210);
        for _ in 0..n_blocks {
            for _ in 0..208 {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                bytes.push(state as u8);
            }
            bytes.extend(h(0x2C00 + (state % 512) as u16));
        }
        let n = n_blocks * 256;
        assert!(n >= PARALLEL_MIN_ELEMENTS);
        let parallel = deq(GgmlType::Q6_K, &bytes, n);
        let mut serial = vec![0f32; n];
        dequantize_blocks(GgmlType::Q6_K, &bytes, &mut serial);
        assert_eq!(parallel, serial);
    }
}
