"""Attribution patching (AtP) and relevance patching (RelP): every patching grid from one backward pass.

AtP (Nanda's attribution patching, first-order Taylor): patching cell n of the corrupt run with its clean activation
changes the metric by about (a_clean(n) - a_corrupt(n)) . dm/da(n), the gradient taken on the corrupt run. One
forward and one backward pass on the corrupt prompt give the gradient at every residual point, attention and MLP
output and head output at once; one plain pass on the clean prompt gives the clean activations.

RelP (Rezaei Jafari et al., 2025): the same product with the gradient replaced by LRP's propagation coefficients,
i.e. the backward pass run under the project's LRP rules (interpscope.relevance.rules). The rule sets (the default
option 'relp-half-q-ig2' is 'relp-half-q' on a path, below):
- 'cp-lrp': norm identity, q/k detached (attention pattern frozen), and on a gated MLP the gate detached (the whole
  gradient through the linear branch);
- 'relp-half': the RelP paper's choice: norm identity (LN-rule), q/k detached (attention frozen, the AH-rule),
  identity on the activation and the half rule on the gated product (each branch of gate x up gets 1/2);
- 'attnlrp': norm identity, AttnLRP's q/k x 1/4 and v x 1/2 (relevance through the softmax), half rule on gates;
- the same LRP rules on norms and MLPs with the attention pattern not frozen: 'cp-lrp-qk' and 'relp-half-qk' (the
  plain gradient through queries and keys), 'relp-half-qk4' (q/k x 1/4, values whole), 'relp-half-q' and 'cp-lrp-q'
  (queries kept, keys detached). Each set's docstring says why it is worth trying.
The forward values are unchanged by the rules, so the corrupt activations are the same.

Where the coefficients are taken (`alphas`): both papers take them on the corrupt run, the first-order Taylor term
at the point patching starts from. A patch that saturates (an early residual cell at the changed name restores the
whole answer, but its gradient on the corrupt run is small) is underestimated there. The path options average the
coefficients over points of the straight line from the corrupt to the clean prompt's input embeddings
(alpha = 0 corrupt, 1 clean), as integrated gradients and EAP-IG (Hanna et al., 2024) do: 'igK' takes the K
midpoints (i + 1/2) / K of that line, in one forward + backward pass of batch K. The estimate stays a product
(clean - corrupt) x coefficient, with the coefficient an average of the same rule set's coefficients.

Both are estimates of the real (normalised) patching effect; the result reports their Pearson correlation with real
patching per component kind.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack

import numpy as np
import torch

from interpscope.adapters import ModelAdapter
from interpscope.capture import EditFn, hooks, scoped
from interpscope.patching.patching import Activations, first_argument, grid_shape, out_projections, point_names
from interpscope.patching.prompts import Metric
from interpscope.relevance.rules import (
    ActivationRule,
    NormRule,
    Rule,
    apply_rules,
    attnlrp_rules,
    cplrp_rules,
    mlp_up_scale,
    qkv_scale,
)


def _lrp_mlp(adapter: ModelAdapter, q: float, k: float, *, half: bool) -> list[Rule]:
    """Norm identity, the given query/key gradient factors (values kept whole), and on the MLP: the half rule on a
    gated product (half) or the gate detached (not half); identity on an ungated activation."""
    from interpscope.relevance.gates import gate_rules

    rules: list[Rule] = [NormRule(), qkv_scale(q, k, 1.0)]
    if not adapter.gated_mlp:
        rules.append(ActivationRule(1.0))
    else:
        rules += [ActivationRule(0.5), mlp_up_scale(0.5)] if half else [ActivationRule(0.0)]
    return rules + gate_rules(adapter, attnlrp=False)


def relp_half_rules(adapter: ModelAdapter) -> list[Rule]:
    """The RelP paper's rules: LN-rule (norm identity), attention pattern frozen (q/k detached, v full), identity on
    the MLP activation and the half rule on a gated product (gate and up branch 1/2 each)."""
    return _lrp_mlp(adapter, 0.0, 0.0, half=True)


def cplrp_qk_rules(adapter: ModelAdapter) -> list[Rule]:
    """CP-LRP without the frozen pattern: norm identity and gate detached, but the plain gradient through queries and
    keys, so an attention output's effect on later heads' patterns (S-inhibition -> name movers in IOI) is kept."""
    return _lrp_mlp(adapter, 1.0, 1.0, half=False)


def relp_half_qk_rules(adapter: ModelAdapter) -> list[Rule]:
    """The RelP paper's norm and half rules with the plain gradient through queries and keys (pattern not frozen)."""
    return _lrp_mlp(adapter, 1.0, 1.0, half=True)


def relp_half_qk4_rules(adapter: ModelAdapter) -> list[Rule]:
    """The half rule set with AttnLRP's softmax treatment on queries and keys only (x 1/4 each, values whole)."""
    return _lrp_mlp(adapter, 0.25, 0.25, half=True)


