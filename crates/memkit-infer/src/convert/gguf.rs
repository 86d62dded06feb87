//! A small streaming GGUF v3 writer: metadata, tensor infos, then the tensor data, each piece
//! padded to the alignment, in the byte layout of gguf-py's `GGUFWriter` (llama.cpp's own
//! writer).
//!
//! Tensors are streamed: the caller declares every tensor (name, shape, type) first, because
//! the header holds all offsets, then writes their data in the same order, so a model never has
//! to be held in memory whole.

use std::io::{self, Write};

use half::f16;

/// `GGUF` in little-endian bytes.
const MAGIC: &[u8; 4] = b"GGUF";
const VERSION: u32 = 3;
/// `general.alignment` defaults to 32 when the key is absent (gguf-py `GGUF_DEFAULT_ALIGNMENT`).
pub(crate) const ALIGNMENT: u64 = 32;

/// ggml tensor types this writer produces (`GGMLQuantizationType` numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TensorType {
    F32,
    F16,
    Q8_0,
}

/// Values per Q8_0 block (`QK8_0`).
pub(crate) const QK8_0: usize = 32;
/// Bytes per Q8_0 block: an f16 scale and 32 signed bytes.
const Q8_0_BLOCK_BYTES: usize = 2 + QK8_0;

impl TensorType {
    fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q8_0 => 8,
        }
    }

    /// Bytes of `n` values (a multiple of the block size for Q8_0).
    pub(crate) fn nbytes(self, n: usize) -> usize {
        match self {
            Self::F32 => n * 4,
            Self::F16 => n * 2,
            Self::Q8_0 => n / QK8_0 * Q8_0_BLOCK_BYTES,
        }
    }

    /// Encodes row-major f32 values.
    pub(crate) fn encode(self, values: &[f32]) -> Vec<u8> {
        match self {
            Self::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            // `f16::from_f32` rounds to nearest even, as numpy's `astype(np.float16)`.
            Self::F16 => values.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect(),
            Self::Q8_0 => quantize_q8_0(values),
        }
    }
}

/// ggml's `quantize_row_q8_0_ref`: per block of 32, `d = amax / 127` stored as f16, and each
/// value `roundf(x / d)` (round half away from zero, which is `f32::round`). The scale used for
/// the division is the f32 `d`, not its f16 rounding, as in ggml.
pub(crate) fn quantize_q8_0(values: &[f32]) -> Vec<u8> {
    debug_assert_eq!(values.len() % QK8_0, 0);
    let mut out = Vec::with_capacity(values.len() / QK8_0 * Q8_0_BLOCK_BYTES);
    for block in values.chunks_exact(QK8_0) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        // The cast saturates, and |x * id| <= 127 up to rounding anyway.
        out.extend(block.iter().map(|x| ((x * id).round() as i8).cast_unsigned()));
    }
    out
}

/// A metadata value (`GGUFValueType`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MetaValue {
    U32(u32),
    F32(f32),
    Bool(bool),
    String(String),
    /// An array of one element type.
    Array(MetaArray),
}

/// Array payloads that tokenizer metadata needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MetaArray {
    I32(Vec<i32>),
    String(Vec<String>),
}

impl MetaValue {
    fn type_id(&self) -> u32 {
        match self {
            Self::U32(_) => 4,
            Self::F32(_) => 6,
            Self::Bool(_) => 7,
            Self::String(_) => 8,
            Self::Array(_) => 9,
        }
    }
}

