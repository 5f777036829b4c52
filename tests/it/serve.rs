//! `wanda serve` over loopback HTTP: scores equal to the model's own in this process, the
//! OpenAI error shapes for bad requests, many clients at once, and a clean stop on SIGTERM in
//! the middle of a request.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use wanda::memory::log::read_proc_kib;

use crate::common::{logits, save_tiny_hf_folder, shared, tiny_config, tiny_model};

/// A `wanda serve` process on a free port, killed when dropped.
struct Server {
    child: Child,
    url: String,
    stderr: BufReader<std::process::ChildStderr>,
}

impl Server {
    fn start(model: &std::path::Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wanda"))
            .args(["serve", "--port", "0", "--device", "cpu", "--model"])
            .arg(model)
            .args(extra)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        // Owned by the guard first, so that a failed start still kills and reaps the process.
        let mut server = Server {
            child,
            url: String::new(),
            stderr,
        };
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                server.stderr.read_line(&mut line).unwrap() > 0,
                "serve exited early"
            );
            if let Some(rest) = line.split(" at http://").nth(1) {
                let address = rest.split("/v1").next().unwrap();
                server.url = format!("http://{address}");
                return server;
            }
        }
    }

    /// POSTs `body` to `path`: the status and the JSON answer.
    fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let response = ureq::post(&format!("{}{path}", self.url))
            .set("Content-Type", "application/json")
            .send_string(body);
        let (status, response) = match response {
            Ok(r) => (r.status(), r),
            Err(ureq::Error::Status(code, r)) => (code, r),
            Err(e) => panic!("{path}: {e}"),
        };
        (
            status,
            serde_json::from_str(&response.into_string().unwrap()).unwrap(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tiny_server(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    save_tiny_hf_folder(dir.path(), 11);
    let server = Server::start(dir.path(), extra);
    (dir, server)
}

/// Log-softmax of a row in f64.
fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max
        + row
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln();
    row.iter().map(|&l| l as f64 - lse).collect()
}

#[test]
fn a_loopback_client_gets_the_scores_of_the_model_in_this_process() {
    let (_dir, server) = tiny_server(&[]);
    let models: Value = serde_json::from_str(
        &ureq::get(&format!("{}/v1/models", server.url))
            .call()
            .unwrap()
            .into_string()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(models["data"][0]["object"], "model");
    let prompts = [vec![1u32, 5, 9, 3, 7, 2, 11], vec![4u32, 4, 20]];
    // lm-eval's log-likelihood request: token ids, echo, one log-probability, one token.
    let body = json!({"prompt": prompts, "max_tokens": 1, "echo": true, "logprobs": 1,
                      "temperature": 0, "seed": 1234});
    let (status, answer) = server.post("/v1/completions", &body.to_string());
    assert_eq!(status, 200, "{answer}");
    let model = tiny_model(&tiny_config("LlamaForCausalLM", true), 11);
    for (i, ids) in prompts.iter().enumerate() {
        let choice = &answer["choices"][i];
        assert_eq!(choice["index"], i);
        let ours: Vec<i64> = ids.iter().map(|&t| t as i64).collect();
        let rows: Vec<Vec<f64>> = logits(&model, &ours).chunks(32).map(log_softmax).collect();
        let lp = &choice["logprobs"];
        let token_lps = lp["token_logprobs"].as_array().unwrap();
        // The prompt's tokens, then the one generated.
        assert_eq!(token_lps.len(), ids.len() + 1);
        assert!(token_lps[0].is_null() && lp["top_logprobs"][0].is_null());
        for p in 1..ids.len() {
            let want = rows[p - 1][ids[p] as usize];
            let got = token_lps[p].as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-5,
                "prompt {i} position {p}: {got} vs {want}"
            );
            let top = lp["top_logprobs"][p].as_object().unwrap();
            let best = rows[p - 1]
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max);
            let top_value = top.values().next().unwrap().as_f64().unwrap();
            assert_eq!(top.len(), 1);
            assert!((top_value - best).abs() < 1e-5, "{top_value} vs {best}");
        }
        // The generated token is the greedy one, scored on the last row.
        let last = &rows[ids.len() - 1];
        let greedy = last.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let got = token_lps[ids.len()].as_f64().unwrap();
        assert!((got - greedy).abs() < 1e-5, "{got} vs {greedy}");
    }
    assert_eq!(answer["usage"]["prompt_tokens"], 10);
    assert_eq!(answer["object"], "text_completion");
}

