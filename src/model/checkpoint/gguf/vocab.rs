//! The embedded vocabulary as a Hugging Face `tokenizer.json` ([`tokenizer_json`]): byte-level
//! BPE for `gpt2` vocabularies, SentencePiece-style BPE for `llama` ones, built as Hugging
//! Face's GGUF converter builds them.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

use super::{as_int, strings, GgufArray, GgufError, GgufFile, GgufValue};

/// GPT-2's split regex is ByteLevel's own; these are the Llama-3 and Qwen2 variants as they
/// appear in the upstream `tokenizer.json` files.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp token types (`tokenizer.ggml.token_type`).
const TOKEN_UNKNOWN: i64 = 2;
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// Converts the GGUF's embedded vocabulary into a Hugging Face `tokenizer.json` value, loadable
/// with `tokenizers::Tokenizer::from_str(&value.to_string())`.
///
/// Supports `tokenizer.ggml.model`:
/// - `gpt2`: byte-level BPE. `tokenizer.ggml.pre` picks the split regex: GPT-2's (ByteLevel with
///   `use_regex`) for `default`, `gpt-2`, `smollm`, `starcoder`, an absent key and kin, as
///   Hugging Face's GGUF converter does; Llama 3's or Qwen2's for theirs; other names are an
///   error. BOS is prepended only when `tokenizer.ggml.add_bos_token` is true (default false).
/// - `llama`: SentencePiece-style BPE as Hugging Face's GGUF converter builds it: merges from
///   `tokenizer.ggml.merges`, or derived from `tokenizer.ggml.scores`; `▁` for spaces (with a
///   leading one when `tokenizer.ggml.add_space_prefix`, default true); byte fallback to
///   `<0x..>` tokens; BOS prepended unless `tokenizer.ggml.add_bos_token` is false. Gemma
///   files (architecture `gemma`, `gemma2`, `gemma3`) take Gemma's own rules
///   ([`gemma_tokenizer`]).
///
/// Control (type 3) and unknown (type 2) tokens become special added tokens, user-defined
/// (type 4) ones plain added tokens; EOS is appended when `tokenizer.ggml.add_eos_token` is true.
pub fn tokenizer_json(file: &GgufFile) -> Result<Value, GgufError> {
    let model = file.require("tokenizer.ggml.model", "a string", GgufValue::as_str)?;
    match model {
        "gpt2" => gpt2_tokenizer(file),
        "llama" if file.get_str("general.architecture").is_some_and(is_gemma) => {
            gemma_tokenizer(file)
        }
        "llama" => llama_tokenizer(file),
        other => Err(tokenizer_error(
            file,
            format!("unsupported tokenizer model `{other}` (supported: `gpt2`, `llama`)"),
        )),
    }
}

fn tokenizer_error(file: &GgufFile, reason: String) -> GgufError {
    GgufError::Tokenizer {
        path: file.path().to_owned(),
        reason,
    }
}

/// The parts of `tokenizer.ggml.*` both models share.
struct Vocab<'a> {
    tokens: &'a [String],
    types: Option<Vec<i64>>,
    bos: Option<usize>,
    eos: Option<usize>,
    unk: Option<usize>,
    add_bos: bool,
    add_eos: bool,
}

