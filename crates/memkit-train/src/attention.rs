//! Causal attention with its own backward (issue 42; design in docs/FUSED_ATTENTION.md).
//!
//! burn-autodiff 0.22's `attention` is its fallback: scores, mask, softmax and `·V` as separate
//! ops, each kept for backward, so every layer holds `[batch, heads, seq, seq]` tensors until
//! the backward pass (236 MB each at 2,560 tokens for SmolLM2-135M). [`FlashAttention`] is a burn
//! backend extension (flex and LibTorch, and autodiff over them) that never keeps one. LibTorch
//! runs torch's own fused CPU attention and its backward; flex runs memkit-attention's host
//! kernels (a forward that keeps each row's log-sum-exp, a backward that recomputes the
//! probabilities from it). The host round trip (into `TensorData` and back) costs `O(seq · dim)`
//! per head against the kernel's `O(seq² · dim)`.

// burn-tch is deprecated in burn 0.22 and still the LibTorch path: the extension macro names
// `burn::backend::LibTorch` in the code it generates at the module level.
#![cfg_attr(feature = "tch", allow(deprecated))]

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, Flex, TensorMetadata, backend_extension};
use burn::tensor::{Tensor, TensorData, read_sync};
use memkit_attention::{Shape, backward, forward};

/// Causal attention with its own backward, as a burn backend extension: each backend runs its
/// [`FlashKernels`] forward; `Autodiff` over it registers their backward.
#[backend_extension(Flex, LibTorch: cfg(feature = "tch"), Autodiff)]
pub trait FlashAttention: Backend {
    /// q `[batch, heads, seq, dim]`, k and v `[batch, kv_heads, seq, dim]` (`heads` a multiple
    /// of `kv_heads`) → `[batch, heads, seq, dim]`. `starts`: empty, or each position's segment
    /// start (`[batch, seq]`, see [`forward`]).
    fn flash_causal_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        starts: &[u32],
        scale: f32,
    ) -> FloatTensor<Self>;
}

/// What one backend runs for [`FlashAttention`]: the forward, keeping what the backward step
/// reads, and that step. Flex runs memkit's host kernels ([`forward`], [`backward`]); LibTorch
/// torch's own fused CPU attention and its backward.
pub trait FlashKernels: Backend {
    /// The forward's inputs, output and row log-sum-exp, as the backward step reads them.
    type Saved: Clone + Send + std::fmt::Debug + 'static;

    /// Shapes and `starts` as [`FlashAttention::flash_causal_attention`]; the output and what
    /// [`FlashKernels::flash_backward`] needs.
    fn flash_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        starts: &[u32],
        scale: f32,
    ) -> (FloatTensor<Self>, Self::Saved);

    /// dQ `[batch, heads, seq, dim]`, dK and dV `[batch, kv_heads, seq, dim]` from the saved
    /// forward and the output's gradient.
    fn flash_backward(saved: Self::Saved, d_out: FloatTensor<Self>) -> [FloatTensor<Self>; 3];
}

/// A float tensor's values on the host, as f32, with its shape.
fn host<B: Backend>(t: FloatTensor<B>) -> (Vec<f32>, Vec<usize>) {
    let data = read_sync(B::float_into_data(t)).expect("reading a tensor for attention");
    let shape = data.shape().to_vec();
    (data.convert::<f32>().try_into_vec::<f32>().expect("f32 values"), shape)
}

/// What flex's backward step reads: the forward's host inputs, output, row log-sum-exp and
/// segment starts.
#[derive(Clone, Debug)]
pub struct Saved {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    out: Vec<f32>,
    lse: Vec<f32>,
    starts: Vec<u32>,
    shape: Shape,
    scale: f32,
}

impl FlashKernels for Flex {
    type Saved = Saved;

