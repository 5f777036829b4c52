//! The gate: make a run fit its memory budget before it starts, or say why it cannot.
//!
//! Always first: calibration `seqlen` is clamped to the model's context
//! (`max_position_embeddings`) — the reference code once asked for 64 GiB by taking seqlen from
//! it. An evaluation window longer than the context is clamped only where the pipeline lists
//! `eval_seqlen` among the settings the gate may reduce; otherwise the gate refuses. Then,
//! while the estimated peak exceeds the usable budget (`budget × (1 − headroom)`), the steps
//! that change no number come first: halve the calibration batch (samples per forward pass)
//! down to 1, then, on a GPU, keep the calibration activations in host memory between layers.
//! Then the policy's next step applies, in the pipeline's order: halve calibration `nsamples`
//! down to its floor, halve calibration `seqlen` down to its floor, switch on layer streaming,
//! halve the evaluation window (only when listed) — re-estimating after each step. A streamed
//! evaluation holds the residual streams of all its windows (each layer read once); where that
//! is what does not fit, the group of windows is halved, which changes no number either. When
//! nothing fits, the decision says so with the smallest budget that would have fitted.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::device::DeviceKind;
use super::estimate::{estimate_prune, Estimate, PruneRun};
use crate::model::arch::{gib, ModelShape, Place};

/// A setting the gate may reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReduceKey {
    /// `calibration.nsamples`, halved down to its floor.
    Nsamples,
    /// `calibration.seqlen`, halved down to its floor.
    Seqlen,
    /// Layer streaming: only the current layer's weights in memory, the others read from
    /// disk (the checkpoint, or the layer store of pruned layers) when their turn comes.
    Streaming,
    /// `evaluation.seqlen`: clamped to the model's context, halved down to the seqlen floor;
    /// never changed unless listed.
    EvalSeqlen,
}

/// The gate's lower limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Floor {
    /// Fewest calibration sequences.
    #[serde(default = "default_floor_nsamples")]
    pub nsamples: usize,
    /// Shortest calibration sequence.
    #[serde(default = "default_floor_seqlen")]
    pub seqlen: usize,
}

impl Default for Floor {
    fn default() -> Self {
        Self {
            nsamples: default_floor_nsamples(),
            seqlen: default_floor_seqlen(),
        }
    }
}

fn default_floor_nsamples() -> usize {
    8
}

fn default_floor_seqlen() -> usize {
    256
}

/// What the gate may do and within which limits.
#[derive(Debug, Clone, PartialEq)]
pub struct GatePolicy {
    /// Bytes of the device's memory the run may use, before headroom.
    pub budget: u64,
    /// Fraction of the budget kept free, in [0, 1).
    pub headroom: f64,
    /// The settings the gate may lower, in order.
    pub reduce: Vec<ReduceKey>,
    /// The lowest values it may lower them to.
    pub floor: Floor,
    /// Host RAM available to a GPU run: the calibration activations move to the host only
    /// when the host's share of the estimate fits in it; None checks nothing (a dry run, whose
    /// host is not the run's).
    pub host_budget: Option<u64>,
}

impl GatePolicy {
    /// `budget × (1 − headroom)`.
    pub fn usable(&self) -> u64 {
        (self.budget as f64 * (1.0 - self.headroom)).floor() as u64
    }
}

/// One change the gate made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateStep {
    /// The setting, e.g. `calibration.nsamples`.
    pub key: String,
    /// Its value before.
    pub from: String,
    /// Its value after.
    pub to: String,
    /// Why, e.g. `clamped to max_position_embeddings`.
    pub reason: String,
}