impl<'a> Vocab<'a> {
    fn read(file: &'a GgufFile, default_add_bos: bool) -> Result<Self, GgufError> {
        let tokens = file.require("tokenizer.ggml.tokens", "an array of string", strings)?;
        let types = file.get_checked("tokenizer.ggml.token_type", "an array of integers", |v| {
            v.as_array().and_then(GgufArray::to_i64_vec)
        })?;
        if let Some(types) = &types {
            if types.len() != tokens.len() {
                return Err(tokenizer_error(
                    file,
                    format!(
                        "`tokenizer.ggml.token_type` has {} entries but `tokenizer.ggml.tokens` has {}",
                        types.len(),
                        tokens.len()
                    ),
                ));
            }
        }
        let id = |key: &str| -> Result<Option<usize>, GgufError> {
            let Some(id) = file.get_checked(key, "a token id", as_int::<usize>)? else {
                return Ok(None);
            };
            if id >= tokens.len() {
                return Err(tokenizer_error(
                    file,
                    format!(
                        "`{key}` is {id}, outside the vocabulary of {}",
                        tokens.len()
                    ),
                ));
            }
            Ok(Some(id))
        };
        let flag = |key: &str, default: bool| {
            file.get_checked(key, "a bool", GgufValue::as_bool)
                .map(|v| v.unwrap_or(default))
        };
        let vocab = Vocab {
            tokens,
            types,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token", default_add_bos)?,
            add_eos: flag("tokenizer.ggml.add_eos_token", false)?,
        };
        if vocab.add_bos && vocab.bos.is_none() {
            return Err(tokenizer_error(
                file,
                "BOS is to be added but `tokenizer.ggml.bos_token_id` is missing".into(),
            ));
        }
        if vocab.add_eos && vocab.eos.is_none() {
            return Err(tokenizer_error(
                file,
                "EOS is to be added but `tokenizer.ggml.eos_token_id` is missing".into(),
            ));
        }
        Ok(vocab)
    }

    fn token(&self, id: usize) -> &str {
        self.tokens.get(id).map_or("", String::as_str)
    }

    /// `added_tokens` entries: special for control/unknown tokens (or unk/bos/eos when the file
    /// has no token types), plain for user-defined ones.
    fn added_tokens(&self) -> Vec<Value> {
        let entry = |id: usize, special: bool| {
            json!({
                "id": id,
                "content": self.token(id),
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": special,
            })
        };
        match &self.types {
            Some(types) => types
                .iter()
                .enumerate()
                .filter_map(|(id, &ty)| match ty {
                    TOKEN_CONTROL | TOKEN_UNKNOWN => Some(entry(id, true)),
                    TOKEN_USER_DEFINED => Some(entry(id, false)),
                    _ => None,
                })
                .collect(),
            None => {
                let mut ids: Vec<usize> = [self.unk, self.bos, self.eos]
                    .into_iter()
                    .flatten()
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                ids.into_iter().map(|id| entry(id, true)).collect()
            }
        }
    }

    /// Token → id, the last occurrence winning for duplicated strings (as in Hugging Face's
    /// converter).
    fn vocab_map(&self) -> Map<String, Value> {
        self.tokens
            .iter()
            .enumerate()
            .map(|(id, t)| (t.clone(), json!(id)))
            .collect()
    }

    /// A `TemplateProcessing` adding BOS and/or EOS as configured.
    fn post_processor(&self) -> Value {
        let bos = self
            .bos
            .filter(|_| self.add_bos)
            .map(|id| (self.token(id), id));
        let eos = self
            .eos
            .filter(|_| self.add_eos)
            .map(|id| (self.token(id), id));
        let special =
            |tok: &str, type_id: u32| json!({ "SpecialToken": { "id": tok, "type_id": type_id } });
        let sequence =
            |id: &str, type_id: u32| json!({ "Sequence": { "id": id, "type_id": type_id } });
        let mut single = Vec::new();
        let mut pair = Vec::new();
        let mut special_tokens = Map::new();
        for (seq, type_id) in [("A", 0), ("B", 1)] {
            let out = if type_id == 0 { &mut single } else { &mut pair };
            if let Some((tok, _)) = bos {
                out.push(special(tok, type_id));
            }
            out.push(sequence(seq, type_id));
            if let Some((tok, _)) = eos {
                out.push(special(tok, type_id));
            }
        }
        let pair: Vec<Value> = single.iter().cloned().chain(pair).collect();
        for (tok, id) in bos.into_iter().chain(eos) {
            special_tokens.insert(
                tok.to_owned(),
                json!({ "id": tok, "ids": [id], "tokens": [tok] }),
            );
        }
        json!({
            "type": "TemplateProcessing",
            "single": single,
            "pair": pair,
            "special_tokens": special_tokens,
        })
    }
}

