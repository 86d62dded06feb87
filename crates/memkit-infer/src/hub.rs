//! Checkpoints from the Hugging Face Hub, or any server that speaks its file protocol (a mirror
//! named by `HF_ENDPOINT`), through hf-hub into the standard cache shared with Python's
//! `huggingface_hub` (`$HF_HOME/hub`, default `~/.cache/huggingface/hub`): blobs, refs and a
//! snapshot directory per commit. Files already in the cache are not downloaded again, and an
//! interrupted download resumes.
//!
//! The snapshot directory is an HF checkpoint directory: a train recipe's
//! `[model] kind = "hf"` and `memkit convert` take it as it is.
//!
//! [`upload_folder`] publishes a folder (what `memkit publish` bundles) as one commit. hf-hub
//! only downloads, so the upload speaks the Hub's HTTP API itself, as `huggingface_hub` does:
//! create the repository (an existing one is fine), ask which files go through LFS
//! (`preupload`), upload those through the LFS batch API (single PUT per file, so at most 5 GB
//! each), then commit everything (`commit`, NDJSON: small files inline as base64, LFS files by
//! sha256).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use hf_hub::api::sync::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};
use sha2::Digest as _;

use crate::{Error, Result};

/// The files of a checkpoint that memkit reads: configs and the tokenizer (`*.json`, `*.txt`,
/// `*.jinja` chat templates) and the weights (`*.safetensors`). GGUF files, other weight
/// formats and the rest of a repository are left out unless asked for.
pub const DEFAULT_INCLUDE: [&str; 4] = ["*.json", "*.safetensors", "*.txt", "*.jinja"];

/// What to download.
#[derive(Debug, Clone)]
pub struct HubDownload {
    /// `owner/name`.
    pub repo_id: String,
    /// Branch, tag or commit; default `main`.
    pub revision: String,
    /// Glob patterns (`*` matches any run of characters, `/` included; `?` one character)
    /// over the repository's file paths; a file is fetched when any pattern matches it.
    pub include: Vec<String>,
    /// The server; `None`: `$HF_ENDPOINT`, else `https://huggingface.co`.
    pub endpoint: Option<String>,
    /// The cache; `None`: `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
    pub cache_dir: Option<PathBuf>,
    /// Access token for gated or private repositories; `None`: `$HF_TOKEN`, else the cache's
    /// `token` file (what `huggingface-cli login` writes).
    pub token: Option<String>,
    /// hf-hub's progress bar per file.
    pub progress: bool,
}

impl HubDownload {
    /// The default files of `repo_id` at `main`, from the default server and cache.
    pub fn new(repo_id: impl Into<String>) -> Self {
        Self {
            repo_id: repo_id.into(),
            revision: "main".into(),
            include: DEFAULT_INCLUDE.iter().map(|p| (*p).to_owned()).collect(),
            endpoint: None,
            cache_dir: None,
            token: None,
            progress: false,
        }
    }
}

/// A downloaded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `…/models--owner--name/snapshots/<commit>`: the files under their repository paths.
    pub dir: PathBuf,
    /// The commit the revision resolved to.
    pub commit: String,
    /// Repository paths of the files fetched (or found in the cache), sorted.
    pub files: Vec<String>,
}

/// Downloads the files of `request` that are not in the cache yet and returns their snapshot.
pub fn download(request: &HubDownload) -> Result<Snapshot> {
    let repo_id = request.repo_id.as_str();
    let fail = |message: String| Error::Hub { repo: repo_id.to_owned(), revision: request.revision.clone(), message };
    check_repo_id(repo_id).map_err(|m| fail(m.to_owned()))?;
    if request.include.is_empty() {
        return Err(fail("no file patterns to download".into()));
    }

    let cache = request.cache_dir.clone().map_or_else(Cache::from_env, Cache::new);
    let mut builder = ApiBuilder::from_cache(cache).with_progress(request.progress).with_retries(3);
    if let Some(endpoint) = request.endpoint.clone().or_else(|| std::env::var("HF_ENDPOINT").ok()) {
        builder = builder.with_endpoint(endpoint.trim_end_matches('/').to_owned());
    }
    if let Some(token) = request.token.clone().or_else(|| std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty())) {
        builder = builder.with_token(Some(token));
    }
    let api = builder.build().map_err(|e| fail(describe(&e)))?;
    let repo = api.repo(Repo::with_revision(repo_id.to_owned(), RepoType::Model, request.revision.clone()));

    let info = repo.info().map_err(|e| fail(describe(&e)))?;
    let mut files: Vec<String> =
        info.siblings.into_iter().map(|s| s.rfilename).filter(|f| request.include.iter().any(|p| glob_match(p, f))).collect();
    files.sort();
    if files.is_empty() {
        return Err(fail(format!("no file matches {}", request.include.join(", "))));
    }
    let mut dir = None;
    for file in &files {
        tracing::info!(repo = repo_id, file, "fetching");
        let path = repo.get(file).map_err(|e| fail(format!("{file}: {}", describe(&e))))?;
        dir.get_or_insert_with(|| snapshot_dir(&path, file));
    }
    let dir = dir.expect("at least one file");
    Ok(Snapshot { dir, commit: info.sha, files })
}

