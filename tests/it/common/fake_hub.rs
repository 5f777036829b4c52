//! A hub imitation on `127.0.0.1`, in the URL layout and with the headers of huggingface.co,
//! serving one model repository (`org/tiny-llama`) or any set of model and data-set repositories. Shared by the hub's unit tests
//! (`src/model/hub.rs`, through `#[path]`) and the integration tests; each uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub(crate) const REPO: &str = "org/tiny-llama";
pub(crate) const COMMIT: &str = "3f1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d";
pub(crate) const SHARD_1: &str = "model-00001-of-00002.safetensors";
pub(crate) const SHARD_2: &str = "model-00002-of-00002.safetensors";

/// One request the fake hub received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) path: String,
    pub(crate) authorization: Option<String>,
}

/// The contents of the fake repository `org/tiny-llama`.
pub(crate) struct FakeRepo {
    pub(crate) files: BTreeMap<String, Vec<u8>>,
    /// When set, the repository is private and needs `Authorization: Bearer <token>`.
    pub(crate) token: Option<String>,
    /// When set, the CDN serves LFS files with their first byte flipped.
    pub(crate) corrupt: bool,
}

/// A hub imitation on `127.0.0.1`, in the URL layout and with the headers of huggingface.co.
pub(crate) struct FakeHub {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// One HTTP answer.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) reason: &'static str,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

impl FakeHub {
    /// Serves `repo` as the model repository [`REPO`].
    pub(crate) fn start(repo: FakeRepo) -> Self {
        Self::start_many(vec![(REPO.to_owned(), repo)])
    }

    /// Serves each repository under its URL id: `org/name` for a model,
    /// `datasets/org/name` for a data set.
    pub(crate) fn start_many(repos: Vec<(String, FakeRepo)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
            let base = format!("http://{addr}");
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        // A broken connection only fails the client's request.
                        let _ = serve(stream, &repos, &base, &seen);
                    }
                }
            })
        };
        Self {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub(crate) fn shutdown(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.store(true, Ordering::SeqCst);
            // Wake the accept loop so it sees the flag.
            let _ = TcpStream::connect(self.addr);
            thread.join().unwrap();
        }
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Reads one request from `stream`, records it and answers it, closing the connection.
pub(crate) fn serve(
    mut stream: TcpStream,
    repos: &[(String, FakeRepo)],
    base: &str,
    seen: &Mutex<Vec<Seen>>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let authorization = headers.get("authorization").cloned();
    seen.lock().unwrap().push(Seen {
        path: path.clone(),
        authorization: authorization.clone(),
    });
    let reply = route(
        repos,
        base,
        &path,
        authorization.as_deref(),
        headers.get("range").map(String::as_str),
    );
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reply.reason);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        reply.body.len()
    ));
    stream.write_all(head.as_bytes())?;
    if method != "HEAD" {
        stream.write_all(&reply.body)?;
    }
    stream.flush()
}

/// Answers `path` the way huggingface.co does.
///
/// `/{repo}/resolve/{revision}/{file}` serves small (git) files directly with
/// `ETag` and `X-Repo-Commit`, and redirects LFS files (`*.safetensors`, `*.parquet`, `*.gz`)
/// to a content-addressed CDN URL with `X-Linked-Etag`, `X-Linked-Size` and
/// `X-Repo-Commit`; byte ranges are honoured with `206` and `Content-Range`.
/// `/api/{models|datasets}/{repo}/revision/{revision}` lists the files.
pub(crate) fn route(
    repos: &[(String, FakeRepo)],
    base: &str,
    path: &str,
    authorization: Option<&str>,
    range: Option<&str>,
) -> Reply {
    if let Some(oid) = path.strip_prefix("/cdn/") {
        // A pre-signed CDN URL: no authorization needed.
        let found = repos.iter().find_map(|(_, repo)| {
            let bytes = repo.files.values().find(|bytes| lfs_oid(bytes) == oid)?;
            Some((repo, bytes))
        });
        return match found {
            Some((repo, bytes)) if repo.corrupt => {
                let mut damaged = bytes.clone();
                damaged[0] ^= 0xff;
                ranged(&damaged, range, vec![("ETag", format!("\"{oid}\""))])
            }
            Some((_, bytes)) => ranged(bytes, range, vec![("ETag", format!("\"{oid}\""))]),
            None => error(404, "NoSuchKey", "no such key"),
        };
    }
    let found = repos.iter().find_map(|(id, repo)| {
        let api_id = match id.strip_prefix("datasets/") {
            Some(name) => format!("/api/datasets/{name}/revision/"),
            None => format!("/api/models/{id}/revision/"),
        };
        if let Some(revision) = path.strip_prefix(&api_id) {
            return Some((repo, None, revision));
        }
        path.strip_prefix(&format!("/{id}/resolve/"))
            .map(|rest| (repo, Some(rest), ""))
    });
    let Some((repo, rest, listed_revision)) = found else {
        return error(404, "RepoNotFound", "Repository not found");
    };
    if let Some(token) = &repo.token {
        if authorization != Some(format!("Bearer {token}").as_str()) {
            return error(
                401,
                "RepoNotFound",
                "Invalid credentials in Authorization header",
            );
        }
    }
    let Some(rest) = rest else {
        if listed_revision != "main" && listed_revision != COMMIT {
            return error(404, "RevisionNotFound", "Invalid rev id");
        }
        let siblings: Vec<String> = repo
            .files
            .keys()
            .map(|name| format!("{{\"rfilename\":\"{name}\"}}"))
            .collect();
        let body = format!(
            "{{\"sha\":\"{COMMIT}\",\"siblings\":[{}]}}",
            siblings.join(",")
        );
        return Reply {
            status: 200,
            reason: "OK",
            headers: vec![("Content-Type", "application/json".to_owned())],
            body: body.into_bytes(),
        };
    };
    let Some((revision, file)) = rest.split_once('/') else {
        return error(404, "EntryNotFound", "Entry not found");
    };
    if revision != "main" && revision != COMMIT {
        return error(404, "RevisionNotFound", "Invalid rev id");
    }
    let commit = ("X-Repo-Commit", COMMIT.to_owned());
    let Some(bytes) = repo.files.get(file) else {
        let mut reply = error(404, "EntryNotFound", "Entry not found");
        reply.headers.push(commit);
        return reply;
    };
    if [".safetensors", ".parquet", ".gz"]
        .iter()
        .any(|ext| file.ends_with(ext))
    {
        let oid = lfs_oid(bytes);
        Reply {
            status: 302,
            reason: "Found",
            headers: vec![
                ("Location", format!("{base}/cdn/{oid}")),
                ("ETag", format!("\"{}\"", git_oid(bytes))),
                ("X-Linked-Etag", format!("\"{oid}\"")),
                ("X-Linked-Size", bytes.len().to_string()),
                commit,
            ],
            body: Vec::new(),
        }
    } else {
        let etag = ("ETag", format!("\"{}\"", git_oid(bytes)));
        ranged(bytes, range, vec![etag, commit])
    }
}

