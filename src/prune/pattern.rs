//! Sparsity patterns: an unstructured ratio, or N:M semi-structured groups as in the Wanda paper
//! (arXiv 2306.11695, §4) where "2:4" means 2 of every 4 consecutive weights are zero.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::PruneError;

/// A sparsity pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Pattern {
    /// Any weights, per output row.
    #[default]
    Unstructured,
    /// `n` of every `m` consecutive input weights.
    NM {
        /// Weights removed per group.
        n: u32,
        /// Group size.
        m: u32,
    },
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Unstructured => f.write_str("unstructured"),
            Pattern::NM { n, m } => write!(f, "{n}:{m}"),
        }
    }
}

impl Pattern {
    /// Parses `unstructured` or `N:M`.
    pub fn parse(text: &str) -> Option<Pattern> {
        if text == "unstructured" {
            return Some(Pattern::Unstructured);
        }
        let (n, m) = text.split_once(':')?;
        Some(Pattern::NM {
            n: n.trim().parse().ok()?,
            m: m.trim().parse().ok()?,
        })
    }
}

impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PatternVisitor;
        impl Visitor<'_> for PatternVisitor {
            type Value = Pattern;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`unstructured` or `N:M` such as `\"2:4\"`")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Pattern, E> {
                Pattern::parse(s).ok_or_else(|| E::invalid_value(Unexpected::Str(s), &self))
            }
        }
        d.deserialize_str(PatternVisitor)
    }
}

impl JsonSchema for Pattern {
    fn schema_name() -> Cow<'static, str> {
        "Pattern".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "`unstructured`, or `N:M`: N of every M consecutive input weights removed (quote it: \"2:4\").",
            "type": "string",
            "pattern": "^(unstructured|[0-9]+:[0-9]+)$"
        })
    }
}

/// What to prune.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sparsity {
    /// Prune a fraction `ratio` (0 ≤ ratio < 1) of the weights, anywhere.
    Unstructured {
        /// Fraction of weights to set to zero.
        ratio: f64,
    },
    /// In every group of `m` consecutive input channels of one output channel, zero `n` weights
    /// (the reference's `prune_n`, `prune_m`): "2:4" keeps 2 of every 4.
    NM {
        /// Weights zeroed per group.
        n: usize,
        /// Group size.
        m: usize,
    },
}

impl Sparsity {
    /// An unstructured pattern, checked.
    pub fn unstructured(ratio: f64) -> Result<Self, PruneError> {
        let s = Sparsity::Unstructured { ratio };
        s.validate()?;
        Ok(s)
    }

    /// An N:M pattern, checked.
    pub fn nm(n: usize, m: usize) -> Result<Self, PruneError> {
        let s = Sparsity::NM { n, m };
        s.validate()?;
        Ok(s)
    }

    /// The sparsity a pipeline's `pattern` and `sparsity` keys ask for: `unstructured` takes
    /// `ratio`; an N:M pattern ignores it (the reference requires 0.5 there but never uses it).
    pub fn from_pattern(pattern: Pattern, ratio: f64) -> Result<Self, PruneError> {
        match pattern {
            Pattern::Unstructured => Sparsity::unstructured(ratio),
            Pattern::NM { n, m } => Sparsity::nm(n as usize, m as usize),
        }
    }

    /// Checks `0 ≤ ratio < 1` or `0 < n < m`.
    pub fn validate(&self) -> Result<(), PruneError> {
        match *self {
            Sparsity::Unstructured { ratio } => {
                if (0.0..1.0).contains(&ratio) {
                    Ok(())
                } else {
                    Err(PruneError::RatioOutOfRange { ratio })
                }
            }
            Sparsity::NM { n, m } => {
                if n > 0 && n < m {
                    Ok(())
                } else {
                    Err(PruneError::InvalidNm { n, m })
                }
            }
        }
    }

    /// The fraction of weights the pattern zeroes (`n / m` for N:M).
    pub fn target_ratio(&self) -> f64 {
        match *self {
            Sparsity::Unstructured { ratio } => ratio,
            Sparsity::NM { n, m } => n as f64 / m as f64,
        }
    }
}

/// Formats as `"0.5"` or `"2:4"`, the forms [`FromStr`] reads back.
impl fmt::Display for Sparsity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sparsity::Unstructured { ratio } => write!(f, "{ratio}"),
            Sparsity::NM { n, m } => write!(f, "{n}:{m}"),
        }
    }
}

/// Reads `"n:m"` (e.g. `"2:4"`, `"4:8"`) as N:M and a bare number (e.g. `"0.5"`) as an
/// unstructured ratio.
impl FromStr for Sparsity {
    type Err = PruneError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains(':') {
            return parse_nm(s);
        }
        let ratio: f64 = s.trim().parse().map_err(|_| PruneError::InvalidPattern {
            input: s.to_string(),
            reason: "expected `n:m` such as `2:4`, or a ratio such as `0.5`".into(),
        })?;
        Sparsity::unstructured(ratio)
    }
}