/// The gate's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateDecision {
    /// The settings asked for.
    pub requested: PruneRun,
    /// The settings to run with.
    pub effective: PruneRun,
    /// The changes, in the order made.
    pub steps: Vec<GateStep>,
    /// The estimated peak of the requested settings (after clamping to the context).
    pub requested_peak: u64,
    /// The estimated peak of the effective settings.
    pub effective_peak: u64,
    /// The estimate of the effective settings.
    pub estimate: Estimate,
    /// The usable budget (after headroom).
    pub usable_budget: u64,
    /// Whether the effective settings fit.
    pub fits: bool,
    /// The smallest budget (before headroom) in which the effective settings fit.
    pub smallest_budget: u64,
}

/// Errors that stop the gate before any estimate.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GateError {
    /// The evaluation window exceeds the context and the pipeline does not let the gate change it.
    #[error(
        "evaluation.seqlen {seqlen} exceeds the model's context ({context} tokens, \
         max_position_embeddings); lower `evaluation.seqlen` or add `eval_seqlen` to the gate's `reduce`"
    )]
    EvalSeqlenTooLong {
        /// The window asked for.
        seqlen: usize,
        /// The model's context.
        context: usize,
    },
}

/// Decides the effective settings of `requested` on a model of `shape` under `policy`.
pub fn decide(
    shape: &ModelShape,
    requested: &PruneRun,
    policy: &GatePolicy,
) -> Result<GateDecision, GateError> {
    let context = shape.max_position_embeddings;
    let allows = |key| policy.reduce.contains(&key);
    let mut run = requested.clone();
    let mut steps = Vec::new();
    if run.seqlen > context {
        steps.push(step(
            "calibration.seqlen",
            run.seqlen,
            context,
            "clamped to max_position_embeddings",
        ));
        run.seqlen = context;
    }
    if let Some(e) = run.eval_seqlen.filter(|&e| e > context) {
        if !allows(ReduceKey::EvalSeqlen) {
            return Err(GateError::EvalSeqlenTooLong { seqlen: e, context });
        }
        steps.push(step(
            "evaluation.seqlen",
            e,
            context,
            "clamped to max_position_embeddings",
        ));
        run.eval_seqlen = Some(context);
    }
    let peak = |run: &PruneRun| estimate_prune(shape, run).peak(Place::Device).1;
    let requested_peak = peak(&run);
    let usable = policy.usable();
    if run.calibrates() && peak(&run) > usable {
        // A batch beyond the samples is the samples.
        run.batch = run.batch.clamp(1, run.nsamples.max(1));
        while peak(&run) > usable {
            match halve(&mut run.batch, 1) {
                Some((a, b)) => steps.push(step(
                    "calibration.batch",
                    a,
                    b,
                    "halved to fit; the same numbers",
                )),
                None => break,
            }
        }
        if peak(&run) > usable && run.device == DeviceKind::Cuda && !run.activations_on_host {
            let on_host = PruneRun {
                activations_on_host: true,
                ..run.clone()
            };
            let host_peak = estimate_prune(shape, &on_host).peak(Place::Host).1;
            if policy.host_budget.is_none_or(|ram| host_peak <= ram) {
                run = on_host;
                steps.push(step(
                    "calibration.activations",
                    "device",
                    "host",
                    "one batch on the device at a time; the same numbers",
                ));
            }
        }
    }
    for key in &policy.reduce {
        while peak(&run) > usable {
            let floor = match key {
                ReduceKey::Nsamples => policy.floor.nsamples,
                ReduceKey::Seqlen | ReduceKey::EvalSeqlen => policy.floor.seqlen,
                ReduceKey::Streaming => 0,
            };
            let changed = match key {
                ReduceKey::Nsamples => halve(&mut run.nsamples, floor)
                    .map(|(a, b)| step("calibration.nsamples", a, b, "halved to fit")),
                ReduceKey::Seqlen => halve(&mut run.seqlen, floor)
                    .map(|(a, b)| step("calibration.seqlen", a, b, "halved to fit")),
                ReduceKey::EvalSeqlen => match run.eval_seqlen.as_mut() {
                    Some(e) => halve(e, floor)
                        .map(|(a, b)| step("evaluation.seqlen", a, b, "halved to fit")),
                    None => None,
                },
                ReduceKey::Streaming if !run.streaming => {
                    run.streaming = true;
                    Some(step(
                        "streaming",
                        "off",
                        "on",
                        "only one layer on the device",
                    ))
                }
                ReduceKey::Streaming => None,
            };
            match changed {
                Some(s) => steps.push(s),
                None => break,
            }
        }
    }
    // A streamed evaluation holds the residual streams of a group of windows: fewer windows at
    // a time where the evaluation is what does not fit.
    while run.streaming {
        let (stage, bytes) = estimate_prune(shape, &run).peak(Place::Device);
        if bytes <= usable || stage != "eval" {
            break;
        }
        match halve(&mut run.eval_group, 1) {
            Some((a, b)) => steps.push(step(
                "evaluation.group",
                a,
                b,
                "halved to fit; each layer read once per group, the same numbers",
            )),
            None => break,
        }
    }
    let estimate = estimate_prune(shape, &run);
    let effective_peak = estimate.peak(Place::Device).1;
    let smallest_budget = (effective_peak as f64 / (1.0 - policy.headroom)).ceil() as u64;
    Ok(GateDecision {
        requested: requested.clone(),
        fits: effective_peak <= usable,
        effective: run,
        steps,
        requested_peak,
        effective_peak,
        estimate,
        usable_budget: usable,
        smallest_budget,
    })
}

