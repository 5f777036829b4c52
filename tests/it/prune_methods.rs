//! Per-layer sparsity (OWL and explicit profiles), DSnoT and the weight-update ablation on a tiny
//! model, through the layer-wise driver: OWL's ratios reach the layers, an explicit profile
//! reproduces them, λ = 0 is uniform, DSnoT without cycles is its initial method and refines only
//! what it should, a sequential update keeps its method's mask and moves the kept weights.

use wanda::model::decoder::Llama;
use wanda::prune::dsnot::{DsnotLayers, DsnotOptions};
use wanda::prune::layerwise::{prune_model, ModelSparsity};
use wanda::prune::profile::{OwlOptions, Profile};
use wanda::prune::WeightUpdate;
use wanda::prune::{Method, MethodOptions, PruneError, Sparsity};

use crate::common::{tiny_config, tiny_model, B};

/// Six calibration windows of 16 tokens over the 32-token vocabulary.
fn windows() -> Vec<Vec<u32>> {
    (0..6u32)
        .map(|s| (0..16u32).map(|t| (s * 13 + t * 7 + 1) % 32).collect())
        .collect()
}

/// Every prunable weight of the model, linear by linear.
fn all_weights(m: &Llama<B>) -> Vec<(String, Vec<f32>)> {
    m.layers
        .iter()
        .enumerate()
        .flat_map(|(i, layer)| {
            layer.linears().into_iter().map(move |(name, _, linear)| {
                let w: Vec<f32> = linear.weight.val().into_data().to_vec().unwrap();
                (format!("{i}.{name}"), w)
            })
        })
        .collect()
}

/// Input channels of a linear of the tiny model (hidden 16, MLP 24).
fn input_width(path: &str) -> usize {
    if path.ends_with("down_proj") {
        24
    } else {
        16
    }
}

fn pruned_with(
    method: Method,
    options: &MethodOptions,
    sparsity: Sparsity,
) -> (Llama<B>, ModelSparsity) {
    let mut model = tiny_model(&tiny_config("LlamaForCausalLM", true), 7);
    let report = prune_model(
        &mut model,
        method,
        options,
        sparsity,
        &windows(),
        2,
        |_, _| {},
    )
    .unwrap();
    (model, report)
}

fn with_profile(profile: Profile) -> MethodOptions {
    MethodOptions {
        profile,
        ..MethodOptions::default()
    }
}

/// OWL at M = 2 (the tiny model's random weights have no scores past the paper's 5× the mean)
/// and the paper's λ = 0.08.
fn owl_at_m2() -> MethodOptions {
    with_profile(Profile::Owl(OwlOptions {
        m: 2.0,
        lambda: 0.08,
    }))
}

#[test]
fn owl_spreads_the_target_over_layers_and_an_explicit_profile_reproduces_it() {
    let half = Sparsity::unstructured(0.5).unwrap();
    let (model, report) = pruned_with(Method::Wanda, &owl_at_m2(), half);
    assert_eq!(report.outlier_ratios.len(), 2);
    assert_ne!(report.outlier_ratios[0], report.outlier_ratios[1]);
    // Two layers: min-max puts them at 0 and 2λ, so the sparsities are 0.5 ± 0.08, the layer
    // with more outliers pruned less.
    let t = &report.layer_targets;
    let more = usize::from(report.outlier_ratios[1] > report.outlier_ratios[0]);
    assert!(
        (t[more] - 0.42).abs() < 1e-12 && (t[1 - more] - 0.58).abs() < 1e-12,
        "{t:?}"
    );
    // Each linear keeps in − floor(in × its layer's ratio) per output channel.
    for (path, r) in &report.per_linear {
        let layer: usize = path["model.layers.".len()..][..1].parse().unwrap();
        let inputs = input_width(path);
        let kept = inputs - (inputs as f64 * t[layer]) as usize;
        assert_eq!((r.min_kept, r.max_kept), (kept, kept), "{path}");
    }
    // The same ratios given explicitly prune the same weights.
    let explicit = with_profile(Profile::Layers(t.clone()));
    let (again, _) = pruned_with(Method::Wanda, &explicit, half);
    assert_eq!(all_weights(&again), all_weights(&model));
    // λ = 0 is uniform.
    let flat = with_profile(Profile::Owl(OwlOptions {
        m: 5.0,
        lambda: 0.0,
    }));
    let (flat, _) = pruned_with(Method::Wanda, &flat, half);
    let (uniform, _) = pruned_with(Method::Wanda, &MethodOptions::default(), half);
    assert_eq!(all_weights(&flat), all_weights(&uniform));
}

