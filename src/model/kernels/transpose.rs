//! Transposing row-major matrices on the host, in parallel bands, converting values on the way.

use rayon::prelude::*;

/// Transposes a row-major `[rows, cols]` matrix into `[cols, rows]`.
pub fn transpose<T: Copy + Default + Send + Sync>(data: &[T], rows: usize, cols: usize) -> Vec<T> {
    transpose_map(data, rows, cols, |&v| v)
}

/// Transposes a row-major `[rows, cols]` matrix into `out`, `[cols, rows]`, as [`transpose`]
/// does, without allocating.
///
/// # Panics
/// When `out` and `data` differ in length (a caller's bug: both are one matrix's values).
pub fn transpose_into<T: Copy + Default + Send + Sync>(
    out: &mut [T],
    data: &[T],
    rows: usize,
    cols: usize,
) {
    assert_eq!(
        out.len(),
        data.len(),
        "a transposed matrix has its source's length"
    );
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and `transpose_map_into` only writes
    // initialised values into the slots, so `out` stays initialised.
    #[allow(unsafe_code)]
    let slots = unsafe { &mut *(std::ptr::from_mut(out) as *mut [std::mem::MaybeUninit<T>]) };
    transpose_map_into(slots, data, rows, cols, |&v| v);
}

/// `f` of every value of a row-major `[rows, cols]` matrix, transposed into `[cols, rows]`, in
/// a new buffer that is never zeroed first and is backed by huge pages where the kernel allows
/// ([`transpose_map_into`]).
#[allow(unsafe_code)]
pub(crate) fn transpose_map<S: Sync, T: Copy + Default + Send>(
    data: &[S],
    rows: usize,
    cols: usize,
    f: impl Fn(&S) -> T + Sync,
) -> Vec<T> {
    let len = rows * cols;
    let mut out = Vec::with_capacity(len);
    if len == 0 {
        return out;
    }
    let slots = &mut out.spare_capacity_mut()[..len];
    crate::sys::allocator::prefer_huge_pages(slots);
    transpose_map_into(slots, data, rows, cols, f);
    // SAFETY: `transpose_map_into` initialises every one of the first `len` slots.
    unsafe { out.set_len(len) };
    out
}

/// Writes `f` of every value of a row-major `[rows, cols]` matrix, transposed into
/// `[cols, rows]`, into every one of the `rows × cols` slots: bands of output rows in parallel,
/// each filled a block of input rows at a time (the block's runs of the band's columns read in
/// order and converted into a local buffer laid out by output row, then copied as runs of
/// `BLOCK` values of each output row).
pub(crate) fn transpose_map_into<S: Sync, T: Copy + Default + Send>(
    slots: &mut [std::mem::MaybeUninit<T>],
    data: &[S],
    rows: usize,
    cols: usize,
    f: impl Fn(&S) -> T + Sync,
) {
    const BLOCK: usize = 16;
    if slots.is_empty() {
        return;
    }
    // Long runs of each input row, but at least four bands per thread.
    let band_width = (cols / (4 * rayon::current_num_threads())).clamp(BLOCK, 256);
    // The bands split the slots into runs of `width × rows` (the last possibly shorter, still a
    // multiple of `rows`); the blocks of band `b` cover every `r < rows`, and each writes slot
    // `j·rows + r` for every `j < width` and each of its rows `r`: every slot is written.
    slots
        .par_chunks_mut(band_width * rows)
        .enumerate()
        .for_each(|(b, band)| {
            let c0 = b * band_width;
            let width = band.len() / rows;
            // `block[j·BLOCK + i]`: column `c0 + j` of input row `r0 + i`.
            let mut block = vec![T::default(); BLOCK * width];
            for r0 in (0..rows).step_by(BLOCK) {
                let height = BLOCK.min(rows - r0);
                prefetch_runs(
                    data,
                    cols,
                    r0 + BLOCK..(r0 + 2 * BLOCK).min(rows),
                    c0,
                    width,
                );
                for i in 0..height {
                    let start = (r0 + i) * cols + c0;
                    for (j, v) in data[start..start + width].iter().enumerate() {
                        block[j * BLOCK + i] = f(v);
                    }
                }
                for (j, run) in block.chunks_exact(BLOCK).enumerate() {
                    let start = j * rows + r0;
                    for (slot, &v) in band[start..start + height].iter_mut().zip(run) {
                        slot.write(v);
                    }
                }
            }
        });
}

/// Asks the CPU to bring the runs `data[r · cols + c0 .. + width]` of `rows` into cache: the
/// next block's input of [`transpose_map`], whose short runs of rows far apart the hardware
/// prefetchers do not follow (the loads of the checkpoint were most of its time).
fn prefetch_runs<S>(
    data: &[S],
    cols: usize,
    rows: std::ops::Range<usize>,
    c0: usize,
    width: usize,
) {
    #[cfg(target_arch = "x86_64")]
    for r in rows {
        let run = &data[r * cols + c0..r * cols + c0 + width];
        let bytes = std::mem::size_of_val(run);
        let start = run.as_ptr().cast::<i8>();
        for offset in (0..bytes).step_by(64) {
            // SAFETY: a prefetch is a hint that never faults, and `start + offset` lies within
            // `run`. SSE is part of every x86_64 CPU.
            #[allow(unsafe_code)]
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(start.add(offset));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, cols, rows, c0, width);
}
