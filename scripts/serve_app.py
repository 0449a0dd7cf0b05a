"""Run the Streamlit app with its st.navigation pages only.

Streamlit treats a `pages/` folder beside the entry script as its old multipage convention until the entry
script first calls st.navigation; a shared link opened as a session's first request then shows a spurious
"Page not found" dialog. Declaring the app navigation-only before the server starts avoids that.
Usage: python scripts/serve_app.py [streamlit run options...]
"""
from __future__ import annotations

import sys
from pathlib import Path

from streamlit.runtime.pages_manager import PagesManager
from streamlit.web import cli

ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    PagesManager.uses_pages_directory = False
    sys.exit(cli.main(["run", str(ROOT / "app.py"), *sys.argv[1:]]))
