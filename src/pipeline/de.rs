//! A serde `Deserializer` over the positioned YAML tree. Typed spec structs derive
//! `Deserialize` as usual; every error they raise comes back with the key path and the origin
//! of the innermost value involved, and with serde's structured facts intact (the unknown field
//! and the fields expected, the type found and the type expected), so a diagnostic can say
//! "did you mean `sparsity`?" and point at line and column.

use std::fmt;

use serde::de::{
    self, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};

use super::yaml::{Entry, KeyPath, Node, Origin, Value};

/// Deserializes `T` from `node`, reporting paths relative to `path`.
pub(crate) fn from_node<'a, T: de::Deserialize<'a>>(
    node: &'a Node,
    path: KeyPath,
) -> Result<T, DeError> {
    T::deserialize(NodeDe {
        node,
        path,
        key_origin: None,
    })
}

/// Like [`from_node`] for a value held by a key written at `key_origin` (where a missing
/// field is reported).
pub(crate) fn from_entry<'a, T: de::Deserialize<'a>>(
    node: &'a Node,
    path: KeyPath,
    key_origin: &'a Origin,
) -> Result<T, DeError> {
    T::deserialize(NodeDe {
        node,
        path,
        key_origin: Some(key_origin),
    })
}

/// What went wrong, as serde reported it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DeErrorKind {
    /// A free-form message from a `Deserialize` impl.
    Custom(String),
    /// The value has the wrong type.
    InvalidType {
        /// What was found, e.g. "string `abc`".
        found: String,
        /// What was expected, as serde says it (e.g. "u64", "a boolean").
        expected: String,
    },
    /// The value has the right type but is not accepted.
    InvalidValue {
        /// What was found.
        found: String,
        /// What was expected.
        expected: String,
    },
    /// A list has the wrong length.
    InvalidLength {
        /// The length found.
        len: usize,
        /// What was expected.
        expected: String,
    },
    /// A string names no variant.
    UnknownVariant {
        /// The string.
        variant: String,
        /// The variants.
        expected: &'static [&'static str],
    },
    /// A mapping key names no field.
    UnknownField {
        /// The key.
        field: String,
        /// The fields.
        expected: &'static [&'static str],
    },
    /// A required key is absent.
    MissingField {
        /// The key.
        field: &'static str,
    },
    /// A key is given twice.
    DuplicateField {
        /// The key.
        field: &'static str,
    },
}

/// A deserialization error with the path and origin of the value it concerns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeError {
    /// What went wrong.
    pub kind: DeErrorKind,
    /// The path of the value (for `UnknownField` and `MissingField`: of the mapping).
    pub path: Option<KeyPath>,
    /// Where the value (or for `UnknownField`, the key) was written.
    pub origin: Option<Origin>,
}

impl DeError {
    fn new(kind: DeErrorKind) -> Self {
        Self {
            kind,
            path: None,
            origin: None,
        }
    }

    /// Fills in the path and origin unless an inner value already did.
    fn at(mut self, path: &KeyPath, origin: &Origin) -> Self {
        if self.path.is_none() {
            self.path = Some(path.clone());
            self.origin = Some(origin.clone());
        }
        self
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            DeErrorKind::Custom(msg) => f.write_str(msg),
            DeErrorKind::InvalidType { found, expected } => {
                write!(f, "invalid type: {found}, expected {expected}")
            }
            DeErrorKind::InvalidValue { found, expected } => {
                write!(f, "invalid value: {found}, expected {expected}")
            }
            DeErrorKind::InvalidLength { len, expected } => {
                write!(f, "invalid length {len}, expected {expected}")
            }
            DeErrorKind::UnknownVariant { variant, .. } => write!(f, "unknown variant `{variant}`"),
            DeErrorKind::UnknownField { field, .. } => write!(f, "unknown field `{field}`"),
            DeErrorKind::MissingField { field } => write!(f, "missing field `{field}`"),
            DeErrorKind::DuplicateField { field } => write!(f, "duplicate field `{field}`"),
        }
    }
}

impl std::error::Error for DeError {}