/// `tokenizer.ggml.merges` (`"left right"` strings) as `[left, right]` pairs, if present.
fn gguf_merges(file: &GgufFile) -> Result<Option<Vec<Value>>, GgufError> {
    let Some(merges) = file.get_checked("tokenizer.ggml.merges", "an array of string", strings)?
    else {
        return Ok(None);
    };
    merges
        .iter()
        .enumerate()
        .map(|(i, m)| match m.split_once(' ') {
            Some((l, r)) => Ok(json!([l, r])),
            None => Err(tokenizer_error(
                file,
                format!("merge {i} `{m}` of `tokenizer.ggml.merges` has no space"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The model section of a BPE `tokenizer.json`.
fn bpe_model(vocab: &Vocab<'_>, merges: Vec<Value>, spm: bool, ignore_merges: bool) -> Value {
    bpe_section(
        vocab.unk.map(|id| vocab.token(id)),
        vocab.vocab_map(),
        merges,
        spm,
        ignore_merges,
    )
}

/// A BPE model section from its parts.
fn bpe_section(
    unk: Option<&str>,
    vocab: Map<String, Value>,
    merges: Vec<Value>,
    spm: bool,
    ignore_merges: bool,
) -> Value {
    json!({
        "type": "BPE",
        "dropout": null,
        "unk_token": unk,
        "continuing_subword_prefix": null,
        "end_of_word_suffix": null,
        "fuse_unk": spm,
        "byte_fallback": spm,
        "ignore_merges": ignore_merges,
        "vocab": vocab,
        "merges": merges,
    })
}

fn gpt2_tokenizer(file: &GgufFile) -> Result<Value, GgufError> {
    let vocab = Vocab::read(file, false)?;
    let merges = gguf_merges(file)?.ok_or_else(|| {
        tokenizer_error(file, "model `gpt2` needs `tokenizer.ggml.merges`".into())
    })?;
    let pre = file.get_checked("tokenizer.ggml.pre", "a string", GgufValue::as_str)?;
    let (pre_tokenizer, ignore_merges) = gpt2_pre_tokenizer(pre).ok_or_else(|| {
        tokenizer_error(
            file,
            format!(
                "unsupported pre-tokenizer `{}` for model `gpt2`",
                pre.unwrap_or_default()
            ),
        )
    })?;
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": vocab.added_tokens(),
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": vocab.post_processor(),
        "decoder": {
            "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true,
        },
        "model": bpe_model(&vocab, merges, false, ignore_merges),
    }))
}

/// The pre-tokenizer for llama.cpp's `tokenizer.ggml.pre` name, and whether BPE ignores merges
/// for whole-word vocabulary hits (Llama 3); `None` for names not mapped here.
fn gpt2_pre_tokenizer(pre: Option<&str>) -> Option<(Value, bool)> {
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true,
    });
    let split = |pattern: &str| {
        json!({
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split", "pattern": { "Regex": pattern },
                    "behavior": "Isolated", "invert": false,
                },
                {
                    "type": "ByteLevel", "add_prefix_space": false,
                    "trim_offsets": false, "use_regex": false,
                },
            ],
        })
    };
    Some(match pre.unwrap_or("default") {
        // llama.cpp splits off every digit before the GPT-2 regex for `smollm`, `starcoder` and
        // kin, as does upstream SmolLM2's tokenizer.json (a `Digits` pre-tokenizer); Hugging
        // Face's GGUF converter does not, and that changes a few tokens around whitespace before
        // digits (` \n\n\n 1`). This follows the converter, which the reference files match.
        "default" | "gpt-2" | "gpt2" | "phi-2" | "roberta-bpe" | "mpt" | "olmo" | "jais"
        | "smollm" | "starcoder" | "refact" | "codeshell" | "command-r" | "exaone" | "minerva" => {
            (byte_level, false)
        }
        "llama3" | "llama-v3" | "llama-bpe" => (split(LLAMA3_SPLIT), true),
        "dbrx" | "smaug-bpe" => (split(LLAMA3_SPLIT), false),
        "qwen2" => (split(QWEN2_SPLIT), false),
        _ => return None,
    })
}