/// `bytes`, whole (`200`) or the requested `Range` (`206` with `Content-Range`).
pub(crate) fn ranged(
    bytes: &[u8],
    range: Option<&str>,
    mut headers: Vec<(&'static str, String)>,
) -> Reply {
    headers.push(("Accept-Ranges", "bytes".to_owned()));
    headers.push(("Content-Type", "application/octet-stream".to_owned()));
    let len = bytes.len();
    let Some((start, end)) = range.and_then(parse_range) else {
        return Reply {
            status: 200,
            reason: "OK",
            headers,
            body: bytes.to_vec(),
        };
    };
    let end = end.unwrap_or(usize::MAX).min(len.saturating_sub(1));
    if start >= len || end < start {
        return Reply {
            status: 416,
            reason: "Range Not Satisfiable",
            headers: vec![("Content-Range", format!("bytes */{len}"))],
            body: Vec::new(),
        };
    }
    headers.push(("Content-Range", format!("bytes {start}-{end}/{len}")));
    Reply {
        status: 206,
        reason: "Partial Content",
        headers,
        body: bytes[start..=end].to_vec(),
    }
}

/// `bytes=START-` or `bytes=START-END`.
pub(crate) fn parse_range(range: &str) -> Option<(usize, Option<usize>)> {
    let (start, end) = range.strip_prefix("bytes=")?.split_once('-')?;
    let end = if end.is_empty() {
        None
    } else {
        Some(end.parse().ok()?)
    };
    Some((start.parse().ok()?, end))
}

/// A hub error answer with its `X-Error-Code`.
pub(crate) fn error(status: u16, code: &str, message: &str) -> Reply {
    let reason = match status {
        401 => "Unauthorized",
        _ => "Not Found",
    };
    Reply {
        status,
        reason,
        headers: vec![
            ("X-Error-Code", code.to_owned()),
            ("X-Error-Message", message.to_owned()),
            ("Content-Type", "application/json".to_owned()),
        ],
        body: format!("{{\"error\":\"{message}\"}}").into_bytes(),
    }
}

/// Every file under `dir`, recursively (none when it does not exist).
pub(crate) fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A stand-in for the git blob id (40 hex digits).
pub(crate) fn git_oid(bytes: &[u8]) -> String {
    fake_digest(&[b"blob:".as_slice(), bytes].concat(), 40)
}

/// The LFS object id: the content's SHA-256, as the hub announces it.
pub(crate) fn lfs_oid(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(bytes))
}

/// FNV-1a based hex digest, `hex_len` digits long (no hashing crate needed).
pub(crate) fn fake_digest(bytes: &[u8], hex_len: usize) -> String {
    let mut out = String::new();
    let mut seed = 0xcbf2_9ce4_8422_2325_u64;
    while out.len() < hex_len {
        let mut hash = seed;
        for &byte in bytes {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        out.push_str(&format!("{hash:016x}"));
        seed = hash ^ 0x9e37_79b9_7f4a_7c15;
    }
    out.truncate(hex_len);
    out
}
