//! Loading a model by name, folder or file ([`ModelRef`]): its config, tokenizer and weights.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::prelude::*;

use crate::data::hub;

use crate::model::arch::ModelShape;
use crate::model::arch::{HfLlamaConfig, LlamaConfig};
use crate::model::checkpoint::Tokenizer;
use crate::model::checkpoint::{LoadError, SafetensorsSource, SplitSource, WeightSource};
use crate::model::decoder::Llama;

/// Where a model comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// A GGUF file.
    Gguf(PathBuf),
    /// A local Hugging Face folder (config.json, tokenizer.json, safetensors).
    Folder(PathBuf),
    /// A Hugging Face hub repository.
    Hub {
        /// `org/name`.
        repo_id: String,
        /// Branch, tag or commit.
        revision: String,
    },
}

impl ModelRef {
    /// The same source with a relative file or folder joined to `base` (a pipeline file's
    /// folder); hub ids are left as they are.
    pub fn resolved_against(self, base: &Path) -> ModelRef {
        match self {
            ModelRef::Gguf(p) => ModelRef::Gguf(base.join(p)),
            ModelRef::Folder(p) => ModelRef::Folder(base.join(p)),
            hub @ ModelRef::Hub { .. } => hub,
        }
    }

    /// Interprets a command-line model argument: an existing `.gguf` file, an existing folder,
    /// or else a hub id `org/name` with an optional `@revision`.
    pub fn parse(arg: &str) -> Result<Self, LoadError> {
        let path = Path::new(arg);
        if path.is_dir() {
            return Ok(ModelRef::Folder(path.to_path_buf()));
        }
        if path.is_file() {
            return if arg.to_ascii_lowercase().ends_with(".gguf") {
                Ok(ModelRef::Gguf(path.to_path_buf()))
            } else {
                Err(LoadError::UnknownModelArg {
                    arg: arg.to_string(),
                    reason: "is a file but not a `.gguf`; pass a GGUF file, a Hugging Face folder or a hub id".into(),
                })
            };
        }
        if arg.to_ascii_lowercase().ends_with(".gguf")
            || arg.starts_with('.')
            || arg.starts_with('/')
        {
            return Err(LoadError::UnknownModelArg {
                arg: arg.to_string(),
                reason: "does not exist".into(),
            });
        }
        let (repo_id, revision) = match arg.split_once('@') {
            Some((r, rev)) => (r, rev),
            None => (arg, "main"),
        };
        let parts: Vec<&str> = repo_id.split('/').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) || revision.is_empty() {
            return Err(LoadError::UnknownModelArg {
                arg: arg.to_string(),
                reason: "is neither an existing path nor a hub id like `org/name` or `org/name@revision`".into(),
            });
        }
        Ok(ModelRef::Hub {
            repo_id: repo_id.to_string(),
            revision: revision.to_string(),
        })
    }
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelRef::Gguf(p) | ModelRef::Folder(p) => write!(f, "{}", p.display()),
            ModelRef::Hub { repo_id, revision } => write!(f, "{repo_id}@{revision}"),
        }
    }
}

/// A model ready to run: its config, weights on the device and tokenizer.
pub type LoadedModel<B> = Loaded<Llama<B>>;

/// A loaded model `M` (a [`Llama`] in memory, or a streamed [`super::Decoder`]) with its
/// config and tokenizer.
pub struct Loaded<M> {
    /// Resolved configuration.
    pub config: LlamaConfig,
    /// The decoder on the device.
    pub model: M,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// Parameter count read from the checkpoint headers.
    pub parameter_count: u64,
    /// Where it came from.
    pub origin: ModelRef,
    /// The tokenizer's and generation's config files (`tokenizer_config.json`,
    /// `special_tokens_map.json`, `generation_config.json`) by name, to write beside a saved
    /// copy: copied from a folder, made from the metadata of a GGUF file.
    pub tokenizer_files: Vec<(String, String)>,
    /// The checkpoint's own `config.json` (a folder's or the hub's; for GGUF the keys its
    /// metadata gives beyond the decoder's config, `pad_token_id` and `unk_token_id`), whose
    /// keys a saved copy keeps.
    pub hf_config: Option<serde_json::Value>,
}

impl<M> Loaded<M> {
    /// The same model in another form (e.g. wrapped in a [`super::Decoder`]).
    pub fn map_model<N>(self, f: impl FnOnce(M) -> N) -> Loaded<N> {
        match self.try_map_model(|m| Ok::<N, std::convert::Infallible>(f(m))) {
            Ok(loaded) => loaded,
        }
    }