/// Where and how to upload.
#[derive(Debug, Clone)]
pub struct HubUpload {
    /// `owner/name`; created when missing.
    pub repo_id: String,
    /// The branch to commit to; default `main`.
    pub revision: String,
    /// The commit title.
    pub message: String,
    /// Create the repository private.
    pub private: bool,
    /// The server; `None`: `$HF_ENDPOINT`, else `https://huggingface.co`.
    pub endpoint: Option<String>,
    /// Write token; `None`: `$HF_TOKEN`, else the HF cache's `token` file. Required.
    pub token: Option<String>,
}

impl HubUpload {
    /// An upload to `repo_id`'s `main`, public, with the default server and token.
    pub fn new(repo_id: impl Into<String>, message: impl Into<String>) -> Self {
        Self { repo_id: repo_id.into(), revision: "main".into(), message: message.into(), private: false, endpoint: None, token: None }
    }
}

/// A finished upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The commit's page.
    pub url: String,
    /// Its id.
    pub oid: String,
    /// Files committed inline.
    pub regular: Vec<String>,
    /// Files committed through LFS, and how many of them the server already had.
    pub lfs: Vec<String>,
    /// LFS files not uploaded again because the server had them.
    pub lfs_skipped: usize,
}

/// One file of the folder.
struct LocalFile {
    /// Path in the repository (`/`-separated).
    path: String,
    full: PathBuf,
    size: u64,
    sha256: String,
    /// The first 512 bytes (the `preupload` sample).
    head: Vec<u8>,
}