def relp_half_q_rules(adapter: ModelAdapter) -> list[Rule]:
    """The half rule set with the gradient kept through queries and keys detached: a component's effect on what later
    heads look for (their queries at its position) is kept, its effect on what they find there (keys) frozen."""
    return _lrp_mlp(adapter, 1.0, 0.0, half=True)


def cplrp_q_rules(adapter: ModelAdapter) -> list[Rule]:
    """CP-LRP (norm identity, gate detached) with the gradient kept through queries, keys detached."""
    return _lrp_mlp(adapter, 1.0, 0.0, half=False)


def midpoints(k: int) -> tuple[float, ...]:
    """The k midpoints (i + 1/2) / k of the corrupt -> clean input path (the midpoint rule with k steps)."""
    return tuple((i + 0.5) / k for i in range(k))


PATHS: dict[str, tuple[float, ...]] = {"corrupt": (0.0,), "clean": (1.0,), "ends": (0.0, 1.0),
                                       **{f"ig{k}": midpoints(k) for k in range(1, 6)}}
RULE_SETS: dict[str, Callable[[ModelAdapter], Sequence[Rule]]] = {
    "cp-lrp": cplrp_rules, "relp-half": relp_half_rules, "attnlrp": attnlrp_rules, "cp-lrp-qk": cplrp_qk_rules,
    "relp-half-qk": relp_half_qk_rules, "relp-half-qk4": relp_half_qk4_rules, "relp-half-q": relp_half_q_rules,
    "cp-lrp-q": cplrp_q_rules}
RELP_PATH_OPTIONS = {"relp-half-q-ig2": ("relp-half-q", "ig2")}  # rule set, path: the options offered on a path
RELP_RULES: dict[str, Callable[[ModelAdapter], Sequence[Rule]]] = {
    **RULE_SETS, **{name: RULE_SETS[rules] for name, (rules, _) in RELP_PATH_OPTIONS.items()}}
# the default: relp-half-q's rules at the 2 midpoints of the input path. Chosen (rule set before, path now) on 3 IOI
# and 3 greater-than pairs; on 9 held-out pairs it is pooled r 0.97 / 0.96 (IOI) and 0.96 / 0.93 (greater-than) on
# residual stream / attention outputs, relp-half-q on the corrupt run alone 0.90 / 0.97 and 0.91 / 0.93
# (bench/patching_rules.py, README). relp-half-q stays selectable (one pass instead of a pass of batch 2).
DEFAULT_RELP_RULES = "relp-half-q-ig2"
APPROXIMATIONS = ("atp", "relp")
METHOD_LABELS = {"real": "Activation patching", "atp": "Attribution patching (gradient)",
                 "relp": "Relevance patching (LRP)"}


def relp_alphas(relp_rules: str) -> tuple[float, ...]:
    """The path points of a RelP option (the corrupt run alone for a plain rule set)."""
    return PATHS[RELP_PATH_OPTIONS[relp_rules][1]] if relp_rules in RELP_PATH_OPTIONS else PATHS["corrupt"]


def _gradients(adapter: ModelAdapter, ids: torch.Tensor, metric: Metric, heads: bool,
               clean_ids: torch.Tensor | None = None, alphas: Sequence[float] = (0.0,)) -> dict[str, torch.Tensor]:
    """The gradient of the metric ([T, width]) at every patching point under whatever rules the caller has applied,
    averaged over the inputs (1 - alpha) x embed(ids) + alpha x embed(clean_ids) for each alpha: one forward +
    backward pass of batch len(alphas) (their metrics summed: each depends on its own row only). Keys:
    '<kind>.<row>'."""
    names = point_names(adapter)
    taps: dict[str, torch.Tensor] = {}

    def tap(key: str) -> Callable[[torch.Tensor], None]:
        def fn(tensor: torch.Tensor) -> None:
            taps[key] = tensor
        return fn

    def tap_input(key: str) -> Callable:
        def fn(module, args, kwargs) -> None:
            taps[key] = first_argument(args, kwargs)
        return fn

    edits: list[tuple[str, EditFn]] = [(name, tap(f"{kind}.{row}")) for kind in ("resid", "attn", "mlp")
                                       for row, name in enumerate(names[kind])]
    projections = [(module, tap_input(f"heads.{layer}")) for layer, module in enumerate(out_projections(adapter))] \
        if heads else []
    from interpscope.relevance.engine import forward_logits

    with ExitStack() as stack, torch.enable_grad():
        stack.enter_context(hooks(adapter, edits, role="read"))  # after the rules' hooks: sees what flows on
        stack.enter_context(scoped(projections, role="read", kind="input"))
        embeds = adapter.embedding()(ids).detach()
        if tuple(alphas) != (0.0,):
            if clean_ids is None:
                raise ValueError("coefficients on the path to the clean prompt need its ids")
            weight = torch.tensor(list(alphas), dtype=embeds.dtype, device=embeds.device)[:, None, None]
            embeds = (1 - weight) * embeds + weight * adapter.embedding()(clean_ids).detach()  # exact at 0 and 1
        embeds.requires_grad_(True)
        value = metric.value(forward_logits(adapter.model, embeds, [ids.shape[1] - 1])[:, 0]).sum()
        keys = list(taps)
        grads = torch.autograd.grad(value, [taps[k] for k in keys], allow_unused=True)
    return {k: (torch.zeros_like(taps[k]) if g is None else g).detach().mean(0)
            for k, g in zip(keys, grads, strict=True)}


