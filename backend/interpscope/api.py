"""The public Python API of the core views, over the same functions the pages and the command line call.

Every function takes the loaded model from `load` first and returns a typed result (interpscope.results.Result):
`.to_dict()` is the JSON document the CLI's --json and the page's JSON export also write (headed by its schema name
and version), `.to_frame()` / `.to_csv()` the tidy table, `.figure()` the Plotly figure the page shows, and the
result renders inline in Jupyter. Imported lazily by `import interpscope` (PEP 562), so importing the package
stays cheap; torch and transformers load when a function runs.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interpscope.flow.information import InformationFlow
    from interpscope.flow.tuned import TunedLens
    from interpscope.heads.finder import HeadScores
    from interpscope.heads.patterns import HeadPatterns
    from interpscope.models.loading import LoadedModel, ModelList
    from interpscope.models.vision import LoadedImageModel
    from interpscope.patching.dataset import PatchingSetResult
    from interpscope.patching.results import PatchingResult, PathPatchingResult
    from interpscope.predict import Prediction
    from interpscope.relevance.api import RelevanceResult
    from interpscope.relevance.baselines import IGConvergence
    from interpscope.relevance.experts import ExpertRelevance
    from interpscope.relevance.file_attribution import FileRun
    from interpscope.relevance.heldout import FaithfulnessComparison, HeldoutResult, TextFaithfulness
    from interpscope.relevance.image_api import ImageRelevance
    from interpscope.relevance.image_faithfulness import ImageFaithfulness
    from interpscope.relevance.seq2seq import Seq2SeqRelevance
    from interpscope.relevance.targets import Target


def load(name: str = "smollm2-135m", device: str = "auto", dtype: str = "float32") -> LoadedModel:
    """Load a model: a bundled name (`interpscope.list_models()` lists them), a local folder or a Hugging Face id
    already in the local cache. device: auto (CUDA, else MPS, else CPU), cpu, cuda or mps; dtype: float32, float16,
    bfloat16, float64 or auto. One shared copy per (model, device, dtype) per process, as in the app and the CLI."""
    from interpscope.models.loading import load_model

    return load_model(name, device=device, dtype=dtype)


def list_models() -> ModelList:
    """The models `load` can open without a network (schema interpscope.models; = `interpscope models --json`)."""
    from interpscope.models.loading import model_list

    return model_list()


def methods(lm: LoadedModel | None = None) -> list[str]:
    """Names of the registered relevance methods (interpscope.relevance.methods), or of those `lm` can run, its
    family's LRP method first."""
    from interpscope.relevance.methods import METHODS

    return list(METHODS) if lm is None else _served(lm)


def _served(lm: LoadedModel) -> list[str]:
    from interpscope.relevance.methods import methods_for

    return [m.name for m in methods_for(lm.adapter)]


def predict(lm: LoadedModel, text: str, top: int = 10, prepend_bos: bool | None = None) -> Prediction:
    """The `top` most likely next tokens after `text` and the distribution's entropy (schema interpscope.prediction;
    = the Home page's export and `interpscope predict --json`), on the tokens every view runs: the model's prefix
    token first unless prepend_bos=False (interpscope.inputs.input_ids_for)."""
    from interpscope.predict import predict_next

    return predict_next(lm, text, top=top, prepend_bos=prepend_bos)