/// Uploads every file under `folder` (hidden files skipped) to `request.repo_id` as one commit.
pub fn upload_folder(folder: &Path, request: &HubUpload) -> Result<Commit> {
    let repo_id = request.repo_id.as_str();
    let fail = |message: String| Error::Hub { repo: repo_id.to_owned(), revision: request.revision.clone(), message };
    check_repo_id(repo_id).map_err(|m| fail(m.to_owned()))?;
    let token = request
        .token
        .clone()
        .or_else(|| std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty()))
        .or_else(|| Cache::from_env().token())
        .ok_or_else(|| fail("uploading needs a write token: set HF_TOKEN or run `huggingface-cli login`".into()))?;
    let endpoint = request
        .endpoint
        .clone()
        .or_else(|| std::env::var("HF_ENDPOINT").ok())
        .unwrap_or_else(|| "https://huggingface.co".into())
        .trim_end_matches('/')
        .to_owned();
    let files = local_files(folder).map_err(|e| fail(format!("{}: {e}", folder.display())))?;
    if files.is_empty() {
        return Err(fail(format!("{} has no files to upload", folder.display())));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let auth = format!("Bearer {token}");
    // Every Hub answer is JSON; a status other than 2xx becomes an error naming the step.
    let json = |step: &str, response: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>| {
        let mut response = response.map_err(|e| fail(format!("{step}: {e}")))?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().unwrap_or_default();
        if !(200..300).contains(&status) {
            let hint = match status {
                401 | 403 => ": the token cannot write to this repository",
                _ => "",
            };
            return Err(fail(format!("{step}: HTTP {status}{hint}: {}", body.chars().take(300).collect::<String>())));
        }
        Ok((status, serde_json::from_str::<serde_json::Value>(&body).unwrap_or(serde_json::Value::Null)))
    };

    // 1. The repository (409: it exists).
    let (owner, name) =
        repo_id.split_once('/').ok_or_else(|| fail("uploading needs owner/name, the namespace to create the repository in".into()))?;
    let create = agent.post(format!("{endpoint}/api/repos/create")).header("authorization", &auth).send_json(serde_json::json!({
        "type": "model", "name": name, "organization": owner, "private": request.private
    }));
    match create {
        Ok(r) if r.status().as_u16() == 409 => {}
        other => {
            json("create the repository", other)?;
        }
    }

    // 2. Which files go through LFS.
    let revision = request.revision.replace('/', "%2F");
    let samples: Vec<_> = files
        .iter()
        .map(|f| serde_json::json!({ "path": f.path, "size": f.size, "sample": base64::engine::general_purpose::STANDARD.encode(&f.head) }))
        .collect();
    let (_, modes) = json(
        "preupload",
        agent
            .post(format!("{endpoint}/api/models/{repo_id}/preupload/{revision}"))
            .header("authorization", &auth)
            .send_json(serde_json::json!({ "files": samples })),
    )?;
    let lfs_paths: std::collections::HashSet<&str> = modes["files"]
        .as_array()
        .map(|a| a.iter().filter(|f| f["uploadMode"] == "lfs").filter_map(|f| f["path"].as_str()).collect())
        .unwrap_or_default();
    let (lfs, regular): (Vec<&LocalFile>, Vec<&LocalFile>) = files.iter().partition(|f| lfs_paths.contains(f.path.as_str()));

    // 3. LFS objects the server does not have yet.
    let mut lfs_skipped = 0;
    if !lfs.is_empty() {
        let objects: Vec<_> = lfs.iter().map(|f| serde_json::json!({ "oid": f.sha256, "size": f.size })).collect();
        let (_, batch) = json(
            "LFS batch",
            agent
                .post(format!("{endpoint}/{repo_id}.git/info/lfs/objects/batch"))
                .header("authorization", &auth)
                .header("accept", "application/vnd.git-lfs+json")
                .header("content-type", "application/vnd.git-lfs+json")
                .send(
                    serde_json::json!({ "operation": "upload", "transfers": ["basic"], "objects": objects, "hash_algo": "sha256" })
                        .to_string(),
                ),
        )?;
        for object in batch["objects"].as_array().into_iter().flatten() {
            let oid = object["oid"].as_str().unwrap_or_default();
            let file = lfs.iter().find(|f| f.sha256 == oid).ok_or_else(|| fail(format!("LFS batch: unknown object {oid}")))?;
            if let Some(error) = object.get("error") {
                return Err(fail(format!("LFS batch refused {}: {error}", file.path)));
            }
            let Some(upload) = object["actions"].get("upload") else {
                lfs_skipped += 1;
                continue;
            };
            let href = upload["href"].as_str().ok_or_else(|| fail(format!("LFS batch: no upload href for {}", file.path)))?;
            let mut put = agent.put(href);
            for (k, v) in upload["header"].as_object().into_iter().flatten() {
                put = put.header(k.as_str(), v.as_str().unwrap_or_default());
            }
            tracing::info!(file = file.path, bytes = file.size, "uploading through LFS");
            let handle = std::fs::File::open(&file.full).map_err(|e| fail(format!("{}: {e}", file.full.display())))?;
            let mut response = put.send(&handle).map_err(|e| fail(format!("uploading {}: {e}", file.path)))?;
            if !response.status().is_success() {
                let body = response.body_mut().read_to_string().unwrap_or_default();
                return Err(fail(format!("uploading {}: HTTP {}: {body}", file.path, response.status().as_u16())));
            }
            if let Some(verify) = object["actions"].get("verify") {
                let href = verify["href"].as_str().unwrap_or_default();
                let mut post = agent.post(href).header("authorization", &auth);
                for (k, v) in verify["header"].as_object().into_iter().flatten() {
                    post = post.header(k.as_str(), v.as_str().unwrap_or_default());
                }
                json(&format!("verifying {}", file.path), post.send_json(serde_json::json!({ "oid": file.sha256, "size": file.size })))?;
            }
        }
    }

    // 4. The commit.
    let mut ndjson = serde_json::json!({ "key": "header", "value": { "summary": request.message, "description": "" } }).to_string();
    for f in &regular {
        let bytes = std::fs::read(&f.full).map_err(|e| fail(format!("{}: {e}", f.full.display())))?;
        let content = base64::engine::general_purpose::STANDARD.encode(&bytes);
        ndjson.push('\n');
        ndjson.push_str(
            &serde_json::json!({ "key": "file", "value": { "content": content, "path": f.path, "encoding": "base64" } }).to_string(),
        );
    }
    for f in &lfs {
        ndjson.push('\n');
        ndjson.push_str(
            &serde_json::json!({ "key": "lfsFile", "value": { "path": f.path, "algo": "sha256", "oid": f.sha256, "size": f.size } })
                .to_string(),
        );
    }
    let (_, commit) = json(
        "commit",
        agent
            .post(format!("{endpoint}/api/models/{repo_id}/commit/{revision}"))
            .header("authorization", &auth)
            .header("content-type", "application/x-ndjson")
            .send(ndjson),
    )?;
    Ok(Commit {
        url: commit["commitUrl"].as_str().unwrap_or_default().to_owned(),
        oid: commit["commitOid"].as_str().unwrap_or_default().to_owned(),
        regular: regular.iter().map(|f| f.path.clone()).collect(),
        lfs: lfs.iter().map(|f| f.path.clone()).collect(),
        lfs_skipped,
    })
}

