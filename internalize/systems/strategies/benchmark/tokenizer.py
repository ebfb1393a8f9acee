"""One character-level tokenizer for all six tasks, and the frame every example is written in.

Frame: <bos><x>input</x><z><z_empty></z><y>trace</y><eos>, written without spaces. The ten frame
tokens (and <pad>) are single tokens; everything else is one token per character. A character
outside CHARS raises ValueError at encode: a silent <unk> would let a wrong task format train.
'<' is not in CHARS, so a frame token is the only thing that can start with it.
"""
from __future__ import annotations

SPECIALS = ("<pad>", "<bos>", "<eos>", "<x>", "</x>", "<z>", "<z_empty>", "</z>", "<y>", "</y>")
# Every character the six tasks write: digits, hex digits a-f, 'r' (remainder), 'x' (unknown),
# grid cells and moves, and the separators of the trace formats.
CHARS = "0123456789abcdefrxRDSG.#/+-=,|;:>"


def prompt(input: str) -> str:
    """The frame up to and including <y>: what a model is given before it writes a trace."""
    return f"<bos><x>{input}</x><z><z_empty></z><y>"


def frame(input: str, trace: str) -> str:
    return f"{prompt(input)}{trace}</y><eos>"


def unframe(text: str) -> tuple[str, str]:
    """(input, trace) of a framed text; ValueError when it is not one."""
    head, tail = "<bos><x>", "</y><eos>"
    middle = "</x><z><z_empty></z><y>"
    if not (text.startswith(head) and text.endswith(tail)) or text.count(middle) != 1:
        raise ValueError("not a framed example")
    input, trace = text[len(head):-len(tail)].split(middle)
    return input, trace


class Vocabulary:
    """What every tokenizer of the benchmark offers beside encode and decode: its size, and the id of
    each frame token (`ids`: token -> id, the frame tokens among them)."""
    ids: dict[str, int]

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        return len(self)

    @property
    def pad_id(self) -> int:
        return self.ids["<pad>"]

    def id(self, token: str) -> int:
        return self.ids[token]


class Tokenizer(Vocabulary):
    def __init__(self):
        self.vocab: list[str] = list(SPECIALS) + list(CHARS)
        self.ids: dict[str, int] = {token: i for i, token in enumerate(self.vocab)}

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            if text[i] == "<":
                special = next((s for s in SPECIALS if text.startswith(s, i)), None)
                if special is None:
                    raise ValueError(f"'<' at position {i} starts no frame token ({', '.join(SPECIALS)})")
                ids.append(self.ids[special])
                i += len(special)
                continue
            if text[i] not in self.ids:
                raise ValueError(f"character {text[i]!r} at position {i} is not in the strategies vocabulary {CHARS!r}")
            ids.append(self.ids[text[i]])
            i += 1
        return ids

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids)