def explain(lm: LoadedModel, text: str, method: str | None = None, *, target: str | int | Target | None = None,
            contrast: tuple[str | int, str | int] | None = None, vs_rest: bool = False, latent: bool = False,
            prepend_bos: bool | None = None, top: int = 10, **options: Any) -> RelevanceResult:
    """Relevance of each token of `text` for the next-token target (schema interpscope.relevance; = the relevance
    page's map export and `interpscope explain --json`).

    method: any of `methods(lm)` (None: the family's LRP method, attnlrp for transformers, mambalrp for Mamba).
    target: the token to explain (its text, an id or '#id', or a Target); None: the predicted token. contrast:
    (A, B) explains logit(A) - logit(B). **options: the method's own options as its registration declares them
    (e.g. ig_steps=64, baseline="pad" for Integrated Gradients, occlusion_window=3; a registered method's own
    options likewise); unset ones keep their defaults, unknown or out-of-range ones raise InterpscopeError.
    prepend_bos: put the model's BOS first (None: where the tokenizer adds none)."""
    from interpscope.relevance.api import explain as explain_text
    from interpscope.relevance.methods import MethodOptions
    from interpscope.relevance.targets import Target

    if lm.is_encoder_decoder:
        from interpscope.config import InterpscopeError

        raise InterpscopeError(f"{lm.name} is an encoder-decoder (T5): explain its next decoder token with "
                               "interpscope.explain_seq2seq(lm, text, decoder_text).")
    method = method or _served(lm)[0]
    chosen = MethodOptions(**options).checked()
    if isinstance(target, Target):
        from interpscope.relevance.api import input_ids_for

        ids, _ = input_ids_for(lm, text, prepend_bos)
        return explain_text(lm, text, method, input_ids=ids, target=target, options=chosen, latent=latent, top=top)
    return explain_text(lm, text, method, token=target, contrast=contrast, vs_rest=vs_rest, latent=latent,
                        options=chosen, prepend_bos=prepend_bos, top=top)


def faithfulness(lm: LoadedModel, result: RelevanceResult, baseline: str = "zero", steps: int = 10,
                 seed: int = 0) -> TextFaithfulness:
    """MoRF / LeRF curves, their areas and ABPC of one map on its own text, tokens removed to `baseline`, beside a
    seeded random-order control (schema interpscope.faithfulness; = `interpscope explain --faithfulness --json`)."""
    from interpscope.relevance.heldout import text_faithfulness

    return text_faithfulness(lm, result, baseline=baseline, steps=steps, seed=seed)


def compare_faithfulness(lm: LoadedModel, text: str, methods: Sequence[str] | None = None, *,
                         target: str | int | None = None, contrast: tuple[str | int, str | int] | None = None,
                         prepend_bos: bool | None = None, baseline: str = "zero", steps: int = 10,
                         seed: int = 0, **options) -> FaithfulnessComparison:
    """Every method's (default: all `lm` serves) curves and ABPC on one input and target (schema
    interpscope.faithfulness_comparison; = the relevance page's "Curves for every method" export and `explain
    --faithfulness --compare --json`). **options: the methods' own options, as for explain() (ig_steps=64,
    occlusion_window=3); IG and occlusion start from the deletion `baseline` unless options name another. Each
    curve records the settings its map was computed with (`settings`)."""
    from interpscope.relevance.heldout import compare_faithfulness as compare

    names = list(methods) if methods else _served(lm)
    options = {"baseline": baseline} | options
    maps = [explain(lm, text, name, target=target, contrast=contrast, prepend_bos=prepend_bos, **options)
            for name in names]
    return compare(lm, maps, baseline=baseline, steps=steps, seed=seed)


def ig_convergence(lm: LoadedModel, text: str, *, target: str | int | None = None,
                   contrast: tuple[str | int, str | int] | None = None, baseline: str = "zero",
                   prepend_bos: bool | None = None) -> IGConvergence:
    """Integrated Gradients' completeness gap at 8..128 steps and the target along the path from the baseline
    (schema interpscope.ig_convergence; = the relevance page's convergence export)."""
    from interpscope.relevance.api import ig_convergence as convergence
    from interpscope.relevance.methods import MethodOptions

    return convergence(lm, text, token=target, contrast=contrast, options=MethodOptions(baseline=baseline),
                       prepend_bos=prepend_bos)