    fn flash_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        starts: &[u32],
        scale: f32,
    ) -> (FloatTensor<Self>, Saved) {
        let device = q.device();
        let ((q, q_shape), (k, k_shape), (v, _)) = (host::<Self>(q), host::<Self>(k), host::<Self>(v));
        let shape = Shape::of(&q_shape, &k_shape);
        let (out, lse) = forward(&q, &k, &v, starts, shape, scale);
        let tensor = Self::float_from_data(TensorData::new(out.clone(), q_shape), &device);
        (tensor, Saved { q, k, v, out, lse, starts: starts.to_vec(), shape, scale })
    }

    fn flash_backward(saved: Saved, d_out: FloatTensor<Self>) -> [FloatTensor<Self>; 3] {
        let device = d_out.device();
        let (d_out, _) = host::<Self>(d_out);
        let Saved { q, k, v, out, lse, starts, shape, scale } = saved;
        let (dq, dk, dv) = backward(&q, &k, &v, &out, &lse, &d_out, &starts, shape, scale);
        let q_shape = vec![shape.batch, shape.heads, shape.seq, shape.dim];
        let kv_shape = vec![shape.batch, shape.kv_heads, shape.seq, shape.dim];
        [(dq, q_shape), (dk, kv_shape.clone()), (dv, kv_shape)]
            .map(|(grad, dims)| Self::float_from_data(TensorData::new(grad, dims), &device))
    }
}

impl FlashAttention for Flex {
    fn flash_causal_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        starts: &[u32],
        scale: f32,
    ) -> FloatTensor<Self> {
        Self::flash_forward(q, k, v, starts, scale).0
    }
}

/// LibTorch: torch's fused attention for the CPU (`_scaled_dot_product_flash_attention_for_cpu`,
/// what `torch.nn.functional.scaled_dot_product_attention` runs there, so what PyTorch trains
/// with) and its backward. It takes no grouped-query heads, so k and v are repeated to the query
/// heads and dK / dV summed back over each group; packed rows pass an additive `[batch, 1, seq,
/// seq]` mask that hides the keys before each position's segment start (causality is the
/// kernel's own).
#[cfg(feature = "tch")]
mod torch {
    use burn::backend::LibTorch;
    use burn::backend::libtorch::TchTensor;
    use burn::backend::tensor::FloatTensor;

    use super::{FlashAttention, FlashKernels};

    /// What the backward step reads: q, k and v (repeated to the query heads), the output, its
    /// row log-sum-exp and the segment mask, all torch tensors.
    #[derive(Clone, Debug)]
    pub struct TorchSaved {
        q: TchTensor,
        k: TchTensor,
        v: TchTensor,
        out: TchTensor,
        lse: TchTensor,
        mask: Option<TchTensor>,
        groups: i64,
        scale: f64,
    }

    /// `[batch, kv_heads, seq, dim]` → `[batch, kv_heads × groups, seq, dim]`, each kv head
    /// repeated for its group of query heads.
    fn repeat_heads(x: TchTensor, groups: i64) -> TchTensor {
        if groups == 1 { x } else { TchTensor::new(x.tensor.repeat_interleave_self_int(groups, 1, None)) }
    }

    /// The additive mask of packed rows: 0 where key `j` is at or after query `i`'s segment start,
    /// -inf before it (`[batch, 1, seq, seq]`, on `like`'s device); `None` for plain causal rows.
    fn segment_mask(starts: &[u32], like: &tch::Tensor) -> Option<tch::Tensor> {
        if starts.is_empty() {
            return None;
        }
        let (batch, seq) = (like.size()[0], like.size()[2]);
        let options = (tch::Kind::Float, like.device());
        let starts: Vec<f32> = starts.iter().map(|&s| s as f32).collect();
        let starts = tch::Tensor::from_slice(&starts).to_device(like.device()).view([batch, 1, seq, 1]);
        let keys = tch::Tensor::arange(seq, options).view([1, 1, 1, seq]);
        let zeros = tch::Tensor::zeros([1], options);
        Some(zeros.where_scalarother(&keys.ge_tensor(&starts), f64::NEG_INFINITY))
    }

