//! Calibration windows: `nsamples` windows of `seqlen` tokens at seeded random offsets of one
//! tokenised text, drawn exactly as the Wanda reference's `get_wikitext2` does
//! (`random.seed(seed)`, then `i = random.randint(0, n - seqlen - 1)` per sample), or of
//! documents drawn at random as its `get_c4` does ([`draw_from_documents`]).

use std::collections::HashMap;

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
    /// No document drawn was longer than a window.
    #[error("no document longer than {seqlen} tokens in {draws} draws ({seen} distinct documents, the longest {longest} tokens); lower `calibration.seqlen` or calibrate on other data")]
    NoLongDocument {
        /// Window length.
        seqlen: usize,
        /// Draws made for the sample.
        draws: usize,
        /// Distinct documents tokenised.
        seen: usize,
        /// Tokens of the longest of them.
        longest: usize,
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
    /// Start offset of each window in the tokenised text (in its document, for documents).
    pub offsets: Vec<usize>,
    /// The document of each window, when drawn from documents (empty for one text).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub documents: Vec<usize>,
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
        documents: Vec::new(),
        seqlen,
        seed,
    })
}

/// Consecutive draws that may find no document longer than a window before the draw stops
/// (the reference loops forever).
pub const MAX_DRAWS_PER_SAMPLE: usize = 10_000;

/// Draws `nsamples` windows of `seqlen` tokens from `count` documents as the reference's
/// `get_c4` does: per sample, `randint(0, count - 1)` until a document has more than `seqlen`
/// tokens, then `randint(0, n - seqlen - 1)` for the window. `tokenize(i)` gives document `i`'s
/// ids; a document found too short is not tokenised again when drawn again. Stops with
/// [`CalibrationError::NoLongDocument`] after [`MAX_DRAWS_PER_SAMPLE`] fruitless draws, or as
/// soon as every document has been seen and none is long enough.
pub fn draw_from_documents<E: From<CalibrationError>>(
    count: usize,
    mut tokenize: impl FnMut(usize) -> Result<Vec<u32>, E>,
    nsamples: usize,
    seqlen: usize,
    seed: u64,
) -> Result<CalibrationSet, E> {
    if nsamples == 0 {
        return Err(CalibrationError::Empty { key: "nsamples" }.into());
    }
    if seqlen == 0 {
        return Err(CalibrationError::Empty { key: "seqlen" }.into());
    }
    let mut rng = PyRandom::new(seed);
    let mut lengths: HashMap<usize, usize> = HashMap::new();
    let (mut windows, mut offsets, mut documents) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..nsamples {
        let mut draws = 0;
        let ids = loop {
            let doc = rng.randint(0, count as u64 - 1) as usize;
            draws += 1;
            if lengths.get(&doc).is_none_or(|&n| n > seqlen) {
                let ids = tokenize(doc)?;
                lengths.insert(doc, ids.len());
                if ids.len() > seqlen {
                    documents.push(doc);
                    break ids;
                }
            }
            let exhausted = lengths.len() == count && lengths.values().all(|&n| n <= seqlen);
            if draws >= MAX_DRAWS_PER_SAMPLE || exhausted {
                return Err(CalibrationError::NoLongDocument {
                    seqlen,
                    draws,
                    seen: lengths.len(),
                    longest: lengths.values().copied().max().unwrap_or(0),
                }
                .into());
            }
        };
        let i = rng.randint(0, (ids.len() - seqlen - 1) as u64) as usize;
        offsets.push(i);
        windows.push(ids[i..i + seqlen].to_vec());
    }
    let pairs: Vec<usize> = documents
        .iter()
        .zip(&offsets)
        .flat_map(|(&d, &o)| [d, o])
        .collect();
    Ok(CalibrationSet {
        windows,
        offsets_hash: fnv1a_hex(&pairs),
        offsets,
        documents,
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

    /// Document `i` has `lengths[i]` tokens, each its document number times 1000 plus position.
    fn documents(
        lengths: &[usize],
    ) -> impl FnMut(usize) -> Result<Vec<u32>, CalibrationError> + '_ {
        |i| Ok((0..lengths[i]).map(|p| (i * 1000 + p) as u32).collect())
    }

    #[test]
    fn documents_are_drawn_as_the_reference_draws_them() {
        // Python: random.seed(0); documents of lengths L; the reference's get_c4 loop with
        // seqlen 5 draws randint(0, 5) until L[i] > 5, then randint(0, L[i] - 5 - 1):
        // documents [3, 0, 3], offsets [1, 2, 1] in 4 document draws.
        let lengths = [9, 3, 2, 8, 4, 1];
        let mut calls = 0;
        let mut tokenize = documents(&lengths);
        let set = draw_from_documents(
            lengths.len(),
            |i| {
                calls += 1;
                tokenize(i)
            },
            3,
            5,
            0,
        )
        .unwrap();
        assert_eq!(set.documents, [3, 0, 3]);
        assert_eq!(set.offsets, [1, 2, 1]);
        assert_eq!(set.windows[0], [3001, 3002, 3003, 3004, 3005]);
        assert_eq!(
            calls, 4,
            "4, 3, 0, 3: a short document would not be tokenised again"
        );
    }

    #[test]
    fn documents_that_are_all_too_short_stop_the_draw() {
        let lengths = [3, 5, 2];
        let err = draw_from_documents(3, documents(&lengths), 1, 5, 0).unwrap_err();
        assert!(
            matches!(
                err,
                CalibrationError::NoLongDocument {
                    seen: 3,
                    longest: 5,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("lower `calibration.seqlen`"),
            "{err}"
        );
    }

    #[test]
    fn short_text_is_refused() {
        let err = draw(&[1, 2, 3], 1, 4, 0).unwrap_err();
        assert!(err.to_string().contains("calibration.seqlen"), "{err}");
    }
}
