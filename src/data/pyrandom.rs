//! Python's `random` module (MT19937 with `init_by_array` seeding, `getrandbits`, `randint`),
//! bit for bit, so calibration windows drawn with a seed are the ones the Wanda reference code
//! (`random.seed(seed); random.randint(0, n - seqlen - 1)`) draws with the same seed — on every
//! machine, independent of any crate's RNG stability policy.

const N: usize = 624;
const M: usize = 397;

/// A Mersenne Twister seeded as CPython's `random.seed(int)`.
#[derive(Debug, Clone)]
pub struct PyRandom {
    state: [u32; N],
    index: usize,
}

impl PyRandom {
    /// `random.seed(seed)` for a non-negative integer seed.
    pub fn new(seed: u64) -> Self {
        // CPython splits abs(seed) into 32-bit words, least significant first; 0 → [0].
        let mut key = vec![seed as u32];
        if seed >> 32 != 0 {
            key.push((seed >> 32) as u32);
        }
        let mut rng = Self::init_genrand(19_650_218);
        let mt = &mut rng.state;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        rng
    }

    fn init_genrand(s: u32) -> Self {
        let mut state = [0u32; N];
        state[0] = s;
        for i in 1..N {
            state[i] = 1_812_433_253u32
                .wrapping_mul(state[i - 1] ^ (state[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        Self { state, index: N }
    }

    fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            for k in 0..N {
                let y = (self.state[k] & 0x8000_0000) | (self.state[(k + 1) % N] & 0x7fff_ffff);
                let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
                self.state[k] = self.state[(k + M) % N] ^ (y >> 1) ^ mag;
            }
            self.index = 0;
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random.getrandbits(k)` for `1 ≤ k ≤ 64`: 32-bit words, least significant first.
    pub fn getrandbits(&mut self, k: u32) -> u64 {
        debug_assert!((1..=64).contains(&k));
        let mut out = 0u64;
        let mut filled = 0;
        let mut left = k;
        while left > 0 {
            let mut r = u64::from(self.next_u32());
            if left < 32 {
                r >>= 32 - left;
            }
            out |= r << filled;
            filled += 32;
            left = left.saturating_sub(32);
        }
        out
    }

    /// `random.randint(a, b)`: uniform on `a..=b` by rejection sampling, as CPython does.
    pub fn randint(&mut self, a: u64, b: u64) -> u64 {
        debug_assert!(a <= b);
        let n = b - a + 1;
        let k = 64 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return a + r;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values printed by CPython 3.11:
    /// `random.seed(0); [random.randint(0, 1000) for _ in range(5)]` etc.
    #[test]
    fn matches_cpython() {
        let mut r = PyRandom::new(0);
        let v: Vec<u64> = (0..5).map(|_| r.randint(0, 1000)).collect();
        assert_eq!(v, [864, 394, 776, 911, 430]);
        let mut r = PyRandom::new(0);
        let v: Vec<u64> = (0..4).map(|_| r.randint(0, 273_868 - 512 - 1)).collect();
        assert_eq!(v, [201_979, 220_500, 21_225, 135_746]);
        let mut r = PyRandom::new(12_345_678_901);
        let v: Vec<u64> = (0..2).map(|_| r.randint(0, 1 << 40)).collect();
        assert_eq!(v, [779_037_448_238, 456_872_185_470]);
        let mut r = PyRandom::new(3);
        let v: Vec<u64> = (0..3).map(|_| r.getrandbits(32)).collect();
        assert_eq!(v, [1_022_050_301, 2_545_373_330, 2_337_446_730]);
    }
}
