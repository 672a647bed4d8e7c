"""`--help` as plain text that fits the terminal, and usage errors as one line.

Every option stands in a panel (`rich_help_panel` on its definition), in one fixed panel
order for every command, so an option shared by `pack` and `stats` is found in the same
place in both. Names are never cut: a long name puts its help on the next line, and the
help wraps. Flags show no metavar; a value option shows its own (`<bin|concat>`, `N`,
`FIELD`, ...). No Rich here: square brackets in a help text (`pip install
'packcli[ray]'`) are text, and `packcli --help` imports nothing heavy.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from typing import Any

from typer import Abort, BadParameter

# click's exception base, from the click typer runs on (its own copy, or click itself)
ClickException: type[Exception] = next(c for c in BadParameter.__mro__ if c.__name__ == "ClickException")

# The panels, in the order every command shows them. Options without one go in "Options".
PANELS = ("Input", "Tokenization", "Packing", "Groups and limits", "Output", "Run", "Options")
MAX_WIDTH = 100  # wider terminals still get lines a person can read
NAME_COLUMN = 30  # a longer option column puts the help on the line below


def width() -> int:
    return max(40, min(shutil.get_terminal_size((80, 24)).columns, MAX_WIDTH))


def usage_line(command: Any, ctx: Any) -> str:
    pieces = ["[OPTIONS]"] if any(_is_option(p) for p in command.get_params(ctx)) else []
    pieces += [argument_display(p, usage=True) for p in command.get_params(ctx) if not _is_option(p)]
    if hasattr(command, "list_commands"):
        pieces.append("COMMAND [ARGS]...")
    return " ".join([f"Usage: {ctx.command_path}", *pieces])


def argument_display(param: Any, usage: bool = False) -> str:
    name = param.metavar or param.name.upper()
    if param.nargs != 1:
        name += "..."
    return f"[{name}]" if usage and not param.required else name


def option_display(param: Any) -> str:
    """`-o, --output DIR`, `--bos / --no-bos`, `--json`: the names, then the metavar of a value option."""
    names = sorted(param.opts, key=lambda name: (name.startswith("--"), name))  # short names first
    shown = ", ".join(names)
    if param.secondary_opts:
        shown += " / " + ", ".join(param.secondary_opts)
    if param.is_flag or param.count:
        return shown
    return f"{shown} {param.metavar or _value_name(param)}"


def _value_name(param: Any) -> str:
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    return "N" if annotation in (int, list[int]) else "TEXT"


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "option"


def _help_text(param: Any) -> str:
    text = " ".join((param.help or "").split())
    notes = []
    if param.required:
        notes.append("required")
    elif (
        getattr(param, "show_default", False)
        and param.default is not None
        and not (param.is_flag and not param.secondary_opts)
    ):
        default = param.default
        if param.is_flag and param.secondary_opts:
            default = param.opts[0] if default else param.secondary_opts[0]
        notes.append(f"default: {default}")
    return f"{text} ({'; '.join(notes)})".strip() if notes else text


def definition_list(rows: list[tuple[str, str]], columns: int) -> list[str]:
    """Two columns; a first column wider than NAME_COLUMN puts its second on the next line."""
    first = max((len(name) for name, _ in rows if len(name) <= NAME_COLUMN), default=0)  # longer ones: own line
    indent = 2 + first + 2
    text_width = max(columns - indent, 20)
    lines = []
    for name, text in rows:
        wrapped = textwrap.wrap(text, text_width, break_on_hyphens=False) or [""]
        if len(name) > first:
            lines.append(f"  {name}")
            lines += [" " * indent + line for line in wrapped if line]
        else:
            lines.append(f"  {name:<{first}}  {wrapped[0]}".rstrip())
            lines += [" " * indent + line for line in wrapped[1:]]
    return lines


def render_help(command: Any, ctx: Any) -> str:
    columns = width()
    out = [usage_line(command, ctx), ""]
    for paragraph in (command.help or "").strip().split("\n\n"):
        if paragraph.strip():
            out += textwrap.wrap(" ".join(paragraph.split()), columns - 2, initial_indent="  ", subsequent_indent="  ")
            out.append("")
    params = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False)]
    arguments = [(argument_display(p), _help_text(p)) for p in params if not _is_option(p)]
    if arguments:
        out += ["Arguments:", *definition_list(arguments, columns), ""]
    panels: dict[str, list[tuple[str, str]]] = {}
    options = [p for p in params if _is_option(p)]
    named = {getattr(p, "rich_help_panel", None) for p in options} - {None}
    last = next((panel for panel in reversed(PANELS) if panel in named), "Options")
    for param in options:
        panel = getattr(param, "rich_help_panel", None) or (last if param.name == "help" else "Options")
        panels.setdefault(panel, []).append((option_display(param), _help_text(param)))
    for panel in sorted(panels, key=lambda name: PANELS.index(name) if name in PANELS else len(PANELS)):
        out += [f"{panel}:", *definition_list(panels[panel], columns), ""]
    if hasattr(command, "list_commands"):
        rows = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                rows.append((name, " ".join((sub.help or "").strip().split("\n\n")[0].split())))
        out += ["Commands:", *definition_list(rows, columns), ""]
    return "\n".join(out).rstrip() + "\n"


def run_main(main: Any, args: Any, prog_name: Any, complete_var: Any, standalone_mode: bool, **extra: Any) -> Any:
    """A command line's main: a usage error is one line `error: ...` on stderr, exit 2."""
    if not standalone_mode:
        return main(args, prog_name, complete_var, standalone_mode=False, **extra)
    try:
        code = main(args, prog_name, complete_var, standalone_mode=False, **extra)
    except ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `packcli` alone: the help, on stderr, as click shows it
            sys.stderr.write(exc.ctx.get_help() + "\n")  # type: ignore[attr-defined]
        else:
            sys.stderr.write(f"error: {' '.join(exc.format_message().split())}\n")  # type: ignore[attr-defined]
        sys.exit(exc.exit_code)  # type: ignore[attr-defined]
    except Abort:
        sys.stderr.write("error: aborted\n")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