/// Magnitude under OWL takes its layer ratios from the calibration pass and then prunes as
/// plain magnitude would at those ratios (no calibration pass of its own after OWL's).
#[test]
fn magnitude_under_owl_is_magnitude_at_owls_ratios() {
    let half = Sparsity::unstructured(0.5).unwrap();
    let (model, report) = pruned_with(Method::Magnitude, &owl_at_m2(), half);
    assert_eq!(report.outlier_ratios.len(), 2);
    let t = &report.layer_targets;
    assert!((t[0] - t[1]).abs() > 0.1, "{t:?}");
    let explicit = with_profile(Profile::Layers(t.clone()));
    let (again, _) = pruned_with(Method::Magnitude, &explicit, half);
    assert_eq!(all_weights(&again), all_weights(&model));
}

/// Progress counts OWL's dense pass as the first half of the steps, for every method under it,
/// and a layer per step without it.
#[test]
fn progress_counts_owls_pass_then_the_pruning_pass() {
    let half = Sparsity::unstructured(0.5).unwrap();
    let owl = with_profile(Profile::Owl(OwlOptions::default()));
    let steps = |method, options: &MethodOptions| {
        let mut model = tiny_model(&tiny_config("LlamaForCausalLM", true), 7);
        let mut seen = Vec::new();
        prune_model(&mut model, method, options, half, &windows(), 2, |d, t| {
            seen.push((d, t))
        })
        .unwrap();
        seen
    };
    for method in [Method::Wanda, Method::Magnitude, Method::Sparsegpt] {
        assert_eq!(
            steps(method, &owl),
            [(1, 4), (2, 4), (3, 4), (4, 4)],
            "{method}"
        );
        assert_eq!(steps(method, &MethodOptions::default()), [(1, 2), (2, 2)]);
    }
}