    impl FlashKernels for LibTorch {
        type Saved = TorchSaved;

        fn flash_forward(q: TchTensor, k: TchTensor, v: TchTensor, starts: &[u32], scale: f32) -> (TchTensor, TorchSaved) {
            // burn-tch writes into a tensor in place when no other handle shares its storage:
            // what is kept for backward shares the handles' storage (`TchTensor::clone`), never
            // a second `TchTensor::new` over the same memory.
            let groups = q.tensor.size()[1] / k.tensor.size()[1];
            let (k, v) = (repeat_heads(k, groups), repeat_heads(v, groups));
            let mask = segment_mask(starts, &q.tensor);
            let scale = f64::from(scale);
            let (out, lse) = tch::Tensor::internal_scaled_dot_product_flash_attention_for_cpu(
                &q.tensor,
                &k.tensor,
                &v.tensor,
                0.0,
                true,
                mask.as_ref(),
                scale,
            );
            let out = TchTensor::new(out);
            let saved = TorchSaved { q, k, v, out: out.clone(), lse: TchTensor::new(lse), mask: mask.map(TchTensor::new), groups, scale };
            (out, saved)
        }

        fn flash_backward(saved: TorchSaved, d_out: FloatTensor<Self>) -> [TchTensor; 3] {
            let TorchSaved { q, k, v, out, lse, mask, groups, scale } = saved;
            let (dq, dk, dv) = tch::Tensor::internal_scaled_dot_product_flash_attention_for_cpu_backward(
                &d_out.tensor.contiguous(),
                &q.tensor,
                &k.tensor,
                &v.tensor,
                &out.tensor,
                &lse.tensor,
                0.0,
                true,
                mask.as_ref().map(|m| &m.tensor),
                scale,
            );
            // Each kv head's gradient is the sum over the query heads that read it.
            let fold = |g: tch::Tensor| {
                if groups == 1 {
                    return g;
                }
                let [b, h, s, d] = g.size()[..] else { unreachable!("a 4-d gradient") };
                g.view([b, h / groups, groups, s, d]).sum_dim_intlist(2_i64, false, tch::Kind::Float)
            };
            [dq, fold(dk), fold(dv)].map(TchTensor::new)
        }
    }

    impl FlashAttention for LibTorch {
        fn flash_causal_attention(q: TchTensor, k: TchTensor, v: TchTensor, starts: &[u32], scale: f32) -> TchTensor {
            Self::flash_forward(q, k, v, starts, scale).0
        }
    }
}

/// The backward step: dQ, dK and dV from the saved forward, on the inner backend.
#[derive(Debug)]
struct FlashBackward;

impl<B: FlashKernels> Backward<B, 3> for FlashBackward {
    type State = B::Saved;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let d_out = grads.consume::<B>(&ops.node);
        for (parent, grad) in ops.parents.into_iter().zip(B::flash_backward(ops.state, d_out)) {
            if let Some(node) = parent {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: FlashKernels, C: CheckpointStrategy> FlashAttention for Autodiff<B, C> {
    fn flash_causal_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        starts: &[u32],
        scale: f32,
    ) -> FloatTensor<Self> {
        let (q_node, k_node, v_node) = (q.node(), k.node(), v.node());
        let (out, saved) = B::flash_forward(q.into_primitive(), k.into_primitive(), v.into_primitive(), starts, scale);
        match FlashBackward.prepare::<C>([q_node, k_node, v_node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(saved, out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}

/// [`FlashAttention`] on flex or LibTorch tensors, with autodiff or without; `starts` as in [`forward`].
///
/// # Shapes
/// - q `[batch, heads, seq, dim]`, k and v `[batch, kv_heads, seq, dim]` → `[batch, heads, seq, dim]`
pub fn flash_causal_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, starts: &[u32], scale: f32) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as FlashAttention>::flash_causal_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        starts,
        scale,
    ))
}
