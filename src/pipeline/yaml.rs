//! The pipeline file as a positioned YAML tree: every value and every mapping key remembers
//! where it came from (a line and column of the file, or a `--set` argument), so that errors
//! found long after parsing (a sparsity out of range, a `needs:` naming no stage) still point at
//! the exact spot. The YAML itself is read by `serde-saphyr`, whose `Spanned` wrapper gives the
//! positions; scalars are resolved by it too (booleans, numbers, null; anchors and aliases
//! expanded; non-finite floats refused).

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// Where a value was written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// In the pipeline file, at a 1-based line and column.
    File {
        /// 1-based line.
        line: u32,
        /// 1-based column.
        column: u32,
    },
    /// In a `--set key=value` override (the whole argument).
    Set {
        /// The argument as given, e.g. `prune.sparsity=0.6`.
        arg: String,
    },
    /// Nowhere in particular (a value the engine put there, or a whole-file problem).
    Unknown,
}

impl Origin {
    fn from_location(location: &serde_saphyr::Location) -> Self {
        let (line, column) = (location.line(), location.column());
        if line == 0 {
            return Origin::Unknown;
        }
        Origin::File {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        }
    }
}

/// One segment of a key path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// A key path, displayed in the pipeline's own dotted vocabulary: `prune.sparsity`,
/// `gate.reduce[1]`, `calibration.nsamples`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KeyPath(pub Vec<Seg>);

impl KeyPath {
    /// The empty path (the whole pipeline).
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// A path of mapping keys.
    pub fn keys<I: IntoIterator<Item = S>, S: Into<String>>(keys: I) -> Self {
        Self(keys.into_iter().map(|k| Seg::Key(k.into())).collect())
    }

    /// This path extended by a key.
    pub fn key(&self, key: impl Into<String>) -> Self {
        let mut next = self.clone();
        next.0.push(Seg::Key(key.into()));
        next
    }

    /// This path extended by an index.
    pub fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.0.push(Seg::Index(index));
        next
    }

    /// Whether this is the root path.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for seg in &self.0 {
            match seg {
                Seg::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        Ok(())
    }
}

/// A YAML value with its origin.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// Where the value starts.
    pub origin: Origin,
}

/// A mapping entry: the key, where the key was written, and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// Where the key was written.
    pub key_origin: Origin,
    /// The value.
    pub value: Node,
}

/// A resolved YAML value. Mappings keep their entries in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `~`, `null` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A negative integer.
    Int(i64),
    /// A non-negative integer.
    UInt(u64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping.
    Map(Vec<Entry>),
}

impl Node {
    /// A node with no particular origin.
    pub fn synthetic(value: Value) -> Self {
        Self {
            value,
            origin: Origin::Unknown,
        }
    }

    /// The entries when this is a mapping.
    pub fn as_map(&self) -> Option<&[Entry]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The string when this is a string scalar.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The entry with this key, when this is a mapping holding it.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.as_map()?.iter().find(|e| e.key == key)
    }

    /// The value under this key, when this is a mapping holding it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|e| &e.value)
    }

    /// Sets `origin` on this node and everything below it.
    pub fn set_origin_deep(&mut self, origin: &Origin) {
        self.origin = origin.clone();
        match &mut self.value {
            Value::Seq(items) => items.iter_mut().for_each(|n| n.set_origin_deep(origin)),
            Value::Map(entries) => entries.iter_mut().for_each(|e| {
                e.key_origin = origin.clone();
                e.value.set_origin_deep(origin);
            }),
            _ => {}
        }
    }

    /// Converts to plain JSON (for hashing and records). Non-finite floats cannot occur: the
    /// YAML reader refuses them.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => (*b).into(),
            Value::Int(i) => (*i).into(),
            Value::UInt(u) => (*u).into(),
            Value::Float(x) => serde_json::Number::from_f64(*x)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Str(s) => s.clone().into(),
            Value::Seq(items) => items.iter().map(Node::to_json).collect(),
            Value::Map(entries) => entries
                .iter()
                .map(|e| (e.key.clone(), e.value.to_json()))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        }
    }

    /// A short human description of the value, as used in error messages: `string `abc``,
    /// `number `1.5``, `a list`.
    pub fn describe(&self) -> String {
        match &self.value {
            Value::Null => "null".into(),
            Value::Bool(b) => format!("boolean `{b}`"),
            Value::Int(i) => format!("integer `{i}`"),
            Value::UInt(u) => format!("integer `{u}`"),
            Value::Float(x) => format!("number `{x}`"),
            Value::Str(s) => format!("string `{s}`"),
            Value::Seq(_) => "a list".into(),
            Value::Map(_) => "a mapping".into(),
        }
    }
}