/// Describes serde's `Unexpected` the way messages print values: "string `abc`".
fn describe(unexp: Unexpected<'_>) -> String {
    match unexp {
        Unexpected::Bool(b) => format!("boolean `{b}`"),
        Unexpected::Unsigned(u) => format!("integer `{u}`"),
        Unexpected::Signed(i) => format!("integer `{i}`"),
        Unexpected::Float(x) => format!("number `{x}`"),
        Unexpected::Char(c) => format!("character `{c}`"),
        Unexpected::Str(s) => format!("string `{s}`"),
        Unexpected::Unit | Unexpected::Option => "null".into(),
        Unexpected::Seq => "a list".into(),
        Unexpected::Map => "a mapping".into(),
        other => other.to_string(),
    }
}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::new(DeErrorKind::Custom(msg.to_string()))
    }
    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::new(DeErrorKind::InvalidType {
            found: describe(unexp),
            expected: exp.to_string(),
        })
    }
    fn invalid_value(unexp: Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::new(DeErrorKind::InvalidValue {
            found: describe(unexp),
            expected: exp.to_string(),
        })
    }
    fn invalid_length(len: usize, exp: &dyn de::Expected) -> Self {
        Self::new(DeErrorKind::InvalidLength {
            len,
            expected: exp.to_string(),
        })
    }
    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Self::new(DeErrorKind::UnknownVariant {
            variant: variant.into(),
            expected,
        })
    }
    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Self::new(DeErrorKind::UnknownField {
            field: field.into(),
            expected,
        })
    }
    fn missing_field(field: &'static str) -> Self {
        Self::new(DeErrorKind::MissingField { field })
    }
    fn duplicate_field(field: &'static str) -> Self {
        Self::new(DeErrorKind::DuplicateField { field })
    }
}

/// Deserializes one node.
struct NodeDe<'a> {
    node: &'a Node,
    path: KeyPath,
    /// Where the key that holds this value was written: missing-field errors point there.
    key_origin: Option<&'a Origin>,
}

impl<'a> NodeDe<'a> {
    fn attach(&self, error: DeError) -> DeError {
        let origin = match (&error.kind, self.key_origin) {
            (DeErrorKind::MissingField { .. }, Some(key)) => key,
            _ => &self.node.origin,
        };
        error.at(&self.path, origin)
    }

    fn seq(&self, items: &'a [Node]) -> SeqDe<'a> {
        SeqDe {
            items: items.iter(),
            path: self.path.clone(),
            index: 0,
        }
    }

    fn map(&self, entries: &'a [Entry]) -> MapDe<'a> {
        MapDe {
            entries: entries.iter(),
            path: self.path.clone(),
            pending: None,
        }
    }
}

impl<'de, 'a> de::Deserializer<'de> for NodeDe<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => visitor.visit_i64(*i),
            Value::UInt(u) => visitor.visit_u64(*u),
            Value::Float(x) => visitor.visit_f64(*x),
            Value::Str(s) => visitor.visit_str(s),
            Value::Seq(items) => visitor.visit_seq(self.seq(items)),
            Value::Map(entries) => visitor.visit_map(self.map(entries)),
        };
        result.map_err(|e| self.attach(e))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::Null => visitor.visit_none().map_err(|e| self.attach(e)),
            _ => {
                let (path, origin) = (self.path.clone(), self.node.origin.clone());
                visitor.visit_some(self).map_err(|e| e.at(&path, &origin))
            }
        }
    }

    /// A bare key (`load:`) reads as an empty mapping, so option structs with defaults work.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match &self.node.value {
            Value::Null => visitor.visit_map(self.map(&[])).map_err(|e| self.attach(e)),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let (path, origin) = (self.path.clone(), self.node.origin.clone());
        visitor
            .visit_newtype_struct(self)
            .map_err(|e| e.at(&path, &origin))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let access = match &self.node.value {
            Value::Str(tag) => EnumDe {
                tag,
                content: None,
                path: self.path.clone(),
                tag_origin: &self.node.origin,
            },
            Value::Map(entries) if entries.len() == 1 => EnumDe {
                tag: &entries[0].key,
                content: Some(&entries[0].value),
                path: self.path.clone(),
                tag_origin: &entries[0].key_origin,
            },
            _ => {
                let error = DeError::new(DeErrorKind::InvalidType {
                    found: self.node.describe(),
                    expected: "a name, or a mapping with one key".into(),
                });
                return Err(self.attach(error));
            }
        };
        visitor.visit_enum(access).map_err(|e| self.attach(e))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map identifier
    }
}

struct SeqDe<'a> {
    items: std::slice::Iter<'a, Node>,
    path: KeyPath,
    index: usize,
}

impl<'de, 'a> SeqAccess<'de> for SeqDe<'a> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(node) = self.items.next() else {
            return Ok(None);
        };
        let de = NodeDe {
            node,
            path: self.path.index(self.index),
            key_origin: None,
        };
        self.index += 1;
        seed.deserialize(de).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'a> {
    entries: std::slice::Iter<'a, Entry>,
    path: KeyPath,
    pending: Option<&'a Entry>,
}