/// Halves `value` (not below `floor`); the old and new value when it changed.
fn halve(value: &mut usize, floor: usize) -> Option<(usize, usize)> {
    let next = (*value / 2).max(floor);
    (next < *value).then(|| {
        let old = *value;
        *value = next;
        (old, next)
    })
}

fn step(key: &str, from: impl ToString, to: impl ToString, reason: &str) -> GateStep {
    GateStep {
        key: key.to_string(),
        from: from.to_string(),
        to: to.to_string(),
        reason: reason.to_string(),
    }
}

impl GateDecision {
    /// The decision as a short table: each changed setting requested → effective, then the
    /// estimate against the budget and the verdict.
    pub fn render(&self, budget_label: &str) -> String {
        let mut out = format!(
            "gate: budget {budget_label} − headroom = {} usable\n",
            gib(self.usable_budget)
        );
        // One line per setting: its first value → its last, and how it got there.
        let mut i = 0;
        while i < self.steps.len() {
            let first = &self.steps[i];
            let run = self.steps[i..]
                .iter()
                .take_while(|s| s.key == first.key)
                .count();
            let last = &self.steps[i + run - 1];
            let how = if run > 1 {
                format!("{} ({run} steps)", last.reason)
            } else {
                last.reason.clone()
            };
            out.push_str(&format!(
                "  {:<22} {:>10} → {:<10} {how}\n",
                first.key, first.from, last.to
            ));
            i += run;
        }
        out.push_str(&format!(
            "  {:<22} {:>10} → {:<10} ",
            "estimated peak",
            gib(self.requested_peak),
            gib(self.effective_peak)
        ));
        if self.fits {
            out.push_str("fits\n");
        } else {
            out.push_str(&format!(
                "does not fit; the smallest budget that would is {}\n",
                gib(self.smallest_budget)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::device::Precision;
    use crate::prune::Method;

    fn shape() -> ModelShape {
        ModelShape {
            parameters: 1_000_000,
            hidden_size: 64,
            intermediate_size: 128,
            num_hidden_layers: 4,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 16,
            vocab_size: 1000,
            tie_word_embeddings: true,
            max_position_embeddings: 1024,
            gated_mlp: true,
            parallel_residual: false,
            experts: 0,
            shared_expert_size: 0,
            shared_expert_gated: false,
            dense_layers: 0,
            dense_intermediate_size: 0,
            latent_attention: None,
            generic_layers: false,
        }
    }

    fn run(nsamples: usize, seqlen: usize) -> PruneRun {
        PruneRun {
            method: Some(Method::Wanda),
            nsamples,
            seqlen,
            batch: 8,
            eval_seqlen: Some(256),
            keeps_dense_copy: false,
            streaming: false,
            checkpoint_bytes: 0,
            calibration_text_bytes: 0,
            eval_text_bytes: 0,
            device: DeviceKind::Cpu,
            precision: Precision::F32,
            activations_on_host: false,
            gpu_memory: None,
            owl: false,
            dsnot: false,
            weight_update: None,
            zeroshot: false,
            eval_group: 8,
            expert_removal: None,
        }
    }

    fn policy(budget: u64) -> GatePolicy {
        GatePolicy {
            budget,
            headroom: 0.1,
            reduce: vec![ReduceKey::Nsamples, ReduceKey::Seqlen, ReduceKey::Streaming],
            floor: Floor {
                nsamples: 8,
                seqlen: 256,
            },
            host_budget: None,
        }
    }

    /// The peak at `n` × `s` on the CPU once the batch is down to 1 (the step that changes
    /// no number).
    fn peak(n: usize, s: usize) -> u64 {
        let mut r = run(n, s);
        r.batch = 1;
        estimate_prune(&shape(), &r).peak(Place::Device).1
    }

    fn on_gpu(n: usize, s: usize) -> PruneRun {
        PruneRun {
            device: DeviceKind::Cuda,
            ..run(n, s)
        }
    }

    fn keys(d: &GateDecision) -> Vec<&str> {
        d.steps.iter().map(|s| s.key.as_str()).collect()
    }

    #[test]
    fn the_batch_and_then_the_activations_move_before_any_number_changes() {
        let requested = estimate_prune(&shape(), &on_gpu(128, 1024))
            .peak(Place::Device)
            .1;
        let mut light = on_gpu(128, 1024);
        light.batch = 1;
        light.activations_on_host = true;
        let light = estimate_prune(&shape(), &light).peak(Place::Device).1;
        assert!(light < requested);
        // Between the peak at batch 1 with the activations on the host and the requested one.
        let budget = ((light + requested) / 2) as f64 / 0.9;
        let d = decide(&shape(), &on_gpu(128, 1024), &policy(budget as u64)).unwrap();
        assert!(d.fits);
        assert_eq!((d.effective.nsamples, d.effective.seqlen), (128, 1024));
        assert!(d.effective.batch < 8);
        assert!(keys(&d)
            .iter()
            .all(|k| *k == "calibration.batch" || *k == "calibration.activations"));
        // Just above the lightest peak the activations must move; a host without room for
        // them keeps them on the device, and the gate lowers numbers instead.
        let tight = (light as f64 * 1.01 / 0.9) as u64;
        let d = decide(&shape(), &on_gpu(128, 1024), &policy(tight)).unwrap();
        assert!(d.effective.activations_on_host);
        assert_eq!(d.effective.nsamples, 128);
        let short = GatePolicy {
            host_budget: Some(1 << 10),
            ..policy(tight)
        };
        let d = decide(&shape(), &on_gpu(128, 1024), &short).unwrap();
        assert!(!d.effective.activations_on_host);
        assert!(d.effective.nsamples < 128);
        // A small budget on the CPU: device and host are one pool, so the activations stay.
        let d = decide(&shape(), &run(128, 1024), &policy(1 << 20)).unwrap();
        assert!(!d.effective.activations_on_host);
        assert!(!keys(&d).contains(&"calibration.activations"));
        assert_eq!(d.effective.batch, 1);
    }

    #[test]
    fn a_run_that_fits_is_left_alone() {
        let d = decide(&shape(), &run(128, 512), &policy(1 << 40)).unwrap();
        assert!(d.fits && d.steps.is_empty());
        assert_eq!(d.effective, d.requested);
    }

    #[test]
    fn seqlen_is_clamped_to_the_context_whatever_the_budget() {
        let d = decide(&shape(), &run(8, 131_072), &policy(1 << 40)).unwrap();
        assert_eq!(d.effective.seqlen, 1024);
        assert_eq!(d.steps[0].reason, "clamped to max_position_embeddings");
    }

    #[test]
    fn nsamples_halves_to_the_first_fit_before_seqlen_moves() {
        // A budget the run fits at 32 samples but not at 64.
        let budget = ((peak(32, 1024) + peak(64, 1024)) / 2) as f64 / 0.9;
        let d = decide(&shape(), &run(128, 1024), &policy(budget as u64)).unwrap();
        assert!(d.fits);
        assert_eq!((d.effective.nsamples, d.effective.seqlen), (32, 1024));
        // Batch 8 → 4 → 2 → 1, then 128 → 64 → 32.
        assert_eq!(
            keys(&d),
            [
                "calibration.batch",
                "calibration.batch",
                "calibration.batch",
                "calibration.nsamples",
                "calibration.nsamples"
            ]
        );
        assert_eq!(
            (d.steps[4].from.as_str(), d.steps[4].to.as_str()),
            ("64", "32")
        );
    }

    #[test]
    fn a_streamed_evaluation_halves_its_group_of_windows_to_fit() {
        let eval_only = |group| PruneRun {
            method: None,
            streaming: true,
            eval_seqlen: Some(1024),
            eval_group: group,
            expert_removal: None,
            ..run(8, 256)
        };
        let peak_of = |group| estimate_prune(&shape(), &eval_only(group)).peak(Place::Device);
        assert_eq!(peak_of(64).0, "eval");
        // Each window's residual stream is 1024 × 64 × 4 B.
        assert_eq!(peak_of(128).1 - peak_of(64).1, 64 * 1024 * 64 * 4);
        let budget = ((peak_of(64).1 + peak_of(128).1) / 2) as f64 / 0.9;
        let d = decide(&shape(), &eval_only(1024), &policy(budget as u64)).unwrap();
        assert!(d.fits);
        assert_eq!(d.effective.eval_group, 64);
        assert_eq!(keys(&d), ["evaluation.group"; 4]);
        // Where it fits, every window stays in one group.
        let roomy = decide(&shape(), &eval_only(1024), &policy(budget as u64 * 8)).unwrap();
        assert_eq!((roomy.effective.eval_group, roomy.steps.len()), (1024, 0));
    }

    #[test]
    fn seqlen_halves_once_nsamples_is_at_its_floor() {
        let budget = ((peak(8, 512) + peak(8, 1024)) / 2) as f64 / 0.9;
        let d = decide(&shape(), &run(128, 1024), &policy(budget as u64)).unwrap();
        assert!(d.fits);
        assert_eq!((d.effective.nsamples, d.effective.seqlen), (8, 512));
    }

    #[test]
    fn streaming_comes_last_and_nothing_fitting_reports_the_smallest_budget() {
        let d = decide(&shape(), &run(128, 1024), &policy(1 << 20)).unwrap();
        assert!(!d.fits);
        assert_eq!((d.effective.nsamples, d.effective.seqlen), (8, 256));
        assert!(d.effective.streaming);
        assert_eq!(d.steps.last().unwrap().key, "streaming");
        // At the smallest budget reported, the same settings fit.
        let again = decide(&shape(), &d.effective, &policy(d.smallest_budget)).unwrap();
        assert!(again.fits && again.steps.is_empty());
    }

    #[test]
    fn a_long_eval_window_is_refused_unless_the_pipeline_allows_it() {
        let mut r = run(8, 256);
        r.eval_seqlen = Some(4096);
        assert_eq!(
            decide(&shape(), &r, &policy(1 << 40)),
            Err(GateError::EvalSeqlenTooLong {
                seqlen: 4096,
                context: 1024
            })
        );
        let mut p = policy(1 << 40);
        p.reduce.push(ReduceKey::EvalSeqlen);
        assert_eq!(
            decide(&shape(), &r, &p).unwrap().effective.eval_seqlen,
            Some(1024)
        );
    }
}