/// The value as written, for labels and messages: `0.5`, `wanda`, `2:4`.
pub fn scalar_text(node: &Node) -> String {
    match &node.value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(x) => x.to_string(),
        Value::Str(s) => s.clone(),
        Value::Seq(_) | Value::Map(_) => node.to_json().to_string(),
    }
}

/// A YAML syntax error with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    /// The parser's message, without its source snippet.
    pub message: String,
    /// Where the parser stopped.
    pub origin: Origin,
}

/// Parses YAML text into a positioned tree. Each value and key gets `Origin::File`.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    // An empty file is an empty document: report it as null, the caller says what is missing.
    if text.lines().all(|l| {
        let t = l.trim_start();
        t.is_empty() || t.starts_with('#')
    }) {
        return Ok(Node {
            value: Value::Null,
            origin: Origin::File { line: 1, column: 1 },
        });
    }
    match serde_saphyr::from_str::<Spanned<Raw>>(text) {
        Ok(raw) => Ok(raw.into()),
        Err(error) => {
            let origin = error
                .location()
                .map(|l| Origin::from_location(&l))
                .unwrap_or(Origin::Unknown);
            let message = match error.without_snippet() {
                // The crate's own message suggests changing its options; say what to fix.
                serde_saphyr::Error::DuplicateMappingKey { key: Some(key), .. } => {
                    format!("key `{key}` is given twice in the same mapping")
                }
                serde_saphyr::Error::DuplicateMappingKey { key: None, .. } => {
                    "a key is given twice in the same mapping".to_string()
                }
                other => strip_position_suffix(&other.to_string()),
            };
            Err(SyntaxError { message, origin })
        }
    }
}

/// Parses the value half of a `--set key=value` argument as YAML (so `0.6`, `true`, `[a, b]`
/// and `"2:4"` mean what they mean in the file), and marks every node as coming from `arg`.
pub fn parse_override_value(value: &str, arg: &str) -> Result<Node, SyntaxError> {
    let origin = Origin::Set { arg: arg.into() };
    let mut node = if value.trim().is_empty() {
        Node::synthetic(Value::Null)
    } else {
        parse(value).map_err(|e| SyntaxError {
            message: e.message,
            origin: origin.clone(),
        })?
    };
    node.set_origin_deep(&origin);
    Ok(node)
}

/// serde-saphyr appends ` at line L, column C` to messages; the diagnostic prints the position
/// itself, in front.
fn strip_position_suffix(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) if message[at..].contains("column") => message[..at].to_string(),
        _ => message.to_string(),
    }
}

/// The shape serde-saphyr fills in: every node wrapped in `Spanned` for its position.
enum Raw {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Raw>>),
    Map(Vec<(Spanned<String>, Spanned<Raw>)>),
}

