//! Causal attention with its own backward, on the host: the kernels memkit-train's `FlashAttention`
//! runs on burn's flex backend (issue 42; design in docs/FUSED_ATTENTION.md).
//!
//! - The forward pass ([`forward`]) runs a tile of query rows at a time, and keeps the output and
//!   each row's log-sum-exp.
//! - The backward pass ([`backward`]) recomputes each row's probabilities from the saved
//!   log-sum-exp and accumulates dQ, dK and dV (FlashAttention-2's recurrences, Dao 2023, §3.1),
//!   one query head per task.
//!
//! Grouped-query attention is native: k and v keep their `kv_heads` (no copy), and dK / dV sum
//! over each group. Packed rows (several examples in one row) pass each position's segment start:
//! a query sees the keys from the first position of its own example up to itself, and the work
//! outside that block-diagonal band is never done.
//!
//! A crate of its own so that it alone builds optimised in dev (`[profile.dev.package]` in the
//! workspace's Cargo.toml): training from a dev build runs these loops at full speed, and
//! memkit-train's own code and tests compile at the dev default.

use rayon::prelude::*;

/// Query rows per tile: each key and value row is read once per tile.
const TILE: usize = 32;

/// One call's shape: q `[batch, heads, seq, dim]`, k and v `[batch, kv_heads, seq, dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub seq: usize,
    pub dim: usize,
}

impl Shape {
    /// The shape of q `[batch, heads, seq, dim]` and k (or v) `[batch, kv_heads, seq, dim]`;
    /// panics unless they fit together.
    pub fn of(q: &[usize], k: &[usize]) -> Self {
        let shape = Shape { batch: q[0], heads: q[1], kv_heads: k[1], seq: q[2], dim: q[3] };
        assert!(
            k[0] == q[0] && k[2] == q[2] && k[3] == q[3] && shape.kv_heads > 0 && shape.heads.is_multiple_of(shape.kv_heads),
            "attention shapes: q {q:?}, k and v {k:?}"
        );
        shape
    }

    /// Where the key and value rows of query head `bh` (batch row × heads + head) start.
    fn kv_at(&self, bh: usize) -> usize {
        let (b, h) = (bh / self.heads, bh % self.heads);
        (b * self.kv_heads + h / (self.heads / self.kv_heads)) * self.seq * self.dim
    }

    /// The segment starts of query head `bh`'s batch row (empty: causal over the whole row).
    fn row_starts<'a>(&self, starts: &'a [u32], bh: usize) -> &'a [u32] {
        if starts.is_empty() { starts } else { &starts[bh / self.heads * self.seq..][..self.seq] }
    }

    /// Panics unless `starts` is empty or `[batch, seq]` segment starts: each at most its own
    /// position and none below the one before it in its row.
    fn check_starts(&self, starts: &[u32]) {
        if starts.is_empty() {
            return;
        }
        assert_eq!(starts.len(), self.batch * self.seq, "attention segment starts: {} for {self:?}", starts.len());
        for row in starts.chunks(self.seq.max(1)) {
            for (i, &s) in row.iter().enumerate() {
                let before = if i == 0 { 0 } else { row[i - 1] };
                assert!(s as usize <= i && s >= before, "attention segment start {s} at position {i} (the one before: {before})");
            }
        }
    }
}

/// `softmax(q·kᵀ·scale + causal mask)·v` and each row's log-sum-exp of the scaled scores:
/// out `[batch, heads, seq, dim]`, lse `[batch, heads, seq]`.
///
/// `starts` is empty (every row one causal sequence) or holds, for each position of each batch
/// row (`[batch, seq]`), the first position its query may see: the start of its packed example.
/// Within a row it never decreases and never passes the position itself.
pub fn forward(q: &[f32], k: &[f32], v: &[f32], starts: &[u32], shape: Shape, scale: f32) -> (Vec<f32>, Vec<f32>) {
    shape.check_starts(starts);
    let Shape { seq, dim, .. } = shape;
    let head = seq * dim;
    let mut out = vec![0.0; q.len()];
    let mut lse = vec![0.0; q.len() / dim.max(1)];
    if head == 0 {
        return (out, lse);
    }
    out.par_chunks_mut(head).zip(lse.par_chunks_mut(seq)).enumerate().for_each(|(bh, (out, lse))| {
        let at = shape.kv_at(bh);
        let starts = shape.row_starts(starts, bh);
        let head_in = Head { q: &q[bh * head..][..head], k: &k[at..][..head], v: &v[at..][..head], starts, seq, dim, scale };
        with_cpu_features!(forward_head(head_in, out, lse));
    });
    (out, lse)
}

