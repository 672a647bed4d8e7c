"""`packcli show` in the terminal: rows as Rich text (or one token per table line with --tokens).

Segments alternate between two colours, each opened by a marker with its index, length
and, in a mixture, its source; learned tokens are bright, tokens with label -100 dim;
padding is one compact marker.
Without colour (a pipe, --color never) learned text is set between « and », so the
difference survives in plain text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from packcli.inspect.show import Decoder, Segment, View

# (learned, not learned, marker) per segment parity
SEGMENT_STYLES = (
    ("bold bright_cyan", "dim cyan", "bold black on cyan"),
    ("bold bright_yellow", "dim yellow", "bold black on yellow"),
)
PAD_STYLE = "dim magenta"
SPECIAL_STYLE = "underline"
NOTE_STYLE = "bold red"
LEARNED_OPEN, LEARNED_CLOSE = "«", "»"
WHITESPACE = {"\n": "↵\n", "\t": "→", "\r": "␍"}


def visible(piece: str, at_line_start: bool) -> tuple[str, bool]:
    """A token's text with newlines, tabs and a line's leading spaces made visible; and
    whether the text after it starts a line."""
    out = []
    for ch in piece:
        if ch in WHITESPACE:
            out.append(WHITESPACE[ch])
            at_line_start = ch == "\n"
            continue
        if ch == " " and at_line_start:
            out.append("·")
            continue
        if ch != " " and (ord(ch) < 32 or ord(ch) == 127):
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
        at_line_start = False
    return "".join(out), at_line_start


def cell_text(piece: str) -> str:
    """A token's text in one table cell: every space and newline made visible."""
    return visible(piece, True)[0].replace("\n", "").replace(" ", "·")


def console_for(color: str, file: Any = None) -> Console:
    """auto: colour only on a terminal; always: colour (for `less -R`); never: plain text."""
    if color == "always":
        return Console(file=file, force_terminal=True, color_system="256", soft_wrap=False)
    if color == "never":
        return Console(file=file, color_system=None, no_color=True, soft_wrap=False)
    return Console(file=file, soft_wrap=False)


def header_line(view: View) -> Text:
    h = view.header
    text = Text()
    if view.kind == "row":
        text.append(f"row {h['row']:,}", style="bold")
        text.append(f"  {h['shard']} row {h['shard_row']:,}", style="dim")
        parts = [
            f"{h['num_segments']} segment{'s' if h['num_segments'] != 1 else ''}",
            *([f"{h['pairs']} pair{'s' if h['pairs'] != 1 else ''}"] if "pairs" in h else []),
            f"{h['real_tokens']:,} real tokens",
            f"{h['learned_tokens']:,} learned",
            f"fill {h['fill']:.1%}",
            f"max_seqlen {h['max_seqlen']:,}",
        ]
        if "group" in h:
            parts.append(f"group {h['group']!r}" if isinstance(h["group"], str) else f"group {h['group']}")
    else:
        text.append(f"record {h['record']:,}", style="bold")
        text.append(f"  {h['location']}", style="dim")
        parts = [
            f"{h['tokens']:,} tokens",
            f"{h['num_segments']} segment{'s' if h['num_segments'] != 1 else ''}",
            f"{h['learned_tokens']:,} learned",
        ]
    text.append("  " + " · ".join(parts))
    return text


def segment_mark(segment: Segment) -> str:
    """A real segment's marker text: its index, real length and, in a mixture, its source;
    a preference pair's side (`pair 12 chosen`); a weight."""
    return " · ".join([f"seg {segment.index}", f"{segment.real_end - segment.start:,}", *segment_labels(segment)])


def segment_labels(segment: Segment) -> list[str]:
    """What a segment carries besides its tokens, as its marker and the token table name it."""
    labels = [] if segment.source is None else [str(segment.source)]
    if segment.pair is not None:
        labels.append(f"pair {segment.pair} {segment.side}")
    if segment.weight is not None:
        labels.append(f"weight {segment.weight:g}")
    return labels


