//! Choosing the next token from a row of logits: greedy at temperature 0, else a seeded draw
//! from the softmax of `logits / temperature` (`wanda generate`, `wanda serve`).

use rand::rngs::StdRng;
use rand::Rng;

/// The next token: the largest logit (the first of equals) when `temperature` is 0 or less, else
/// a draw from `softmax(logits / temperature)` taken in f64.
pub fn pick(logits: &[f32], temperature: f64, rng: &mut StdRng) -> u32 {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .fold((0usize, f32::NEG_INFINITY), |best, (i, &v)| {
                if v > best.1 {
                    (i, v)
                } else {
                    best
                }
            })
            .0 as u32
    };
    if temperature <= 0.0 {
        return argmax();
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| ((f64::from(l) - f64::from(max)) / temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut target = rng.random::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        target -= w;
        if target <= 0.0 {
            return i as u32;
        }
    }
    argmax()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn greedy_picks_the_first_largest_logit_and_sampling_is_seeded() {
        let mut rng = StdRng::seed_from_u64(0);
        assert_eq!(pick(&[0.1, 3.0, -1.0, 3.0], 0.0, &mut rng), 1);
        let draws = |seed| -> Vec<u32> {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..32)
                .map(|_| pick(&[1.0, 1.0, 1.0], 1.0, &mut rng))
                .collect()
        };
        assert_eq!(draws(7), draws(7));
        // Three equal logits: every id is drawn at least once in 32 draws.
        let seen = draws(7);
        assert!((0..3).all(|i| seen.contains(&i)), "{seen:?}");
    }
}
