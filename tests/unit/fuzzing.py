"""Shared pieces of the fuzz tests: the example budget and a mutator seeded from real fixtures.

The budget is ORCH_FUZZ_EXAMPLES (default 300, so `make test` stays fast); `make fuzz` sets 10,000.
The mutator works on text the way broken tool outputs are broken: lines lost, repeated or swapped,
output cut short, a character or a token (separators, NaN, huge numbers, NUL, look-alike digits)
put in or over a place, numbers replaced by nonsense.
"""

from __future__ import annotations

import os
import random
import re

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("ORCH_FUZZ_EXAMPLES", "300"))

fuzz_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

TOKENS = [
    "|", "||", "=", ":", "{", "}", "[", "]", "nan", "inf", "-inf", "-1", "0", "1e999", "9" * 30,
    "\x00", "é", "\u00a0", "\U0001d7d8", "\t", " ", "\n", "\n\n", "#", "'", '"', "\\", "N/A", "None",
    "null", "true", "-", "*", ",", "%", "(", ")", "0x1F", "1.5", "-0", "1_000", "[" * 50, "{" * 50,
]  # fmt: skip
_NUMBER_SWAPS = ["-1", "0", "1e999", "nan", "9" * 25, "1.2.3", "", "0x10", "-0.0"]
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def mutate(text: str, seed: int, ops: int) -> str:
    """Apply `ops` random edits to `text`, reproducibly from `seed`."""
    rnd = random.Random(seed)
    for _ in range(ops):
        op = rnd.randrange(8)
        lines = text.splitlines(keepends=True)
        if op == 0 and lines:
            del lines[rnd.randrange(len(lines))]
            text = "".join(lines)
        elif op == 1 and lines:
            i = rnd.randrange(len(lines))
            lines.insert(i, lines[i])
            text = "".join(lines)
        elif op == 2 and text:
            j = rnd.randrange(len(text))
            text = text[:j] + rnd.choice(TOKENS) + text[j + 1 :]
        elif op == 3 and text:
            j = rnd.randrange(len(text))
            text = text[:j] + rnd.choice(TOKENS) + text[j:]
        elif op == 4:
            text = text[: rnd.randrange(len(text) + 1)]
        elif op == 5 and len(lines) > 1:
            i, k = rnd.randrange(len(lines)), rnd.randrange(len(lines))
            lines[i], lines[k] = lines[k], lines[i]
            text = "".join(lines)
        elif op == 6 and (numbers := list(_NUMBER.finditer(text))):
            m = rnd.choice(numbers)
            text = text[: m.start()] + rnd.choice(_NUMBER_SWAPS) + text[m.end() :]
        elif op == 7 and text:
            j = rnd.randrange(len(text))
            text = text[:j] + text[j + rnd.randrange(1, 40) :]
    return text