def heldout(lm: LoadedModel, limit: int | None = None, *, confident: bool = False,
            methods: Sequence[str] | None = None, baselines: Sequence[str] | None = None, ig_steps: int = 8,
            curve_steps: int = 10, seed: int = 0, bootstrap: int = 2000) -> HeldoutResult:
    """Every method on the shipped held-out prompts (the first `limit`, from every category in turn): the ABPC table
    with bootstrap 95% intervals and the random control (schema interpscope.heldout_faithfulness; = `interpscope
    explain --faithfulness --set heldout --json` and the relevance page's held-out export)."""
    from interpscope.relevance.heldout import choose, load_set, run_heldout

    prompts = choose(load_set("heldout"), limit=limit, confident=confident)
    return run_heldout(lm, prompts, methods=methods, baselines=baselines, ig_steps=ig_steps,
                       curve_steps=curve_steps, seed=seed, bootstrap=bootstrap)


def explain_file(lm: LoadedModel, path: str | Path, method: str | None = None, *, target: str | None = None,
                 folder: str | Path | None = None, text_column: str | None = None,
                 label_column: str | None = None) -> FileRun:
    """Every row of a .txt/.md/.csv/.jsonl file explained with one method, resumable (schema
    interpscope.file_attribution; `.aggregates()` is interpscope.file_aggregates = the CLI's aggregates.json)."""
    from interpscope.relevance.file_attribution import explain_file as explain_rows
    from interpscope.uploads import parse_table

    file = Path(path)
    data = file.read_bytes()
    table = parse_table(data, file.name, text_column=text_column, label_column=label_column)
    return explain_rows(lm, table, data, method or _served(lm)[0], token=target, folder=folder)


def flow(lm: LoadedModel, text: str, *, target: str | int | None = None,
         contrast: tuple[str | int, str | int] | None = None, threshold: float = 0.05,
         prepend_bos: bool | None = None, lens: str = "logit") -> InformationFlow:
    """Information flow to the next token (transformers): the logit lens, each layer's attention and MLP
    contribution, and the AttnLRP graph of heads and MLPs above `threshold` x |value| (schema interpscope.flow; =
    `interpscope flow --json` and the flow page's exports). `.at(threshold)` recuts the graph. lens="tuned" adds
    the shipped tuned lens beside the logit lens (per-layer KL to the final distribution, under `tuned_lens`)."""
    from interpscope.flow.information import information_flow

    return information_flow(lm, text, token=target, contrast=contrast, prepend_bos=prepend_bos,
                            lens=lens).at(threshold)


def head_patterns(lm: LoadedModel, text: str, *, heads: Sequence[str] | None = None,
                  prepend_bos: bool | None = None) -> HeadPatterns:
    """Every attention head's pattern on `text`, sinks measured and named, per-head summaries (previous-token,
    self, excluded-position attention, entropy) beside a uniform causal pattern's (schema interpscope.heads; the
    document carries the full pattern of each of `heads`, "L.H"; = `interpscope heads --text T --json` and the
    Attention heads page's export)."""
    from interpscope.heads.patterns import head_patterns as patterns

    return patterns(lm, text, heads=list(heads or []), prepend_bos=prepend_bos)


def find_heads(lm: LoadedModel, *, n_sequences: int = 8, half_len: int = 40, seed: int = 0, ablate: int = 0,
               ablation: str = "zero") -> HeadScores:
    """The head finder: every head's induction, previous-token and duplicate-token score on repeated random tokens,
    with chance levels; ablate=K also gives repetition accuracy with the top K induction heads ablated (zero or
    mean) against K random heads (schema interpscope.head_scores; = `interpscope heads --find --json`)."""
    from interpscope.heads.finder import find_heads as finder

    return finder(lm, n_sequences=n_sequences, half_len=half_len, seed=seed, ablate=ablate, mode=ablation)


def tuned_lens(lm: LoadedModel) -> TunedLens:
    """The shipped tuned lens of `lm` (per-layer translators, checked against the model; refused for another one):
    `.logits(lm.adapter, step, residual)` reads a residual through it; its manifest gives the held-out KL."""
    from interpscope.flow.tuned import load_tuned_lens

    return load_tuned_lens(lm)


