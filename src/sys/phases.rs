//! Wall time per phase of a long loop (layer-wise pruning, perplexity), to find where a backend
//! loses time: with `WANDA_PHASE_TIMES=1` in the environment each loop prints one line to
//! stderr when it ends, e.g. `phases of prune: observe 3.21 s ×16 (first 1.40 s), forward
//! 2.90 s ×16 (first 0.19 s), …`: a first lap far above the mean of the others is one-time work,
//! such as a GPU backend compiling its kernels.
//! Unset, a lap costs one branch. Set, every lap first waits for the device (`sync`), so
//! queued kernels count in the phase that launched them; that wait is the only change to the
//! run.

use std::time::Instant;

/// The environment variable that switches phase timing on.
pub const PHASE_TIMES_VAR: &str = "WANDA_PHASE_TIMES";

/// Accumulates seconds per named phase; see the module documentation.
pub struct PhaseClock<S: Fn()> {
    name: &'static str,
    sync: S,
    enabled: bool,
    last: Instant,
    /// Phase, seconds, laps and the first lap's seconds; in the order phases first ended.
    totals: Vec<(&'static str, f64, usize, f64)>,
}

impl<S: Fn()> PhaseClock<S> {
    /// A clock for the loop `name`, on when [`PHASE_TIMES_VAR`] is set to anything but `0`;
    /// `sync` waits until the device has finished what was queued.
    pub fn new(name: &'static str, sync: S) -> Self {
        let enabled = std::env::var(PHASE_TIMES_VAR).is_ok_and(|v| !v.is_empty() && v != "0");
        Self::with_enabled(name, sync, enabled)
    }

    /// A clock that never times nor prints (for a loop timed only in some of its callers).
    pub fn off(name: &'static str, sync: S) -> Self {
        Self::with_enabled(name, sync, false)
    }

    fn with_enabled(name: &'static str, sync: S, enabled: bool) -> Self {
        Self {
            name,
            sync,
            enabled,
            last: Instant::now(),
            totals: Vec::new(),
        }
    }

    /// Ends the current phase, `phase`, and starts the next.
    pub fn lap(&mut self, phase: &'static str) {
        if !self.enabled {
            return;
        }
        (self.sync)();
        let now = Instant::now();
        let seconds = (now - self.last).as_secs_f64();
        self.last = now;
        match self.totals.iter_mut().find(|(p, ..)| *p == phase) {
            Some(total) => {
                total.1 += seconds;
                total.2 += 1;
            }
            None => self.totals.push((phase, seconds, 1, seconds)),
        }
    }

    /// The one-line summary, `None` when the clock is off.
    fn summary(&self) -> Option<String> {
        self.enabled.then(|| {
            let total: f64 = self.totals.iter().map(|(_, s, ..)| s).sum();
            let phases: Vec<String> = self
                .totals
                .iter()
                .map(|&(p, s, n, first)| match n {
                    1 => format!("{p} {s:.3} s ×1"),
                    _ => format!("{p} {s:.3} s ×{n} (first {first:.3} s)"),
                })
                .collect();
            format!(
                "phases of {}: {} (total {total:.3} s)",
                self.name,
                phases.join(", ")
            )
        })
    }
}

impl<S: Fn()> Drop for PhaseClock<S> {
    fn drop(&mut self) {
        if let Some(line) = self.summary() {
            eprintln!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn laps_add_up_per_phase_and_sync_first() {
        let syncs = Cell::new(0);
        let mut clock = PhaseClock::with_enabled("test", || syncs.set(syncs.get() + 1), true);
        clock.lap("a");
        clock.lap("b");
        clock.lap("a");
        assert_eq!(syncs.get(), 3);
        let names: Vec<_> = clock.totals.iter().map(|(p, _, n, _)| (*p, *n)).collect();
        assert_eq!(names, [("a", 2), ("b", 1)]);
        let (_, total_a, _, first_a) = clock.totals[0];
        assert!(first_a <= total_a, "{first_a} {total_a}");
        let line = clock.summary().unwrap();
        assert!(line.starts_with("phases of test: a "), "{line}");
        assert!(
            line.contains(" s ×2 (first ") && line.contains("b "),
            "{line}"
        );
        assert!(
            line.contains(" s ×1,") || line.contains(" s ×1 ("),
            "{line}"
        );
        assert!(
            !line.contains("×1 (first"),
            "one lap needs no first: {line}"
        );
    }

    #[test]
    fn an_unset_clock_neither_syncs_nor_reports() {
        let syncs = Cell::new(0);
        let mut clock = PhaseClock::with_enabled("test", || syncs.set(syncs.get() + 1), false);
        clock.lap("a");
        assert_eq!(syncs.get(), 0);
        assert!(clock.summary().is_none());
    }
}
