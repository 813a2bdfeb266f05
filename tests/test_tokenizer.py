"""The stand-in server's tokenizer: Llama-3's BPE from the shipped vocabulary, and
Llama-3.1-Instruct's chat template, checked against counts Hugging Face's tokenizer gives."""

from __future__ import annotations

import hashlib
from importlib import resources

import pytest

from inferledger.core.errors import BadInputError
from models.tokenizer import LLAMA3_SHA256, llama3_tokenizer, tokenizer_for


@pytest.fixture(scope="module")
def tok():
    return tokenizer_for("Llama-3.1-8B")


def test_the_shipped_vocabulary_is_metas_file_with_its_licence() -> None:
    folder = resources.files("models") / "data" / "tokenizers" / "llama3"
    data = (folder / "tokenizer.model").read_bytes()
    assert hashlib.sha256(data).hexdigest() == LLAMA3_SHA256
    assert "LLAMA 3.1 COMMUNITY LICENSE AGREEMENT" in (folder / "LICENSE").read_text("utf-8")
    assert "Built with Llama" in (folder / "NOTICE").read_text("utf-8")


def test_every_name_of_a_catalog_model_gets_the_llama3_tokenizer() -> None:
    for name in ("Llama-3.1-8B", "meta-llama/Llama-3.1-70B-Instruct", "llama3-8b"):
        assert tokenizer_for(name) is llama3_tokenizer()
    with pytest.raises(BadInputError, match="unknown model"):
        tokenizer_for("gpt-2")


@pytest.mark.parametrize(
    ("messages", "tokens"),
    [
        # Llama-3.1-8B-Instruct's template through its Hugging Face tokenizer (transformers'
        # apply_chat_template(..., add_generation_prompt=True, tokenize=True))
        ([{"role": "user", "content": "Hello!"}], 37),
        ([{"role": "user", "content": "The quick brown fox jumps over the lazy dog."}], 45),
        (
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"},
            ],
            48,
        ),
    ],
)
def test_chat_prompts_count_as_llama_3_1_instruct_counts_them(tok, messages, tokens) -> None:
    assert len(tok.encode(tok.render_chat(messages))) == tokens


def test_the_chat_template_renders_the_system_block_and_the_generation_prompt(tok) -> None:
    text = tok.render_chat([{"role": "user", "content": "  Hi  "}])
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    ids = tok.encode(text)
    assert ids[0] == tok.bos_id and ids.count(tok.bos_id) == 1  # the template's one BOS
    assert ids.count(128009) == 2  # <|eot_id|> is one special token, not its characters


def test_tools_go_in_the_first_user_message_as_the_template_puts_them(tok) -> None:
    tool = {"type": "function", "function": {"name": "weather", "parameters": {}}}
    text = tok.render_chat([{"role": "user", "content": "Rain?"}], tools=[tool])
    assert "Environment: ipython\n" in text
    assert '"name": "weather"' in text and text.index("weather") < text.index("Rain?")
    with pytest.raises(BadInputError, match="no first user message"):
        tok.render_chat([], tools=[tool])


def test_text_round_trips_and_known_ids(tok) -> None:
    # ids from Llama-3's tokenizer: "Hello" 9906, " world" 1917
    assert tok.encode("Hello world", add_bos=True) == [128000, 9906, 1917]
    for text in ("héllo 世界", "def f(x):\n    return x ** 2\n", "١٢٣ 12345 🙂", ""):
        assert tok.decode(tok.encode(text)) == text
    assert tok.token_text(128009) == "<|eot_id|>"
    assert tok.vocab_size == 128256
    assert tok.is_valid_id(128255) and not tok.is_valid_id(128256)
    # numbers split into groups of at most three digits, as Llama-3's pattern says
    assert [tok.token_text(i) for i in tok.encode("1234567")] == ["123", "456", "7"]