def patch(lm: LoadedModel, clean: str, corrupt: str, *, metric: str = "logit-diff", answer: str | int | None = None,
          wrong: str | int | None = None, components: str | Sequence[str] | None = None,
          methods: str | Sequence[str] | None = None, relp_rules: str = "relp-half-q-ig2",
          prepend_bos: bool | None = None) -> PatchingResult:
    """Activation patching of a clean / corrupt prompt pair (same token length): the corrupt run with one clean
    activation put back per cell, for the residual stream (per layer and position, plus the final residual),
    attention and MLP outputs (per layer and position) and heads (per layer and head); normalised so 1 = the clean
    metric, 0 = the corrupt one. metric: logit-diff (answer - wrong), logit or prob of the answer; answer / wrong: one
    token each (text or '#id'; default: the clean and the corrupt prompt's top predictions). components: any of
    resid, attn, mlp, heads; methods: any of real, atp (attribution patching), relp (relevance patching, LRP rules
    `relp_rules`: relp-half-q-ig2 by default, or any of interpscope.patching.attribution.RELP_RULES), each estimate with
    its Pearson r against real patching (schema interpscope.patching; = `interpscope patch --json` and the Activation
    patching page's export)."""
    from interpscope.patching.run import patch as patch_pair

    return patch_pair(lm, clean, corrupt, metric=metric, answer=answer, wrong=wrong, components=components,
                      methods=methods, relp_rules=relp_rules, prepend_bos=prepend_bos)


def patch_set(lm: LoadedModel, pairs: Sequence[dict] | str, *, metric: str = "logit-diff",
              components: str | Sequence[str] | None = None, methods: str | Sequence[str] | None = None,
              relp_rules: str | None = None, prepend_bos: bool | None = None) -> PatchingSetResult:
    """Patching over a set of pairs of one template ({"clean", "corrupt", optional "answer", "wrong"} each, or
    "ioi" for the shipped six): the mean grid per component kind and method, its sd over the pairs, and each
    estimate's r against real patching on the mean grid (schema interpscope.patching_set; = `interpscope patching
    --pairs FILE --json` and the Patching page's "Over a set of pairs" export)."""
    from interpscope.patching.attribution import DEFAULT_RELP_RULES
    from interpscope.patching.dataset import patch_set as run_set
    from interpscope.patching.dataset import shipped_pairs

    chosen = shipped_pairs(pairs) if isinstance(pairs, str) else list(pairs)
    return run_set(lm, chosen, metric=metric, components=components, methods=methods,
                   relp_rules=relp_rules or DEFAULT_RELP_RULES, prepend_bos=prepend_bos)


def path_patch(lm: LoadedModel, clean: str, corrupt: str, sender: str, receiver: str, *, metric: str = "logit-diff",
               answer: str | int | None = None, wrong: str | int | None = None,
               prepend_bos: bool | None = None) -> PathPatchingResult:
    """Path patching: the share of the clean metric restored when the sender's clean output ('L3.H2', 'L3.attn',
    'L3.mlp') reaches only the receiver (the same forms, or 'logits'), every component between them frozen at its
    corrupt value; beside the sender's total effect (schema interpscope.path_patching; = `interpscope patch --path
    SENDER RECEIVER --json`)."""
    from interpscope.patching.run import path_patch as path_pair

    return path_pair(lm, clean, corrupt, sender, receiver, metric=metric, answer=answer, wrong=wrong,
                     prepend_bos=prepend_bos)


def explain_seq2seq(lm: LoadedModel, text: str, decoder_text: str | None = None, method: str = "attnlrp", *,
                    target: str | int | None = None, contrast: tuple[str | int, str | int] | None = None,
                    **options: Any) -> Seq2SeqRelevance:
    """Encoder-decoders (T5, Flan-T5): relevance of the next decoder token after the decoder prefix `decoder_text`
    (none: the first decoder token) over the source `text` and the decoder input (start token + prefix), with
    attnlrp, cplrp, gradxinput or ig (options: ig_steps, baseline). Schema interpscope.relevance_seq2seq; = the
    relevance page's export for an encoder-decoder and `interpscope explain --text SRC --decoder-text PREFIX --json`."""
    from interpscope.relevance.methods import MethodOptions
    from interpscope.relevance.seq2seq import explain_seq2seq as explain_pair

    return explain_pair(lm, text, decoder_text, method, token=target, contrast=contrast,
                        options=MethodOptions(**options) if options else None)


