//! `wanda serve`: the model in memory behind an OpenAI-compatible HTTP API on a local port, so
//! that lm-evaluation-harness's `local-completions` model (or any OpenAI client) can score and
//! generate with a pruned model with no export.
//!
//! Endpoints: `GET /v1/models`, `POST /v1/completions` (prompt as text or token ids, one or a
//! batch; `echo`, `logprobs`, `max_tokens`, `temperature`, `seed`, `stop`), the tokenizer
//! endpoints lm-eval's remote tokenizer reads (`GET /tokenizer_info`, `POST /tokenize`,
//! `POST /detokenize`) and `GET /health`.
//!
//! HTTP runs on a small tokio runtime; the model runs on the thread that called [`serve`], one
//! request at a time, fed by a bounded queue: a request that finds it full gets a 503 at once.
//! Bodies are limited in bytes and prompts per request, every prompt in tokens (the model's
//! context); each mistake is a 400 (413 for a body too large) with OpenAI's error JSON; an answer
//! that leaves the request's body unread (413, an unknown endpoint) closes the connection and
//! says so (`Connection: close`). On
//! shutdown (SIGINT/SIGTERM for the CLI) the server stops accepting connections, answers what it
//! has accepted, and returns.

pub mod complete;
pub mod harness;
pub mod openai;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use burn::prelude::Backend;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

pub use complete::Served;
use openai::{completion_body, ApiError, Choice, CompletionRequest};

/// Limits of a server.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Requests accepted and waiting for the model at most; more get a 503.
    pub queue: usize,
    /// Bytes of a request body at most; more get a 413.
    pub max_body_bytes: usize,
    /// Prompts in one completion request at most.
    pub max_prompts: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            queue: 64,
            max_body_bytes: 8 << 20,
            max_prompts: 64,
        }
    }
}

/// When a server stops.
pub enum Shutdown {
    /// At SIGINT (Ctrl-C) or SIGTERM.
    Signals,
    /// When this fires (or its sender is dropped).
    When(oneshot::Receiver<()>),
}

/// What the model thread is asked to do.
enum Work {
    Complete(CompletionRequest),
    Tokenize { text: String, special: bool },
    Detokenize(Vec<u32>),
}

/// What it answers.
enum Done {
    Choices(Vec<Choice>),
    Tokens(Vec<u32>),
    Text(String),
}

struct Job {
    work: Work,
    reply: oneshot::Sender<Result<Done, ApiError>>,
}

/// What the HTTP handlers share.
struct Shared {
    jobs: mpsc::Sender<Job>,
    name: String,
    context: usize,
    eos_token: Option<String>,
    bos_token: Option<String>,
    max_prompts: usize,
    queue: usize,
    next_id: AtomicU64,
}

/// Failures that stop a server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket or the runtime failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves `served` on `listener` until `shutdown`; `ready` is called with the address once
/// connections are accepted. The model runs on the calling thread.
pub fn serve<B: Backend>(
    served: &Served<'_, B>,
    listener: std::net::TcpListener,
    options: ServeOptions,
    shutdown: Shutdown,
    ready: impl FnOnce(SocketAddr) + Send,
) -> Result<(), ServeError> {
    let address = listener.local_addr()?;
    let (jobs, mut queue) = mpsc::channel::<Job>(options.queue.max(1));
    let token = |id: Option<u32>| id.and_then(|id| served.tokenizer.token(id));
    let shared = Arc::new(Shared {
        jobs,
        name: served.name.clone(),
        context: served.config.max_position_embeddings,
        eos_token: token(served.config.eos_token_id),
        bos_token: token(served.config.bos_token_id),
        max_prompts: options.max_prompts,
        queue: options.queue,
        next_id: AtomicU64::new(0),
    });
    std::thread::scope(|scope| {
        let http = scope.spawn(move || -> Result<(), ServeError> {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                listener.set_nonblocking(true)?;
                let listener = tokio::net::TcpListener::from_std(listener)?;
                let app = router(shared, options.max_body_bytes);
                ready(address);
                axum::serve(listener, app)
                    .with_graceful_shutdown(stopped(shutdown))
                    .await
            })?;
            Ok(())
        });
        // The model's loop: ends when the HTTP side has stopped and dropped its senders.
        while let Some(job) = queue.blocking_recv() {
            let _ = job.reply.send(work(served, job.work));
        }
        http.join().expect("the HTTP thread does not panic")
    })
}

/// Resolves when the server should stop.
async fn stopped(shutdown: Shutdown) {
    match shutdown {
        Shutdown::When(fire) => {
            let _ = fire.await;
        }
        Shutdown::Signals => {
            let interrupt = tokio::signal::ctrl_c();
            #[cfg(unix)]
            {
                use tokio::signal::unix::{signal, SignalKind};
                match signal(SignalKind::terminate()) {
                    Ok(mut term) => {
                        tokio::select! {
                            _ = interrupt => {}
                            _ = term.recv() => {}
                        }
                    }
                    Err(_) => {
                        let _ = interrupt.await;
                    }
                }
            }
            #[cfg(not(unix))]
            {
                let _ = interrupt.await;
            }
            eprintln!("wanda serve: stopping; answering the requests already accepted");
        }
    }
}

