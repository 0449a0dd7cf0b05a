"""The sidebar-and-home model card: the loaded model's facts as Streamlit metrics."""
from __future__ import annotations


def model_card(card: dict) -> None:
    """The model's facts as two rows of metrics and an expander with all of them."""
    import streamlit as st

    st.subheader(f"Model: {card['name']}")
    rows = [[("Family", card["family"]), ("Parameters", f"{card['parameters'] / 1e6:.1f} M"),
             ("Layers", card["layers"]), ("d_model", card["d_model"])],
            [("Heads", card["heads"] or "—"), ("Vocabulary", f"{card['vocab']:,}"),
             ("Device / dtype", f"{card['device']} / {card['dtype']}"), ("Load time", f"{card['load_seconds']:.1f} s")]]
    for row in rows:
        for column, (label, value) in zip(st.columns(4), row, strict=True):
            column.metric(label, value)
    with st.expander("All model facts"):
        st.json(card)
