//! Linears left dense: `prune: { skip: [glob…] }` names them by their path under Llama's names
//! (`model.layers.0.self_attn.q_proj`, whatever the family's checkpoints call them), with `*` for
//! any run of characters and `?` for one.

use super::PruneError;

/// Whether `name` matches `pattern`, where `*` stands for any run of characters (also none) and
/// `?` for exactly one; every other character matches itself.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Greedy with one backtrack point: the last `*` seen and where it started matching.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// The path of linear `name` (as [`crate::model::decoder::DecoderLayer::linears`] names it) in
/// decoder layer `layer`.
pub fn linear_path(layer: usize, name: &str) -> String {
    format!("model.layers.{layer}.{name}")
}

/// Checks that every pattern of `skip` names at least one linear of a model with `layers`
/// decoder layers whose linears are `names`: a pattern that matches nothing is a typo, and
/// pruning the whole model before saying so would waste the run.
pub fn check_skip(
    skip: &[String],
    layers: usize,
    names: &[impl AsRef<str>],
) -> Result<(), PruneError> {
    for pattern in skip {
        let hit = (0..layers).any(|i| {
            names
                .iter()
                .any(|n| glob_matches(pattern, &linear_path(i, n.as_ref())))
        });
        if !hit {
            return Err(PruneError::SkipMatchesNothing {
                pattern: pattern.clone(),
                example: linear_path(0, names.first().map_or("self_attn.q_proj", AsRef::as_ref)),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_and_question_marks() {
        let q = "model.layers.0.self_attn.q_proj";
        assert!(glob_matches(q, q));
        assert!(glob_matches("model.layers.0.self_attn.*", q));
        assert!(glob_matches("*.q_proj", q));
        assert!(glob_matches("*", q));
        assert!(glob_matches("model.layers.?.*_proj", q));
        assert!(!glob_matches(
            "model.layers.?.*",
            "model.layers.10.mlp.up_proj"
        ));
        assert!(glob_matches(
            "model.layers.1*.mlp.*",
            "model.layers.10.mlp.up_proj"
        ));
        assert!(!glob_matches(
            "model.layers.1*.mlp.*",
            "model.layers.2.mlp.up_proj"
        ));
        assert!(!glob_matches("*.k_proj", q));
        assert!(!glob_matches("", q));
        assert!(glob_matches("", ""));
        assert!(glob_matches("a*b*c", "aXbYbZc"));
        assert!(!glob_matches("a*b*c", "aXbYbZ"));
    }

    #[test]
    fn a_pattern_that_names_nothing_is_an_error_naming_it() {
        let names = ["self_attn.q_proj", "mlp.down_proj"];
        let ok = ["model.layers.1.mlp.*".to_string()];
        assert!(check_skip(&ok, 2, &names).is_ok());
        let typo = ["model.layers.0.attn.*".to_string()];
        let err = check_skip(&typo, 2, &names).unwrap_err();
        assert_eq!(
            err,
            PruneError::SkipMatchesNothing {
                pattern: "model.layers.0.attn.*".into(),
                example: "model.layers.0.self_attn.q_proj".into(),
            }
        );
        assert!(err.to_string().contains("`model.layers.0.attn.*`"), "{err}");
        // Layer 2 does not exist in a 2-layer model.
        let beyond = ["model.layers.2.*".to_string()];
        assert!(check_skip(&beyond, 2, &names).is_err());
    }
}
