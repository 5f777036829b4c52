//! Per-layer sparsity: `prune: { sparsity: 0.7, profile: … }` spreads the target over the
//! decoder layers — the same ratio everywhere (`uniform`), an explicit ratio per layer, or OWL's
//! outlier-weighed ratios (Yin et al. 2024, arXiv 2310.05175, repository luuyin/OWL
//! `prune_wanda_outlier`).
//!
//! The mean that is kept at the target is the mean over decoder layers. Every decoder layer of
//! the families wanda runs holds the same number of prunable weights, so this is also the mean
//! over the prunable weights.
//!
//! OWL, as the reference computes it: the outlier ratio of a layer is the percentage of the Wanda
//! scores `|W|·sqrt(scaler_row)` of all its linears pooled together that are strictly greater
//! than `M` times their mean, measured on the dense model; the ratios are min-max scaled to
//! `[0, 2λ]`, shifted so that their mean is the target density `1 − s`, and layer `i` is pruned
//! at `1 − r_i`, raised to 0.01 where that is not positive. More outliers, less pruning.

use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::PruneError;

/// How far an explicit profile's mean may sit from the stage's `sparsity`.
pub const MEAN_TOLERANCE: f64 = 0.005;

/// How the target sparsity is spread over the decoder layers.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Profile {
    /// Every layer at the target.
    #[default]
    Uniform,
    /// OWL's outlier-weighed ratios.
    Owl(OwlOptions),
    /// One ratio per decoder layer, in order.
    Layers(Vec<f64>),
    /// Ratios for inclusive layer ranges, e.g. `{ "0-3": 0.3, "4-29": 0.55 }`.
    Ranges(Vec<LayerRange>),
}

/// A ratio for the decoder layers `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerRange {
    /// First layer of the range.
    pub first: usize,
    /// Last layer of the range (inclusive).
    pub last: usize,
    /// Sparsity of each layer in it.
    pub ratio: f64,
}

/// OWL's two settings, with the paper's and the reference README's values as defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OwlOptions {
    /// A score is an outlier above `m` times the layer's mean score (the reference's `Hyper_m`;
    /// 5 as in the paper and README, where its argparse default is 3).
    #[serde(default = "default_owl_m")]
    pub m: f64,
    /// The layer ratios range over `2λ` around the target (the reference's `Lamda`).
    #[serde(default = "default_owl_lambda")]
    pub lambda: f64,
}

fn default_owl_m() -> f64 {
    5.0
}

fn default_owl_lambda() -> f64 {
    0.08
}

impl Default for OwlOptions {
    fn default() -> Self {
        Self {
            m: default_owl_m(),
            lambda: default_owl_lambda(),
        }
    }
}

impl Profile {
    /// Whether every layer gets the target.
    pub fn is_uniform(&self) -> bool {
        *self == Profile::Uniform
    }

    /// OWL's settings when this profile is OWL.
    pub fn owl(&self) -> Option<OwlOptions> {
        match self {
            Profile::Owl(o) => Some(*o),
            _ => None,
        }
    }