/// Reads `unstructured` or a valid `n:m` (the command line's `--pattern`); an invalid pattern
/// is an error that says what is wrong.
impl FromStr for Pattern {
    type Err = PruneError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().eq_ignore_ascii_case("unstructured") {
            return Ok(Pattern::Unstructured);
        }
        match parse_nm(s)? {
            Sparsity::NM { n, m } => Ok(Pattern::NM {
                n: u32::try_from(n).map_err(|_| PruneError::InvalidNm { n, m })?,
                m: u32::try_from(m).map_err(|_| PruneError::InvalidNm { n, m })?,
            }),
            Sparsity::Unstructured { .. } => Ok(Pattern::Unstructured),
        }
    }
}

fn parse_nm(s: &str) -> Result<Sparsity, PruneError> {
    let invalid = |reason: &str| PruneError::InvalidPattern {
        input: s.to_string(),
        reason: reason.to_string(),
    };
    let (n, m) = s
        .trim()
        .split_once(':')
        .ok_or_else(|| invalid("expected `unstructured` or `n:m` such as `2:4`"))?;
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| invalid("`n` (before the colon) is not a whole number"))?;
    let m: usize = m
        .trim()
        .parse()
        .map_err(|_| invalid("`m` (after the colon) is not a whole number"))?;
    if n == 0 || n >= m {
        return Err(invalid(
            "n weights are zeroed in each group of m, so 0 < n < m is needed",
        ));
    }
    Ok(Sparsity::NM { n, m })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nm_and_ratios() {
        assert_eq!("2:4".parse::<Sparsity>(), Ok(Sparsity::NM { n: 2, m: 4 }));
        assert_eq!(
            " 4 : 8 ".parse::<Sparsity>(),
            Ok(Sparsity::NM { n: 4, m: 8 })
        );
        assert_eq!(
            "0.5".parse::<Sparsity>(),
            Ok(Sparsity::Unstructured { ratio: 0.5 })
        );
        assert_eq!(
            Sparsity::from_pattern(Pattern::Unstructured, 0.3),
            Ok(Sparsity::Unstructured { ratio: 0.3 })
        );
        assert_eq!(
            Sparsity::from_pattern(Pattern::NM { n: 2, m: 4 }, 0.5),
            Ok(Sparsity::NM { n: 2, m: 4 })
        );
    }

    #[test]
    fn display_round_trips() {
        for s in [
            Sparsity::NM { n: 2, m: 4 },
            Sparsity::Unstructured { ratio: 0.25 },
        ] {
            assert_eq!(s.to_string().parse::<Sparsity>(), Ok(s));
        }
    }

    #[test]
    fn rejects_bad_patterns_with_clear_errors() {
        let err = "4:2".parse::<Sparsity>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid sparsity pattern `4:2`: n weights are zeroed in each group of m, so 0 < n < m is needed"
        );
        assert!(matches!(
            "0:4".parse::<Sparsity>(),
            Err(PruneError::InvalidPattern { .. })
        ));
        assert!(matches!(
            "4:4".parse::<Sparsity>(),
            Err(PruneError::InvalidPattern { .. })
        ));
        let err = "two:4".parse::<Sparsity>().unwrap_err();
        assert!(err.to_string().contains("`n` (before the colon)"), "{err}");
        let err = "2:x".parse::<Sparsity>().unwrap_err();
        assert!(err.to_string().contains("`m` (after the colon)"), "{err}");
        let err = "structured".parse::<Pattern>().unwrap_err();
        assert!(err.to_string().contains("`structured`"), "{err}");
        assert_eq!(
            "1.0".parse::<Sparsity>(),
            Err(PruneError::RatioOutOfRange { ratio: 1.0 })
        );
        assert_eq!(
            Sparsity::unstructured(-0.1).unwrap_err().to_string(),
            "sparsity ratio `-0.1` is outside [0, 1)"
        );
        assert!(Sparsity::unstructured(f64::NAN).is_err());
        assert_eq!(
            Sparsity::nm(3, 2),
            Err(PruneError::InvalidNm { n: 3, m: 2 })
        );
    }

    #[test]
    fn target_ratio() {
        assert_eq!(Sparsity::NM { n: 2, m: 4 }.target_ratio(), 0.5);
        assert_eq!(Sparsity::NM { n: 1, m: 4 }.target_ratio(), 0.25);
        assert_eq!(Sparsity::Unstructured { ratio: 0.3 }.target_ratio(), 0.3);
    }
}
