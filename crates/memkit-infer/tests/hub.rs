//! Hub downloads through hf-hub against a loopback server that speaks the Hub's file protocol
//! (`/api/models/{repo}/revision/{rev}` for the file list, `/{repo}/resolve/{rev}/{file}` with
//! `Range`, `ETag`, `X-Repo-Commit` and `Content-Range`), as `HF_ENDPOINT` mirrors do. No
//! network: the Hub itself is unreachable here.
//!
//! Downloads: the default patterns fetch configs, tokenizer and weights and nothing else; the
//! snapshot holds the served bytes in the standard cache layout; a second run downloads
//! nothing; `--include` fetches a GGUF; the token is sent; 401 and a pattern that matches
//! nothing are errors that say what to do.
//!
//! Uploads: the server implements the calls `huggingface_hub` makes to commit a folder
//! (repository creation, preupload, the LFS batch API with upload and verify actions, the NDJSON
//! commit) as their documentation and `huggingface_hub`'s source describe them; the real Hub
//! was not reachable to check against. The test checks that the bytes arrive intact by either
//! route, that LFS objects the server has are not sent again, and that the token is required.

#![cfg(all(feature = "hub", feature = "serve"))]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use base64::Engine as _;
use memkit_infer::hub::{self, HubDownload, HubUpload};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

#[derive(Default)]
struct Hub {
    /// Repository → file → bytes.
    repos: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Resolve requests that sent bytes (not the 0-0 metadata probe), by file.
    downloads: Mutex<Vec<String>>,
    /// The Authorization headers seen.
    auth: Mutex<Vec<String>>,
    /// Repositories created through the API.
    created: Mutex<Vec<String>>,
    /// LFS objects by oid.
    lfs: Mutex<BTreeMap<String, Vec<u8>>>,
    /// LFS PUTs received.
    puts: Mutex<usize>,
    /// Committed files: path → bytes (inline files decoded, LFS files from the store).
    committed: Mutex<BTreeMap<String, Vec<u8>>>,
    /// The loopback address, for LFS action URLs.
    addr: Mutex<Option<SocketAddr>>,
}

fn json(value: &serde_json::Value) -> Response<Body> {
    respond(StatusCode::OK, &[("content-type", "application/json".into())], value.to_string().into_bytes())
}

/// The upload side of the Hub API.
fn handle_upload(hub: &Hub, method: &Method, path: &str, headers: &HeaderMap, body: &[u8]) -> Option<Response<Body>> {
    let addr = hub.addr.lock().unwrap().expect("address set");
    if method == Method::PUT
        && let Some(oid) = path.strip_prefix("lfs-upload/")
    {
        assert_eq!(headers.get("x-upload-token").map(|v| v.to_str().unwrap()), Some("t"), "the action's headers are sent");
        assert!(headers.get("authorization").is_none(), "no Hub token to the storage URL");
        *hub.puts.lock().unwrap() += 1;
        hub.lfs.lock().unwrap().insert(oid.to_owned(), body.to_vec());
        return Some(json(&serde_json::json!({})));
    }
    if method != Method::POST {
        return None;
    }
    let request: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    if path == "api/repos/create" {
        let repo = format!("{}/{}", request["organization"].as_str().unwrap(), request["name"].as_str().unwrap());
        let mut created = hub.created.lock().unwrap();
        if created.contains(&repo) {
            return Some(respond(StatusCode::CONFLICT, &[], b"{\"error\":\"exists\"}".to_vec()));
        }
        created.push(repo.clone());
        return Some(json(&serde_json::json!({ "url": format!("http://{addr}/{repo}") })));
    }
    if path.contains("/preupload/") {
        let files: Vec<_> = request["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let mode = if f["size"].as_u64().unwrap() > 10_000 { "lfs" } else { "regular" };
                serde_json::json!({ "path": f["path"], "uploadMode": mode })
            })
            .collect();
        return Some(json(&serde_json::json!({ "files": files })));
    }
    if path.ends_with(".git/info/lfs/objects/batch") {
        assert_eq!(request["operation"], "upload");
        let have = hub.lfs.lock().unwrap();
        let objects: Vec<_> = request["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let oid = o["oid"].as_str().unwrap();
                if have.contains_key(oid) {
                    serde_json::json!({ "oid": oid, "size": o["size"] })
                } else {
                    serde_json::json!({ "oid": oid, "size": o["size"], "actions": {
                        "upload": { "href": format!("http://{addr}/lfs-upload/{oid}"), "header": { "x-upload-token": "t" } },
                        "verify": { "href": format!("http://{addr}/lfs-verify"), "header": {} }
                    }})
                }
            })
            .collect();
        return Some(json(&serde_json::json!({ "objects": objects })));
    }
    if path == "lfs-verify" {
        let stored = hub.lfs.lock().unwrap();
        let ok = stored.get(request["oid"].as_str().unwrap()).is_some_and(|b| b.len() as u64 == request["size"].as_u64().unwrap());
        return Some(if ok { json(&serde_json::json!({})) } else { respond(StatusCode::NOT_FOUND, &[], Vec::new()) });
    }
    if path.contains("/commit/") {
        assert_eq!(headers.get("content-type").unwrap(), "application/x-ndjson");
        let lines: Vec<serde_json::Value> = body.split(|&b| b == b'\n').map(|l| serde_json::from_slice(l).unwrap()).collect();
        assert_eq!(lines[0]["key"], "header");
        let mut committed = hub.committed.lock().unwrap();
        for line in &lines[1..] {
            let v = &line["value"];
            let path = v["path"].as_str().unwrap().to_owned();
            let bytes = match line["key"].as_str().unwrap() {
                "file" => base64::engine::general_purpose::STANDARD.decode(v["content"].as_str().unwrap()).unwrap(),
                "lfsFile" => {
                    hub.lfs.lock().unwrap().get(v["oid"].as_str().unwrap()).cloned().expect("LFS object uploaded before the commit")
                }
                other => panic!("unknown commit line {other}"),
            };
            committed.insert(path, bytes);
        }
        return Some(json(&serde_json::json!({ "commitUrl": format!("http://{addr}/commit/1"), "commitOid": "c0ffee" })));
    }
    None
}