#[test]
fn bad_requests_get_openai_errors_that_name_the_problem() {
    let (_dir, server) = tiny_server(&["--max-body", "2KiB", "--name", "tiny"]);
    let check = |path: &str, body: &str, status: u16, says: &str| {
        let (got, answer) = server.post(path, body);
        assert_eq!(got, status, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    };
    check(
        "/v1/completions",
        "{\"prompt\": [1, 2",
        400,
        "not valid JSON",
    );
    check(
        "/v1/completions",
        r#"{"prompt": {"a": 1}}"#,
        400,
        "`prompt` must be",
    );
    check(
        "/v1/completions",
        r#"{"prompt": [99]}"#,
        400,
        "outside the model's vocabulary",
    );
    check(
        "/v1/completions",
        r#"{"prompt": [1], "model": "other"}"#,
        404,
        "this server has `tiny`",
    );
    // The tiny model's context is 128 positions.
    let long = json!({"prompt": vec![3u32; 120], "max_tokens": 16}).to_string();
    check(
        "/v1/completions",
        &long,
        400,
        "exceed the model's context of 128",
    );
    let huge = json!({"prompt": "the ".repeat(1000)}).to_string();
    check("/v1/completions", &huge, 413, "cannot be read");
    check("/v1/nothing", "{}", 404, "no such endpoint");
    // The server still answers afterwards.
    let (status, _) = server.post("/v1/completions", r#"{"prompt": [1], "max_tokens": 1}"#);
    assert_eq!(status, 200);
}

/// The resident memory of process `pid` in bytes (Linux), `None` elsewhere.
fn resident_bytes(pid: u32) -> Option<u64> {
    read_proc_kib(&format!("/proc/{pid}/status"), &["VmRSS:"])[0]
}

/// A client that pools its connections, as aiohttp and lm-eval's do: an answer that leaves the
/// body unread says `Connection: close`, so the next request goes on a new connection; the
/// soak sends thousands of good and oversized requests on one pool and every good one is
/// answered, with the server's resident memory flat.
#[test]
fn a_pooling_client_is_told_when_a_connection_closes_and_every_good_request_is_answered() {
    let (_dir, server) = tiny_server(&["--max-body", "2KiB"]);
    let agent = ureq::AgentBuilder::new()
        .max_idle_connections_per_host(8)
        .build();
    let send = |path: &str, body: &str| {
        let response = agent
            .post(&format!("{}{path}", server.url))
            .set("Content-Type", "application/json")
            .send_string(body);
        let response = match response {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{path}: {e}"),
        };
        let connection = response.header("connection").map(str::to_string);
        (
            response.status(),
            connection,
            response.into_string().unwrap(),
        )
    };
    // Past the 2 KiB limit, and small enough to lie in the socket buffers whole: a larger body
    // meets the closed connection while it is still being sent (a broken pipe, not a 413).
    let oversized = json!({"prompt": "the ".repeat(1500)}).to_string();
    let good = r#"{"prompt": "a b c"}"#;
    let (status, connection, _) = send("/v1/completions", &oversized);
    assert_eq!((status, connection.as_deref()), (413, Some("close")));
    let (status, connection, _) = send("/v1/nothing", good);
    assert_eq!((status, connection.as_deref()), (404, Some("close")));
    let (status, connection, _) = send("/tokenize", good);
    assert_eq!(
        (status, connection),
        (200, None),
        "a read body keeps the connection"
    );
    let soak = |requests: usize| {
        for i in 0..requests {
            if i % 5 == 0 {
                assert_eq!(send("/tokenize", &oversized).0, 413);
            } else {
                let (status, _, answer) = send("/tokenize", good);
                assert_eq!(status, 200, "request {i}: {answer}");
            }
        }
    };
    soak(500);
    let pid = server.child.id();
    let before = resident_bytes(pid);
    soak(3000);
    if let (Some(before), Some(after)) = (before, resident_bytes(pid)) {
        let growth = after as f64 - before as f64;
        eprintln!("serve resident: {before} B after 500 requests, {after} B after 3,500");
        assert!(
            growth < 16e6,
            "resident memory grew {growth} B over 3,000 requests"
        );
    }
}

#[test]
fn sixty_four_clients_at_once_all_get_their_answers() {
    let (_dir, server) = tiny_server(&["--queue", "64"]);
    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..64)
            .map(|i| {
                let server = &server;
                scope.spawn(move || {
                    let prompt: Vec<u32> = vec![1 + (i % 7) as u32, 5, 9];
                    let body = json!({"prompt": prompt, "max_tokens": 4, "temperature": 0,
                                      "logprobs": 1});
                    server.post("/v1/completions", &body.to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (status, answer)) in answers.iter().enumerate() {
        assert_eq!(*status, 200, "{answer}");
        // Greedy decoding: the same prompt gets the same tokens whichever client sent it.
        let same = &answers[i % 7].1;
        assert_eq!(
            answer["choices"][0]["logprobs"]["tokens"],
            same["choices"][0]["logprobs"]["tokens"]
        );
    }
}

#[test]
fn sigterm_in_the_middle_of_a_request_finishes_it_and_exits_cleanly() {
    let Some(gguf) = shared("models/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let mut server = Server::start(&gguf, &[]);
    let pid = server.child.id();
    let body =
        json!({"prompt": ["Once upon a time"], "max_tokens": 8, "temperature": 0}).to_string();
    let (answer, answered_at, signalled_at) = std::thread::scope(|scope| {
        let request = scope.spawn(|| {
            let answer = server.post("/v1/completions", &body);
            (answer, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(300));
        let kill = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        assert!(kill.unwrap().success());
        let signalled_at = Instant::now();
        let (answer, answered_at) = request.join().unwrap();
        (answer, answered_at, signalled_at)
    });
    let (status, answer) = answer;
    assert_eq!(status, 200, "{answer}");
    for choice in answer["choices"].as_array().unwrap() {
        assert!(!choice["text"].as_str().unwrap().is_empty(), "{answer}");
    }
    let exit = server.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut server.stderr, &mut rest).unwrap();
    assert!(rest.contains("stopping"), "{rest}");
    // The answer came after the signal: the request was in flight when it arrived.
    assert!(
        answered_at > signalled_at,
        "the request ended before the signal"
    );
}

#[test]
fn a_harness_pipeline_without_lm_eval_stops_with_the_install_line_and_no_record() {
    let dir = tempfile::tempdir().unwrap();
    save_tiny_hf_folder(&dir.path().join("tiny"), 5);
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zeroshot");
    let pipeline = dir.path().join("h.yaml");
    std::fs::write(
        &pipeline,
        format!(
            "name: h\ndevice: cpu\nmodel: {{ path: tiny }}\nstages:\n  load: {{}}\n  eval:\n    \
             perplexity: false\n    zeroshot: {{ tasks: [boolq], limit: 2, data: {}, harness: \
             lm-eval }}\n",
            data.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args(["run", "h.yaml", "--results", "r"])
        .current_dir(dir.path())
        .env("WANDA_LM_EVAL", dir.path().join("no-lm_eval-here"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("pip install 'lm-eval[api]==0.4.13'") && stderr.contains("WANDA_LM_EVAL"),
        "{stderr}"
    );
    let records: Vec<_> = crate::common::fake_hub::walk(&dir.path().join("r"))
        .into_iter()
        .filter(|p| p.ends_with("run.json"))
        .collect();
    assert!(records.is_empty(), "{records:?}");
}

#[test]
fn a_full_queue_refuses_with_a_503_and_the_rest_are_answered() {
    let Some(gguf) = shared("models/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let server = Server::start(&gguf, &["--queue", "1"]);
    let long =
        json!({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}).to_string();
    let short = json!({"prompt": [1, 2, 3], "max_tokens": 1}).to_string();
    let (first, second, refused) = std::thread::scope(|scope| {
        // The first keeps the model busy for seconds; the second waits in the one queue slot.
        let first = scope.spawn(|| server.post("/v1/completions", &long));
        std::thread::sleep(Duration::from_millis(500));
        let second = scope.spawn(|| server.post("/v1/completions", &short));
        std::thread::sleep(Duration::from_millis(300));
        let refused = server.post("/v1/completions", &short);
        (first.join().unwrap(), second.join().unwrap(), refused)
    });
    assert_eq!(first.0, 200, "{}", first.1);
    assert_eq!(second.0, 200, "{}", second.1);
    assert_eq!(refused.0, 503, "{}", refused.1);
    let message = refused.1["error"]["message"].as_str().unwrap();
    assert!(message.contains("--queue"), "{message}");
}