fn llama_tokenizer(file: &GgufFile) -> Result<Value, GgufError> {
    let vocab = Vocab::read(file, true)?;
    let merges = match gguf_merges(file)? {
        Some(merges) => merges,
        None => {
            let scores = file.require("tokenizer.ggml.scores", "an array of floats", |v| {
                v.as_array().and_then(GgufArray::to_f32_vec)
            })?;
            if scores.len() != vocab.tokens.len() {
                return Err(tokenizer_error(
                    file,
                    format!(
                        "`tokenizer.ggml.scores` has {} entries but `tokenizer.ggml.tokens` has {}",
                        scores.len(),
                        vocab.tokens.len()
                    ),
                ));
            }
            merges_from_scores(vocab.tokens, &scores)
        }
    };
    let add_space_prefix = file
        .get_checked(
            "tokenizer.ggml.add_space_prefix",
            "a bool",
            GgufValue::as_bool,
        )?
        .unwrap_or(true);
    let mut normalizers = Vec::new();
    if add_space_prefix {
        normalizers.push(json!({ "type": "Prepend", "prepend": "\u{2581}" }));
    }
    normalizers
        .push(json!({ "type": "Replace", "pattern": { "String": " " }, "content": "\u{2581}" }));
    let mut decoders = vec![
        json!({ "type": "Replace", "pattern": { "String": "\u{2581}" }, "content": " " }),
        json!({ "type": "ByteFallback" }),
        json!({ "type": "Fuse" }),
    ];
    if add_space_prefix {
        decoders.push(json!({ "type": "Strip", "content": " ", "start": 1, "stop": 0 }));
    }
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": vocab.added_tokens(),
        "normalizer": { "type": "Sequence", "normalizers": normalizers },
        "pre_tokenizer": null,
        "post_processor": vocab.post_processor(),
        "decoder": { "type": "Sequence", "decoders": decoders },
        "model": bpe_model(&vocab, merges, true, false),
    }))
}

/// Whether a GGUF `general.architecture` is one of Gemma's.
fn is_gemma(arch: &str) -> bool {
    matches!(arch, "gemma" | "gemma2" | "gemma3")
}

/// Gemma's SentencePiece BPE as transformers' GGUF converter builds it (`gemma_tokenizer` and
/// `GemmaTokenizer`, transformers 5.24):
/// - a token of spaces (or other whitespace with a space in it) is respelled as that many `▁`,
///   the spelling the normalised text has; a user-defined token so respelled is not added;
/// - merges come from the file's token order ([`merges_by_position`]): Gemma's scores do not
///   follow its merge order;
/// - spaces become `▁` with no prefix space, byte fallback to `<0x..>`, BOS as the file says.
fn gemma_tokenizer(file: &GgufFile) -> Result<Value, GgufError> {
    let vocab = Vocab::read(file, true)?;
    let respelled: Vec<String> = vocab
        .tokens
        .iter()
        .map(|t| {
            if t.contains(' ') && t.trim().is_empty() {
                "\u{2581}".repeat(t.chars().count())
            } else {
                t.clone()
            }
        })
        .collect();
    let mut added = vocab.added_tokens();
    added.retain(|entry| {
        let id = entry["id"].as_u64().unwrap_or(0) as usize;
        entry["special"] == json!(true) || respelled[id] == vocab.tokens[id]
    });
    let map: Map<String, Value> = respelled
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), json!(id)))
        .collect();
    let merges = merges_by_position(&respelled);
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": { "type": "Replace", "pattern": { "String": " " }, "content": "\u{2581}" },
        "pre_tokenizer": {
            "type": "Split",
            "pattern": { "String": " " },
            "behavior": "MergedWithPrevious",
            "invert": false,
        },
        "post_processor": vocab.post_processor(),
        "decoder": { "type": "Sequence", "decoders": [
            { "type": "Replace", "pattern": { "String": "\u{2581}" }, "content": " " },
            { "type": "ByteFallback" },
            { "type": "Fuse" },
        ] },
        "model": bpe_section(Some("<unk>"), map, merges, true, false),
    }))
}