/// Runs one job on the model.
fn work<B: Backend>(served: &Served<'_, B>, work: Work) -> Result<Done, ApiError> {
    match work {
        Work::Complete(request) => {
            let ids = served.check(&request)?;
            let mut rng = StdRng::seed_from_u64(request.seed.unwrap_or(0));
            Ok(Done::Choices(
                ids.iter()
                    .enumerate()
                    .map(|(i, ids)| served.complete(&request, i, ids, &mut rng))
                    .collect(),
            ))
        }
        Work::Tokenize { text, special } => served
            .tokenizer
            .encode_with(&text, special)
            .map(Done::Tokens)
            .map_err(|e| ApiError::invalid(format!("cannot tokenize: {e}"))),
        Work::Detokenize(ids) => served
            .tokenizer
            .decode(&ids)
            .map(Done::Text)
            .map_err(|e| ApiError::invalid(format!("cannot detokenize: {e}"))),
    }
}

fn router(shared: Arc<Shared>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/tokenizer_info", get(tokenizer_info))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/health", get(|| async { "ok" }))
        .fallback(|| async {
            Refusal::Close(ApiError {
                status: 404,
                kind: "not_found_error",
                message: "no such endpoint; this server has /v1/models, /v1/completions, \
                          /tokenize, /detokenize, /tokenizer_info and /health"
                    .into(),
            })
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(shared)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.body())).into_response()
    }
}

/// How a handler refuses a request: its error answered on a connection that stays open, or,
/// where the request's body is left unread, with `Connection: close`: the server then closes
/// the connection and says so, so that a client that pools connections sends its next request
/// on a new one instead of the closed one.
enum Refusal {
    /// The body was read: the connection stays open.
    Answer(ApiError),
    /// The body was not read (413, an unknown endpoint): the connection closes.
    Close(ApiError),
}

impl From<ApiError> for Refusal {
    fn from(error: ApiError) -> Refusal {
        Refusal::Answer(error)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Answer(error) => error.into_response(),
            Refusal::Close(error) => {
                let mut response = error.into_response();
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                response
            }
        }
    }
}

/// The body, or the error a client sees (413 past the size limit), which closes the
/// connection.
fn body(read: Result<Bytes, BytesRejection>) -> Result<Bytes, Refusal> {
    read.map_err(|rejection| {
        Refusal::Close(ApiError {
            status: rejection.status().as_u16(),
            kind: "invalid_request_error",
            message: format!("the request body cannot be read: {}", rejection.body_text()),
        })
    })
}

/// Hands `work` to the model thread and waits for it; 503 when the queue is full.
async fn submit(shared: &Shared, work: Work) -> Result<Done, ApiError> {
    let (reply, answer) = oneshot::channel();
    shared
        .jobs
        .try_send(Job { work, reply })
        .map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => ApiError {
                status: 503,
                kind: "server_busy",
                message: format!(
                    "{} requests are already waiting for the model; retry later \
                     (`wanda serve --queue` sets how many may wait)",
                    shared.queue
                ),
            },
            mpsc::error::TrySendError::Closed(_) => shutting_down(),
        })?;
    answer.await.map_err(|_| shutting_down())?
}

fn shutting_down() -> ApiError {
    ApiError {
        status: 503,
        kind: "server_error",
        message: "the server is shutting down".into(),
    }
}

async fn models(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": shared.name, "object": "model", "created": 0, "owned_by": "wanda",
                  "max_model_len": shared.context}],
    }))
}

async fn completions(
    State(shared): State<Arc<Shared>>,
    read: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Refusal> {
    let request = CompletionRequest::parse(&body(read)?, shared.max_prompts)?;
    if let Some(model) = request.model.as_deref().filter(|m| *m != shared.name) {
        return Err(ApiError {
            status: 404,
            kind: "model_not_found",
            message: format!(
                "the model `{model}` does not exist here; this server has `{}`",
                shared.name
            ),
        }
        .into());
    }
    let Done::Choices(choices) = submit(&shared, Work::Complete(request)).await? else {
        return Err(shutting_down().into());
    };
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(Json(completion_body(id, created, &shared.name, &choices)))
}

async fn tokenizer_info(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({
        "eos_token": shared.eos_token,
        "bos_token": shared.bos_token,
        "pad_token": null,
        "model_max_length": shared.context,
        "tokenizer_class": "wanda",
    }))
}

/// A JSON object body, or a 400.
fn object(read: Result<Bytes, BytesRejection>) -> Result<serde_json::Map<String, Value>, Refusal> {
    let bytes = body(read)?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::invalid("the body must be a JSON object").into()),
        Err(e) => Err(ApiError::invalid(format!("the body is not valid JSON: {e}")).into()),
    }
}

async fn tokenize(
    State(shared): State<Arc<Shared>>,
    read: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Refusal> {
    let fields = object(read)?;
    let Some(text) = fields.get("prompt").and_then(Value::as_str) else {
        return Err(ApiError::invalid("`prompt` must be a string").into());
    };
    let special = fields
        .get("add_special_tokens")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let work = Work::Tokenize {
        text: text.to_string(),
        special,
    };
    let Done::Tokens(tokens) = submit(&shared, work).await? else {
        return Err(shutting_down().into());
    };
    Ok(Json(json!({
        "tokens": tokens, "count": tokens.len(), "max_model_len": shared.context,
    })))
}

async fn detokenize(
    State(shared): State<Arc<Shared>>,
    read: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Refusal> {
    let fields = object(read)?;
    let ids: Option<Vec<u32>> = fields
        .get("tokens")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok()))
                .collect()
        });
    let Some(ids) = ids else {
        return Err(ApiError::invalid("`tokens` must be a list of token ids").into());
    };
    let Done::Text(prompt) = submit(&shared, Work::Detokenize(ids)).await? else {
        return Err(shutting_down().into());
    };
    Ok(Json(json!({ "prompt": prompt })))
}