impl From<Spanned<Raw>> for Node {
    fn from(raw: Spanned<Raw>) -> Self {
        let origin = Origin::from_location(&raw.referenced);
        let value = match raw.value {
            Raw::Null => Value::Null,
            Raw::Bool(b) => Value::Bool(b),
            Raw::Int(i) => Value::Int(i),
            Raw::UInt(u) => Value::UInt(u),
            Raw::Float(x) => Value::Float(x),
            Raw::Str(s) => Value::Str(s),
            Raw::Seq(items) => Value::Seq(items.into_iter().map(Node::from).collect()),
            Raw::Map(entries) => Value::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| Entry {
                        key_origin: Origin::from_location(&k.referenced),
                        key: k.value,
                        value: v.into(),
                    })
                    .collect(),
            ),
        };
        Node { value, origin }
    }
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RawVisitor;
        impl<'de> Visitor<'de> for RawVisitor {
            type Value = Raw;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any yaml value")
            }
            fn visit_unit<E>(self) -> Result<Raw, E> {
                Ok(Raw::Null)
            }
            fn visit_none<E>(self) -> Result<Raw, E> {
                Ok(Raw::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
                Raw::deserialize(d)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Raw, E> {
                Ok(Raw::Bool(b))
            }
            fn visit_i64<E>(self, i: i64) -> Result<Raw, E> {
                Ok(if i >= 0 {
                    Raw::UInt(i.unsigned_abs())
                } else {
                    Raw::Int(i)
                })
            }
            fn visit_u64<E>(self, u: u64) -> Result<Raw, E> {
                Ok(Raw::UInt(u))
            }
            fn visit_f64<E>(self, x: f64) -> Result<Raw, E> {
                Ok(Raw::Float(x))
            }
            fn visit_str<E>(self, s: &str) -> Result<Raw, E> {
                Ok(Raw::Str(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Raw, E> {
                Ok(Raw::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Raw::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Raw::Map(entries))
            }
        }
        deserializer.deserialize_any(RawVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_keys_and_values_are_one_based() {
        let node = parse("# c\nname: x\nprune: { sparsity: 0.5 }\n").expect("valid yaml");
        let prune = node.entry("prune").expect("prune");
        assert_eq!(prune.key_origin, Origin::File { line: 3, column: 1 });
        let sparsity = prune.value.entry("sparsity").expect("sparsity");
        assert_eq!(
            sparsity.key_origin,
            Origin::File {
                line: 3,
                column: 10
            }
        );
        assert_eq!(
            sparsity.value.origin,
            Origin::File {
                line: 3,
                column: 20
            }
        );
        assert_eq!(sparsity.value.value, Value::Float(0.5));
    }

    #[test]
    fn unquoted_n_m_pattern_is_a_string() {
        let node = parse("pattern: 2:4\n").expect("valid yaml");
        assert_eq!(node.get("pattern").and_then(Node::as_str), Some("2:4"));
    }

    #[test]
    fn syntax_error_has_a_position_and_no_suffix() {
        let err = parse("a: [1, 2\nb: 3\n").expect_err("unclosed flow sequence");
        assert!(matches!(err.origin, Origin::File { .. }), "{err:?}");
        assert!(!err.message.contains(" at line "), "{}", err.message);
    }

    #[test]
    fn override_values_parse_as_yaml_and_carry_the_argument() {
        let node = parse_override_value("[0.5, 0.6]", "sweep.prune.sparsity=[0.5, 0.6]")
            .expect("valid value");
        let Value::Seq(items) = &node.value else {
            panic!("expected a list, got {node:?}");
        };
        assert_eq!(items[1].value, Value::Float(0.6));
        assert_eq!(
            items[1].origin,
            Origin::Set {
                arg: "sweep.prune.sparsity=[0.5, 0.6]".into()
            }
        );
    }

    #[test]
    fn duplicate_keys_are_refused_with_the_key_named() {
        let err = parse("a: 1\nb: 2\na: 3\n").expect_err("duplicate key");
        assert_eq!(err.message, "key `a` is given twice in the same mapping");
        assert_eq!(err.origin, Origin::File { line: 3, column: 1 });
    }

    #[test]
    fn key_paths_display_dotted_with_indices() {
        let path = KeyPath::keys(["gate", "reduce"]).index(1);
        assert_eq!(path.to_string(), "gate.reduce[1]");
    }
}