/// The files under `folder`, sorted, with size, sha256 and first bytes, each read once; hidden
/// entries are skipped.
fn local_files(folder: &Path) -> std::io::Result<Vec<LocalFile>> {
    let mut out = Vec::new();
    let mut stack = vec![folder.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let full = entry.path();
            if entry.file_type()?.is_dir() {
                stack.push(full);
                continue;
            }
            let rel = full.strip_prefix(folder).expect("under the folder");
            let path = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/");
            let (mut hasher, mut size, mut buf, mut head) = (sha2::Sha256::new(), 0u64, vec![0u8; 1 << 20], Vec::new());
            let mut file = std::fs::File::open(&full)?;
            loop {
                let n = file.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                if head.len() < 512 {
                    head.extend_from_slice(&buf[..n.min(512 - head.len())]);
                }
                hasher.update(&buf[..n]);
                size += n as u64;
            }
            let sha256 = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
            out.push(LocalFile { path, full, size, sha256, head });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// `owner/name` (or a legacy single name such as `gpt2`), each part non-empty, no `..`, no
/// whitespace.
fn check_repo_id(repo_id: &str) -> std::result::Result<(), &'static str> {
    let parts: Vec<&str> = repo_id.split('/').collect();
    let part_ok = |p: &&str| !p.is_empty() && *p != "." && *p != ".." && !p.contains(char::is_whitespace);
    if (1..=2).contains(&parts.len()) && parts.iter().all(part_ok) {
        Ok(())
    } else {
        Err("a repository id is owner/name, e.g. HuggingFaceTB/SmolLM2-135M-Instruct")
    }
}

/// The snapshot directory of a file at repository path `file`.
fn snapshot_dir(path: &Path, file: &str) -> PathBuf {
    let depth = Path::new(file).components().count();
    path.ancestors().nth(depth).map_or_else(|| path.to_path_buf(), Path::to_path_buf)
}

/// What went wrong, with the likely fix for the usual HTTP statuses.
fn describe(error: &ApiError) -> String {
    if let ApiError::RequestError(e) = error
        && let ureq::Error::StatusCode(status) = **e
    {
        return match status {
            401 | 403 => format!("HTTP {status}: the repository is gated or private; set HF_TOKEN to a token with access"),
            404 => format!("HTTP {status}: no such repository, revision or file"),
            _ => format!("HTTP {status}"),
        };
    }
    error.to_string()
}

/// `*` matches any run of characters (`/` included), `?` any one character.
fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Greedy matching with one backtrack point: the classic wildcard algorithm.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_fnmatch_without_classes() {
        assert!(glob_match("*.json", "config.json"));
        assert!(glob_match("*.json", "onnx/config.json"), "* crosses /");
        assert!(!glob_match("*.json", "model.safetensors"));
        assert!(glob_match("model-*-of-*.safetensors", "model-00001-of-00002.safetensors"));
        assert!(glob_match("?odel.gguf", "model.gguf"));
        assert!(!glob_match("?model.gguf", "model.gguf"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("a*b*c", "aXbYbZ"));
    }

    #[test]
    fn repo_ids_are_owner_slash_name() {
        assert!(check_repo_id("HuggingFaceTB/SmolLM2-135M-Instruct").is_ok());
        assert!(check_repo_id("gpt2").is_ok(), "legacy single names exist");
        for bad in ["", "a/b/c", "/b", "a/", "../b", "a b/c", ".."] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_snapshot_dir_is_above_the_file_path() {
        let p = Path::new("/c/models--a--b/snapshots/abc/sub/x.json");
        assert_eq!(snapshot_dir(p, "sub/x.json"), Path::new("/c/models--a--b/snapshots/abc"));
    }
}