/// Merges derived from the vocabulary's order, as transformers' `generate_merges` does with
/// minus the position as the score: every split of every token into two vocabulary pieces;
/// tokens in the order of their (last) position, and a token's splits longest left piece first.
fn merges_by_position(tokens: &[String]) -> Vec<Value> {
    let position: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let mut seen = HashSet::new();
    // (position, left length, right length, left, right); lengths in characters.
    let mut merges: Vec<(usize, usize, usize, &str, &str)> = Vec::new();
    for token in tokens {
        if !seen.insert(token.as_str()) {
            continue;
        }
        let at = position[token.as_str()];
        for (split, _) in token.char_indices().skip(1) {
            let (l, r) = token.split_at(split);
            if position.contains_key(l) && position.contains_key(r) {
                merges.push((at, l.chars().count(), r.chars().count(), l, r));
            }
        }
    }
    merges.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
    merges.into_iter().map(|(.., l, r)| json!([l, r])).collect()
}

/// Merges for a SentencePiece BPE vocabulary, derived as Hugging Face's GGUF converter does:
/// every split of every token into two vocabulary pieces, ordered within a token by the pieces'
/// scores and overall (stably) by the merged token's score, both descending.
fn merges_from_scores(tokens: &[String], scores: &[f32]) -> Vec<Value> {
    let desc = |a: f32, b: f32| b.partial_cmp(&a).unwrap_or(std::cmp::Ordering::Equal);
    let score_of: HashMap<&str, f32> = tokens
        .iter()
        .map(String::as_str)
        .zip(scores.iter().copied())
        .collect();
    let mut seen = HashSet::new();
    let mut merges: Vec<(&str, &str, f32)> = Vec::new();
    for token in tokens {
        let Some(&piece_score) = score_of.get(token.as_str()) else {
            continue;
        };
        if !seen.insert(token.as_str()) {
            continue;
        }
        let mut local: Vec<(&str, &str, f32, f32)> = token
            .char_indices()
            .skip(1)
            .filter_map(|(at, _)| {
                let (l, r) = token.split_at(at);
                Some((l, r, *score_of.get(l)?, *score_of.get(r)?))
            })
            .collect();
        local.sort_by(|a, b| desc(a.2, b.2).then(desc(a.3, b.3)));
        merges.extend(local.into_iter().map(|(l, r, _, _)| (l, r, piece_score)));
    }
    merges.sort_by(|a, b| desc(a.2, b.2));
    merges.into_iter().map(|(l, r, _)| json!([l, r])).collect()
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::super::GgufWriter;
    use super::*;

    fn load(json: &Value) -> tokenizers::Tokenizer {
        tokenizers::Tokenizer::from_str(&json.to_string()).expect("tokenizer loads")
    }

    fn gpt2_writer(add_bos: Option<bool>) -> GgufWriter {
        let tokens = vec![
            "<|endoftext|>",
            "<s>",
            "h",
            "e",
            "l",
            "o",
            "Ġ",
            "w",
            "r",
            "d",
            "he",
            "ll",
            "hell",
            "hello",
            "Ġw",
            "or",
            "Ġwor",
            "ld",
            "Ġworld",
            "<tool>",
        ];
        let mut types = vec![1i32; tokens.len()];
        types[0] = 3;
        types[1] = 3;
        types[19] = 4;
        let merges = vec![
            "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld",
        ];
        let mut w = GgufWriter::new();
        w.metadata("tokenizer.ggml.model", "gpt2")
            .metadata("tokenizer.ggml.pre", "smollm")
            .metadata("tokenizer.ggml.tokens", tokens)
            .metadata("tokenizer.ggml.token_type", types)
            .metadata("tokenizer.ggml.merges", merges)
            .metadata("tokenizer.ggml.bos_token_id", 1u32)
            .metadata("tokenizer.ggml.eos_token_id", 0u32);
        if let Some(add) = add_bos {
            w.metadata("tokenizer.ggml.add_bos_token", add);
        }
        w
    }

    fn tokenizer_of(w: &GgufWriter) -> Result<Value, GgufError> {
        tokenizer_json(
            &GgufFile::from_bytes("tok.gguf", w.to_bytes().expect("bytes")).expect("parse"),
        )
    }

    #[test]
    fn gpt2_vocabulary_becomes_byte_level_bpe() {
        let tok = load(&tokenizer_of(&gpt2_writer(Some(false))).expect("json"));
        let enc = tok.encode("hello world", true).expect("encode");
        assert_eq!(enc.get_ids(), [13, 18]);
        assert_eq!(enc.get_tokens(), ["hello", "Ġworld"]);
        assert_eq!(
            tok.decode(enc.get_ids(), false).expect("decode"),
            "hello world"
        );
        // Control and user-defined tokens match whole; control ones are special.
        let enc = tok
            .encode("<s>hello<tool><|endoftext|>", true)
            .expect("encode");
        assert_eq!(enc.get_ids(), [1, 13, 19, 0]);
        assert_eq!(
            tok.decode(enc.get_ids(), true).expect("decode"),
            "hello<tool>"
        );
        // Absent add_bos_token means no BOS for gpt2.
        let tok = load(&tokenizer_of(&gpt2_writer(None)).expect("json"));
        assert_eq!(tok.encode("hello", true).expect("encode").get_ids(), [13]);
    }

    #[test]
    fn gpt2_adds_bos_only_when_asked() {
        let tok = load(&tokenizer_of(&gpt2_writer(Some(true))).expect("json"));
        assert_eq!(
            tok.encode("hello world", true).expect("encode").get_ids(),
            [1, 13, 18]
        );
        assert_eq!(
            tok.encode("hello world", false).expect("encode").get_ids(),
            [13, 18]
        );
        let pair = tok.encode(("hello", "world"), true).expect("encode");
        assert_eq!(pair.get_ids(), [1, 13, 1, 7, 15, 17]);
    }

    #[test]
    fn unsupported_tokenizers_are_named() {
        let mut w = gpt2_writer(None);
        w.metadata("tokenizer.ggml.model", "bert");
        let err = tokenizer_of(&w).unwrap_err().to_string();
        assert_eq!(
            err,
            "`tok.gguf`: cannot build tokenizer: unsupported tokenizer model `bert` (supported: `gpt2`, `llama`)"
        );
        let mut w = gpt2_writer(None);
        w.metadata("tokenizer.ggml.pre", "deepseek-llm");
        assert!(tokenizer_of(&w)
            .unwrap_err()
            .to_string()
            .contains("unsupported pre-tokenizer `deepseek-llm`"));
        let mut w = gpt2_writer(None);
        w.metadata("tokenizer.ggml.token_type", vec![1i32; 3]);
        assert!(tokenizer_of(&w)
            .unwrap_err()
            .to_string()
            .contains("has 3 entries"));
        let mut w = gpt2_writer(Some(true));
        w.metadata("tokenizer.ggml.bos_token_id", 99u32);
        assert!(tokenizer_of(&w)
            .unwrap_err()
            .to_string()
            .contains("outside the vocabulary"));
    }

    #[test]
    fn llama3_and_qwen2_split_regexes_load() {
        for pre in ["llama-bpe", "qwen2", "dbrx"] {
            let mut w = gpt2_writer(None);
            w.metadata("tokenizer.ggml.pre", pre);
            let tok = load(&tokenizer_of(&w).expect("json"));
            assert_eq!(
                tok.encode("hello world", false).expect("encode").get_ids(),
                [13, 18],
                "{pre}"
            );
        }
    }

    /// `<unk> <s> </s>`, 256 byte tokens, then SentencePiece pieces with descending scores.
    fn llama_writer() -> GgufWriter {
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![2i32, 3, 3];
        let mut scores = vec![0f32; 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
            scores.push(0.0);
        }
        for (i, piece) in ["▁", "H", "e", "l", "o", "ll", "▁H", "▁He", "llo", "▁Hello"]
            .iter()
            .enumerate()
        {
            tokens.push((*piece).into());
            types.push(1);
            scores.push(-1.0 - i as f32);
        }
        let mut w = GgufWriter::new();
        w.metadata("tokenizer.ggml.model", "llama")
            .metadata("tokenizer.ggml.tokens", tokens)
            .metadata("tokenizer.ggml.scores", scores)
            .metadata("tokenizer.ggml.token_type", types)
            .metadata("tokenizer.ggml.bos_token_id", 1u32)
            .metadata("tokenizer.ggml.eos_token_id", 2u32)
            .metadata("tokenizer.ggml.unknown_token_id", 0u32);
        w
    }

    #[test]
    fn llama_vocabulary_becomes_sentencepiece_bpe() {
        let json = tokenizer_of(&llama_writer()).expect("json");
        // Merges derived from scores, best merged piece first.
        assert_eq!(
            json["model"]["merges"],
            json!([
                ["l", "l"],
                ["▁", "H"],
                ["▁H", "e"],
                ["ll", "o"],
                ["▁He", "llo"]
            ])
        );
        let tok = load(&json);
        let enc = tok.encode("Hello", true).expect("encode");
        assert_eq!(enc.get_ids(), [1, 268]);
        // "i" is not a piece: it falls back to its byte token <0x69> = 3 + 0x69.
        let enc = tok.encode("Hi", true).expect("encode");
        assert_eq!(enc.get_ids(), [1, 265, 3 + 0x69]);
        assert_eq!(tok.decode(enc.get_ids(), true).expect("decode"), "Hi");
        assert_eq!(tok.encode("Hello", false).expect("encode").get_ids(), [268]);

        let mut w = llama_writer();
        w.metadata("tokenizer.ggml.add_bos_token", false)
            .metadata("tokenizer.ggml.add_space_prefix", false)
            .metadata("tokenizer.ggml.add_eos_token", true);
        let tok = load(&tokenizer_of(&w).expect("json"));
        // No leading "▁": "Hello" → H, e, ll, o, then EOS.
        assert_eq!(
            tok.encode("Hello", true).expect("encode").get_ids(),
            [260, 261, 267, 2]
        );
    }

    /// A Gemma vocabulary: its scores say `ba` merges before `ab`, its order says `ab` first
    /// (which transformers follows for Gemma); a two-space token; a user-defined token.
    #[test]
    fn gemma_merges_follow_the_file_order_and_spaces_are_respelled() {
        let mut tokens: Vec<String> = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
            .map(String::from)
            .to_vec();
        let mut types = vec![3i32; 5];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        for piece in ["a", "b", "ab", "ba", "aba", "▁", "  ", "<t>"] {
            tokens.push(piece.into());
            types.push(if piece == "<t>" { 4 } else { 1 });
        }
        let id = |piece: &str| tokens.iter().position(|t| t == piece).unwrap() as u32;
        let (a, b, ab, ba, space, spaces, tag) = (
            id("a"),
            id("b"),
            id("ab"),
            id("ba"),
            id("▁"),
            id("  "),
            id("<t>"),
        );
        let mut scores = vec![0f32; tokens.len()];
        scores[ba as usize] = 5.0;
        let mut w = GgufWriter::new();
        w.metadata("general.architecture", "gemma3")
            .metadata("tokenizer.ggml.model", "llama")
            .metadata("tokenizer.ggml.tokens", tokens.clone())
            .metadata("tokenizer.ggml.scores", scores)
            .metadata("tokenizer.ggml.token_type", types)
            .metadata("tokenizer.ggml.bos_token_id", 2u32)
            .metadata("tokenizer.ggml.eos_token_id", 1u32)
            .metadata("tokenizer.ggml.unknown_token_id", 3u32)
            .metadata("tokenizer.ggml.add_space_prefix", false);
        let json = tokenizer_of(&w).expect("json");
        assert_eq!(
            json["model"]["merges"],
            json!([["a", "b"], ["b", "a"], ["ab", "a"], ["a", "ba"], ["▁", "▁"]])
        );
        let tok = load(&json);
        let ids = |text: &str| tok.encode(text, true).expect("encode").get_ids().to_vec();
        // By the file's order "abab" is ab·ab (by the scores it would start a·ba).
        assert_eq!(ids("abab"), [2, ab, ab]);
        // Two spaces are the respelled token, one space "▁", no prefix space; "c" falls back
        // to its byte; the user-defined token is kept whole.
        assert_eq!(ids("a  b c"), [2, a, spaces, b, space, 5 + 0x63]);
        assert_eq!(ids("<t>ba"), [2, tag, ba]);
        assert_eq!(tok.decode(&ids("a  b c"), true).expect("decode"), "a  b c");
    }
}