impl<'de, 'a> MapAccess<'de> for MapDe<'a> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.pending = Some(entry);
        let key: de::value::StrDeserializer<'_, DeError> = entry.key.as_str().into_deserializer();
        seed.deserialize(key)
            .map(Some)
            .map_err(|e| e.at(&self.path, &entry.key_origin))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let entry = self
            .pending
            .take()
            .ok_or_else(|| <DeError as de::Error>::custom("value requested before its key"))?;
        seed.deserialize(NodeDe {
            node: &entry.value,
            path: self.path.key(&entry.key),
            key_origin: Some(&entry.key_origin),
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

struct EnumDe<'a> {
    tag: &'a str,
    content: Option<&'a Node>,
    path: KeyPath,
    tag_origin: &'a Origin,
}

impl<'de, 'a> EnumAccess<'de> for EnumDe<'a> {
    type Error = DeError;
    type Variant = VariantDe<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, VariantDe<'a>), DeError> {
        let tag: de::value::StrDeserializer<'_, DeError> = self.tag.into_deserializer();
        let value = seed
            .deserialize(tag)
            .map_err(|e| e.at(&self.path, self.tag_origin))?;
        let path = self.path.key(self.tag);
        Ok((
            value,
            VariantDe {
                content: self.content,
                path,
                tag_origin: self.tag_origin,
            },
        ))
    }
}

struct VariantDe<'a> {
    content: Option<&'a Node>,
    path: KeyPath,
    tag_origin: &'a Origin,
}

impl<'a> VariantDe<'a> {
    fn content_de(self, expected: &str) -> Result<NodeDe<'a>, DeError> {
        match self.content {
            Some(node) => Ok(NodeDe {
                node,
                path: self.path,
                key_origin: Some(self.tag_origin),
            }),
            None => Err(DeError::new(DeErrorKind::InvalidType {
                found: "a name alone".into(),
                expected: expected.into(),
            })
            .at(&self.path, self.tag_origin)),
        }
    }
}

impl<'de, 'a> VariantAccess<'de> for VariantDe<'a> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.content {
            None => Ok(()),
            Some(Node {
                value: Value::Null, ..
            }) => Ok(()),
            Some(node) => Err(DeError::new(DeErrorKind::InvalidType {
                found: node.describe(),
                expected: "a name alone".into(),
            })
            .at(&self.path, &node.origin)),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(self.content_de("a value after the name")?)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_seq(self.content_de("a list after the name")?, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_struct(
            self.content_de("a mapping after the name")?,
            "",
            fields,
            visitor,
        )
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::pipeline::yaml::parse;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        sparsity: f64,
        #[serde(default)]
        flag: bool,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        inner: Inner,
        #[serde(default)]
        list: Vec<u32>,
    }

    fn load(text: &str) -> Result<Outer, DeError> {
        let node = parse(text).expect("valid yaml");
        from_node(&node, KeyPath::root())
    }

    #[test]
    fn reads_nested_structs_with_defaults() {
        let outer = load("inner: { sparsity: 1 }\n").expect("valid");
        assert_eq!(
            outer,
            Outer {
                inner: Inner {
                    sparsity: 1.0,
                    flag: false
                },
                list: vec![]
            }
        );
    }

    #[test]
    fn unknown_field_points_at_the_key_and_lists_expected_fields() {
        let err = load("inner:\n  sparsty: 0.5\n").expect_err("unknown key");
        assert_eq!(err.origin, Some(Origin::File { line: 2, column: 3 }));
        assert_eq!(err.path.map(|p| p.to_string()).as_deref(), Some("inner"));
        let DeErrorKind::UnknownField { field, expected } = err.kind else {
            panic!("wrong kind: {:?}", err.kind);
        };
        assert_eq!(field, "sparsty");
        assert_eq!(expected, &["sparsity", "flag"]);
    }

    #[test]
    fn wrong_type_points_at_the_value() {
        let err = load("inner: { sparsity: 0.5 }\nlist: [1, abc]\n").expect_err("wrong type");
        assert_eq!(
            err.origin,
            Some(Origin::File {
                line: 2,
                column: 11
            })
        );
        assert_eq!(err.path.map(|p| p.to_string()).as_deref(), Some("list[1]"));
        assert_eq!(
            err.kind,
            DeErrorKind::InvalidType {
                found: "string `abc`".into(),
                expected: "u32".into()
            }
        );
    }

    #[test]
    fn missing_field_points_at_the_holding_key() {
        let err = load("list: []\ninner: { flag: true }\n").expect_err("missing sparsity");
        assert_eq!(err.origin, Some(Origin::File { line: 2, column: 1 }));
        assert_eq!(err.kind, DeErrorKind::MissingField { field: "sparsity" });
    }
}
