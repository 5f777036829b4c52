//! Calibration windows: `nsamples` windows of `seqlen` tokens at seeded random offsets of one
//! tokenised text, drawn exactly as the Wanda reference's `get_wikitext2` does
//! (`random.seed(seed)`, then `i = random.randint(0, n - seqlen - 1)` per sample).

use serde::Serialize;

use super::pyrandom::PyRandom;

/// Errors while drawing calibration windows.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CalibrationError {
    /// The text is too short for one window.
    #[error("the calibration text has {tokens} tokens; a window of {seqlen} needs at least {needed}; lower `calibration.seqlen`")]
    TextTooShort {
        /// Tokens in the text.
        tokens: usize,
        /// Window length.
        seqlen: usize,
        /// Tokens needed.
        needed: usize,
    },
    /// Zero samples or zero-length windows.
    #[error("`calibration.{key}` must be at least 1")]
    Empty {
        /// `nsamples` or `seqlen`.
        key: &'static str,
    },
}

/// The drawn windows and how they were drawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationSet {
    /// One token window per sample, each `seqlen` long.
    #[serde(skip)]
    pub windows: Vec<Vec<u32>>,
    /// Start offset of each window in the tokenised text.
    pub offsets: Vec<usize>,
    /// Window length.
    pub seqlen: usize,
    /// Seed of the draw.
    pub seed: u64,
    /// FNV-1a hash of the offsets (hex), to compare draws across runs and machines.
    pub offsets_hash: String,
}

/// Draws `nsamples` windows of `seqlen` tokens from `ids`.
pub fn draw(
    ids: &[u32],
    nsamples: usize,
    seqlen: usize,
    seed: u64,
) -> Result<CalibrationSet, CalibrationError> {
    if nsamples == 0 {
        return Err(CalibrationError::Empty { key: "nsamples" });
    }
    if seqlen == 0 {
        return Err(CalibrationError::Empty { key: "seqlen" });
    }
    if ids.len() < seqlen + 2 {
        return Err(CalibrationError::TextTooShort {
            tokens: ids.len(),
            seqlen,
            needed: seqlen + 2,
        });
    }
    let mut rng = PyRandom::new(seed);
    let last = (ids.len() - seqlen - 1) as u64;
    let offsets: Vec<usize> = (0..nsamples)
        .map(|_| rng.randint(0, last) as usize)
        .collect();
    let windows = offsets
        .iter()
        .map(|&i| ids[i..i + seqlen].to_vec())
        .collect();
    Ok(CalibrationSet {
        windows,
        offsets_hash: fnv1a_hex(&offsets),
        offsets,
        seqlen,
        seed,
    })
}

fn fnv1a_hex(offsets: &[usize]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for o in offsets {
        for b in (*o as u64).to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_the_reference_draw() {
        // Python: random.seed(0); [random.randint(0, 273868 - 512 - 1) for _ in range(4)]
        let ids: Vec<u32> = (0..273_868).collect();
        let set = draw(&ids, 4, 512, 0).unwrap();
        assert_eq!(set.offsets, [201_979, 220_500, 21_225, 135_746]);
        assert_eq!(set.windows[1][0], 220_500);
        assert_eq!(set.windows[1].len(), 512);
        assert_eq!(set, draw(&ids, 4, 512, 0).unwrap());
        assert_ne!(
            set.offsets_hash,
            draw(&ids, 4, 512, 1).unwrap().offsets_hash
        );
    }

    #[test]
    fn short_text_is_refused() {
        let err = draw(&[1, 2, 3], 1, 4, 0).unwrap_err();
        assert!(err.to_string().contains("calibration.seqlen"), "{err}");
    }
}