def _products(adapter: ModelAdapter, clean: Activations, corrupt: Activations, grads: dict[str, torch.Tensor],
              kinds: list[str]) -> dict[str, np.ndarray]:
    """(clean - corrupt) . coefficient per cell, per kind ([rows, columns], raw metric units). The differences come
    from the two plain runs patching compares, so a cell real patching leaves alone is exactly 0 here too."""
    n_tokens = int(clean.resid[0].shape[0])
    out = {}
    for kind in kinds:
        rows, columns = grid_shape(adapter, kind, n_tokens)
        grid = np.zeros((rows, columns))
        for row in range(rows):
            key = f"{kind}.{row}"
            delta = getattr(clean, kind)[row].double() - getattr(corrupt, kind)[row].double()
            product = delta * grads[key].double()
            if kind == "heads":
                grid[row] = product.reshape(n_tokens, adapter.n_heads, -1).sum(dim=(0, 2)).cpu().numpy()
            else:
                grid[row] = product.sum(-1).cpu().numpy()
        out[kind] = grid
    return out


def approximate_grids(lm_model: torch.nn.Module, adapter: ModelAdapter, corrupt_ids: torch.Tensor, metric: Metric,
                      clean: Activations, corrupt: Activations, kinds: list[str], method: str,
                      relp_rules: str = DEFAULT_RELP_RULES, clean_ids: torch.Tensor | None = None,
                      path: str | None = None) -> dict[str, np.ndarray]:
    """AtP ('atp') or RelP ('relp') estimates of the patched metric minus the corrupt metric, per kind, from one
    forward + backward pass (the caller holds the model's lock; RelP's rules are applied and removed here). The
    coefficients are taken on the corrupt run, or averaged over the points of `path` (a key of PATHS; by default
    the RelP option's own, the corrupt run for AtP), which needs the clean prompt's ids."""
    heads = "heads" in kinds
    if path is not None and path not in PATHS:
        raise ValueError(f"unknown path {path!r}; choose one of {', '.join(PATHS)}")
    if method == "atp":
        grads = _gradients(adapter, corrupt_ids, metric, heads, clean_ids, PATHS[path or "corrupt"])
    elif method == "relp":
        if relp_rules not in RELP_RULES:
            raise ValueError(f"unknown RelP rules {relp_rules!r}; choose one of {', '.join(RELP_RULES)}")
        alphas = PATHS[path] if path is not None else relp_alphas(relp_rules)
        with apply_rules(lm_model, RELP_RULES[relp_rules]) as ruled:
            grads = _gradients(ruled, corrupt_ids, metric, heads, clean_ids, alphas)
    else:
        raise ValueError(f"unknown approximation {method!r}; choose one of {', '.join(APPROXIMATIONS)}")
    return _products(adapter, clean, corrupt, grads, kinds)


def pearson(estimate: np.ndarray, real: np.ndarray, mask: np.ndarray) -> float | None:
    """Pearson r between an estimate and real patching over the cells where the patch changes something (cells with
    identical clean and corrupt activations are 0 for every method and would only inflate r); None when fewer than
    3 cells or either side is constant."""
    x, y = np.asarray(estimate)[mask], np.asarray(real)[mask]
    if x.size < 3 or np.std(x) == 0 or np.std(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def chance_r(real: np.ndarray, estimate: np.ndarray, mask: np.ndarray, permutations: int = 1000,
             seed: int = 0) -> float | None:
    """The control beside a Pearson r: the 95th percentile of |r| between the estimate and the real values shuffled
    over the changed cells (seeded), i.e. what an estimate unrelated to real patching reaches by chance."""
    x, y = np.asarray(estimate)[mask], np.asarray(real)[mask]
    if x.size < 3 or np.std(x) == 0 or np.std(y) == 0:
        return None
    generator = np.random.default_rng(seed)
    shuffled = np.stack([generator.permutation(y) for _ in range(permutations)])
    xc = (x - x.mean()) / x.std()
    yc = (shuffled - shuffled.mean(1, keepdims=True)) / shuffled.std(1, keepdims=True)
    return float(np.quantile(np.abs(yc @ xc / x.size), 0.95))