#[test]
fn explicit_ranges_set_each_layer_and_bad_profiles_are_refused() {
    let ranges: Profile = serde_json::from_str(r#"{"0": 0.25, "1": 0.75}"#).unwrap();
    let (_, report) = pruned_with(
        Method::Magnitude,
        &with_profile(ranges.clone()),
        Sparsity::unstructured(0.5).unwrap(),
    );
    assert_eq!(report.layer_targets, vec![0.25, 0.75]);
    assert!(
        report.per_layer[0] < 0.4 && report.per_layer[1] > 0.7,
        "{:?}",
        report.per_layer
    );
    let mut model = tiny_model(&tiny_config("LlamaForCausalLM", true), 7);
    let mut run = |options: &MethodOptions, sparsity| {
        prune_model(
            &mut model,
            Method::Wanda,
            options,
            sparsity,
            &windows(),
            2,
            |_, _| {},
        )
        .unwrap_err()
    };
    let err = run(
        &with_profile(ranges.clone()),
        Sparsity::unstructured(0.6).unwrap(),
    );
    assert!(
        err.to_string().contains("mean over its layers is 0.5000"),
        "{err}"
    );
    let err = run(&with_profile(ranges), Sparsity::nm(2, 4).unwrap());
    assert!(err.to_string().contains("pattern `2:4` fixes one"), "{err}");
    let three = with_profile(Profile::Layers(vec![0.5; 3]));
    let err = run(&three, Sparsity::unstructured(0.5).unwrap());
    assert!(
        err.to_string().contains("model has 2 decoder layers"),
        "{err}"
    );
}

#[test]
fn magnitude_with_owl_or_dsnot_needs_calibration() {
    let mut model = tiny_model(&tiny_config("LlamaForCausalLM", true), 7);
    for options in [
        with_profile(Profile::Owl(OwlOptions::default())),
        MethodOptions {
            dsnot: Some(DsnotOptions::default()),
            ..MethodOptions::default()
        },
    ] {
        let half = Sparsity::unstructured(0.5).unwrap();
        let err = prune_model(
            &mut model,
            Method::Magnitude,
            &options,
            half,
            &[],
            2,
            |_, _| {},
        )
        .unwrap_err();
        assert!(matches!(err, PruneError::NoSamples { .. }), "{err}");
    }
}

#[test]
fn dsnot_starts_from_its_method_and_refines_the_attention_linears() {
    for sparsity in [
        Sparsity::unstructured(0.5).unwrap(),
        Sparsity::nm(2, 4).unwrap(),
    ] {
        let (wanda, _) = pruned_with(Method::Wanda, &MethodOptions::default(), sparsity);
        let dsnot = |dsnot| MethodOptions {
            dsnot: Some(dsnot),
            ..MethodOptions::default()
        };
        let none = DsnotOptions {
            cycles: 0,
            ..DsnotOptions::default()
        };
        let (still, _) = pruned_with(Method::Wanda, &dsnot(none), sparsity);
        assert_eq!(
            all_weights(&still),
            all_weights(&wanda),
            "{sparsity}: no cycles"
        );
        let (refined, report) =
            pruned_with(Method::Wanda, &dsnot(DsnotOptions::default()), sparsity);
        let (mut changed, mut total) = (0, 0);
        for ((name, a), (_, b)) in all_weights(&refined).iter().zip(all_weights(&wanda).iter()) {
            // Layer 1's inputs differ once layer 0's attention is refined, so only layer 0's
            // MLP must match Wanda's exactly.
            if name.starts_with("0.mlp.") {
                assert_eq!(a, b, "{sparsity}: {name} is not refined by default");
            } else if a != b {
                changed += 1;
            }
            total += 1;
        }
        assert!(
            changed > 0,
            "{sparsity}: DSnoT changed no attention mask of {total}"
        );
        // Swaps keep the per-output counts (and N:M groups).
        for (path, r) in &report.per_linear {
            let inputs = input_width(path);
            let per_row = match sparsity {
                Sparsity::Unstructured { ratio } => inputs - (inputs as f64 * ratio) as usize,
                Sparsity::NM { n, m } => inputs / m * (m - n),
            };
            assert_eq!(
                (r.min_kept, r.max_kept),
                (per_row, per_row),
                "{sparsity}: {path}"
            );
        }
        // With every linear refined, the MLP changes too.
        let all = DsnotOptions {
            layers: DsnotLayers::All,
            ..DsnotOptions::default()
        };
        let (everything, _) = pruned_with(Method::Wanda, &dsnot(all), sparsity);
        let mlp_changed = all_weights(&everything)
            .iter()
            .zip(all_weights(&wanda).iter())
            .any(|((name, a), (_, b))| name.contains(".mlp.") && a != b);
        assert!(mlp_changed, "{sparsity}: `layers: all` refines the MLP too");
    }
}

fn with_update(update: WeightUpdate) -> MethodOptions {
    MethodOptions {
        weight_update: Some(update),
        ..MethodOptions::default()
    }
}

fn zeros(weights: &[(String, Vec<f32>)]) -> Vec<(String, Vec<bool>)> {
    weights
        .iter()
        .map(|(name, w)| (name.clone(), w.iter().map(|v| *v == 0.0).collect()))
        .collect()
}

/// Magnitude's mask depends on the weights alone, so its sequential update prunes exactly
/// magnitude's weights in every layer, and changes the weights it keeps.
#[test]
fn a_sequential_update_of_magnitude_keeps_its_mask_and_moves_the_kept_weights() {
    let dense = all_weights(&tiny_model(&tiny_config("LlamaForCausalLM", true), 7));
    for sparsity in [
        Sparsity::unstructured(0.5).unwrap(),
        Sparsity::nm(2, 4).unwrap(),
    ] {
        let (plain, plain_report) =
            pruned_with(Method::Magnitude, &MethodOptions::default(), sparsity);
        let update = with_update(WeightUpdate::Sequential);
        let (updated, report) = pruned_with(Method::Magnitude, &update, sparsity);
        assert_eq!(zeros(&all_weights(&updated)), zeros(&all_weights(&plain)));
        assert_eq!(report.total, plain_report.total, "{sparsity}");
        for ((name, u), (_, d)) in all_weights(&updated).iter().zip(&dense) {
            let moved = u
                .iter()
                .zip(d)
                .filter(|(u, d)| **u != 0.0 && u != d)
                .count();
            // A linear's first input block has no earlier pruned channel to correct it; every
            // linear here is one block, and its later channels move.
            assert!(
                moved > 0,
                "{sparsity}: {name} kept its weights as they were"
            );
        }
    }
}

/// One calibration sample makes the reference's weighted statistic Wanda's own (×2), so layer
/// 0 starts from Wanda's mask; the iterative update reaches the target in every linear.
#[test]
fn a_wanda_update_starts_from_wandas_mask_and_iterative_reaches_the_target() {
    let one = &windows()[..1];
    let run = |options: &MethodOptions, sparsity| {
        let mut model = tiny_model(&tiny_config("LlamaForCausalLM", true), 7);
        let report = prune_model(
            &mut model,
            Method::Wanda,
            options,
            sparsity,
            one,
            1,
            |_, _| {},
        )
        .unwrap();
        (all_weights(&model), report)
    };
    let half = Sparsity::unstructured(0.5).unwrap();
    let (plain, _) = run(&MethodOptions::default(), half);
    let (seq, _) = run(&with_update(WeightUpdate::Sequential), half);
    let layer0 = |w: &[(String, Vec<f32>)]| -> Vec<(String, Vec<bool>)> {
        zeros(w)
            .into_iter()
            .filter(|(n, _)| n.starts_with("0."))
            .collect()
    };
    assert_eq!(layer0(&seq), layer0(&plain));
    assert_ne!(seq, plain);
    for sparsity in [half, Sparsity::nm(2, 4).unwrap()] {
        let (iter, report) = run(&with_update(WeightUpdate::Iterative), sparsity);
        assert_ne!(
            zeros(&iter),
            zeros(&plain),
            "{sparsity}: the metric reads updated weights"
        );
        for (path, r) in &report.per_linear {
            // One block per linear: at least half of it (ties at the threshold go too).
            assert!(r.fraction >= 0.5, "{sparsity}: {path} at {}", r.fraction);
            if let Sparsity::NM { m, n } = sparsity {
                let per_row = input_width(path) / m * (m - n);
                assert!(r.max_kept <= per_row, "{sparsity}: {path}");
            }
        }
    }
}

#[test]
fn a_weight_update_is_refused_where_the_reference_has_none() {
    let mut model = tiny_model(&tiny_config("LlamaForCausalLM", true), 7);
    let half = Sparsity::unstructured(0.5).unwrap();
    let update = Some(WeightUpdate::Iterative);
    let cases = [
        (
            Method::Sparsegpt,
            MethodOptions::default(),
            "method `sparsegpt`",
        ),
        (Method::Ria, MethodOptions::default(), "method `ria`"),
        (
            Method::Wanda,
            MethodOptions {
                use_variant: true,
                ..MethodOptions::default()
            },
            "`use_variant`",
        ),
        (
            Method::Wanda,
            MethodOptions {
                dsnot: Some(DsnotOptions::default()),
                ..MethodOptions::default()
            },
            "`dsnot`",
        ),
        (Method::Magnitude, owl_at_m2(), "profile `owl`"),
    ];
    for (method, options, names) in cases {
        let options = MethodOptions {
            weight_update: update,
            ..options
        };
        let err =
            prune_model(&mut model, method, &options, half, &windows(), 2, |_, _| {}).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, PruneError::InvalidOptions { .. })
                && text.contains("`weight_update: iterative`")
                && text.contains(names),
            "{text}"
        );
    }
}
