"""Home: the model card and a next-token box."""
from __future__ import annotations

import streamlit as st

from backend.config import InterpscopeError
from backend.predict import Prediction, predict_next
from components.charts import token_chips, top_tokens_bar
from components.export import export_menu
from pages._common import current_model, model_key, text_source

st.title("Interpscope")
st.caption("Look inside language models: relevance maps, sparse-autoencoder features, entropy neurons and "
           "Fourier features of numbers. Pick a model in the sidebar.")

lm = current_model()
if lm is None:
    st.stop()

card = lm.card()
st.subheader(f"Model: {card['name']}")
cols = st.columns(4)
cols[0].metric("Family", card["family"])
cols[1].metric("Parameters", f"{card['parameters'] / 1e6:.1f} M")
cols[2].metric("Layers", card["layers"])
cols[3].metric("d_model", card["d_model"])
cols = st.columns(4)
cols[0].metric("Heads", card["heads"] or "—")
cols[1].metric("Vocabulary", f"{card['vocab']:,}")
cols[2].metric("Device / dtype", f"{card['device']} / {card['dtype']}")
cols[3].metric("Load time", f"{card['load_seconds']:.1f} s")
with st.expander("All model facts"):
    st.json(card)


@st.cache_data(show_spinner=False, max_entries=256)
def _predict(key: tuple, text: str, top: int) -> Prediction:
    return predict_next(current_model(), text, top=top)


st.subheader("Next token")
text = text_source("home", label="Text", default="The capital of France is", height=90)
top = st.slider("How many tokens", 3, 30, 10, key="home-top")
if text is not None:
    try:
        result = _predict(model_key(), text, top)
    except InterpscopeError as err:
        st.error(str(err))
        st.stop()
    fig = top_tokens_bar([p.token for p in result.predictions], [p.prob for p in result.predictions],
                         title=f"Next token after the text ({lm.name}); entropy {result.entropy:.2f} nats")
    st.plotly_chart(fig, key="home-chart")
    export_menu(fig, {"model": result.model, "text": result.text, "tokens": result.tokens,
                      "predictions": [{"token": p.token, "id": p.id, "prob": p.prob} for p in result.predictions]},
                key="home-prediction", filename="next-token")
    st.markdown(f"**Tokenisation** ({len(result.tokens)} tokens)")
    st.markdown(token_chips(result.tokens), unsafe_allow_html=True)
