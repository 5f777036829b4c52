//! Serde helpers for `config.json` keys that tell absent from null.

use serde::Deserialize;

/// Deserialises a key that is present, null or not, as `Some` (absent keys take the field's
/// default, `None`).
pub(super) fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}