/// The gradients of a loss through [`forward`] (same `starts`) from its output's gradient `d_out`: dq
/// `[batch, heads, seq, dim]`, dk and dv `[batch, kv_heads, seq, dim]`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    lse: &[f32],
    d_out: &[f32],
    starts: &[u32],
    shape: Shape,
    scale: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    shape.check_starts(starts);
    let Shape { seq, dim, .. } = shape;
    let head = seq * dim;
    let mut dq = vec![0.0; q.len()];
    let (mut dk, mut dv) = (vec![0.0; k.len()], vec![0.0; v.len()]);
    if head == 0 {
        return (dq, dk, dv);
    }
    // One task per query head, with dK and dV of its own, summed over each group below.
    let partial: Vec<(Vec<f32>, Vec<f32>)> = dq
        .par_chunks_mut(head)
        .enumerate()
        .map(|(bh, dq)| {
            let at = shape.kv_at(bh);
            let starts = shape.row_starts(starts, bh);
            let head_in = Head { q: &q[bh * head..][..head], k: &k[at..][..head], v: &v[at..][..head], starts, seq, dim, scale };
            let (o, d_o, lse) = (&out[bh * head..][..head], &d_out[bh * head..][..head], &lse[bh * seq..][..seq]);
            let (mut dk, mut dv) = (vec![0.0; head], vec![0.0; head]);
            with_cpu_features!(backward_head(head_in, o, lse, d_o, dq, &mut dk, &mut dv));
            (dk, dv)
        })
        .collect();
    for (bh, (pk, pv)) in partial.iter().enumerate() {
        let at = shape.kv_at(bh);
        axpy(1.0, pk, &mut dk[at..][..head]);
        axpy(1.0, pv, &mut dv[at..][..head]);
    }
    (dq, dk, dv)
}

/// Calls `$f` compiled for AVX2 when the CPU has it (the loops then run 8 lanes wide), else for
/// the baseline target.
macro_rules! with_cpu_features {
    ($f:ident($($arg:expr),* $(,)?)) => {{
        #[cfg(target_arch = "x86_64")]
        #[allow(unsafe_code)] // The one unsafe call: a target-feature function, behind its check.
        {
            #[target_feature(enable = "avx2")]
            unsafe fn avx2(f: impl FnOnce()) {
                f()
            }
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked above).
                unsafe { avx2(|| $f($($arg),*)) }
            } else {
                $f($($arg),*)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        $f($($arg),*)
    }};
}
use with_cpu_features;

/// One query head's inputs: its `seq × dim` rows of q, its kv head's of k and v, and its row's
/// segment starts (empty: causal over the whole row).
#[derive(Clone, Copy)]
struct Head<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    starts: &'a [u32],
    seq: usize,
    dim: usize,
    scale: f32,
}

impl Head<'_> {
    /// The first key query row `i` sees.
    #[inline(always)]
    fn start(&self, i: usize) -> usize {
        if self.starts.is_empty() { 0 } else { self.starts[i] as usize }
    }
}

/// [`forward`] for one head: `out` rows and their log-sum-exp.
#[inline(always)]
fn forward_head(h: Head, out: &mut [f32], lse: &mut [f32]) {
    let Head { v, seq, dim, .. } = h;
    let mut p = vec![0.0; TILE * seq];
    for i0 in (0..seq).step_by(TILE) {
        let rows = TILE.min(seq - i0);
        scores(h, i0, rows, &mut p);
        for r in 0..rows {
            let (i, lo) = (i0 + r, h.start(i0 + r));
            let row = &mut p[r * seq..][lo..=i];
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            exp_shifted(row, max);
            let sum: f32 = row.iter().sum();
            let o = &mut out[i * dim..][..dim];
            for (j, &pj) in (lo..).zip(row.iter()) {
                axpy(pj / sum, &v[j * dim..][..dim], o);
            }
            lse[i] = max + sum.ln();
        }
    }
}

