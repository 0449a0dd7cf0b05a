"""What every SAE architecture shares, and the hooks through which an architecture says what is its own.

Parameter names and shapes follow the common SAE library (SAELens) so folders move between the two:
W_enc [d_in, d_sae], W_dec [d_sae, d_in], b_dec [d_in], plus per-feature tensors [d_sae] that each architecture
declares in `per_feature`. Activations enter through `sae_input` (run-time normalisation, then x - b_dec) and
leave through `decode` (x_hat = f W_dec + b_dec, then the normalisation undone). Training losses are sums over
the feature/model dimension, averaged over the batch (the papers' convention).

An architecture module subclasses `SparseAutoencoder` and fills in:
- identity: `architecture` (name in memory), `aliases`, `short_name` (command line / run names), `label` (pages);
- its sparsity knob (`knob`: k, or an L1 / L0 coefficient, with its default) and `selected_by_default`;
- `per_feature`: its per-feature tensors, whether each scales with the decoder norm when norms are folded into
  the encoder (None: folding is not exact for this architecture) and its value after a dead feature is resampled;
- inference: `activate(sae_in)`; training: `training_loss`, and optionally `observe_dead`, `after_step`,
  `resample_dead`, `density_bias` (data-aware start);
- the folder format: `folder_architecture`, `activation_fn`, `claims_folder`, `read_fields`, `write_fields`,
  `prepare_tensors` / `folder_tensors` (see interpscope.sae.cfg_json and interpscope.sae.folder).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

import interpscope.sae.normalisation as normalisation
from interpscope.sae.sparse_ops import sparse_decode, sparse_linear


@dataclass
class SAEConfig:
    """What an SAE is and where it reads: the fields the common SAE library writes in cfg.json."""

    d_in: int
    d_sae: int
    architecture: str = "standard"
    model_name: str = ""
    hook_name: str = ""
    hook_layer: int = -1
    dtype: str = "float32"
    k: int | None = None
    context_size: int = 128
    dataset_path: str = ""
    apply_b_dec_to_input: bool = True
    normalize_activations: str = "none"
    prepend_bos: bool = False
    training_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Knob:
    """The one setting that makes an architecture sparse: a count `k`, or a coefficient ("l1" / "l0")."""

    kind: str
    label: str
    default: float

    @property
    def is_count(self) -> bool:
        return self.kind == "k"


@dataclass(frozen=True)
class PerFeature:
    """A per-feature tensor: fold = scales with the decoder norm when norms fold into the encoder (None: the
    architecture cannot fold exactly); reset = its value for a resampled dead feature."""

    fold: bool | None = True
    reset: float = 0.0


@dataclass
class LossTerms:
    """The total loss and its named parts, the features and the reconstruction of the batch."""

    total: torch.Tensor
    terms: dict[str, torch.Tensor]
    features: torch.Tensor
    x_hat: torch.Tensor


def squared_error(x: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
    """||x - x_hat||^2 summed over the model dimension, averaged over rows."""
    return (x - x_hat).pow(2).sum(-1).mean()


class SparseAutoencoder(nn.Module):
    """A linear decoder with unit-norm-able rows; subclasses define the encoder, the loss and their own facts."""

    architecture: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    short_name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    knob: ClassVar[Knob] = Knob("l1", "L1 coefficient", 5.0)
    selected_by_default: ClassVar[bool] = False
    per_feature: ClassVar[dict[str, PerFeature]] = {}
    # a parameter's learning rate as a multiple of the run's (a JumpReLU threshold must travel O(1) in a short run)
    lr_scale: ClassVar[dict[str, float]] = {}
    resample_dead: ClassVar[bool] = True
    density_bias: ClassVar[str | None] = None
    folder_architecture: ClassVar[str] = ""
    activation_fn: ClassVar[str] = "relu"
    paired: ClassVar[bool] = False  # reads one activation and predicts another (a transcoder; sae sweep --target-hook)
    sparse_training = False  # exact sparse-aware kernels in the losses (see sparse_ops); same values and gradients

    def __init__(self, cfg: SAEConfig, dtype: torch.dtype = torch.float32, seed: int | None = 0):
        super().__init__()
        self.cfg = cfg
        self.check_config(cfg)
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        W_dec = torch.randn(cfg.d_sae, cfg.d_in, generator=generator, dtype=torch.float64)
        W_dec = W_dec / W_dec.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(W_dec.to(dtype))
        self.W_enc = nn.Parameter(W_dec.T.clone().to(dtype))
        self.b_dec = nn.Parameter(torch.zeros(cfg.d_in, dtype=dtype))

    # --- the architecture's own facts ------------------------------------------------------------------
    @classmethod
    def check_config(cls, cfg: SAEConfig) -> None:
        """Raise ValueError for settings this architecture cannot run with (e.g. TopK without a valid k)."""
        if cls.knob.is_count and (not cfg.k or not 1 <= cfg.k <= cfg.d_sae):
            raise ValueError(f"A {cls.label} SAE needs 1 <= k <= d_sae (got k={cfg.k}, d_sae={cfg.d_sae}).")

    @classmethod
    def tensor_shapes(cls, cfg: SAEConfig) -> dict[str, tuple[int, ...]]:
        """The tensors (and shapes) a folder of this architecture holds."""
        shapes: dict[str, tuple[int, ...]] = {"W_enc": (cfg.d_in, cfg.d_sae), "W_dec": (cfg.d_sae, cfg.d_in),
                                              "b_dec": (cfg.d_in,)}
        shapes.update({name: (cfg.d_sae,) for name in cls.per_feature})
        return shapes

    @classmethod
    def claims_folder(cls, raw: dict, pre_6: bool) -> bool:
        """True when a cfg.json in an older layout means this architecture under another name (TopK's)."""
        return False

    @classmethod
    def read_fields(cls, raw: dict) -> dict[str, Any]:
        """SAEConfig keyword arguments from this architecture's own cfg.json fields (k, ...); refuse bad ones."""
        return {}

    @classmethod
    def write_fields(cls, cfg: SAEConfig) -> dict[str, Any]:
        """This architecture's own cfg.json fields, in the common library's names."""
        return {"activation_fn_str": cls.activation_fn, "activation_fn_kwargs": {}}

    @classmethod
    def prepare_tensors(cls, raw: dict, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Turn a folder's tensors into this class's parameters with the same meaning (e.g. fold a run-time
        rescaling the common library applies); raise ValueError naming what cannot be read."""
        return tensors

    def folder_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors a folder stores, by name, in the common library's orientation (default: the parameters)."""
        return dict(self.state_dict())

    # --- inference ---------------------------------------------------------------------------------------
    def activate(self, sae_in: torch.Tensor) -> torch.Tensor:
        """Feature activations from the input as the encoder reads it (normalised, b_dec subtracted)."""
        raise NotImplementedError

    def sae_input(self, x: torch.Tensor) -> torch.Tensor:
        """Where activations enter: run-time normalisation (recorded for decode), then x - b_dec."""
        return self.centred(normalisation.enter(self.cfg.normalize_activations, x, self))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(self.sae_input(x))

    def decode(self, features: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """Where activations leave: f W_dec + b_dec, the normalisation undone with x's statistics (default: those
        of the last encode in this thread)."""
        return normalisation.leave(self.cfg.normalize_activations, features @ self.W_dec + self.b_dec, self, x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x), x)

    # --- training ----------------------------------------------------------------------------------------
    def loss(self, x: torch.Tensor, l1: float = 1.0) -> LossTerms:
        """Training loss on raw activations; `l1` is the sparsity coefficient (L1 or L0 weight; unused by
        architectures whose knob is k)."""
        if self.cfg.normalize_activations != "none":
            raise ValueError("Interpscope trains SAEs on raw activations (normalize_activations 'none').")
        return self.training_loss(x, l1)

    def training_loss(self, x: torch.Tensor, coefficient: float) -> LossTerms:
        raise NotImplementedError

    def reconstruction_target(self, x: torch.Tensor) -> torch.Tensor:
        """What a training row's reconstruction is compared with: the row itself (a transcoder: its target part)."""
        return x

    def observe_dead(self, dead: torch.Tensor) -> None:
        """Told before each training step which features have not fired for the dead window."""

    def after_step(self, out: LossTerms) -> None:
        """Called after each optimiser step with that step's loss terms (constraints, running estimates)."""

    # --- helpers -----------------------------------------------------------------------------------------
    def centred(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.b_dec if self.cfg.apply_b_dec_to_input else x

    def _linear(self, xc: torch.Tensor) -> torch.Tensor:
        return sparse_linear(xc, self.W_enc) if self.sparse_training and xc.dim() == 2 else xc @ self.W_enc

    def _decode_rows(self, f: torch.Tensor, W_dec: torch.Tensor | None = None) -> torch.Tensor:
        """f @ W_dec without bias (W_dec may be a detached copy); used by the training losses."""
        W = self.W_dec if W_dec is None else W_dec
        return sparse_decode(f, W) if self.sparse_training and f.dim() == 2 else f @ W

    @torch.no_grad()
    def fold_decoder_norms(self) -> None:
        """Scale W_dec rows to unit norm and move the norms into the encoder: x_hat is unchanged."""
        if any(rule.fold is None for rule in self.per_feature.values()):
            raise ValueError(f"Folding decoder norms changes a {self.label} SAE's selection; it is kept unit-norm "
                             "instead.")
        norms = self.W_dec.norm(dim=1)
        self.W_dec.div_(norms[:, None])
        self.W_enc.mul_(norms[None, :])
        for name, rule in self.per_feature.items():
            if rule.fold:
                getattr(self, name).mul_(norms)

    @torch.no_grad()
    def init_from_batch(self, x: torch.Tensor, density: float = 0.03) -> None:
        """Data-aware start: b_dec = batch mean; an architecture with a `density_bias` sets it so each feature
        fires on about `density` of the batch, so training starts sparse, where the sparse kernels are cheap."""
        self.b_dec.copy_(x.mean(0))
        if self.density_bias is None:
            return
        pre = self.centred(x) @ self.W_enc
        k = max(1, min(x.shape[0], int(round((1 - density) * x.shape[0]))))
        getattr(self, self.density_bias).copy_(-pre.kthvalue(k, dim=0).values)

    @torch.no_grad()
    def fold_input_scale(self, scale: float) -> None:
        """An SAE trained on x * scale becomes one that reads raw x and writes raw x_hat."""
        self.W_enc.mul_(scale)
        self.b_dec.div_(scale)
        self.W_dec.div_(scale)

    @torch.no_grad()
    def reinit_features(self, index: torch.Tensor, directions: torch.Tensor, enc_norm: float) -> None:
        """Resample features `index`: decoder rows = unit `directions`, encoder columns = enc_norm * directions,
        per-feature tensors back to their reset values."""
        directions = directions / directions.norm(dim=1, keepdim=True).clamp_min(1e-8)
        self.W_dec[index] = directions.to(self.W_dec.dtype)
        self.W_enc[:, index] = (directions.T * enc_norm).to(self.W_enc.dtype)
        for name, rule in self.per_feature.items():
            getattr(self, name)[index] = rule.reset