fn respond(status: StatusCode, headers: &[(&str, String)], body: Vec<u8>) -> Response<Body> {
    let mut response = Response::builder().status(status);
    for (k, v) in headers {
        response = response.header(*k, v);
    }
    response.body(Body::from(body)).unwrap()
}

fn handle(hub: &Hub, method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Response<Body> {
    if let Some(auth) = headers.get("authorization") {
        hub.auth.lock().unwrap().push(auth.to_str().unwrap().to_owned());
    }
    let path = uri.path().trim_start_matches('/');
    if let Some(response) = handle_upload(hub, method, path, headers, body) {
        return response;
    }
    if path.starts_with("api/models/gated/") {
        return respond(StatusCode::UNAUTHORIZED, &[], b"{\"error\":\"gated\"}".to_vec());
    }
    if let Some(rest) = path.strip_prefix("api/models/") {
        let (repo, _) = rest.split_once("/revision/").unwrap();
        let Some(files) = hub.repos.get(repo) else { return respond(StatusCode::NOT_FOUND, &[], Vec::new()) };
        let siblings: Vec<_> = files.keys().map(|f| serde_json::json!({ "rfilename": f })).collect();
        let info = serde_json::json!({ "sha": COMMIT, "siblings": siblings });
        return respond(StatusCode::OK, &[("content-type", "application/json".into())], info.to_string().into_bytes());
    }
    let parts: Vec<&str> = path.splitn(5, '/').collect();
    let [owner, name, "resolve", _rev, file] = parts.as_slice() else { return respond(StatusCode::NOT_FOUND, &[], Vec::new()) };
    let Some(bytes) = hub.repos.get(&format!("{owner}/{name}")).and_then(|f| f.get(*file)) else {
        return respond(StatusCode::NOT_FOUND, &[], Vec::new());
    };
    let range = headers.get("range").map(|r| r.to_str().unwrap().trim_start_matches("bytes=").to_owned()).unwrap_or_default();
    let (start, end) = match range.split_once('-') {
        Some((s, "")) => (s.parse().unwrap(), bytes.len() - 1),
        Some((s, e)) => (s.parse().unwrap(), e.parse::<usize>().unwrap().min(bytes.len() - 1)),
        None => (0, bytes.len() - 1),
    };
    if range != "0-0" {
        hub.downloads.lock().unwrap().push((*file).to_owned());
    }
    let etag = format!("\"{}\"", sha256_hex(bytes));
    respond(
        StatusCode::PARTIAL_CONTENT,
        &[("etag", etag), ("x-repo-commit", COMMIT.into()), ("content-range", format!("bytes {start}-{end}/{}", bytes.len()))],
        bytes[start..=end].to_vec(),
    )
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Serves `hub` on a loopback port from a thread of its own.
fn serve(hub: Arc<Hub>) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    *hub.addr.lock().unwrap() = Some(addr);
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let app = Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let hub = Arc::clone(&hub);
                async move { handle(&hub, &method, &uri, &headers, &body) }
            });
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}

