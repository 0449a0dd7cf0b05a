"""Build assets/prompts/heldout-v1.jsonl: held-out prompts (none from assets/corpus) with their expected next token.

Written for this project, not drawn from the training corpus (Austen etc.): factual recall, indirect-object
identification (IOI), subject-verb agreement, code, arithmetic, and a few others (antonyms, sequences, morphology).
Every expected next token must be ONE token of the bundled model's tokenizer (the prompt runs as every view runs it,
with the model's measured prefix token first); a prompt whose
expected text is not one token stops the build. For each prompt the bundled model's top-1 token, its probability
and the expected token's probability are recorded, so a run can keep the prompts where the model is confident.

Run: nice -n 10 .venv/bin/python scripts/build_heldout_prompts.py [--out assets/prompts/heldout-v1.jsonl]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FACTUAL = [
    ("The Eiffel Tower is located in the city of", " Paris"),
    ("The capital of Japan is", " Tokyo"),
    ("The capital of Italy is", " Rome"),
    ("The capital of Germany is", " Berlin"),
    ("The capital of Spain is", " Madrid"),
    ("The capital of Russia is", " Moscow"),
    ("The capital of Egypt is", " Cairo"),
    ("The capital of Canada is", " Ottawa"),
    ("The capital of Greece is", " Athens"),
    ("The capital of Portugal is", " Lisbon"),
    ("The capital of Austria is", " Vienna"),
    ("The capital of Ireland is", " Dublin"),
    ("The Colosseum is an ancient amphitheatre in the city of", " Rome"),
    ("Big Ben is a famous clock tower in", " London"),
    ("The Statue of Liberty stands in the harbour of New", " York"),
    ("The Great Wall was built across northern", " China"),
    ("The pyramids of Giza are in", " Egypt"),
    ("The Taj Mahal is a mausoleum in", " India"),
    ("Mount Fuji is the highest mountain in", " Japan"),
    ("The Amazon rainforest lies mostly in", " Brazil"),
    ("Kangaroos are native to", " Australia"),
    ("People in Brazil mostly speak", " Portuguese"),
    ("People in Mexico mostly speak", " Spanish"),
    ("The official language of France is", " French"),
    ("The main language spoken in Germany is", " German"),
    ("Water is made of hydrogen and", " oxygen"),
    ("The chemical symbol for gold is", " Au"),
    ("The planet closest to the Sun is", " Mercury"),
    ("The largest planet in our solar system is", " Jupiter"),
    ("The Red Planet is another name for", " Mars"),
    ("Our galaxy is called the Milky", " Way"),
    ("The freezing point of water in Celsius is zero", " degrees"),
    ("A week has seven", " days"),
    ("A year has twelve", " months"),
    ("An hour has sixty", " minutes"),
    ("The opposite of north is", " south"),
    ("Bees make", " honey"),
    ("Cows give us", " milk"),
    ("The first man to walk on the Moon was Neil", " Armstrong"),
    ("The theory of relativity was developed by Albert", " Einstein"),
    ("Romeo and Juliet was written by William", " Shakespeare"),
    ("The Mona Lisa was painted by Leonardo da", " Vinci"),
    ("The iPhone is made by", " Apple"),
    ("Windows is an operating system made by", " Microsoft"),
    ("The Pacific is the largest", " ocean"),
    ("The longest river in Africa is the", " Nile"),
    ("Barack Obama was the president of the United", " States"),
    ("The currency of the United States is the", " dollar"),
    ("The capital of the United Kingdom is", " London"),
    ("Snow is usually white, and grass is usually", " green"),
    ("The sun rises in the", " east"),
    ("Penguins live mostly in the Southern", " Hemisphere"),
]

IOI_NAMES = [("Mary", "John"), ("Alice", "Bob"), ("Sarah", "Tom"), ("Emma", "James"), ("Laura", "Mark"),
             ("Anna", "David"), ("Kate", "Paul"), ("Lucy", "Peter"), ("Rachel", "Steve"), ("Julia", "Daniel"),
             ("Sophie", "Michael"), ("Helen", "Chris")]
IOI_TEMPLATES = [
    "When {a} and {b} went to the store, {b} gave a drink to",
    "After {a} and {b} arrived at the party, {b} handed a gift to",
    "While {a} and {b} were working in the garden, {b} passed the shovel to",
]

AGREEMENT = [
    ("The keys to the old cabinet", " are"),
    ("The key to the old cabinets", " is"),
    ("The dogs in the yard", " are"),
    ("The dog near the houses", " is"),
    ("The teachers at the school", " were"),
    ("The teacher of the students", " was"),
    ("The books on the shelf", " are"),
    ("The book on the shelves", " is"),
    ("The children in the park", " were"),
    ("The child with the balloons", " was"),
    ("The cars parked outside the building", " are"),
    ("The car parked outside the buildings", " is"),
    ("The flowers in the vase", " are"),
    ("The flower in the vases", " is"),
    ("The players on the team", " were"),
    ("The player on the teams", " was"),
    ("The windows of the house", " are"),
    ("The window of the houses", " is"),
    ("The birds in the tree", " are"),
    ("The bird in the trees", " is"),
    ("The doctors at the hospital", " are"),
    ("The doctor at the hospitals", " is"),
    ("The songs on this album", " are"),
    ("The song on these albums", " is"),
    ("My friends from work", " are"),
    ("My friend from the gyms", " is"),
    ("The students who passed the test", " were"),
    ("The student who passed the tests", " was"),
    ("The apples in the basket", " are"),
    ("The apple in the baskets", " is"),
    ("The workers at the factory", " were"),
    ("The worker at the factories", " was"),
    ("The pictures on the wall", " are"),
    ("The picture on the walls", " is"),
    ("The cats that live next door", " are"),
    ("The cat that lives next to the neighbours", " is"),
]

CODE = [
    ("def add(a, b):\n    return a", " +"),
    ("def multiply(x, y):\n    return x", " *"),
    ("for i in range(10):\n    print(", "i"),
    ("import numpy as", " np"),
    ("import pandas as", " pd"),
    ("import matplotlib.pyplot as", " plt"),
    ("if __name__ == \"__main__", "\":"),
    ("x = [1, 2, 3]\nprint(len(", "x"),
    ("def main():\n    pass\n\n\nif __name__ == '__main__':\n    main", "()"),
    ("while True:\n    break\nelse:\n    pass\ntry:\n    x = 1\nexcept", " Exception"),
    ("with open('data.txt') as f:\n    lines = f.", "read"),
    ("class Dog:\n    def __init__(", "self"),
    ("numbers = [1, 2, 3]\nfor n in", " numbers"),
    ("#include <stdio.h>\nint", " main"),
    ("public static void", " main"),
    ("console.log(\"Hello,", " World"),
    ("print(\"Hello,", " World"),
    ("SELECT * FROM users WHERE", " id"),
    ("def is_even(n):\n    return n % 2 == 0\n\n\ndef is_odd(n):\n    return not is_even(", "n"),
    ("items = {'a': 1}\nfor key, value in items.", "items"),
    ("from collections import", " defaultdict"),
    ("return True if x > 0 else", " False"),
    ("<html>\n<head>\n<title>My page</title>\n</", "head"),
    ("def square(n):\n    return n", " *"),
    ("result = a if a > b else", " b"),
    ("let total = 0;\nfor (let i = 0; i < n;", " i"),
    ("x = 5\ny = 10\nprint(x +", " y"),
    ("def greet(name):\n    print(\"Hello, \" +", " name"),
    ("raise ValueError(\"invalid", " input"),
    ("import os\npath = os.path.", "join"),
]

ARITHMETIC = [
    ("2+2=4, 3+3=6, 1+4=", "5"), ("1+1=2, 2+3=5, 4+4=", "8"), ("3+1=4, 5+2=7, 6+3=", "9"),
    ("2+5=7, 1+2=3, 3+3=", "6"), ("4+1=5, 2+2=4, 1+6=", "7"), ("5+3=8, 2+1=3, 2+2=", "4"),
    ("1+2=3, 3+4=7, 2+1=", "3"), ("6+2=8, 1+1=2, 3+2=", "5"), ("2+3=5, 4+2=6, 5+4=", "9"),
    ("1+3=4, 2+4=6, 7+1=", "8"), ("3+2=5, 1+5=6, 4+3=", "7"), ("2+6=8, 3+1=4, 1+1=", "2"),
    ("9-3=6, 8-2=6, 7-4=", "3"), ("5-1=4, 9-5=4, 8-3=", "5"), ("6-2=4, 7-1=6, 9-7=", "2"),
    ("8-4=4, 6-3=3, 9-1=", "8"), ("7-2=5, 5-3=2, 6-5=", "1"), ("9-2=7, 4-1=3, 8-6=", "2"),
    ("2*3=6, 2*4=8, 3*3=", "9"), ("1*5=5, 2*2=4, 4*2=", "8"), ("3*2=6, 1*7=7, 2*1=", "2"),
    ("10+5=15, 10+7=17, 10+2=1", "2"), ("20+3=23, 20+6=26, 20+9=2", "9"),
    ("1,2,3,4,5,", "6"), ("2,4,6,", "8"), ("9,8,7,6,", "5"),
    ("3,4,5,6,", "7"), ("1,3,5,7,", "9"), ("0,2,4,", "6"),
    ("Two plus two equals", " four"), ("Three plus four equals", " seven"), ("Ten minus three is", " seven"),
]

OTHER = [
    ("The opposite of hot is", " cold"), ("The opposite of up is", " down"), ("The opposite of big is", " small"),
    ("The opposite of fast is", " slow"), ("The opposite of open is", " closed"),
    ("The opposite of happy is", " sad"), ("The opposite of light is", " dark"),
    ("Monday, Tuesday, Wednesday,", " Thursday"), ("January, February, March,", " April"),
    ("Friday, Saturday,", " Sunday"), ("June, July, August,", " September"),
    ("A, B, C, D,", " E"), ("first, second, third,", " fourth"), ("one, two, three, four,", " five"),
    ("red, orange, yellow, green,", " blue"), ("spring, summer, autumn,", " winter"),
    ("She forgot her umbrella, so when it started to rain she got", " wet"),
    ("He was very tired, so he went to", " bed"), ("The baby was hungry, so her mother gave her some", " milk"),
    ("I was thirsty, so I drank a glass of", " water"), ("It was dark, so she turned on the", " light"),
    ("Cat is to kitten as dog is to", " puppy"), ("Big, bigger, biggest; small, smaller,", " smallest"),
    ("One mouse, two", " mice"), ("One child, two", " children"), ("One foot, two", " feet"),
    ("Today I walk; yesterday I", " walked"), ("Today I eat; yesterday I", " ate"),
    ("Knock knock. Who's", " there"), ("Once upon a", " time"), ("Ladies and", " gentlemen"),
    ("Thank you very", " much"),
]


def prompts() -> list[dict]:
    """Every prompt as {id, category, text, expected} (before the model's check)."""
    rows: list[dict] = []

    def add(category: str, items) -> None:
        for index, (text, expected) in enumerate(items):
            rows.append({"id": f"{category}-{index:03d}", "category": category, "text": text, "expected": expected})

    add("factual", FACTUAL)
    ioi = []
    for t_index, template in enumerate(IOI_TEMPLATES):
        for n_index, (a, b) in enumerate(IOI_NAMES):
            first, second = (a, b) if (t_index + n_index) % 2 == 0 else (b, a)
            ioi.append((template.format(a=first, b=second), " " + first))
    add("ioi", ioi)
    add("agreement", AGREEMENT)
    add("code", CODE)
    add("arithmetic", ARITHMETIC)
    add("other", OTHER)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "assets" / "prompts" / "heldout-v1.jsonl"))
    args = parser.parse_args()
    import torch

    from interpscope.inputs import input_ids_for
    from interpscope.models import load_model
    from interpscope.predict import next_logits

    lm = load_model("smollm2-135m", device="cpu")
    rows = prompts()
    bad = [f"{r['id']}: {r['expected']!r} is {n} tokens" for r in rows
           if (n := len(lm.tokenizer.encode(r["expected"], add_special_tokens=False))) != 1]
    if bad:  # checked before any forward pass
        raise SystemExit("Expected tokens that are not one token:\n" + "\n".join(bad))
    for index, row in enumerate(rows):
        if index % 25 == 0:
            print(f"{index}/{len(rows)}", file=sys.stderr, flush=True)
        ids = lm.tokenizer.encode(row["expected"], add_special_tokens=False)
        text_ids, _ = input_ids_for(lm, row["text"], None)  # "tokens" counts the prefix token too
        logits = next_logits(lm.model, text_ids).double()
        probs = torch.softmax(logits, -1)
        top = int(probs.argmax())
        row.update({"expected_id": ids[0], "tokens": int(text_ids.shape[1]),
                    "model_top1": lm.tokenizer.decode([top]), "model_top1_id": top,
                    "model_correct": top == ids[0], "p_expected": round(float(probs[ids[0]]), 6),
                    "p_top1": round(float(probs[top]), 6)})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    by = {}
    for r in rows:
        by.setdefault(r["category"], []).append(r["model_correct"])
    print(json.dumps({"rows": len(rows), "accuracy": {c: sum(v) / len(v) for c, v in by.items()},
                      "overall": sum(r["model_correct"] for r in rows) / len(rows)}, indent=1))


if __name__ == "__main__":
    main()