def load_image(name: str = "vit-fashion-mnist", device: str = "auto", dtype: str = "float32") -> LoadedImageModel:
    """Load a ViT/DeiT image classifier (a bundled name such as vit-fashion-mnist, a folder or a cached Hugging Face
    id); a text model is refused. Same model cache as `load`."""
    from interpscope.models.vision import load_image_model

    return load_image_model(name, device=device, dtype=dtype)


def _image_array(image: Any):
    """An image as uint8 RGB [H, W, 3]: a file path, PNG/JPEG bytes or such an array (checked as uploads are)."""
    import numpy as np

    from interpscope.images import decode_image, read_image_file

    if isinstance(image, (str, Path)):
        return read_image_file(image, "image")
    if isinstance(image, (bytes, bytearray)):
        return decode_image(bytes(image))
    return np.asarray(image)


def explain_image(lm: LoadedImageModel, image: Any, method: str = "attnlrp", *, target_class: int | None = None,
                  reference: str = "mean", ig_steps: int = 32) -> ImageRelevance:
    """Relevance of every pixel and patch of `image` (a PNG/JPEG path or bytes, or uint8 RGB [H, W, 3]) for the
    logit of `target_class` (default: the predicted one) with attnlrp, cplrp, gradxinput, ig or occlusion; LRP
    methods carry the conservation readout. Schema interpscope.image_relevance; = `interpscope explain --image FILE
    --json` and the relevance page's export for an image model."""
    from interpscope.relevance.image_api import explain_image as explain_pixels

    return explain_pixels(lm, _image_array(image), method, target_class=target_class, reference=reference,
                          ig_steps=ig_steps)


def patch_flipping(lm: LoadedImageModel, image: Any, methods: Sequence[str] | None = None, *,
                   target_class: int | None = None, reference: str = "mean",
                   random_orders: int = 8) -> ImageFaithfulness:
    """Patch flipping (most relevant patch first, patches set to `reference`) of each method's map (default: all
    five image methods) beside `random_orders` random orders, with the AUC of each curve. Schema
    interpscope.image_faithfulness; = `interpscope explain --image FILE --patch-flipping --json` and the page's
    export."""
    from interpscope.relevance.image import image_methods
    from interpscope.relevance.image_api import explain_image as explain_pixels
    from interpscope.relevance.image_faithfulness import patch_flipping as flip

    array = _image_array(image)
    names = list(methods or image_methods())
    first = explain_pixels(lm, array, names[0], target_class=target_class, reference=reference)
    maps = [first] + [explain_pixels(lm, array, name, target_class=first.target_class, reference=reference)
                      for name in names[1:]]
    return flip(lm, array, maps, reference=reference, random_orders=random_orders)


def explain_experts(lm: LoadedModel, text: str, method: str = "attnlrp", *, target: str | int | None = None,
                    contrast: tuple[str | int, str | int] | None = None,
                    prepend_bos: bool | None = None) -> ExpertRelevance:
    """Mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE): how much of the next-token target's relevance each
    expert carried, per token and sparse layer, under attnlrp or cplrp, beside the router's weight share as the
    control (schema interpscope.expert_relevance; = the relevance page's per-expert export). A model without experts
    raises InterpscopeError."""
    from interpscope.relevance.api import input_ids_for, make_target
    from interpscope.relevance.experts import expert_relevance

    ids, prepended = input_ids_for(lm, text, prepend_bos)
    chosen = make_target(lm, ids, token=target, contrast=contrast)
    return expert_relevance(lm, ids, chosen, method, prepended=0 if prepended else None)
