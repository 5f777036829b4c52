//! Which experts a layer keeps: the same number removed from every layer, the least salient
//! first (REAP's `torch.topk(saliency, n, largest=False)`), in equal shares from each group of
//! a group-limited router, never a protected expert, and never so many that a token could not
//! find its `top_k`.

use crate::model::arch::Experts;
use crate::prune::PruneError;

/// How many experts a stage removes from each layer: a fraction of them (`0 < f < 1`, rounded
/// down as REAP's `int(n · ratio)`) or a count (a whole number ≥ 1).
#[derive(
    Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct ExpertAmount(#[schemars(range(min = 0.0))] pub f64);

impl ExpertAmount {
    /// Whether this is a fraction in (0, 1) or a whole count ≥ 1.
    pub fn check(self) -> Result<(), PruneError> {
        let f = self.0;
        match (f > 0.0 && f < 1.0) || (f >= 1.0 && f.fract() == 0.0 && f.is_finite()) {
            true => Ok(()),
            false => Err(refused(format!(
                "`experts: {f}` is neither a fraction in (0, 1) nor a whole count ≥ 1; \
                 write e.g. `experts: 0.25` or `experts: 2`"
            ))),
        }
    }

    /// The experts removed from a layer of `count`.
    pub fn removed_of(self, count: usize) -> Result<usize, PruneError> {
        self.check()?;
        let f = self.0;
        let removed = match f < 1.0 {
            true => (count as f64 * f).floor() as usize,
            false => f as usize,
        };
        if removed == 0 {
            return Err(refused(format!(
                "`experts: {f}` removes no expert of {count}; raise it to at least {:.4} or 1",
                1.0 / count.max(1) as f64
            )));
        }
        Ok(removed)
    }
}

/// An expert-pruning refusal.
pub(super) fn refused(reason: String) -> PruneError {
    PruneError::InvalidOptions { reason }
}

/// What every layer with experts loses: checked once against the routing before any work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Removal {
    /// Experts per layer before.
    pub count: usize,
    /// Experts removed from each layer.
    pub removed: usize,
    /// Groups of the router, which lose equally (1 where it has none).
    pub groups: usize,
}

impl Removal {
    /// The removal of `amount` from layers routed by `routing`, or why it cannot be: more
    /// removed than there are, a share that does not divide among a group-limited router's
    /// groups (DeepSeek's `n_group`), groups left too small for the router (DeepSeek-V3's and
    /// GLM-4.5's choose groups by their two best experts), or too few experts left open to a
    /// token for its `top_k` (`num_experts_per_tok`).
    pub fn plan(routing: &Experts, amount: ExpertAmount) -> Result<Removal, PruneError> {
        let count = routing.count;
        let removed = amount.removed_of(count)?;
        if removed >= count {
            return Err(refused(format!(
                "`experts: {}` removes {removed} of the {count} experts of each layer; \
                 keep at least one",
                amount.0
            )));
        }
        let (groups, open) = match (routing.sigmoid, routing.limited_softmax) {
            (Some(s), _) => (s.groups.max(1), s.groups_per_token.max(1)),
            (None, Some(l)) => (l.groups.max(1), l.groups_per_token.max(1)),
            (None, None) => (1, 1),
        };
        if !removed.is_multiple_of(groups) {
            return Err(refused(format!(
                "the router chooses among {groups} groups of experts (`n_group`), which lose \
                 equally: remove a multiple of {groups} experts (now {removed} of {count})"
            )));
        }
        let per_group = (count - removed) / groups;
        let pairs = routing.sigmoid.is_some_and(|s| !s.uncorrected);
        if pairs && per_group < 2 {
            return Err(refused(format!(
                "the router ranks groups by their two best experts, and removing {removed} of \
                 {count} leaves {per_group} per group; remove at most {}",
                count - 2 * groups
            )));
        }
        if open * per_group < routing.per_token {
            return Err(refused(format!(
                "removing {removed} of {count} experts leaves {} open to a token ({open} of \
                 {groups} groups × {per_group}), fewer than the {} each token goes to \
                 (`num_experts_per_tok`)",
                open * per_group,
                routing.per_token
            )));
        }
        Ok(Removal {
            count,
            removed,
            groups,
        })
    }

