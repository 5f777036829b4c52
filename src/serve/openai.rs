//! The OpenAI completions wire format that `wanda serve` speaks: requests read leniently
//! (unknown fields ignored, as OpenAI clients send extras) but checked strictly, each mistake a
//! 400 naming the field; responses as OpenAI's legacy `/v1/completions` writes them, which
//! lm-evaluation-harness's `local-completions` model reads.

use serde::Serialize;
use serde_json::Value;

/// An error a client sees: its HTTP status and OpenAI's `{"error": {...}}` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// OpenAI's error type (`invalid_request_error`, `server_error`, …).
    pub kind: &'static str,
    /// One line saying what is wrong and what to send instead.
    pub message: String,
}

impl ApiError {
    /// A 400: the request is wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        serde_json::json!({
            "error": {"message": self.message, "type": self.kind, "param": null, "code": null}
        })
    }
}

/// One prompt: token ids, and the text when it came as text.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Text, tokenized by the server.
    Text(String),
    /// Token ids, used as they are.
    Ids(Vec<u32>),
}

/// A checked `/v1/completions` request.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// The model named, if any.
    pub model: Option<String>,
    /// The prompts, one choice each.
    pub prompts: Vec<Prompt>,
    /// Tokens to generate at most (OpenAI's default 16).
    pub max_tokens: usize,
    /// Whether the prompt is part of the returned text and log-probabilities.
    pub echo: bool,
    /// How many most likely tokens to list per position, when log-probabilities are asked for.
    pub logprobs: Option<usize>,
    /// Sampling temperature (OpenAI's default 1); 0 is greedy.
    pub temperature: f64,
    /// Seed of the sampler.
    pub seed: Option<u64>,
    /// Texts that end the generation (not included in it).
    pub stop: Vec<String>,
}

/// The most alternatives `logprobs` may ask for, as OpenAI allows.
pub const MAX_LOGPROBS: usize = 5;

/// The most stop sequences, as OpenAI allows.
pub const MAX_STOP: usize = 4;

impl CompletionRequest {
    /// Reads a request body: JSON, an object, with a `prompt` and fields of the right types.
    pub fn parse(body: &[u8], max_prompts: usize) -> Result<Self, ApiError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}")))?;
        let Value::Object(fields) = value else {
            return Err(ApiError::invalid("the body must be a JSON object"));
        };
        let field = |name: &str| fields.get(name).filter(|v| !v.is_null());
        let wrong = |name: &str, what: &str| ApiError::invalid(format!("`{name}` must be {what}"));
        let uint = |name: &str| -> Result<Option<u64>, ApiError> {
            field(name)
                .map(|v| {
                    v.as_u64()
                        .ok_or_else(|| wrong(name, "a non-negative integer"))
                })
                .transpose()
        };
        if field("stream").and_then(Value::as_bool) == Some(true) {
            return Err(ApiError::invalid(
                "`stream: true` is not supported; leave it out for one JSON response",
            ));
        }
        if let Some(n) = uint("n")? {
            if n != 1 {
                return Err(ApiError::invalid("`n` must be 1 (one choice per prompt)"));
            }
        }
        if uint("best_of")?.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid("`best_of` must be 1"));
        }
        let model = match field("model") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(wrong("model", "a string")),
        };
        let prompts = prompts(field("prompt"))?;
        if prompts.len() > max_prompts {
            return Err(ApiError::invalid(format!(
                "`prompt` holds {} prompts; this server takes at most {max_prompts} per request \
                 (`wanda serve --max-prompts`)",
                prompts.len()
            )));
        }
        let max_tokens = uint("max_tokens")?.unwrap_or(16) as usize;
        let echo = match field("echo") {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| wrong("echo", "true or false"))?,
        };
        let logprobs = uint("logprobs")?.map(|n| n as usize);
        if logprobs.is_some_and(|n| n > MAX_LOGPROBS) {
            return Err(ApiError::invalid(format!(
                "`logprobs` must be at most {MAX_LOGPROBS}"
            )));
        }
        let temperature = match field("temperature") {
            None => 1.0,
            Some(v) => v
                .as_f64()
                .filter(|t| (0.0..=2.0).contains(t))
                .ok_or_else(|| wrong("temperature", "a number from 0 to 2"))?,
        };
        let stop = match field("stop") {
            None => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| wrong("stop", "a string or a list of strings"))?,
            Some(_) => return Err(wrong("stop", "a string or a list of strings")),
        };
        if stop.len() > MAX_STOP || stop.iter().any(String::is_empty) {
            return Err(ApiError::invalid(format!(
                "`stop` takes at most {MAX_STOP} non-empty strings"
            )));
        }
        Ok(CompletionRequest {
            model,
            prompts,
            max_tokens,
            echo,
            logprobs,
            temperature,
            seed: uint("seed")?,
            stop,
        })
    }
}

