"""The relevance page for an image classifier (ViT, DeiT): which pixels and patches made the model say a class.

pages/relevance.py hands over here when the sidebar's model reads images. One Run computes every image method's map
of the chosen class (AttnLRP, CP-LRP, Gradient x Input, Integrated Gradients, patch occlusion) and their patch-
flipping curves beside random patch orders; the chosen method's map is shown large with its conservation readout,
the others side by side.
"""
from __future__ import annotations

import numpy as np
import streamlit as st

from components.export import export_menu
from interpscope.config import InterpscopeError
from interpscope.figures.relevance.images import compact_figure, relevance_figure
from interpscope.images import MAX_IMAGE_BYTES, check_image_size, decode_image, model_pixels, model_view
from interpscope.models.vision import LoadedImageModel, bundled_examples, load_image_model
from interpscope.relevance.image import REFERENCES, class_logits, image_methods
from interpscope.relevance.image_api import ImageRelevance, explain_image, image_digest
from interpscope.relevance.image_faithfulness import ImageFaithfulness, patch_flipping
from pages._common import (
    Param,
    committed,
    is_shared,
    model_key,
    progress,
    shared,
    show_errors,
    timing,
    url_inputs,
    write_url,
)

PAGE = "relevance-image"
SOURCES = ["A bundled example", "Upload an image"]
PREDICTED = -1  # the target selector's "predicted class"


def current_image_model() -> LoadedImageModel | None:
    name, device, dtype = model_key()
    try:
        with st.spinner(f"Loading {name}…"):
            return load_image_model(name, device=device, dtype=dtype)
    except InterpscopeError as err:
        st.error(f"Could not load model: {err}")
        return None


def params(examples: list[str], n_labels: int) -> list[Param]:
    return [Param("relevance-image-source", "source", SOURCES[0] if examples else SOURCES[1], choices=SOURCES),
            Param("relevance-image-example", "image", examples[0] if examples else None, choices=examples or None),
            Param("relevance-image-method", "method", next(iter(image_methods())), choices=list(image_methods())),
            Param("relevance-image-class", "class", PREDICTED, int, low=PREDICTED, high=n_labels - 1),
            Param("relevance-image-reference", "reference", "mean", choices=list(REFERENCES))]


