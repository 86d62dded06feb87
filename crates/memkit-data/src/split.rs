//! Deterministic, seeded train/valid/test splits by id.
//!
//! An id's split depends only on the id, the seed and the ratios, never on the order or number of
//! other items, so adding data does not move old items between splits. The hash is spelled out
//! here (FNV-1a 64 over the seed and the id, then the SplitMix64 finaliser) instead of using
//! `std`'s `DefaultHasher`, whose output may change between Rust releases.

use serde::{Deserialize, Serialize};

/// Which part of a split an item falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Training data.
    Train,
    /// Validation data.
    Valid,
    /// Held-out test data.
    Test,
}

/// Relative sizes of the three parts; they need not sum to 1 (they are normalised).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitRatios {
    /// Share of training items.
    pub train: f64,
    /// Share of validation items.
    pub valid: f64,
    /// Share of test items.
    #[serde(default)]
    pub test: f64,
}

impl Default for SplitRatios {
    /// 90 % train, 10 % valid, no test.
    fn default() -> Self {
        SplitRatios { train: 0.9, valid: 0.1, test: 0.0 }
    }
}

/// The items of each part, in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splits<T> {
    /// Training items.
    pub train: Vec<T>,
    /// Validation items.
    pub valid: Vec<T>,
    /// Test items.
    pub test: Vec<T>,
}

/// A 64-bit hash of `id` under `seed`, stable across platforms and Rust versions.
pub fn stable_hash(id: &str, seed: u64) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = FNV_OFFSET;
    for b in seed.to_le_bytes().into_iter().chain(id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    // SplitMix64 finaliser: FNV's low bits are weak, and the unit value uses the high ones.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// `id`'s position in `[0, 1)` under `seed`.
pub fn unit_hash(id: &str, seed: u64) -> f64 {
    (stable_hash(id, seed) >> 11) as f64 / (1u64 << 53) as f64
}

/// The part `id` falls in. Negative or non-finite ratios count as 0; if all are 0, everything
/// is training data.
pub fn assign_split(id: &str, seed: u64, ratios: &SplitRatios) -> Split {
    let clean = |r: f64| if r.is_finite() && r > 0.0 { r } else { 0.0 };
    let (train, valid, test) = (clean(ratios.train), clean(ratios.valid), clean(ratios.test));
    let total = train + valid + test;
    if total == 0.0 {
        return Split::Train;
    }
    let u = unit_hash(id, seed) * total;
    if u < train {
        Split::Train
    } else if u < train + valid || test == 0.0 {
        Split::Valid
    } else {
        Split::Test
    }
}

/// Partitions items by the split of their id, keeping input order inside each part.
pub fn split_by_id<T>(items: impl IntoIterator<Item = T>, id: impl Fn(&T) -> &str, seed: u64, ratios: &SplitRatios) -> Splits<T> {
    let mut out = Splits { train: Vec::new(), valid: Vec::new(), test: Vec::new() };
    for item in items {
        match assign_split(id(&item), seed, ratios) {
            Split::Train => out.train.push(item),
            Split::Valid => out.valid.push(item),
            Split::Test => out.test.push(item),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_matches_the_reference_values() {
        // Computed once with this Python reference (M = 2**64 - 1):
        //   x = 0xcbf29ce484222325
        //   for b in seed.to_bytes(8, "little") + id.encode(): x = ((x ^ b) * 0x100000001b3) & M
        //   x ^= x >> 30; x = (x * 0xbf58476d1ce4e5b9) & M
        //   x ^= x >> 27; x = (x * 0x94d049bb133111eb) & M; x ^= x >> 31
        assert_eq!(stable_hash("", 0), 0x813f_0174_a236_7c13);
        assert_eq!(stable_hash("conv-26", 42), 0x4005_c75a_766c_a7f8);
    }

    #[test]
    fn shares_follow_the_ratios() {
        let ratios = SplitRatios { train: 0.8, valid: 0.1, test: 0.1 };
        let ids: Vec<String> = (0..20_000).map(|i| format!("item-{i}")).collect();
        let s = split_by_id(ids.iter(), |s| s.as_str(), 7, &ratios);
        let share = |n: usize| n as f64 / ids.len() as f64;
        assert!((share(s.train.len()) - 0.8).abs() < 0.01, "{}", s.train.len());
        assert!((share(s.valid.len()) - 0.1).abs() < 0.01, "{}", s.valid.len());
        assert!((share(s.test.len()) - 0.1).abs() < 0.01, "{}", s.test.len());
    }

    #[test]
    fn assignment_depends_on_id_and_seed_only() {
        let ratios = SplitRatios::default();
        let ids: Vec<String> = (0..1000).map(|i| format!("q{i}")).collect();
        let a: Vec<Split> = ids.iter().map(|id| assign_split(id, 1, &ratios)).collect();
        let b: Vec<Split> = ids.iter().rev().map(|id| assign_split(id, 1, &ratios)).collect();
        assert_eq!(a, b.into_iter().rev().collect::<Vec<_>>());
        let c: Vec<Split> = ids.iter().map(|id| assign_split(id, 2, &ratios)).collect();
        assert_ne!(a, c);
        assert!(a.iter().all(|s| *s != Split::Test));
    }

    #[test]
    fn degenerate_ratios_fall_back_to_train() {
        let zero = SplitRatios { train: 0.0, valid: f64::NAN, test: -1.0 };
        assert_eq!(assign_split("x", 0, &zero), Split::Train);
        let only_test = SplitRatios { train: 0.0, valid: 0.0, test: 1.0 };
        assert_eq!(assign_split("x", 0, &only_test), Split::Test);
    }
}