/// `prompt` as a string, a list of strings, a list of token ids or a list of such lists.
fn prompts(value: Option<&Value>) -> Result<Vec<Prompt>, ApiError> {
    let wrong = || {
        ApiError::invalid(
            "`prompt` must be a string, a list of strings, a list of token ids or a list of \
             lists of token ids",
        )
    };
    let ids = |items: &[Value]| -> Option<Vec<u32>> {
        items
            .iter()
            .map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect()
    };
    let prompts = match value.ok_or_else(|| ApiError::invalid("`prompt` is missing"))? {
        Value::String(s) => vec![Prompt::Text(s.clone())],
        Value::Array(items) if items.is_empty() => return Err(wrong()),
        Value::Array(items) => match &items[0] {
            Value::Number(_) => vec![Prompt::Ids(ids(items).ok_or_else(wrong)?)],
            Value::String(_) => items
                .iter()
                .map(|v| v.as_str().map(|s| Prompt::Text(s.to_string())))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(wrong)?,
            Value::Array(_) => items
                .iter()
                .map(|v| v.as_array().and_then(|a| ids(a)).map(Prompt::Ids))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(wrong)?,
            _ => return Err(wrong()),
        },
        _ => return Err(wrong()),
    };
    Ok(prompts)
}

/// Log-probabilities of one choice, position by position, as OpenAI's legacy format has them.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Logprobs {
    /// Each token as text.
    pub tokens: Vec<String>,
    /// Each token's log-probability given the tokens before it (`null` for the first prompt
    /// token, which has none).
    pub token_logprobs: Vec<Option<f64>>,
    /// The most likely tokens at each position and their log-probabilities.
    pub top_logprobs: Vec<Option<serde_json::Map<String, Value>>>,
    /// Where each token starts in `text`, in characters.
    pub text_offset: Vec<usize>,
}

/// One choice of a completion.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Choice {
    /// Which prompt this answers.
    pub index: usize,
    /// The generated text (after the prompt's, with `echo`).
    pub text: String,
    /// Present when the request asked for `logprobs`.
    pub logprobs: Option<Logprobs>,
    /// `length` (max_tokens reached) or `stop` (a stop text or the end-of-sequence token).
    pub finish_reason: &'static str,
    /// Prompt tokens, for `usage`.
    #[serde(skip)]
    pub prompt_tokens: usize,
    /// Generated tokens, for `usage`.
    #[serde(skip)]
    pub completion_tokens: usize,
}

/// A `/v1/completions` response body.
pub fn completion_body(id: u64, created: u64, model: &str, choices: &[Choice]) -> Value {
    let prompt: usize = choices.iter().map(|c| c.prompt_tokens).sum();
    let completion: usize = choices.iter().map(|c| c.completion_tokens).sum();
    serde_json::json!({
        "id": format!("cmpl-{id}"),
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<CompletionRequest, ApiError> {
        CompletionRequest::parse(body.as_bytes(), 8)
    }

    #[test]
    fn lm_evals_loglikelihood_request_is_read() {
        let r = parse(
            r#"{"model":"m","prompt":[[1,2,3],[4,5]],"temperature":0,"max_tokens":1,
                "logprobs":1,"seed":1234,"echo":true}"#,
        )
        .unwrap();
        assert_eq!(
            r.prompts,
            [Prompt::Ids(vec![1, 2, 3]), Prompt::Ids(vec![4, 5])]
        );
        assert_eq!((r.max_tokens, r.echo, r.logprobs), (1, true, Some(1)));
        assert_eq!((r.temperature, r.seed), (0.0, Some(1234)));
        let r = parse(r#"{"prompt":"Hi","stop":"\n","extra":{"ignored":true}}"#).unwrap();
        assert_eq!(r.prompts, [Prompt::Text("Hi".into())]);
        assert_eq!((r.max_tokens, r.temperature), (16, 1.0));
        assert_eq!(r.stop, ["\n"]);
        assert_eq!(
            parse(r#"{"prompt":[7]}"#).unwrap().prompts,
            [Prompt::Ids(vec![7])]
        );
    }

    #[test]
    fn each_mistake_is_a_400_naming_the_field() {
        for (body, says) in [
            ("{not json", "not valid JSON"),
            ("[1]", "JSON object"),
            ("{}", "`prompt` is missing"),
            (r#"{"prompt":[]}"#, "`prompt` must be"),
            (r#"{"prompt":[1,"a"]}"#, "`prompt` must be"),
            (r#"{"prompt":[-1]}"#, "`prompt` must be"),
            (r#"{"prompt":"a","max_tokens":-1}"#, "`max_tokens`"),
            (
                r#"{"prompt":"a","logprobs":6}"#,
                "`logprobs` must be at most 5",
            ),
            (r#"{"prompt":"a","temperature":"hot"}"#, "`temperature`"),
            (r#"{"prompt":"a","echo":1}"#, "`echo`"),
            (r#"{"prompt":"a","stream":true}"#, "`stream: true`"),
            (r#"{"prompt":"a","n":2}"#, "`n` must be 1"),
            (r#"{"prompt":"a","stop":["",""]}"#, "`stop`"),
            (
                r#"{"prompt":["a","b","c","d","e","f","g","h","i"]}"#,
                "at most 8",
            ),
        ] {
            let err = parse(body).unwrap_err();
            assert_eq!(err.status, 400, "{body}");
            assert!(err.message.contains(says), "{body}: {}", err.message);
        }
    }
}
