#!/usr/bin/env bash
# Rebuild assets/corpus/austen/*.txt.gz: Jane Austen's six novels (public domain) from Debian's
# r-cran-janeaustenr, exported as plain text once with Rscript and gzip-compressed for the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v Rscript >/dev/null || apt-get install -y -q r-cran-janeaustenr
out=assets/corpus/austen
mkdir -p "$out"
tmp=$(mktemp -d)
Rscript -e "library(janeaustenr); for (n in c('emma','persuasion','prideprejudice','sensesensibility','mansfieldpark','northangerabbey')) writeLines(get(n), file.path('$tmp', paste0(n, '.txt')), useBytes=TRUE)"
for f in "$tmp"/*.txt; do gzip -9n -c "$f" > "$out/$(basename "$f").gz"; done
rm -rf "$tmp"
ls -la "$out"
