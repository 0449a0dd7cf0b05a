"""Set `apply_b_dec_to_input` to false in a transcoder set's cfg.json files, changing nothing else.

A transcoder's b_dec is an output bias: neither Interpscope's Transcoder, SAELens nor circuit-tracer subtracts it from
the input, but the ReLU transcoders written before this fix said `true`. Each file is rewritten only if that one
field flips; the script checks that every other field parses to the same value and that exactly one line differs.

    python scripts/fix_transcoder_b_dec_flag.py assets/transcoders/smollm2-135m
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FIELD = '"apply_b_dec_to_input": true'


def fix(path: Path) -> bool:
    """True when the file was rewritten; raises when the rewrite would change more than the one field."""
    text = path.read_text()
    before = json.loads(text)
    if before.get("architecture") not in ("transcoder", "jumprelu_transcoder", "jumprelu_skip_transcoder"):
        raise SystemExit(f"{path}: not a transcoder's cfg.json (architecture {before.get('architecture')!r})")
    if before.get("apply_b_dec_to_input") is not True:
        return False
    if text.count(FIELD) != 1:
        raise SystemExit(f"{path}: expected the field once at the top level, found {text.count(FIELD)}")
    fixed = text.replace(FIELD, '"apply_b_dec_to_input": false')
    after = json.loads(fixed)
    if {**before, "apply_b_dec_to_input": False} != after:
        raise SystemExit(f"{path}: the rewrite changes more than apply_b_dec_to_input")
    changed = [a for a, b in zip(text.splitlines(), fixed.splitlines(), strict=True) if a != b]
    if len(changed) != 1:
        raise SystemExit(f"{path}: {len(changed)} lines would change")
    path.write_text(fixed)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a transcoder set: one layer_NN/cfg.json per block")
    args = parser.parse_args(argv)
    files = sorted(args.folder.glob("layer_*/cfg.json"))
    if not files:
        print(f"No layer_*/cfg.json under {args.folder}.", file=sys.stderr)
        return 2
    rewritten = [f for f in files if fix(f)]
    print(f"{len(rewritten)} of {len(files)} cfg.json files set apply_b_dec_to_input false.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
