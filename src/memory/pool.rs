//! The CUDA memory pool the estimator models: CubeCL 0.10's (what burn-cuda 0.21 allocates
//! through), read from `cubecl-runtime`'s `MemoryManagement` and `cubecl-cuda`'s device setup.
//!
//! - Weights are persistent allocations ([`crate::model::kernels::weight_tensor`]): exactly their
//!   bytes, rounded to [`ALIGNMENT`], and a slot freed by one layer is taken by the next layer's
//!   tensor of the same size. They are not modelled here.
//! - Every other tensor is a slice of a page of one of a ladder of sliced pools. With `M` the
//!   GPU's memory, the largest page is `M/4`; the ladder's pages are `M/16`, `M/64`, … (each a
//!   quarter of the one before, the last under 32 MB), and the pool of pages `P` at rung `k`
//!   (1 for `M/16`) takes slices of at most `P/2^k`. An allocation goes to the smallest pool
//!   that takes it — or whose page it fills to within 20 % — and the `M/4` pool takes what no
//!   rung does. A pool allocates a whole page when no free slice of its pages fits, and never
//!   gives a page back: a run reserves, in each pool, the most pages it ever needed there.
//!
//! So a 100 MB block of logits on a 141 GiB GPU costs a 2.2 GiB page, and the same run on a
//! 24 GiB GPU a 384 MiB one. `tests/it/pool_replay.rs` holds the model to cubecl-runtime's
//! manager itself.

/// Bytes every CUDA allocation is rounded up to (`cuMemAllocPitch`'s row alignment, as
/// `cubecl-cuda` sets it).
pub const ALIGNMENT: u64 = 512;

/// CubeCL stops adding rungs below pages of this size.
const SMALLEST_RUNG_FROM: u64 = 32 << 20;

/// The sliced pools of a GPU, smallest page first.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolLadder {
    /// `(page bytes, largest slice bytes)` per pool.
    pools: Vec<(u64, u64)>,
}

/// What the pools reserve for a set of allocations alive at once.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolPages {
    /// Pages per pool, in the ladder's order.
    pub pages: Vec<u64>,
}

impl PoolLadder {
    /// The ladder CubeCL builds on a GPU of `memory` bytes.
    pub fn for_gpu(memory: u64) -> Self {
        let max_page = (memory / 4).max(ALIGNMENT);
        let mut rungs = Vec::new();
        let mut page = max_page;
        let mut rung = 1u32;
        while page >= SMALLEST_RUNG_FROM {
            page = (page / 4).next_multiple_of(ALIGNMENT);
            rungs.push((page, page / 2u64.pow(rung)));
            rung += 1;
        }
        rungs.reverse();
        let whole = max_page / ALIGNMENT * ALIGNMENT;
        rungs.push((whole, whole));
        Self { pools: rungs }
    }

    /// The pool an allocation of `bytes` goes to; None when it exceeds the largest page (CubeCL
    /// fails such an allocation).
    pub fn pool_of(&self, bytes: u64) -> Option<usize> {
        let bytes = bytes.next_multiple_of(ALIGNMENT);
        self.pools.iter().position(|&(page, max_slice)| {
            bytes <= max_slice || page.checked_sub(bytes).is_some_and(|gap| gap * 5 < page)
        })
    }

    /// The pages needed to hold `allocations` (bytes each) at once: within each pool, the
    /// allocations largest first, each in the first page with room (slices never span pages).
    pub fn pages(&self, allocations: &[u64]) -> Result<PoolPages, u64> {
        let mut by_pool: Vec<Vec<u64>> = vec![Vec::new(); self.pools.len()];
        for &bytes in allocations.iter().filter(|&&b| b > 0) {
            let pool = self.pool_of(bytes).ok_or(bytes)?;
            by_pool[pool].push(bytes.next_multiple_of(ALIGNMENT));
        }
        let pages = by_pool
            .into_iter()
            .zip(&self.pools)
            .map(|(mut sizes, &(page, _))| {
                sizes.sort_unstable_by(|a, b| b.cmp(a));
                let mut free: Vec<u64> = Vec::new();
                for size in sizes {
                    match free.iter_mut().find(|room| **room >= size) {
                        Some(room) => *room -= size,
                        None => free.push(page - size),
                    }
                }
                free.len() as u64
            })
            .collect();
        Ok(PoolPages { pages })
    }

    /// Bytes of `pages`.
    pub fn bytes(&self, pages: &PoolPages) -> u64 {
        pages
            .pages
            .iter()
            .zip(&self.pools)
            .map(|(n, &(page, _))| n * page)
            .sum()
    }
}

impl PoolPages {
    /// Per pool, the larger of the two: what stays reserved after both needs.
    pub fn max(&self, other: &PoolPages) -> PoolPages {
        let len = self.pages.len().max(other.pages.len());
        let at = |p: &PoolPages, i: usize| p.pages.get(i).copied().unwrap_or(0);
        PoolPages {
            pages: (0..len).map(|i| at(self, i).max(at(other, i))).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// An H200 as CUDA reports it (143,771 MiB): pages of 35.1 GiB, 8.8 GiB, 2.2 GiB,
    /// 562 MiB, 140 MiB, 35 MiB and 8.8 MiB, as the H200 run's memory showed them.
    #[test]
    fn the_ladder_of_an_h200() {
        let ladder = PoolLadder::for_gpu(143_771 * MIB);
        let pages: Vec<u64> = ladder.pools.iter().map(|&(page, _)| page / MIB).collect();
        assert_eq!(pages, [8, 35, 140, 561, 2246, 8985, 35942]);
        // Rung k takes slices of at most page / 2^k: the 2.2 GiB pages (rung 2) up to 561 MiB.
        assert_eq!(ladder.pools[4].1, ladder.pools[4].0 / 4);
        // 100 MB of logits: a 2.2 GiB page; 10 MB: a 562 MiB one; a 768 MiB tensor: 8.8 GiB.
        assert_eq!(ladder.pool_of(100_000_000), Some(4));
        assert_eq!(ladder.pool_of(10 * MIB), Some(3));
        assert_eq!(ladder.pool_of(768 * MIB), Some(5));
        // Within 20 % of a page fills it: 130 MiB goes to the 140 MiB pages, not beyond.
        assert_eq!(ladder.pool_of(130 * MIB), Some(2));
        assert_eq!(ladder.pool_of(40_000 * MIB), None);
    }

    #[test]
    fn allocations_share_pages_and_pools_keep_their_largest_need() {
        let ladder = PoolLadder::for_gpu(24 << 30);
        // 24 GiB: pages of 1.5 GiB take slices up to 768 MiB.
        let big = ladder.pool_of(700 * MIB).unwrap();
        assert_eq!(ladder.pools[big].0, 1536 * MIB);
        // Two 700 MiB slices share one page; a third needs a second.
        let two = ladder.pages(&[700 * MIB, 700 * MIB]).unwrap();
        let three = ladder.pages(&[700 * MIB; 3]).unwrap();
        assert_eq!(two.pages[big], 1);
        assert_eq!(three.pages[big], 2);
        assert_eq!(ladder.bytes(&three), 3072 * MIB);
        // What a pool reserved stays: the larger need of two stages, pool by pool.
        let small = ladder.pages(&[MIB]).unwrap();
        let both = three.max(&small);
        assert_eq!(ladder.bytes(&both), 3072 * MIB + ladder.bytes(&small));
        assert_eq!(ladder.pages(&[30 << 30]), Err(30 << 30));
    }
}