/// [`backward`] for one head: its dq rows, and its share of its kv head's dk and dv.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn backward_head(h: Head, o: &[f32], lse: &[f32], d_o: &[f32], dq: &mut [f32], dk: &mut [f32], dv: &mut [f32]) {
    let Head { q, k, v, seq, dim, scale, .. } = h;
    let (mut p, mut ds) = (vec![0.0; TILE * seq], vec![0.0; TILE * seq]);
    for i0 in (0..seq).step_by(TILE) {
        let rows = TILE.min(seq - i0);
        scores(h, i0, rows, &mut p);
        for r in 0..rows {
            let (i, lo) = (i0 + r, h.start(i0 + r));
            let (d_oi, dqi) = (&d_o[i * dim..][..dim], &mut dq[i * dim..][..dim]);
            let delta = dot(d_oi, &o[i * dim..][..dim]);
            exp_shifted(&mut p[r * seq..][lo..=i], lse[i]);
            for j in lo..=i {
                let pij = p[r * seq + j];
                let dsij = pij * (dot(d_oi, &v[j * dim..][..dim]) - delta);
                ds[r * seq + j] = dsij;
                axpy(scale * dsij, &k[j * dim..][..dim], dqi);
            }
        }
        for j in h.start(i0)..i0 + rows {
            let (dkj, dvj) = (&mut dk[j * dim..][..dim], &mut dv[j * dim..][..dim]);
            // The rows that see key j: from the first at or after it, while their segment has
            // begun by j (starts never decrease, so the rest see it neither).
            for r in (j.saturating_sub(i0)..rows).take_while(|&r| h.start(i0 + r) <= j) {
                let i = i0 + r;
                axpy(scale * ds[r * seq + j], &q[i * dim..][..dim], dkj);
                axpy(p[r * seq + j], &d_o[i * dim..][..dim], dvj);
            }
        }
    }
}

/// The scaled scores of query rows `i0 .. i0 + rows` against the keys each may see
/// (`p[r·seq + j]` for `start(i0 + r) ≤ j ≤ i0 + r`).
#[inline(always)]
fn scores(h: Head, i0: usize, rows: usize, p: &mut [f32]) {
    let Head { q, k, seq, dim, scale, .. } = h;
    for j in h.start(i0)..i0 + rows {
        let kj = &k[j * dim..][..dim];
        for r in (j.saturating_sub(i0)..rows).take_while(|&r| h.start(i0 + r) <= j) {
            p[r * seq + j] = scale * dot(&q[(i0 + r) * dim..][..dim], kj);
        }
    }
}

/// `x ← exp(x − shift)` for values at most `shift` (so results lie in [0, 1]): Cody–Waite range
/// reduction and a degree-7 polynomial, branch-free so the compiler vectorises the loop (the
/// kernel computes one exponential per query-key pair, forward and backward). Within 2 ulp of
/// `f32::exp` on [-87, 0]; below -87 (under 1.7e-38) it returns a value under 2e-38.
#[inline(always)]
fn exp_shifted(xs: &mut [f32], shift: f32) {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 · 2²³: adding and subtracting it rounds an f32 below 2²² to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    for x in xs {
        let v = (*x - shift).max(-87.0);
        let n = (v * LOG2E + ROUND) - ROUND;
        let r = v - n * LN2_HI - n * LN2_LO;
        let poly = 1.0
            + r * (1.0
                + r * (0.5 + r * (0.166_666_67 + r * (0.041_666_668 + r * (0.008_333_334 + r * (0.001_388_889 + r * 0.000_198_412_7))))));
        *x = poly * f32::from_bits(((n as i32 + 127) << 23) as u32);
    }
}

/// `a · b` with 32 running sums: four independent 8-lane chains, so the compiler vectorises it
/// and the adds do not wait on each other.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 32];
    let (ca, cb) = (a.chunks_exact(32), b.chunks_exact(32));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..32 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut lanes = [0.0f32; 8];
    for chunk in acc.chunks_exact(8) {
        for l in 0..8 {
            lanes[l] += chunk[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `y += alpha · x`.
#[inline(always)]
fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's exponential against the standard library's, over the range the softmax
    /// reaches (a shifted score is at most 0), in units of the last place.
    #[test]
    fn the_kernel_exponential_is_within_two_ulp_of_the_standard_one() {
        let xs: Vec<f32> = (0..=870_000).map(|i| -(i as f32) * 1e-4).collect();
        let mut ours = xs.clone();
        exp_shifted(&mut ours, 0.0);
        for (x, e) in xs.iter().zip(&ours) {
            let want = x.exp();
            let ulp = (want.to_bits() as i64 - e.to_bits() as i64).abs();
            assert!(ulp <= 2, "exp({x}) = {e}, want {want} ({ulp} ulp)");
        }
        // Shifted: exp(3 - 5) and a very negative value.
        let mut v = [3.0, -200.0];
        exp_shifted(&mut v, 5.0);
        assert!((v[0] - (-2.0f32).exp()).abs() < 1e-7 && v[1] < 2e-38, "{v:?}");
    }
}