fn checkpoint() -> BTreeMap<String, Vec<u8>> {
    let weights: Vec<u8> = (0..70_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    [
        ("config.json", br#"{"model_type":"llama","hidden_size":8}"#.to_vec()),
        ("tokenizer.json", br#"{"version":"1.0","model":{"type":"BPE"}}"#.to_vec()),
        ("model.safetensors", weights),
        ("README.md", b"# tiny\n".to_vec()),
        ("gguf/tiny.Q8_0.gguf", b"GGUF\x03\x00\x00\x00".to_vec()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn request(addr: SocketAddr, cache: &std::path::Path, repo: &str) -> HubDownload {
    let mut r = HubDownload::new(repo);
    r.endpoint = Some(format!("http://{addr}"));
    r.cache_dir = Some(cache.to_path_buf());
    r
}

#[test]
fn downloads_into_the_hf_cache_once_and_says_what_went_wrong() {
    let files = checkpoint();
    let hub = Arc::new(Hub { repos: [("acme/tiny".to_owned(), files.clone())].into(), ..Hub::default() });
    let addr = serve(Arc::clone(&hub));
    let cache = tempfile::tempdir().unwrap();

    let mut first = request(addr, cache.path(), "acme/tiny");
    first.token = Some("hf_test".into());
    let snapshot = hub::download(&first).unwrap();
    assert_eq!(snapshot.files, ["config.json", "model.safetensors", "tokenizer.json"]);
    assert_eq!(snapshot.commit, COMMIT);
    assert_eq!(snapshot.dir, cache.path().join("models--acme--tiny/snapshots").join(COMMIT));
    for file in &snapshot.files {
        assert_eq!(std::fs::read(snapshot.dir.join(file)).unwrap(), files[file], "{file}");
    }
    assert!(!snapshot.dir.join("README.md").exists());
    assert_eq!(std::fs::read_to_string(cache.path().join("models--acme--tiny/refs/main")).unwrap(), COMMIT);
    assert!(hub.auth.lock().unwrap().iter().all(|a| a == "Bearer hf_test") && !hub.auth.lock().unwrap().is_empty());
    assert_eq!(hub.downloads.lock().unwrap().len(), 3);

    // Everything is cached: a second run only lists the files.
    let again = hub::download(&request(addr, cache.path(), "acme/tiny")).unwrap();
    assert_eq!(again, snapshot);
    assert_eq!(hub.downloads.lock().unwrap().len(), 3, "nothing downloaded twice");

    // A GGUF by pattern, into the same snapshot.
    let mut gguf = request(addr, cache.path(), "acme/tiny");
    gguf.include = vec!["*Q8_0.gguf".into()];
    let with_gguf = hub::download(&gguf).unwrap();
    assert_eq!(with_gguf.files, ["gguf/tiny.Q8_0.gguf"]);
    assert_eq!(with_gguf.dir, snapshot.dir);
    assert_eq!(std::fs::read(with_gguf.dir.join("gguf/tiny.Q8_0.gguf")).unwrap(), files["gguf/tiny.Q8_0.gguf"]);

    // Errors name the repository and the fix.
    let gated = hub::download(&request(addr, cache.path(), "gated/model")).unwrap_err().to_string();
    assert!(gated.contains("gated/model@main") && gated.contains("HF_TOKEN"), "{gated}");
    let missing = hub::download(&request(addr, cache.path(), "acme/none")).unwrap_err().to_string();
    assert!(missing.contains("acme/none") && missing.contains("404"), "{missing}");
    let mut nothing = request(addr, cache.path(), "acme/tiny");
    nothing.include = vec!["*.bin".into()];
    let nothing = hub::download(&nothing).unwrap_err().to_string();
    assert!(nothing.contains("no file matches *.bin"), "{nothing}");
    let bad = hub::download(&request(addr, cache.path(), "acme/tiny/extra")).unwrap_err().to_string();
    assert!(bad.contains("owner/name"), "{bad}");
}

#[test]
fn uploads_a_folder_as_one_commit_and_skips_lfs_objects_the_server_has() {
    let hub = Arc::new(Hub::default());
    let addr = serve(Arc::clone(&hub));
    let folder = tempfile::tempdir().unwrap();
    let files = checkpoint();
    for (path, bytes) in &files {
        let full = folder.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, bytes).unwrap();
    }
    std::fs::write(folder.path().join(".hidden"), b"not uploaded").unwrap();

    let mut request = HubUpload::new("acme/extractor", "memkit publish");
    request.endpoint = Some(format!("http://{addr}"));
    request.token = Some("hf_write".into());
    let commit = hub::upload_folder(folder.path(), &request).unwrap();
    assert_eq!(commit.oid, "c0ffee");
    assert_eq!(commit.lfs, ["model.safetensors"], "only the 70 kB file is over the fake server's LFS threshold");
    assert_eq!(commit.regular.len(), 4);
    assert_eq!(*hub.committed.lock().unwrap(), files, "every file arrives intact, the hidden one not at all");
    assert_eq!(*hub.created.lock().unwrap(), ["acme/extractor"]);
    assert_eq!(*hub.puts.lock().unwrap(), 1);

    // Again: the repository exists (409 is fine) and the LFS object is not sent twice.
    let again = hub::upload_folder(folder.path(), &request).unwrap();
    assert_eq!((again.lfs_skipped, *hub.puts.lock().unwrap()), (1, 1));
    assert!(hub.auth.lock().unwrap().iter().all(|a| a == "Bearer hf_write"));

    // No token, no upload (HF_TOKEN and the token file are not set in tests... unless they are).
    if std::env::var_os("HF_TOKEN").is_none() && std::env::var_os("HF_HOME").is_none() {
        let mut anonymous = request.clone();
        anonymous.token = None;
        let err = hub::upload_folder(folder.path(), &anonymous).unwrap_err().to_string();
        assert!(err.contains("write token") || err.contains("401"), "{err}");
    }
}