def image_input(lm: LoadedImageModel) -> tuple[np.ndarray, str] | None:
    """The image to explain (decoded, uint8 RGB) and its name, from the examples or an upload; None after saying
    why there is none."""
    examples = {e.name: e for e in bundled_examples(lm)}
    sources = SOURCES if examples else SOURCES[1:]
    source = st.radio("Image", sources, horizontal=True, key="relevance-image-source")
    if source == SOURCES[0]:
        name = st.selectbox("Held-out example (true class)", list(examples), key="relevance-image-example",
                            format_func=lambda n: f"{n} · {examples[n].label_name}")
        example = examples[name]
        with show_errors():
            return decode_image(example.path.read_bytes(), example.name), example.name
    upload = st.file_uploader(f"A PNG or JPEG image (at most {MAX_IMAGE_BYTES / 2**20:.0f} MiB)",
                              type=["png", "jpg", "jpeg"], key="relevance-image-upload",
                              max_upload_size=MAX_IMAGE_BYTES // 2**20)  # the widget's own limit says the same
    if upload is None:
        st.info("Upload an image to explain.")
        return None
    try:
        check_image_size(upload.size, upload.name)  # before the bytes are decoded
        return decode_image(upload.getvalue(), upload.name), upload.name
    except InterpscopeError as err:
        st.error(str(err))
        return None


def _probabilities(lm: LoadedImageModel, image: np.ndarray) -> np.ndarray:
    def compute() -> np.ndarray:
        pixels = model_pixels(image, lm.preprocessing).to(device=lm.device, dtype=lm.dtype)
        logits = class_logits(lm.adapter, pixels)[0].double().cpu().numpy()
        shifted = np.exp(logits - logits.max())
        return shifted / shifted.sum()
    return shared("image-probs", (model_key(), image_digest(image)), compute)


def _explain(lm: LoadedImageModel, image: np.ndarray, method: str, target: int, reference: str,
             report=None) -> ImageRelevance:
    return shared("image-explain", (model_key(), image_digest(image), method, target, reference),
                  lambda: explain_image(lm, image, method, target_class=target, reference=reference, progress=report))


def conservation_sentence(result: ImageRelevance) -> str:
    """Where the explained logit went, from the readout's numbers."""
    if result.conservation is not None:
        c = result.conservation
        softmax = f", the attention softmaxes {c.softmax_sum:+.4f}" if result.through_softmax else ""
        return (f"The {result.target_label!r} logit {c.target_logit:.4f} = pixels {c.input_sum:+.4f} + biases, class "
                f"token and position embeddings {c.bias_sum:+.4f}{softmax} (relative error {c.relative_error:.1e}).")
    if result.completeness is not None:
        g = result.completeness
        return (f"The pixels' relevance sums to {g.relevance_sum:.4f}; the logit moves {g.value - g.baseline_value:.4f}"
                f" from the reference ({g.baseline_label}) to the image: a gap of {g.relative_gap:.1%} at {g.steps} "
                "steps.")
    return (f"{result.method_label} has no conservation law: its patch relevance sums to "
            f"{float(np.sum(result.patch_relevance)):.4f} against the logit {result.logit:.4f}.")


def show_main(result: ImageRelevance, view: np.ndarray, cached: bool) -> None:
    st.markdown(f"**{result.title}** · {timing(result.seconds, cached)}")
    fig = relevance_figure(view, np.asarray(result.pixel_relevance), result.patch_size, result.title)
    st.plotly_chart(fig, key="relevance-image-main")
    export_menu(fig, result, key="image-map", filename=f"image-relevance-{result.method}")
    st.markdown(conservation_sentence(result))
    st.dataframe([{"class": s.index, "label": s.label, "logit": s.logit, "probability": s.prob} for s in result.top],
                 hide_index=True)


def show_baselines(results: list[ImageRelevance], view: np.ndarray) -> None:
    st.subheader("All methods side by side")
    st.caption("Same class, same image: pixel relevance over the image, and each patch's sum below; each map on its "
               "own signed scale (red raises the logit, blue lowers it).")
    columns = st.columns(len(results))
    for column, result in zip(columns, results, strict=True):
        with column:
            fig = compact_figure(view, np.asarray(result.pixel_relevance), result.patch_size, result.method_label)
            st.plotly_chart(fig, key=f"relevance-image-{result.method}")
            st.caption(conservation_sentence(result))


def show_flipping(flipping: ImageFaithfulness) -> None:
    st.subheader("Faithfulness: patch flipping")
    st.caption(f"Patches set to {flipping.reference_label}, most relevant first, for each map; the target logit after "
               "each step. A faithful map drops it fast (small area under the curve). Control: "
               f"{flipping.random.orders} random patch orders.")
    fig = flipping.figure()
    st.plotly_chart(fig, key="relevance-image-flipping")
    export_menu(fig, flipping, key="image-flipping", filename="image-patch-flipping")
    band = flipping.random.auc_mean - flipping.random.auc_std
    st.dataframe([{"method": c.method_label, "AUC (lower = more faithful)": c.auc,
                   "random-order AUC (mean)": flipping.random.auc_mean, "random sd": flipping.random.auc_std,
                   "below the random band": c.auc < band} for c in flipping.curves], hide_index=True)
    st.markdown(flipping.reading())


def image_page() -> None:
    st.title("Relevance maps: images")
    st.caption("Which pixels made the classifier say this class? AttnLRP and CP-LRP propagate the class logit back "
               "through the vision transformer in one backward pass; captum baselines explain the same logit.")
    lm = current_image_model()
    if lm is None:
        return
    accuracy = lm.meta.get("held_out_accuracy")
    facts = lm.adapter.describe()
    st.caption(f"{lm.name}: {facts['family']}, {facts['layers']} layers, d {facts['d_model']}, input {facts['image']}, "
               f"patch {facts['patch']}, {facts['classes']} classes"
               + (f"; held-out accuracy {accuracy:.1%} (its manifest)" if isinstance(accuracy, float) else ""))
    example_names = [e.name for e in bundled_examples(lm)]
    page_params = params(example_names, lm.adapter.n_labels)
    url_inputs(PAGE, page_params)
    chosen = image_input(lm)
    if chosen is None:
        write_url(page_params, run=PAGE)
        return
    image, image_name = chosen
    probs = _probabilities(lm, image)
    predicted = int(np.argmax(probs))
    view = model_view(image, lm.preprocessing)
    settings = st.columns([1, 2, 2])
    settings[0].image(np.kron(view, np.ones((4, 4) + view.shape[2:], dtype=np.uint8)) if view.shape[0] < 64 else view,
                      caption=f"{image_name}: {image.shape[1]}x{image.shape[0]}"
                      + ("" if image.shape[:2] == view.shape[:2] else " resized")
                      + f"; the model sees {view.shape[1]}x{view.shape[0]}"
                      + (" grey" if view.ndim == 2 else ""))
    options = [PREDICTED, *range(lm.adapter.n_labels)]
    target = settings[1].selectbox(
        "Explain the logit of", options, key="relevance-image-class",
        format_func=lambda c: f"the predicted class ({lm.label(predicted)}, p = {probs[predicted]:.2f})"
        if c == PREDICTED else f"{c}: {lm.label(c)} (p = {probs[c]:.2f})")
    labels = {name: method.label for name, method in image_methods().items()}
    method = settings[2].selectbox("Method shown large", list(labels), format_func=labels.get,
                                   key="relevance-image-method")
    reference = settings[2].selectbox("Reference (IG start, occlusion and flipping fill)", list(REFERENCES),
                                      format_func=REFERENCES.get, key="relevance-image-reference")
    submitted = st.button("Run", type="primary", key="relevance-image-run")
    inputs = {"digest": image_digest(image), "target": predicted if target == PREDICTED else int(target),
              "method": method, "reference": reference}
    run = committed(PAGE, inputs, submitted)
    write_url(page_params, run=PAGE)
    if run is None:
        st.info("Choose an image and a class, then press **Run**.")
        return
    if run["digest"] != inputs["digest"]:
        st.info("The image changed since the last Run: press **Run** to explain this one.")
        return
    names = [run["method"], *(m for m in image_methods() if m != run["method"])]
    with progress("Explaining: methods", PAGE) as report, show_errors():
        cached = is_shared("image-explain", (model_key(), run["digest"], run["method"], run["target"],
                                             run["reference"]))
        results = []
        for index, name in enumerate(names):
            results.append(_explain(lm, image, name, run["target"], run["reference"]))
            report(index + 1, len(names) + 1)
        ordered = sorted(results, key=lambda r: list(image_methods()).index(r.method))  # one order: one document
        flipping = shared("image-flipping", (model_key(), run["digest"], run["target"], run["reference"]),
                          lambda: patch_flipping(lm, image, ordered, reference=run["reference"]))
        report(len(names) + 1, len(names) + 1)
    show_main(results[0], view, cached)
    show_baselines(results, view)
    show_flipping(flipping)
