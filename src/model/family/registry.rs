//! The one match from a family's name ([`Architecture`]) to the family that runs it, and the
//! lookups by Hugging Face class, `model_type` and GGUF architecture.

use crate::model::arch::Architecture;

use super::*;

/// Makes [`Architecture::row`], the match from a variant to its file's row, of the list.
macro_rules! rows_of_families {
    ($(mod $module:ident { $($(#[$doc:meta])* $variant:ident = $row:ident,)+ })*) => {
        impl Architecture {
            /// The family's row: its names, its constants and its decisions.
            pub fn row(self) -> &'static FamilyRow {
                match self {
                    $($(Architecture::$variant => &$module::$row,)+)*
                }
            }
        }
    };
}

crate::model::arch::families!(rows_of_families);

impl Architecture {
    /// The family's decisions.
    pub fn family(self) -> &'static dyn Family {
        self.row().hooks
    }

    /// The Hugging Face class name, as written in `config.json` `architectures`.
    pub fn hf_class(self) -> &'static str {
        self.row().hf_class
    }

    /// The Hugging Face `model_type`.
    pub fn model_type(self) -> &'static str {
        self.row().model_type
    }

    /// The family a `config.json` names, by class name or `model_type`.
    pub fn from_hf_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|a| {
            let row = a.row();
            row.hf_class == name || row.model_type == name
        })
    }

    /// The family of a GGUF file's `general.architecture`.
    pub fn from_gguf_arch(arch: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|a| a.row().gguf_arch == Some(arch))
    }

    /// The class names this tool runs, for error messages.
    pub fn supported_hf_classes() -> String {
        let classes: Vec<&str> = Self::ALL.iter().map(|a| a.hf_class()).collect();
        classes.join(", ")
    }

    /// The GGUF architectures this tool reads, for error messages.
    pub fn supported_gguf_archs() -> String {
        let archs: Vec<&str> = Self::ALL.iter().filter_map(|a| a.row().gguf_arch).collect();
        archs.join(", ")
    }
}