    /// The short name tables and logs use: `uniform`, `owl` or `explicit`.
    pub fn label(&self) -> &'static str {
        match self {
            Profile::Uniform => "uniform",
            Profile::Owl(_) => "owl",
            Profile::Layers(_) | Profile::Ranges(_) => "explicit",
        }
    }

    /// Checks what can be checked without the model: ratios in `[0, 1)`, ranges well formed
    /// and not overlapping, OWL settings positive.
    pub fn validate(&self) -> Result<(), PruneError> {
        let bad = |reason: String| Err(PruneError::InvalidProfile { reason });
        let check_ratio = |r: f64, at: String| {
            if (0.0..1.0).contains(&r) {
                Ok(())
            } else {
                bad(format!("{at} has sparsity {r}, outside [0, 1)"))
            }
        };
        match self {
            Profile::Uniform => Ok(()),
            Profile::Owl(o) => {
                if !(o.m.is_finite() && o.m > 0.0) {
                    return bad(format!("owl `m` must be a positive number, got {}", o.m));
                }
                if !(o.lambda.is_finite() && o.lambda >= 0.0) {
                    return bad(format!(
                        "owl `lambda` must be a non-negative number, got {}",
                        o.lambda
                    ));
                }
                Ok(())
            }
            Profile::Layers(ratios) => {
                if ratios.is_empty() {
                    return bad("the list of layer ratios is empty".into());
                }
                for (i, &r) in ratios.iter().enumerate() {
                    check_ratio(r, format!("layer {i}"))?;
                }
                Ok(())
            }
            Profile::Ranges(ranges) => {
                if ranges.is_empty() {
                    return bad("the map of layer ranges is empty".into());
                }
                let mut sorted = ranges.clone();
                sorted.sort_by_key(|r| r.first);
                for r in &sorted {
                    if r.first > r.last {
                        return bad(format!(
                            "range `{}` runs backwards; write it as `{}-{}`",
                            r.key(),
                            r.last,
                            r.first
                        ));
                    }
                    check_ratio(r.ratio, format!("range `{}`", r.key()))?;
                }
                for pair in sorted.windows(2) {
                    if pair[1].first <= pair[0].last {
                        return bad(format!(
                            "ranges `{}` and `{}` overlap",
                            pair[0].key(),
                            pair[1].key()
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// The mean of an explicit profile over the layers it names, when they run from 0 without
    /// a gap (so it needs no model to know); `None` otherwise.
    pub fn declared_mean(&self) -> Option<f64> {
        let ratios: Vec<f64> = match self {
            Profile::Layers(ratios) => ratios.clone(),
            Profile::Ranges(ranges) => {
                let mut sorted = ranges.clone();
                sorted.sort_by_key(|r| r.first);
                let mut next = 0;
                let mut out = Vec::new();
                for r in sorted {
                    if r.first != next || r.last < r.first {
                        return None;
                    }
                    out.extend(std::iter::repeat_n(r.ratio, r.last - r.first + 1));
                    next = r.last + 1;
                }
                out
            }
            Profile::Uniform | Profile::Owl(_) => return None,
        };
        (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64)
    }

    /// Checks that an explicit profile's `mean` is within [`MEAN_TOLERANCE`] of `target`.
    pub fn explicit_ratios_mean_check(&self, mean: f64, target: f64) -> Result<(), PruneError> {
        if (mean - target).abs() > MEAN_TOLERANCE {
            return Err(PruneError::InvalidProfile {
                reason: format!(
                    "the profile's mean over its layers is {mean:.4}, and `sparsity` is \
                     {target}; set `sparsity: {mean:.4}` or change the profile"
                ),
            });
        }
        Ok(())
    }

    /// The ratio of each of `layers` decoder layers for an explicit profile (`None` for
    /// uniform and OWL). Every layer must be named exactly once, and the mean must be within
    /// [`MEAN_TOLERANCE`] of `target`, the stage's `sparsity`.
    pub fn explicit_ratios(
        &self,
        layers: usize,
        target: f64,
    ) -> Result<Option<Vec<f64>>, PruneError> {
        self.validate()?;
        let ratios = match self {
            Profile::Uniform | Profile::Owl(_) => return Ok(None),
            Profile::Layers(ratios) => {
                if ratios.len() != layers {
                    return Err(PruneError::InvalidProfile {
                        reason: format!(
                            "the profile lists {} layer ratios, and the model has {layers} \
                             decoder layers; give one ratio per layer",
                            ratios.len()
                        ),
                    });
                }
                ratios.clone()
            }
            Profile::Ranges(ranges) => {
                let mut ratios = vec![None; layers];
                for r in ranges {
                    if r.last >= layers {
                        return Err(PruneError::InvalidProfile {
                            reason: format!(
                                "range `{}` reaches past the last decoder layer, {}",
                                r.key(),
                                layers.saturating_sub(1)
                            ),
                        });
                    }
                    for slot in &mut ratios[r.first..=r.last] {
                        *slot = Some(r.ratio);
                    }
                }
                if let Some(missing) = ratios.iter().position(Option::is_none) {
                    return Err(PruneError::InvalidProfile {
                        reason: format!(
                            "no range covers decoder layer {missing} (the model has layers \
                             0-{}); every layer needs a ratio",
                            layers - 1
                        ),
                    });
                }
                ratios.into_iter().flatten().collect()
            }
        };
        let mean = ratios.iter().sum::<f64>() / layers.max(1) as f64;
        self.explicit_ratios_mean_check(mean, target)?;
        Ok(Some(ratios))
    }
}

impl LayerRange {
    /// The range as a map key: `"3"` or `"0-3"`.
    pub fn key(&self) -> String {
        if self.first == self.last {
            self.first.to_string()
        } else {
            format!("{}-{}", self.first, self.last)
        }
    }

    fn parse(key: &str, ratio: f64) -> Option<LayerRange> {
        let (a, b) = key.split_once('-').unwrap_or((key, key));
        Some(LayerRange {
            first: a.trim().parse().ok()?,
            last: b.trim().parse().ok()?,
            ratio,
        })
    }
}

/// OWL's outlier ratio of one layer, in percent: how many of the pooled scores are strictly
/// greater than `m` times their mean. The mean is summed in f64 and rounded to f32, and the
/// threshold is `mean · m` in f32, as the reference's f32 `torch.mean(W) * M` (to an ulp).
pub fn outlier_ratio(scores: &[f32], m: f64) -> f64 {
    if scores.is_empty() {
        return 0.0;
    }
    let mean = (scores.iter().map(|&s| f64::from(s)).sum::<f64>() / scores.len() as f64) as f32;
    let threshold = mean * m as f32;
    let count = scores.iter().filter(|&&s| s > threshold).count();
    count as f64 / scores.len() as f64 * 100.0
}

/// OWL's layer sparsities from the layers' outlier ratios, in the reference's float64 order:
/// `r = (r − min) · (1/(max − min) · λ · 2)`, `r = r − mean(r) + (1 − target)`, sparsity
/// `1 − r`, and 0.01 where that is not positive. All layers at the target when every ratio is
/// the same (the reference divides by zero there).
pub fn owl_sparsities(outlier_ratios: &[f64], target: f64, lambda: f64) -> Vec<f64> {
    let min = outlier_ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = outlier_ratios
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    if outlier_ratios.is_empty() || max <= min {
        return vec![target; outlier_ratios.len()];
    }
    let factor = 1.0 / (max - min) * lambda * 2.0;
    let scaled: Vec<f64> = outlier_ratios.iter().map(|r| (r - min) * factor).collect();
    let mean = numpy_mean(&scaled);
    scaled
        .iter()
        .map(|r| {
            let sparsity = 1.0 - (r - mean + (1.0 - target));
            if sparsity <= 0.0 {
                0.01
            } else {
                sparsity
            }
        })
        .collect()
}

/// `np.mean` of a float64 vector: numpy's pairwise sum (eight partial sums for up to 128
/// values, halves above), then `/ n`. The last bit matters because the reference's ratios go
/// through it.
fn numpy_mean(values: &[f64]) -> f64 {
    fn pairwise(a: &[f64]) -> f64 {
        let n = a.len();
        if n < 8 {
            a.iter().fold(0.0, |s, &v| s + v)
        } else if n <= 128 {
            let mut r = [0.0f64; 8];
            r.copy_from_slice(&a[..8]);
            let whole = n - n % 8;
            for chunk in a[8..whole].chunks_exact(8) {
                for (acc, &v) in r.iter_mut().zip(chunk) {
                    *acc += v;
                }
            }
            let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
            for &v in &a[whole..] {
                res += v;
            }
            res
        } else {
            let half = (n / 2) - (n / 2) % 8;
            pairwise(&a[..half]) + pairwise(&a[half..])
        }
    }
    pairwise(values) / values.len().max(1) as f64
}

impl Serialize for Profile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Profile::Uniform => s.serialize_str("uniform"),
            Profile::Owl(o) if *o == OwlOptions::default() => s.serialize_str("owl"),
            Profile::Owl(o) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("owl", o)?;
                map.end()
            }
            Profile::Layers(ratios) => ratios.serialize(s),
            Profile::Ranges(ranges) => {
                let mut map = s.serialize_map(Some(ranges.len()))?;
                for r in ranges {
                    map.serialize_entry(&r.key(), &r.ratio)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Profile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ProfileVisitor;
        impl<'de> Visitor<'de> for ProfileVisitor {
            type Value = Profile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "`uniform`, `owl`, `{ owl: { m, lambda } }`, a list of per-layer ratios, or \
                     a map of layer ranges to ratios such as `{ \"0-3\": 0.3, \"4-29\": 0.55 }`",
                )
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Profile, E> {
                match s {
                    "uniform" => Ok(Profile::Uniform),
                    "owl" => Ok(Profile::Owl(OwlOptions::default())),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Profile, A::Error> {
                let mut ratios = Vec::new();
                while let Some(r) = seq.next_element::<f64>()? {
                    ratios.push(r);
                }
                Ok(Profile::Layers(ratios))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Profile, A::Error> {
                let mut ranges = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "owl" {
                        if !ranges.is_empty() {
                            return Err(de::Error::custom(
                                "`owl` cannot be mixed with layer ranges",
                            ));
                        }
                        let owl: OwlOptions = map.next_value()?;
                        if map.next_key::<String>()?.is_some() {
                            return Err(de::Error::custom(
                                "`owl` cannot be mixed with layer ranges",
                            ));
                        }
                        return Ok(Profile::Owl(owl));
                    }
                    let ratio: f64 = map.next_value()?;
                    let range = LayerRange::parse(&key, ratio).ok_or_else(|| {
                        de::Error::custom(format!(
                            "`{key}` is not a layer range; write `3` or `0-3`, or use `owl`"
                        ))
                    })?;
                    ranges.push(range);
                }
                Ok(Profile::Ranges(ranges))
            }
        }
        d.deserialize_any(ProfileVisitor)
    }
}

impl JsonSchema for Profile {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Profile".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let owl = generator.subschema_for::<OwlOptions>();
        json_schema!({
            "description": "How the target sparsity is spread over decoder layers: `uniform`, \
                `owl` (outlier-weighed, arXiv 2310.05175), `{ owl: { m, lambda } }`, one ratio \
                per layer, or ratios per inclusive layer range (`{ \"0-3\": 0.3 }`); the mean \
                over layers stays at `sparsity`.",
            "oneOf": [
                { "enum": ["uniform", "owl"] },
                { "type": "array", "items": { "type": "number", "minimum": 0.0, "exclusiveMaximum": 1.0 }, "minItems": 1 },
                { "type": "object", "properties": { "owl": owl }, "required": ["owl"], "additionalProperties": false },
                {
                    "type": "object",
                    "patternProperties": { "^[0-9]+(-[0-9]+)?$": { "type": "number", "minimum": 0.0, "exclusiveMaximum": 1.0 } },
                    "additionalProperties": false,
                    "minProperties": 1
                }
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-computed: ratios 1, 2, 3, 6 % (min 1, max 6) scale by 1/5·0.08·2 = 0.032 to
    /// 0, 0.032, 0.064, 0.16 (mean 0.064); at target 0.7 the densities are
    /// r − 0.064 + 0.3 = 0.236, 0.268, 0.3, 0.396, so the sparsities are 0.764, 0.732, 0.7, 0.604.
    #[test]
    fn owl_ratios_by_hand() {
        let s = owl_sparsities(&[1.0, 2.0, 3.0, 6.0], 0.7, 0.08);
        let want = [0.764, 0.732, 0.7, 0.604];
        for (got, want) in s.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{s:?}");
        }
        let mean = s.iter().sum::<f64>() / 4.0;
        assert!((mean - 0.7).abs() < 1e-12);
        // More outliers, less pruning; the spread is 2λ.
        assert!((s[0] - s[3] - 0.16).abs() < 1e-12);
    }

    #[test]
    fn owl_clamps_and_degenerates_like_the_reference_should() {
        // At target 0.05 with λ 0.08 the most outlier-heavy layer would go negative: 0.01.
        let s = owl_sparsities(&[0.0, 10.0], 0.05, 0.08);
        assert!((s[0] - 0.13).abs() < 1e-12 && s[1] == 0.01, "{s:?}");
        // Equal ratios: every layer at the target (the reference would divide by zero).
        assert_eq!(owl_sparsities(&[4.0, 4.0, 4.0], 0.5, 0.08), vec![0.5; 3]);
        // λ = 0: every layer at the target.
        let s = owl_sparsities(&[1.0, 5.0, 2.0], 0.6, 0.0);
        assert!(s.iter().all(|&x| (x - 0.6).abs() < 1e-15), "{s:?}");
    }

    /// Scores 1 ×9 and 100: mean 10.9, so at m = 5 (threshold 54.5) one score of ten is an
    /// outlier, 10 %; at m = 10 (threshold 109) none is.
    #[test]
    fn outlier_ratio_by_hand() {
        let mut scores = vec![1.0f32; 9];
        scores.push(100.0);
        assert_eq!(outlier_ratio(&scores, 5.0), 10.0);
        assert_eq!(outlier_ratio(&scores, 10.0), 0.0);
        // Strictly greater: all equal scores are never outliers at m = 1.
        assert_eq!(outlier_ratio(&[2.0; 4], 1.0), 0.0);
        assert_eq!(outlier_ratio(&[], 5.0), 0.0);
    }

    /// numpy's pairwise mean differs from a left-to-right sum in the last bit for these 32
    /// values (checked with numpy 2.4: `np.mean(np.arange(32) * 0.1 + 1e-3)` is
    /// 1.551, a plain left-to-right sum gives 1.5510000000000002).
    #[test]
    fn mean_is_numpys_pairwise_mean() {
        let v: Vec<f64> = (0..32).map(|i| i as f64 * 0.1 + 1e-3).collect();
        let naive = v.iter().sum::<f64>() / 32.0;
        let numpy = numpy_mean(&v);
        assert_eq!(numpy, 1.551);
        assert_ne!(numpy, naive);
        assert_eq!(numpy_mean(&[1.0, 2.0, 4.0]), 7.0 / 3.0);
    }

    #[test]
    fn explicit_profiles_resolve_or_say_what_is_wrong() {
        let ranges: Profile = serde_json::from_str(r#"{"0-1": 0.3, "2-3": 0.7}"#).unwrap();
        assert_eq!(
            ranges.explicit_ratios(4, 0.5).unwrap(),
            Some(vec![0.3, 0.3, 0.7, 0.7])
        );
        let err = ranges.explicit_ratios(5, 0.5).unwrap_err().to_string();
        assert!(err.contains("no range covers decoder layer 4"), "{err}");
        let err = ranges.explicit_ratios(4, 0.6).unwrap_err().to_string();
        assert!(err.contains("mean over its layers is 0.5000"), "{err}");
        let err = ranges.explicit_ratios(2, 0.5).unwrap_err().to_string();
        assert!(err.contains("range `2-3` reaches past"), "{err}");
        let list = Profile::Layers(vec![0.4, 0.6]);
        assert_eq!(list.explicit_ratios(2, 0.5).unwrap(), Some(vec![0.4, 0.6]));
        let err = list.explicit_ratios(3, 0.5).unwrap_err().to_string();
        assert!(err.contains("lists 2 layer ratios"), "{err}");
        let overlap: Profile = serde_json::from_str(r#"{"0-2": 0.3, "2-3": 0.7}"#).unwrap();
        assert!(overlap
            .validate()
            .unwrap_err()
            .to_string()
            .contains("overlap"));
        let high = Profile::Layers(vec![0.5, 1.0]);
        assert!(high.validate().unwrap_err().to_string().contains("layer 1"));
        assert_eq!(Profile::Uniform.explicit_ratios(3, 0.5).unwrap(), None);
        assert!((ranges.declared_mean().unwrap() - 0.5).abs() < 1e-15);
        let gap: Profile = serde_json::from_str(r#"{"0-1": 0.3, "3": 0.7}"#).unwrap();
        assert_eq!(gap.declared_mean(), None);
    }

    #[test]
    fn forms_read_and_write_back() {
        for (text, want) in [
            (r#""uniform""#, Profile::Uniform),
            (r#""owl""#, Profile::Owl(OwlOptions::default())),
            (
                r#"{"owl":{"m":3.0,"lambda":0.2}}"#,
                Profile::Owl(OwlOptions {
                    m: 3.0,
                    lambda: 0.2,
                }),
            ),
            ("[0.4,0.6]", Profile::Layers(vec![0.4, 0.6])),
            (
                r#"{"0-3":0.3,"4":0.5}"#,
                Profile::Ranges(vec![
                    LayerRange {
                        first: 0,
                        last: 3,
                        ratio: 0.3,
                    },
                    LayerRange {
                        first: 4,
                        last: 4,
                        ratio: 0.5,
                    },
                ]),
            ),
        ] {
            let p: Profile = serde_json::from_str(text).unwrap();
            assert_eq!(p, want, "{text}");
            assert_eq!(serde_json::to_string(&p).unwrap(), text);
        }
        let owl_partial: Profile = serde_json::from_str(r#"{"owl":{"m":7}}"#).unwrap();
        assert_eq!(
            owl_partial,
            Profile::Owl(OwlOptions {
                m: 7.0,
                lambda: 0.08
            })
        );
        for bad in [r#""owls""#, r#"{"a-b": 0.3}"#, r#"{"owl": {"k": 1}}"#] {
            assert!(serde_json::from_str::<Profile>(bad).is_err(), "{bad}");
        }
    }
}