    /// [`Loaded::map_model`] with a conversion that may fail.
    pub fn try_map_model<N, E>(self, f: impl FnOnce(M) -> Result<N, E>) -> Result<Loaded<N>, E> {
        Ok(Loaded {
            config: self.config,
            model: f(self.model)?,
            tokenizer: self.tokenizer,
            parameter_count: self.parameter_count,
            origin: self.origin,
            tokenizer_files: self.tokenizer_files,
            hf_config: self.hf_config,
        })
    }
}

/// The shape of a model from its config alone, with the exact parameter count from the
/// checkpoint's headers where there are local files, and the bytes of those files (0 for a hub
/// id, whose config alone is fetched).
pub fn inspect(origin: &ModelRef) -> Result<(ModelShape, u64), LoadError> {
    let file_len = |path: &Path| {
        std::fs::metadata(path)
            .map(|m| m.len())
            .map_err(|source| LoadError::Read {
                path: path.display().to_string(),
                source,
            })
    };
    match origin {
        ModelRef::Gguf(path) => {
            let checkpoint = super::gguf::GgufCheckpoint::open(path)?;
            let shape = ModelShape::from_config(checkpoint.config())
                .with_parameters(checkpoint.parameter_count());
            Ok((shape, file_len(path)?))
        }
        ModelRef::Folder(folder) => {
            let mut config = HfLlamaConfig::from_file(&folder.join("config.json"))?.resolve()?;
            let has_weights = ["model.safetensors", "model.safetensors.index.json"]
                .iter()
                .any(|f| folder.join(f).exists());
            if !has_weights {
                // A folder with the config alone (as the hub serves it to estimates).
                return Ok((ModelShape::from_config(&config), 0));
            }
            let (source, _) = folder_checkpoint(folder, &mut config)?;
            let mut bytes = 0;
            for path in source.files() {
                bytes += file_len(path)?;
            }
            let shape = ModelShape::from_config(&config).with_parameters(source.parameter_count());
            Ok((shape, bytes))
        }
        ModelRef::Hub { repo_id, revision } => {
            let mut request = hub::HubRequest::new(repo_id.clone());
            request.revision = revision.clone();
            let config = HfLlamaConfig::from_file(&hub::fetch_config(&request)?)?.resolve()?;
            Ok((ModelShape::from_config(&config), 0))
        }
    }
}

/// Loads a model from any supported source onto `device`.
pub fn load<B: Backend>(
    origin: &ModelRef,
    device: &B::Device,
) -> Result<LoadedModel<B>, LoadError> {
    load_with(origin, |config, source| {
        Ok(super::build_llama(config, source.as_ref(), device)?)
    })
}

/// Opens a model for layer streaming ([`super::StreamedLlama`]): only its embeddings, final
/// norm and LM head are loaded; layers are read from the checkpoint when used, and replaced
/// layers go to a layer store below `store_root`.
pub fn load_streamed<B: Backend>(
    origin: &ModelRef,
    device: &B::Device,
    store_root: &Path,
) -> Result<Loaded<super::StreamedLlama<B>>, LoadError> {
    load_with(origin, |config, source| {
        Ok(super::StreamedLlama::open(
            config, source, device, store_root,
        )?)
    })
}

/// Opens the checkpoint of `origin`, its config and tokenizer, and makes the model with
/// `build(config, checkpoint)`.
fn load_with<M>(
    origin: &ModelRef,
    build: impl FnOnce(&LlamaConfig, Arc<dyn WeightSource>) -> Result<M, LoadError>,
) -> Result<Loaded<M>, LoadError> {
    match origin {
        ModelRef::Gguf(path) => {
            let checkpoint = super::gguf::GgufCheckpoint::open(path)?;
            let tokenizer = checkpoint.tokenizer()?;
            let config = checkpoint.config().clone();
            let tokenizer_files = checkpoint.tokenizer_files(&tokenizer);
            let hf_config = checkpoint.hf_config();
            let parameter_count = checkpoint.parameter_count();
            let model = build(
                &config,
                SplitSource::for_family(&config, Arc::new(checkpoint)),
            )?;
            finish(
                origin,
                config,
                model,
                tokenizer,
                parameter_count,
                (tokenizer_files, Some(hf_config)),
            )
        }
        ModelRef::Folder(folder) => load_folder(origin, folder, build),
        ModelRef::Hub { repo_id, revision } => {
            let request = hub::HubRequest {
                revision: revision.clone(),
                ..hub::HubRequest::new(repo_id.clone())
            };
            let folder = hub::fetch_model(&request)?;
            load_folder(origin, &folder, build)
        }
    }
}