    /// The experts kept (ascending) of a layer whose experts have `saliency`: in each group,
    /// its share of the removal taken from the least salient unprotected experts (the lower
    /// index first among equals). `layer` names the layer in an error: too many experts of a
    /// group protected to remove its share.
    pub fn kept(
        &self,
        layer: usize,
        saliency: &[f64],
        protected: &[bool],
    ) -> Result<Vec<usize>, PruneError> {
        let size = self.count / self.groups;
        let share = self.removed / self.groups;
        let mut removed = Vec::with_capacity(self.removed);
        for g in 0..self.groups {
            let mut order: Vec<usize> = (g * size..(g + 1) * size)
                .filter(|&e| !protected[e])
                .collect();
            if order.len() < share {
                return Err(refused(format!(
                    "layer {layer}: `protect` keeps {} of the {size} experts {}, and {share} \
                     must go; protect fewer",
                    size - order.len(),
                    match self.groups {
                        1 => "of the layer".to_string(),
                        _ => format!("of group {g}"),
                    }
                )));
            }
            order.sort_by(|&a, &b| saliency[a].total_cmp(&saliency[b]));
            removed.extend_from_slice(&order[..share]);
        }
        Ok((0..self.count).filter(|e| !removed.contains(e)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::{LimitedSoftmax, SigmoidRouting};

    const FOUR: Experts = Experts::softmax(4, 2, 8);

    /// Why `amount` cannot be removed from layers routed by `routing`.
    fn refusal(routing: &Experts, amount: f64) -> String {
        Removal::plan(routing, ExpertAmount(amount))
            .unwrap_err()
            .to_string()
    }

    fn grouped(count: usize, groups: usize, open: usize) -> Experts {
        Experts {
            sigmoid: Some(SigmoidRouting {
                groups,
                groups_per_token: open,
                scale: 2.5,
                uncorrected: false,
            }),
            ..Experts::softmax(count, 2, 8)
        }
    }

    #[test]
    fn fractions_round_down_and_counts_are_whole() {
        assert_eq!(ExpertAmount(0.25).removed_of(4), Ok(1));
        assert_eq!(ExpertAmount(0.5).removed_of(6), Ok(3));
        assert_eq!(ExpertAmount(0.3).removed_of(128), Ok(38));
        assert_eq!(ExpertAmount(2.0).removed_of(8), Ok(2));
        for (f, want) in [
            (1.5, "neither a fraction"),
            (0.1, "removes no expert"),
            (0.0, "neither"),
        ] {
            let err = ExpertAmount(f).removed_of(4).unwrap_err().to_string();
            assert!(err.contains(want), "{f}: {err}");
        }
    }

    #[test]
    fn the_least_salient_go_and_protected_stay() {
        let plan = Removal::plan(&FOUR, ExpertAmount(0.5)).unwrap();
        assert_eq!(plan.removed, 2);
        let saliency = [0.3, 0.1, 0.2, 0.9];
        assert_eq!(plan.kept(0, &saliency, &[false; 4]).unwrap(), vec![0, 3]);
        // Protecting expert 1 removes the next least salient: 2 and 0.
        let protected = [false, true, false, false];
        assert_eq!(plan.kept(0, &saliency, &protected).unwrap(), vec![1, 3]);
        // Equal saliencies: the lower index goes first.
        assert_eq!(plan.kept(0, &[1.0; 4], &[false; 4]).unwrap(), vec![2, 3]);
        let err = plan
            .kept(5, &saliency, &[true, true, true, false])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("layer 5") && err.contains("protect fewer"),
            "{err}"
        );
    }

    #[test]
    fn a_token_keeps_its_top_k() {
        // Two of four a token: removing three leaves one.
        let err = refusal(&FOUR, 3.0);
        assert!(err.contains("fewer than the 2 each token goes to"), "{err}");
        let err = refusal(&FOUR, 4.0);
        assert!(err.contains("keep at least one"), "{err}");
        assert!(Removal::plan(&FOUR, ExpertAmount(2.0)).is_ok());
    }

    #[test]
    fn grouped_routers_lose_equally_per_group() {
        // Sixteen experts in four groups of four, two groups open: 25 % removes one of each
        // group, by saliency within the group, not overall.
        let routing = grouped(16, 4, 2);
        let plan = Removal::plan(&routing, ExpertAmount(0.25)).unwrap();
        assert_eq!((plan.removed, plan.groups), (4, 4));
        // The least salient of each group goes: 2 (0.0), 4 (5.0), 8 (9.0) and 12 (13.0),
        // though 8 and 12 outrank every expert kept in group 0.
        let saliency: Vec<f64> = (0..16)
            .map(|e| match e {
                2 => 0.0,
                5 => 10.0,
                _ => 1.0 + e as f64,
            })
            .collect();
        let kept = plan.kept(3, &saliency, &[false; 16]).unwrap();
        assert_eq!(kept, vec![0, 1, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15]);
        // Three of sixteen does not divide into four groups.
        let err = refusal(&routing, 3.0);
        assert!(err.contains("multiple of 4"), "{err}");
        // Three of each group of four would leave one: the router needs its two best.
        let err = refusal(&routing, 0.75);
        assert!(err.contains("remove at most 8"), "{err}");
        // DeepSeek-V2's group-limited softmax: one group open of four, two a token: removing
        // two of each group of three leaves one open expert.
        let v2 = Experts {
            limited_softmax: Some(LimitedSoftmax {
                groups: 4,
                groups_per_token: 1,
                scale: 1.0,
            }),
            normalize: false,
            ..Experts::softmax(12, 2, 8)
        };
        assert!(Removal::plan(&v2, ExpertAmount(4.0)).is_ok());
        let err = refusal(&v2, 8.0);
        assert!(err.contains("leaves 1 open to a token"), "{err}");
    }
}