def render_view(view: View, decoder: Decoder | None, plain: bool, learned_only: bool = False) -> Group:
    """The header, any notes, then the row's text segment by segment (`learned_only`: only
    the learned tokens, each run of others as one "…")."""
    parts: list[Any] = [header_line(view)]
    parts += [Text(f"  {note}", style=NOTE_STYLE) for note in view.notes]
    body = Text()
    pieces = decoder.pieces(view.input_ids) if decoder is not None else None
    for segment in view.segments:
        _segment_text(body, view, segment, decoder, pieces, plain, learned_only)
    if view.segments:
        parts.append(body)
    return Group(*parts)


def _segment_text(
    body: Text,
    view: View,
    segment: Segment,
    decoder: Decoder | None,
    pieces: list[str] | None,
    plain: bool,
    learned_only: bool = False,
) -> None:
    learned_style, dim_style, marker_style = SEGMENT_STYLES[segment.index % 2]
    if segment.index:
        body.append("\n")  # each segment from the start of a line
    if segment.padding:
        pad = int(view.input_ids[segment.start]) if segment.length else 0
        body.append(f"[pad ×{segment.length:,} (id {pad})]", style=PAD_STYLE)
        return
    body.append(f"[{segment_mark(segment)}]", style=marker_style)
    at_line_start = False
    open_run = False
    for i in range(segment.start, segment.real_end):
        token = int(view.input_ids[i])
        learned = bool(view.learned[i])
        if learned_only and not learned:
            if i == segment.start or view.learned[i - 1]:
                body.append("…", style=dim_style)
            continue
        if plain and not learned_only and learned != open_run:
            body.append(LEARNED_OPEN if learned else LEARNED_CLOSE)
            open_run = learned
        style = learned_style if learned else dim_style
        if decoder is None or pieces is None:
            body.append(f"{token} ", style=style)
            continue
        text, at_line_start = visible(pieces[i], at_line_start)
        if token in decoder.special:
            style += " " + SPECIAL_STYLE
        body.append(text, style=style)
    if plain and open_run:
        body.append(LEARNED_CLOSE)
    inner_pads = segment.end - segment.real_end
    if inner_pads:
        body.append(f"[pad ×{inner_pads}]", style=PAD_STYLE)


def render_tokens(view: View, decoder: Decoder | None) -> Group:
    """One token per line: position, id, text, label; a line per segment boundary, padding compact."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name, justify in (("pos", "right"), ("id", "right"), ("token", "left"), ("label", "right")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for segment in view.segments:
        learned_style, dim_style, marker_style = SEGMENT_STYLES[segment.index % 2]
        if segment.padding:
            pad = int(view.input_ids[segment.start]) if segment.length else 0
            table.add_row("", str(pad), f"pad ×{segment.length:,}", "-100", style=PAD_STYLE)
            continue
        length = segment.real_end - segment.start
        about = " · ".join([f"{length:,} tokens", *segment_labels(segment)])
        table.add_row(Text(f"seg {segment.index}", style=marker_style), "", Text(about, style=marker_style), "")
        for i in range(segment.start, segment.real_end):
            token = int(view.input_ids[i])
            label = int(view.labels[i])
            style = learned_style if label != -100 else dim_style
            piece = cell_text(decoder.piece(token)) if decoder is not None else ""
            table.add_row(str(int(view.position_ids[i])), str(token), piece, str(label), style=style)
        if segment.end > segment.real_end:
            table.add_row("", "", f"pad ×{segment.end - segment.real_end}", "-100", style=PAD_STYLE)
    parts: list[Any] = [header_line(view)]
    parts += [Text(f"  {note}", style=NOTE_STYLE) for note in view.notes]
    parts.append(table)
    return Group(*parts)


def print_views(
    console: Console,
    views: Iterable[View],
    decoder: Decoder | None,
    tokens: bool,
    extra: list[str] | None = None,
    learned_only: bool = False,
) -> None:
    plain = console.color_system is None or console.no_color  # NO_COLOR in the environment too
    first = True
    for view in views:
        if not first:
            console.print()
        first = False
        rendered = render_tokens(view, decoder) if tokens else render_view(view, decoder, plain, learned_only)
        console.print(rendered, soft_wrap=False)
    for line in extra or []:
        console.print(Text(line, style=NOTE_STYLE))
    if decoder is None:
        console.print(Text("(token ids shown: give --tokenizer to see text)", style="dim"))