fn write_string(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_value(w: &mut impl Write, value: &MetaValue) -> io::Result<()> {
    match value {
        MetaValue::U32(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::F32(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::Bool(v) => w.write_all(&[u8::from(*v)]),
        MetaValue::String(v) => write_string(w, v),
        MetaValue::Array(MetaArray::I32(items)) => {
            w.write_all(&5u32.to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|v| w.write_all(&v.to_le_bytes()))
        }
        MetaValue::Array(MetaArray::String(items)) => {
            w.write_all(&8u32.to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            items.iter().try_for_each(|v| write_string(w, v))
        }
    }
}

/// Metadata in insertion order; setting a key again overwrites its value in place, as
/// gguf-py's `add_key_value` does.
#[derive(Debug, Default)]
pub(crate) struct Metadata(Vec<(String, MetaValue)>);

impl Metadata {
    pub(crate) fn set(&mut self, key: impl Into<String>, value: MetaValue) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &(String, MetaValue)> {
        self.0.iter()
    }
}

/// A tensor declared in the header. `shape` is in the PyTorch/numpy order (outermost first);
/// GGUF stores it reversed (`ne[0]` is the innermost dimension).
#[derive(Debug, Clone)]
pub(crate) struct TensorDecl {
    pub name: String,
    pub shape: Vec<usize>,
    pub ty: TensorType,
}

impl TensorDecl {
    fn nbytes(&self) -> usize {
        self.ty.nbytes(self.shape.iter().product())
    }
}

fn pad_len(n: u64) -> u64 {
    n.div_ceil(ALIGNMENT) * ALIGNMENT - n
}

/// Writes the header (magic, version, counts, metadata, tensor infos) and the padding before
/// the data section; returns a [`DataWriter`] that takes each tensor's bytes in order.
pub(crate) fn write_header<W: Write>(mut w: W, metadata: &Metadata, tensors: &[TensorDecl]) -> io::Result<DataWriter<W>> {
    let mut written = 0u64;
    let mut header = Vec::new();
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    header.extend_from_slice(&(metadata.0.len() as u64).to_le_bytes());
    for (key, value) in metadata.iter() {
        write_string(&mut header, key)?;
        header.extend_from_slice(&value.type_id().to_le_bytes());
        write_value(&mut header, value)?;
    }
    let mut offset = 0u64;
    for t in tensors {
        write_string(&mut header, &t.name)?;
        header.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
        for dim in t.shape.iter().rev() {
            header.extend_from_slice(&(*dim as u64).to_le_bytes());
        }
        header.extend_from_slice(&t.ty.id().to_le_bytes());
        header.extend_from_slice(&offset.to_le_bytes());
        let n = t.nbytes() as u64;
        offset += n + pad_len(n);
    }
    w.write_all(&header)?;
    written += header.len() as u64;
    w.write_all(&vec![0; pad_len(written) as usize])?;
    Ok(DataWriter { w, expected: tensors.iter().map(TensorDecl::nbytes).collect(), next: 0 })
}

/// The data section: one call per declared tensor, in declaration order.
pub(crate) struct DataWriter<W: Write> {
    w: W,
    expected: Vec<usize>,
    next: usize,
}

impl<W: Write> DataWriter<W> {
    pub(crate) fn write_tensor(&mut self, bytes: &[u8]) -> io::Result<()> {
        let expected = self.expected.get(self.next).copied();
        if expected != Some(bytes.len()) {
            return Err(io::Error::other(format!("tensor {} has {} bytes, the header declared {expected:?}", self.next, bytes.len())));
        }
        self.next += 1;
        self.w.write_all(bytes)?;
        self.w.write_all(&vec![0; pad_len(bytes.len() as u64) as usize])
    }

    /// Checks that every declared tensor was written and returns the inner writer.
    pub(crate) fn finish(self) -> io::Result<W> {
        if self.next != self.expected.len() {
            return Err(io::Error::other(format!("{} of {} tensors written", self.next, self.expected.len())));
        }
        Ok(self.w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden blocks from gguf-py 0.19.0 (`gguf.quants.quantize(x, GGMLQuantizationType.Q8_0)`,
    /// numpy's port of ggml's `quantize_row_q8_0_ref`), computed once for
    /// `x = [(i - 13) * 0.37 for i in range(32)] + [0.0] * 31 + [1.5]` in float32, then
    /// `.tobytes().hex()` (the products computed in f64, as Python does, then rounded to f32).
    const Q8_0_GOLDEN: &str = "b62aa4abb2b9c1c8cfd6dde4ebf2f900070e151c232a31383f474e555c636a71787f0c22000000000000000000000000000000000000000000000000000000000000007f";

    fn golden_input() -> Vec<f32> {
        let mut x: Vec<f32> = (0..32).map(|i| ((f64::from(i) - 13.0) * 0.37) as f32).collect();
        x.extend(std::iter::repeat_n(0.0, 31));
        x.push(1.5);
        x
    }

    #[test]
    fn q8_0_matches_gguf_py() {
        let bytes = quantize_q8_0(&golden_input());
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, Q8_0_GOLDEN);
    }

    #[test]
    fn header_offsets_are_aligned() {
        let mut metadata = Metadata::default();
        metadata.set("general.architecture", MetaValue::String("llama".into()));
        metadata.set("general.architecture", MetaValue::String("qwen2".into()));
        assert_eq!(metadata.iter().count(), 1, "setting a key twice overwrites it");
        let tensors = vec![
            TensorDecl { name: "a".into(), shape: vec![3], ty: TensorType::F32 },
            TensorDecl { name: "b".into(), shape: vec![2, 32], ty: TensorType::Q8_0 },
        ];
        let mut data = write_header(Vec::new(), &metadata, &tensors).unwrap();
        assert_eq!(data.w.len() % 32, 0);
        data.write_tensor(&TensorType::F32.encode(&[1.0, 2.0, 3.0])).unwrap();
        assert!(data.write_tensor(&[0; 3]).is_err(), "a wrong size is refused");
        data.write_tensor(&TensorType::Q8_0.encode(&[0.5; 64])).unwrap();
        let bytes = data.finish().unwrap();
        assert_eq!(bytes.len() % 32, 0);
        assert_eq!(&bytes[..4], b"GGUF");
    }
}