fn load_folder<M>(
    origin: &ModelRef,
    folder: &Path,
    build: impl FnOnce(&LlamaConfig, Arc<dyn WeightSource>) -> Result<M, LoadError>,
) -> Result<Loaded<M>, LoadError> {
    let mut config = HfLlamaConfig::from_file(&folder.join("config.json"))?.resolve()?;
    let tokenizer = Tokenizer::from_folder(folder)?;
    let (source, hf_config) = folder_checkpoint(folder, &mut config)?;
    let parameter_count = source.parameter_count();
    let model = build(&config, super::hf_source(&config, source))?;
    let tokenizer_files = TOKENIZER_FILES
        .iter()
        .filter_map(|name| {
            let path = folder.join(name);
            path.is_file().then(|| {
                std::fs::read_to_string(&path)
                    .map(|text| (name.to_string(), text))
                    .map_err(|source| LoadError::Read {
                        path: path.display().to_string(),
                        source,
                    })
            })
        })
        .collect::<Result<_, _>>()?;
    finish(
        origin,
        config,
        model,
        tokenizer,
        parameter_count,
        (tokenizer_files, hf_config),
    )
}

/// The safetensors checkpoint of `folder`, whose `config.json` resolved to `config`, with that
/// `config.json` as an object (`None` where unreadable or not an object: saved copies then write
/// only the keys this tool models). Of a vision-language checkpoint, the language model alone:
/// its tensors ([`SafetensorsSource::text_decoder_only`]) and its `text_config`, the head tied
/// exactly where the checkpoint holds none, as transformers 5 loads it.
fn folder_checkpoint(
    folder: &Path,
    config: &mut LlamaConfig,
) -> Result<(SafetensorsSource, Option<serde_json::Value>), LoadError> {
    let source = SafetensorsSource::open(folder)?;
    let hf_config = std::fs::read_to_string(folder.join("config.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .filter(serde_json::Value::is_object);
    let object = hf_config.as_ref().and_then(serde_json::Value::as_object);
    let Some(class) = object.and_then(crate::model::family::vision_language::of_config) else {
        return Ok((source, hf_config));
    };
    let text =
        object.and_then(|o| crate::model::family::vision_language::text_config(o, class).ok());
    let source = source.text_decoder_only();
    config.tie_word_embeddings = !source.has_tensor("lm_head.weight");
    Ok((source, text.map(serde_json::Value::Object)))
}

/// The config files of a Hugging Face folder that travel with its tokenizer.
const TOKENIZER_FILES: [&str; 3] = [
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
];

/// `files`: the tokenizer's config files and the checkpoint's own `config.json`.
fn finish<M>(
    origin: &ModelRef,
    config: LlamaConfig,
    model: M,
    tokenizer: Tokenizer,
    parameter_count: u64,
    files: (Vec<(String, String)>, Option<serde_json::Value>),
) -> Result<Loaded<M>, LoadError> {
    let (tokenizer_files, hf_config) = files;
    // Tokenizers may carry fewer ids than the embedding matrix (padding rows), never more.
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(LoadError::VocabMismatch {
            model: origin.to_string(),
            tokenizer: tokenizer.vocab_size(),
            model_vocab: config.vocab_size,
        });
    }
    Ok(Loaded {
        config,
        model,
        tokenizer,
        parameter_count,
        origin: origin.clone(),
        tokenizer_files,
        hf_config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_args_are_classified() {
        assert_eq!(
            ModelRef::parse("meta-llama/Llama-3.2-1B").unwrap(),
            ModelRef::Hub {
                repo_id: "meta-llama/Llama-3.2-1B".into(),
                revision: "main".into()
            }
        );
        assert!(matches!(
            ModelRef::parse("org/name@v1.0").unwrap(),
            ModelRef::Hub { revision, .. } if revision == "v1.0"
        ));
        let err = ModelRef::parse("missing.gguf").unwrap_err().to_string();
        assert!(err.contains("`missing.gguf` does not exist"), "{err}");
        assert!(ModelRef::parse("just-a-name").is_err());
        let dir = std::env::temp_dir();
        assert!(matches!(
            ModelRef::parse(dir.to_str().unwrap()).unwrap(),
            ModelRef::Folder(_)
        ));
    }
}
